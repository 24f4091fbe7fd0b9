"""bench/netsim_vs_ns3.py's lab column: which seconds of a recording it averages, the units it
converts to (ns-3 counts IP bytes), and the refusal of a recording too short for the window."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("netsim_vs_ns3")


def _record(case_dir: Path, seconds: int, dtn_bps: float, mean_delay: bool = True) -> None:
    case_dir.mkdir(parents=True)
    (case_dir / "case.json").write_text(json.dumps({"scenario": {"mss_bytes": 1448}}))
    columns = ["t_s", "dtn_rate_bps", "campus_rate_bps", "queuing_delay_s"]
    if mean_delay:
        columns.append("queuing_delay_mean_s")
    with (case_dir / "truth.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for t in range(1, seconds + 1):
            # the first five seconds differ, so a window that wrongly includes them shows
            early = t <= 5
            row = [t, 1e6 if early else dtn_bps, 1e6 if early else 60e6, 0.5 if early else 0.08]
            if mean_delay:
                row.append(0.5 if early else 0.09)
            writer.writerow(row)


def test_lab_run_averages_the_window_in_ip_bytes(bench: ModuleType, tmp_path: Path) -> None:
    _record(tmp_path / "a", 20, 30e6)
    result = bench.lab_run(tmp_path / "a", 20.0, 5.0)
    assert result["dtn"]["rate_bps"] == pytest.approx(30e6 * 1500 / 1448)
    assert result["campus"]["rate_bps"] == pytest.approx(60e6 * 1500 / 1448)
    # the meter's mean, not the 1 s snapshots, and the same FIFO delay for both classes
    assert result["dtn"]["queuing_delay_s"] == pytest.approx(0.09)
    assert result["campus"]["queuing_delay_s"] == pytest.approx(0.09)


def test_lab_run_falls_back_to_snapshots_of_older_recordings(
    bench: ModuleType, tmp_path: Path
) -> None:
    _record(tmp_path / "a", 20, 30e6, mean_delay=False)
    assert bench.lab_run(tmp_path / "a", 20.0, 5.0)["dtn"]["queuing_delay_s"] == pytest.approx(0.08)


def test_a_recording_shorter_than_the_window_is_refused(bench: ModuleType, tmp_path: Path) -> None:
    _record(tmp_path / "a", 20, 30e6)
    with pytest.raises(ValueError, match="at least --duration"):
        bench.lab_run(tmp_path / "a", 120.0, 20.0)
    with pytest.raises(ValueError, match="no recorded case"):
        bench.lab_runs(tmp_path / "empty", 20.0, 5.0)


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_the_table_judges_each_run_against_ns3_and_linux(bench: ModuleType, tmp_path: Path) -> None:
    for name, rate in (("r1", 30e6), ("r2", 40e6)):
        _record(tmp_path / name, 20, rate)
    lab = bench.lab_runs(tmp_path, 20.0, 5.0)
    assert [round(r["dtn"]["rate_bps"] / 1e6, 2) for r in lab] == [31.08, 41.44]
    ns3 = {
        "campus": {"rate_bps": 50e6, "queuing_delay_s": 0.085},
        "dtn": {"rate_bps": 46e6, "queuing_delay_s": 0.086},
    }
    netsim = {
        "campus": {"rate_bps": 70e6, "queuing_delay_s": 0.09},
        "dtn": {"rate_bps": 30e6, "queuing_delay_s": 0.09},
    }
    rows = bench.comparison_rows([("ns-3", [ns3]), ("Linux", lab), ("netsim", [netsim])])
    assert _cells(rows[0])[4:] == [
        "campus vs ns-3",
        "DTN vs ns-3",
        "campus vs Linux",
        "DTN vs Linux",
    ]
    assert len(_cells(rows[1])) == 8
    by_name = {_cells(row)[0]: _cells(row) for row in rows[2:]}
    assert by_name["ns-3"][1:6] == ["50.0 ± 0.0", "46.0 ± 0.0", "85.0 / 86.0", "—", "—"]
    linux_dtn = (31.077 + 41.436) / 2
    assert by_name["Linux"][2] == "36.3 ± 5.2"  # over the two runs
    assert by_name["Linux"][5] == f"{(linux_dtn - 46.0) / 46.0 * 100:+.1f} %"
    assert by_name["Linux"][6:] == ["—", "—"]
    assert by_name["netsim"][4:6] == ["+40.0 %", "-34.8 %"]
    assert by_name["netsim"][7] == f"{(30.0 - linux_dtn) / linux_dtn * 100:+.1f} %"
    # without a lab recording the table has no Linux columns
    alone = bench.comparison_rows([("ns-3", [ns3]), ("netsim", [netsim])])
    assert len(_cells(alone[0])) == 6


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lab", "x", "--variants", "prr,turbo"], "unknown twin variant 'turbo'"),
        (["--variants", "prr"], "--variants needs --lab"),
    ],
)
def test_a_bad_variant_list_exits_2_before_any_run(
    bench: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    monkeypatch.setattr("sys.argv", ["netsim_vs_ns3.py", "--ns3-json", "missing.json", *extra])
    with pytest.raises(SystemExit) as exit_info:
        bench.main()
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
