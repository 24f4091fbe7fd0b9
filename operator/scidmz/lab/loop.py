"""``scidmz lab run``: a link's whole loop on the lab's real TCP.

The switch is ``scidmz target --source lab`` (the packet tap at the lab's border), the
collector and controller run with the config the operator would render for the link and
its policy (a loop file, ``scidmz.api.loop_file``), the campus tc actuator drives the lab's
shaper (``--netns``), a tc DTN actuator is a ``scidmz shaper`` on the DTN namespace's
egress, and a Prometheus scrapes them when one is installed. The kernel's ground truth is
recorded beside the collector's samples, and the report compares the two.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from scidmz.api.loop_file import LoopFile, LoopFileError, load_loop_file
from scidmz.api.runtime import (
    ControllerState,
    DtnActuatorConfig,
    RuntimeConfig,
    dump_runtime_config,
    shaper_agent_args,
)
from scidmz.control.quality import mrae
from scidmz.lab import topology
from scidmz.lab.runner import Lab
from scidmz.lab.topology import LabError
from scidmz.lab.traffic import record_truth
from scidmz.metrics.http import fetch_state
from scidmz.plotting import finish_panels
from scidmz.testenv.cluster import free_port
from scidmz.testenv.processes import stop_all

SAMPLE_COLUMNS = (
    "t_s", "dtn_rate_bps", "campus_rate_bps", "dtn_rtt_s", "campus_rtt_s",
    "dtn_queuing_delay_s", "campus_queuing_delay_s", "active_flows",
    "campus_rate_limit_bps", "dtn_rate_limit_bps", "failsafe",
    "dtn_retransmission_ratio", "campus_retransmission_ratio", "bottleneck_loss_ratio",
    "dtn_mean_queuing_delay_s", "campus_mean_queuing_delay_s", "long_flows", "buffer_s",
    "buffer_phase", "measured_t_s", "sequence", "interval_s", "covered_until_t_s",
)  # fmt: skip


HOST_COLUMNS = ("rate_bps", "rtt_s", "queuing_delay_s", "active_flows")
"""Each DTN host's own figures in samples.csv, as ``host_<name>_<column>``."""


def load_loop(path: Path, strategy: str | None = None) -> LoopFile:
    """A loop file (a BorderLink and its policy), validated and admitted as the API server
    and the operator would (``strategy`` overrides the link's ``controller.strategy``)."""
    try:
        loop = load_loop_file(path)
        loop.policy  # noqa: B018 - raises when none is admitted
    except LoopFileError as error:
        raise LabError(str(error)) from None
    return loop.with_strategy(strategy) if strategy is not None else loop


def lab_sites(loop: LoopFile, lab: Lab) -> dict[str, topology.DtnSite]:
    """Each of the link's DTN hosts the lab holds, by name: the scenario's DTN host of the
    same name, or, on a lab with one DTN host, that host whatever it is called (the
    examples' links name theirs ``dtn``)."""
    sites = topology.dtn_sites(lab.scenario)
    by_name = {site.name: site for site in sites}
    found = {}
    for host in loop.link.dtn_hosts:
        site = by_name.get(host.name) or (sites[0] if len(sites) == 1 else None)
        if site is not None:
            found[host.name] = site
    return found


def lab_config(
    loop: LoopFile,
    lab: Lab,
    switch: str,
    collector: str,
    shaper: str | Mapping[str, str],
) -> RuntimeConfig:
    """The operator's rendering of the loop, pointed at the lab: the local target, the
    lab's campus tbf, (for a tc DTN cap) each DTN host's shaper agent (``shaper``: one
    address, or one per DTN host), and (for a tc ``spec.buffer``) BR1's bfifo on ``bn``.
    The processes share one host here: plaintext, as the lab's own namespaces are the
    network."""
    rendered = loop.config(collector)
    problems = []
    scenario = lab.scenario
    if abs(rendered.bottleneck_capacity_bps - scenario.bottleneck.capacity_bps) > 1.0:
        problems.append(
            f"spec.capacity is {rendered.bottleneck_capacity_bps / 1e6:g} Mb/s but the "
            f"lab's bottleneck is {scenario.bottleneck.capacity_bps / 1e6:g} Mb/s"
        )
    sites = lab_sites(loop, lab)
    senders = {site.name: dtn for site, dtn in zip(
        topology.dtn_sites(scenario), scenario.dtns, strict=True)}  # fmt: skip
    for policy in loop.policies:
        where = f"{policy.namespace}/{policy.name}"
        site = sites.get(policy.spec.dtn_host)
        if site is None:
            names = ", ".join(d.name for d in scenario.dtns)
            problems.append(
                f"{where}: DTN host {policy.spec.dtn_host} is none of the lab's ({names})"
            )
            continue
        host = loop.link.dtn_host(policy.spec.dtn_host)
        if host is not None and ip_address(site.receiver) not in ip_network(host.receiver_prefix):
            problems.append(
                f"{where}: DTN host {host.name}'s receiverPrefix {host.receiver_prefix} does "
                f"not hold the lab's receiver for it, {site.receiver}"
            )
        sends = senders[site.name].congestion_control
        if policy.spec.congestion_control != sends:
            problems.append(
                f"{where}: spec.congestionControl is {policy.spec.congestion_control} but the "
                f"lab's DTN host {site.name} runs {sends}"
            )
    if rendered.actuator.type == "sim" or any(d.type == "sim" for d in rendered.actuator.dtns):
        problems.append("spec.actuator: the lab has no simulator to actuate: use tc or dryRun")
    if rendered.buffer is not None and rendered.buffer.actuator_type == "sim":
        problems.append(
            "spec.buffer.actuator: the lab has no simulator to actuate: use tc or dryRun"
        )
    if problems:
        raise LabError("the loop does not fit the lab:\n  " + "\n  ".join(problems))
    actuator = rendered.actuator
    if actuator.type == "tc":
        actuator = actuator.model_copy(update={"tc_interface": topology.CAMPUS_SHAPER[1]})

    def pointed(dtn: DtnActuatorConfig) -> DtnActuatorConfig:
        if dtn.type != "tc":
            return dtn
        address = shaper if isinstance(shaper, str) else shaper[sites[dtn.host].name]
        return dtn.model_copy(update={"tc_interface": "d0", "address": address})

    caps = [pointed(d) for d in actuator.dtns]
    actuator = actuator.model_copy(update={"dtn": caps[0] if caps else None, "more_dtns": caps[1:]})
    buffer = rendered.buffer
    if buffer is not None and buffer.actuator_type == "tc":
        buffer = buffer.model_copy(update={"tc_interface": topology.BOTTLENECK[1]})
    return rendered.model_copy(
        update={
            "switch": rendered.switch.model_copy(update={"address": switch}),
            "actuator": actuator,
            "buffer": buffer,
        }
    )


def _wait_past_setpriv(
    process: subprocess.Popen[bytes], argv: list[str], timeout_s: float = 2.0
) -> None:
    """Until setpriv has set the death signal and exec'd ``argv`` (Popen returns before the
    child has even exec'd setpriv): a parent killed in between (a loaded host, a bench
    stopped at once) left the child running for good, 5 times in 40 in a tight loop."""
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    expected = b"\0".join(os.fsencode(arg) for arg in argv) + b"\0"
    deadline = time.monotonic() + timeout_s
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if cmdline.read_bytes() == expected:
                return
        except OSError:
            return
        time.sleep(0.002)


class Processes:
    """The loop's processes; :meth:`stop` ends them all."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.env = env
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    def spawn(self, name: str, argv: list[str]) -> None:
        out = (self.workdir / f"{name}.log").open("ab")
        # SIGTERM when this process dies: stop() runs in a ``finally``, which a SIGTERM or
        # SIGKILL of the bench or of `scidmz lab run` skips, and the target, collector,
        # controller and Prometheus kept running (holding ports and the lab's shaper).
        # setpriv (util-linux) because a preexec_fn is unsafe with the truth thread running.
        process = subprocess.Popen(
            ["setpriv", "--pdeathsig", "TERM", "--", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        self.processes.append((name, process))
        _wait_past_setpriv(process, argv)

    def scidmz(self, name: str, *args: str) -> None:
        self.spawn(name, [sys.executable, "-m", "scidmz.cli", *args])

    def pid(self, name: str) -> int:
        return next(process.pid for n, process in self.processes if n == name)

    def check(self) -> None:
        for name, process in self.processes:
            if process.poll() is not None:
                raise LabError(
                    f"the {name} exited with {process.returncode}: see {self.workdir / name}.log"
                )

    def stop(self) -> None:
        stop_all(self.processes)


def start_loop(
    config: RuntimeConfig,
    workdir: Path,
    ports: dict[str, int],
    lab_state: Path,
    shapers: Sequence[tuple[RuntimeConfig, DtnActuatorConfig, str]] = (),
) -> Processes:
    """target, collector, controller (and the DTN shapers, Prometheus) for ``config`` on
    the lab whose state is in ``lab_state``. ``shapers``: each DTN host's agent, (the config
    that has its cap, the cap, the host's namespace); none: the tc caps of ``config`` on
    the first DTN host."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(dump_runtime_config(config))
    loop = Processes(workdir, os.environ | {"SCIDMZ_LAB_STATE": str(lab_state)})
    sw = config.switch
    loop.scidmz(
        "target", "target", "--source", "lab", "--listen", sw.address, "--device-id",
        str(sw.device_id), "--capture-stats", str(workdir / "capture.json"),
        "--ports", f"campus={sw.campus_port},dtn={sw.dtn_port},bottleneck={sw.bottleneck_port}",
    )  # fmt: skip
    loop.scidmz(
        "collector", "collector", "--config", str(path), "--http-port", str(ports["collector"])
    )
    agents = list(shapers) or [
        (config, d, topology.DTN_CAP[0]) for d in config.actuator.dtns if d.type == "tc"
    ]
    for k, (rendered, dtn, namespace) in enumerate(agents):
        loop.scidmz(
            "shaper" if k == 0 else f"shaper-{dtn.host}",
            *shaper_agent_args(rendered, dtn.address or "", host=dtn.host),
            "--netns", namespace, "--http-port", str(ports["shaper"] if k == 0 else free_port()),
        )  # fmt: skip
    loop.scidmz(
        "controller", "controller", "--config", str(path), "--http-port", str(ports["controller"]),
        "--netns", topology.CAMPUS_SHAPER[0], "--buffer-netns", topology.BOTTLENECK[0],
    )  # fmt: skip
    prometheus = shutil.which("prometheus")
    if prometheus is not None:
        scrape = {
            "global": {"scrape_interval": "2s"},
            "scrape_configs": [{"job_name": "scidmz", "static_configs": [{"targets": [
                f"127.0.0.1:{ports['collector']}", f"127.0.0.1:{ports['controller']}"]}]}],
        }  # fmt: skip
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(scrape))
        loop.spawn(
            "prometheus",
            [prometheus, f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{ports['prometheus']}"],
        )  # fmt: skip
    return loop


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, IndexError, ValueError):
            continue
    return total


def controller_row(fetched: dict[str, Any], t_s: float) -> dict[str, Any] | None:
    """One row of the collector's view, as the controller last received it (its /state)."""
    try:
        state = ControllerState.model_validate(fetched)
    except ValidationError:
        return None
    if state.state is None:
        return None
    sample = state.state.model_dump()
    row = {"t_s": round(t_s, 2)} | {k: sample[k] for k in SAMPLE_COLUMNS if k in sample}
    row["campus_rate_limit_bps"] = state.campus_rate_limit_bps
    row["dtn_rate_limit_bps"] = state.dtn_rate_limit_bps
    row["failsafe"] = state.failsafe_active
    row["buffer_s"] = state.buffer.buffer_s if state.buffer is not None else None
    row["buffer_phase"] = state.buffer.phase if state.buffer is not None else None
    row["sequence"] = state.state.sequence
    row["interval_s"] = state.state.interval_s
    with contextlib.suppress(ValueError):
        row["sampled_epoch_s"] = dt.datetime.fromisoformat(state.state.sampled_at).timestamp()
        if state.state.tap_clock_ns:
            row["covered_until_epoch_s"] = tap_epoch_s(
                state.state.tap_clock_ns, row["sampled_epoch_s"]
            )
    for host in state.state.dtn_hosts:
        for key in HOST_COLUMNS:
            row[f"host_{host.host}_{key}"] = getattr(host, key)
    return row


def tap_epoch_s(tap_clock_ns: int, near_epoch_s: float, bits: int = 48) -> float:
    """The lab's tap clock (the kernel's CLOCK_REALTIME stamp of the last frame counted,
    modulo the register's width) as epoch seconds: the value nearest ``near_epoch_s``
    (the read that returned it) with those low bits."""
    wrap = 1 << bits
    near_ns = round(near_epoch_s * 1e9)
    offset_ns = (tap_clock_ns - near_ns + wrap // 2) % wrap - wrap // 2
    return (near_ns + offset_ns) / 1e9


def run_loop(
    loop_file: LoopFile,
    lab: Lab,
    duration_s: float,
    out: Path,
    progress: Callable[[str], None] = lambda _: None,
    warmup_s: float = 20.0,
    targets_bps: Sequence[float] | None = None,
    plans: Sequence[LoopFile] | None = None,
) -> dict[str, Any]:
    """Run the loop for ``duration_s`` after it delivers its first sample; writes
    samples.csv, truth.csv, lab.png and summary.md in ``out``; returns the summary.

    ``targets_bps``: R*(t), one per second of traffic (None: the policy's). Each new level
    goes to the controller as an operator would render it, by rewriting its config file
    and sending SIGHUP (the controller takes a new target live); second k's delivered rate
    is judged against ``targets_bps[k]``, set at its end, as the simulator's loop does.
    ``plans``: instead, the link and its admitted policies per second of traffic (policies
    admitted and removed as the run goes, several DTN hosts); each DTN host is then also
    judged on its own (``summary["hosts"]``)."""
    ports = {
        name: free_port() for name in ("switch", "collector", "controller", "prometheus", "shaper")
    }
    sites = topology.dtn_sites(lab.scenario)
    shapers = {site.name: f"127.0.0.1:{free_port()}" for site in sites}
    addresses = (f"127.0.0.1:{ports['switch']}", f"127.0.0.1:{free_port()}", shapers)
    if plans is not None and targets_bps is not None:
        raise LabError("run_loop: give targets_bps or plans, not both")
    levels = {level: loop_file.retargeted(level) for level in sorted(set(targets_bps or []))}
    schedule = list(plans) if plans is not None else [levels[t] for t in targets_bps or []]
    schedule = schedule or [loop_file]
    # every plan rendered (and refused) before anything starts, not mid-run in the truth
    # recorder's thread, which then only writes the file
    configs: dict[int, RuntimeConfig] = {}
    refusals = {
        id(p): f"targets_bps: {level:.0f} bit/s is no target here" for level, p in levels.items()
    }
    for k, plan in enumerate(schedule):
        if id(plan) in configs:
            continue
        try:
            configs[id(plan)] = lab_config(plan, lab, *addresses)
        except LabError:
            raise
        except ValueError as error:
            refused = refusals.get(id(plan), f"plans[{k}]: the link cannot run this plan")
            raise LabError(f"{refused}: {error}") from None
    rendered = {key: dump_runtime_config(c) for key, c in configs.items()}
    loop_file = schedule[0]
    config = configs[id(loop_file)]
    namespaces = {host: site.namespace for host, site in lab_sites(loop_file, lab).items()}
    agents: dict[str, tuple[RuntimeConfig, DtnActuatorConfig, str]] = {}
    for plan in schedule:
        for cap in configs[id(plan)].actuator.dtns:
            if cap.type == "tc" and cap.host not in agents:
                agents[cap.host] = (configs[id(plan)], cap, namespaces[cap.host])
    loop = start_loop(config, out / "logs", ports, lab.state_dir, list(agents.values()))
    in_force = [id(loop_file)]

    def plan_at(t_s: float) -> LoopFile:
        return schedule[max(0, min(round(t_s), len(schedule) - 1))]

    def target_at(t_s: float) -> float:
        return configs[id(plan_at(t_s))].target_rate_bps

    def retarget(t_s: float) -> None:
        wanted = id(plan_at(t_s))
        if wanted == in_force[-1]:
            return
        (out / "logs" / "config.yaml").write_text(rendered[wanted])
        os.kill(loop.pid("controller"), signal.SIGHUP)
        in_force.append(wanted)

    state_url = f"http://127.0.0.1:{ports['controller']}/state"
    rows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 30.0
        while not (fetch_state(state_url, 1.0) or {}).get("state"):
            loop.check()
            if time.monotonic() > deadline:
                raise LabError(f"the loop delivered no sample within 30 s; logs in {out / 'logs'}")
            time.sleep(0.5)
        progress(f"loop up ({config.controller.strategy}); running {duration_s:.0f} s of traffic")
        truth: dict[str, Path] = {}
        truth_started: list[float] = []

        def on_tick(t_s: float) -> None:
            if t_s == 0.0:
                truth_started.append(time.time())
            retarget(t_s)

        recorder = threading.Thread(
            target=lambda: truth.setdefault(
                "path", record_truth(lab, duration_s, out, on_tick=on_tick)
            ),
            name="truth",
        )
        started = time.monotonic()
        cpu_before = tree_cpu_s(loop.pid("target"))
        recorder.start()
        while recorder.is_alive():
            time.sleep(max(0.0, started + len(rows) + 1 - time.monotonic()))
            loop.check()
            row = controller_row(fetch_state(state_url, 1.0) or {}, time.monotonic() - started)
            if row is not None:
                rows.append(row)
                if len(rows) % 10 == 0:
                    progress(
                        f"{row['t_s']:5.0f} s  DTN {(row.get('dtn_rate_bps') or 0) / 1e6:6.1f} Mb/s"
                        f"  u {(row.get('campus_rate_limit_bps') or 0) / 1e6:6.1f} Mb/s"
                    )
        recorder.join()
        tap_cpu = (tree_cpu_s(loop.pid("target")) - cpu_before) / (time.monotonic() - started)
    finally:
        loop.stop()
    # the flows end with the truth recording: later samples see them stop
    during = [row for row in rows if float(row["t_s"]) <= duration_s]
    for row in during:
        # when the collector measured it, on the truth's clock (its interval's end): what
        # pairs a sample with the kernel's second, where the time the controller's /state
        # was read lags by up to a second more
        if truth_started and "sampled_epoch_s" in row:
            row["measured_t_s"] = round(row["sampled_epoch_s"] - truth_started[0], 3)
        if truth_started and "covered_until_epoch_s" in row:  # the last frame its rates count
            row["covered_until_t_s"] = round(row["covered_until_epoch_s"] - truth_started[0], 4)
    host_columns = [f"host_{s.name}_{key}" for s in sites for key in HOST_COLUMNS]
    with (out / "samples.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(
            handle,
            fieldnames=[*SAMPLE_COLUMNS, *(host_columns if len(sites) > 1 else [])],
            extrasaction="ignore",
        )
        writer.writeheader()
        writer.writerows(rows)
    truth_rows = list(csv.DictReader((out / "truth.csv").open()))
    if truth_started:
        for truth_row in truth_rows:  # when BR1's link counters were read, as measured_t_s
            if truth_row.get("links_epoch_s"):
                epoch_s = float(truth_row["links_epoch_s"])
                truth_row["links_t_s"] = round(epoch_s - truth_started[0], 3)
    summary = summarise(during, truth_rows, target_at, warmup_s, lab.scenario.dtn.transfer_bytes)
    if len(sites) > 1:

        def host_target_at(host: str, t_s: float) -> float | None:
            held = configs[id(plan_at(t_s))].policies
            return next((p.target_rate_bps for p in held if p.dtn_host == host), None)

        summary["hosts"] = {
            s.name: host_summary(during, truth_rows, s.name, host_target_at, warmup_s)
            for s in sites
        }
    summary |= {
        "policy": ", ".join(f"{p.namespace}/{p.name}" for p in loop_file.policies),
        "strategy": config.controller.strategy,
        "tap_cpu_cores": tap_cpu,
        "capture": _capture(out / "logs" / "capture.json"),
    }
    write_report(out, summary, rows, truth_rows, target_at)
    return summary


def schedule_lookup(schedule: Sequence[float]) -> Callable[[float], float]:
    """R* at second ``t_s`` of a per-second schedule (its last level after its end)."""
    return lambda t_s: schedule[max(0, min(round(t_s), len(schedule) - 1))]


def _capture(path: Path) -> dict[str, Any]:
    try:
        stats: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return stats


def _floats(rows: list[dict[str, Any]], key: str, after_s: float) -> list[float]:
    return [value for _, value in _timed(rows, key, after_s)]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


ACCURACY_PAIRS = {
    "dtn_rate_bps": "dtn_offered_rate_bps",
    "campus_rate_bps": "campus_offered_rate_bps",
    "dtn_rtt_s": "dtn_rtt_s",
    "campus_rtt_s": "campus_rtt_at_tap_s",
    "dtn_queuing_delay_s": "queuing_delay_s",
    "campus_queuing_delay_s": "queuing_delay_s",
    "active_flows": "active_flows",
    "dtn_retransmission_ratio": "dtn_retransmission_ratio",
    "campus_retransmission_ratio": "campus_retransmission_ratio",
    "bottleneck_loss_ratio": "bottleneck_loss_ratio",
    "dtn_mean_queuing_delay_s": "queuing_delay_mean_s",
    "campus_mean_queuing_delay_s": "queuing_delay_mean_s",
}
"""Each collector variable and the truth column it is judged against."""


def _timed(rows: list[dict[str, Any]], key: str, after_s: float) -> list[tuple[float, float]]:
    """``(t, value)`` of ``key`` from ``after_s`` on, skipping missing and non-finite."""
    timed = []
    for row in rows:
        value = row.get(key)
        if float(row["t_s"]) >= after_s and value not in (None, ""):
            number = float(value)
            if math.isfinite(number):
                timed.append((float(row["t_s"]), number))
    return timed


def _kernel_series(
    truth: list[dict[str, Any]], truth_key: str, after_s: float
) -> list[tuple[float, float]]:
    """``(t, value)`` of a truth column; the active flows are both classes' sum (a second
    missing either class is skipped)."""
    if truth_key != "active_flows":
        return _timed(truth, truth_key, after_s)
    dtn = dict(_timed(truth, "dtn_active_flows", after_s))
    return [
        (t, dtn[t] + campus)
        for t, campus in _timed(truth, "campus_active_flows", after_s)
        if t in dtn
    ]


def settled_at(
    samples: list[dict[str, Any]],
    truth: list[dict[str, Any]],
    key: str,
    within: Callable[[float, float], bool],
) -> float:
    """The first second from which the collector's ``key`` stays ``within`` the kernel's
    value of the same second to the end of the run (seconds paired by rounding); NaN if the
    last paired second is not within. Shows how long an estimator takes to converge, e.g.
    algorithm 4's campus-RTT EWMA from its first mean, taken while the queue still fills."""
    kernel = {round(t): value for t, value in _kernel_series(truth, ACCURACY_PAIRS[key], 0.0)}
    paired = [
        (round(t), within(value, kernel[round(t)]))
        for t, value in _timed(samples, key, -math.inf)
        if round(t) in kernel
    ]
    settled = math.nan
    for second, ok in reversed(paired):
        if not ok:
            break
        settled = float(second)
    return settled


def _tracking(series: list[tuple[float, float]], target_at: Callable[[float], float]) -> float:
    return mrae([target_at(t) for t, _ in series], [value for _, value in series])


def transfer_fct_s(truth: list[dict[str, Any]], size_bytes: float) -> float:
    """When the DTN's acknowledged bytes reached ``size_bytes``, in seconds from the start
    of the flows (the truth's t = 0), interpolated inside the interval that crossed it;
    NaN if they never did. Each truth row holds the bytes its interval acknowledged (as a
    rate over the interval), new sockets counted from their first byte."""
    done_bytes, before_s = 0.0, 0.0
    for row in truth:
        t_s = float(row["t_s"])
        rate = row.get("dtn_rate_bps")
        rate_bps = float(rate) if rate not in (None, "") else 0.0
        interval_bytes = max(rate_bps, 0.0) * (t_s - before_s) / 8
        if interval_bytes > 0 and done_bytes + interval_bytes >= size_bytes:
            return before_s + (t_s - before_s) * (size_bytes - done_bytes) / interval_bytes
        done_bytes += interval_bytes
        before_s = t_s
    return math.nan


def summarise(
    samples: list[dict[str, Any]],
    truth: list[dict[str, Any]],
    target_at: Callable[[float], float],
    warmup_s: float,
    transfer_bytes: float | None = None,
) -> dict[str, Any]:
    """Tracking of R*(t) (from the kernel's delivered DTN rate and from the collector's)
    and the collector's steady-state means beside the kernel's, after ``warmup_s``. With
    ``transfer_bytes``: also its ``fct_s`` (:func:`transfer_fct_s`), and every figure only
    over the whole seconds the transfer ran (as the simulator's transfer episodes judge
    them)."""
    fct_s = transfer_fct_s(truth, transfer_bytes) if transfer_bytes is not None else math.nan
    if math.isfinite(fct_s):
        truth = [row for row in truth if float(row["t_s"]) <= fct_s]
        samples = [row for row in samples if float(row["t_s"]) <= fct_s]
    delivered_series = _timed(truth, "dtn_rate_bps", warmup_s)
    measured_series = _timed(samples, "dtn_rate_bps", warmup_s)
    delivered = [value for _, value in delivered_series]
    targets = [target_at(t) for t, _ in delivered_series]
    accuracy = {}
    for collector_key, truth_key in ACCURACY_PAIRS.items():
        kernel = [value for _, value in _kernel_series(truth, truth_key, warmup_s)]
        accuracy[collector_key] = {
            "collector": _mean(_floats(samples, collector_key, warmup_s)),
            "kernel": _mean(kernel),
        }
    return {
        "target_rate_bps": _mean(targets),
        "fct_s": fct_s,
        "samples": len(samples),
        "mrae_delivered": _tracking(delivered_series, target_at),
        "mrae_measured": _tracking(measured_series, target_at),
        "mean_dtn_delivered_bps": _mean(delivered),
        "mean_u_bps": _mean(_floats(samples, "campus_rate_limit_bps", warmup_s)),
        "accuracy": accuracy,
    }


def _number(row: dict[str, Any], key: str) -> float:
    """A CSV cell as a number, NaN where empty or absent."""
    raw = row.get(key)
    return float(raw) if raw not in (None, "") else math.nan


def _cumulative_bits(truth: list[dict[str, Any]], key: str) -> Callable[[float], float]:
    """The bits a per-interval truth rate column adds up to by time t, from the first row
    on (linear inside an interval; rows are the rates over the interval ending at their
    ``links_t_s``, when BR1's link counters were read, else at their ``t_s``)."""
    times, totals, rows, clock = [0.0], [0.0], truth, "t_s"
    if truth and math.isfinite(_number(truth[0], "links_t_s")):
        # the read before the first row is not recorded: count from the first row's
        times, rows, clock = [_number(truth[0], "links_t_s")], truth[1:], "links_t_s"
    for row in rows:
        t_s, rate = float(row[clock]), _number(row, key)
        totals.append(totals[-1] + (rate if math.isfinite(rate) else 0.0) * (t_s - times[-1]))
        times.append(t_s)
    return lambda t: float(np.interp(t, times, totals))


def covered_intervals(
    samples: list[dict[str, Any]], column: str
) -> list[tuple[float, float, float]]:
    """(start, end, rate) of each sample's ``column``, on the truth's clock: the interval
    the tap clock says its rates cover (``covered_until_t_s`` less ``interval_s``), else,
    without a tap clock, from the previous sample's measurement to its own when the
    controller's /state showed both (a sample the reads missed leaves its interval
    unknown)."""
    intervals: list[tuple[float, float, float]] = []
    by_sequence = {  # /state read twice between two samples shows one sample twice
        int(r["sequence"]): r
        for r in samples
        if r.get("sequence") not in (None, "") and math.isfinite(_number(r, column))
    }
    rows = [by_sequence[sequence] for sequence in sorted(by_sequence)]
    for before, row in itertools.pairwise([{}, *rows]):
        end, interval = _number(row, "covered_until_t_s"), _number(row, "interval_s")
        if math.isfinite(end) and interval > 0:
            intervals.append((end - interval, end, _number(row, column)))
            continue
        t0, t1 = _number(before, "measured_t_s"), _number(row, "measured_t_s")
        consecutive = bool(before) and int(row["sequence"]) == int(before["sequence"]) + 1
        if consecutive and math.isfinite(t0) and math.isfinite(t1):
            intervals.append((t0, t1, _number(row, column)))
    return intervals


def host_summary(
    samples: list[dict[str, Any]],
    truth: list[dict[str, Any]],
    host: str,
    target_at: Callable[[str, float], float | None],
    warmup_s: float,
) -> dict[str, float]:
    """One DTN host of several, over the time its policy was admitted, from ``warmup_s``
    after its admission (and after the run's own warm-up) on: the bytes the collector
    measured for it against the bytes the kernel counted on its link into BR1 over the
    same intervals (each sample's own, ``covered_intervals``), as rates; its delivered rate
    (TCP_INFO) and MRAE (eq. 3) against its own target, per second."""
    column = f"host_{host}_rate_bps"
    admitted = [t for t, _ in _timed(truth, column, 0.0) if target_at(host, t) is not None]
    since = max(warmup_s, (min(admitted) + warmup_s) if admitted else math.inf)

    def judged(rows: list[dict[str, Any]], key: str, clock: str = "t_s") -> dict[int, float]:
        timed = [(r, float(r[clock])) for r in rows if r.get(clock) not in (None, "")]
        return {
            round(t): float(r[key])
            for r, t in timed
            if t >= since
            and target_at(host, t) is not None
            and r.get(key) not in (None, "")
            and math.isfinite(float(r[key]))
        }

    kernel_bits = _cumulative_bits(truth, f"host_{host}_offered_rate_bps")
    span_s = measured_bits = counted_bits = 0.0
    for t0, t1, rate_bps in covered_intervals(samples, column):
        if t0 < since or target_at(host, t0) is None or target_at(host, t1) is None:
            continue
        span_s += t1 - t0
        measured_bits += rate_bps * (t1 - t0)
        counted_bits += kernel_bits(t1) - kernel_bits(t0)
    collector = measured_bits / span_s if span_s > 0 else math.nan
    kernel = counted_bits / span_s if span_s > 0 else math.nan
    measured = judged(samples, column, "measured_t_s")
    delivered = judged(truth, column)

    def tracking(series: dict[int, float]) -> float:
        seconds = sorted(series)
        return mrae([target_at(host, t) or 0.0 for t in seconds], [series[t] for t in seconds])

    return {
        "seconds": span_s,
        "target_rate_bps": _mean([target_at(host, t) or 0.0 for t in sorted(delivered)]),
        "collector_rate_bps": collector,
        "kernel_offered_rate_bps": kernel,
        "rate_error": abs(collector - kernel) / kernel if kernel > 0 else math.nan,
        "delivered_rate_bps": _mean(list(delivered.values())),
        "mrae_delivered": tracking(delivered),
        "mrae_measured": tracking(measured),
    }


def write_report(
    out: Path,
    summary: dict[str, Any],
    samples: list[dict[str, Any]],
    truth: list[dict[str, Any]],
    target_at: Callable[[float], float],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(
        rows: list[dict[str, Any]], key: str, scale: float
    ) -> tuple[list[float], list[float]]:
        t, v = [], []
        for row in rows:
            value = row.get(key)
            if value not in (None, ""):
                t.append(float(row["t_s"]))
                v.append(float(value) * scale)
        return t, v

    figure, axes = plt.subplots(3, 1, figsize=(8, 7.5), sharex=True)
    axes[0].plot(*series(samples, "dtn_rate_bps", 1e-6), label="DTN rate (collector)")
    axes[0].plot(
        *series(truth, "dtn_offered_rate_bps", 1e-6), ":", label="DTN rate (kernel, offered)"
    )
    seconds = [float(row["t_s"]) for row in truth]
    axes[0].step(
        seconds, [target_at(t) / 1e6 for t in seconds], "--", where="pre", color="k",
        label="target R*",
    )  # fmt: skip
    axes[1].plot(*series(samples, "campus_rate_bps", 1e-6), label="campus rate (collector)")
    axes[1].plot(*series(truth, "campus_offered_rate_bps", 1e-6), ":", label="campus (kernel)")
    axes[1].step(*series(samples, "campus_rate_limit_bps", 1e-6), where="post", label="u(t)")
    axes[2].plot(*series(samples, "dtn_queuing_delay_s", 1e3), label="queuing delay (collector)")
    axes[2].plot(*series(truth, "queuing_delay_s", 1e3), ":", label="queuing delay (kernel)")
    axes[0].set_ylabel("Mb/s")
    axes[1].set_ylabel("Mb/s")
    axes[2].set_ylabel("ms")
    title = f"{summary['policy']} ({summary['strategy']}) on the lab's real TCP"
    finish_panels(figure, axes, title, out / "lab.png", legend_size=7)
    lines = [
        f"# scidmz lab run: {summary['policy']} ({summary['strategy']})",
        "",
        f"- target R* (mean after warm-up): {summary['target_rate_bps'] / 1e6:.1f} Mb/s; "
        f"samples: {summary['samples']}",
        f"- mean DTN rate delivered (kernel): {summary['mean_dtn_delivered_bps'] / 1e6:.1f} Mb/s",
        *(
            [f"- DTN transfer completed (kernel's acknowledged bytes): {summary['fct_s']:.2f} s"]
            if math.isfinite(summary.get("fct_s", math.nan))
            else []
        ),
        f"- MRAE vs R*: {summary['mrae_delivered']:.1%} (kernel), "
        f"{summary['mrae_measured']:.1%} (collector)",
        f"- mean u(t): {summary['mean_u_bps'] / 1e6:.1f} Mb/s",
        f"- the tap (target + reader): {summary['tap_cpu_cores']:.0%} of a core; capture: "
        + ", ".join(
            f"{name} {c['frames']} frames, {c['kernel_drops']} dropped"
            for name, c in summary["capture"].items()
        ),
        "",
        "| variable | collector | kernel |",
        "|---|---:|---:|",
    ]
    for key, pair in summary["accuracy"].items():
        lines.append(f"| {key} | {pair['collector']:.6g} | {pair['kernel']:.6g} |")
    if summary.get("hosts"):
        lines += [
            "",
            "| DTN host | target Mb/s | collector Mb/s | kernel (offered) Mb/s | error "
            "| delivered Mb/s | MRAE (kernel) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, host in summary["hosts"].items():
            lines.append(
                f"| {name} | {host['target_rate_bps'] / 1e6:.1f} "
                f"| {host['collector_rate_bps'] / 1e6:.1f} "
                f"| {host['kernel_offered_rate_bps'] / 1e6:.1f} | {host['rate_error']:.2%} "
                f"| {host['delivered_rate_bps'] / 1e6:.1f} | {host['mrae_delivered']:.1%} |"
            )
    lines += ["", "![the run](lab.png)", ""]
    (out / "summary.md").write_text("\n".join(lines))
