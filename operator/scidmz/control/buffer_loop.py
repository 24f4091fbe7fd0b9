"""The buffer search inside the controller: the slow second loop of ``spec.buffer``.

Each fresh sample (after the rate decision it led to) goes to the
:class:`~scidmz.control.buffer_search.BufferTuner`; a buffer it chooses goes to the buffer
actuator. The rate loop is never held up by it: a failed change is logged, counted and
tried again with the next sample, and the trial running starts over. Stale telemetry
stops the search (nothing moves); the fail-safe sets the administrator's default buffer.

The loss the search reads is ``spec.buffer.lossSignal``'s. The queue's own counters are
read through the actuator with every sample where it can (they are also the border
router's own loss that algorithm 1 expands on). A loss signal that stays unmeasured while
the link is full stops the search: the default buffer, and the report says why
(``degraded``), until the signal is measured again.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from scidmz.api.runtime import BufferConfig, BufferReport
from scidmz.contract.state import PathSignals, StateVector
from scidmz.control.actuators import ActuatorError
from scidmz.control.buffer_actuators import BufferActuator, QueueCounters, drop_ratio
from scidmz.control.buffer_search import BufferTuner, TunerSample, TunerSettings, tuner_sample
from scidmz.control.decision import Decision
from scidmz.metrics import names

log = logging.getLogger(__name__)

PHASES = ("idle", "expand", "search", "hold")


def tuner_settings(
    config: BufferConfig, capacity_bps: float, sample_time_s: float
) -> TunerSettings:
    """``spec.buffer`` as the tuner's settings (trial lengths in whole samples)."""
    return TunerSettings(
        capacity_bps=capacity_bps,
        min_s=config.min_s,
        max_s=config.max_s,
        default_s=config.default_s,
        max_queue_delay_s=config.max_queue_delay_s,
        loss_scale=config.loss_scale,
        w_loss=config.loss_weight,
        w_delay=config.delay_weight,
        settle_samples=_samples(config.settle_s, sample_time_s),
        settle_window=_samples(config.settling_window_s, sample_time_s),
        settle_tolerance=config.settling_tolerance,
        max_wait_samples=_samples(config.max_wait_s, sample_time_s),
        measure_samples=_samples(config.measure_s, sample_time_s),
        max_iterations=config.max_iterations,
        stop_ei=config.stop_ei,
        stop_noise=config.stop_noise,
        utilisation_gate=config.utilisation_gate,
        z_lag=config.change_lag,
        z_threshold=config.change_threshold,
        z_influence=config.change_influence,
    )


def _samples(duration_s: float, sample_time_s: float) -> int:
    """A duration as whole samples, rounded up, at least one."""
    return max(1, math.ceil(duration_s / sample_time_s - 1e-9))


UNMEASURED_SAMPLES = 5
"""Busy samples in a row without the loss signal that stop the search (the first read of a
queue's counters has nothing to compare with, and a sample may miss it now and then)."""
UNMEASURED_NAMES = {
    "path": "the collector reports no retransmission ratio for either class",
    "bottleneck": "the collector reports no bottleneck loss (method 2 needs the P4 program's "
    "egress counters, class_egress)",
    "actuator": "the buffer actuator cannot read the queue's drop counters",
}


@dataclass(frozen=True)
class BufferMetrics:
    buffer: Gauge
    phase: Gauge
    best: Gauge
    trials: Counter
    errors: Counter
    stopped: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry, link: str) -> BufferMetrics:
        def gauge(name: str, doc: str, *by: str) -> Gauge:
            return Gauge(name, doc, ["link", *by], registry=registry)

        metrics = cls(
            buffer=gauge(names.BUFFER, "The border router's buffer in force, as time at B."),
            phase=gauge(names.BUFFER_PHASE, "1 for the buffer search's phase.", "phase"),
            best=gauge(names.BUFFER_OBJECTIVE, "The best objective f of this search (eq. 2)."),
            trials=Counter(
                names.BUFFER_TRIALS,
                "Buffer trials scored.",
                ["link", "feasible"],
                registry=registry,
            ),
            errors=Counter(
                names.BUFFER_ERRORS, "Failed buffer changes.", ["link"], registry=registry
            ),
            stopped=gauge(
                names.BUFFER_STOPPED,
                "1 while the search is stopped for want of its loss signal (the default "
                "buffer is held).",
            ),
        )
        for phase in PHASES:
            metrics.phase.labels(link, phase).set(0)
        for feasible in ("true", "false"):
            metrics.trials.labels(link, feasible)
        metrics.errors.labels(link)
        metrics.stopped.labels(link).set(0)
        return metrics


class BufferLoop:
    """The tuner and its actuator, driven by the controller's samples."""

    def __init__(
        self,
        config: BufferConfig,
        actuator: BufferActuator,
        capacity_bps: float,
        sample_time_s: float,
        link: str,
        registry: CollectorRegistry,
    ) -> None:
        self.config = config
        self.actuator = actuator
        self.capacity_bps = capacity_bps
        self.tuner = BufferTuner(tuner_settings(config, capacity_bps, sample_time_s))
        self.in_force_s: float | None = None
        self._pending_s: float | None = config.default_s
        self._counters: QueueCounters | None = None
        self._unmeasured = 0
        self.degraded: str | None = None
        self._link = link
        self.metrics = BufferMetrics.create(registry, link)
        self._publish()

    def _bytes(self, buffer_s: float) -> float:
        return buffer_s * self.capacity_bps / 8

    async def _set(self, buffer_s: float) -> None:
        self._pending_s = buffer_s
        try:
            applied = await self.actuator.apply(self._bytes(buffer_s))
        except ActuatorError as error:
            self.metrics.errors.labels(self._link).inc()
            log.warning(
                "buffer %.1f ms not set (%s); retried with the next sample", buffer_s * 1e3, error
            )
            self.tuner.observe(None)  # the trial's buffer is not in force: start it over
            return
        self._pending_s = None
        self.in_force_s = applied * 8 / self.capacity_bps
        self._publish()

    async def start(self) -> None:
        """The default buffer, before the search begins."""
        await self._set(self.config.default_s)

    async def on_sample(
        self,
        state: StateVector,
        signals: PathSignals,
        decision: Decision | None,
        target_bps: float,
        ratios: tuple[float, ...] = (),
    ) -> None:
        """One fresh sample after the rate decision it led to; ``ratios``: each DTN host's
        rate over its own target, with several (``buffer_search.dtn_ratios``)."""
        if self._pending_s is not None:
            await self._set(self._pending_s)
            if self._pending_s is not None:
                return
        saturated = decision is not None and decision.campus_starved_for_dtn
        counters = await self.actuator.queue_counters()
        queue_loss = drop_ratio(self._counters, counters)
        self._counters = counters
        sample = tuner_sample(
            state, signals, target_bps, self.capacity_bps, saturated,
            self.config.loss_signal, queue_loss, ratios,
        )  # fmt: skip
        if await self._unmeasured_signal(sample):
            self._publish()
            return
        trials = len(self.tuner.trials)
        chosen = self.tuner.observe(sample)
        if len(self.tuner.trials) > trials:  # a sample scores at most one trial
            feasible = self.tuner.trials[-1].feasible
            self.metrics.trials.labels(self._link, "true" if feasible else "false").inc()
        if chosen is not None and chosen != self.in_force_s:
            log.info("buffer search (%s): %.1f ms", self.tuner.phase, chosen * 1e3)
            await self._set(chosen)
        self._publish()

    async def _unmeasured_signal(self, sample: TunerSample) -> bool:
        """True while the search is stopped for want of its loss signal. A busy sample
        without it still goes to the tuner (a trial's means skip it); after
        ``UNMEASURED_SAMPLES`` (or a trial's measurement, if longer) in a row the search
        stops: the default buffer, ``degraded``. A measured loss starts it again."""
        tuner = self.tuner
        if math.isfinite(sample.loss) or not tuner.settings.busy(sample):
            if math.isfinite(sample.loss) and self.degraded is not None:
                log.info("buffer search: its loss signal is measured again")
                self.degraded = None
            self._unmeasured = 0
            return False
        self._unmeasured += 1
        limit = max(UNMEASURED_SAMPLES, tuner.settings.measure_samples)
        if self.degraded is None and self._unmeasured >= limit:
            self.degraded = (
                f"spec.buffer.lossSignal {self.config.loss_signal}: "
                f"{UNMEASURED_NAMES[self.config.loss_signal]}; the search holds the default "
                "buffer"
            )
            log.warning("buffer search stopped: %s", self.degraded)
            tuner.reset()
            if self.in_force_s != self.config.default_s:
                await self._set(self.config.default_s)
        return self.degraded is not None

    def on_stale(self) -> None:
        """No usable sample: nothing moves, and the trial running starts over."""
        self.tuner.observe(None)

    async def fail_safe(self) -> None:
        """The administrator's default buffer; the search starts again afresh."""
        self.tuner.reset()
        if self.in_force_s != self.config.default_s:
            await self._set(self.config.default_s)
        self._publish()

    def _publish(self) -> None:
        m, link = self.metrics, self._link
        if self.in_force_s is not None:
            m.buffer.labels(link).set(self.in_force_s)
        for phase in PHASES:
            m.phase.labels(link, phase).set(1.0 if self.tuner.phase == phase else 0.0)
        best = self.tuner.best
        if best is not None:
            m.best.labels(link).set(best.f)
        m.stopped.labels(link).set(1.0 if self.degraded is not None else 0.0)

    def report(self) -> BufferReport:
        """For the controller's /state."""
        best = self.tuner.best
        return BufferReport(
            buffer_s=self.in_force_s,
            phase=self.tuner.phase,
            best_buffer_s=best.buffer_s if best is not None else None,
            best_objective=best.f if best is not None else None,
            trials=len(self.tuner.trials),
            searches=self.tuner.searches,
            loss_signal=self.config.loss_signal,
            message=self.degraded or self._note(),
            degraded=self.degraded is not None,
        )

    def _note(self) -> str | None:
        if not self.tuner.no_feasible:
            return None
        return (
            f"no buffer tried kept every DTN at {self.tuner.settings.dtn_floor:.0%} of its "
            f"target: holding the default {self.config.default_s * 1e3:g} ms"
        )

    async def close(self) -> None:
        await self.actuator.close()
