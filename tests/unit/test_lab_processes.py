"""The lab loop's processes die with whoever started them, even by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PARENT = """
import sys, time
from pathlib import Path
from scidmz.lab.loop import Processes
processes = Processes(Path(sys.argv[1]))
processes.spawn("sleeper", ["sleep", "300"])
print(processes.pid("sleeper"), flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_parent_takes_the_loop_processes_with_it(tmp_path: Path, sig: int) -> None:
    """Killed the moment the child's pid is known, eight times: the child must already hold
    its death signal (before the wait for setpriv's exec, 9 in 80 such children lived on)."""
    survivors = 0
    for _ in range(8):
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        os.kill(parent.pid, sig)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(child):
            survivors += 1
            os.kill(child, signal.SIGKILL)
    assert survivors == 0, "the loop's process outlived the run that started it"
