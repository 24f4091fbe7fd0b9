"""No sample, however absurd, wedges the controller: implausible samples are skipped, the
model's output and the integral are bounded, and a controller pinned at a limit says so."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from scidmz.contract.state import StateVector
from scidmz.control.actuators import DryRunActuator
from scidmz.control.antiwindup import FilterOutput, FilterState, Gains, Limits, pinned_by_integral
from scidmz.control.antiwindup import step as filter_step
from scidmz.control.features import Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.control.plausibility import SampleBounds, clamp_model_output, implausible
from scidmz.control.settings import default_models_dir
from scidmz.metrics import names
from scidmz.proto import telemetry_pb2

MBPS = 1e6
CAPACITY = 1000 * MBPS
MAX_STEP = 200 * MBPS
# the example policy's loop: the shipped cubic model and its tuned mlc gains
SETTINGS = ControllerSettings(
    link="p",
    strategy="mlc",
    setpoint=Setpoint(target_rate_bps=600 * MBPS, capacity_bps=CAPACITY),
    gains=Gains(0.262, 0.133, 0.028),
    limits=Limits(0.0, CAPACITY, MAX_STEP, 50 * MBPS, CAPACITY),
    sample_time_s=1.0,
    stale_after_s=3.0,
    failsafe_rate_bps=400 * MBPS,
    collector_address="127.0.0.1:1",
)
NORMAL = {
    "dtn_rate_bps": 600 * MBPS, "campus_rate_bps": 356 * MBPS, "dtn_rtt_s": 0.19,
    "campus_rtt_s": 0.09, "dtn_queuing_delay_s": 0.09, "campus_queuing_delay_s": 0.09,
    "active_flows": 108.0,
}  # fmt: skip
LABELS = {"link": "p"}


@pytest.fixture(scope="module")
def model() -> InverseModel:
    return InverseModel(default_models_dir() / "cubic" / "inverse.onnx")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sample(sequence: int, **values: float) -> telemetry_pb2.StateSample:
    return telemetry_pb2.StateSample(sequence=sequence, valid=[True] * 7, **{**NORMAL, **values})


def run(
    stream: list[dict[str, float]], model: InverseModel, cfg: ControllerSettings = SETTINGS
) -> tuple[list[float | None], Controller]:
    """The campus rate applied after each sample of ``stream`` (None: the sample was skipped
    and nothing was applied), one sample time apart."""

    async def main() -> tuple[list[float | None], Controller]:
        clock = Clock()
        controller = Controller(cfg, DryRunActuator(), model, clock=clock)
        applied: list[float | None] = []
        for k, values in enumerate(stream):
            clock.now += cfg.sample_time_s
            decision = await controller.on_sample(sample(k, **values))
            applied.append(None if decision is None else controller.applied_bps)
        return applied, controller

    return asyncio.run(main())


# ---- the reproductions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "absurd",
    [{"active_flows": 1e30}, {"dtn_rtt_s": 1e5, "campus_rtt_s": 1e5}, {"campus_rate_bps": 1e15},
     {"dtn_queuing_delay_s": -1.0}, {"active_flows": math.inf}],
    ids=["1e30 flows", "RTTs of 1e5 s", "campus rate 1e15", "negative delay", "inf flows"],
)  # fmt: skip
def test_one_absurd_sample_is_skipped_and_control_goes_on_as_if_it_never_came(model, absurd):
    normal = [{}] * 40
    with_it = [*normal[:20], absurd, *normal[20:]]
    reference, _ = run(normal, model)
    applied, controller = run(with_it, model)
    assert applied[20] is None  # skipped: nothing applied for it
    after = [u for u in applied[21:] if u is not None]
    assert after == pytest.approx(reference[20:], rel=1e-9)
    assert (
        controller.registry.get_sample_value(
            names.CONTROL_SAMPLES, {**LABELS, "kind": "implausible"}
        )
        == 1
    )
    assert not controller.failsafe_active


def test_a_stream_of_implausible_samples_ends_in_the_fail_safe(model):
    async def main() -> Controller:
        clock = Clock()
        controller = Controller(SETTINGS, DryRunActuator(), model, clock=clock)
        for k in range(10):
            clock.now += 1.0
            await controller.on_sample(sample(k))
        for k in range(10, 14):
            clock.now += 1.0
            await controller.on_sample(sample(k, active_flows=1e30))
        await controller.check_staleness()
        return controller

    controller = asyncio.run(main())
    assert controller.failsafe_active


def test_the_plausibility_bounds_come_from_the_link():
    bounds = SampleBounds.for_link(CAPACITY, max_active_flows=1000)
    ok = StateVector(*NORMAL.values())
    assert implausible(ok, bounds) == ()
    assert implausible(ok._replace(dtn_rtt_s=math.nan), bounds) == ()  # not measured
    assert implausible(ok._replace(campus_rate_bps=2 * CAPACITY), bounds) == ()
    assert implausible(ok._replace(campus_rate_bps=2.01 * CAPACITY), bounds) == (
        "campus_rate_bps=2.01e+09",
    )
    assert implausible(ok._replace(dtn_queuing_delay_s=60.5, active_flows=1001), bounds) == (
        "dtn_queuing_delay_s=60.5",
        "active_flows=1001",
    )


def test_the_model_output_is_held_within_the_link():
    assert clamp_model_output(1.2e34, CAPACITY) == CAPACITY
    assert clamp_model_output(-5e9, CAPACITY) == 0.0
    assert clamp_model_output(380 * MBPS, CAPACITY) == 380 * MBPS


def test_the_integral_never_grows_beyond_its_limit():
    limits = Limits(0.0, CAPACITY, MAX_STEP, math.inf, CAPACITY)
    state = FilterState(applied_bps=400 * MBPS)
    for _ in range(200):  # û far above the link: the back-calculation winds against max
        state, _output = filter_step(state, 0.0, 1.2e34, 1.0, Gains(0.3, 1.5, 1.5), limits)
    assert state.integral_bps == -CAPACITY


# ---- pinned at a limit by the integral -------------------------------------------------------


def test_an_output_held_at_a_limit_by_the_integral_is_pinned():
    limits = Limits(0.0, CAPACITY, MAX_STEP)
    at_max = FilterOutput(CAPACITY, 1.2 * CAPACITY, 900 * MBPS, 10 * MBPS, 290 * MBPS, -0.2e9)
    assert pinned_by_integral(at_max, limits)
    # at the limit without the integral's help: the model asks for it, not the integral
    assert not pinned_by_integral(dataclasses.replace(at_max, u_hat_bps=1.1e9), limits)
    assert not pinned_by_integral(dataclasses.replace(at_max, u_bps=900 * MBPS), limits)
    at_min = FilterOutput(0.0, -0.2e9, 100 * MBPS, -10 * MBPS, -290 * MBPS, 0.2e9)
    assert pinned_by_integral(at_min, limits)


def test_a_controller_pinned_longer_than_pinned_after_says_so():
    # a DTN that stays 40 Mb/s above R* (inside the band) while u may not go above 600 Mb/s:
    # the integral pushes u against limits.max and keeps it there
    cfg = dataclasses.replace(
        SETTINGS, strategy="pi", gains=Gains(0.3, 1.5, 0.1), pinned_after_s=5.0,
        limits=Limits(0.0, 600 * MBPS, MAX_STEP, 50 * MBPS, CAPACITY),
    )  # fmt: skip

    async def main() -> tuple[list[tuple[bool, float | None]], list[bool]]:
        clock = Clock()
        controller = Controller(cfg, DryRunActuator(), clock=clock)
        above = []
        for k in range(30):
            clock.now += 1.0
            await controller.on_sample(sample(k, dtn_rate_bps=640 * MBPS))
            gauge = controller.registry.get_sample_value(names.CONTROLLER_PINNED, LABELS)
            above.append((controller.pinned, gauge))
        below = []  # the error turns: the integral unwinds and lets go of the limit
        for k in range(30, 40):
            clock.now += 1.0
            await controller.on_sample(sample(k, dtn_rate_bps=560 * MBPS))
            below.append(controller.pinned)
        return above, below

    above, below = asyncio.run(main())
    assert above[0] == (False, 0)
    first = next(k for k, (pinned, _) in enumerate(above) if pinned)
    assert 5 <= first < 15
    assert all(pinned and gauge == 1 for pinned, gauge in above[first:])
    assert False in below  # the constant synthetic error later pins it at min, rightly


# ---- any stream -------------------------------------------------------------------------------

PLAUSIBLE = {
    "dtn_rate_bps": st.floats(0, 2 * CAPACITY), "campus_rate_bps": st.floats(0, 2 * CAPACITY),
    "dtn_rtt_s": st.floats(0, 60), "campus_rtt_s": st.floats(0, 60),
    "dtn_queuing_delay_s": st.floats(0, 60), "campus_queuing_delay_s": st.floats(0, 60),
    "active_flows": st.floats(0, 65_536),
}  # fmt: skip
EXTREME = st.sampled_from([1e30, -1e30, 1e15, -1.0, 1e308, math.inf, -math.inf, 5e-324, 0.0])
BAD_SAMPLE = st.dictionaries(
    st.sampled_from(sorted(NORMAL)),
    st.one_of(EXTREME, *PLAUSIBLE.values()),
    min_size=1,
)
RECOVERY_SAMPLES = 5
"""The controller is back to tracking this many sample times after the bad ones stop."""
RECOVERY_TOLERANCE = 0.02 * CAPACITY
"""How far u may then be from where a controller that never saw them is. Implausible samples
leave nothing; plausible extremes are measurements the filter answers, and what they can
leave is integral the hold rule's back-calculation wound against its floor (≤ 13 Mb/s in 400
generated bursts), which the closed loop's error integrates away."""


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(burst=st.lists(BAD_SAMPLE, min_size=1, max_size=10))
def test_no_sample_stream_wedges_the_controller(model, burst):
    before, after = 30, 12
    reference_stream = [{}] * (before + len(burst) + after)
    stream = [{}] * before + burst + [{}] * after
    reference, _ = run(reference_stream, model)
    applied, controller = run(stream, model)
    decided = [u for u in applied if u is not None]
    limits = SETTINGS.limits
    assert all(limits.min_bps <= u <= limits.max_bps for u in decided)
    assert all(abs(b - a) <= limits.max_step_bps + 1e-3 for a, b in itertools.pairwise(decided))
    back = before + len(burst) + RECOVERY_SAMPLES
    for k in range(back, len(stream)):
        assert applied[k] is not None
        assert abs(applied[k] - reference[k]) <= RECOVERY_TOLERANCE, (k, applied[k], reference[k])
    assert not controller.failsafe_active
