"""charts/scidmz with the real helm: lint, render each ci values file against the API server,
install / upgrade / uninstall on the local control plane (kwok runs the operator pods)."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from scidmz.metrics.dashboards import DASHBOARDS, render
from tests.docs.commands import (
    Command,
    makefile_targets,
    problems,
    program,
    shell_lines,
    words_of,
)
from tests.k8s.conftest import REPO, wait_for

CHART = REPO / "charts" / "scidmz"
KUBE_VERSION = "1.37.1"


def _helm(plane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    helm = Path(plane.toolchain.path("helm"))
    if not helm.exists():
        pytest.fail(f"{helm} missing: hack/testenv/build.sh builds helm")
    result = subprocess.run(
        [str(helm), "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def test_chart_copies_are_the_sources():
    for crd in (REPO / "crds").glob("*.yaml"):
        assert (CHART / "crds" / crd.name).read_text() == crd.read_text(), (
            f"make dashboards ({crd.name})"
        )
    assert (CHART / "files" / "alerts.yaml").read_text() == (
        REPO / "dashboards" / "alerts.yaml"
    ).read_text()
    for name in DASHBOARDS:
        generated = render(name)
        assert (REPO / "dashboards" / f"{name}.json").read_text() == generated, "make dashboards"
        assert (CHART / "files" / "dashboards" / f"{name}.json").read_text() == generated


@pytest.fixture(scope="module")
def monitoring_crds(plane) -> None:
    """The Prometheus Operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs."""
    crds = plane.toolchain.monitoring_crds.resolve()  # kubectl takes a symlink for a file
    if not crds.is_dir():
        pytest.fail(f"{crds} missing: hack/testenv/build.sh fetches it")
    plane.kubectl("apply", "--server-side", "-f", str(crds))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))


def test_lint_and_every_ci_values_file_applies_server_side(plane, monitoring_crds):
    lint = _helm(plane, "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART))
    assert "0 chart(s) failed" in lint.stdout
    for values in sorted((CHART / "ci").glob("*.yaml")):
        rendered = _helm(
            plane, "template", "ci", str(CHART), "--namespace", "default",
            "--kube-version", KUBE_VERSION, "-f", str(values),
        ).stdout  # fmt: skip
        applied = plane.kubectl(
            "apply", "--dry-run=server", "-f", "-", input_text=rendered, check=False
        )
        assert applied.returncode == 0, f"{values.name}: {applied.stderr}"
        assert "deployment.apps/ci-scidmz created (server dry run)" in applied.stdout
        # RBAC, the admission policy and the NetworkPolicy pass the API server's own checks
        for kind in (
            "clusterrole.rbac.authorization.k8s.io/ci-scidmz",
            "role.rbac.authorization.k8s.io/ci-scidmz",
            "validatingadmissionpolicy.admissionregistration.k8s.io/ci-scidmz-tenants",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io/ci-scidmz-tenants",
            "networkpolicy.networking.k8s.io/ci-scidmz-operator",
        ):
            assert f"{kind} created (server dry run)" in applied.stdout, (values.name, kind)
        if values.name == "monitoring-values.yaml":
            for kind in ("servicemonitor", "podmonitor", "prometheusrule"):
                assert f"{kind}.monitoring.coreos.com/" in applied.stdout, kind


def test_bad_values_are_refused_by_the_schema(plane):
    for setting, named in (
        ("operator.replicas=-1", "replicas"),
        # the metrics port may not take the health probe's
        ("operator.metricsPort=8080", "metricsPort"),
        # a peering record shorter than a keepalive round would flap the leader
        ("operator.peeringLifetimeSeconds=1", "peeringLifetimeSeconds"),
        # the workloads never run as root
        ("workloads.runAsUser=0", "runAsUser"),
        ("simulatedSwitch.dtnAddress=dtn-1", "dtnAddress"),
    ):
        result = _helm(
            plane, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
            "--set", setting, check=False,
        )  # fmt: skip
        assert result.returncode != 0 and named in result.stderr, setting


def test_install_upgrade_uninstall(plane):
    namespace = f"chart-{uuid.uuid4().hex[:6]}"
    release = "scidmz"
    peering = f"scidmz-{namespace}"  # cluster-scoped: not the name other tests' operators use
    installed = _helm(
        plane, "install", release, str(CHART), "--namespace", namespace, "--create-namespace",
        "--set", "dashboards.enabled=true", "--set", f"operator.peeringName={peering}",
    )  # fmt: skip
    # the notes point an administrator at a link on a real switch, not at the simulated
    # one the release does not run, and at files that exist
    notes = installed.stdout.split("NOTES:", 1)[1]
    assert "bbr-edge-tc.yaml" in notes and "borderlink.yaml" not in notes
    for example in re.findall(r"examples/([\w.-]+\.yaml)", notes):
        assert (REPO / "examples" / example).exists(), example
    # and every command they give runs as written (the docs pages' check)
    indented = "\n".join(line for line in notes.splitlines() if line.startswith("  "))
    told = [Command("NOTES.txt", w) for line in shell_lines(indented) if (w := words_of(line))]
    assert sum(program(c.words)[0] == "kubectl" for c in told) >= 3
    stale = [problem for c in told for problem in problems(c, makefile_targets())]
    assert not stale, stale
    annotation = "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}"
    owned = plane.kubectl("get", "clusterkopfpeering", peering, "-o", annotation)
    assert owned.stdout == release  # the chart owns the leader-election object

    def running(count: int) -> bool:
        pods = plane.kubectl(
            "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/instance=scidmz",
            "-o", "jsonpath={.items[*].status.phase}",
        ).stdout.split()  # fmt: skip
        return pods == ["Running"] * count

    wait_for(lambda: running(2), 60, "two operator pods Running (kwok)")
    # the installed RBAC grants what the operator's client does (the apiserver runs RBAC)
    account = plane.kubectl(
        "get", "serviceaccount", "-n", namespace, "-l", "app.kubernetes.io/instance=scidmz",
        "-o", "jsonpath={.items[0].metadata.name}",
    ).stdout.strip()  # fmt: skip
    user = f"system:serviceaccount:{namespace}:{account}"

    def can(verb: str, resource: str, where: str | None = namespace) -> bool:
        scope = ["-n", where] if where else ["--all-namespaces"]
        resource, _, sub = resource.partition("/")
        subresource = [f"--subresource={sub}"] if sub else []
        answer = plane.kubectl(
            "auth", "can-i", verb, resource, *subresource, *scope, "--as", user, check=False
        )
        return answer.stdout.strip() == "yes"

    # in its own namespace: the links' loops
    needed = [
        ("patch", "deployments.apps"), ("delete", "deployments.apps"),
        ("patch", "configmaps"), ("patch", "services"), ("create", "secrets"),
        ("get", "secrets"), ("patch", "networkpolicies.networking.k8s.io"),
        ("patch", "serviceaccounts"), ("list", "pods"), ("patch", "pods"),
    ]  # fmt: skip
    assert [need for need in needed if not can(*need)] == []
    assert not can("delete", "pods") and not can("create", "pods") and not can("exec", "pods")
    # cluster-wide: read the two resources and namespaces, write their status, Events
    cluster = [
        ("list", "borderlinks.scidmz.io"), ("patch", "borderlinks.scidmz.io"),
        ("patch", "borderlinks.scidmz.io/status"), ("watch", "dtntransferpolicies.scidmz.io"),
        ("patch", "dtntransferpolicies.scidmz.io/status"), ("list", "namespaces"),
        ("create", "events"), ("get", "nodes"),  # a software tap's node must exist
    ]  # fmt: skip
    assert [need for need in cluster if not can(*need, None)] == []
    # and nothing else: no tenant's objects, no workloads or Secrets outside its namespace
    for refused in (
        ("patch", "dtntransferpolicies.scidmz.io"), ("create", "dtntransferpolicies.scidmz.io"),
        ("delete", "dtntransferpolicies.scidmz.io"), ("create", "borderlinks.scidmz.io"),
        ("delete", "borderlinks.scidmz.io"), ("get", "secrets"), ("create", "deployments.apps"),
        ("create", "pods"), ("list", "nodes"), ("patch", "nodes"),
        ("create", "clusterrolebindings"), ("patch", "namespaces"), ("create", "configmaps"),
    ):  # fmt: skip
        assert not can(*refused, "default"), refused
        assert not can(*refused, None), refused
    dashboards = plane.kubectl(
        "get", "configmaps", "-n", namespace, "-l", "grafana_dashboard=1", "-o", "name"
    ).stdout.split()
    assert sorted(dashboards) == [
        "configmap/scidmz-dashboard-health", "configmap/scidmz-dashboard-overview",
    ]  # fmt: skip
    _helm(plane, "upgrade", release, str(CHART), "--namespace", namespace,
          "--reuse-values", "--set", "operator.replicas=1")  # fmt: skip
    wait_for(lambda: running(1), 60, "one operator pod after the upgrade")
    history = _helm(plane, "history", release, "--namespace", namespace).stdout
    assert "upgrade" in history.lower() or "deployed" in history.lower()
    _helm(plane, "uninstall", release, "--namespace", namespace, "--wait")
    gone = plane.kubectl("get", "deployment", "-n", namespace, "-o", "name").stdout.strip()
    assert gone == ""
    # the CRDs stay (helm never deletes crds/): links and policies survive an uninstall
    for crd in ("dtntransferpolicies.scidmz.io", "borderlinks.scidmz.io"):
        assert plane.kubectl("get", "crd", crd, check=False).returncode == 0
    # the cluster-wide objects go with the release
    for kind in ("clusterrole", "validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        left = plane.kubectl("get", kind, "-l", "app.kubernetes.io/instance=scidmz", "-o", "name")
        assert left.stdout.strip() == "", kind
    assert plane.kubectl("get", "clusterkopfpeering", peering, check=False).returncode != 0
    plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_monitoring_objects_render_only_when_enabled(plane):
    import yaml

    def kinds(*sets: str) -> dict[str, dict]:
        args = [a for s in sets for a in ("--set", s)]
        text = _helm(
            plane, "template", "m", str(CHART), "--kube-version", KUBE_VERSION, *args
        ).stdout
        return {d["kind"]: d for d in yaml.safe_load_all(text) if d}

    default = kinds()
    assert not {"ServiceMonitor", "PodMonitor", "PrometheusRule"} & set(default)
    assert default["Deployment"]["spec"]["replicas"] == 2
    assert default["ClusterRole"]["rules"]
    enabled = kinds(
        "metrics.serviceMonitor.enabled=true",
        "metrics.podMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "operator.metricsPort=9100",
    )
    source = yaml.safe_load((REPO / "dashboards" / "alerts.yaml").read_text())
    # the promtool-tested rules, unchanged; the operator's only where it is scraped
    assert enabled["PrometheusRule"]["spec"]["groups"] == source["groups"]
    unscraped = kinds("metrics.prometheusRule.enabled=true")["PrometheusRule"]["spec"]
    assert unscraped["groups"] == [g for g in source["groups"] if g["name"] != "scidmz-operator"]
    assert [g["name"] for g in source["groups"]] == ["scidmz", "scidmz-operator"]
    monitor = enabled["ServiceMonitor"]["spec"]
    endpoint = monitor["endpoints"][0]
    assert endpoint["port"] == "https-metrics" and endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["cert"]["secret"]["name"] == "scidmz-metrics-reader"
    assert endpoint["tlsConfig"]["serverName"] == "workload.scidmz.invalid"
    assert monitor["selector"]["matchLabels"]["app.kubernetes.io/managed-by"] == "scidmz-operator"
    # the PodMonitor finds the operator's pods and a port they declare, which is where the
    # operator serves /metrics
    pod_monitor = enabled["PodMonitor"]["spec"]
    template = enabled["Deployment"]["spec"]["template"]
    assert pod_monitor["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert pod_monitor["podMetricsEndpoints"][0]["port"] == "metrics"
    assert ports["metrics"] == int(env["SCIDMZ_METRICS_PORT"]) == 9100
    assert env["SCIDMZ_PEERING_LIFETIME_S"] == "6"  # the operator's takeover time


def test_the_chart_readme_documents_every_value():
    """charts/scidmz/README.md's table is what values.yaml's `# --` comments generate, and
    every value has one (hack/chart_readme.py, `make chart-docs`)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "chart_readme.py"), "--check"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    readme = (CHART / "README.md").read_text()
    assert "| `podDisruptionBudget.maxUnavailable` |" in readme


def test_names_labels_and_disruption_budget(plane):
    """prometheus-community conventions: nameOverride/fullnameOverride, commonLabels on every
    object (never in selectors), a PodDisruptionBudget for the two replicas."""
    out = _helm(
        plane, "template", "r1", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "fullnameOverride=dmz", "--set", "commonLabels.team=netops",
    ).stdout  # fmt: skip
    objects = [o for o in yaml.safe_load_all(out) if o]
    assert next(o for o in objects if o["kind"] == "Deployment")["metadata"]["name"] == "dmz"
    for obj in objects:
        assert obj["metadata"]["labels"]["team"] == "netops", obj["kind"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert "team" not in deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "netops"
    budget = next(o for o in objects if o["kind"] == "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )
    single = _helm(
        plane, "template", "r1", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "operator.replicas=1", "--set", "nameOverride=dmz",
    ).stdout  # fmt: skip
    kinds = [o["kind"] for o in yaml.safe_load_all(single) if o]
    assert "PodDisruptionBudget" not in kinds  # one replica: a budget would block drains
    names = {o["metadata"]["name"] for o in yaml.safe_load_all(single) if o}
    assert "r1-dmz" in names
    refused = _helm(
        plane, "template", "r1", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "podDisruptionBudget.maxUnavailable=half", check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "maxUnavailable" in refused.stderr


def _objects(plane, *sets: str, namespace: str = "scidmz-system") -> list[dict]:
    args = [a for s in sets for a in ("--set", s)]
    text = _helm(
        plane, "template", "scidmz", str(CHART), "--namespace", namespace,
        "--kube-version", KUBE_VERSION, *args,
    ).stdout  # fmt: skip
    return [o for o in yaml.safe_load_all(text) if o]


def test_operator_pods_are_probed_sized_and_run_as_the_images_user(plane):
    """A startup probe before the liveness probe (a slow start is no restart loop), a
    readiness probe on /readyz (true once start-up reached the API server), requests (not
    BestEffort), and the workloads' UID from the chart."""
    objects = _objects(plane, "workloads.runAsUser=2000", "workloads.runAsGroup=3000")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 60
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["resources"]["requests"]["memory"]
    assert "cpu" not in container["resources"].get("limits", {})
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["SCIDMZ_WORKLOAD_RUN_AS_USER"], env["SCIDMZ_WORKLOAD_RUN_AS_GROUP"]) == (
        "2000",
        "3000",
    )
    image_user = next(
        line.split()[1] for line in (REPO / "Dockerfile").read_text().splitlines()
        if line.startswith("USER ")
    )  # fmt: skip
    defaults = {e["name"]: e.get("value") for e in next(
        o for o in _objects(plane) if o["kind"] == "Deployment"
    )["spec"]["template"]["spec"]["containers"][0]["env"]}  # fmt: skip
    user, group = defaults["SCIDMZ_WORKLOAD_RUN_AS_USER"], defaults["SCIDMZ_WORKLOAD_RUN_AS_GROUP"]
    assert f"{user}:{group}" == image_user


def test_simulated_switch_is_optional_and_its_certificates_chain(plane):
    """Off by default; on, a Deployment and Service named as examples/borderlink.yaml's
    switch address, a serving certificate for that name and a collector pair in the Secret
    the example names, both from one CA."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    assert not [o for o in _objects(plane) if "simulated-switch" in str(o["metadata"])]
    objects = _objects(plane, "simulatedSwitch.enabled=true")
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    link = yaml.safe_load((REPO / "examples" / "borderlink.yaml").read_text())["spec"]["switch"]
    service, port = link["address"].partition(".")[0], link["address"].rsplit(":", 1)[1]
    assert ("Deployment", service) in by_name and ("Service", service) in by_name
    assert by_name[("Service", service)]["spec"]["ports"][0]["port"] == int(port)
    assert ("NetworkPolicy", service) in by_name

    def certificate(secret: dict, key: str) -> x509.Certificate:
        import base64

        return x509.load_pem_x509_certificate(base64.b64decode(secret["data"][key]))

    serving = by_name[("Secret", f"{service}-serving")]
    client_secret = by_name[("Secret", link["tls"]["secretName"])]
    ca = certificate(serving, "ca.crt")
    assert certificate(client_secret, "ca.crt") == ca
    server, client = certificate(serving, "tls.crt"), certificate(client_secret, "tls.crt")
    for leaf in (server, client):
        leaf.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert link["tls"]["serverName"] in names.get_values_for_type(x509.DNSName)
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
    # a second pair for the controller's sim actuators; the switch answers each its part
    actuator = certificate(client_secret, "actuator.crt")
    actuator.verify_directly_issued_by(ca)
    names_of = {c: c.subject.rfc4514_string() for c in (client, actuator)}
    assert names_of == {client: "CN=scidmz-collector", actuator: "CN=scidmz-sim-actuator"}
    container = by_name[("Deployment", service)]["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--p4runtime-client") + 1] == "scidmz-collector"
    assert args[args.index("--actuator-client") + 1] == "scidmz-sim-actuator"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["requests"]


def test_a_private_registrys_pull_secrets_reach_every_pod(plane, monkeypatch):
    """imagePullSecrets go on the operator's and the simulated switch's pods, and to the
    operator as the names it puts on every workload (parsed as its settings parse them)."""
    from scidmz.k8s.settings import OperatorSettings

    objects = _objects(plane, "imagePullSecrets[0].name=campus-registry",
                       "simulatedSwitch.enabled=true")  # fmt: skip
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"]
    assert len(pods) == 2  # the operator and the simulated switch
    assert all(p["imagePullSecrets"] == [{"name": "campus-registry"}] for p in pods)
    operator = next(p for p in pods if p["containers"][0]["name"] != "target")
    env = {e["name"]: e.get("value") for e in operator["containers"][0]["env"]}
    monkeypatch.setenv("SCIDMZ_IMAGE_PULL_SECRETS", env["SCIDMZ_IMAGE_PULL_SECRETS"])
    assert OperatorSettings().workload().image_pull_secrets == ("campus-registry",)
    # none given: no such variable, and an entry without a name is refused
    plain = next(o for o in _objects(plane) if o["kind"] == "Deployment")
    assert "SCIDMZ_IMAGE_PULL_SECRETS" not in {
        e["name"] for e in plain["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    refused = _helm(plane, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
                    "--set", "imagePullSecrets[0].nam=typo", check=False)  # fmt: skip
    assert refused.returncode != 0 and "name" in refused.stderr


def test_the_packaged_chart_renders_as_the_folder_does(plane, tmp_path):
    """`helm package` (what a registry or an air-gapped site gets) carries every template,
    value and CRD: the package renders the same objects as the folder."""
    packaged = _helm(plane, "package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("scidmz-*.tgz")
    assert archive.name in packaged.stdout

    def rendered(chart: str) -> list[dict]:
        text = _helm(plane, "template", "scidmz", chart, "--namespace", "scidmz-system",
                     "--kube-version", KUBE_VERSION, "--include-crds").stdout  # fmt: skip
        return [o for o in yaml.safe_load_all(text) if o]

    from_package = rendered(str(archive))
    assert from_package == rendered(str(CHART))
    assert any(o["kind"] == "CustomResourceDefinition" for o in from_package)
