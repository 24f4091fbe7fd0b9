"""The troubleshooting page keeps up with the reasons the code writes: every reason a policy
can be refused or held for, and every reason a link's loop can be refused for, has its row."""

from __future__ import annotations

import re
from pathlib import Path

from scidmz.api import admission

REPO = Path(__file__).parents[2]
PAGE = REPO / "docs" / "operating" / "troubleshooting.md"


def _link_refusals() -> set[str]:
    """Every ``LinkRefused("Reason", …)`` and the other Reconciled reasons of links.py."""
    source = (REPO / "operator" / "scidmz" / "k8s" / "links.py").read_text()
    refused = set(re.findall(r'LinkRefused\(\s*"([A-Za-z]+)"', source))
    outcomes = set(re.findall(r'Outcome\(\s*False,\s*"([A-Za-z]+)"', source))
    return refused | outcomes


def test_every_reason_a_user_can_meet_has_its_row() -> None:
    text = PAGE.read_text()
    reasons = {r for r in admission.REASONS if r != admission.ACCEPTED} | _link_refusals()
    assert len(_link_refusals()) >= 6, "the scan of links.py found too few reasons"
    missing = sorted(r for r in reasons if f"`{r}`" not in text)
    assert not missing, f"docs/operating/troubleshooting.md lacks {missing}"
