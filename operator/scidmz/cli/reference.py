"""The CLI reference of the docs site, rendered from the command definitions.

It walks the Click tree Typer builds from :mod:`scidmz.cli` (the same objects ``--help``
prints), so every command, option, default and help text on the page is the code's own:
the page cannot drift from the CLI. Pure: a command tree in, Markdown out.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import typer.main

Command = Any
"""A Click command or group as Typer builds it (Typer bundles its own Click)."""


@dataclass(frozen=True)
class Entry:
    """One command of the tree and the words that invoke it."""

    words: tuple[str, ...]
    command: Command


def commands(root: Command, words: tuple[str, ...] = ()) -> Iterator[Entry]:
    """Every command and group under ``root``, depth first in registration order."""
    yield Entry(words, root)
    for name, child in getattr(root, "commands", {}).items():
        yield from commands(child, (*words, name))


def anchor(words: tuple[str, ...]) -> str:
    return "-".join(("scidmz", *words))


def help_paragraphs(command: Command) -> list[str]:
    """The command's help as paragraphs with single line breaks joined (as --help shows
    them); text after a form feed is for developers, as in Click."""
    text = inspect.cleandoc(command.help or "").partition("\f")[0]
    return [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _flag(param: Any) -> str:
    names = [*param.opts, *getattr(param, "secondary_opts", [])]
    return " / ".join(f"`{n}`" for n in names)


_VALUES = {str: "TEXT", int: "INTEGER", float: "NUMBER", Path: "PATH", bool: "BOOLEAN"}


def _value(param: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    annotation = param.type_descriptor.annotation
    inner = [a for a in typing.get_args(annotation) if a is not type(None)]
    return _VALUES.get(inner[0] if inner else annotation, "TEXT")


def _default(param: Any) -> str:
    if param.required:
        return "required"
    default = param.default
    if default is None or callable(default):
        return ""
    if isinstance(default, bool):
        return f"`{'--' + param.name.replace('_', '-') if default else 'off'}`"
    return f"`{default}`"


def _options(command: Command) -> list[str]:
    shown = [p for p in command.params if not getattr(p, "hidden", False)]
    shown = [p for p in shown if p.name not in ("install_completion", "show_completion")]
    if not shown:
        return []
    rows = ["| Option | Value | Default | Meaning |", "|---|---|---|---|"]
    for param in shown:
        if getattr(param, "param_type_name", "") == "argument":
            name = f"`{param.name.upper()}`"
        else:
            name = _flag(param)
        rows.append(f"| {name} | {_value(param)} | {_default(param)} | {_cell(param.help or '')} |")
    return [*rows, ""]


def _section(entry: Entry) -> list[str]:
    command = entry.command
    title = " ".join(("scidmz", *entry.words))
    depth = min(len(entry.words) + 2, 5)
    lines = [f"{'#' * depth} `{title}` {{#{anchor(entry.words)}}}", ""]
    lines += [f"{p}\n" for p in help_paragraphs(command)]
    subcommands = getattr(command, "commands", {})
    if subcommands:
        lines += ["| Command | What it does |", "|---|---|"]
        for name, child in subcommands.items():
            summary = (help_paragraphs(child) or [""])[0]
            lines.append(f"| [`{name}`](#{anchor((*entry.words, name))}) | {_cell(summary)} |")
        lines.append("")
    else:
        lines += ["```console", f"{title} [OPTIONS]", "```", ""]
    return lines + _options(command)


def cli_reference(app: typer.Typer, intro: str) -> str:
    """The CLI reference page: ``intro``, then every command with its options."""
    root = typer.main.get_command(app)
    body: list[str] = []
    for entry in commands(root):
        body += _section(entry)
    text = "\n".join([intro.rstrip(), "", *body])
    return re.sub(r"\n{3,}", "\n\n", text)
