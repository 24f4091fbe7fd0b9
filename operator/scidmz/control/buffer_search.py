"""P4BS buffer sizing (seed 003 §IV-E, algorithms 1 and 2): the border router's buffer as a
second, slower knob, chosen by Bayesian optimisation.

The objective, eq. (2): f = −[w1·p/lossScale + w2·d/maxQueueDelay], with p the loss (method 1,
retransmissions) and d the mean queuing delay; f is maximised. Buffers are in seconds at
line rate (bytes = s · B / 8).

* Algorithm 1, expanding the search space: start at one BDP (the long flows' SRTT); while the
  loss over a trial exceeds ε_p, double; at maxQueueDelay stop there. The space becomes
  [RTT_min / √N (Stanford), the buffer reached], within the administrator's [min, max].
  The authors' code (p4bs-bo): ε_p = 0.0025; at a loss ≥ 0.03 the bounds jump to [BDP, 100 ms].
* Algorithm 2, the search: a Gaussian process (prior mean 0, RBF kernel, eqs. (3)–(11)) over
  the trials so far, and the next buffer where the expected improvement (eqs. (12)–(13)) is
  largest, on a 1.5 ms grid, until the largest EI is below ``stop_ei`` or ``max_iterations``
  trials ran; then stay on the best buffer observed (HOLD).
* HOLD watches f with a smoothed z-score (the code: an EWMA of 0.8, lag 50, threshold 10σ,
  influence 0.1) and restarts the search on a signal.

Ours (P4BS has no throughput target, seed 003 spec §3.3):

* A trial is measured once the queue has settled after its buffer change (TCP's transient
  is not scored): at least ``settle_samples`` after it, and then when the mean queuing
  delay over the last ``settle_window`` samples lies within ``settle_tolerance`` (or
  ``settle_floor_s``) of the mean over the window before, or after ``max_wait_samples``
  whatever the queue does. A Cubic DTN at 100 ms fills a larger buffer over tens of
  seconds; a fixed wait scored such buffers before they had filled. Then ``measure``
  samples are scored.
* A trial is *infeasible* if the DTN's median sample over it runs below ``dtn_floor`` · R*
  (with several DTNs, any DTN below that share of its own target; the median, not the mean:
  a BBR DTN's ProbeRTT dips one sample in ten to ~0.7 R* at any buffer), or if the campus
  loop could do no more for the DTN in it (its filter held u up, and no DTN cap holds the
  DTNs' rates instead: with caps, u sits at B − Σ caps by design). It then scores
  ``INFEASIBLE_F``. A trial is cut short, infeasible, as soon as every one of the last
  ``settle_samples`` samples (the least wait) has the DTN under that floor: a buffer that
  starves the DTN costs its transfer for as long as it is tried (a BBR DTN's ProbeRTT and
  its cap's recovery from it take two samples, which a two-sample rule cut short). Algorithm 1
  also doubles a buffer the DTN could not keep its target at (its loss aside). If no trial
  of a search is feasible, the search holds the administrator's default buffer
  (``no_feasible``).
* The search tries no buffer below ``safe_step`` (a half) of the smallest buffer the DTN
  kept its target at so far: algorithm 1 doubles up, the search halves down at most. EI
  with few trials is flat far from them, and its first pick went to the bottom of the
  space, where a 100 ms Cubic DTN starves and takes tens of seconds to recover, well into
  the next trial.
* The search stops when the largest EI is below ``stop_ei`` *or* below ``stop_noise`` times
  the measured noise of f (the median standard error of the trials' f): an improvement
  the trials cannot tell from noise is not worth a trial.
* Below the utilisation gate (the code: 98 %) nothing is searched (IDLE) and the buffer
  stays where it is; nor until the DTN has held ``dtn_floor`` of its target over the last
  ``settle_window`` samples: on real TCP a search begun as the link filled, while the DTN
  was still in slow start, judged its first trials by the DTN's ramp, not by the buffer.
The code's GP hyper-parameters are used as they are: a fixed RBF length scale of 0.03525
and noise 1.25e-4, on the buffer scaled by 200 ms (no likelihood refit).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from scidmz.contract.state import DtnFigures, PathSignals, StateVector
from scidmz.control.buffer_gp import next_buffer, objective
from scidmz.control.quality import finite_mean

Phase = Literal["idle", "expand", "search", "hold"]
LossSignal = Literal["path", "bottleneck", "actuator"]
"""Where the loss of eq. (2) comes from (``spec.buffer.lossSignal``): the path's
retransmissions (method 1), the border router's drops from the tap's counters (method 2),
or the queue's own drop counter, read through the buffer actuator."""
SEARCHING: tuple[Phase, ...] = ("expand", "search")

INFEASIBLE_F = -2.0
"""A trial that broke the rate loop: worse than any feasible f (f1 ≤ ~1 at a loss of 5 %,
f2 ≤ 1), so the search leaves its neighbourhood."""


@dataclass
class ZScore:
    """The smoothed z-score signal (the authors' code; lag, threshold in σ, influence of a
    signalled point on the filtered series)."""

    lag: int = 50
    threshold: float = 10.0
    influence: float = 0.1
    _filtered: deque[float] = field(default_factory=deque)

    def update(self, value: float) -> bool:
        """Add one value; True when it lies ``threshold`` σ from the lagged mean."""
        window = self._filtered
        if len(window) < self.lag:
            window.append(value)
            return False
        values = np.asarray(window)
        mean, std = float(values.mean()), float(values.std())
        signal = abs(value - mean) > self.threshold * std and std > 0
        kept = self.influence * value + (1 - self.influence) * window[-1] if signal else value
        window.append(kept)
        window.popleft()
        return signal


PAYLOAD_SHARE = 1448 / 1514
"""What the collector's class rates sum to on a full link, as a share of B (ours; the
utilisation gate is judged against it). B counts frames (a tbf, a router's port); the rates
count what the tap sees of them: payload on the twin, IP bytes of GRO aggregates (one header
per ~64 KB) on the lab's taps, so a full link reads ~0.96 B (the lab at 1 Gb/s: 962 Mb/s)
and the authors' 98 % gate, judged against B, never opened. A switch that counts whole
frames reads up to 1.05 of this share, and the gate opens a few points early there."""


@dataclass(frozen=True)
class TunerSettings:
    """``spec.buffer``'s search settings, in SI units."""

    capacity_bps: float
    min_s: float = 0.010
    max_s: float = 0.200
    default_s: float = 0.100
    max_queue_delay_s: float = 0.200
    loss_scale: float = 0.05
    w_loss: float = 0.5
    w_delay: float = 0.5
    settle_samples: int = 4
    """The least wait after a buffer change (samples)."""
    settle_window: int = 2
    settle_tolerance: float = 0.1
    settle_floor_s: float = 0.001
    """Two windows' mean queuing delays this close count as settled at any relative
    tolerance (a near-empty queue's relative noise is large)."""
    max_wait_samples: int = 30
    measure_samples: int = 5
    max_iterations: int = 4
    stop_ei: float = 1e-3
    stop_noise: float = 1.0
    safe_step: float = 0.5
    utilisation_gate: float = 0.98
    dtn_floor: float = 0.95
    expand_loss: float = 0.0025
    jump_loss: float = 0.03
    z_lag: int = 50
    z_threshold: float = 10.0
    z_influence: float = 0.1
    f_smoothing: float = 0.8

    def clamp(self, buffer_s: float) -> float:
        return min(max(buffer_s, self.min_s), self.max_s)

    def objective(self, loss: float, delay_s: float) -> float:
        """Eq. (2) with these weights and scales; an unmeasured term counts as 0."""
        return objective(
            _zero(loss), _zero(delay_s), self.loss_scale, self.max_queue_delay_s,
            self.w_loss, self.w_delay,
        )  # fmt: skip

    def busy(self, sample: TunerSample) -> bool:
        """The link is full enough to search (the utilisation gate)."""
        return math.isfinite(sample.utilisation) and sample.utilisation >= self.utilisation_gate

    def detector(self) -> ZScore:
        return ZScore(self.z_lag, self.z_threshold, self.z_influence)


@dataclass(frozen=True)
class TunerSample:
    """What one sample time tells the tuner (NaN where not measured)."""

    utilisation: float
    loss: float
    """Method 1's retransmission ratio over both classes."""
    mean_delay_s: float
    dtn_rate_bps: float
    target_bps: float
    saturated: bool
    """The campus loop could do no more for the DTN at this sample
    (``Decision.campus_starved_for_dtn``)."""
    srtt_s: float
    rtt_min_s: float
    long_flows: float
    border_loss: float = math.nan
    """The border router's own loss, when measured (the queue's drop counter or method 2);
    what algorithm 1 expands on, whatever ``loss`` is."""
    dtn_ratios: tuple[float, ...] = ()
    """Several DTNs: each admitted DTN host's rate over its own target (NaN unmeasured)."""


@dataclass(frozen=True)
class Trial:
    buffer_s: float
    f: float
    loss: float
    mean_delay_s: float
    feasible: bool
    f_error: float = math.nan
    """The standard error of f over the trial's samples (the search's noise)."""
    waited: int = 0
    """Samples from the buffer change until the queue had settled."""
    border_loss: float = math.nan


@dataclass
class BufferTuner:
    """The state machine (IDLE → EXPAND → SEARCH → HOLD → restart). Feed it one sample per
    sample time with :meth:`observe`; it answers the buffer to set (None: keep it). No I/O."""

    settings: TunerSettings
    buffer_s: float = math.nan
    phase: Phase = "idle"
    trials: list[Trial] = field(default_factory=list)
    bounds_s: tuple[float, float] = (math.nan, math.nan)
    searches: int = 0
    iterations: int = 0
    """Algorithm 2's trials in the current search."""
    no_feasible: bool = False
    """The last search found no buffer the DTN kept its target at, and holds the default."""
    _window: list[TunerSample] = field(default_factory=list)
    _settling: list[float] = field(default_factory=list)
    _recent: list[TunerSample] = field(default_factory=list)
    _settled: bool = False
    _age: int = 0
    _detector: ZScore = field(default_factory=ZScore)
    _smoothed_f: float = math.nan

    def __post_init__(self) -> None:
        if math.isnan(self.buffer_s):
            self.buffer_s = self.settings.clamp(self.settings.default_s)

    def reset(self) -> None:
        """Back to IDLE at the default buffer, the search's trials forgotten (the count of
        searches is kept)."""
        self.phase = "idle"
        self.buffer_s = self.settings.clamp(self.settings.default_s)
        self.trials = []
        self.bounds_s = (math.nan, math.nan)
        self.iterations = 0
        self.no_feasible = False
        self.observe(None)

    @property
    def best(self) -> Trial | None:
        return max(self.trials, key=lambda t: t.f) if self.trials else None

    def observe(self, sample: TunerSample | None) -> float | None:
        """One sample time. ``None`` (stale telemetry): nothing moves and the trial running
        starts over when samples come back."""
        if sample is None:
            self._restart_trial()
            return None
        s = self.settings
        if self.phase == "idle":
            self._recent = [*self._recent, sample][-s.settle_window :]
            ready = len(self._recent) == s.settle_window and not self._dtn_short(self._recent)
            return self._start(sample) if s.busy(sample) and ready else None
        if self.phase == "hold":
            return self._watch(sample)
        self._age += 1
        self._recent.append(sample)
        recent = self._recent[-s.settle_samples :]
        if self._age >= s.settle_samples and self._dtn_starved(recent):
            trial = self._score(recent, waited=self._age - len(recent))  # cut short
        elif not self._settled:
            self._settling.append(sample.mean_delay_s)
            self._settled = self._queue_settled()
            return None
        else:
            self._window.append(sample)
            if len(self._window) < s.measure_samples:
                return None
            trial = self._score(self._window, waited=self._age - len(self._window))
        self._restart_trial()
        self.trials.append(trial)
        return self._expand(trial, sample) if self.phase == "expand" else self._search()

    def _restart_trial(self) -> None:
        self._window = []
        self._recent = []
        self._settling = []
        self._settled = False
        self._age = 0

    def _queue_settled(self) -> bool:
        """The settling rule (module docstring): past the least wait, the last window's mean
        queuing delay within the tolerance of the window's before, or the longest wait."""
        s = self.settings
        if self._age >= s.max_wait_samples:
            return True
        w = s.settle_window
        if self._age < s.settle_samples or len(self._settling) < 2 * w:
            return False
        before = finite_mean(self._settling[-2 * w : -w])
        last = finite_mean(self._settling[-w:])
        if not (math.isfinite(before) and math.isfinite(last)):
            return False
        return abs(last - before) <= max(s.settle_tolerance * before, s.settle_floor_s)

    # ---- phases ------------------------------------------------------------------------
    def _start(self, sample: TunerSample) -> float:
        """Algorithm 1's first step: one BDP (the SRTT at line rate)."""
        s = self.settings
        self.phase = "expand"
        self.trials = []
        self.searches += 1
        self.no_feasible = False
        self._restart_trial()
        srtt = sample.srtt_s if math.isfinite(sample.srtt_s) else s.default_s
        return self._set(s.clamp(srtt))

    def _expand(self, trial: Trial, sample: TunerSample) -> float:
        s = self.settings
        bdp = s.clamp(sample.srtt_s if math.isfinite(sample.srtt_s) else trial.buffer_s)
        top = min(s.max_s, s.max_queue_delay_s)
        border_clear = math.isfinite(trial.border_loss) and trial.border_loss <= s.expand_loss
        if trial.loss >= s.jump_loss and not border_clear:
            self.bounds_s = (bdp, s.clamp(0.100))  # the code's jump
        elif trial.buffer_s < top and (
            not trial.feasible or (trial.loss > s.expand_loss and not border_clear)
        ):
            return self._set(min(2 * trial.buffer_s, top))
        else:
            n = sample.long_flows if math.isfinite(sample.long_flows) and sample.long_flows else 1
            rtt_min = sample.rtt_min_s if math.isfinite(sample.rtt_min_s) else trial.buffer_s
            low = s.clamp(rtt_min / math.sqrt(n))
            self.bounds_s = (min(low, trial.buffer_s), trial.buffer_s)
        self.phase = "search"
        self.iterations = 0
        return self._search()

    def _search(self) -> float:
        s = self.settings
        low, high = self.bounds_s
        feasible = [t.buffer_s for t in self.trials if t.feasible]
        if feasible:  # a safe step: at most halfway down from a buffer the DTN kept its target at
            low = max(low, min(min(feasible) * s.safe_step, high))
        if self.iterations < s.max_iterations and high > low:
            candidate, ei = next_buffer(
                [t.buffer_s for t in self.trials], [t.f for t in self.trials], low, high,
                self.noise,
            )  # fmt: skip
            if ei >= max(s.stop_ei, s.stop_noise * self.noise):
                self.iterations += 1
                return self._set(candidate)
        best = self.best
        self.phase = "hold"
        self._detector = s.detector()
        self._smoothed_f = math.nan
        if best is None or not best.feasible:
            self.no_feasible = True
            return self._set(s.default_s)
        return self._set(best.buffer_s)

    @property
    def noise(self) -> float:
        """The measured noise of a trial's f: the median standard error over this search's
        trials (0 before any was measured)."""
        errors = [t.f_error for t in self.trials if math.isfinite(t.f_error)]
        return float(np.median(errors)) if errors else 0.0

    def _watch(self, sample: TunerSample) -> float | None:
        s = self.settings
        if not s.busy(sample):
            return None
        f = s.objective(sample.loss, sample.mean_delay_s)
        smoothed = f if math.isnan(self._smoothed_f) else (
            s.f_smoothing * self._smoothed_f + (1 - s.f_smoothing) * f
        )  # fmt: skip
        self._smoothed_f = smoothed
        if self._detector.update(smoothed):
            return self._start(sample)
        return None

    def _set(self, buffer_s: float) -> float:
        self.buffer_s = self.settings.clamp(buffer_s)
        return self.buffer_s

    def _dtn_short(self, window: list[TunerSample]) -> bool:
        """The DTN (or, with several, any DTN) ran under ``dtn_floor`` of its target over
        ``window``, judged on the median sample: a BBR DTN's ProbeRTT empties its pipe for
        ~0.3 s every 10 s whatever the buffer, one sample at ~0.7 R*, which pulled a 5 s
        mean under 0.95 at every buffer tried."""
        floor = self.settings.dtn_floor
        return any(float(np.median(c)) < floor for c in _ratio_columns(window) if c)

    def _dtn_starved(self, window: list[TunerSample]) -> bool:
        """Every sample of ``window`` has the DTN (or any DTN) under ``dtn_floor``."""
        floor = self.settings.dtn_floor
        return any(c and max(c) < floor for c in _ratio_columns(window))

    def _score(self, window: list[TunerSample], waited: int) -> Trial:
        s = self.settings
        loss = finite_mean([x.loss for x in window])
        delay = finite_mean([x.mean_delay_s for x in window])
        each = [s.objective(x.loss, x.mean_delay_s) for x in window]
        f_error = float(np.std(each, ddof=1) / math.sqrt(len(each))) if len(each) > 1 else math.nan
        feasible = not any(x.saturated for x in window) and not self._dtn_short(window)
        f = s.objective(loss, delay)
        return Trial(
            self.buffer_s, f if feasible else INFEASIBLE_F, loss, delay, feasible,
            f_error=f_error, waited=waited,
            border_loss=finite_mean([x.border_loss for x in window]),
        )  # fmt: skip


def _ratio_columns(window: list[TunerSample]) -> list[list[float]]:
    """Per DTN over ``window``, the measured rate-to-target ratios: the DTNs' aggregate,
    then each host's (several DTNs; only when every sample names the same hosts). NaN
    samples left out."""
    aggregate = [
        x.dtn_rate_bps / x.target_bps
        for x in window
        if math.isfinite(x.target_bps) and x.target_bps > 0 and math.isfinite(x.dtn_rate_bps)
    ]
    rows = [x.dtn_ratios for x in window]
    hosts: list[list[float]] = []
    if rows and rows[0] and all(len(r) == len(rows[0]) for r in rows):
        hosts = [[v for v in column if math.isfinite(v)] for column in zip(*rows, strict=True)]
    return [aggregate, *hosts]


def dtn_ratios(targets: Mapping[str, float], figures: Sequence[DtnFigures]) -> tuple[float, ...]:
    """Each DTN host with a target: its measured rate over that target, in ``targets``'
    order (NaN where the sample has no rate for it). Empty for one DTN host: the aggregate
    is its own."""
    if len(targets) < 2:
        return ()
    rates = {f.host: f.rate_bps for f in figures}
    return tuple(
        rates.get(host, math.nan) / target if target > 0 else math.nan
        for host, target in targets.items()
    )


def _zero(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def tuner_sample(
    state: StateVector,
    signals: PathSignals,
    target_bps: float,
    capacity_bps: float,
    saturated: bool,
    loss_signal: LossSignal = "path",
    queue_loss: float = math.nan,
    ratios: tuple[float, ...] = (),
) -> TunerSample:
    """What the tuner reads from one sample. Ours, where P4BS measures one population of
    flows and here two classes share the link: the loss and the mean queuing delay of both
    classes weighed by their rates; the SRTT behind "one BDP" as their rate-weighted RTT
    less each class's mean queuing delay (the path's own RTT: with the RTT as measured, a
    full 100 ms buffer made the first trial 154 ms on the twin); RTT_min as the smaller of
    those two path RTTs; the utilisation as their rates over ``capacity_bps`` (B, in frames)
    times ``PAYLOAD_SHARE``. The loss is ``loss_signal``'s: the classes' retransmissions
    (``path``), method 2 (``bottleneck``) or ``queue_loss``, the queue's own drop ratio over
    the sample as its actuator counts it (``actuator``); the border router's own loss is
    ``queue_loss`` where it was read, else method 2's."""
    rates = (_zero(state.dtn_rate_bps), _zero(state.campus_rate_bps))
    total = sum(rates)

    def weighted(dtn: float, campus: float) -> float:
        pairs = [(r, v) for r, v in zip(rates, (dtn, campus), strict=True) if math.isfinite(v)]
        weight = sum(r for r, _ in pairs)
        return sum(r * v for r, v in pairs) / weight if weight > 0 else math.nan

    paths = (
        max(state.dtn_rtt_s - _zero(signals.dtn_mean_queuing_delay_s), 0.0),
        max(state.campus_rtt_s - _zero(signals.campus_mean_queuing_delay_s), 0.0),
    )
    finite_paths = [p for p in paths if math.isfinite(p)]
    border = queue_loss if math.isfinite(queue_loss) else signals.bottleneck_loss_ratio
    loss = {
        "path": lambda: weighted(
            signals.dtn_retransmission_ratio, signals.campus_retransmission_ratio
        ),
        "bottleneck": lambda: signals.bottleneck_loss_ratio,
        "actuator": lambda: queue_loss,
    }[loss_signal]()
    return TunerSample(
        utilisation=total / (capacity_bps * PAYLOAD_SHARE) if capacity_bps > 0 else math.nan,
        loss=loss,
        mean_delay_s=weighted(
            signals.dtn_mean_queuing_delay_s, signals.campus_mean_queuing_delay_s
        ),
        dtn_rate_bps=state.dtn_rate_bps,
        target_bps=target_bps,
        saturated=saturated,
        srtt_s=weighted(*paths),
        rtt_min_s=min(finite_paths) if finite_paths else math.nan,
        long_flows=signals.long_flows,
        border_loss=border,
        dtn_ratios=ratios,
    )
