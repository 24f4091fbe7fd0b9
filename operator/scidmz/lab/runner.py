"""Build, check and tear down the lab (``scidmz lab up|down|status``): the side effects of
:mod:`scidmz.lab.topology`.

``up`` refuses to start over a lab that is already up, and removes what it built if any step
fails, so a failed ``up`` leaves nothing behind. ``down`` kills every process inside the lab's
namespaces (deleting a namespace does not) before deleting them, and is safe to run twice or
after a crash. The state file (``/run/scidmz-lab/state.json``) records what ``up`` built.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scidmz.lab import native, topology
from scidmz.lab.topology import LabError
from scidmz.netsim.scenario import Scenario

STATE_DIR = Path(os.environ.get("SCIDMZ_LAB_STATE", "/run/scidmz-lab"))
TOOLS = {
    "ip": "iproute2",
    "tc": "iproute2",
    "ss": "iproute2",
    "ping": "iputils-ping",
    "iperf3": "iperf3",
    "gcc": "gcc",
    "ethtool": "ethtool",
    "setpriv": "util-linux",
}


@dataclass(frozen=True)
class Lab:
    """A lab that is up: where its state lives and the scenario it was built from."""

    state_dir: Path
    scenario: Scenario
    offloads: bool

    @property
    def delay_stats_path(self) -> Path:
        return self.state_dir / "delayline.json"


def check_host(tools: Sequence[str] = tuple(TOOLS)) -> None:
    """Root and the lab's tools, or a :class:`LabError` naming what is missing and its package."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the lab builds network namespaces: run it as root")
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        packages = sorted({TOOLS.get(tool, tool) for tool in missing})
        problems.append(f"missing {', '.join(missing)}: apt-get install {' '.join(packages)}")
    if problems:
        raise LabError("; ".join(problems))


def existing_namespaces() -> list[str]:
    """The lab's namespaces that exist now: the testbed's in order, then any further DTN
    host's (whatever scenario built them, so that ``down`` finds them all)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    present = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    more = sorted(
        ns for ns in present if ns.startswith(topology.DTN) and ns[len(topology.DTN) :].isdigit()
    )
    return [*(ns for ns in topology.NAMESPACES if ns in present), *more]


def _run(command: Sequence[str]) -> None:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(
            f"`{' '.join(command)}` failed: {done.stderr.strip() or done.stdout.strip()}"
        )


def netns_pids(namespace: str) -> list[int]:
    listed = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False
    )
    return [int(pid) for pid in listed.stdout.split()]


def spawn(namespace: str, argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    """A process inside a lab namespace, its output to ``log``; ``down`` finds it by namespace."""
    with log.open("ab") as out:
        return subprocess.Popen(
            ["ip", "netns", "exec", namespace, *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def up(
    scenario: Scenario,
    offloads: bool = True,
    state_dir: Path = STATE_DIR,
    progress: Callable[[str], None] = lambda _: None,
) -> Lab:
    """Build the lab, start its delay line and check both base RTTs with a ping."""
    topology.check_scenario(scenario)
    check_host()
    present = existing_namespaces()
    if present:
        raise LabError(f"a lab is already up ({', '.join(present)}): run `scidmz lab down` first")
    binary = native.binary("delayline")
    state_dir.mkdir(parents=True, exist_ok=True)
    lab = Lab(state_dir, scenario, offloads)
    try:
        commands = topology.build_commands(scenario, offloads)
        built = topology.namespaces(scenario)
        progress(f"building {len(built)} namespaces ({len(commands)} commands)")
        for command in commands:
            _run(command)
        lab.delay_stats_path.unlink(missing_ok=True)
        spawn(
            topology.DELAY,
            [str(binary), "x0", "x1", str(lab.delay_stats_path), *topology.delay_routes(scenario)],
            state_dir / "delayline.log",
        )
        _wait_for(lab.delay_stats_path.exists, 5.0, "the delay line to start")
        sites = topology.dtn_sites(scenario)
        for namespace, expected_s, address in (
            *(
                (site.namespace, dtn.base_rtt_s, site.receiver)
                for site, dtn in zip(sites, scenario.dtns, strict=True)
            ),
            (topology.CAMPUS, scenario.campus.base_rtt_s, topology.CAMPUS_RECV_ADDR),
        ):
            rtt_ms, expected_ms = ping_rtt_s(namespace, address) * 1e3, expected_s * 1e3
            progress(f"{namespace} → receivers: RTT {rtt_ms:.1f} ms (base {expected_ms:.0f} ms)")
            if abs(rtt_ms - expected_ms) > max(2.0, 0.1 * expected_ms):
                raise LabError(
                    f"{namespace}: ping RTT {rtt_ms:.1f} ms, expected {expected_ms:.0f} ms"
                )
        write_state(lab)
    except BaseException:
        down(state_dir)
        raise
    return lab


def ping_rtt_s(namespace: str, address: str, count: int = 3) -> float:
    """The smallest of ``count`` ping RTTs from ``namespace`` (the first primes the neighbours)."""
    done = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            namespace,
            "ping",
            "-q",
            "-n",
            "-c",
            str(count),
            "-i",
            "0.2",
            "-W",
            "2",
            address,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if "min/avg/max" in line:
            return float(line.split("=")[1].split("/")[0]) / 1e3
    raise LabError(
        f"{namespace} cannot reach {address}: {done.stdout.strip() or done.stderr.strip()}"
    )


def write_state(lab: Lab) -> None:
    state = {
        "namespaces": list(topology.namespaces(lab.scenario)),
        "offloads": lab.offloads,
        "scenario": lab.scenario.model_dump(mode="json"),
    }
    (lab.state_dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def read_state(state_dir: Path = STATE_DIR) -> Lab:
    """The lab that is up, or a :class:`LabError` saying there is none."""
    path = state_dir / "state.json"
    if not path.exists() or not existing_namespaces():
        raise LabError("no lab is up: run `scidmz lab up` first")
    state: dict[str, Any] = json.loads(path.read_text())
    return Lab(state_dir, Scenario.model_validate(state["scenario"]), bool(state["offloads"]))


def down(state_dir: Path = STATE_DIR) -> list[str]:
    """Kill every process in the lab's namespaces, delete them; returns what was removed."""
    removed = []
    killed: set[int] = set()
    for namespace in existing_namespaces():
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = netns_pids(namespace)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                    killed.add(pid)
            deadline = time.monotonic() + 2.0
            while netns_pids(namespace) and time.monotonic() < deadline:
                time.sleep(0.05)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
        removed.append(namespace)
    _reap(killed)
    (state_dir / "state.json").unlink(missing_ok=True)
    return removed


def _reap(pids: set[int], timeout_s: float = 2.0) -> None:
    """Collect the exit status of the killed processes this process started (``lab up``
    and ``lab run`` in one process, as the tests do): a dead child stays a zombie
    until its parent waits for it. Others' children are not ours to wait for."""
    deadline = time.monotonic() + timeout_s
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pending.discard(pid)  # not our child, or already collected
                continue
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(0.02)
