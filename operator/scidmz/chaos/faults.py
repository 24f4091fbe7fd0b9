"""Faults on the simulated loop and what they cost: the measurements of ``bench/chaos.py``.

Each fault signals one process of a running ``LocalLoop`` (SIGKILL, then a restart; or
SIGSTOP, then SIGCONT) for ``outage_s``, then watches the loop come back. Measured from the
probes, on the monotonic clock, to the probes' resolution (``PROBE_S``):

- time to fail-safe: from the fault to the fail-safe rate in force at the simulator (a
  collector fault) or to the controller's fail-safe mode (a switch fault: the simulator,
  which is also the actuator, is gone with it). Target: ≤ staleAfter + T. Not applicable to
  a controller fault: the rate in force then simply stays (checked: ``held``).
- time to resume: from the restart (or SIGCONT) to the controller deciding on fresh
  samples again, off its fail-safe. Target: < 10 s.
- the largest jump of u(t): between consecutive campus rates the simulator applied (its
  actuation journal, every step, not a sample of it), from the rate in force at the
  restart until ``observe_s`` after the resume, steps onto the fail-safe rate excluded (the
  fail-safe is the point of a fault, not a control decision). Target: ≤ maxStep.
"""

from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass
from itertools import pairwise

from scidmz.chaos.local_loop import Actuation, LocalLoop

RATE_MATCH_BPS = 1.0
"""Rates read back through the simulator's float32 state compare within this."""


@dataclass(frozen=True)
class Fault:
    component: str  # target | collector | controller
    kind: str  # kill | stop

    @property
    def label(self) -> str:
        how = "SIGKILL + restart" if self.kind == "kill" else "SIGSTOP + SIGCONT"
        name = "switch (target)" if self.component == "target" else self.component
        return f"{name}: {how}"


ALL_FAULTS = tuple(
    Fault(component, kind)
    for component in ("collector", "target", "controller")
    for kind in ("kill", "stop")
)


@dataclass(frozen=True)
class FaultResult:
    fault: Fault
    outage_s: float
    failsafe_s: float | None
    """From the fault to the fail-safe; None when not applicable or never reached."""
    resume_s: float | None
    """From clearing the fault to control resumed; None if it did not resume."""
    max_jump_bps: float
    """The largest step of u(t) in force after the fault cleared (fail-safe steps excluded)."""
    held: bool | None
    """For a controller fault: the rate in force stayed unchanged while it was down."""
    accepted_s: float | None = None
    """For a switch restart: from clearing the fault to the switch accepting connections."""

    @property
    def resume_after_accept_s(self) -> float | None:
        """For a switch restart: from the switch accepting again to control resumed, the
        part of the outage the loop itself adds (the switch's own start-up excluded)."""
        if self.resume_s is None or self.accepted_s is None:
            return None
        return self.resume_s - self.accepted_s


def _is(rate: float | None, expected: float) -> bool:
    return rate is not None and abs(rate - expected) <= RATE_MATCH_BPS


def max_jump(actuations: list[Actuation], since: float, until: float, failsafe_bps: float) -> float:
    """The largest |Δu| between consecutive campus rates the simulator applied from the one
    in force at ``since`` to ``until``, within one run of the target, steps onto the
    fail-safe rate excluded (pure: the benchmark's figure from the journal)."""
    before = [a for a in actuations if a.t < since]
    window = before[-1:] + [a for a in actuations if since <= a.t <= until]
    jumps = [
        abs(b.rate_bps - a.rate_bps)
        for a, b in pairwise(window)
        if a.target_run == b.target_run and not _is(b.rate_bps, failsafe_bps)
    ]
    return max(jumps, default=0.0)


def failsafe_reached(loop: LocalLoop, fault: Fault, since: float) -> float | None:
    """When the fail-safe took hold after a fault at ``since`` (None: not applicable)."""
    failsafe = loop.config.failsafe.rate_bps
    if fault.component == "controller":
        return None
    if fault.component == "collector":
        for probe in list(loop.probes.truth):
            if probe.t > since and _is(probe.u_bps, failsafe):
                return probe.t
        return None
    for c in list(loop.probes.controller):
        if c.t > since and c.reachable and c.failsafe:
            return c.t
    return None


def accepting_at(address: str, timeout_s: float, poll_s: float = 0.01) -> float | None:
    """When ``host:port`` first accepts a TCP connection (monotonic), polled every
    ``poll_s``; None if not within ``timeout_s``."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=poll_s * 10):
                return time.monotonic()
        except OSError:
            time.sleep(poll_s)
    return None


def run_fault(
    loop: LocalLoop, fault: Fault, outage_s: float, observe_s: float, resume_timeout_s: float
) -> FaultResult:
    """One fault on a loop that is controlling; leaves it controlling again (or raises
    TimeoutError when it does not come back within ``resume_timeout_s``)."""
    loop.wait_until(loop.controlling, 60, "control before the fault")
    struck = time.monotonic()
    loop.signal(fault.component, signal.SIGKILL if fault.kind == "kill" else signal.SIGSTOP)
    time.sleep(outage_s)
    cleared = time.monotonic()
    accepted_at: float | None = None
    if fault.kind == "kill":
        loop.spawn(fault.component)
        if fault.component == "target":
            accepted_at = accepting_at(loop.switch, resume_timeout_s)
    else:
        loop.signal(fault.component, signal.SIGCONT)
    failsafe_at = failsafe_reached(loop, fault, struck)
    resumed_at: float | None = None
    try:
        loop.wait_until(
            lambda: loop.resumed_at(cleared) is not None, resume_timeout_s, "resumed control"
        )
        resumed_at = loop.resumed_at(cleared)  # the probe's time, not the poll's
    except TimeoutError:
        pass
    time.sleep(observe_s)
    held = None
    if fault.component == "controller":
        during = [
            p.u_bps for p in loop.probes.truth if struck < p.t < cleared and p.u_bps is not None
        ]
        held = bool(during) and max(during) - min(during) <= RATE_MATCH_BPS
    return FaultResult(
        fault=fault,
        outage_s=cleared - struck,
        failsafe_s=None if failsafe_at is None else failsafe_at - struck,
        resume_s=None if resumed_at is None else resumed_at - cleared,
        max_jump_bps=max_jump(
            loop.probes.actuations, cleared, time.monotonic(), loop.config.failsafe.rate_bps
        ),
        held=held,
        accepted_s=None if accepted_at is None else accepted_at - cleared,
    )


def actuation_trace(loop: LocalLoop, since: float) -> str:
    """Every campus rate applied since ``since`` (for a failing check's message)."""
    return "\n".join(
        f"{a.t - since:6.2f}s run {a.target_run}: {a.rate_bps / 1e6:.1f} Mb/s"
        for a in list(loop.probes.actuations)
        if a.t >= since
    )
