"""The buffer search inside the controller (``spec.buffer``): the default buffer at start,
a search driven by the controller's samples, stale samples, the fail-safe, a failing
actuator, /state and the metrics; and ``spec.buffer`` rendered into the runtime config."""

from __future__ import annotations

import asyncio
import math

import pytest
from prometheus_client import CollectorRegistry

from scidmz.api.runtime import BufferConfig
from scidmz.contract.codec import to_message
from scidmz.contract.state import NetworkState, PathSignals
from scidmz.control.actuators import ActuatorError, DryRunActuator
from scidmz.control.antiwindup import Gains, Limits
from scidmz.control.buffer_actuators import DryRunBufferActuator, QueueCounters
from scidmz.control.buffer_loop import BufferLoop, tuner_settings
from scidmz.control.features import Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.metrics import names
from tests.loops import link_spec, render

MBPS = 1e6
CAPACITY = 1000 * MBPS
SETTINGS = ControllerSettings(
    link="p",
    strategy="pi",
    setpoint=Setpoint(target_rate_bps=600 * MBPS, capacity_bps=CAPACITY),
    gains=Gains(0.3, 1.5, 1.5),
    limits=Limits(0.0, CAPACITY, 200 * MBPS),
    sample_time_s=1.0,
    stale_after_s=3.0,
    failsafe_rate_bps=400 * MBPS,
    collector_address="127.0.0.1:1",
)
CONFIG = BufferConfig(
    actuator_type="dryRun", min_s=0.01, max_s=0.2, default_s=0.1, max_queue_delay_s=0.2,
    loss_scale=0.05, loss_weight=0.5, delay_weight=0.5, settle_s=2, measure_s=2,
    max_iterations=3, stop_ei=1e-3, utilisation_gate=0.98, change_lag=50,
    change_threshold=10, change_influence=0.1,
)  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sample(sequence: int, buffer_s: float, stale: bool = False, campus_mbps: float = 390):
    """A full link whose queue fills the buffer in force and whose loss falls with it."""
    signals = PathSignals(
        dtn_retransmission_ratio=0.03 * math.exp(-buffer_s / 0.015),
        campus_retransmission_ratio=0.03 * math.exp(-buffer_s / 0.015),
        bottleneck_loss_ratio=0.0,
        dtn_mean_queuing_delay_s=0.9 * buffer_s,
        campus_mean_queuing_delay_s=0.9 * buffer_s,
        long_flows=100.0,
    )
    state = NetworkState(
        600 * MBPS, campus_mbps * MBPS, 0.1 + 0.9 * buffer_s, 0.01 + 0.9 * buffer_s, 0.9 * buffer_s,
        0.9 * buffer_s, 108, 0.0, signals,
    )  # fmt: skip
    return to_message(state, sequence, 0.0, 1.0, stale, "p")


def _controller(buffer_actuator, config: BufferConfig = CONFIG):
    registry = CollectorRegistry()
    loop = BufferLoop(config, buffer_actuator, CAPACITY, 1.0, "p", registry)
    clock = Clock()
    return Controller(SETTINGS, DryRunActuator(), None, registry, clock, buffer=loop), clock


def test_the_controller_starts_at_the_default_buffer_then_searches_and_holds():
    async def main():
        actuator = DryRunBufferActuator()
        controller, clock = _controller(actuator)
        await controller.adopt_rates_in_force()
        assert actuator.applied == [int(0.1 * CAPACITY / 8)]  # the default, 100 ms
        for sequence in range(1, 80):
            clock.now += 1.0
            in_force = actuator.applied[-1] * 8 / CAPACITY
            await controller.on_sample(_sample(sequence, in_force))
        return controller, actuator

    controller, actuator = asyncio.run(main())
    buffer = controller.buffer
    assert buffer is not None and buffer.tuner.phase == "hold"
    assert len(set(actuator.applied)) >= 4  # expanded, searched, held
    state = controller.state().buffer
    assert state is not None and state.phase == "hold" and state.searches == 1
    assert state.buffer_s == pytest.approx(state.best_buffer_s)
    assert 0.01 <= state.buffer_s < 0.1  # less delay than the default at little loss
    value = controller.registry.get_sample_value
    assert value(names.BUFFER, {"link": "p"}) == pytest.approx(state.buffer_s)
    assert value(names.BUFFER_PHASE, {"link": "p", "phase": "hold"}) == 1
    assert value(names.BUFFER_TRIALS, {"link": "p", "feasible": "true"}) >= 3
    assert value(names.BUFFER_OBJECTIVE, {"link": "p"}) == pytest.approx(state.best_objective)


@pytest.mark.parametrize(("campus_mbps", "searched"), [(357.0, True), (300.0, False)])
def test_the_gate_opens_on_a_full_link_as_the_tap_reads_it(campus_mbps, searched):
    """The lab's taps read a full 1 Gb/s link as ~957 Mb/s (TCP payload and the headers of
    GRO aggregates; B counts frames): judged against B, the 98 % gate never opened there.
    It is judged against B's payload share (1448/1514): open at 957 Mb/s, shut at 900."""

    async def main():
        actuator = DryRunBufferActuator()
        controller, clock = _controller(actuator)
        await controller.adopt_rates_in_force()
        for sequence in range(1, 4):
            clock.now += 1.0
            await controller.on_sample(_sample(sequence, 0.1, campus_mbps=campus_mbps))
        return controller, actuator

    controller, actuator = asyncio.run(main())
    assert controller.buffer is not None
    assert (controller.buffer.tuner.phase != "idle") is searched
    assert (len(actuator.applied) > 1) is searched  # one BDP set after the default


def test_stale_samples_move_nothing_and_the_failsafe_sets_the_default_buffer():
    async def main():
        actuator = DryRunBufferActuator()
        controller, clock = _controller(actuator)
        await controller.adopt_rates_in_force()
        for sequence in (1, 2):  # busy, the DTN at its target: the search sets one BDP
            clock.now += 1.0
            await controller.on_sample(_sample(sequence, 0.1))
        moved = list(actuator.applied)
        for sequence in range(3, 7):
            clock.now += 1.0
            await controller.on_sample(_sample(sequence, 0.1, stale=True))
        assert actuator.applied == moved  # nothing moves on stale samples
        clock.now += 3.0
        assert await controller.check_staleness()
        return controller, actuator, moved

    controller, actuator, moved = asyncio.run(main())
    assert len(moved) == 2 and moved[1] != moved[0]
    assert actuator.applied[-1] == int(0.1 * CAPACITY / 8)  # back to the default
    assert controller.buffer is not None and controller.buffer.tuner.phase == "idle"
    assert controller.state().buffer.searches == 1  # the count survives the fail-safe


class FlakyBuffer(DryRunBufferActuator):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 2

    async def apply(self, buffer_bytes: float) -> float:
        if self.failures:
            self.failures -= 1
            raise ActuatorError("tc buffer on eth2: device busy")
        return await super().apply(buffer_bytes)


def test_a_failed_buffer_change_is_counted_and_retried_and_u_still_moves():
    async def main():
        actuator = FlakyBuffer()
        controller, clock = _controller(actuator)
        await controller.adopt_rates_in_force()  # fails once
        decisions = []
        for sequence in range(1, 4):
            clock.now += 1.0
            decisions.append(await controller.on_sample(_sample(sequence, 0.1)))
        return controller, actuator, decisions

    controller, actuator, decisions = asyncio.run(main())
    assert all(d is not None for d in decisions)  # the rate loop was never held up
    errors = controller.registry.get_sample_value(names.BUFFER_ERRORS, {"link": "p"})
    assert errors == 2
    assert actuator.applied[0] == int(0.1 * CAPACITY / 8)  # the default, once it took


class CountingQueue(DryRunBufferActuator):
    """A queue whose drop counter the loop reads: drops fall as the buffer grows."""

    name = "counting"

    def __init__(self, readable: bool = True) -> None:
        super().__init__()
        self.readable = readable
        self.dropped = 0.0
        self.passed = 0.0

    def tick(self) -> None:
        buffer_s = self.applied[-1] * 8 / CAPACITY if self.applied else 0.1
        self.dropped += 1e4 * 0.02 * math.exp(-buffer_s / 0.015)
        self.passed += 1e4

    async def queue_counters(self) -> QueueCounters | None:
        return QueueCounters(self.dropped, self.passed) if self.readable else None


def test_the_search_reads_the_queues_own_drops_through_its_actuator():
    async def main():
        queue = CountingQueue()
        config = CONFIG.model_copy(update={"actuator_type": "sim", "loss_signal": "actuator"})
        controller, clock = _controller(queue, config)
        await controller.adopt_rates_in_force()
        for sequence in range(1, 60):
            clock.now += 1.0
            queue.tick()
            await controller.on_sample(_sample(sequence, queue.applied[-1] * 8 / CAPACITY))
        return controller

    controller = asyncio.run(main())
    tuner = controller.buffer.tuner  # type: ignore[union-attr]
    first = tuner.trials[0]
    # the queue's drops over its arrivals, not the samples' retransmissions (0.03·e^(−b/15 ms))
    ratio = 0.02 * math.exp(-first.buffer_s / 0.015)
    assert first.loss == pytest.approx(ratio / (1 + ratio), rel=1e-6)
    assert first.border_loss == pytest.approx(first.loss)
    assert controller.state().buffer.loss_signal == "actuator"


def test_an_unmeasured_loss_signal_stops_the_search_and_says_why():
    async def main():
        queue = CountingQueue(readable=False)
        config = CONFIG.model_copy(update={"actuator_type": "tc", "loss_signal": "actuator"})
        controller, clock = _controller(queue, config)
        await controller.adopt_rates_in_force()
        for sequence in range(1, 12):
            clock.now += 1.0
            await controller.on_sample(_sample(sequence, 0.1))
        stopped = controller.state().buffer
        assert controller.registry.get_sample_value(names.BUFFER_STOPPED, {"link": "p"}) == 1
        held = list(queue.applied)
        queue.readable = True  # the counters come back: the search starts again
        for sequence in range(12, 16):
            clock.now += 1.0
            queue.tick()
            await controller.on_sample(_sample(sequence, 0.1))
        return controller, held, stopped

    controller, held, stopped = asyncio.run(main())
    assert stopped is not None and stopped.degraded and stopped.phase == "idle"
    assert "spec.buffer.lossSignal actuator" in (stopped.message or "")
    assert "cannot read the queue's drop counters" in (stopped.message or "")
    assert held[-1] == int(0.1 * CAPACITY / 8)  # back to the default once it stopped
    value = controller.registry.get_sample_value
    assert value(names.BUFFER_STOPPED, {"link": "p"}) == 0  # measured again: running
    again = controller.state().buffer
    assert again is not None and not again.degraded and again.message is None
    assert again.phase == "expand"


def test_a_search_without_a_feasible_buffer_holds_the_default_and_says_so():
    async def main():
        actuator = DryRunBufferActuator()
        controller, clock = _controller(actuator)
        await controller.adopt_rates_in_force()
        for sequence in range(1, 120):
            clock.now += 1.0
            in_force = actuator.applied[-1] * 8 / CAPACITY
            sample = _sample(sequence, in_force, campus_mbps=400)  # a full link, ...
            if not math.isclose(in_force, 0.1):  # ... the DTN at its 600 Mb/s at 100 ms only
                sample.dtn_rate_bps = 450 * MBPS
                sample.campus_rate_bps = 540 * MBPS
            await controller.on_sample(sample)
        return controller, actuator

    controller, actuator = asyncio.run(main())
    state = controller.state().buffer
    assert state is not None and state.phase == "hold" and not state.degraded
    assert actuator.applied[-1] == int(0.1 * CAPACITY / 8)
    assert "no buffer tried kept every DTN at 95% of its target" in (state.message or "")
    assert "holding the default 100 ms" in (state.message or "")


def test_spec_buffer_renders_in_si_units_and_trials_in_samples():
    link = link_spec()
    link["controller"] = {**link.get("controller", {}), "strategy": "pi"}
    link["actuator"] = {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}}
    link["buffer"] = {
        "actuator": {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth2"}},
        "settle": "2500ms",
        "measure": "5s",
    }
    config = render(link)
    b = config.buffer
    assert b is not None and b.actuator_type == "tc" and b.tc_interface == "eth2"
    assert (b.min_s, b.max_s, b.default_s) == (0.01, 0.2, 0.1)
    assert b.loss_signal == "actuator"  # the default where the actuator reads the queue
    settings = tuner_settings(b, config.bottleneck_capacity_bps, config.sample_time_s)
    assert (settings.settle_samples, settings.measure_samples) == (3, 5)  # ceil(2.5 s / 1 s)
    assert (settings.settle_window, settings.max_wait_samples) == (2, 30)
    assert settings.capacity_bps == config.bottleneck_capacity_bps
    link["buffer"] = {"lossSignal": "bottleneck", "settling": {"window": "3s", "maxWait": "1m"}}
    b = render(link).buffer
    assert b is not None and (b.loss_signal, b.settling_window_s, b.max_wait_s) == (
        "bottleneck", 3.0, 60.0,
    )  # fmt: skip
    link["buffer"] = {}  # a dry run cannot read the queue: the path's loss, P4BS's method 1
    assert render(link).buffer.loss_signal == "path"  # type: ignore[union-attr]


def test_the_links_status_shows_the_search_in_api_units():
    from scidmz.api.runtime import BufferReport, ControllerState
    from scidmz.k8s.live_state import live_status

    state = ControllerState(
        link="p", strategy="pi", failsafe_active=False,
        buffer=BufferReport(buffer_s=0.0285, phase="hold", best_buffer_s=0.0285,
                            best_objective=-0.10712, trials=5, searches=1),
    )  # fmt: skip
    assert live_status(state, 1.0)["buffer"] == {
        "inForce": "28.5ms", "phase": "hold", "bestBuffer": "28.5ms",
        "bestObjective": -0.1071, "searches": 1,
    }  # fmt: skip
    without = ControllerState(link="p", strategy="pi", failsafe_active=False)
    assert "buffer" not in live_status(without, 1.0)


def test_a_search_stopped_for_its_loss_signal_marks_the_link_degraded_saying_why():
    from scidmz.api.runtime import BufferReport, ControllerState
    from scidmz.k8s.links import buffer_stopped
    from scidmz.k8s.live_state import live_status

    why = "spec.buffer.lossSignal bottleneck: the collector reports no bottleneck loss"
    state = ControllerState(
        link="p", strategy="pi", failsafe_active=False,
        buffer=BufferReport(buffer_s=0.1, phase="idle", loss_signal="bottleneck", message=why,
                            degraded=True),
    )  # fmt: skip
    status = live_status(state, 1.0)
    assert status["buffer"]["lossSignal"] == "bottleneck"
    assert (status["buffer"]["degraded"], status["buffer"]["message"]) == (True, why)
    assert buffer_stopped(status) == why
    # a search holding the default for want of a feasible buffer runs: it says so, no more
    note = BufferReport(buffer_s=0.1, phase="hold", message="no buffer tried kept ...")
    held = live_status(state.model_copy(update={"buffer": note}), 1.0)
    assert "degraded" not in held["buffer"] and buffer_stopped(held) is None
    assert buffer_stopped({}) is None


@pytest.mark.parametrize(
    ("buffer", "names"),
    [
        ({"min": "2s"}, ("buffer.min", "between 1ms and 1s")),
        ({"max": "0s"}, ("buffer.max", "between 1ms and 1s")),
        ({"min": "150ms", "max": "50ms", "default": "100ms"}, ("buffer.min must not exceed",)),
        ({"default": "300ms"}, ("buffer.default must lie within",)),
        ({"actuator": {"type": "ovs"}}, ("buffer.actuator.type", "'tc', 'sim' or 'dryRun'")),
        ({"actuator": {"type": "tc"}}, ("buffer.actuator.tc (nodeName, interface) is required",)),
        (
            {"actuator": {"type": "tc", "tc": {"nodeName": "edge-2", "interface": "eth2"}}},
            ("buffer.actuator.tc needs actuator.type tc on the same node",),
        ),
        (
            {"actuator": {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}}},
            ("another interface than the campus shaper's",),
        ),
        ({"weights": {"loss": 0, "delay": 0}}, ("must not both be 0",)),
        ({"lossSignal": "actuator"}, ("buffer.lossSignal actuator needs a buffer actuator",)),
        ({"lossSignal": "drops"}, ("buffer.lossSignal", "'path', 'bottleneck' or 'actuator'")),
        ({"settle": "20s", "settling": {"maxWait": "10s"}}, ("buffer.settling.maxWait",)),
        ({"settling": {"window": "2m"}}, ("buffer.settling.window", "between 1s and 60s")),
        ({"settling": {"tolerance": 0}}, ("buffer.settling.tolerance",)),
        ({"stopNoise": -1}, ("buffer.stopNoise",)),
    ],
)
def test_bad_buffer_settings_are_refused_naming_the_field(buffer, names):
    from pydantic import ValidationError

    from scidmz.api.link import parse_link_spec

    link = link_spec()
    link["controller"] = {**link.get("controller", {}), "strategy": "pi"}
    link["actuator"] = {"type": "tc", "tc": {"nodeName": "edge-1", "interface": "eth1"}}
    link["buffer"] = buffer
    with pytest.raises(ValidationError) as refused:
        parse_link_spec(link)
    text = str(refused.value).replace("\n  ", ".").replace("\n", " ")
    for name in names:
        assert name in text, text


def test_buffer_sizing_is_refused_beside_the_mlc():
    from pydantic import ValidationError

    from scidmz.api.link import parse_link_spec

    link = link_spec()
    link["controller"] = {**link.get("controller", {}), "strategy": "mlc"}
    link["buffer"] = {}
    with pytest.raises(ValidationError, match=r"buffer needs controller\.strategy pi or trivial"):
        parse_link_spec(link)


def test_a_buffer_actuator_without_its_config_is_refused_not_ignored():
    from scidmz.control.service import ControllerProcess

    with pytest.raises(ValueError, match="needs the runtime config"):
        ControllerProcess(SETTINGS, DryRunActuator(), None, 0,
                          buffer_actuator=DryRunBufferActuator())  # fmt: skip
