"""Stopping a loop that runs as local processes (the demo, the lab, the chaos bench)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Collection, Sequence

FIRST = ("controller",)
"""Stopped, and waited for, before the others: on SIGTERM a controller restores its
fail-safe rates through its shapers (the simulator's in `scidmz target`, a DTN agent), which
must still be running, or it reports the failure and exits 1 after retrying."""


def stop_all(
    processes: Sequence[tuple[str, subprocess.Popen[bytes]]],
    first: Collection[str] = FIRST,
    timeout_s: float = 30.0,
) -> None:
    """SIGTERM ``first`` and wait for them, then the rest; kill what outlives ``timeout_s``.
    A stopped (SIGSTOP) process is continued first: it cannot act on a SIGTERM."""
    for batch in (
        [p for p in processes if p[0] in first],
        [p for p in processes if p[0] not in first],
    ):
        for _, process in batch:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for _, process in batch:
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
