"""The ``scidmz`` command: this module only wires the command groups together.

Each group lives in a module of its own: ``services`` (operator, collector, controller,
shaper), ``target`` (the software switch), ``sim``, ``lab``, ``learn`` (train, tune),
``bench``, and ``tools`` (demo, testenv, the generators of checked-in files). The docs
site's CLI reference is generated from this tree (``scidmz.cli.reference``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from scidmz.cli import bench, lab, learn, preflight, services, sim, target, tools

app = typer.Typer(
    help="scidmz: keep Science DMZ transfers at their target rate on a shared campus link.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(shown: bool) -> None:
    if shown:
        from scidmz import __version__

        typer.echo(f"scidmz {__version__}")
        raise typer.Exit


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_version,
                     is_eager=True),
    ] = False,
) -> None:  # fmt: skip
    """scidmz: keep Science DMZ transfers at their target rate on a shared campus link."""


SERVICES = "Services (what the operator runs)"
EXPERIMENTS = "Simulator, lab and models"
TOOLS = "Tools"

for command in (services.operator, services.collector, services.controller, services.shaper):
    app.command(rich_help_panel=SERVICES)(command)
app.command(rich_help_panel=SERVICES)(target.target)
app.add_typer(sim.sim_app, name="sim", rich_help_panel=EXPERIMENTS)
app.add_typer(lab.lab_app, name="lab", rich_help_panel=EXPERIMENTS)
app.command(rich_help_panel=EXPERIMENTS)(learn.train)
app.command(rich_help_panel=EXPERIMENTS)(learn.tune)
app.add_typer(bench.bench_app, name="bench", rich_help_panel=EXPERIMENTS)
app.command(rich_help_panel=TOOLS)(tools.demo)
app.command(rich_help_panel=TOOLS)(preflight.preflight)
app.add_typer(tools.testenv_app, name="testenv", rich_help_panel=TOOLS)
for generator in (tools.crd, tools.p4info, tools.dashboards):
    app.command(rich_help_panel=TOOLS)(generator)

__all__ = ["app"]
