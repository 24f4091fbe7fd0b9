"""The controller's /state JSON as the policy's ``status.state`` and ``status.tracking``.

Pure: the operator fetches (``reconcile.refresh_live_state``) and writes; this module only
translates SI numbers into the API's unit strings (``598.2Mbps``, ``101.3ms``).
"""

from __future__ import annotations

import math
from typing import Any

from scidmz.api.policy import StateStatus, TrackingStatus
from scidmz.api.units import format_duration, format_rate


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _rate(value: Any) -> str | None:
    number = _finite(value)
    return format_rate(max(number, 0.0)) if number is not None else None


def _duration(value: Any) -> str | None:
    number = _finite(value)
    return format_duration(max(number, 0.0)) if number is not None else None


def live_status(controller_state: dict[str, Any], sample_time_s: float) -> dict[str, Any]:
    """``{"state": {...}, "tracking": {...}}`` (camelCase), empty parts left out."""
    result: dict[str, Any] = {}
    state = controller_state.get("state") or {}
    if state:
        flows = _finite(state.get("active_flows"))
        status = StateStatus(
            dtn_rate=_rate(state.get("dtn_rate_bps")),
            campus_rate=_rate(state.get("campus_rate_bps")),
            dtn_rtt=_duration(state.get("dtn_rtt_s")),
            campus_rtt=_duration(state.get("campus_rtt_s")),
            dtn_queuing_delay=_duration(state.get("dtn_queuing_delay_s")),
            campus_queuing_delay=_duration(state.get("campus_queuing_delay_s")),
            active_flows=round(flows) if flows is not None else None,
            campus_rate_limit=_rate(controller_state.get("campusRateLimitBps")),
            sampled_at=state.get("sampledAt"),
        )
        fields = status.model_dump(by_alias=True, exclude_none=True)
        if fields:
            result["state"] = fields
    tracking = controller_state.get("tracking") or {}
    mrae = _finite(tracking.get("mrae"))
    window = tracking.get("window")
    if mrae is not None and isinstance(window, int) and window > 0:
        result["tracking"] = TrackingStatus(
            mrae=round(mrae, 4), window=format_duration(window * sample_time_s)
        ).model_dump(by_alias=True, exclude_none=True)
    return result
