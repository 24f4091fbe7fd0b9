"""The README is a short entry point whose headline figures are all in benchmark reports, and
no text in the repository numbers the team's work sessions."""

from __future__ import annotations

import re
import subprocess

import pytest

from scidmz.testenv.cluster import REPO_ROOT

README = REPO_ROOT / "README.md"
MAX_LINES = 300
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def normalised(text: str) -> str:
    """Typography aside: the README writes −, ×, thin spaces and "4.18 %" where the reports
    write -, x and "4.18%"."""
    text = text.replace("−", "-").replace("×", "x").replace("\u2009", " ")
    return re.sub(r"(\d) +%", r"\1%", text)


def numbers(text: str) -> set[str]:
    return {n.lstrip("+") for n in _NUMBER.findall(normalised(text))}


def figure_rows() -> list[list[str]]:
    text = README.read_text()
    table = text.split("<!-- figures:start -->", 1)[1].split("<!-- figures:end -->", 1)[0]
    rows = [line for line in table.strip().splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md: {lines} lines (limit {MAX_LINES}); details go to docs/"


def test_every_headline_figure_is_in_the_report_it_links():
    rows = figure_rows()
    assert len(rows) >= 10, "the headline table lost its rows"
    for figure, _target, measured, command, report in rows:
        link = _LINK.search(report)
        assert link, f"{figure}: no report linked"
        path = REPO_ROOT / link.group(1)
        assert path.is_file(), f"{figure}: {path} does not exist"
        assert command.startswith("`") and command.count("`") >= 2, f"{figure}: no command"
        report_numbers = numbers(path.read_text())
        missing = numbers(measured) - report_numbers
        assert not missing, f"{figure}: {sorted(missing)} of {measured!r} not in {path.name}"


def test_the_figures_check_catches_a_figure_that_is_not_in_its_report():
    report = (REPO_ROOT / "bench/results/control_latency.md").read_text()
    assert numbers("0.181 ms") <= numbers(report)
    assert not numbers("0.182 ms") <= numbers(report)
    assert numbers("−38.5 % (4.18 %)") == {"-38.5", "4.18"}


def test_every_local_link_of_the_readme_exists():
    for target in _LINK.findall(README.read_text()):
        if "://" in target:
            continue
        assert (REPO_ROOT / target).exists(), f"README.md links to {target}, which does not exist"


@pytest.mark.parametrize(
    "pattern",
    [r"\bstops? [0-9]+", r"\bissues? [0-9]+"],
    ids=["stop N", "issue N"],
)
def test_no_text_in_the_repository_numbers_the_team_s_work(pattern):
    """What changed goes to CHANGELOG.md and what was learned to docs/; never a work
    session's or an issue's number, labels that mean nothing to a reader."""
    found = subprocess.run(
        ["git", "grep", "--untracked", "-niE", pattern, "--", ".", ":!tests/docs/test_readme.py"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert found.returncode == 1, f"milestone labels found:\n{found.stdout[:3000]}"
