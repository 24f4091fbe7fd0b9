"""The alert rules pass promtool's checks and its unit tests (dashboards/alerts_test.yaml)."""

import shutil
import subprocess

import pytest

from scidmz.testenv.cluster import REPO_ROOT

DASHBOARDS = REPO_ROOT / "dashboards"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (.ci/run installs Debian's prometheus)")
    return subprocess.run(
        [promtool, *args], cwd=DASHBOARDS, capture_output=True, text=True, check=False
    )


def test_rules_are_valid():
    result = _promtool("check", "rules", "alerts.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 15 rules found" in result.stdout


def test_rules_fire_as_specified():
    result = _promtool("test", "rules", "alerts_test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
