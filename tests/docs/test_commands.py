"""Every command the docs tell a user to run exists as written (``tests.docs.commands``):
the README, the docs site and the chart's README. The chart's NOTES.txt, as ``helm install``
prints it, is checked the same way in tests/k8s/test_chart.py."""

from __future__ import annotations

import shlex

import pytest

from scidmz.testenv.cluster import REPO_ROOT
from tests.docs.commands import (
    Command,
    commands_in,
    makefile_targets,
    problems,
    program,
    shell_lines,
)

PAGES = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").rglob("*.md")),
    REPO_ROOT / "charts" / "scidmz" / "README.md",
]


def _page_commands() -> list[Command]:
    return [
        c for page in PAGES for c in commands_in(page.read_text(), str(page.relative_to(REPO_ROOT)))
    ]


def test_every_command_on_the_pages_exists_as_written():
    targets = makefile_targets()
    commands = _page_commands()
    assert sum(program(c.words)[0] == "scidmz" for c in commands) > 40
    assert sum(program(c.words)[0] == "make" for c in commands) > 5
    found = [p for c in commands for p in problems(c, targets)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("scidmz lab recrod --matrix x.yaml", "no command scidmz lab recrod"),
        ("scidmz lab record --matirx x.yaml", "No such option"),
        ("scidmz lab down now", "unexpected argument(s) now"),
        ("make tset", "no Makefile target 'tset'"),
        ("kubectl apply -f examples/no-such.yaml", "examples/no-such.yaml is not in"),
    ],
)
def test_a_stale_command_is_caught(line, why):
    found = problems(Command("page", shlex.split(line)), makefile_targets())
    assert len(found) == 1 and why in found[0], found


def test_prompts_comments_and_continuations_are_read_as_the_shell_would():
    block = "$ scidmz lab up \\\n    --scenario examples/lab/cubic-1G.yaml  # root\n# a note\n"
    assert shell_lines(block) == ["scidmz lab up  --scenario examples/lab/cubic-1G.yaml  # root"]
    (command,) = commands_in(f"```console\n{block}```\n", "page")
    assert command.words == ["scidmz", "lab", "up", "--scenario", "examples/lab/cubic-1G.yaml"]
    assert program(["sudo", "SCIDMZ_X=1", ".venv/bin/scidmz", "demo"]) == ("scidmz", ["demo"])
