"""``scidmz preflight``: check a node for the parts of a border link it holds."""

from __future__ import annotations

import json
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError

from scidmz.cli.target import parse_taps

_LEVEL = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}


def preflight(
    link: Annotated[
        str | None,
        typer.Option(
            help="A BorderLink manifest (YAML) whose parts on this node are checked; '-' reads "
            "it from stdin (`kubectl get bl NAME -o yaml | scidmz preflight --link -`).",
        ),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(help="This node's name as the link names it (default: the host name)."),
    ] = None,
    taps: Annotated[
        str | None,
        typer.Option(
            help="A software tap's mirror interfaces, as `scidmz target --taps` takes them: "
            "campus=IF,dtn=IF[,dtn=IF…],bottleneck=IF,acks=IF.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the findings as JSON, one object each.")
    ] = False,
) -> None:
    """Check this node for what a border link runs on it: its interfaces (present, up,
    offloads, root qdisc), the kernel's qdiscs and packet sockets, capabilities, and for a
    software tap a packet socket and a compiler. Changes nothing. Exits 1 when a check
    fails, 2 on bad input."""
    from rich.console import Console
    from rich.table import Table

    from scidmz.preflight.checks import evaluate
    from scidmz.preflight.facts import read_facts
    from scidmz.preflight.roles import (
        Role,
        link_nodes,
        link_roles,
        link_spec,
        one_link,
        tap_roles,
    )

    here = node or socket.gethostname()
    roles: list[Role] = []
    if link is not None:
        try:
            text = sys.stdin.read() if link == "-" else Path(link).read_text()
            name, spec = link_spec(one_link(list(yaml.safe_load_all(text))))
        except (OSError, yaml.YAMLError, ValueError, ValidationError) as error:
            typer.echo(f"--link {link}: {error}", err=True)
            raise typer.Exit(2) from None
        roles += link_roles(spec, here)
        if not roles and taps is None:
            named = ", ".join(link_nodes(spec)) or "none"
            typer.echo(
                f"{name} runs nothing on node {here} (the nodes it names: {named}); give "
                "--node", err=True,
            )  # fmt: skip
            raise typer.Exit(2)
    if taps is not None:
        try:
            roles += tap_roles(parse_taps(taps))
        except ValueError as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(2) from None
    if not roles:
        typer.echo("nothing to check: give --link, --taps or both", err=True)
        raise typer.Exit(2)
    findings = evaluate(roles, read_facts(r.interface for r in roles))
    if as_json:
        typer.echo(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        table = Table(title=f"scidmz preflight on {here}")
        for column in ("", "what", "check", "finding"):
            table.add_column(column)
        for f in findings:
            table.add_row(_LEVEL[f.level], f.subject, f.check, f.detail)
        Console().print(table)
    if any(f.level == "fail" for f in findings):
        raise typer.Exit(1)
