"""bench/bbr_bandwidth.py's lab side: which streams and seconds count, and the refusal of a
recording without BBR's state."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import load_bench

MSS = 1448.0
CASE = {
    "name": "bbr-case",
    "duration_s": 20.0,
    "scenario": {
        "dtn": {"congestion_control": "bbr"},
        "bottleneck": {"capacity_bps": 300e6},
        "mss_bytes": MSS,
    },
}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bbr_bandwidth")


def _case(root: Path, with_bbr: bool = True) -> Path:
    case = root / "bbr-case"
    case.mkdir(parents=True)
    with (case / "truth.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["t_s", "dtn_rate_bps", "dtn_retransmitted_segments", "campus_rate_bps",
             "campus_retransmitted_segments", "queuing_delay_s"]
        )  # fmt: skip
        for t in range(1, 21):
            writer.writerow([t, 200e6, 100, 50e6, 7, 0.09])
    columns = ["t_s", "class", "flow", "bytes_acked"]
    if with_bbr:
        columns += ["bbr_bandwidth_bps", "bbr_min_rtt_s"]
    with gzip.open(case / "flows.csv.gz", "wt", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for t in range(1, 21):
            # two data streams of 100 Mb/s estimating 110 and 120 Mb/s; the control
            # connection (3 bytes a second, a wild estimate) and a campus flow do not count
            for flow, acked, bw in (("a", 12.5e6 * t, 110e6), ("b", 12.5e6 * t, 120e6),
                                    ("ctl", 3.0 * t, 9e9)):  # fmt: skip
                writer.writerow([t, "dtn", flow, acked, *([bw, 0.15] if with_bbr else [])])
            writer.writerow([t, "campus", "c", 1e6 * t, *([5e9, 0.01] if with_bbr else [])])
    return case


def test_the_lab_estimate_sums_the_data_streams_after_the_first_window(
    bench: ModuleType, tmp_path: Path
) -> None:
    estimate = bench.lab_estimate(_case(tmp_path), CASE)
    assert estimate.bandwidth_estimate_bps == pytest.approx(230e6)
    assert estimate.delivered_bps == pytest.approx(200e6)
    assert estimate.ratio == pytest.approx(1.15)
    assert estimate.min_rtt_s == pytest.approx(0.15)
    # 10 seconds of 100 lost against 200 Mb/s of 1448-byte segments
    assert estimate.loss_per_segment == pytest.approx(1000 / (10 * 200e6 / (MSS * 8)))


def test_a_recording_without_bbr_state_is_refused(bench: ModuleType, tmp_path: Path) -> None:
    assert bench.lab_estimate(_case(tmp_path, with_bbr=False), CASE) is None
    dataset = tmp_path
    (dataset / "index.json").write_text(json.dumps({"cases": {"bbr-case": {"status": "ok"}}}))
    (dataset / "bbr-case" / "case.json").write_text(json.dumps(CASE))
    with pytest.raises(ValueError, match="no BBR state; record the dataset again"):
        bench.table(dataset, 1)
