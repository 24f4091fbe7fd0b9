"""What every command module shares: how a command fails, logs and finds its HTTP port."""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path
from typing import Annotated, NoReturn

import typer

ConfigOption = Annotated[
    Path, typer.Option("--config", help="Runtime config rendered by the operator (YAML).")
]
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Log at debug level.")]


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def resolve_http_port(option: int | None, default: int) -> int:
    """The --http-port option, else $SCIDMZ_HTTP_PORT (set by the operator), else default."""
    return option if option is not None else int(os.environ.get("SCIDMZ_HTTP_PORT", default))


def probes_on_loopback() -> bool:
    """$SCIDMZ_PROBES_ON_LOOPBACK (the operator sets it on the node's network): probes on
    127.0.0.1, mutual TLS only on the public port (``scidmz.metrics.endpoint``)."""
    return os.environ.get("SCIDMZ_PROBES_ON_LOOPBACK", "").lower() == "true"


def raise_fd_limit() -> None:
    """Raise this process's soft limit on open files to $SCIDMZ_FD_LIMIT (the chart's
    ``workloads.fileDescriptors``; a pod spec has no ulimit field), within the hard limit.
    A value that is not a number is said and ignored."""
    wanted = os.environ.get("SCIDMZ_FD_LIMIT")
    if not wanted:
        return
    try:
        raised = set_fd_limit(int(wanted))
    except ValueError:
        typer.secho(f"warning: SCIDMZ_FD_LIMIT={wanted!r} is not a number", err=True)
        return
    if raised < int(wanted):
        typer.secho(
            f"warning: open files limited to {raised} (SCIDMZ_FD_LIMIT={wanted}, above the "
            "hard limit)", err=True,
        )  # fmt: skip


def set_fd_limit(wanted: int) -> int:
    """Set the soft RLIMIT_NOFILE to ``wanted`` capped at the hard limit; the new soft."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def fail(message: str, code: int = 2) -> NoReturn:
    """Exit with ``error: message`` on stderr: 2 (the default) when a command refuses its
    input, 1 when it ran and failed (a fail-safe it could not restore)."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=code)
