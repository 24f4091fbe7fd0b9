"""The controller's per-sample path, fail-safe and model checks, with time injected."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from scidmz.control.actuators import ActuatorError, DryRunActuator, tbf_parameters
from scidmz.control.antiwindup import FilterState, Gains, Limits, follow_setpoint
from scidmz.control.dtn_caps import DtnControl
from scidmz.control.features import FEATURE_NAMES, Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import (
    META_FEATURES,
    META_TARGET,
    META_UNITS,
    TARGET_BINDING_RATE,
    InverseModel,
    ModelError,
    feature_units,
)
from scidmz.metrics import names
from scidmz.proto import telemetry_pb2

MBPS = 1e6
SETTINGS = ControllerSettings(
    link="p",
    strategy="pi",
    setpoint=Setpoint(target_rate_bps=600 * MBPS, capacity_bps=1000 * MBPS),
    gains=Gains(0.3, 1.5, 1.5),
    limits=Limits(0.0, 1000 * MBPS, 200 * MBPS),
    sample_time_s=1.0,
    stale_after_s=3.0,
    failsafe_rate_bps=400 * MBPS,
    collector_address="127.0.0.1:1",
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sample(sequence: int, dtn_mbps: float, stale: bool = False) -> telemetry_pb2.StateSample:
    return telemetry_pb2.StateSample(
        sequence=sequence, dtn_rate_bps=dtn_mbps * MBPS, campus_rate_bps=350 * MBPS,
        dtn_rtt_s=0.15, campus_rtt_s=0.06, dtn_queuing_delay_s=0.05,
        campus_queuing_delay_s=0.05, active_flows=108, valid=[True] * 7, stale=stale,
    )  # fmt: skip


def _run(coroutine):
    return asyncio.run(coroutine)


def test_pi_lowers_u_while_the_dtn_is_below_target():
    async def main():
        clock, actuator = Clock(), DryRunActuator()
        controller = Controller(SETTINGS, actuator, clock=clock)
        decisions = []
        for k in range(6):
            clock.now += 1.0
            decisions.append(await controller.on_sample(_sample(k, 500)))
        return decisions, actuator.applied

    decisions, applied = _run(main())
    assert applied[0] == applied[1] == 400 * MBPS  # trivial until y(t−T), y(t−2T) exist
    assert decisions[2].output is not None and decisions[2].error_bps == -100 * MBPS
    assert applied[2] < 400 * MBPS
    assert all(b <= a for a, b in itertools.pairwise(applied))  # integral grows
    assert all(abs(b - a) <= 200 * MBPS for a, b in itertools.pairwise(applied))


def test_stale_samples_are_skipped_and_the_watchdog_fails_safe():
    async def main():
        clock, actuator = Clock(), DryRunActuator()
        controller = Controller(SETTINGS, actuator, clock=clock)
        await controller.on_sample(_sample(1, 600))
        assert await controller.on_sample(_sample(2, 600, stale=True)) is None
        clock.now += 2.0
        assert not await controller.check_staleness()
        clock.now += 1.5
        assert await controller.check_staleness()
        assert controller.failsafe_active and actuator.applied[-1] == 400 * MBPS
        labels = {"link": "p"}
        failsafe = controller.registry.get_sample_value
        assert failsafe(names.FAILSAFE_ACTIVE, labels) == 1
        await controller.on_sample(_sample(3, 600))
        assert not controller.failsafe_active
        assert failsafe(names.FAILSAFE_ACTIVE, labels) == 0

    _run(main())


class FlakyActuator(DryRunActuator):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 2

    async def apply(self, rate_bps: float) -> float:
        if self.failures:
            self.failures -= 1
            raise ActuatorError("tc: device busy")
        return await super().apply(rate_bps)


def test_actuator_errors_are_counted_and_retried_not_fatal():
    async def main():
        clock, actuator = Clock(), FlakyActuator()
        controller = Controller(SETTINGS, actuator, clock=clock)
        for k in range(4):
            clock.now += 1.0
            await controller.on_sample(_sample(k, 600))
        return controller, actuator

    controller, actuator = _run(main())
    assert controller.metrics.actuator_errors.labels("p")._value.get() == 2
    assert len(actuator.applied) == 2
    state = controller.state()
    assert state.state is not None and state.state.dtn_rate_bps == 600 * MBPS
    assert state.tracking.model_dump() == {"mrae": 0.0, "window": 4}


def test_trivial_strategy_is_the_fixed_token_bucket():
    async def main():
        actuator = DryRunActuator()
        settings = ControllerSettings(**{**SETTINGS.__dict__, "strategy": "trivial"})
        controller = Controller(settings, actuator, clock=Clock())
        for k in range(5):
            await controller.on_sample(_sample(k, 200 + 100 * k))
        return actuator.applied

    assert _run(main()) == [400 * MBPS] * 5


def test_tbf_parameters_are_sized_from_the_rate():
    fast = tbf_parameters(1e9)
    assert fast["rate"] == "1000000000bit"
    assert fast["burst"] == 625_000  # 5 ms at the rate
    assert fast["limit"] == 1_250_000 + 625_000  # 10 ms queue + the bucket
    assert tbf_parameters(0)["rate"] == "8000bit"  # tbf cannot do zero
    assert tbf_parameters(1e6)["burst"] == 65_536  # the largest GSO packet, at any rate
    assert tbf_parameters(1e6, largest_packet_bytes=185_000)["burst"] == 185_000  # BIG TCP


def _onnx_model(path: Path, inputs: int, metadata: dict[str, str] | None = None) -> Path:
    from onnx import TensorProto, helper, save

    weights = helper.make_tensor(
        "w", TensorProto.FLOAT, [inputs, 1], np.full(inputs, 1e6, dtype=np.float32).tolist()
    )
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "w"], ["rate"])],
        "toy",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, inputs])],
        [helper.make_tensor_value_info("rate", TensorProto.FLOAT, [None, 1])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what opset 17 needs; onnx's newest IR is beyond onnxruntime's
    contract = {
        META_FEATURES: ",".join(FEATURE_NAMES),
        META_UNITS: ",".join(feature_units()),
        META_TARGET: TARGET_BINDING_RATE,
    }
    for key, value in (contract if metadata is None else metadata).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    save(model, str(path))
    return path


def test_model_interface_is_checked_at_start(tmp_path):
    good = InverseModel(_onnx_model(tmp_path / "good.onnx", 22))
    assert good.predict(np.ones((1, 22), dtype=np.float32)) == pytest.approx(22e6)
    with pytest.raises(ModelError, match=r"shape \[.*21\], not \[N, 22\]"):
        InverseModel(_onnx_model(tmp_path / "bad.onnx", 21))
    with pytest.raises(ModelError, match="does not exist"):
        InverseModel(tmp_path / "absent.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="cannot be loaded"):
        InverseModel(tmp_path / "junk.onnx")
    assert not math.isnan(good.predict(np.zeros((1, 22), dtype=np.float32)))


def test_a_model_whose_card_differs_from_the_runtime_features_is_refused(tmp_path):
    names = list(FEATURE_NAMES)
    names[2], names[3] = names[3], names[2]  # trained with the two RTTs swapped
    swapped = {
        META_FEATURES: ",".join(names),
        META_UNITS: ",".join(feature_units()),
        META_TARGET: TARGET_BINDING_RATE,
    }
    with pytest.raises(ModelError, match=r"features differs .* at input 2: model 'desired_campus"):
        InverseModel(_onnx_model(tmp_path / "swapped.onnx", 22, swapped))
    units = dict(swapped, **{META_FEATURES: ",".join(FEATURE_NAMES)})
    units[META_UNITS] = units[META_UNITS].replace("bit/s", "Mbit/s", 1)
    with pytest.raises(ModelError, match=r"units differs .* at input 0"):
        InverseModel(_onnx_model(tmp_path / "units.onnx", 22, units))
    raw_u = dict(units, **{META_UNITS: ",".join(feature_units()), META_TARGET: "u"})
    with pytest.raises(ModelError, match=r"target 'u'"):
        InverseModel(_onnx_model(tmp_path / "raw.onnx", 22, raw_u))
    with pytest.raises(ModelError, match=r"'scidmz\.features' is missing"):
        InverseModel(_onnx_model(tmp_path / "old.onnx", 22, {}))


DTN = DtnControl(Gains(0.5, 0.0, 0.0), Limits(0.0, 1000 * MBPS, 200 * MBPS), None)


def test_the_dtn_cap_follows_the_opposite_error_and_both_fail_safe():
    clock = Clock()
    campus, dtn = DryRunActuator(), DryRunActuator()
    settings = dataclasses.replace(SETTINGS, dtn=DTN)
    controller = Controller(settings, campus, clock=clock, dtn_actuator=dtn)

    async def main():
        decisions = []
        for k, dtn_mbps in enumerate([700, 700, 700, 650]):
            clock.now += 1.0
            decisions.append(await controller.on_sample(_sample(k + 1, dtn_mbps)))
        clock.now += 10.0
        await controller.check_staleness()
        return decisions

    decisions = _run(main())
    # first samples: the fixed split, DTN capped at R*
    assert decisions[0].dtn_cap_bps == 600 * MBPS and decisions[0].u_bps == 400 * MBPS
    # a DTN 100 Mb/s above target: its cap goes below R* (Kp 0.5), the campus rate up
    assert decisions[2].dtn_cap_bps == pytest.approx(550 * MBPS)
    assert decisions[2].u_bps > 400 * MBPS
    assert decisions[3].dtn_cap_bps == pytest.approx(575 * MBPS)
    # stale: the fail-safe on both (campus B − R* as configured, DTN cap R*)
    assert campus.applied[-1] == 400 * MBPS and dtn.applied[-1] == 600 * MBPS
    assert controller.failsafe_active
    assert controller.state().dtn_rate_limit_bps == 600 * MBPS


def test_a_held_dtn_cap_is_left_to_its_agent_until_a_policy_takes_it_back():
    """No policy on the host (its shaper held, ``api.holds``): the controller decides no
    cap, at start or per sample; once a policy is admitted there again, it caps at once."""
    clock = Clock()
    campus, dtn = DryRunActuator(), DryRunActuator()
    idle = dataclasses.replace(SETTINGS.setpoint, target_rate_bps=0.0)
    held = dataclasses.replace(
        SETTINGS, setpoint=idle, dtn=dataclasses.replace(DTN, failsafe_rate_bps=6e8, held=True)
    )
    controller = Controller(held, campus, clock=clock, dtn_actuator=dtn)

    async def main():
        for k in range(3):
            clock.now += 1.0
            decision = await controller.on_sample(_sample(k + 1, 300))
            assert decision is not None and decision.dtn_cap_bps is None
        assert dtn.applied == [] and campus.applied[-1] == 1000 * MBPS
        controller.reconfigure(dataclasses.replace(SETTINGS, dtn=DTN))
        clock.now += 1.0
        return await controller.on_sample(_sample(4, 300))

    decision = _run(main())
    assert decision is not None and decision.dtn_cap_bps is not None
    assert dtn.applied[-1] == decision.dtn_cap_bps


FEED_FORWARD = Gains(0, 0, 0)


class CappedLoop:
    """A pi controller with a DTN cap (gains ``dtn_gains``), fed DTN rates one per second."""

    def __init__(self, dtn_gains: Gains = FEED_FORWARD) -> None:
        self.clock = Clock()
        self.settings = dataclasses.replace(SETTINGS, dtn=DtnControl(dtn_gains, DTN.limits, None))
        self.controller = Controller(
            self.settings, DryRunActuator(), clock=self.clock, dtn_actuator=DryRunActuator()
        )

    def feed(self, rates_mbps, target_mbps: float = 600):
        c = self.controller
        c.settings = dataclasses.replace(
            c.settings,
            setpoint=dataclasses.replace(
                self.settings.setpoint, target_rate_bps=target_mbps * MBPS
            ),
        )

        async def main():
            out = []
            for rate in rates_mbps:
                self.clock.now += 1.0
                out.append(await c.on_sample(_sample(len(c.decisions) + 1, rate)))
            return out

        return _run(main())


def test_with_the_dtn_capped_the_campus_rate_stays_at_or_above_b_minus_the_cap():
    # a capped DTN that stays below target (a BBR DTN at its cap): lowering u cannot help,
    # so u must stop at B − cap instead of starving campus, and must not wind up there
    low = CappedLoop().feed([560] * 30)
    assert all(d.dtn_cap_bps == 600 * MBPS for d in low)
    assert min(d.u_bps for d in low) == pytest.approx(400 * MBPS)
    assert low[-1].output is not None and low[-1].output.saturated
    # back-calculation bounds the integral: Ki·|e|·T = (1 − exp(−Kw·T))·w at equilibrium
    bound = 1.5 * 40 * MBPS / -math.expm1(-1.5)
    assert low[-1].output.integral_bps > -1.05 * bound


def test_a_dtn_at_its_cap_pins_the_campus_rate_to_b_minus_the_cap():
    # at its cap the DTN takes exactly its share: a campus rate above B − cap would only
    # fill the bottleneck's queue, whatever the filter asks for (here Kp·e = +12 Mb/s)
    at_cap = CappedLoop().feed([640] * 10)
    assert [d.u_bps for d in at_cap] == [400 * MBPS] * 10
    # a DTN well below a cap that the DTN filter raised (Kp 0.5: 560 → cap 620): u is the
    # filter's, between the floor B − cap and B − R*
    loop = CappedLoop(Gains(0.5, 0, 0))
    below = loop.feed([560] * 3)  # the first two are the fixed split (eq. 1 needs y(t−2T))
    assert below[2].dtn_cap_bps == pytest.approx(620 * MBPS)
    assert below[2].u_bps == pytest.approx(388 * MBPS)  # 400 + 0.3·(−40), above 380
    assert not below[2].output.saturated


def test_a_new_target_moves_u_at_once_and_the_slew_bounds_only_the_filter():
    loop = CappedLoop()
    loop.feed([600] * 3)
    # R* 600 → 200 Mb/s: B − R* moves by 400 Mb/s, twice the 200 Mb/s slew, in one sample,
    # and the DTN cap follows R* down at once too
    (moved,) = loop.feed([200], target_mbps=200)
    assert moved.u_bps == pytest.approx(800 * MBPS)
    assert moved.dtn_cap_bps == pytest.approx(200 * MBPS)
    # the filter's own moves stay within ±maxStep of the last u
    clock = Clock()
    free = Controller(SETTINGS, DryRunActuator(), clock=clock)
    steps = []
    for rate in [600, 600, 100, 100]:
        clock.now += 1.0
        steps.append(_run(free.on_sample(_sample(len(free.decisions) + 1, rate))))
    # sample 3: Kp·e = −150 → 250; sample 4: ū = 400 − 150 − 750 (I) → 250 − 200 = 50
    assert steps[2].u_bps == pytest.approx(250 * MBPS)
    assert steps[3].u_bps == pytest.approx(50 * MBPS) and steps[3].output.saturated


def test_follow_setpoint_keeps_the_centre_inside_the_limits():
    limits = Limits(0.0, 1000.0, 100.0)
    state = FilterState(integral_bps=5.0, applied_bps=400.0)
    assert follow_setpoint(state, 300.0, limits) == FilterState(5.0, 700.0)
    assert follow_setpoint(state, -900.0, limits).applied_bps == 0.0
    assert follow_setpoint(state, 0.0, limits) is state
    assert follow_setpoint(FilterState(), 300.0, limits) == FilterState()


def test_limits_with_floor_and_ceiling():
    limits = Limits(100.0, 1000.0, 50.0)
    assert limits.with_floor(300.0) == Limits(300.0, 1000.0, 50.0)
    assert limits.with_floor(50.0) is limits and limits.with_floor(math.nan) is limits
    assert limits.with_floor(2000.0).min_bps == 1000.0
    assert limits.with_ceiling(500.0) == Limits(100.0, 500.0, 50.0)
    assert limits.with_ceiling(5000.0) is limits and limits.with_ceiling(math.inf) is limits
    assert limits.with_ceiling(10.0).max_bps == 100.0


def test_each_decision_records_the_injected_clocks_dt():
    clock = Clock()
    controller = Controller(SETTINGS, DryRunActuator(), clock=clock)

    async def main():
        out = []
        for k, gap in enumerate([1.0, 1.0, 0.25, 2.0]):
            clock.now += gap
            out.append(await controller.on_sample(_sample(k + 1, 550)))
        return out

    decisions = _run(main())
    # the first uses T; afterwards dt is exactly the clock's advance (the integral's dt)
    assert [d.dt_s for d in decisions] == [1.0, 1.0, 0.25, 2.0]
    assert decisions[3].output is not None
    assert decisions[3].output.integral_bps != decisions[2].output.integral_bps


def _far_failsafe(**changes):
    """PI (no model needed) with a fail-safe far from the fixed split (400 Mb/s)."""
    return dataclasses.replace(SETTINGS, failsafe_rate_bps=50 * MBPS, **changes)


async def _feed(controller, clock, sequences, dtn_mbps):
    """One fresh sample per second of the injected clock."""
    for k in sequences:
        clock.now += 1.0
        await controller.on_sample(_sample(k, dtn_mbps))


def test_leaving_the_failsafe_moves_u_by_at_most_max_step_per_sample():
    async def main():
        clock, actuator = Clock(), DryRunActuator()
        controller = Controller(_far_failsafe(), actuator, clock=clock)
        await _feed(controller, clock, range(4), 700)
        clock.now += 3.5
        assert await controller.check_staleness()
        failsafe_at = len(actuator.applied) - 1
        await _feed(controller, clock, range(4, 10), 700)
        return actuator.applied[failsafe_at:]

    resumed = _run(main())
    assert resumed[0] == 50 * MBPS
    steps = [abs(b - a) for a, b in itertools.pairwise(resumed)]
    assert max(steps) <= 200 * MBPS + 1e-6, resumed
    assert resumed[1] == 250 * MBPS  # towards the fixed split (400), one maxStep from 50


def test_a_restarted_controller_moves_on_from_the_rate_in_force():
    async def main():
        held = DryRunActuator()
        await held.apply(950 * MBPS)  # what the previous controller left in force
        clock = Clock()
        controller = Controller(_far_failsafe(), held, clock=clock)
        await controller.adopt_rates_in_force()
        assert controller.state().campus_rate_limit_bps == 950 * MBPS
        await _feed(controller, clock, range(5), 700)
        fresh = Controller(_far_failsafe(), DryRunActuator(), clock=Clock())
        await fresh.adopt_rates_in_force()  # nothing in force: the fixed split at once
        first = await fresh.on_sample(_sample(0, 700))
        return held.applied, first

    applied, first = _run(main())
    assert applied[1] == 750 * MBPS  # 950 − maxStep, not a jump to the split (400)
    assert all(abs(b - a) <= 200 * MBPS + 1e-6 for a, b in itertools.pairwise(applied))
    assert first is not None and first.u_bps == 400 * MBPS


def test_the_trivial_baseline_applies_its_split_at_once_even_after_the_failsafe():
    async def main():
        clock, actuator = Clock(), DryRunActuator()
        settings = _far_failsafe(strategy="trivial")
        controller = Controller(settings, actuator, clock=clock)
        clock.now += 5.0
        await controller.check_staleness()
        clock.now += 1.0
        await controller.on_sample(_sample(1, 700))
        return actuator.applied

    assert _run(main()) == [50 * MBPS, 400 * MBPS]  # a fixed bucket has no slew


class LateActuator(DryRunActuator):
    """Applies a rate and still reports failure, as a call that timed out against a frozen
    switch which ran it when it woke."""

    def __init__(self) -> None:
        super().__init__()
        self.late = False

    async def apply(self, rate_bps: float) -> float:
        applied = await super().apply(rate_bps)
        if self.late:
            self.late = False
            raise ActuatorError("sim: DEADLINE_EXCEEDED")
        return applied


def test_after_a_failed_call_the_next_decision_moves_from_the_rate_read_back():
    async def main():
        clock, actuator = Clock(), LateActuator()
        controller = Controller(_far_failsafe(), actuator, clock=clock)
        await _feed(controller, clock, range(3), 600)
        assert actuator.applied[-1] == 400 * MBPS
        actuator.late = True
        clock.now += 3.5
        await controller.check_staleness()  # the fail-safe (50) lands, reported as failed
        assert controller.applied_bps == 400 * MBPS and controller.failsafe_active
        clock.now += 1.0
        await controller.on_sample(_sample(9, 600))
        return actuator.applied

    applied = _run(main())
    assert applied[-2:] == [50 * MBPS, 250 * MBPS]  # from the 50 in force, not the 400 believed


def _queued_sample(sequence: int, dtn_mbps: float, queue_s: float | None):
    sample = _sample(sequence, dtn_mbps)
    if queue_s is None:  # not measured: the collector marks both delays invalid
        sample.valid[4] = sample.valid[5] = False
    else:
        sample.dtn_queuing_delay_s = sample.campus_queuing_delay_s = queue_s
    return sample


def _decisions(settings, samples):
    async def main():
        clock, actuator = Clock(), DryRunActuator()
        controller = Controller(settings, actuator, clock=clock)
        decisions = []
        for sample in samples:
            clock.now += 1.0
            decisions.append(await controller.on_sample(sample))
        return decisions

    return _run(main())


def test_u_never_falls_while_the_bottleneck_holds_no_queue():
    # A DTN below target with an empty bottleneck queue (slow start, a loss, an idle or
    # disk-bound DTN) lacks window, not capacity: cutting the campus would only idle the
    # link, and integrated it would starve the campus for as long as the DTN idles.
    idle = _decisions(SETTINGS, [_queued_sample(k, 0, 0.0) for k in range(30)])
    assert [d.u_bps for d in idle] == [400 * MBPS] * 30
    # the back-calculation keeps the integral bounded: once the queue is back it acts
    # within a sample instead of unwinding 30 s of an idle DTN's error
    assert idle[-1].output is not None and idle[-1].output.saturated
    bound = 1.5 * 600 * MBPS / -math.expm1(-1.5)  # Ki·|e|·T = (1 − e^(−Kw·T))·w
    assert idle[-1].output.integral_bps > -1.05 * bound
    back = _decisions(SETTINGS, [_queued_sample(k, 0, 0.0) for k in range(10)]
                 + [_queued_sample(10 + k, 500, 0.05) for k in range(3)])  # fmt: skip
    assert back[-1].u_bps < 400 * MBPS
    # a DTN above target may still raise u with no queue (the hold only stops cuts)
    above = _decisions(SETTINGS, [_queued_sample(k, 700, 0.0) for k in range(4)])
    assert above[-1].u_bps > 400 * MBPS


@pytest.mark.parametrize("case", ["queued", "unmeasured", "hold off"])
def test_u_falls_when_a_queue_stands_or_nothing_says_otherwise(case):
    settings = dataclasses.replace(SETTINGS, hold_unsaturated=case != "hold off")
    queue = {"queued": 0.05, "unmeasured": None, "hold off": 0.0}[case]
    decisions = _decisions(settings, [_queued_sample(k, 500, queue) for k in range(5)])
    assert decisions[-1].u_bps < decisions[2].u_bps < 400 * MBPS


class HeldActuator(DryRunActuator):
    """An actuator with a rate already in force (a tbf left by an earlier controller)."""

    def __init__(self, held_bps: float | None) -> None:
        super().__init__()
        self.held_bps = held_bps

    async def current(self) -> float | None:
        return self.held_bps


def test_a_start_with_no_rate_in_force_applies_the_fixed_split_at_once():
    async def main(held_bps):
        clock, actuator = Clock(), HeldActuator(held_bps)
        dtn = HeldActuator(None)
        settings = dataclasses.replace(
            SETTINGS, dtn=DtnControl(Gains(0.1, 0.1, 0.1), SETTINGS.limits, None)
        )
        controller = Controller(settings, actuator, clock=clock, dtn_actuator=dtn)
        await controller.adopt_rates_in_force()
        return actuator.applied, dtn.applied, controller.applied_bps

    campus, cap, in_force = _run(main(None))
    assert campus == [400 * MBPS] and cap == [600 * MBPS]  # B − R* and R*, before any sample
    assert in_force == 400 * MBPS
    campus, cap, in_force = _run(main(300 * MBPS))
    assert campus == [] and cap == [600 * MBPS]  # a rate in force is kept, not overwritten
    assert in_force == 300 * MBPS


class DeadActuator(DryRunActuator):
    async def apply(self, rate_bps: float) -> float:
        raise ActuatorError("sim: connection refused")


def test_a_stop_that_cannot_restore_the_failsafe_says_so_and_reports_failure():
    async def main():
        settings = dataclasses.replace(SETTINGS, restore_for_s=0.3)
        controller = Controller(settings, DeadActuator())
        stop = asyncio.Event()
        seen = []

        async def watch():
            while True:
                seen.append(
                    controller.registry.get_sample_value(
                        names.FAILSAFE_RESTORE_FAILED, {"link": "p"}
                    )
                )
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        stop.set()
        restored = await controller.run(stop)
        watcher.cancel()
        return restored, seen

    restored, seen = _run(main())
    assert restored is False
    assert 1 in seen  # exported while it retried


def test_a_stop_that_restores_the_failsafe_reports_success():
    async def main():
        actuator = DryRunActuator()
        controller = Controller(SETTINGS, actuator)
        stop = asyncio.Event()
        stop.set()
        return await controller.run(stop), actuator.applied

    restored, applied = _run(main())
    assert restored is True and applied[-1] == 400 * MBPS


def test_state_reports_each_dtn_hosts_figures_and_each_policys_target():
    """/state carries what the operator needs for each policy's status: its host's rate
    (several DTN hosts, each its own class) and the target the controller holds for it."""
    from dataclasses import replace

    from scidmz.control.features import PolicyTarget

    policies = (PolicyTarget("climate", "archive", "dtn-1", 300 * MBPS),
                PolicyTarget("genomics", "core", "dtn-2", 200 * MBPS))  # fmt: skip
    settings = replace(SETTINGS, policies=policies)

    async def main():
        controller = Controller(settings, DryRunActuator(), clock=Clock())
        sample = _sample(1, 490)
        sample.dtns.add(host="dtn-1", class_id=2, rate_bps=295 * MBPS, rtt_s=0.1,
                        queuing_delay_s=math.nan, active_flows=8)  # fmt: skip
        sample.dtns.add(host="dtn-2", class_id=3, rate_bps=195 * MBPS, rtt_s=0.05)
        await controller.on_sample(sample)
        return controller.state()

    state = _run(main())
    assert state.state is not None
    hosts = {h.host: h for h in state.state.dtn_hosts}
    assert hosts["dtn-1"].rate_bps == 295 * MBPS and hosts["dtn-1"].queuing_delay_s is None
    assert hosts["dtn-2"].rtt_s == 0.05
    assert [(p.name, p.target_rate_bps) for p in state.policies] == [
        ("archive", 300 * MBPS), ("core", 200 * MBPS)
    ]  # fmt: skip
    from scidmz.api.runtime import ControllerState

    ControllerState.model_validate_json(state.model_dump_json())  # what the operator reads


class _BrokenOnce(DryRunActuator):
    """An actuator whose second call (the first decision's; the first is the start's)
    fails outside the actuator errors (a bug, a channel closed under the call)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def apply(self, rate_bps: float) -> float:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("channel closed")
        return await super().apply(rate_bps)


def _count(controller: Controller, kind: str) -> float:
    value = controller.registry.get_sample_value(
        names.CONTROL_SAMPLES, {"link": SETTINGS.link, "kind": kind}
    )
    return value or 0.0


def test_a_decision_that_fails_costs_its_sample_not_the_loop() -> None:
    """The running loop (subscription, decisions, watchdog): a sample whose decision
    raises is counted as failed and logged; the next one is decided on."""
    settings = dataclasses.replace(SETTINGS, sample_time_s=0.2, stale_after_s=30.0)

    async def main() -> None:
        actuator = _BrokenOnce()
        controller = Controller(settings, actuator, None)
        stop = asyncio.Event()
        running = asyncio.create_task(controller.run(stop))
        deadline = asyncio.get_running_loop().time() + 10
        controller._post(_sample(0, 550))
        while _count(controller, "failed") < 1:
            assert asyncio.get_running_loop().time() < deadline, "the first sample not tried"
            await asyncio.sleep(0.02)
        controller._post(_sample(1, 550))
        while not controller.decisions:
            assert not running.done(), "the loop stopped"
            assert asyncio.get_running_loop().time() < deadline, "no decision after a failure"
            await asyncio.sleep(0.02)
        assert controller.decisions[-1].sequence == 1 and actuator.applied
        stop.set()
        assert await asyncio.wait_for(running, 10) is True

    asyncio.run(main())


def test_a_task_of_the_loop_that_ends_stops_the_process_with_the_fail_safe_in_force() -> None:
    async def main() -> None:
        actuator = DryRunActuator()
        controller = Controller(SETTINGS, actuator, None)

        async def broken() -> None:
            raise ValueError("a bug in the watchdog")

        controller._watch_forever = broken  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="watchdog task ended"):
            await asyncio.wait_for(controller.run(asyncio.Event()), 10)
        assert actuator.applied[-1] == SETTINGS.failsafe_rate_bps

    asyncio.run(main())


def test_with_nothing_admitted_the_campus_gets_the_link_though_no_dtn_rate_is_measured():
    # no policy: the switch holds no DTN class, so the collector marks the DTN's rate (and
    # RTT, queuing delay) not measured; that is no reason to skip the sample and fall to
    # the fail-safe: u is the whole link, and the controller decides every sample
    def unmeasured(sequence: int) -> telemetry_pb2.StateSample:
        sample = _sample(sequence, 0.0)
        del sample.valid[:]
        sample.valid.extend([False, True, False, True, False, True, True])
        return sample

    async def main(target_mbps: float):
        clock, actuator = Clock(), DryRunActuator()
        idle = dataclasses.replace(SETTINGS, setpoint=Setpoint(target_mbps * MBPS, 1000 * MBPS))
        controller = Controller(idle, actuator, clock=clock)
        decisions = []
        for k in range(1, 6):
            clock.now += 1.0
            decisions.append(await controller.on_sample(unmeasured(k)))
        return decisions, actuator.applied

    decisions, applied = _run(main(0.0))
    assert all(d is not None for d in decisions)
    assert applied == [1000 * MBPS] * 5
    # with a policy admitted the same samples are unusable: the DTN's rate is the error
    decisions, applied = _run(main(600.0))
    assert decisions == [None] * 5 and applied == []
