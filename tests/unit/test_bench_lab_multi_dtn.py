"""bench/lab_multi_dtn.py's bookkeeping: the arms and cases as the administrator would set
them on the example link, an episode's rows from the kernel's truth, and the lab against the
twin."""

from __future__ import annotations

from types import ModuleType

import pytest

from scidmz.learn.multi_dtn_bench import DTNS, MultiDtnEpisode
from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("lab_multi_dtn")


def test_each_arm_and_case_is_the_example_link_as_an_administrator_sets_it(
    bench: ModuleType,
) -> None:
    static = bench.arm_loop("static", "capped").config("c:1")
    assert static.controller.strategy == "trivial"
    assert [c.host for c in static.actuator.dtns] == ["dtn-1", "dtn-2", "dtn-3"]
    assert static.target_rate_bps == 650e6
    mlc = bench.arm_loop("mlc", "capped").config("c:1")
    assert (mlc.controller.strategy, mlc.dtn_congestion_control) == ("mlc", "cubic")
    pi = bench.arm_loop("pi", "bbr-uncapped")
    assert [c.host for c in pi.config("c:1").actuator.dtns] == ["dtn-1", "dtn-2"]
    # the lab's scenario is the twin's, each DTN host at its own RTT and schedule
    scenario = bench.lab_scenario(bench.FULL)
    assert [(d.name, d.base_rtt_s, d.start_s, d.stop_s) for d in scenario.dtns] == [
        (d.name, d.rtt_s, d.start_s, d.stop_s) for d in DTNS
    ]
    quick = bench.lab_scenario(bench.QUICK)
    assert (quick.more_dtns[0].start_s, quick.more_dtns[0].stop_s) == (20.0, 40.0)


def test_an_episodes_rows_come_from_the_kernels_per_host_truth(bench: ModuleType) -> None:
    timing = bench.Timing(6, 1, (DTNS[0], DTNS[1].__class__("late", "cubic", 0.05, 200e6, 3, 5)))
    truth = [
        {"t_s": f"{t}", "host_dtn-1_rate_bps": str(rate), "host_late_rate_bps": str(late),
         "bottleneck_sent_rate_bps": "9.5e8", "queuing_delay_mean_s": "0.01"}
        for t, rate, late in ((1, 0, 0), (2, 280e6, 0), (3, 300e6, 0), (4, 300e6, 180e6),
                              (5, 270e6, 200e6), (6, 300e6, 0))
    ]  # fmt: skip
    hosts = {"dtn-1": {"collector_rate_bps": 2.9e8, "kernel_offered_rate_bps": 3e8,
                       "rate_error": 0.0333}}  # fmt: skip
    first, late = bench.episode_rows("pi", "capped", 1, timing, truth, hosts)
    # dtn-1 over seconds 2..6 (a 1 s warm-up), the late host over its own 4..5
    assert first.rate_mbps == pytest.approx((280 + 300 + 300 + 270 + 300) / 5)
    assert late.rate_mbps == pytest.approx(200.0) and late.mrae == pytest.approx(0.0)
    # the late host admitted at 3 s counts from the row of the interval 3-4 s, to 4-5 s
    sums = [(280) / 300, 300 / 300, (300 + 180) / 500, (270 + 200) / 500, 300 / 300]
    assert first.sum_ratio == pytest.approx(sum(sums) / len(sums))
    assert first.utilisation == pytest.approx(0.95) and first.campus_qd_ms == pytest.approx(10)
    assert first.rate_error == pytest.approx(0.0333) and late.rate_error != late.rate_error


def test_the_lab_is_judged_in_the_twins_direction(bench: ModuleType) -> None:
    def row(arm: str, dtn: str, mrae: float, total: float) -> MultiDtnEpisode:
        return MultiDtnEpisode(arm, "capped", 1, dtn, "cubic", 300.0, 290.0, mrae, total,
                               0.95, 10.0, 0.1)  # fmt: skip

    lab = [row("static", "dtn-1", 0.10, 0.95), row("pi", "dtn-1", 0.06, 0.99)]
    twin = [row("static", "dtn-1", 0.07, 0.95), row("pi", "dtn-1", 0.08, 0.99)]
    lines = "\n".join(bench.direction_lines(lab, twin))
    assert "| capped | pi | dtn-1 MRAE | -0.040 | +0.010 | **no** |" in lines
    assert "| capped | pi | |sum ratio − 1| | -0.040 | -0.040 | yes |" in lines
