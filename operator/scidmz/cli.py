"""The ``scidmz`` command: one entry point for every component."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from scidmz.api.runtime import ConfigError

app = typer.Typer(
    help="scidmz: keep Science DMZ transfers at their target rate on a shared campus link.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
testenv_app = typer.Typer(
    help="A local Kubernetes control plane (etcd, apiserver, kwok).", no_args_is_help=True
)
app.add_typer(testenv_app, name="testenv")
sim_app = typer.Typer(
    help="The embedded campus / Science DMZ network simulator.", no_args_is_help=True
)
app.add_typer(sim_app, name="sim")

ConfigOption = Annotated[
    Path, typer.Option("--config", help="Runtime config rendered by the operator (YAML).")
]


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def operator(
    namespace: Annotated[
        str | None,
        typer.Option(help="Watch only this namespace (default: all; env SCIDMZ_NAMESPACE)."),
    ] = None,
    standalone: Annotated[
        bool, typer.Option(help="No peering: a single replica (development).")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the DTNTransferPolicy operator (kopf)."""
    import os

    import kopf

    from scidmz.k8s import handlers  # noqa: F401  (registers the handlers)
    from scidmz.k8s.settings import OperatorSettings

    if namespace:
        os.environ["SCIDMZ_NAMESPACE"] = namespace
    if standalone:
        os.environ["SCIDMZ_STANDALONE"] = "true"
    settings = OperatorSettings()
    kopf.configure(verbose=verbose, log_prefix=False)
    kopf.run(
        clusterwide=settings.namespace is None,
        namespaces=[settings.namespace] if settings.namespace else [],
        standalone=settings.standalone,
        peering_name=settings.peering_name,
        liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz",
    )


@app.command()
def collector(config: ConfigOption) -> None:
    """Telemetry collector: P4Runtime client computing the seven state variables y(t)."""
    from scidmz.workload import run_placeholder

    try:
        run_placeholder("collector", config, default_port=9460)
    except ConfigError as error:
        _fail(str(error))


@app.command()
def controller(config: ConfigOption) -> None:
    """MLC controller: ANN inverse model + anti-windup PI setting u(t) every T."""
    from scidmz.workload import run_placeholder

    try:
        run_placeholder("controller", config, default_port=9461)
    except ConfigError as error:
        _fail(str(error))


@app.command()
def crd(
    out: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the DTNTransferPolicy CRD generated from the API models."""
    from scidmz.api.crd import render_crd_yaml

    text = render_crd_yaml()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}")


@app.command()
def p4info(
    arch: Annotated[str, typer.Option(help="v1model or tna.")] = "v1model",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write here (default: standard output).")
    ] = None,
) -> None:
    """Render the P4Info of the p4/ programs from the pipeline contract (text format)."""
    from google.protobuf import text_format

    from scidmz.telemetry.pipeline import build_p4info

    if arch not in ("v1model", "tna"):
        _fail(f"--arch must be v1model or tna, not {arch!r}")
    text = text_format.MessageToString(build_p4info(arch))  # type: ignore[arg-type]
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}")


@testenv_app.command("up")
def testenv_up(
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Keep state here (default: a temporary directory).")
    ] = None,
) -> None:
    """Start the local control plane and keep it running until Ctrl-C."""
    import signal
    import threading

    from scidmz.testenv.cluster import ControlPlaneError, start_control_plane

    try:
        plane = start_control_plane(workdir=workdir)
    except ControlPlaneError as error:
        _fail(str(error))
        return
    typer.echo(f"export KUBECONFIG={plane.kubeconfig}\nCtrl-C stops it.")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    plane.stop()


@app.command()
def demo(
    keep: Annotated[
        bool,
        typer.Option(help="Leave everything running until Ctrl-C instead of cleaning up at once."),
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for Ready.")] = 60.0,
) -> None:
    """Local control plane + operator + examples/*.yaml, showing their status."""
    from scidmz.demo import DemoError, run_demo

    logging.basicConfig(level=logging.WARNING)
    try:
        run_demo(keep=keep, timeout_s=timeout)
    except DemoError as error:
        _fail(str(error))


@sim_app.command("run")
def sim_run(
    duration: Annotated[
        float, typer.Option(help="Simulated seconds (rounded up to whole sample times).")
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for samples.csv, flows.csv, summary.json.")
    ],
    scenario: Annotated[
        Path | None,
        typer.Option("--scenario", help="Scenario YAML (default: the paper's testbed)."),
    ] = None,
    u_schedule: Annotated[
        Path | None,
        typer.Option("--u-schedule", help="u(t) schedule, YAML (steps or random) or CSV."),
    ] = None,
) -> None:
    """Run the simulator open loop and write per-sample ground truth and a summary."""
    import json

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from scidmz.netsim.run import run_simulation
    from scidmz.netsim.scenario import Scenario, ScenarioError, load_scenario
    from scidmz.netsim.schedule import ScheduleError, load_schedule

    try:
        chosen = load_scenario(scenario) if scenario is not None else Scenario()
        schedule = load_schedule(u_schedule) if u_schedule is not None else None
    except (ScenarioError, ScheduleError) as error:
        _fail(str(error))
        return
    if not duration > 0:
        _fail("--duration must be a positive number of seconds")
    with Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("sim", total=duration)
        step = chosen.sample_time_s

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done * step, total=total * step)

        try:
            summary = run_simulation(chosen, duration, out, schedule, progress=advance)
        except ScenarioError as error:
            _fail(str(error))
            return
    summary.pop("scenario", None)
    typer.echo(json.dumps(summary, indent=2, default=str))
    typer.echo(f"wrote {out / 'samples.csv'}, {out / 'flows.csv'}, {out / 'summary.json'}")


if __name__ == "__main__":
    app()
