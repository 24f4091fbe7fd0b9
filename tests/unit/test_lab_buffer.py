"""The lab's buffer bench, without a lab: a link's tc buffer pointed at BR1's bfifo, and a
run's samples read as the twin's episode row."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from scidmz.api.buffer import BufferActuatorSpec, BufferSim, BufferSpec
from scidmz.control.buffer_search import TunerSettings
from scidmz.lab import topology
from scidmz.lab.loop import lab_config, load_loop
from scidmz.lab.runner import Lab
from scidmz.lab.topology import LabError
from scidmz.learn.buffer_lab import lab_episode, number
from scidmz.netsim.scenario import Scenario

EXAMPLES = Path(__file__).parents[2] / "examples" / "lab"
LAB = Lab(
    state_dir=Path("/nonexistent"),
    scenario=Scenario.model_validate({"bottleneck": {"capacity_bps": "1Gbps"}}),
    offloads=True,
)
ADDRESSES = ("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")


def test_a_tc_buffer_is_pointed_at_br1s_port_whatever_interface_the_link_names() -> None:
    config = lab_config(load_loop(EXAMPLES / "cubic-1G-buffer.yaml"), LAB, *ADDRESSES)
    assert config.buffer is not None
    assert config.buffer.tc_interface == topology.BOTTLENECK[1]
    assert config.actuator.tc_interface == topology.CAMPUS_SHAPER[1]
    assert config.controller.strategy == "pi"


def test_a_sim_buffer_does_not_fit_the_lab() -> None:
    loop = load_loop(EXAMPLES / "cubic-1G-buffer.yaml")
    sim = BufferSpec(actuator=BufferActuatorSpec(type="sim", sim=BufferSim()))
    with pytest.raises(LabError, match=r"spec\.buffer\.actuator: the lab has no simulator"):
        lab_config(loop.with_link(buffer=sim), LAB, *ADDRESSES)


def _row(t_s: float, **cells: object) -> dict[str, object]:
    row: dict[str, object] = {
        "t_s": f"{t_s}",
        "dtn_rate_bps": "600e6", "campus_rate_bps": "380e6",
        "dtn_rtt_s": "0.110", "campus_rtt_s": "0.020",
        "dtn_queuing_delay_s": "0.010", "campus_queuing_delay_s": "0.010",
        "active_flows": "108",
        "dtn_retransmission_ratio": "0.002", "campus_retransmission_ratio": "0.01",
        "bottleneck_loss_ratio": "", "dtn_mean_queuing_delay_s": "0.010",
        "campus_mean_queuing_delay_s": "0.010", "long_flows": "108", "buffer_s": "0.030",
    }  # fmt: skip
    return row | {key: str(value) for key, value in cells.items()}


SUMMARY = {"fct_s": 130.0, "target_rate_bps": 600e6, "mrae_delivered": 0.02}


def _truth(t_s: float, loss: float = 0.001, delay_s: float = 0.020) -> dict[str, object]:
    return {"t_s": f"{t_s}", "bottleneck_loss_ratio": f"{loss}",
            "queuing_delay_mean_s": f"{delay_s}", "dtn_rate_bps": "600e6"}  # fmt: skip


def test_a_lab_run_is_judged_on_the_kernels_truth_beside_the_taps_view() -> None:
    rows = [_row(t, buffer_phase="search" if t < 60 else "hold") for t in range(1, 141)]
    truth = [_truth(t) for t in range(1, 141)]
    episode = lab_episode(
        "p4bs", 2, rows, SUMMARY, warmup_s=20, duration_s=170, fixed_buffer_s=None, truth=truth
    )
    # judged: BR1's own loss and its time-mean backlog, from the kernel
    assert episode.loss == pytest.approx(0.001)
    assert episode.objective == pytest.approx(-(0.5 * 0.001 / 0.05 + 0.5 * 0.020 / 0.200))
    assert episode.mean_qd_ms == pytest.approx(20.0)
    # the tap's view: method 1, weighed by the classes' rates, and the collector's delay
    loss = (600 * 0.002 + 380 * 0.01) / 980
    assert episode.path_loss == pytest.approx(loss)
    assert episode.search_objective == pytest.approx(
        TunerSettings(capacity_bps=1e9).objective(loss, 0.010)
    )
    assert episode.campus_qd_ms == pytest.approx(10.0)
    assert episode.buffer_ms == pytest.approx(30.0)
    assert episode.trial_share == pytest.approx(40 / 111)  # t = 20..59 of 20..130
    assert episode.min_window_ratio == pytest.approx(1.0)
    assert (episode.arm, episode.seed, episode.dtn_mrae, episode.fct_s) == ("p4bs", 2, 0.02, 130)
    unjudged = lab_episode("p4bs", 2, rows, SUMMARY, 20, 170, None)
    assert math.isnan(unjudged.objective)  # no truth, no verdict


def test_only_the_samples_between_the_warm_up_and_the_transfers_end_count() -> None:
    early = [_row(t, campus_mean_queuing_delay_s=0.5, buffer_s=0.2) for t in range(1, 20)]
    during = [_row(t, buffer_s=0.010 if t % 2 else 0.050) for t in range(20, 131)]
    after = [_row(t, campus_mean_queuing_delay_s=0.5, buffer_s=0.2) for t in range(131, 170)]
    episode = lab_episode(
        "p4bs", 1, early + during + after, SUMMARY, warmup_s=20, duration_s=170,
        fixed_buffer_s=None,
    )  # fmt: skip
    assert episode.campus_qd_ms == pytest.approx(10.0)
    assert 10.0 < episode.buffer_ms < 50.0
    # an unfinished transfer counts every sample to the end of the run
    unfinished = SUMMARY | {"fct_s": math.nan}
    cut = lab_episode(
        "100ms", 1, early + during + after, unfinished, warmup_s=20, duration_s=170,
        fixed_buffer_s=0.1,
    )  # fmt: skip
    assert cut.campus_qd_ms > 100.0
    assert math.isnan(cut.fct_s)
    assert cut.buffer_ms == pytest.approx(100.0)  # a fixed arm's buffer, not the samples'


def test_missing_cells_are_not_measured_not_zero() -> None:
    assert math.isnan(number({"a": ""}, "a"))
    assert math.isnan(number({"a": None}, "a"))
    assert math.isnan(number({}, "a"))
    assert math.isnan(number({"a": "n/a"}, "a"))
    rows = [_row(t, campus_mean_queuing_delay_s="") for t in range(20, 40)]
    rows += [_row(t, campus_mean_queuing_delay_s=0.004) for t in range(40, 60)]
    episode = lab_episode(
        "bdp", 1, rows, SUMMARY, warmup_s=20, duration_s=170, fixed_buffer_s=0.017
    )
    assert episode.campus_qd_ms == pytest.approx(4.0)
