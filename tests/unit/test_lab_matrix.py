"""``scidmz lab record``'s matrix (everything is checked before a lab is built) and the
dataset it leaves."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from scidmz.lab.record import compact_case, load_matrix, mean_queuing_delay_s, truth_rows
from scidmz.lab.topology import LabError

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_matrix_covers_the_issue(tmp_path: Path) -> None:
    matrix, scenarios = load_matrix(REPO / "examples" / "lab" / "matrix.yaml")
    pairs = {(s.dtn.congestion_control, s.campus.long_flows) for s in scenarios.values()}
    assert pairs == {(cca, n) for cca in ("cubic", "bbr") for n in (10, 50, 100)}
    rates = {name: s.bottleneck.capacity_bps for name, s in scenarios.items()}
    assert {n for n, rate in rates.items() if rate == 1e9} == {
        f"{cca}-100-{kind}-1g" for cca in ("cubic", "bbr") for kind in ("fixed", "steps")
    }
    assert all(rate == 300e6 for n, rate in rates.items() if not n.endswith("-1g"))
    steps = next(c for c in matrix.cases if c.name == "cubic-10-steps").schedule()
    assert steps == [(0.0, 300e6), (20.0, 150e6), (40.0, 60e6)]


def test_the_buffer_matrix_records_each_kind_of_case_at_each_small_buffer() -> None:
    _, scenarios = load_matrix(REPO / "examples" / "lab" / "matrix-buffers.yaml")
    by_buffer: dict[float, set[tuple[str, float]]] = {}
    for s in scenarios.values():
        buffer_ms = round(s.bottleneck.buffer_size_bytes * 8 / s.bottleneck.capacity_bps * 1e3)
        kind = (s.dtn.congestion_control, s.bottleneck.capacity_bps)
        by_buffer.setdefault(buffer_ms, set()).add(kind)
    expected = {("cubic", 300e6), ("bbr", 300e6), ("cubic", 1e9)}
    assert by_buffer == {10: expected, 30: expected, 50: expected}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("{name: a, u: 1Mbps, u_steps: [[0s, 1Mbps]]}", "give u or u_steps"),
        ("{name: a}", "give u or u_steps"),
        ("{name: A_b, u: 1Mbps}", "folder name"),
        ("{name: a, u: fast}", "invalid rate"),
        ("{name: a, u_steps: [[10s, 1Mbps], [5s, 2Mbps]]}", "time order"),
        ("{name: a, u: 1Mbps, scenario: {dtn: {streams: -1}}}", "case a"),
        ("{name: a, u: 1Mbps, scenario: {dtn: {congestion_control: bbr2}}}", "bbr2"),
    ],
)
def test_a_bad_case_is_refused_naming_it(tmp_path: Path, case: str, message: str) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(f"cases:\n  - {case}\n")
    with pytest.raises(LabError, match=message):
        load_matrix(path)


def test_case_names_are_unique(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text("cases:\n  - {name: a, u: 1Mbps}\n  - {name: a, u: 2Mbps}\n")
    with pytest.raises(LabError, match="unique"):
        load_matrix(path)


def test_a_recorded_case_keeps_its_truth_and_compressed_flows_only(tmp_path) -> None:
    rows = "t_s,class,flow,cwnd_segments\n1,dtn,10.71.3.1:1,10\n"
    for name, text in (
        ("case.json", "{}"),
        ("truth.csv", "t_s\n1\n"),
        ("flows.csv", rows),
        ("iperf3-dtn.json", "{}"),
        ("iperf3-server-campus.log", "x"),
    ):
        (tmp_path / name).write_text(text)
    compact_case(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.json", "flows.csv.gz", "truth.csv"]
    assert gzip.decompress((tmp_path / "flows.csv.gz").read_bytes()).decode() == rows
    first = (tmp_path / "flows.csv.gz").read_bytes()
    (tmp_path / "flows.csv").write_text(rows)
    compact_case(tmp_path)
    assert (tmp_path / "flows.csv.gz").read_bytes() == first  # no timestamp inside


def test_truth_rows_read_as_floats_with_the_mean_queuing_delay_where_recorded(
    tmp_path: Path,
) -> None:
    (tmp_path / "truth.csv").write_text(
        "t_s,dtn_rate_bps,queuing_delay_s,queuing_delay_mean_s\n1.0,nan,0.09,0.05\n"
    )
    (row,) = truth_rows(tmp_path)
    assert row["t_s"] == 1.0 and math.isnan(row["dtn_rate_bps"])
    assert mean_queuing_delay_s(row) == 0.05  # the meter's mean, not the snapshot
    (tmp_path / "truth.csv").write_text("t_s,queuing_delay_s\n1.0,0.09\n")
    assert mean_queuing_delay_s(truth_rows(tmp_path)[0]) == 0.09  # older recordings
