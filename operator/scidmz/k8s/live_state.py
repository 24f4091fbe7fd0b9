"""A link controller's /state JSON as the link's and its admitted policy's
``status.state`` and ``status.tracking``.

Pure: the operator fetches and writes (``k8s.handlers``); this module only translates SI
numbers into the API's unit strings (``598.2Mbps``, ``101.3ms``). Each DTN host is its
own class at the tap, so a policy's rate is its host's; a controller that reports no hosts
(an older one) gives the link's DTN figures, which with one admitted policy are the same.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from scidmz.api.link import BufferStatus, DtnHostState, LinkStateStatus, TrackingStatus
from scidmz.api.policy import PolicyStateStatus
from scidmz.api.runtime import ControllerState, PolicyTargetReport, SampleReport
from scidmz.api.units import format_duration, format_rate
from scidmz.contract.state import STATE_VARIABLES


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _rate(value: Any) -> str | None:
    number = _finite(value)
    return format_rate(max(number, 0.0)) if number is not None else None


def _duration(value: Any) -> str | None:
    number = _finite(value)
    return format_duration(max(number, 0.0)) if number is not None else None


def live_status(
    controller: ControllerState, sample_time_s: float, capacity_bps: float | None = None
) -> dict[str, Any]:
    """The link's ``{"state": {...}, "tracking": {...}, "buffer": {...}}`` (camelCase),
    empty parts left out: y(t), u(t) and the plan (each DTN host's target and cap, the
    targets' sum, what is left to the campus out of ``capacity_bps``)."""
    return {
        **_state(controller, capacity_bps),
        **_tracking(controller, sample_time_s),
        **_buffer(controller),
    }


def policy_live_status(
    controller: ControllerState,
    sample_time_s: float,
    namespace: str = "",
    name: str = "",
    dtn_host: str = "",
) -> dict[str, Any]:
    """An admitted policy's ``state`` and ``tracking``: its DTN host's rate and RTT, the
    target the controller holds for it, and the link's campus rate limit. Nothing of
    another host's or policy's."""
    result: dict[str, Any] = {}
    state = controller.state
    if state is None:
        return _tracking(controller, sample_time_s)
    hosts = {h.host: h for h in state.dtn_hosts}
    own = hosts.get(dtn_host)
    if hosts and own is None:
        return _tracking(controller, sample_time_s)  # its host not measured (yet)
    rate = own.rate_bps if own is not None else state.dtn_rate_bps
    rtt = own.rtt_s if own is not None else state.dtn_rtt_s
    mine = next(
        (p for p in controller.policies if (p.namespace, p.name) == (namespace, name)), None
    )
    target = (
        mine.target_rate_bps
        if mine
        else (controller.target_rate_bps if not controller.policies else None)
    )
    if _finite(rate) is not None:
        short = target - rate if target is not None and rate is not None else None
        result["state"] = PolicyStateStatus(
            dtn_rate=_rate(rate),
            dtn_rtt=_duration(rtt),
            target_rate=_rate(target),
            campus_rate_limit=_rate(controller.campus_rate_limit_bps),
            enforced_by=_enforced_by(mine),
            dtn_rate_limit=_cap(mine),
            shortfall=_rate(short) if short is not None and short > 0 else None,
            sampled_at=state.sampled_at,
        ).model_dump(by_alias=True, exclude_none=True)
    return {**result, **_tracking(controller, sample_time_s)}


def _state(controller: ControllerState, capacity_bps: float | None) -> dict[str, Any]:
    result: dict[str, Any] = {}
    state = controller.state
    measured = state is not None and any(
        _finite(getattr(state, name)) is not None for name in STATE_VARIABLES
    )
    target = _finite(controller.target_rate_bps)
    share = capacity_bps - target if capacity_bps is not None and target is not None else None
    if state is not None and measured:
        flows = _finite(state.active_flows)
        status = LinkStateStatus(
            dtn_rate=_rate(state.dtn_rate_bps),
            campus_rate=_rate(state.campus_rate_bps),
            dtn_rtt=_duration(state.dtn_rtt_s),
            campus_rtt=_duration(state.campus_rtt_s),
            dtn_queuing_delay=_duration(state.dtn_queuing_delay_s),
            campus_queuing_delay=_duration(state.campus_queuing_delay_s),
            active_flows=round(flows) if flows is not None else None,
            campus_rate_limit=_rate(controller.campus_rate_limit_bps),
            target_rate=_rate(target),
            campus_share=_rate(share),
            sampled_at=state.sampled_at,
            failsafe_active=controller.failsafe_active,
            dtn_hosts=_dtn_hosts(controller, state) or None,
        )
        fields = status.model_dump(by_alias=True, exclude_none=True)
        if fields:
            result["state"] = fields
    elif controller.failsafe_active:  # no sample yet: say at least what it holds
        held = LinkStateStatus(
            campus_rate_limit=_rate(controller.campus_rate_limit_bps), failsafe_active=True
        )
        result["state"] = held.model_dump(by_alias=True, exclude_none=True)
    return result


def _dtn_hosts(controller: ControllerState, state: SampleReport) -> list[DtnHostState]:
    """Each DTN host the sample measured or a policy holds a target on, in the sample's
    order: its plan (target, how it is held, its cap) beside what the tap saw."""
    plans = {p.dtn_host: p for p in controller.policies}
    measured = {h.host: h for h in state.dtn_hosts}
    hosts = [*measured, *(h for h in plans if h not in measured)]
    rows = []
    for host in hosts:
        seen, plan = measured.get(host), plans.get(host)
        rows.append(
            DtnHostState(
                host=host,
                rate=_rate(seen.rate_bps) if seen else None,
                rtt=_duration(seen.rtt_s) if seen else None,
                queuing_delay=_duration(seen.queuing_delay_s) if seen else None,
                target_rate=_rate(plan.target_rate_bps) if plan else None,
                enforced_by=_enforced_by(plan),
                rate_limit=_cap(plan),
            )
        )
    return rows


def _enforced_by(plan: PolicyTargetReport | None) -> Literal["DtnCap", "LinkSum"] | None:
    """How a policy's rate is held: its host's own cap loop, or only the link's sum."""
    if plan is None:
        return None
    return "DtnCap" if plan.capped else "LinkSum"


def _cap(plan: PolicyTargetReport | None) -> str | None:
    """The cap in force on a policy's host, where it has a cap loop."""
    return _rate(plan.dtn_rate_limit_bps) if plan is not None and plan.capped else None


def _tracking(controller: ControllerState, sample_time_s: float) -> dict[str, Any]:
    result: dict[str, Any] = {}
    mrae = _finite(controller.tracking.mrae)
    window = controller.tracking.window
    if mrae is not None and window > 0:
        result["tracking"] = TrackingStatus(
            mrae=round(mrae, 4), window=format_duration(window * sample_time_s)
        ).model_dump(by_alias=True, exclude_none=True)
    return result


def _buffer(controller: ControllerState) -> dict[str, Any]:
    report = controller.buffer
    if report is None:
        return {}
    best = _finite(report.best_objective)
    status = BufferStatus(
        in_force=_duration(report.buffer_s),
        phase=report.phase,
        best_buffer=_duration(report.best_buffer_s),
        best_objective=round(best, 4) if best is not None else None,
        searches=report.searches,
        loss_signal=report.loss_signal,
        message=report.message,
        degraded=report.degraded or None,
    )
    return {"buffer": status.model_dump(by_alias=True, exclude_none=True)}
