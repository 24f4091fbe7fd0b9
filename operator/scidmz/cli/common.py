"""What every command module shares: how a command fails, logs and finds its HTTP port."""

from __future__ import annotations

import logging
import os
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


def fail(message: str, code: int = 2) -> NoReturn:
    """Exit with ``error: message`` on stderr: 2 (the default) when a command refuses its
    input, 1 when it ran and failed (a fail-safe it could not restore)."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=code)
