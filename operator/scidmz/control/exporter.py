"""Prometheus exposition of the controller's decisions, from one snapshot per decision.

As the collector's ``StateExporter`` does for y(t): the loop replaces an immutable
``ControllerSnapshot`` after each decision (and on the fail-safe), and this custom
collector renders it at scrape time, so a scrape never mixes two decisions (u(t) of one
sample with û(t) of the next). Rates are exported in bytes per second (Prometheus base
units); the loop works in bit/s. ``scidmz_sample_age_seconds`` is, here as in the
collector, the seconds since the latest good sample at scrape time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from scidmz.control.decision import Decision
from scidmz.control.features import PolicyTarget, Setpoint
from scidmz.metrics import names
from scidmz.metrics.snapshot import LABELS, SnapshotExporter


@dataclass(frozen=True)
class ControllerSnapshot:
    """What the controller last decided and applied (bit/s; None: nothing yet)."""

    setpoint: Setpoint
    applied_bps: float | None = None
    dtn_applied_bps: float | None = None
    decision: Decision | None = None
    mrae: float = math.nan
    iae_bits: float = math.nan
    failsafe: bool = False
    last_fresh_s: float | None = None
    pinned: bool = False
    restore_failed: bool = False
    policies: tuple[PolicyTarget, ...] = ()


class ControllerExporter(SnapshotExporter[ControllerSnapshot]):
    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        if s is None:
            return

        def in_bytes(bps: float | None) -> float | None:
            return bps / 8 if bps is not None else None

        d = s.decision
        out = d.output if d else None
        age = max(0.0, self._clock() - s.last_fresh_s) if s.last_fresh_s is not None else None
        rows: list[tuple[str, str, float | None]] = [
            (names.TARGET_RATE, "R*, the DTN target rate.", s.setpoint.target_rate_bps / 8),
            (names.CAPACITY, "B_max, the bottleneck capacity.", s.setpoint.capacity_bps / 8),
            (names.CAMPUS_RATE_LIMIT, "u(t), the campus rate applied.", in_bytes(s.applied_bps)),
            (names.DTN_RATE_LIMIT, "The DTN's sending-rate cap applied (DTN actuator).",
             in_bytes(s.dtn_applied_bps)),
            (names.MODEL_OUTPUT, "û(t), the inverse model's (or PI's) base rate.",
             in_bytes(d.u_hat_bps if d else None)),
            (names.CONTROL_ERROR, "e(t) = R_DTN − R*.", in_bytes(d.error_bps if d else None)),
            (names.CONTROL_PROPORTIONAL, "Kp·e(t).",
             in_bytes(out.proportional_bps if out else None)),
            (names.CONTROL_INTEGRAL, "The integral action I(t).",
             in_bytes(out.integral_bps if out else None)),
            (names.CONTROL_WINDUP, "w(t) = u(t) − ū(t): non-zero when saturated.",
             in_bytes(out.windup_bps if out else None)),
            (names.TRACKING_MRAE, "MRAE (eq. 3) over the last 120 samples.", s.mrae),
            (names.TRACKING_IAE, "IAE (eq. 2) over the last 120 samples, bytes.", s.iae_bits / 8),
            (names.FAILSAFE_ACTIVE, "1 while the fail-safe rate is applied.", float(s.failsafe)),
            (names.CONTROLLER_PINNED, "1 while u(t) has been held at a limit by the integral "
             "for longer than pinnedAfter.", float(s.pinned)),
            (names.FAILSAFE_RESTORE_FAILED, "1 while a stopping controller cannot restore "
             "its fail-safe rates.", float(s.restore_failed)),
            (names.SAMPLE_AGE, names.SAMPLE_AGE_HELP, age),
        ]  # fmt: skip
        for name, doc, value in rows:
            yield from self.gauge(name, doc, value)
        if s.policies:
            per_policy = GaugeMetricFamily(
                names.POLICY_TARGET_RATE,
                "An admitted policy's target rate (its share of R*).",
                labels=[*LABELS, "namespace", "policy", "dtn_host"],
            )
            for p in s.policies:
                per_policy.add_metric(
                    [*self._labels, p.namespace, p.name, p.dtn_host], p.target_rate_bps / 8
                )
            yield per_policy
