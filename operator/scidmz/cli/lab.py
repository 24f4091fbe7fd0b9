"""``scidmz lab``: the real-TCP lab's commands (up, status, traffic, run, record, down)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from scidmz.api.flags import within
from scidmz.cli.common import fail

lab_app = typer.Typer(
    help="The paper's testbed on real Linux TCP in network namespaces (needs root).",
    no_args_is_help=True,
)


@lab_app.command("up")
def lab_up(
    scenario: Annotated[
        Path | None,
        typer.Option(
            "--scenario",
            help="Scenario YAML, as for `scidmz sim` (default: the "
            "paper's testbed with a 300 Mb/s bottleneck).",
        ),
    ] = None,
    bottleneck: Annotated[str | None, typer.Option(help="B, e.g. 300Mbps or 1Gbps.")] = None,
    campus_flows: Annotated[int | None, typer.Option(help="N long campus flows.")] = None,
    dtn_streams: Annotated[int | None, typer.Option(help="M DTN streams.")] = None,
    dtn_cca: Annotated[str | None, typer.Option(help="The DTN's congestion control.")] = None,
    offloads: Annotated[
        bool, typer.Option(help="TSO/GSO/GRO on the lab's veths (needed for 1 Gb/s).")
    ] = True,
) -> None:
    """Build the lab: namespaces, veths, the bottleneck and campus shaper, the delay line.

    Checks both base RTTs with a ping and refuses a lab whose RTTs are off."""
    from scidmz.lab import runner
    from scidmz.lab.scenario import lab_scenario
    from scidmz.lab.topology import LabError
    from scidmz.netsim.scenario import ScenarioError

    try:
        chosen = lab_scenario(
            scenario,
            {
                "bottleneck.capacity_bps": bottleneck,
                "campus.long_flows": campus_flows,
                "dtn.streams": dtn_streams,
                "dtn.congestion_control": dtn_cca,
            },
        )
        runner.up(chosen, offloads=offloads, progress=typer.echo)
    except (ScenarioError, LabError) as error:
        fail(str(error))
    typer.echo("lab up: `scidmz lab traffic --duration 30 --out DIR` runs its flows")


@lab_app.command("status")
def lab_status() -> None:
    """What is up: namespaces, the qdiscs' counters, the delay line's lag."""
    from scidmz.lab import runner, topology
    from scidmz.lab.topology import LabError
    from scidmz.lab.truth import read_qdisc

    try:
        lab = runner.read_state()
    except LabError as error:
        fail(str(error))
        return
    typer.echo(f"namespaces: {', '.join(runner.existing_namespaces())}")
    for name, (namespace, interface) in (
        ("bottleneck", topology.BOTTLENECK),
        ("campus shaper", topology.CAMPUS_SHAPER),
    ):
        stats = read_qdisc(namespace, interface)
        typer.echo(
            f"{name} ({namespace} {interface}): rate {stats['rate_bps'] / 1e6:.1f} Mb/s, "
            f"backlog {stats['backlog_bytes']:.0f} B, drops {stats['drops']:.0f}"
        )
    if lab.delay_stats_path.exists():
        typer.echo(f"delay line: {json.loads(lab.delay_stats_path.read_text())}")


@lab_app.command("traffic")
def lab_traffic(
    duration: Annotated[
        float, typer.Option(help="Seconds of traffic.", callback=within(0, 86_400))
    ],
    out: Annotated[Path, typer.Option(help="Directory for truth.csv and the iperf3 logs.")],
) -> None:
    """Run the scenario's long flows (iperf3) and record the kernel's ground truth per second."""
    from scidmz.lab import runner
    from scidmz.lab.topology import LabError
    from scidmz.lab.traffic import client_summary, record_truth

    if not duration >= 1:
        fail("--duration must be at least 1 s")
    try:
        lab = runner.read_state()
    except LabError as error:
        fail(str(error))
        return

    def show(row: dict[str, float]) -> None:
        typer.echo(
            f"{row['t_s']:5.0f} s  DTN {row['dtn_rate_bps'] / 1e6:6.1f} Mb/s  "
            f"campus {row['campus_rate_bps'] / 1e6:6.1f} Mb/s  "
            f"queue {row['queuing_delay_s'] * 1e3:5.1f} ms  drops {row['bottleneck_drops']:.0f}"
        )

    path = record_truth(lab, duration, out, on_row=show)
    for name in ("dtn", "campus"):
        log = out / f"iperf3-{name}.json"
        if log.exists():
            summary = client_summary(log)
            typer.echo(
                f"iperf3 {name}: {summary['rate_bps'] / 1e6:.1f} Mb/s, "
                f"{summary['retransmits']:.0f} retransmits"
            )
    typer.echo(f"ground truth: {path}")


@lab_app.command("down")
def lab_down() -> None:
    """Stop every lab process and delete the namespaces (safe to repeat, and after a crash)."""
    from scidmz.lab import runner

    removed = runner.down()
    typer.echo(f"removed {', '.join(removed)}" if removed else "no lab was up")


@lab_app.command("run")
def lab_run(
    loop_file: Annotated[
        Path,
        typer.Option(
            "--file",
            "-f",
            help="A BorderLink and its DTNTransferPolicy in one YAML (e.g. examples/lab/).",
        ),
    ],
    duration: Annotated[
        float,
        typer.Option(help="Seconds of traffic under control.", callback=within(0, 86_400)),
    ] = 120.0,
    out: Annotated[Path, typer.Option(help="Report directory.")] = Path("lab-report"),
    strategy: Annotated[
        str | None,
        typer.Option(help="Override the link's spec.controller.strategy (trivial, pi, mlc)."),
    ] = None,
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", help="Scenario YAML when the run brings its own lab up."),
    ] = None,
) -> None:
    """Run a link's loop on the lab and report it against the kernel's ground truth.

    Target (packet tap), collector, controller (tc on the lab's shaper) and Prometheus;
    writes samples.csv, truth.csv, lab.png, summary.md. Uses the lab that is up, or brings
    one up for the run (the link's capacity, the policy's congestion control) and down
    after."""
    from scidmz.lab import loop, runner
    from scidmz.lab.scenario import lab_scenario
    from scidmz.lab.topology import LabError
    from scidmz.netsim.scenario import ScenarioError

    if not duration >= 5:
        fail("--duration must be at least 5 s")
    own_lab = False
    try:
        chosen = loop.load_loop(loop_file, strategy)
        if runner.existing_namespaces():
            lab = runner.read_state()
        else:
            from scidmz.api.units import parse_rate

            lab = runner.up(
                lab_scenario(
                    scenario,
                    {
                        "bottleneck.capacity_bps": parse_rate(chosen.link.capacity),
                        "dtn.congestion_control": chosen.policy.spec.congestion_control,
                    },
                ),
                progress=typer.echo,
            )
            own_lab = True
        summary = loop.run_loop(chosen, lab, duration, out, progress=typer.echo)
    except (LabError, ScenarioError) as error:
        fail(str(error))
        return
    finally:
        if own_lab:
            runner.down()
    typer.echo(
        f"{summary['strategy']}: DTN {summary['mean_dtn_delivered_bps'] / 1e6:.1f} Mb/s "
        f"(R* {summary['target_rate_bps'] / 1e6:g}), MRAE {summary['mrae_delivered']:.1%}; "
        + (
            f"transfer done in {summary['fct_s']:.2f} s; "
            if math.isfinite(summary["fct_s"])
            else ""
        )
        + f"report {out / 'summary.md'}"
    )


@lab_app.command("record")
def lab_record(
    matrix: Annotated[Path, typer.Option(help="The matrix YAML (e.g. examples/lab/matrix.yaml).")],
    out: Annotated[Path, typer.Option(help="Dataset directory.")],
) -> None:
    """Record a matrix of cases on real TCP: the dataset the simulator is calibrated on.

    Each case runs on a fresh lab under a fixed or stepped u; stores the kernel's
    per-second ground truth and every flow's cwnd, RTT and retransmissions."""
    from scidmz.lab.record import record_matrix
    from scidmz.lab.topology import LabError

    try:
        index = record_matrix(matrix, out, progress=typer.echo)
    except LabError as error:
        fail(str(error))
        return
    failed = [name for name, case in index["cases"].items() if case["status"] != "ok"]
    typer.echo(f"recorded {len(index['cases']) - len(failed)} cases in {out}")
    if failed:
        fail(f"failed: {', '.join(failed)} (see {out / 'index.json'})")
