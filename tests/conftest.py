from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def example_policy() -> dict[str, Any]:
    """examples/dtntransferpolicy.yaml, as a fresh dict per test."""
    return copy.deepcopy(yaml.safe_load((REPO / "examples" / "dtntransferpolicy.yaml").read_text()))
