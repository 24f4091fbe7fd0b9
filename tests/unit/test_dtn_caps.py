"""Several DTNs on one link: the campus loop on their sum, a cap loop per shaped host."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math

from scidmz.contract.state import DtnFigures
from scidmz.control.actuators import DryRunActuator
from scidmz.control.antiwindup import Gains, Limits
from scidmz.control.dtn_caps import DtnControl, all_capped, campus_limits, measured_rate
from scidmz.control.features import PolicyTarget, Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.proto import telemetry_pb2

MBPS = 1e6
CAP_LIMITS = Limits(0.0, 1000 * MBPS, 200 * MBPS, integral_limit_bps=1000 * MBPS)


def _cap(host: str, target_mbps: float, failsafe_mbps: float | None = None) -> DtnControl:
    return DtnControl(
        Gains(0.3, 1.0, 1.0),
        CAP_LIMITS,
        failsafe_mbps * MBPS if failsafe_mbps is not None else None,
        host=host,
        target_bps=target_mbps * MBPS,
    )


POLICIES = (
    PolicyTarget("climate", "archive", "dtn-1", 300 * MBPS),
    PolicyTarget("genomics", "core", "dtn-2", 200 * MBPS),
    PolicyTarget("physics", "run", "dtn-3", 150 * MBPS),
)
SETTINGS = ControllerSettings(
    link="border",
    strategy="pi",
    setpoint=Setpoint(target_rate_bps=650 * MBPS, capacity_bps=1000 * MBPS),
    gains=Gains(0.3, 1.5, 1.5),
    limits=Limits(0.0, 1000 * MBPS, 200 * MBPS),
    sample_time_s=1.0,
    stale_after_s=3.0,
    failsafe_rate_bps=350 * MBPS,
    collector_address="127.0.0.1:1",
    dtn=_cap("dtn-1", 300),
    more_dtns=(_cap("dtn-2", 200, failsafe_mbps=120),),
    policies=POLICIES,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sample(sequence: int, rates_mbps: dict[str, float]) -> telemetry_pb2.StateSample:
    sample = telemetry_pb2.StateSample(
        sequence=sequence, dtn_rate_bps=sum(rates_mbps.values()) * MBPS,
        campus_rate_bps=300 * MBPS, dtn_rtt_s=0.1, campus_rtt_s=0.06,
        dtn_queuing_delay_s=0.02, campus_queuing_delay_s=0.02, active_flows=120,
        valid=[True] * 7,
    )  # fmt: skip
    for k, (host, rate) in enumerate(rates_mbps.items()):
        sample.dtns.add(host=host, class_id=2 + k, rate_bps=rate * MBPS)
    return sample


def _controller(settings: ControllerSettings = SETTINGS):
    clock = Clock()
    campus, one, two = DryRunActuator(), DryRunActuator(), DryRunActuator()
    controller = Controller(
        settings, campus, clock=clock, dtn_actuator=one, more_dtn_actuators={"dtn-2": two}
    )
    return controller, clock, campus, one, two


async def _feed(controller: Controller, clock: Clock, rates: dict[str, float], n: int) -> None:
    for k in range(n):
        clock.now += 1.0
        await controller.on_sample(_sample(k, rates))


def test_each_cap_follows_its_own_hosts_rate_and_target() -> None:
    """dtn-1 runs above its 300 Mb/s, dtn-2 below its 200 (within reach of its cap): the
    first cap falls, the second rises, each around its own target (not the sum's)."""

    async def main():
        controller, clock, _, one, two = _controller()
        await _feed(controller, clock, {"dtn-1": 360, "dtn-2": 185, "dtn-3": 140}, 8)
        return one.applied, two.applied

    one, two = asyncio.run(main())
    assert one[0] == 300 * MBPS and two[0] == 200 * MBPS  # the first caps: the targets
    assert one[-1] < 300 * MBPS < 360 * MBPS
    assert two[-1] > 200 * MBPS
    assert all(b <= a for a, b in itertools.pairwise(one[2:]))


def test_a_host_far_under_its_cap_and_short_of_its_target_keeps_its_cap() -> None:
    """A loss, ProbeRTT or slow start holds dtn-2 at 120 Mb/s under a 200 Mb/s cap: the cap
    is not what holds it back, so its loop does not wind up on the gap; back within 15 % of
    its cap, it is stepped again."""

    async def main():
        controller, clock, *_, two = _controller()
        await _feed(controller, clock, {"dtn-1": 300, "dtn-2": 120}, 5)
        far = list(two.applied)
        await _feed(controller, clock, {"dtn-1": 300, "dtn-2": 190}, 3)
        return far, two.applied[len(far) :]

    far, near = asyncio.run(main())
    assert far == [200 * MBPS] * 5
    assert all(b > a for a, b in itertools.pairwise([200 * MBPS, *near]))


def test_a_host_not_measured_now_keeps_its_cap() -> None:
    async def main():
        controller, clock, *_, two = _controller()
        await _feed(controller, clock, {"dtn-1": 300, "dtn-2": 150}, 4)
        held = two.applied[-1]
        await _feed(controller, clock, {"dtn-1": 300}, 3)  # dtn-2's class not read
        return held, two.applied[-3:]

    held, after = asyncio.run(main())
    assert after == [held, held, held]


def test_the_campus_floor_follows_the_caps_only_when_every_dtn_is_capped() -> None:
    limits = Limits(0.0, 1000 * MBPS, 200 * MBPS)
    caps = [(300 * MBPS, 250 * MBPS, 300 * MBPS), (200 * MBPS, 199 * MBPS, 200 * MBPS)]
    both = campus_limits(limits, 1000 * MBPS, caps, every_dtn_capped=True)
    assert both.min_bps == 500 * MBPS
    assert both.max_bps == 1000 * MBPS  # dtn-1 is under its cap: room it may still take
    # a cap counts frames, the collector TCP's payload: a DTN held reads ~95.6 % of its cap
    at_caps = [(300 * MBPS, 287 * MBPS, 300 * MBPS), (200 * MBPS, 191 * MBPS, 200 * MBPS)]
    assert campus_limits(limits, 1000 * MBPS, at_caps, True).max_bps == 500 * MBPS
    assert campus_limits(limits, 1000 * MBPS, caps, every_dtn_capped=False) == limits
    controls = [_cap("dtn-1", 300), _cap("dtn-2", 200)]
    assert all_capped(controls, ["dtn-1", "dtn-2"])
    assert not all_capped(controls, ["dtn-1", "dtn-2", "dtn-3"])
    assert all_capped([DtnControl(Gains(0.1, 0, 0), limits, None)], ["a", "b"])  # the one DTN
    held = dataclasses.replace(controls[1], held=True)
    assert not all_capped([controls[0], held], ["dtn-1", "dtn-2"])


def test_measured_rate_reads_the_hosts_class_and_the_aggregate_only_for_the_one_dtn() -> None:
    figures = (DtnFigures("dtn-1", 2, rate_bps=10.0), DtnFigures("dtn-2", 3, rate_bps=20.0))
    assert measured_rate("dtn-2", figures, 30.0, only_cap=False) == 20.0
    assert math.isnan(measured_rate("dtn-3", figures, 30.0, only_cap=False))
    assert math.isnan(measured_rate("dtn-3", figures, 30.0, only_cap=True))
    assert measured_rate("dtn-1", (), 30.0, only_cap=True) == 30.0
    assert math.isnan(measured_rate("dtn-1", (), 30.0, only_cap=False))


def test_the_failsafe_applies_each_caps_own_failsafe() -> None:
    async def main():
        controller, clock, campus, one, two = _controller()
        await _feed(controller, clock, {"dtn-1": 300, "dtn-2": 200}, 3)
        clock.now += 10.0
        assert await controller.check_staleness()
        return campus.applied[-1], one.applied[-1], two.applied[-1]

    campus, one, two = asyncio.run(main())
    assert (campus, one, two) == (350 * MBPS, 300 * MBPS, 120 * MBPS)


def test_a_cap_added_live_starts_at_its_target_and_a_cap_removed_is_handed_back() -> None:
    async def main():
        settings = dataclasses.replace(SETTINGS, more_dtns=())
        clock, campus, one = Clock(), DryRunActuator(), DryRunActuator()
        controller = Controller(settings, campus, clock=clock, dtn_actuator=one)
        await _feed(controller, clock, {"dtn-1": 280, "dtn-2": 200}, 4)
        two = DryRunActuator()
        assert controller.reconfigure(SETTINGS, {"dtn-2": two}) == []
        filter_before = controller.caps[0].filter
        await _feed(controller, clock, {"dtn-1": 280, "dtn-2": 200}, 1)
        first_cap = two.applied[0]
        dropped = controller.reconfigure(settings)
        return first_cap, filter_before, dropped, two, controller

    first_cap, filter_before, dropped, two, controller = asyncio.run(main())
    assert first_cap == 200 * MBPS  # its target, on the next sample
    assert filter_before.applied_bps is not None  # dtn-1's filter carried over
    assert dropped == [two] and [c.control.host for c in controller.caps] == ["dtn-1"]


def test_state_says_which_policies_are_capped_and_their_caps() -> None:
    async def main():
        controller, clock, *_ = _controller()
        await _feed(controller, clock, {"dtn-1": 300, "dtn-2": 200, "dtn-3": 150}, 3)
        return controller.state()

    state = asyncio.run(main())
    by_host = {p.dtn_host: p for p in state.policies}
    assert by_host["dtn-1"].capped and by_host["dtn-1"].dtn_rate_limit_bps == 300 * MBPS
    assert by_host["dtn-2"].capped and by_host["dtn-2"].dtn_rate_limit_bps is not None
    assert not by_host["dtn-3"].capped and by_host["dtn-3"].dtn_rate_limit_bps is None


def test_a_missing_actuator_for_a_cap_is_refused() -> None:
    try:
        Controller(SETTINGS, DryRunActuator(), dtn_actuator=DryRunActuator())
    except ValueError as error:
        assert "dtn-2" in str(error)
    else:
        raise AssertionError("a cap without an actuator was taken")
