"""The GitOps examples (examples/gitops/) are what Argo CD's and Flux's API servers would
take: applied with a server-side dry run against their real CRDs (fetched by
hack/testenv/build.sh; their controllers do not run here), and the conditions Argo CD's
health checks read are ones the operator writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.k8s.conftest import REPO

GITOPS = REPO / "examples" / "gitops"
NAMESPACES = ("argocd", "flux-system", "climate")


@pytest.fixture(scope="module")
def gitops_crds(plane):
    crds = Path(plane.toolchain.gitops_crds).resolve()  # kubectl does not follow a link
    # Argo CD's Application CRD is larger than client-side apply's annotation allows
    plane.kubectl("apply", "--server-side", "-f", str(crds))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
    for namespace in NAMESPACES:
        if plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            plane.kubectl("create", "namespace", namespace)
    return crds


@pytest.mark.parametrize("example", sorted(GITOPS.rglob("*.yaml")), ids=lambda p: p.name)
def test_each_gitops_example_is_taken_by_the_api_server(plane, gitops_crds, example):
    result = plane.kubectl("apply", "--dry-run=server", "-f", str(example), check=False)
    assert result.returncode == 0, result.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(example.read_text()) if d}
    assert kinds & {"Application", "Kustomization", "ConfigMap"}


def test_a_wrong_field_in_one_is_refused(plane, gitops_crds):
    """The schemas really apply: a misspelt field of an Application is refused."""
    app = next(d for d in yaml.safe_load_all((GITOPS / "argocd" / "scidmz.yaml").read_text())
               if d["kind"] == "Application")  # fmt: skip
    app["spec"]["destinaton"] = app["spec"].pop("destination")
    result = plane.kubectl("apply", "--dry-run=server", "-f", "-",
                           input_text=yaml.safe_dump(app), check=False)  # fmt: skip
    assert result.returncode != 0 and "destinaton" in result.stderr


def test_argo_health_reads_the_conditions_the_operator_writes():
    health = next(yaml.safe_load_all((GITOPS / "argocd" / "health.yaml").read_text()))
    read = set()
    for script in health["data"].values():
        read |= set(re.findall(r'c\.type == "(\w+)"', script))
    written = (REPO / "operator" / "scidmz" / "k8s" / "status.py").read_text()
    assert read == {"Ready", "Degraded", "Accepted"}
    for condition in read:
        assert f'"{condition}"' in written, condition
