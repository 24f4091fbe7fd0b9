"""Checking the commands a page tells a user to run: each ``scidmz …`` parses against the
CLI (its subcommands, options and arguments), each ``make …`` names a Makefile target, and
each repository file a command reads (``kubectl apply -f examples/…``, ``--matrix``,
``helm install … charts/scidmz``) is there. Used by the docs tests and the chart's NOTES
test."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import typer.main
from typer.core import TyperGroup

from scidmz.cli import app
from scidmz.testenv.cluster import REPO_ROOT

SHELL_BLOCK = re.compile(r"```(?:console|bash|sh|shell)\n(.*?)```", re.DOTALL)
INLINE = re.compile(r"(?<!`)`((?:scidmz|make) [^`]+)`(?!`)")
TARGET = re.compile(r"^([A-Za-z0-9_.-]+):", re.MULTILINE)
REPO_PATH = re.compile(r"^(?:examples|charts|bench|docs|hack|crds|dashboards|models|p4)/\S*$")


@dataclass(frozen=True)
class Command:
    where: str
    words: list[str]


def shell_lines(text: str) -> list[str]:
    """A shell block's command lines: prompts, comments and continuations handled."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return lines


def commands_in(text: str, where: str) -> list[Command]:
    """The commands in a page's shell blocks (each pipeline and ``&&`` part on its own) and
    its inline ``scidmz …``/``make …`` code."""
    found = []
    for block in SHELL_BLOCK.findall(text):
        for line in shell_lines(block):
            for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line.split(" #", maxsplit=1)[0]):
                try:
                    words = shlex.split(part)
                except ValueError:
                    continue
                if words:
                    found.append(Command(where, words))
    for inline in INLINE.findall(text):
        try:
            found.append(Command(f"{where} (inline)", shlex.split(inline)))
        except ValueError:
            continue
    return found


def program(words: list[str]) -> tuple[str, list[str]]:
    """The program a command runs and its arguments, past ``sudo``, ``VAR=value`` and a
    virtualenv's path; a usage line's optional parts (``[--port N]``) as plain words."""
    rest = [w.strip("[]") for w in words if w.strip("[]")]
    while rest and (rest[0] == "sudo" or re.match(r"^[A-Z_][A-Z0-9_]*=", rest[0])):
        rest.pop(0)
    if not rest:
        return "", []
    return Path(rest[0]).name, rest[1:]


CLI = typer.main.get_command(app)


def cli_problem(args: list[str]) -> str | None:
    """Why ``scidmz ARGS`` would not parse (None: it does). Placeholders such as
    ``<link>`` stand for values."""
    command = CLI
    path = ["scidmz"]
    while isinstance(command, TyperGroup):
        if not args or args[0].startswith("-"):
            return None  # the group's own --help or --version
        sub = command.get_command(typer.Context(command), args[0])
        if sub is None:
            return f"no command {' '.join(path)} {args[0]}"
        path.append(args.pop(0))
        command = sub
    # the option parser alone: no value is converted and no callback runs, so a page's
    # placeholder file names parse as the values they stand for
    try:
        _, positional, _ = command.make_parser(typer.Context(command)).parse_args(list(args))
    except Exception as error:  # typer's own click: its UsageError is not public
        if not hasattr(error, "format_message"):
            raise
        return f"{' '.join(path)}: {error.format_message()}"
    takes = [p for p in command.params if p.param_type_name == "argument"]
    if any(p.nargs < 0 for p in takes) or len(positional) <= len(takes):
        return None
    return f"{' '.join(path)}: unexpected argument(s) {' '.join(positional[len(takes) :])}"


def makefile_targets() -> set[str]:
    return set(TARGET.findall((REPO_ROOT / "Makefile").read_text()))


def problems(command: Command, targets: set[str]) -> list[str]:
    name, args = program(command.words)
    if args[:1] == ["…"]:  # "scidmz …": any command of it
        args = []
    found = []
    if name == "scidmz":
        why = cli_problem(list(args))
        if why:
            found.append(why)
    elif name == "make":
        for target in (a for a in args if not a.startswith("-") and not set("=*") & set(a)):
            if target not in targets:
                found.append(f"no Makefile target {target!r}")
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        placeholder = any(c in value for c in "<>*{$")
        if REPO_PATH.match(value) and not placeholder and not (REPO_ROOT / value).exists():
            found.append(f"{value} is not in the repository")
    return [f"{command.where}: `{' '.join(command.words)}`: {p}" for p in found]


def words_of(line: str) -> list[str]:
    """A shell line's words up to a comment ([] when it does not split)."""
    try:
        return shlex.split(line.split(" #", maxsplit=1)[0])
    except ValueError:
        return []
