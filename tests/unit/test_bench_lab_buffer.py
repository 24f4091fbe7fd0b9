"""bench/lab_buffer.py's bookkeeping: the lab's runs beside the twin's seeds, and whether
P4BS moves each figure the same way on both."""

from __future__ import annotations

from types import ModuleType

import pytest

from scidmz.learn.buffer_bench import BufferEpisode, judge_feasible
from tests.bench_scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    load_bench("lab_control")  # lab_buffer imports it as a sibling script
    return load_bench("lab_buffer")


def _episode(arm: str, seed: int, objective: float, qd_ms: float, fct_s: float = 135.0):
    return BufferEpisode(
        arm=arm, cca="cubic", load=100, seed=seed, objective=objective, loss=0.005,
        campus_qd_ms=qd_ms, dtn_mrae=0.02, fct_s=fct_s, buffer_ms=30.0,
    )  # fmt: skip


def test_p4bs_against_each_arm_is_judged_by_the_sign_on_both(bench: ModuleType) -> None:
    lab = [_episode("p4bs", s, -0.10, 20.0) for s in (1, 2)]
    lab += [_episode("100ms", s, -0.20, 80.0) for s in (1, 2)]
    lab += [_episode("bdp", s, -0.12, 15.0) for s in (1, 2)]
    twin = [_episode("p4bs", 1, -0.15, 27.0), _episode("100ms", 1, -0.22, 79.0)]
    twin += [_episode("bdp", 1, -0.12, 8.0)]
    assert bench.direction(lab, twin, "100ms") == (
        "f̄: lab higher, twin higher — same; campus QD: lab lower, twin lower — same"
    )
    # the twin's BDP beats P4BS on f̄ and its queue is shorter; the lab's is longer
    assert bench.direction(lab, twin, "bdp") == (
        "f̄: lab higher, twin lower — DIFFERENT; campus QD: lab higher, twin higher — same"
    )
    targets = bench.verdicts(judge_feasible(lab))
    assert targets[0] == "- P4BS's f̄ above the same run's 100 ms buffer: 2/2 runs — met."
    # bdp is feasible here and the best fixed arm in both runs: P4BS is 17 % above it
    assert targets[1].startswith(
        "- P4BS within 10% of the same run's best feasible fixed arm (ours, per run as on "
        "the twin's seeds): 2/2 runs — met (run 1: bdp -0.120, P4BS -0.100 (+17%); run 2:"
    )
    assert "20.0 ms (target ≤ 30) — met" in targets[2]


def test_the_report_shows_both_and_counts_unfinished_transfers(bench: ModuleType) -> None:
    lab = [_episode("p4bs", 1, -0.10, 20.0), _episode("p4bs", 2, -0.12, 24.0)]
    lab += [_episode("100ms", 1, -0.20, 80.0), _episode("tiny", 1, -0.30, 0.1, float("nan"))]
    twin = [_episode("p4bs", 1, -0.15, 27.0), _episode("100ms", 1, -0.22, 79.0)]
    twin += [_episode("tiny", 1, -0.23, 0.1, 237.5)]
    report = bench.render(lab, twin, "python bench/lab_buffer.py --runs 2")
    row = next(line for line in report.splitlines() if line.startswith("| p4bs |"))
    assert "-0.110 ± 0.014" in row and "22.0 ± 2.8" in row
    tiny = next(line for line in report.splitlines() if line.startswith("| tiny |"))
    assert "unfinished" in tiny and "237.5" in tiny
    assert "P4BS's f̄ above the same run's 100 ms buffer: 1/2 runs — MISSED" in report
    assert "DTN MRAE, P4BS over the 100 ms buffer: +0.00 points" in report


def test_a_p4bs_far_below_the_best_feasible_fixed_arm_misses(bench: ModuleType) -> None:
    lab = [_episode("p4bs", 1, -0.20, 40.0), _episode("100ms", 1, -0.25, 80.0)]
    lab += [_episode("bdp", 1, -0.15, 9.0), _episode("stanford", 1, -0.05, 1.0, 170.0)]
    targets = bench.verdicts(judge_feasible(lab))
    # stanford's f̄ is best, but it broke the DTN's FCT: bdp is the arm to be near
    assert "0/1 runs — MISSED (run 1: bdp -0.150, P4BS -0.200 (-33%))" in targets[1]
    assert "40.0 ms (target ≤ 30) — MISSED" in targets[2]


def test_the_signal_table_sets_method_2_beside_the_kernels_loss(bench: ModuleType) -> None:
    from dataclasses import replace

    lab = [
        replace(
            _episode("100ms", 1, -0.20, 80.0), loss=0.0015, tap_border_loss=0.0020, path_loss=0.005
        )
    ]
    lab += [
        replace(
            _episode("p4bs", 1, -0.10, 20.0), loss=0.0020, tap_border_loss=0.0014, path_loss=0.005
        )
    ]
    lines = bench.signals(lab)
    assert "| 100ms-1 | 0.150% | 0.200% | 0.500% |" in lines
    assert "| p4bs-1 | 0.200% | 0.140% | 0.500% |" in lines
    assert lines[-1].startswith(
        "Method 2 against the kernel over 2 runs: mean absolute error 0.055"
    )


def test_the_method_2_arm_runs_the_searching_example_reading_it(
    bench: ModuleType, tmp_path
) -> None:
    from scidmz.lab.loop import load_loop

    assert bench.search_policy(None, tmp_path) == bench.SEARCH_POLICY
    path = bench.search_policy("bottleneck", tmp_path)
    loop = load_loop(path, "pi")
    assert loop.link.buffer is not None and loop.link.buffer.loss_signal == "bottleneck"
    assert load_loop(bench.SEARCH_POLICY, "pi").link.buffer.loss_signal is None


def test_each_run_is_judged_against_its_own_best_feasible_fixed_arm(bench: ModuleType) -> None:
    """BDP keeps the DTN's target in run 2 only: there it is the arm to be near, in run 1
    the 100 ms buffer is (the runs' feasibility differs as the seeds' does on the twin)."""
    lab = [_episode("p4bs", s, -0.06, 20.0) for s in (1, 2)]
    lab += [_episode("100ms", s, -0.21, 80.0) for s in (1, 2)]
    lab += [_episode("bdp", 1, -0.02, 5.0, fct_s=140.0), _episode("bdp", 2, -0.02, 5.0)]
    targets = bench.verdicts(judge_feasible(lab))
    assert (
        "1/2 runs — MISSED (run 1: 100ms -0.210, P4BS -0.060 (+71%); run 2: bdp -0.020"
        in (targets[1])
    )
