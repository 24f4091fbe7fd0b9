"""bench/netsim_vs_lab.py's bookkeeping: which lab queuing delay it judges, and the lab
compared with a recording of itself."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("netsim_vs_lab")


def _row(
    t_s: float, snapshot_s: float, mean_s: float | None, dtn_bps: float = 100e6
) -> dict[str, float]:
    row = {
        "t_s": t_s,
        "dtn_rate_bps": dtn_bps,
        "campus_rate_bps": 150e6,
        "queuing_delay_s": snapshot_s,
        "dtn_retransmitted_segments": 10.0,
        "campus_retransmitted_segments": 20.0,
    }
    if mean_s is not None:
        row["queuing_delay_mean_s"] = mean_s
    return row


def _recording(root: Path, name: str, scenario: dict, rows: list[dict[str, float]]) -> Path:
    """A recording of one 30 s case, as `scidmz lab record` writes it."""
    case = root / name
    case.mkdir(parents=True)
    (root / "index.json").write_text(json.dumps({"cases": {name: {"status": "ok"}}}))
    (case / "case.json").write_text(
        json.dumps({"name": name, "duration_s": 30.0, "scenario": scenario})
    )
    with (case / "truth.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return root


def _dataset(root: Path, with_mean: bool, dtn_bps: float = 100e6, mean_s: float = 0.095) -> Path:
    scenario = {"bottleneck": {"capacity_bps": 300e6}, "dtn": {"congestion_control": "bbr"}}
    # a full queue (99 ms) with a probe-rtt dip caught by the snapshot at t = 12 s
    rows = [
        _row(t, 0.0 if t == 12 else 0.099, mean_s if with_mean else None, dtn_bps)
        for t in range(1, 31)
    ]
    return _recording(root, "case-a", scenario, rows)


def test_the_lab_is_judged_by_its_mean_queuing_delay_when_recorded(bench, tmp_path):
    lab = bench.windows_of(bench.lab_rows(_dataset(tmp_path, True) / "case-a"), 300e6, 30.0)
    first = lab.windows[0]  # 10-20 s, holding the snapshot in the dip
    assert first.queuing_delay_s == pytest.approx(0.095)
    assert first.snapshot_delay_s == pytest.approx(0.099 * 9 / 10)
    assert lab.dtn_losses == 200.0 and lab.campus_losses == 400.0
    # 20 s after the first window at 100 / 150 Mb/s of 1448-byte segments
    assert lab.dtn_segments == pytest.approx(20 * 100e6 / (1448 * 8))
    assert lab.campus_segments == pytest.approx(20 * 150e6 / (1448 * 8))
    dtn_rate = 200 / lab.dtn_segments
    campus_rate = 400 / lab.campus_segments
    assert bench.loss_rates(lab) == (
        f"DTN {dtn_rate:.3%}, campus {campus_rate:.3%} (DTN / campus {dtn_rate / campus_rate:.2f})"
    )
    # half the campus's losses over two thirds of its segments
    assert "(DTN / campus 0.75)" in bench.loss_rates(lab)


def test_an_older_dataset_falls_back_to_its_snapshots(bench, tmp_path):
    lab = bench.windows_of(bench.lab_rows(_dataset(tmp_path, False) / "case-a"), 300e6, 30.0)
    assert lab.windows[0].queuing_delay_s == pytest.approx(0.099 * 9 / 10)
    assert lab.windows[1].queuing_delay_s == pytest.approx(0.099)


def test_a_recording_against_itself_meets_every_target(bench, tmp_path):
    dataset = _dataset(tmp_path, True)
    lines, counts = bench.compare([dataset], bench.recorded([dataset]))
    tally = counts["all"]
    assert tally["windows"] == 2 and tally["cases"] == 1
    assert tally["dtn"] == tally["campus"] == tally["delay"] == 2
    assert tally["losses"] == 1
    # its own snapshots are 5.9 ms (the dip) and 4 ms (full) from its mean: both miss
    assert tally["delay_snapshot"] == 0
    assert sum("✗" in line for line in lines) == 2


def test_several_recordings_are_judged_as_their_mean(bench, tmp_path):
    # the DTN at 100, 130 and 115 Mb/s: their mean is within 10 % of a twin at 112, 100 is not
    low = _dataset(tmp_path / "low", True, dtn_bps=100e6, mean_s=0.090)
    high = _dataset(tmp_path / "high", True, dtn_bps=130e6, mean_s=0.094)
    older = _dataset(tmp_path / "older", False, dtn_bps=115e6)
    case = json.loads((low / "case-a" / "case.json").read_text())
    runs = [bench.lab_run(d / "case-a", case) for d in (low, high, older)]
    assert [r.snapshots_only for r in runs] == [False, False, True]
    lab = bench.mean_run(runs)
    assert lab.windows[1].dtn_bps == pytest.approx(115e6)
    # the queuing delay from the two recordings with a mean backlog; snapshots from all three
    assert lab.windows[1].queuing_delay_s == pytest.approx(0.092)
    assert lab.windows[1].snapshot_delay_s == pytest.approx(0.099)
    assert lab.dtn_losses == 200.0 and not lab.snapshots_only
    assert bench.mean_run(runs[2:]).windows[1].queuing_delay_s == pytest.approx(0.099)

    twin = bench.Run([bench.Window(112e6, 150e6, 0.87, 0.092)] * 2, 200.0, 400.0)
    _, alone = bench.compare([low], lambda name, case: twin)
    _, mean = bench.compare([low, high, older], lambda name, case: twin)
    assert alone["all"]["dtn"] == 0 and mean["all"]["dtn"] == 2
    # the lab's own scatter: one recording against the mean of the others
    _, scatter = bench.compare([low], bench.recorded([high, older]))
    assert scatter["all"]["dtn"] == 0 and scatter["all"]["campus"] == 2


def test_a_case_missing_from_one_recording_is_reported_not_compared(bench, tmp_path):
    low = _dataset(tmp_path / "low", True)
    broken = _dataset(tmp_path / "broken", True)
    (broken / "index.json").write_text(
        json.dumps({"cases": {"case-a": {"status": "failed", "error": "iperf3 exited 1"}}})
    )
    lines, counts = bench.compare([low, broken], bench.recorded([low]))
    assert "all" not in counts
    assert any("case-a: not recorded" in line and "iperf3 exited 1" in line for line in lines)
    # missing from the recordings compared with: reported the same way, nothing read
    lines, counts = bench.compare([low], bench.recorded([broken]), [broken])
    assert "all" not in counts
    assert any(f"{broken}: iperf3 exited 1" in line for line in lines)


def test_variants_write_their_own_report(bench: ModuleType) -> None:
    assert bench.results_path(bench.Variant()) == bench.RESULTS
    both = bench.results_path(bench.Variant(hystart=True, lab_starts=True))
    assert both.name == "netsim_vs_lab_hystart_lab_starts.md"
    every = bench.results_path(bench.Variant(hystart=True, lab_starts=True, prr=True))
    assert every.name == "netsim_vs_lab_hystart_prr_lab_starts.md"
    several = bench.results_path(bench.Variant(), recordings=3)
    assert several.name == "netsim_vs_lab_recordings.md"


def test_a_variant_changes_the_twin_it_runs(bench: ModuleType) -> None:
    case = {
        "name": "c",
        "duration_s": 3.0,
        "u_schedule": [[0.0, 50e6]],
        "scenario": {
            "bottleneck": {"capacity_bps": 100e6},
            "campus": {"long_flows": 2, "base_rtt_s": 0.01},
            "dtn": {"streams": 2, "base_rtt_s": 0.1},
        },
    }
    shipped = bench.sim_rows(case, 1)
    late = bench.sim_rows(case, 1, bench.Variant(lab_starts=True))
    # the DTN's iperf3 set-up (5 round trips of 100 ms) keeps it silent in the first 0.5 s
    assert shipped[0]["dtn_rate_bps"] > late[0]["dtn_rate_bps"]
    assert len(shipped) == len(late) == 3
    # PRR changes what senders do in loss recovery, so the twin's seconds differ
    recovering = bench.sim_rows(case, 1, bench.Variant(prr=True))
    assert [r["campus_rate_bps"] for r in recovering] != [r["campus_rate_bps"] for r in shipped]


def test_the_targets_are_counted_per_buffer_when_asked(bench, tmp_path):
    dataset = _dataset(tmp_path / "ten", True)
    case_path = dataset / "case-a" / "case.json"
    case = json.loads(case_path.read_text())
    case["scenario"]["bottleneck"]["buffer_s"] = 0.010
    case_path.write_text(json.dumps(case))
    assert bench.case_buffer_ms(case) == pytest.approx(10.0)
    # the scenario's default, and a buffer given in bytes (375 kB at 300 Mb/s = 10 ms)
    assert bench.case_buffer_ms({"scenario": {"bottleneck": {"capacity_bps": 3e8}}}) == 100.0
    in_bytes = {"scenario": {"bottleneck": {"capacity_bps": 3e8, "buffer_bytes": 375e3}}}
    assert bench.case_buffer_ms(in_bytes) == pytest.approx(10.0)
    _, plain = bench.compare([dataset], bench.recorded([dataset]))
    assert "10 ms" not in plain
    _, counts = bench.compare([dataset], bench.recorded([dataset]), by_buffer=True)
    assert counts["10 ms"]["windows"] == counts["all"]["windows"] == 2
    assert bench.group_order(["bbr", "50 ms", "all", "10 ms", "cubic"]) == [
        "all", "10 ms", "50 ms", "bbr", "cubic",
    ]  # fmt: skip
    assert [bench.group_label(g) for g in ("all", "10 ms", "bbr")] == [
        "met", "met (10 ms buffer)", "met (bbr DTN)",
    ]  # fmt: skip


def _two_host_dataset(root: Path, second_bps: float) -> Path:
    """A case with two DTN hosts: dtn-1 at 60 Mb/s, dtn-2 at ``second_bps``."""
    scenario = {
        "bottleneck": {"capacity_bps": 300e6},
        "dtn": {"name": "dtn-1", "congestion_control": "cubic"},
        "more_dtns": [{"name": "dtn-2", "congestion_control": "bbr"}],
    }
    rows = [
        _row(t, 0.05, 0.05, dtn_bps=60e6 + second_bps)
        | {
            "host_dtn-1_rate_bps": 60e6,
            "host_dtn-2_rate_bps": second_bps,
            "host_dtn-2_offered_rate_bps": 1e9,
        }
        for t in range(1, 31)
    ]
    return _recording(root, "two", scenario, rows)


def test_each_dtn_host_is_judged_apart_from_their_sum(bench, tmp_path):
    # dtn-2 at 40 against 50 Mb/s: the class's sum (100 against 110 Mb/s) is within 10 %,
    # the host is 20 % off
    low = _two_host_dataset(tmp_path / "low", 40e6)
    high = _two_host_dataset(tmp_path / "high", 50e6)
    case = json.loads((low / "two" / "case.json").read_text())
    assert bench.case_hosts(case) == ["dtn-1", "dtn-2"]
    assert bench.case_hosts({"scenario": {"dtn": {}}}) == []
    lab = bench.lab_run(low / "two", case)
    assert lab.windows[0].host_bps == {"dtn-1": 60e6, "dtn-2": 40e6}
    lines, counts = bench.compare([low], bench.recorded([high]))
    tally = counts["all"]
    assert tally["dtn"] == 2 and tally["host_windows"] == 4 and tally["host"] == 2
    assert any("| 40.0 / 50.0 ✗ |" in line for line in lines)
    # the mean of both recordings holds each host's mean
    both = bench.mean_run([lab, bench.lab_run(high / "two", case)])
    assert both.windows[1].host_bps["dtn-2"] == pytest.approx(45e6)
    # one-DTN cases count no hosts
    one = _dataset(tmp_path / "one", True)
    _, single = bench.compare([one], bench.recorded([one]))
    assert single["all"]["host_windows"] == 0


def test_the_twins_hosts_add_up_to_its_dtn_class(bench: ModuleType) -> None:
    case = {
        "name": "c",
        "duration_s": 4.0,
        "u_schedule": [[0.0, 30e6]],
        "scenario": {
            "bottleneck": {"capacity_bps": 100e6},
            "campus": {"long_flows": 2, "base_rtt_s": 0.01},
            "dtn": {"streams": 2, "base_rtt_s": 0.1},
            "more_dtns": [{"name": "dtn-2", "streams": 2, "base_rtt_s": 0.05, "start_s": 2}],
        },
    }
    rows = bench.sim_rows(case, 1)
    for row in rows:
        both = row["host_dtn-1_rate_bps"] + row["host_dtn-2_rate_bps"]
        assert both == pytest.approx(row["dtn_rate_bps"], rel=1e-9)
    # dtn-2 sends nothing before it starts, then its share of the link
    assert rows[0]["host_dtn-2_rate_bps"] == 0.0 < rows[0]["host_dtn-1_rate_bps"]
    assert rows[3]["host_dtn-2_rate_bps"] > 1e6
