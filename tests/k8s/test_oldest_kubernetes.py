"""The oldest Kubernetes release the chart allows (Chart.yaml's kubeVersion) takes what the
chart and the docs give it: an API server of that release (built by hack/testenv/build.sh)
establishes the CRDs, whose validation rules use CEL's IP and CIDR libraries, runs the
chart's ValidatingAdmissionPolicy, and takes every manifest the pages and examples show as
they show it (tests/k8s/test_docs_manifests.py's check, on this server). Only etcd and the
API server run: validation and admission are what a release difference can break here."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from scidmz.testenv.cluster import ControlPlane, ensure_toolchain, start_control_plane
from tests.k8s.conftest import REPO
from tests.k8s.test_docs_manifests import MANIFESTS, TENANTS, _apply, _objects, apply_as_shown
from tests.loops import link_object

CHART = REPO / "charts" / "scidmz"


def _allowed_minimum() -> str:
    """The release Chart.yaml's kubeVersion starts at (e.g. 1.31)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    match = re.match(r">=\s*(\d+\.\d+)", chart["kubeVersion"])
    assert match is not None, chart["kubeVersion"]
    return match.group(1)


@pytest.fixture(scope="module")
def oldest(tmp_path_factory) -> Iterator[ControlPlane]:
    tools = ensure_toolchain()
    plane = start_control_plane(
        workdir=tmp_path_factory.mktemp("oldest"), toolchain=tools, crds=(REPO / "crds",),
        apiserver_binary=tools.oldest_apiserver, controllers=False,
    )  # fmt: skip
    try:
        rendered = subprocess.run(
            [tools.path("helm"), "template", "oldest", str(CHART), "--show-only",
             "templates/admission-policy.yaml", "--kube-version", f"{_allowed_minimum()}.0"],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout  # fmt: skip
        plane.kubectl("apply", "-f", "-", input_text=rendered)
        _apply(plane, _objects(TENANTS.read_text()))
        yield plane
    finally:
        plane.stop()


def test_the_server_is_the_oldest_release_the_chart_allows(oldest):
    version = yaml.safe_load(oldest.kubectl("version", "-o", "yaml").stdout)["serverVersion"]
    assert f"{version['major']}.{version['minor']}" == _allowed_minimum()


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[m.where for m in MANIFESTS])
def test_each_manifest_shown_is_taken_as_shown_there(oldest, manifest):
    assert apply_as_shown(oldest, manifest) is None


def test_its_cel_refuses_what_the_crds_refuse(oldest):
    """The IP and CIDR libraries at work: overlapping DTN prefixes, a campus prefix inside
    a DTN's, are refused with the field named."""
    hosts = [{"name": "a", "receiverPrefix": "203.0.113.0/24"},
             {"name": "b", "receiverPrefix": "203.0.113.128/25"}]  # fmt: skip
    result = _apply(oldest, [link_object("overlap", dtnHosts=hosts)])
    assert result.returncode != 0 and "dtnHosts" in result.stderr, result.stderr
    bad = link_object("bad-prefix", dtnHosts=[{"name": "a", "receiverPrefix": "203.0.113.0/33"}])
    result = _apply(oldest, [bad])
    assert result.returncode != 0 and "receiverPrefix" in result.stderr, result.stderr
