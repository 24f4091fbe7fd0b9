"""The controller: from each collector sample to u(t) at the actuators (paper figure 4).

Per fresh sample: y_d(t) (``features.desired_state``), the 22 features by name, û(t) from
the strategy (the ONNX inverse model for ``mlc``; B_max − R* for ``pi``), the anti-windup
filter (figure 5), the saturator, the campus actuator. ``trivial`` applies B_max − R* and
nothing else (§3.7). With a DTN actuator (``spec.actuator.dtn``) a second anti-windup
filter caps the DTN's sending rate around R* on the opposite error (a DTN above target
lowers its cap), which is what holds a BBR DTN that ignores campus shaping; ``trivial``
then pins that cap at R*. With the cap applied, the campus rate never goes below
B_max − cap: capacity the capped DTN cannot use would otherwise sit idle; and while
the DTN runs at its cap, never above it (that only fills the bottleneck's queue). A new
R* moves both slew windows at once (``follow_setpoint``).

Time is injected: ``dt`` of the integral is the difference of the ``clock`` between two
samples (the monotonic clock in a process, the simulated clock in the benchmarks), and
each ``Decision`` records it. At start the controller adopts the rates the actuators hold
and the first decisions after a start or a fail-safe move from the rate in force by at most
maxStep (a bumpless restart). A watchdog applies the fail-safe rates to both actuators when
no fresh sample came for ``staleAfter`` (stale samples from a collector that lost its
switch count as none), and ``shutdown`` restores them. Actuator errors are counted, logged
and retried with the next sample; they never stop the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

from scidmz.api.runtime import (
    ControllerState,
    DtnHostReport,
    PolicyTargetReport,
    SampleReport,
    TrackingReport,
)
from scidmz.auth.channels import ClientTls, open_channel
from scidmz.contract.channels import RECONNECT_OPTIONS
from scidmz.contract.codec import dtns_from_message, from_message, signals_from_message
from scidmz.contract.state import DtnFigures, StateVector
from scidmz.control.actuators import Actuator, ActuatorError
from scidmz.control.antiwindup import (
    FilterOutput,
    FilterState,
    Gains,
    Limits,
    follow_setpoint,
    pinned_by_integral,
    step,
)
from scidmz.control.buffer_loop import BufferLoop
from scidmz.control.buffer_search import dtn_ratios
from scidmz.control.decision import Decision
from scidmz.control.dtn_caps import (
    CapStep,
    DtnCap,
    DtnControl,
    all_capped,
    campus_limits,
    measured_rate,
    under_its_cap,
)
from scidmz.control.exporter import ControllerExporter, ControllerSnapshot
from scidmz.control.features import (
    FALLBACK_STATE,
    BaseRtts,
    DesiredStateMode,
    LinkGoodput,
    PolicyTarget,
    Setpoint,
    bottleneck_saturated,
    desired_state,
    features,
    fill_missing,
)
from scidmz.control.model import InverseModel
from scidmz.control.plausibility import (
    DEFAULT_MAX_ACTIVE_FLOWS,
    SampleBounds,
    clamp_model_output,
    implausible,
)
from scidmz.control.quality import iae, mrae
from scidmz.metrics import names
from scidmz.outage_log import OutageLog
from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

log = logging.getLogger(__name__)

TRACKING_WINDOW = 120
"""t_N of eq. 3: the paper's MRAE window, in samples."""
IMPLAUSIBLE_LOG_INTERVAL_S = 60.0
"""Skipped implausible samples are logged at most once in this long (and counted always)."""


@dataclass(frozen=True)
class ControllerSettings:
    link: str
    strategy: str  # mlc | pi | trivial
    setpoint: Setpoint
    gains: Gains
    limits: Limits
    sample_time_s: float
    stale_after_s: float
    failsafe_rate_bps: float
    collector_address: str
    collector_tls: ClientTls | None = None
    """Mutual TLS to the collector's stream (None: plaintext, development only)."""
    reconnect_s: float = 0.5
    desired_state_mode: DesiredStateMode = "reachable"
    dtn: DtnControl | None = None
    """The first DTN cap's filter; None without a DTN actuator."""
    more_dtns: tuple[DtnControl, ...] = ()
    """The caps of the link's other shaped DTN hosts (each with its host and target)."""
    hold_unsaturated: bool = True
    """Never lower u while the bottleneck holds no standing queue (see ``_decide``)."""
    max_active_flows: float = DEFAULT_MAX_ACTIVE_FLOWS
    """The most active flows the data plane can report; a sample with more is skipped."""
    policies: tuple[PolicyTarget, ...] = ()
    """The admitted policies whose targets make up R* (labels of the per-policy series)."""
    pinned_after_s: float = 60.0
    """How long u may stay at a limit held by the integral before the controller says it
    does not control (not ready, ``scidmz_controller_pinned``)."""
    restore_for_s: float = 20.0
    """On shutdown, how long to keep trying to restore the fail-safe rates when the
    actuators refuse (within Kubernetes' 30 s grace period, and long enough for a scrape
    at 15 s to see ``scidmz_failsafe_restore_failed``)."""

    @property
    def sample_bounds(self) -> SampleBounds:
        return SampleBounds.for_link(self.setpoint.capacity_bps, self.max_active_flows)

    @property
    def dtns(self) -> tuple[DtnControl, ...]:
        """Every DTN cap's filter, the first one first."""
        return self.more_dtns if self.dtn is None else (self.dtn, *self.more_dtns)


class ControllerMetrics:
    """The controller's event metrics (histograms, counters); its decisions are exported
    from ``ControllerSnapshot`` (``control.exporter``)."""

    def __init__(self, registry: CollectorRegistry, labels: tuple[str]) -> None:
        keys = ["link"]
        self.loop = Histogram(
            names.CONTROL_LOOP, "From sample received to actuator called.", keys,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=registry,
        )  # fmt: skip
        self.inference = Histogram(
            names.INFERENCE, "ONNX inference time.", keys,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01), registry=registry,
        )  # fmt: skip
        self.actuator_errors = Counter(
            names.ACTUATOR_ERRORS, "Failed actuator calls.", keys, registry=registry
        )
        self.samples = Counter(
            names.CONTROL_SAMPLES, "Samples received.", [*keys, "kind"], registry=registry
        )
        self.config_reloads = Counter(
            names.CONFIG_RELOADS, "Changed config files read, by result.", [*keys, "result"],
            registry=registry,
        )  # fmt: skip
        self.labels = labels
        self.actuator_errors.labels(*labels)  # exported as 0 from the start: alerts rate() it
        self.samples.labels(*labels, "failed")  # likewise (ScidmzControllerDecisionsFailing)


def _measured(values: Mapping[str, float]) -> dict[str, float | None]:
    """Values for ``/state``: None where not measured (NaN), as its JSON says."""
    return {k: (v if math.isfinite(v) else None) for k, v in values.items()}


class Controller:
    def __init__(
        self,
        settings: ControllerSettings,
        actuator: Actuator,
        model: InverseModel | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        dtn_actuator: Actuator | None = None,
        buffer: BufferLoop | None = None,
        more_dtn_actuators: Mapping[str, Actuator] | None = None,
    ) -> None:
        """``dtn_actuator``: the cap of ``settings.dtn``; ``more_dtn_actuators``: those of
        ``settings.more_dtns``, by host; ``buffer``: the buffer search of ``spec.buffer``
        (None: the buffer is left alone)."""
        if settings.strategy == "mlc" and model is None:
            raise ValueError("the mlc strategy needs an inverse model")
        if (settings.dtn is None) != (dtn_actuator is None):
            raise ValueError("a DTN actuator and its filter settings come together")
        self.settings = settings
        self.actuator = actuator
        self.caps: list[DtnCap] = []
        first = {settings.dtn.host: dtn_actuator} if settings.dtn and dtn_actuator else {}
        self._set_caps(settings, {**first, **(more_dtn_actuators or {})})
        self.buffer = buffer
        self.model = model
        self.registry = registry or CollectorRegistry()
        self.metrics = ControllerMetrics(self.registry, (settings.link,))
        self._clock = clock
        self.filter = FilterState()
        self.history: deque[StateVector] = deque(maxlen=2)
        self.applied_bps: float | None = None
        self.last_fresh_s = clock()
        self.failsafe_active = False
        self.decisions: deque[Decision] = deque(maxlen=TRACKING_WINDOW)
        self.latest: telemetry_pb2.StateSample | None = None
        self.base_rtts = BaseRtts()
        self.link_goodput = LinkGoodput()
        self._last_step_s: float | None = None
        self._last_target_bps: float | None = None
        self._tracking: deque[tuple[float, float]] = deque(maxlen=TRACKING_WINDOW)
        self._mailbox: asyncio.Queue[telemetry_pb2.StateSample] = asyncio.Queue(maxsize=1)
        self._actuation = asyncio.Lock()
        self._in_doubt: set[Actuator] = set()
        self._pinned_since_s: float | None = None
        self.restore_failed = False
        """Set while a shutdown cannot restore the fail-safe rates (exported, then exit 1)."""
        self._implausible_logged_s = -math.inf
        self._implausible_unlogged = 0
        self.snapshot = ControllerSnapshot(
            settings.setpoint, last_fresh_s=self.last_fresh_s, policies=settings.policies
        )
        self.registry.register(ControllerExporter(settings.link, lambda: self.snapshot, clock))

    def _set_caps(
        self,
        settings: ControllerSettings,
        actuators: Mapping[str, Actuator],
        renew: Collection[str] = (),
    ) -> list[DtnCap]:
        """Take ``settings``' caps: a host already capped keeps its filter and actuator
        (a new target or gains move its cap by at most its maxStep), a new one takes its
        actuator from ``actuators`` (by host), and so does a host in ``renew`` (its actuator
        changed). Returns the caps dropped (their actuators are the caller's to close)."""
        kept = {cap.control.host: cap for cap in self.caps if cap.control.host not in renew}
        dropped = [cap for cap in self.caps if cap.control.host in renew]
        missing = [c.host for c in settings.dtns if c.host not in kept and c.host not in actuators]
        if missing:
            raise ValueError(f"no actuator for the DTN cap(s) of {', '.join(missing)}")
        caps: list[DtnCap] = []
        for control in settings.dtns:
            old = kept.pop(control.host, None)
            if old is not None:
                old.control = control
                caps.append(old)
            else:
                caps.append(DtnCap(control, actuators[control.host]))
        self.caps = caps
        return dropped + list(kept.values())

    @property
    def dtn_actuator(self) -> Actuator | None:
        """The first DTN cap's actuator (None without one)."""
        return self.caps[0].actuator if self.caps else None

    @property
    def dtn_applied_bps(self) -> float | None:
        """The cap in force on the first DTN (None: none, or unknown)."""
        return self.caps[0].applied_bps if self.caps else None

    @property
    def trivial_rate_bps(self) -> float:
        s = self.settings.setpoint
        return s.capacity_bps - s.target_rate_bps

    # ---- per sample ---------------------------------------------------------------------
    async def on_sample(self, sample: telemetry_pb2.StateSample) -> Decision | None:
        """Compute and apply u(t) (and the DTN cap) for a fresh sample; stale or unusable
        ones are skipped (the watchdog takes care of staleness)."""
        # one actuation at a time: a decision computed from the rate in force must not
        # land after a fail-safe the watchdog applied meanwhile (and the reverse)
        async with self._actuation:
            return await self._decide(sample)

    async def _decide(self, sample: telemetry_pb2.StateSample) -> Decision | None:
        received = self._clock()
        m = self.metrics
        measured = from_message(sample)
        # with nothing admitted the switch holds no DTN class, so no DTN rate is measured;
        # the campus gets the whole link all the same (the idle branch below)
        unmeasured = not math.isfinite(measured.dtn_rate_bps)
        if sample.stale or (unmeasured and not self.nothing_admitted):
            m.samples.labels(*m.labels, "skipped").inc()
            if self.buffer is not None:
                self.buffer.on_stale()
            return None
        problems = implausible(measured, self.settings.sample_bounds)
        if problems:
            # never fed to the model or the filter, and no fresher than none: a stream of
            # them ends in the fail-safe, as a silent collector would
            m.samples.labels(*m.labels, "implausible").inc()
            self._report_implausible(sample.sequence, problems, received)
            if self.buffer is not None:
                self.buffer.on_stale()
            return None
        m.samples.labels(*m.labels, "fresh").inc()
        await self._settle_doubts()
        self.latest = sample
        self.last_fresh_s = received
        y = fill_missing(measured, self.history[-1] if self.history else FALLBACK_STATE)
        self.base_rtts = self.base_rtts.update(measured)
        s = self.settings
        self.link_goodput = self.link_goodput.update(measured, s.setpoint.capacity_bps)
        target = s.setpoint.target_rate_bps
        error = y.dtn_rate_bps - target
        self._tracking.append((target, y.dtn_rate_bps))
        dt = s.sample_time_s if self._last_step_s is None else received - self._last_step_s
        self._last_step_s = received
        output: FilterOutput | None = None
        first = len(self.history) < 2 or self.applied_bps is None
        idle = s.strategy == "trivial" or self.nothing_admitted
        figures = dtns_from_message(sample)
        caps = self._decide_caps(y, figures, target, dt, idle, first)
        if idle:
            # no admitted policy (R* = 0): nothing to hold, the campus gets the whole link
            u_hat = self.trivial_rate_bps
            u = s.limits.saturate(u_hat, None)
        elif first:
            # the first samples (eq. 1 needs y(t−T), y(t−2T)) head for the fixed split, but
            # from the rate in force (a restart, the end of a fail-safe) by at most maxStep
            u_hat = self.trivial_rate_bps
            u = s.limits.saturate(u_hat, self.applied_bps)
            self.filter = FilterState(applied_bps=u)
        else:
            u_hat = self._base_rate(y)
            moved = 0.0 if self._last_target_bps is None else target - self._last_target_bps
            self.filter = follow_setpoint(self.filter, -moved, s.limits)
            admitted_hosts = [p.dtn_host for p in s.policies]
            limits = campus_limits(
                s.limits,
                s.setpoint.capacity_bps,
                [(c.cap_bps, c.rate_bps, c.before_bps) for c in caps],
                all_capped(s.dtns, admitted_hosts),
            )
            if (
                s.hold_unsaturated
                and error < 0
                and self.filter.applied_bps is not None
                and bottleneck_saturated(measured) is False
            ):
                # no standing queue: the DTN is short of its target for want of window
                # (slow start, a loss, an idle or disk-bound DTN), not of capacity. A lower
                # campus rate would only idle the link, and integrated it would starve the
                # campus for as long as the DTN idles; u holds, and the back-calculation
                # keeps the integral from winding up against the hold
                limits = limits.with_floor(self.filter.applied_bps)
            self.filter, output = step(self.filter, error, u_hat, max(dt, 1e-3), s.gains, limits)
            u = output.u_bps
        self._track_pinning(output, received)
        self.history.append(y)
        self._last_target_bps = target
        await self._apply(u, {c.cap.control.host: c.cap_bps for c in caps})
        lead = next((c for c in caps if self.caps and c.cap is self.caps[0]), None)
        decision = Decision(
            sample.sequence, u, u_hat, error, output, dt,
            lead.cap_bps if lead else None, lead.output if lead else None,
            tuple((c.cap.control.host, c.cap_bps) for c in caps),
        )  # fmt: skip
        self.decisions.append(decision)
        self._publish()
        m.loop.labels(*m.labels).observe(self._clock() - received)
        if self.buffer is not None:  # the slow loop, after u(t) is in force
            targets = {p.dtn_host: p.target_rate_bps for p in s.policies}
            await self.buffer.on_sample(
                measured, signals_from_message(sample), decision, target,
                dtn_ratios(targets, figures),
            )  # fmt: skip
        return decision

    def _decide_caps(
        self,
        y: StateVector,
        dtns: tuple[DtnFigures, ...],
        link_target_bps: float,
        dt: float,
        idle: bool,
        first: bool,
    ) -> list[CapStep]:
        """Each unheld cap's next value. ``idle``: no target to hold (trivial, or nothing
        admitted), each cap is its target; ``first``: no filter history yet, each cap heads
        for its target by at most its maxStep. A cap whose host is not measured now keeps
        its value (its filter does not integrate an unknown error)."""
        decided: list[CapStep] = []
        only = len(self.caps) == 1
        for cap in self.caps:
            c = cap.control
            if c.held:
                continue
            target = c.target(link_target_bps)
            rate = measured_rate(c.host, dtns, y.dtn_rate_bps, only)
            before = cap.applied_bps
            out: FilterOutput | None = None
            if idle:
                value = c.limits.saturate(target, None)
            elif first or cap.filter.applied_bps is None:
                value = c.limits.saturate(target, before)
                cap.filter = FilterState(applied_bps=value)
            elif not math.isfinite(rate) or (
                rate < target and target == cap.last_target_bps and under_its_cap(rate, before)
            ):
                value = cap.filter.applied_bps
            else:
                moved = 0.0 if cap.last_target_bps is None else target - cap.last_target_bps
                cap.filter = follow_setpoint(cap.filter, moved, c.limits)
                cap.filter, out = step(
                    cap.filter, target - rate, target, max(dt, 1e-3), c.gains, c.limits
                )
                value = out.u_bps
            cap.last_target_bps = target
            decided.append(CapStep(cap, value, rate, before, out))
        return decided

    def _base_rate(self, y: StateVector) -> float:
        s = self.settings
        if s.strategy == "pi":
            return self.trivial_rate_bps
        assert self.model is not None and self.applied_bps is not None
        desired = desired_state(
            s.setpoint, y, self.base_rtts, s.desired_state_mode, self.link_goodput
        )
        # y(t) was just measured: it is eq. 1's y(t−T) for the u(t) chosen now
        row = features(desired, y, self.history[-1], self.applied_bps)
        started = self._clock()
        u_hat = self.model.predict(row)
        m = self.metrics
        m.inference.labels(*m.labels).observe(self._clock() - started)
        if not math.isfinite(u_hat):
            return self.trivial_rate_bps
        return clamp_model_output(u_hat, s.setpoint.capacity_bps)

    def _report_implausible(self, sequence: int, problems: tuple[str, ...], now_s: float) -> None:
        """One log line a minute at most, with how many were skipped since the last one."""
        self._implausible_unlogged += 1
        if now_s - self._implausible_logged_s < IMPLAUSIBLE_LOG_INTERVAL_S:
            return
        log.warning(
            "skipped sample %d: %s is outside what the link can show (%d implausible "
            "sample(s) skipped since the last such line)",
            sequence, ", ".join(problems), self._implausible_unlogged,
        )  # fmt: skip
        self._implausible_logged_s = now_s
        self._implausible_unlogged = 0

    def _track_pinning(self, output: FilterOutput | None, now_s: float) -> None:
        """When u(t) first sat at a configured limit held there by the integral."""
        if output is not None and pinned_by_integral(output, self.settings.limits):
            if self._pinned_since_s is None:
                self._pinned_since_s = now_s
        else:
            self._pinned_since_s = None

    @property
    def pinned_for_s(self) -> float:
        """How long u(t) has been held at a limit by the integral (0: it is not)."""
        since = self._pinned_since_s
        return 0.0 if since is None else max(0.0, self._clock() - since)

    @property
    def nothing_admitted(self) -> bool:
        """No policy admitted (R* = 0): no DTN class to measure, nothing to hold; the
        campus gets the whole link."""
        return self.settings.setpoint.target_rate_bps <= 0

    @property
    def pinned(self) -> bool:
        """Held at a limit by the integral for pinnedAfter or longer: not controlling."""
        return self._pinned_since_s is not None and (
            self.pinned_for_s >= self.settings.pinned_after_s
        )

    async def _try(self, actuator: Actuator, rate_bps: float, what: str) -> float | None:
        """Apply one rate; an actuator error is counted and logged (retried next time)."""
        m = self.metrics
        try:
            applied = await actuator.apply(rate_bps)
        except ActuatorError as error:
            m.actuator_errors.labels(*m.labels).inc()
            log.warning("%s %s: %s (retried)", what, actuator.name, error)
            # a call that timed out may still take effect (a frozen switch runs it when it
            # wakes): until read back, the rate in force is unknown
            self._in_doubt.add(actuator)
            return None
        self._in_doubt.discard(actuator)
        return applied

    async def _settle_doubts(self) -> None:
        """Read back the rate in force from an actuator whose last call failed, so that the
        next decision's slew window is centred on what the network really gets."""
        if self.actuator in self._in_doubt:
            held = await self.actuator.current()
            if held is not None:
                self.applied_bps = held
                self.filter = FilterState(self.filter.integral_bps, applied_bps=held)
            self._in_doubt.discard(self.actuator)
        for cap in self.caps:
            if cap.actuator not in self._in_doubt:
                continue
            held = await cap.actuator.current()
            if held is not None:
                cap.applied_bps = held
                cap.filter = FilterState(cap.filter.integral_bps, applied_bps=held)
            self._in_doubt.discard(cap.actuator)

    async def _apply(self, rate_bps: float, dtn_caps_bps: Mapping[str, float]) -> None:
        """u(t) on the campus actuator, then each decided cap on its host's."""
        applied = await self._try(self.actuator, rate_bps, "actuator")
        if applied is not None:
            self.applied_bps = applied
        dtn_ok = True
        for cap in self.caps:
            wanted = dtn_caps_bps.get(cap.control.host)
            if wanted is None:
                continue
            cap_applied = await self._try(
                cap.actuator, wanted, f"DTN actuator ({cap.control.host})"
            )
            if cap_applied is None:
                dtn_ok = False
            else:
                cap.applied_bps = cap_applied
        if applied is None or not dtn_ok:
            return
        if self.failsafe_active:
            log.info("fresh samples again: leaving the fail-safe rate")
        self.failsafe_active = False

    def _publish(self) -> None:
        """Replace the snapshot the exporter renders (after a decision or the fail-safe)."""
        targets = [t for t, _ in self._tracking]
        rates = [r for _, r in self._tracking]
        last = self.decisions[-1] if self.decisions else None
        self.snapshot = ControllerSnapshot(
            setpoint=self.settings.setpoint,
            applied_bps=self.applied_bps,
            dtn_applied_bps=self.dtn_applied_bps,
            decision=last,
            mrae=mrae(targets, rates),
            iae_bits=iae(targets, rates, self.settings.sample_time_s),
            failsafe=self.failsafe_active,
            last_fresh_s=self.last_fresh_s,
            pinned=self.pinned,
            restore_failed=self.restore_failed,
            policies=self.settings.policies,
        )

    def actuation(self) -> asyncio.Lock:
        """Held while a decision or the fail-safe acts: a caller that changes which
        actuators the caps use (a reload that drops or replaces one, then closes it) holds
        it too, so that no decision acts on an actuator being closed."""
        return self._actuation

    def reconfigure(
        self,
        settings: ControllerSettings,
        new_actuators: Mapping[str, Actuator] | None = None,
        renew: Collection[str] = (),
    ) -> list[Actuator]:
        """Decide on ``settings`` from the next sample (``control.live_config`` says which
        fields may differ). The filters' state carries over, so a new target or gains move
        u(t) from the rate in force by at most maxStep; a new fail-safe rate is applied at
        the watchdog's next check while samples are stale. A DTN host capped anew takes
        its actuator from ``new_actuators`` (its cap heads for its target from the next
        sample), as does a host in ``renew`` (its actuator changed); the actuators of the
        caps dropped are returned for the caller to close. A switch between ``mlc`` and
        ``pi`` moves the base rate under the same slew limit; ``mlc`` needs ``self.model``
        loaded first (ValueError otherwise, nothing changed)."""
        if settings.strategy == "mlc" and self.model is None:
            raise ValueError("the mlc strategy needs an inverse model")
        dropped = self._set_caps(settings, new_actuators or {}, renew)
        self.settings = settings
        self._publish()
        return [cap.actuator for cap in dropped]

    # ---- fail-safe ------------------------------------------------------------------------
    async def check_staleness(self) -> bool:
        """Apply the fail-safe rate when no fresh sample came for staleAfter; True if so."""
        async with self._actuation:
            age = self._clock() - self.last_fresh_s  # read under the lock: a decision may
            if age < self.settings.stale_after_s:  # just have taken a fresh sample
                return False
            if not self.failsafe_active:
                log.warning("no fresh sample for %.1f s: applying the fail-safe rate", age)
            await self._failsafe()
            return True

    @property
    def dtn_failsafe_rate_bps(self) -> float | None:
        """The first DTN cap's fail-safe (None without one)."""
        return self.caps[0].control.failsafe(self.target_bps) if self.caps else None

    @property
    def target_bps(self) -> float:
        return self.settings.setpoint.target_rate_bps

    async def apply_failsafe(self) -> bool:
        """The fail-safe rates on both actuators (each retried on the next check if it
        fails); the integrals restart from them. True if every actuator took its rate."""
        async with self._actuation:
            return await self._failsafe()

    async def _failsafe(self) -> bool:
        """``apply_failsafe`` with the actuation lock held.

        The fail-safe is a mode, entered before any actuator is called: with the switch
        down, a simulated or remote actuator may be down (or hanging) too, and the
        controller must not report that it controls while it cannot."""
        self.failsafe_active = True
        self.history.clear()
        self._last_step_s = None
        self._pinned_since_s = None
        self._publish()
        applied = await self._try(self.actuator, self.settings.failsafe_rate_bps, "fail-safe")
        if applied is not None:
            self.applied_bps = applied
            self.filter = FilterState(applied_bps=applied)  # restart the integral
        dtn_ok = True
        for cap in self.caps:
            rate = cap.control.failsafe(self.target_bps)
            cap_applied = await self._try(cap.actuator, rate, f"DTN fail-safe ({cap.control.host})")
            if cap_applied is None:
                dtn_ok = False
            else:
                cap.in_force(cap_applied)
        if self.buffer is not None:
            await self.buffer.fail_safe()
        self._publish()
        return applied is not None and dtn_ok

    # ---- running ----------------------------------------------------------------------------
    async def adopt_rates_in_force(self) -> None:
        """Start from the rates the actuators hold (a previous controller's, or the
        fail-safe a stopped one restored): the first decisions then move by at most maxStep
        from them. Where no rate is in force (no tbf yet, an actuator that cannot tell), the
        fixed split is applied at once (B_max − R* to the campus, R* to the DTN cap): left
        unshaped until the first decision at T, the campus fills a short buffer in
        milliseconds and a DTN in slow start leaves it at a few Mb/s."""
        # nothing is known yet of what is in force: the same read-back as after a failure
        self._in_doubt.add(self.actuator)
        self._in_doubt.update(cap.actuator for cap in self.caps)
        await self._settle_doubts()
        found = (self.applied_bps, self.dtn_applied_bps)
        if self.buffer is not None:
            await self.buffer.start()
        if self.applied_bps is None:
            rate = self.settings.limits.saturate(self.trivial_rate_bps, None)
            applied = await self._try(self.actuator, rate, "start")
            if applied is not None:
                self.applied_bps = applied
                self.filter = FilterState(applied_bps=applied)
        for cap in self.caps:
            if cap.applied_bps is not None or cap.control.held:
                continue
            rate = cap.control.limits.saturate(cap.control.target(self.target_bps), None)
            cap_applied = await self._try(cap.actuator, rate, f"start (DTN {cap.control.host})")
            if cap_applied is not None:
                cap.in_force(cap_applied)

        def shown(found_bps: float | None, now_bps: float | None) -> str:
            if found_bps is not None:
                return f"{found_bps:.0f} bit/s in force"
            if now_bps is not None:
                return f"none in force, the fixed split {now_bps:.0f} bit/s applied"
            return "unknown (the actuator failed; retried with the first decision)"

        log.info(
            "at start: campus %s; DTN cap %s",
            shown(found[0], self.applied_bps),
            "none configured" if self.dtn_actuator is None
            else shown(found[1], self.dtn_applied_bps),
        )  # fmt: skip
        self._publish()

    async def run(self, stop: asyncio.Event) -> bool:
        """Take over the rates in force, subscribe to the collector (reconnecting) and watch
        for staleness until ``stop``; then restore the fail-safe rate. False if it could not
        be restored within ``restore_for_s`` (the process then exits non-zero)."""
        await self.adopt_rates_in_force()
        tasks = [
            asyncio.create_task(self._subscribe_forever(), name="subscribe"),
            asyncio.create_task(self._decide_forever(), name="decide"),
            asyncio.create_task(self._watch_forever(), name="watchdog"),
        ]
        ended = asyncio.create_task(stop.wait(), name="stop")
        try:
            # each task runs forever: one that ends is a bug, said at once and stopping the
            # process (its fail-safe restored, the pod restarted), never a silent half-loop
            await asyncio.wait([ended, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if task.done() and not task.cancelled():
                    error = task.exception()
                    log.critical("the %s task ended: %r; stopping", task.get_name(), error,
                                 exc_info=error)  # fmt: skip
                    raise RuntimeError(f"the controller's {task.get_name()} task ended") from error
        finally:
            ended.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(ended, *tasks, return_exceptions=True)
            restored = await self._restore_on_shutdown()
        return restored

    async def _restore_on_shutdown(self) -> bool:
        """The fail-safe rates, retried once a second for ``restore_for_s`` while
        ``scidmz_failsafe_restore_failed`` says so; logged as what happened."""
        rates = f"campus {self.settings.failsafe_rate_bps:.0f} bit/s" + (
            "" if self.dtn_actuator is None else f", DTN cap {self.dtn_failsafe_rate_bps:.0f} bit/s"
        )
        deadline = time.monotonic() + self.settings.restore_for_s
        restored = await self.apply_failsafe()
        while not restored and time.monotonic() < deadline:
            if not self.restore_failed:
                log.error("stopping, but the fail-safe rates (%s) were refused: retrying", rates)
            self.restore_failed = True
            self._publish()
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            restored = await self.apply_failsafe()
        if restored:
            self.restore_failed = False
            self._publish()
            log.info("stopped: fail-safe rates restored (%s)", rates)
        else:
            log.error(
                "stopped WITHOUT restoring the fail-safe rates (%s) after %.0f s of retries: "
                "the shapers keep whatever they last took",
                rates, self.settings.restore_for_s,
            )  # fmt: skip
        return restored

    async def _watch_forever(self) -> None:
        while True:  # the period follows a reloaded staleAfter
            await asyncio.sleep(min(self.settings.stale_after_s / 4, self.settings.sample_time_s))
            await self.check_staleness()

    async def _subscribe_forever(self) -> None:
        address = self.settings.collector_address
        # gRPC's details carry the cause (the resolver's error for a Service name that does
        # not resolve, the TLS handshake's); the code alone (UNAVAILABLE) says nothing
        outage = OutageLog(log, f"collector {address}")
        while True:
            try:
                channel = open_channel(address, self.settings.collector_tls, RECONNECT_OPTIONS)
                async with channel:
                    stub = telemetry_pb2_grpc.TelemetryStub(channel)
                    async for sample in stub.Subscribe(telemetry_pb2.SubscribeRequest()):
                        outage.recovered(time.monotonic())
                        self._post(sample)
            except grpc.aio.AioRpcError as error:
                reason = f"{error.code().name}: {error.details() or 'no details'}"
                retry = f"retrying every {self.settings.reconnect_s:g} s"
                outage.failed(reason, time.monotonic(), retry)
            await asyncio.sleep(self.settings.reconnect_s)

    def _post(self, sample: telemetry_pb2.StateSample) -> None:
        """Leave ``sample`` for the next decision, replacing one not yet decided on."""
        if self._mailbox.full():
            self._mailbox.get_nowait()
            m = self.metrics
            m.samples.labels(*m.labels, "superseded").inc()
        self._mailbox.put_nowait(sample)

    async def _decide_forever(self) -> None:
        """One decision per sample, on the newest one, at most one per half sample time.

        Samples queue up while this process or the collector is paused (SIGSTOP, a long
        GC, a throttled container) and then arrive in a burst; deciding on each would move
        u(t) by several maxSteps within milliseconds. Only the newest counts, and the slew
        limit keeps its meaning of 'per sample time'."""
        gap = self.settings.sample_time_s / 2
        decided = -math.inf
        while True:
            sample = await self._mailbox.get()
            wait = decided + gap - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                if not self._mailbox.empty():  # a newer one came meanwhile
                    self.metrics.samples.labels(*self.metrics.labels, "superseded").inc()
                    sample = self._mailbox.get_nowait()
            try:
                await self.on_sample(sample)
            except Exception:
                # a decision that fails is this sample's loss, never the loop's: a task
                # that died here left the watchdog alone in charge, at the fail-safe rate
                # for good while the process and its /state looked alive
                m = self.metrics
                m.samples.labels(*m.labels, "failed").inc()
                log.exception("deciding on sample %d failed; deciding on the next", sample.sequence)
            decided = time.monotonic()

    def _policy_report(self, policy: PolicyTarget) -> PolicyTargetReport:
        cap = next((c for c in self.caps if c.control.host in (policy.dtn_host, "")), None)
        return PolicyTargetReport(
            **asdict(policy),
            dtn_rate_limit_bps=cap.applied_bps if cap is not None else None,
            capped=cap is not None and not cap.control.held,
        )

    def state(self) -> ControllerState:
        """What ``/state`` serves; the operator reads it into ``status.state`` and
        ``status.tracking``."""
        latest = self.latest
        tracking = self.snapshot.mrae  # computed once per decision, in ``_publish``
        sample = None
        if latest is not None:
            values = from_message(latest)._asdict() | asdict(signals_from_message(latest))
            reported = set(DtnHostReport.model_fields) - {"host"}
            sample = SampleReport(
                **_measured(values),
                dtn_hosts=[
                    DtnHostReport(host=d.host, **_measured({k: getattr(d, k) for k in reported}))
                    for d in dtns_from_message(latest)
                ],
                sampled_at=latest.measured_at.ToJsonString(),
                sequence=latest.sequence,
                interval_s=latest.interval_s or None,
                tap_clock_ns=latest.tap_clock_ns or None,
            )
        return ControllerState(
            link=self.settings.link,
            strategy=self.settings.strategy,
            failsafe_active=self.failsafe_active,
            target_rate_bps=self.settings.setpoint.target_rate_bps,
            policies=[self._policy_report(p) for p in self.settings.policies],
            campus_rate_limit_bps=self.applied_bps,
            dtn_rate_limit_bps=self.dtn_applied_bps if self.dtn_actuator is not None else None,
            tracking=TrackingReport(
                mrae=tracking if math.isfinite(tracking) else None, window=len(self._tracking)
            ),
            state=sample,
            buffer=self.buffer.report() if self.buffer is not None else None,
        )
