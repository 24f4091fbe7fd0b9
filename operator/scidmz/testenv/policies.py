"""Many copies of the example policy, for the scale and fail-over benchmarks."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from scidmz.testenv.cluster import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "dtntransferpolicy.yaml"


def policy_name(k: int) -> str:
    return f"policy-{k:04d}"


def example_policies(n: int, example: Path = EXAMPLE) -> str:
    """``n`` policies as one YAML stream, named ``policy-0000``… in ``default``, their
    target rates spread over 300–790 Mb/s."""
    base = yaml.safe_load(example.read_text())
    docs = []
    for k in range(n):
        obj = copy.deepcopy(base)
        obj["metadata"] = {"name": policy_name(k), "namespace": "default"}
        obj["spec"]["targetRate"] = f"{300 + (k % 50) * 10}Mbps"
        docs.append(obj)
    return yaml.safe_dump_all(docs)
