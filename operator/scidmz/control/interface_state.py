"""What a DTN host's interface had before its shaper took it, and putting that back.

The shaper's tc actuator replaces the interface's root qdisc with its tbf, whatever was
there: the kernel's default, or the host's own pacing (a tbf, an fq with a maxrate). The
agent records the original once, in a state directory on the node (a hostPath that outlives
the pod, so a restarted agent does not take its own tbf for the original), and the operator,
once the shaper is removed for good, runs ``scidmz shaper --restore`` on that node: it
deletes the shaper's root qdisc (the kernel's default comes back) and re-creates the
original when it was a tbf; another kind of qdisc is named in what it reports, for an
administrator to re-create (this kernel has none of the others to test against).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scidmz.control.actuators import TC_H_ROOT, ActuatorError, open_interface

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RootQdisc:
    """An interface's root qdisc, as much of it as can be put back."""

    kind: str
    handle: int
    tbf_rate_bytes_per_s: int | None = None
    tbf_buffer: int | None = None
    tbf_limit: int | None = None

    @property
    def kernels(self) -> bool:
        """The kernel's own (handle 0: nobody added it); deleting ours brings it back."""
        return self.handle == 0


def record_path(state_dir: Path, interface: str, netns: str | None) -> Path:
    return state_dir / f"{netns or 'host'}-{interface}.json"


async def read_root_qdisc(ipr: Any, index: int) -> RootQdisc | None:
    """The interface's root qdisc (None: it has none, e.g. a fresh veth in some kernels)."""
    async for qdisc in await ipr.get_qdiscs(index=index):
        if qdisc["parent"] != TC_H_ROOT:
            continue
        kind = str(qdisc.get_attr("TCA_KIND") or "")
        handle = int(qdisc["handle"])
        if kind != "tbf":
            return RootQdisc(kind, handle)
        options = qdisc.get_attr("TCA_OPTIONS") or {}
        parms = dict(options.get("attrs", [])).get("TCA_TBF_PARMS") or {}
        return RootQdisc(
            kind, handle, int(parms.get("rate", 0)), int(parms.get("buffer", 0)),
            int(parms.get("limit", 0)),
        )  # fmt: skip
    return None


async def record_original(state_dir: Path, interface: str, netns: str | None) -> str:
    """Record the interface's root qdisc before the shaper first replaces it; a record
    already there (this agent restarted) is kept. Returns what it did."""
    path = record_path(state_dir, interface, netns)
    if path.exists():
        return f"kept the record of {interface}'s original root qdisc ({path})"
    ipr, index = await open_interface(interface, netns, "record the original qdisc")
    try:
        found = await read_root_qdisc(ipr, index)
    finally:
        ipr.close()
    state_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asdict(found) if found is not None else None)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(path)
    return f"recorded {interface}'s original root qdisc: {found.kind if found else 'none'}"


async def restore_original(state_dir: Path, interface: str, netns: str | None) -> str:
    """Put the recorded root qdisc back and forget the record; ``ActuatorError`` when the
    interface cannot be reached. Without a record nothing is touched: the root qdisc then
    may be anyone's (an agent never started here, or a restore already done)."""
    path = record_path(state_dir, interface, netns)
    if not path.exists():
        return f"{interface}: no record of an original root qdisc ({path}); left as it is"
    data = json.loads(path.read_text())
    original = RootQdisc(**data) if data else None
    ipr, index = await open_interface(interface, netns, "restore the original qdisc")
    try:
        current = await read_root_qdisc(ipr, index)
        if current is not None and not current.kernels:
            await ipr.tc("del", index=index, handle=current.handle, parent=TC_H_ROOT)
        said = f"{interface}: the shaper's root qdisc removed"
        if original is not None and not original.kernels:
            if original.kind == "tbf" and original.tbf_rate_bytes_per_s:
                await ipr.tc(
                    "add", "tbf", index, handle=original.handle,
                    rate=f"{original.tbf_rate_bytes_per_s * 8}bit",
                    burst=_burst_bytes(original), limit=original.tbf_limit or 10000,
                )  # fmt: skip
                said += f"; the original tbf at {original.tbf_rate_bytes_per_s * 8} bit/s back"
            else:
                said += (
                    f"; the original was a {original.kind} qdisc, which this agent does not "
                    "re-create: the kernel's default is in force, re-create it by hand"
                )
        else:
            said += "; the kernel's default is back, as before the shaper"
    except ActuatorError:
        raise
    except Exception as error:  # pyroute2 raises NetlinkError and friends
        raise ActuatorError(f"restore {interface}: {error}") from None
    finally:
        ipr.close()
    path.unlink(missing_ok=True)
    return said


def _tick_in_usec() -> float:
    """Kernel packet-scheduler ticks per microsecond, as tc computes them from
    ``/proc/net/psched`` (tc_core_init: a nanosecond clock advertises a multiplier it does
    not mean)."""
    try:
        t2us, us2t, clock_res, _ = (
            int(field, 16) for field in Path("/proc/net/psched").read_text().split()
        )
    except (OSError, ValueError):
        return 1000.0  # a nanosecond clock: every kernel since 2.6.2x
    if clock_res == 1_000_000_000:
        t2us = us2t
    return t2us / us2t * (clock_res / 1e6)


def _burst_bytes(original: RootQdisc) -> int:
    """The recorded bucket in bytes: the kernel keeps it as the time to send it at the rate
    (``buffer``, in scheduler ticks)."""
    rate = original.tbf_rate_bytes_per_s or 0
    seconds = (original.tbf_buffer or 0) / _tick_in_usec() / 1e6
    return max(1600, round(rate * seconds))
