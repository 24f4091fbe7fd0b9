"""What every lab test needs: root, iperf3, and one lab per module built from its scenario."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from scidmz.lab import runner
from scidmz.lab.runner import Lab
from scidmz.netsim.scenario import Scenario

NEEDS_ROOT_AND_IPERF3 = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(
        shutil.which("iperf3") is None, reason="iperf3 missing (make test installs it)"
    ),
]


def lab_for_module(scenario: Scenario, factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab up for one module's tests (any lab left behind is taken down first)."""
    runner.down()
    state = factory.mktemp("lab-state")
    built = runner.up(scenario, state_dir=state)
    yield built
    runner.down(state)
