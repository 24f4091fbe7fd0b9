"""The real controller closing its loop on an in-process simulator, on the simulated clock.

``SimLoop`` is what the control-quality benchmark, the GA tuner and the tests run: every
sample time T the ``SimCollector`` computes y(t) as the collector would, the production
``control.loop.Controller`` (y_d, features, ONNX, anti-windup, saturators) decides, and
direct actuators set the simulator's campus shaper (and DTN cap) for the next interval.

The controller's clock *is* the simulator's clock, so the integral's dt is simulated
time; ``step`` refuses to go on if the two ever disagree (the simulator runs hundreds of
times faster than the wall clock, so a wall-clock dt silently turns the I and windup terms
off: the bug this module exists to make impossible).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from scidmz.api.runtime import (
    DEFAULT_MAX_STEP_FRACTION,
    TelemetryConfig,
)
from scidmz.contract.codec import state_message
from scidmz.control.decision import Decision
from scidmz.control.features import Setpoint
from scidmz.control.loop import Controller, ControllerSettings
from scidmz.control.model import InverseModel
from scidmz.learn.identification import SimCollector, SimSample
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.simulator import Simulator


class ClockMismatchError(RuntimeError):
    """The controller's dt is not the simulated time that passed."""


class DirectActuator:
    """A rate straight into the in-process simulator (``setter``: its campus shaper or its
    DTN cap)."""

    def __init__(
        self,
        name: str,
        setter: Callable[[float], None],
        lift: Callable[[], None] | None = None,
    ) -> None:
        """``lift``: how the limit goes away (a DTN cap's shaper removed)."""
        self.name = name
        self._setter = setter
        self._lift = lift

    def lift(self) -> None:
        if self._lift is not None:
            self._lift()

    async def apply(self, rate_bps: float) -> float:
        self._setter(max(rate_bps, 0.0))
        return rate_bps

    async def current(self) -> float | None:
        return None  # nothing in force as an episode starts: the controller applies the split

    async def close(self) -> None:
        return


@dataclass(frozen=True)
class LoopStep:
    """One sample time of a closed-loop run."""

    target_bps: float
    sample: SimSample
    decision: Decision | None


class SimLoop:
    """A controller on a simulator. Drive it with ``run`` (sync) or ``step`` (async)."""

    def __init__(
        self,
        scenario: Scenario,
        settings: ControllerSettings,
        model: InverseModel | None = None,
        telemetry: TelemetryConfig | None = None,
    ) -> None:
        self.collector = SimCollector(scenario, telemetry)
        sim = self.collector.sim
        self._names = [d.name for d in scenario.dtns]
        cap_of = self._cap_of
        self.controller = Controller(
            settings,
            DirectActuator("sim-direct", sim.set_campus_rate_limit),
            model if settings.strategy == "mlc" else None,
            clock=lambda: sim.now,
            dtn_actuator=cap_of(settings.dtn.host) if settings.dtn else None,
            more_dtn_actuators={c.host: cap_of(c.host) for c in settings.more_dtns},
        )
        self._sequence = 0
        self._last_decision_s: float | None = None
        self._started = False

    @property
    def sim(self) -> Simulator:
        return self.collector.sim

    def _cap_of(self, host: str) -> DirectActuator:
        """DTN host ``host``'s cap (no host: the scenario's first DTN's)."""
        group = self._names.index(host) if host else 0
        sim = self.sim
        return DirectActuator(
            f"sim-direct-dtn-{group}",
            lambda rate: sim.set_dtn_rate_limit(rate, group),
            lambda: sim.set_dtn_rate_limit(None, group),
        )

    def replan(self, settings: ControllerSettings) -> None:
        """A new plan from the next decision on (a policy admitted or removed): as the
        controller process takes a reloaded config, new caps on their hosts' shapers; a
        cap dropped is lifted (its host sends uncapped, as after its shaper's restore)."""
        running = {c.control.host for c in self.controller.caps}
        added = {c.host: self._cap_of(c.host) for c in settings.dtns if c.host not in running}
        for actuator in self.controller.reconfigure(settings, added):
            assert isinstance(actuator, DirectActuator)
            actuator.lift()

    def set_target(self, target_bps: float) -> None:
        """R*(t): the setpoint from the next decision on (B_max − R* moves with it)."""
        c = self.controller
        if target_bps != c.settings.setpoint.target_rate_bps:
            c.settings = replace(
                c.settings, setpoint=replace(c.settings.setpoint, target_rate_bps=target_bps)
            )

    async def step(self, target_bps: float | None = None) -> LoopStep:
        if target_bps is not None:
            self.set_target(target_bps)
        if not self._started:
            # as a controller process starts: nothing in force, so the fixed split from
            # t = 0, before the first sample time passes
            await self.controller.adopt_rates_in_force()
            self._started = True
        sample = self.collector.measure()
        self._sequence += 1
        message = state_message(sample.measured, self._sequence, dtns=sample.dtns)
        decision = await self.controller.on_sample(message)
        if decision is not None:
            self._check_clock(decision, sample)
        return LoopStep(self.controller.settings.setpoint.target_rate_bps, sample, decision)

    def _check_clock(self, decision: Decision, sample: SimSample) -> None:
        if self._last_decision_s is not None:
            elapsed = sample.sim_s - self._last_decision_s
            if not math.isclose(decision.dt_s, elapsed, rel_tol=1e-9, abs_tol=1e-9):
                raise ClockMismatchError(
                    f"the controller's dt is {decision.dt_s:.6g} s but {elapsed:.6g} s of "
                    "simulated time passed: the loop is not on the simulated clock"
                )
        self._last_decision_s = sample.sim_s

    def run(self, targets_bps: list[float]) -> list[LoopStep]:
        """One sample per entry of ``targets_bps`` (R* for that sample)."""

        async def go() -> list[LoopStep]:
            return [await self.step(target) for target in targets_bps]

        return asyncio.run(go())


def bench_settings(
    strategy: str,
    target_bps: float,
    capacity_bps: float,
    gains: tuple[float, float, float],
    sample_time_s: float = 1.0,
    dtn_gains: tuple[float, float, float] | None = None,
    desired_state_mode: str = "reachable",
    integral_band_bps: float = math.inf,
) -> ControllerSettings:
    """Controller settings as the operator renders them by default for a policy (limits
    0..B, 20 % of B per sample, fail-safe B − R*; the campus filter's integral band as
    given, default always), with the DTN filter when given gains."""
    from scidmz.control.antiwindup import Gains, Limits
    from scidmz.control.dtn_caps import DtnControl

    limits = Limits(
        0.0,
        capacity_bps,
        DEFAULT_MAX_STEP_FRACTION * capacity_bps,
        integral_band_bps,
        integral_limit_bps=capacity_bps,
    )
    dtn = (
        # the DTN cap's filter integrates always, as controller_settings builds it
        DtnControl(
            Gains(*dtn_gains),
            replace(limits, integral_band_bps=math.inf, slew_in_windup=True),
            failsafe_rate_bps=None,
        )
        if dtn_gains is not None
        else None
    )
    return ControllerSettings(
        link="bench", strategy=strategy,
        setpoint=Setpoint(target_bps, capacity_bps), gains=Gains(*gains), limits=limits,
        sample_time_s=sample_time_s, stale_after_s=3 * sample_time_s,
        failsafe_rate_bps=capacity_bps - target_bps, collector_address="in-process",
        desired_state_mode="table3" if desired_state_mode == "table3" else "reachable",
        dtn=dtn,
    )  # fmt: skip
