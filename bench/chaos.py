"""Chaos on the simulated loop: faults, a Subscribe storm, malformed P4Runtime requests,
slow and idle clients on every port, and operator fail-over under 100 policies.

    .venv/bin/python bench/chaos.py                      # everything, ~17 min
    .venv/bin/python bench/chaos.py --repeats 1 --skip-storm --skip-failover   # ~4 min
    sudo .venv/bin/python bench/chaos.py --only-slow-clients   # ~2 min, with a DTN shaper

The loop is the example link and policy (`examples/borderlink.yaml`, T = 1 s, staleAfter =
3 s, maxStep = 200 Mb/s) with `failsafe.rate: 150Mbps`, so that the fail-safe differs from
the fixed split (400 Mb/s) and a resume has somewhere to jump from. Its three processes
(`scidmz target`, `collector`, `controller`) are killed (SIGKILL, restart) or frozen
(SIGSTOP, SIGCONT) one at a time for staleAfter + 2T; probes at 20 Hz read the rate in force
at the simulator (and its journal of every rate set) and the controller's /state
(`scidmz.chaos`).

Targets: fail-safe ≤ staleAfter + T after the collector dies; control resumes < 10 s after
each restart; after a long switch outage (60 s, 5 min: ``--long-outages``) control is back
< 2 s after the switch accepts connections again; no jump of u(t) above maxStep on resume;
200 concurrent Subscribe clients with slow readers leave memory bounded and others
undelayed; malformed requests get the right codes while the switch stays up; (our addition)
a standby operator takes over and applies a change < 10 s after the active one is killed;
100 slow-TLS and 100 idle clients on each port leave every probe answered within its 2 s
timeout and the loop controlling (``scidmz.chaos.slow_clients``; as root with a DTN shaper
agent on the node's network, probes on loopback).

Writes bench/results/chaos.md (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from scidmz.api.loop_file import parse_loop_documents
from scidmz.api.runtime import RuntimeConfig
from scidmz.chaos.failover import FailoverResult, run_operator_failover
from scidmz.chaos.faults import ALL_FAULTS, Fault, FaultResult, run_fault
from scidmz.chaos.local_loop import PROBE_S, LocalLoop
from scidmz.chaos.p4runtime_abuse import Refusal, malformed_requests, write_error_model
from scidmz.chaos.slow_clients import SlowClientsResult, run_slow_clients
from scidmz.chaos.storm import StormResult, run_storm
from scidmz.testenv.cluster import REPO_ROOT

RESULTS = REPO_ROOT / "bench" / "results" / "chaos.md"
SLOW_RESULTS = REPO_ROOT / "bench" / "results" / "chaos_slow_clients.md"
RESUME_TARGET_S = 10.0
AFTER_ACCEPT_TARGET_S = 2.0
FAILOVER_TARGET_S = 10.0


def chaos_config(
    sample_time: str, failsafe: str = "150Mbps", dtn_shaper: bool = False
) -> RuntimeConfig:
    """The example link and policy (processes on one host: the switch in plaintext); with
    ``dtn_shaper`` its DTN host has a tc shaper (``scidmz.chaos.slow_clients``'s agent)."""
    docs = [
        d for name in ("tenants.yaml", "borderlink.yaml", "dtntransferpolicy.yaml")
        for d in yaml.safe_load_all((REPO_ROOT / "examples" / name).read_text())
    ]  # fmt: skip
    link = next(d for d in docs if d["kind"] == "BorderLink")
    link["spec"]["sampleTime"] = sample_time
    link["spec"]["failsafe"] = {"rate": failsafe}
    link["spec"]["switch"] = {**link["spec"]["switch"], "tls": None, "plaintext": True}
    link["spec"]["switch"].pop("tls")
    if dtn_shaper:
        shaper = {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "dtn0"}}
        link["spec"]["dtnHosts"][0]["shaper"] = shaper
    kinds = ("Namespace", "BorderLink", "DTNTransferPolicy")
    loop = parse_loop_documents([d for d in docs if d["kind"] in kinds], "examples")
    return loop.config("unused:1")


def _s(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


def fault_table(config: RuntimeConfig, results: list[FaultResult]) -> tuple[str, list[str]]:
    stale, period = config.failsafe.stale_after_s, config.sample_time_s
    step = config.controller.max_step_bps
    lines = [
        "| fault | runs | time to fail-safe (s), max | resume after restart (s), max "
        "| largest jump of u on resume (Mb/s) | rate held while down |",
        "|---|---:|---:|---:|---:|---|",
    ]
    misses: list[str] = []
    for fault in ALL_FAULTS:
        runs = [r for r in results if r.fault == fault]
        if not runs:
            continue
        failsafe = [r.failsafe_s for r in runs]
        resume = [r.resume_s for r in runs]
        jump = max(r.max_jump_bps for r in runs)
        held = [r.held for r in runs if r.held is not None]
        fs = "n/a (u stays)" if fault.component == "controller" else (
            "never" if None in failsafe else _s(max(f for f in failsafe if f is not None))
        )  # fmt: skip
        rs = "never" if None in resume else _s(max(r for r in resume if r is not None))
        lines.append(
            f"| {fault.label} | {len(runs)} | {fs} | {rs} | {jump / 1e6:.1f} | "
            f"{('yes' if all(held) else 'NO') if held else 'n/a'} |"
        )
        if fault.component != "controller" and (
            None in failsafe or max(f for f in failsafe if f is not None) > stale + period
        ):
            misses.append(f"fail-safe of '{fault.label}' later than staleAfter + T")
        if None in resume or max(r for r in resume if r is not None) >= RESUME_TARGET_S:
            misses.append(f"resume of '{fault.label}' not within {RESUME_TARGET_S:.0f} s")
        if jump > step + 1.0:
            misses.append(f"'{fault.label}': a jump of u above maxStep")
        if held and not all(held):
            misses.append(f"'{fault.label}': the rate in force moved while the controller was down")
    verdicts = [
        f"- time to fail-safe ≤ staleAfter + T = {stale + period:.1f} s (collector and switch "
        f"faults): {_verdict(not any('fail-safe' in m for m in misses))}",
        f"- control resumes < {RESUME_TARGET_S:.0f} s after every restart or SIGCONT: "
        f"{_verdict(not any('resume' in m for m in misses))}",
        f"- no jump of u(t) above maxStep = {step / 1e6:.0f} Mb/s on resume: "
        f"{_verdict(not any('jump' in m for m in misses))}",
    ]
    return "\n".join(lines), verdicts + ([f"  - {m}" for m in misses] if misses else [])


def outage_table(results: list[FaultResult]) -> tuple[str, list[str]]:
    lines = [
        "| switch down for | switch accepting after restart (s) | control back after the "
        "switch accepts (s) | resume after restart (s) | largest jump of u (Mb/s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    slow: list[str] = []
    for r in results:
        after = r.resume_after_accept_s
        lines.append(
            f"| {r.outage_s:.0f} s | {_s(r.accepted_s)} | {_s(after)} | {_s(r.resume_s)} | "
            f"{r.max_jump_bps / 1e6:.1f} |"
        )
        if after is None or after >= AFTER_ACCEPT_TARGET_S:
            slow.append(f"{r.outage_s:.0f} s")
    verdict = (
        f"- control back < {AFTER_ACCEPT_TARGET_S:.0f} s after the switch accepts again, after "
        f"long outages: {_verdict(not slow)}"
    )
    return "\n".join(lines), [verdict] + ([f"  - missed after {', '.join(slow)}"] if slow else [])


def storm_table(config: RuntimeConfig, r: StormResult) -> tuple[str, list[str]]:
    lines = [
        "| | before | during |",
        "|---|---:|---:|",
        f"| well-behaved subscriber latency p50 / p99 (ms) | {r.latency_before_ms[0]:.1f} / "
        f"{r.latency_before_ms[1]:.1f} | {r.latency_during_ms[0]:.1f} / "
        f"{r.latency_during_ms[1]:.1f} |",
        f"| its samples missed | | {r.missed} |",
        f"| its longest wait between samples (s; T = {config.sample_time_s:g} s) | | "
        f"{r.max_gap_during_s:.3f} |",
        f"| collector RSS (MB) | {r.rss_before_mb:.1f} | peak {r.rss_peak_mb:.1f}, after "
        f"{r.rss_after_mb:.1f} |",
        f"| open Subscribe streams | | peak {r.subscribers_peak}, after {r.subscribers_after} |",
        f"| samples dropped for stalled readers | | {r.dropped} |",
        f"| controller on its fail-safe | | {'yes' if r.controller_failsafe else 'no'} |",
    ]
    bounded = r.rss_peak_mb - r.rss_before_mb < 50 and r.rss_after_mb - r.rss_before_mb < 10
    half_period_ms = 500 * config.sample_time_s
    undelayed = (
        r.missed == 0 and not r.controller_failsafe and r.latency_during_ms[1] < half_period_ms
    )
    released = r.subscribers_after <= 2 and r.opened == r.clients
    verdicts = [
        f"- {r.clients} clients opened ({r.opened}) and all released (streams back to "
        f"{r.subscribers_after}): {_verdict(released)}",
        "- memory bounded (peak < +50 MB, back within 10 MB after): " + _verdict(bounded),
        "- others not delayed (no sample missed, p99 latency < T/2, controller never on its "
        "fail-safe): " + _verdict(undelayed),
    ]
    return "\n".join(lines), verdicts


def refusal_table(refusals: list[Refusal], alive: bool, controlling: bool) -> tuple[str, list[str]]:
    lines = ["| request | expected | got |", "|---|---|---|"]
    lines += [
        f"| {r.request} | {r.expected} | {r.got}{'' if r.ok else ' **(wrong)**'} |"
        for r in refusals
    ]
    ok = all(r.ok for r in refusals)
    verdicts = [
        f"- every request answered with its code ({sum(r.ok for r in refusals)}/"
        f"{len(refusals)}): {_verdict(ok)}",
        f"- the switch stayed up and the loop kept controlling: {_verdict(alive and controlling)}",
    ]
    return "\n".join(lines), verdicts


def slow_clients_table(r: SlowClientsResult) -> tuple[str, list[str]]:
    lines = [
        "| asked every second | before: answered / asked | p99 (ms) | during: answered / "
        "asked | p99 (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    all_answered = True
    for name, (before, during) in r.probes.items():
        lines.append(
            f"| {name} | {before[0]}/{before[1]} | {before[2]:.0f} | {during[0]}/{during[1]} "
            f"| {during[2]:.0f} |"
        )
        all_answered &= during[1] > 0 and during[0] == during[1]
    lines += [
        f"| the controller's decisions (distinct samples) | {r.decisions[0]} | | "
        f"{r.decisions[1]} | |",
        f"| the controller on its fail-safe | | | {'yes' if r.failsafe_during else 'no'} | |",
        "| open files, peak | "
        + ", ".join(f"{k} {v}" for k, v in r.open_files_peak.items())
        + " | | | |",
        f"| processes that ended | | | {', '.join(r.exited) or 'none'} | |",
    ]
    expected = r.duration_s  # one decision per T = 1 s
    kept = not r.failsafe_during and r.decisions[1] >= 0.9 * expected and not r.exited
    return "\n".join(lines), [
        f"- {r.clients} slow-TLS or idle clients on each of {len(r.targets)} ports: every "
        f"probe answered within its 2 s timeout: {_verdict(all_answered)}",
        f"- control kept meanwhile (never on its fail-safe, ≥ 90 % of the decisions due): "
        f"{_verdict(kept)}",
    ]


def slow_clients_section(args: argparse.Namespace, work: Path) -> tuple[str, list[str]]:
    print(
        f"slow and idle clients: {args.slow_clients} per port for {args.slow_duration:.0f} s ...",
        flush=True,
    )
    slow = run_slow_clients(
        chaos_config(args.sample_time, dtn_shaper=True), work / "slow",
        args.slow_clients, args.slow_duration,
    )  # fmt: skip
    table, verdicts = slow_clients_table(slow)
    shaper = (
        "a `scidmz shaper` on a veth end in a network namespace, run as on a node's "
        "network (its probes on loopback, mutual TLS only on its public port), driven with "
        "SetRate every second as the link's controller would"
        if slow.shaper
        else "no DTN shaper (it needs root for its network namespace)"
    )
    section = (
        "## Slow and idle clients\n\nThe loop with mutual TLS on every channel (collector, "
        f"controller, and {shaper}). For {slow.duration_s:.0f} s, {slow.clients} clients per "
        f"port, each from its own source address, on {', '.join(slow.targets)}: slow-TLS ones "
        "complete the handshake without a certificate and send a byte every 1.5 s; idle ones "
        "open TCP and send nothing; both reconnect when cut. Probes as the kubelet asks (no "
        "certificate, 2 s timeout), the operator's /state reads with its certificate.\n\n" + table
    )
    return section, verdicts


def failover_table(r: FailoverResult) -> tuple[str, list[str]]:
    lines = [
        "| policies Ready before | peering lifetime (s) | standby resumes (s) | "
        "a change applied (s) | Ready after | standby RSS (MB) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {r.ready_before}/{r.policies} | {r.lifetime_s} | {_s(r.takeover_s)} | "
        f"{_s(r.reconciled_s)} | {r.ready_after}/{r.policies} | {r.standby_rss_mb:.0f} |",
    ]
    ok = (
        r.reconciled_s is not None
        and r.reconciled_s < FAILOVER_TARGET_S
        and r.ready_after == r.policies
    )
    return "\n".join(lines), [
        f"- a change is applied < {FAILOVER_TARGET_S:.0f} s after the active replica is "
        f"killed, every policy still Ready: {_verdict(ok)}"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample-time", default="1s")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each fault")
    parser.add_argument("--observe", type=float, default=10.0, help="seconds after a resume")
    parser.add_argument("--storm-clients", type=int, default=200)
    parser.add_argument("--storm-duration", type=float, default=120.0)
    parser.add_argument(
        "--storm-sample-time", default="100ms",
        help="the storm's loop samples faster, so stalled readers hit back-pressure",
    )  # fmt: skip
    parser.add_argument(
        "--long-outages", default="60,300",
        help="seconds the switch stays down in the long-outage runs (comma-separated; '' none)",
    )  # fmt: skip
    parser.add_argument(
        "--only-long-outages", action="store_true",
        help="skip the fault repeats, the malformed requests, the storm and the fail-over",
    )  # fmt: skip
    parser.add_argument("--failover-policies", type=int, default=100)
    parser.add_argument("--slow-clients", type=int, default=100, help="per attacked port")
    parser.add_argument("--slow-duration", type=float, default=60.0)
    parser.add_argument("--skip-slow-clients", action="store_true")
    parser.add_argument(
        "--only-slow-clients", action="store_true",
        help=f"the slow and idle clients alone (report: {SLOW_RESULTS.relative_to(REPO_ROOT)})",
    )  # fmt: skip
    parser.add_argument("--skip-storm", action="store_true")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help=f"default {RESULTS}")
    parser.add_argument("--no-write", action="store_true", help="do not write the report")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="scidmz-chaos-"))
    sections: list[str] = []
    verdicts: list[str] = []
    started = time.monotonic()
    if args.only_slow_clients:
        try:
            section, verdicts = slow_clients_section(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        write_report(args, args.out or SLOW_RESULTS, started, verdicts, [section])
        return
    try:
        config = chaos_config(args.sample_time)
        outage = config.failsafe.stale_after_s + 2 * config.sample_time_s
        print(f"faults: {len(ALL_FAULTS)} × {args.repeats}, outage {outage:.1f} s each", flush=True)
        results: list[FaultResult] = []
        long_outages = [float(x) for x in args.long_outages.split(",") if x.strip()]
        repeats = 0 if args.only_long_outages else args.repeats
        with LocalLoop(config, work / "faults") as loop:
            loop.wait_until(loop.controlling, 90, "first control")
            outages: list[FaultResult] = []
            for seconds in long_outages:
                print(f"switch down for {seconds:.0f} s ...", flush=True)
                result = run_fault(
                    loop, Fault("target", "kill"), seconds, args.observe, resume_timeout_s=60
                )
                outages.append(result)
                print(
                    f"  accepting {_s(result.accepted_s)} s after the restart, control back "
                    f"{_s(result.resume_after_accept_s)} s after that",
                    flush=True,
                )
            for repeat in range(repeats):
                for fault in ALL_FAULTS:
                    result = run_fault(loop, fault, outage, args.observe, resume_timeout_s=60)
                    results.append(result)
                    print(
                        f"  [{repeat + 1}/{args.repeats}] {fault.label}: fail-safe "
                        f"{_s(result.failsafe_s)} s, resume {_s(result.resume_s)} s, "
                        f"largest jump {result.max_jump_bps / 1e6:.1f} Mb/s",
                        flush=True,
                    )
            if not args.only_long_outages:
                print("malformed P4Runtime requests ...", flush=True)
                loop.wait_until(loop.controlling, 60, "control before the malformed requests")
                refusals = malformed_requests(loop)
                sw = loop.config.switch
                refusals += write_error_model(loop.switch, sw.device_id, sw.election_id)
                time.sleep(3 * config.sample_time_s)
                alive, controlling = loop.alive("target"), loop.controlling()
        if outages:
            table, v = outage_table(outages)
            sections.append(
                "## Long switch outages\n\nThe switch (`scidmz target`) killed and restarted "
                "after the time given; 'accepting' is from the restart to its P4Runtime port "
                "accepting connections (its own start-up, polled every 10 ms), 'control back' "
                "from then to the controller deciding on fresh samples again: what the "
                "collector's and gRPC's reconnect policies add.\n\n" + table
            )
            verdicts += v
        if args.only_long_outages:
            args.skip_storm = args.skip_failover = True
        else:
            table, v = fault_table(config, results)
            sections.append(
                "## Process faults\n\nEach fault held for staleAfter + 2T = "
                f"{outage:.1f} s; times from the probes (±{PROBE_S * 1000:.0f} ms). The "
                "switch is `scidmz target`, which also hosts the simulator and its actuator: "
                "with it gone, the controller's fail-safe is a mode (reported on /state and "
                "`scidmz_failsafe_active`) until the simulator is back, when the fail-safe "
                "rate is applied first. Jumps exclude the step onto the fail-safe rate "
                "itself.\n\n" + table
            )
            verdicts += v
            table, v = refusal_table(refusals, alive, controlling)
            sections.append(
                "## Malformed P4Runtime requests\n\nSent to the switch while the collector "
                "holds mastership and the loop runs; the Write error model (§12) is probed with "
                "the primary's election id (a Write carries it) on IPv6 entries the loop never "
                "matches, each per-update code in brackets.\n\n" + table
            )
            verdicts += v
        if not args.skip_storm:
            storm_config = chaos_config(args.storm_sample_time)
            print(
                f"Subscribe storm: {args.storm_clients} clients for {args.storm_duration:.0f} s "
                f"at T = {storm_config.sample_time_s:g} s ...",
                flush=True,
            )
            with LocalLoop(storm_config, work / "storm") as loop:
                loop.wait_until(loop.controlling, 90, "first control")
                storm = run_storm(loop, args.storm_clients, args.storm_duration)
            table, v = storm_table(storm_config, storm)
            sections.append(
                f"## {storm.clients} concurrent Subscribe clients\n\nHalf read one sample "
                "and then nothing (HTTP/2's initial 64 KiB window, no growth), half read one "
                f"sample every 5 s; each on its own connection, for {storm.duration_s:.0f} s, "
                f"on a loop sampling every {storm_config.sample_time_s:g} s (10× the example's "
                "rate, so that stalled readers meet back-pressure within the run). A "
                "well-behaved subscriber and the controller are judged alongside.\n\n" + table
            )
            verdicts += v
        if not args.skip_slow_clients and not args.only_long_outages:
            section, v = slow_clients_section(args, work)
            sections.append(section)
            verdicts += v
        if not args.skip_failover:
            print(f"operator fail-over with {args.failover_policies} policies ...", flush=True)
            failover = run_operator_failover(args.failover_policies, lifetime_s=6)
            table, v = failover_table(failover)
            sections.append(
                "## Operator fail-over\n\nTwo `scidmz operator` replicas (priorities 100 and "
                "50) on a local control plane (etcd, kube-apiserver, kwok). With every policy "
                "Ready, the active replica gets SIGKILL (no clean hand-over) and one policy's "
                "`targetRate` is changed at once; times from the kill.\n\n" + table
            )
            verdicts += v
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_report(args, args.out or RESULTS, started, verdicts, sections)


def write_report(
    args: argparse.Namespace, out: Path, started: float, verdicts: list[str], sections: list[str]
) -> None:
    report = (
        "# Chaos (bench/chaos.py)\n\n"
        f"`{' '.join(['.venv/bin/python', 'bench/chaos.py', *sys.argv[1:]])}` — "
        f"{time.monotonic() - started:.0f} s on this 2-core machine.\n\n"
        "## Verdicts\n\n" + "\n".join(verdicts) + "\n\n" + "\n\n".join(sections) + "\n"
    )
    print(report)
    if not args.no_write:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
