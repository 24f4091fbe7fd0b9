"""Tools around the services: ``demo``, ``testenv``, and the generators of checked-in
files (``crd``, ``p4info``, ``dashboards``)."""

from __future__ import annotations

import logging
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from scidmz.api.flags import within
from scidmz.cli.common import fail

testenv_app = typer.Typer(
    help="A local Kubernetes control plane (etcd, apiserver, kwok).", no_args_is_help=True
)


class DemoMode(StrEnum):
    cluster = "cluster"
    host = "host"


def demo(
    mode: Annotated[
        DemoMode,
        typer.Option(
            help="cluster: the image on a real node, the chart installed with helm, the "
            "loop in pods (root, containerd, buildah); host: the loop as local processes "
            "beside a control plane with fake nodes (any machine)."
        ),
    ] = DemoMode.cluster,
    keep: Annotated[
        bool,
        typer.Option(help="Leave everything running until Ctrl-C instead of cleaning up at once."),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to wait for Ready (default: 300 in a cluster, 60 on the host).",
            callback=within(0, 86_400),
        ),
    ] = None,
    duration: Annotated[
        float,
        typer.Option(
            help="Seconds to run the example's loop live, from its first decision.",
            callback=within(0, 86_400),
        ),
    ] = 60.0,
    report: Annotated[Path, typer.Option(help="Where the run's report (CSV, plots) goes.")] = Path(
        "demo-report"
    ),
) -> None:
    """The product on a local cluster: the chart, examples/*.yaml, then one policy's loop
    running live, and a report."""
    import importlib.util

    # checked before anything starts: the report's plots come at the end of the run
    if importlib.util.find_spec("matplotlib") is None:
        fail(
            "scidmz demo plots its report with matplotlib, which this install lacks: "
            "pip install 'scidmz[train]' (make demo installs it)"
        )
    from scidmz.demo import DemoError, run_demo
    from scidmz.demo_cluster import run_cluster_demo

    logging.basicConfig(level=logging.WARNING)
    try:
        if mode is DemoMode.cluster:
            run_cluster_demo(keep=keep, timeout_s=timeout or 300.0, duration_s=duration,
                             report_dir=report)  # fmt: skip
        else:
            run_demo(keep=keep, timeout_s=timeout or 60.0, duration_s=duration, report_dir=report)
    except DemoError as error:
        fail(str(error))


def crd(
    out_dir: Annotated[
        Path | None,
        typer.Option(
            help="Write one file per CRD (scidmz.io_<plural>.yaml) here instead of printing them."
        ),
    ] = None,
    admission_policy: Annotated[
        Path | None,
        typer.Option(help="Also write the chart's ValidatingAdmissionPolicy template here."),
    ] = None,
) -> None:
    """Print the BorderLink and DTNTransferPolicy CRDs generated from the API models."""
    from scidmz.api.admission_policy import render_chart_template
    from scidmz.api.crd import RESOURCES, crd_file_name, render_crd_yaml

    if admission_policy is not None:
        admission_policy.write_text(render_chart_template())
        typer.echo(f"wrote {admission_policy}")
    if out_dir is None:
        sys.stdout.write("---\n".join(render_crd_yaml(r) for r in RESOURCES))
        return
    if not out_dir.is_dir():
        fail(f"--out-dir {out_dir}: not a directory")
    for resource in RESOURCES:
        path = out_dir / crd_file_name(resource)
        path.write_text(render_crd_yaml(resource))
        typer.echo(f"wrote {path}")


def p4info(
    arch: Annotated[str, typer.Option(help="v1model or tna.")] = "v1model",
    out: Annotated[
        Path | None, typer.Option("--out", help="Write here (default: standard output).")
    ] = None,
) -> None:
    """Render the P4Info of the p4/ programs from the pipeline contract (text format)."""
    from google.protobuf import text_format

    from scidmz.contract.pipeline import build_p4info

    if arch not in ("v1model", "tna"):
        fail(f"--arch must be v1model or tna, not {arch!r}")
    text = text_format.MessageToString(build_p4info(arch))  # type: ignore[arg-type]
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}")


def dashboards(
    out: Annotated[Path, typer.Option(help="Folder for <name>.json.")] = Path("dashboards"),
) -> None:
    """Write the Grafana dashboards (formatted JSON generated from the metric names)."""
    from scidmz.metrics.dashboards import DASHBOARDS, render

    out.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (out / f"{name}.json").write_text(render(name))
        typer.echo(f"wrote {out / f'{name}.json'}")


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
        fail(str(error))
        return
    typer.echo(f"export KUBECONFIG={plane.kubeconfig}\nCtrl-C stops it.")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    plane.stop()
