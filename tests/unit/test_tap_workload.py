"""The software tap the operator runs for ``spec.switch.tap`` (scidmz.k8s.tap): what runs
where with which privilege, what the collector dials, and what the operator says when the
tap's pod does not run."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from scidmz.api.link import HostPortAllocation, parse_link_spec
from scidmz.api.runtime import resolve_runtime_config
from scidmz.auth.identity import link_identity
from scidmz.k8s.manifests import IDENTITY_MOUNT, LinkRef, LinkWorkloads, WorkloadSettings
from scidmz.k8s.status import WorkloadState
from scidmz.k8s.tap import (
    build_tap_deployment,
    build_tap_service,
    remote_prefixes,
    tap_address,
    tap_pod_problem,
    with_tap,
)
from scidmz.telemetry.collector_config import collector_settings
from tests.loops import link_spec

REF = LinkRef(name="campus-border", uid="1234")
SETTINGS = WorkloadSettings(image="example.org/scidmz:test", namespace="scidmz-system")
PORT = 9510
COLLECTOR = link_identity(REF.name, "collector", uid=REF.uid)


def tap_link(**interfaces: Any) -> dict[str, Any]:
    spec = link_spec()
    spec["switch"] = {
        "tap": {
            "nodeName": "tap-1",
            "interfaces": interfaces or {"campus": "m0", "dtn": ["m1", "m2"], "border": "m3"},
            "tolerations": [{"key": "scidmz.io/tap", "operator": "Exists"}],
        }
    }
    return spec


def _deployment(spec: dict[str, Any]) -> dict[str, Any]:
    work = LinkWorkloads(host_ports=(HostPortAllocation(workload="tap", node="tap-1", port=PORT),))
    return build_tap_deployment(REF, parse_link_spec(spec), SETTINGS, work)


def test_the_tap_runs_on_its_node_network_with_net_raw_only_answering_its_collector():
    deployment = _deployment(tap_link())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["hostNetwork"] is True and pod["automountServiceAccountToken"] is False
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["tap-1"]
    assert pod["tolerations"] == [{"key": "scidmz.io/tap", "operator": "Exists"}]
    context = container["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["NET_RAW"]}
    assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"]
    args = container["args"]

    def arg(flag: str) -> str:
        return str(args[args.index(flag) + 1])

    assert args[:3] == ["target", "--source", "packets"] and "--mirror-ports" in args
    assert arg("--taps") == "campus=m0,dtn=m1,dtn=m2,border=m3"
    assert arg("--listen") == f"0.0.0.0:{PORT + 1}"
    assert arg("--identity-dir") == IDENTITY_MOUNT
    assert arg("--p4runtime-client") == COLLECTOR  # this link's collector, nobody else
    # the border port's directions come from the link's remote side
    assert arg("--remote-prefix") == ",".join(remote_prefixes(parse_link_spec(tap_link())))
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert arg("--http-port") == str(PORT)
    assert container["readinessProbe"]["httpGet"]["host"] == "127.0.0.1"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_separate_bottleneck_and_ack_interfaces_need_no_prefixes():
    spec = tap_link(campus="m0", dtn=["m1"], bottleneck="m2", acks="m3")
    args = _deployment(spec)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--taps") + 1] == "campus=m0,dtn=m1,bottleneck=m2,acks=m3"
    assert "--remote-prefix" not in args


def test_the_collector_dials_the_taps_service_with_its_own_identity(tmp_path):
    from scidmz.api.runtime import ChannelSecurity
    from tests.identities import authority, issue, write

    link = parse_link_spec(tap_link())
    address = tap_address(REF.name, SETTINGS, PORT)
    assert address == f"campus-border-tap.scidmz-system.svc:{PORT + 1}"
    service = build_tap_service(REF, SETTINGS, PORT)
    assert service["spec"]["ports"][0]["port"] == PORT + 1
    identity = write(issue(authority(), COLLECTOR), tmp_path / "identity")
    security = ChannelSecurity(identity_dir=str(identity), collector_server_name="collector")
    config = resolve_runtime_config(
        REF.name, 1, link, [], "collector:9000", security=security, tap=(address, "tap-name")
    )
    assert config.switch.address == address and config.switch.tls_secret is None
    settings = collector_settings(config, tmp_path / "pipeline", tmp_path / "unused")
    assert settings.tls is not None and settings.tls.server_name == "tap-name"
    assert settings.tls.client_cert is not None  # mutual TLS with the collector's identity


def test_a_tap_link_without_the_operators_address_is_refused_by_the_resolver():
    with pytest.raises(ValueError, match="comes from the operator"):
        resolve_runtime_config(REF.name, 1, parse_link_spec(tap_link()), [], "collector:9000")


@pytest.mark.parametrize(
    ("switch", "says"),
    [
        ({"address": "sw:9559", "plaintext": True, "tap": tap_link()["switch"]["tap"]},
         "exactly one"),
        ({"tap": {**tap_link()["switch"]["tap"]}, "plaintext": True}, "leave out tls"),
        ({"tap": {"nodeName": "t", "interfaces": {"campus": "a", "dtn": ["b"], "border": "c",
                                                  "acks": "d"}}}, "give border"),
        ({"tap": {"nodeName": "t", "interfaces": {"campus": "a", "dtn": ["b", "a"],
                                                  "border": "c"}}}, "names must differ"),
    ],
)  # fmt: skip
def test_a_tap_the_operator_cannot_run_is_refused_naming_why(switch, says):
    spec = copy.deepcopy(link_spec())
    spec["switch"] = switch
    with pytest.raises(ValidationError, match=says):
        parse_link_spec(spec)


def _pod(**status: Any) -> dict[str, Any]:
    return {"status": status}


def test_the_taps_refusal_is_read_from_its_pod():
    missing = _pod(
        containerStatuses=[
            {
                "ready": False,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {
                    "terminated": {
                        "exitCode": 2,
                        "message": "starting\nscidmz: tapreader exited: tapreader: no "
                        "interface m9\n",
                    }
                },
            }
        ]
    )
    assert tap_pod_problem([missing]) == (
        "TapFailed",
        "the tap's capture stopped: scidmz: tapreader exited: tapreader: no interface m9",
    )
    pending = _pod(
        conditions=[{"type": "PodScheduled", "status": "False", "message": "0/3 nodes: 1 taint"}]
    )
    assert tap_pod_problem([pending]) == ("TapUnschedulable", "0/3 nodes: 1 taint")
    running = _pod(containerStatuses=[{"ready": True, "state": {"running": {}}}])
    assert tap_pod_problem([running]) is None and tap_pod_problem([]) is None
    starting = _pod(containerStatuses=[{"ready": False, "state": {"running": {}}}])
    assert tap_pod_problem([starting]) is None


def test_the_collector_is_not_ready_while_its_tap_is_not():
    collector = WorkloadState(True, "DeploymentAvailable", "1/1")
    down = WorkloadState(False, "TapFailed", "no interface m9")
    assert with_tap(collector, down) == WorkloadState(False, "TapFailed", "tap: no interface m9")
    assert with_tap(collector, WorkloadState(True, "DeploymentAvailable", "1/1")) == collector


def test_the_taps_capture_counters_are_exported_per_interface():
    from prometheus_client import CollectorRegistry, generate_latest

    from scidmz.switch.tap_metrics import CaptureCollector

    stats = {"mir0": {"frames": 1200, "kernel_drops": 3}, "mir1": {"frames": 7}}
    registry = CollectorRegistry()
    registry.register(CaptureCollector(lambda: stats))
    text = generate_latest(registry).decode()
    assert 'scidmz_tap_frames_total{interface="mir0"} 1200.0' in text
    assert 'scidmz_tap_kernel_drops_total{interface="mir0"} 3.0' in text
    assert 'scidmz_tap_kernel_drops_total{interface="mir1"} 0.0' in text
    stats.clear()  # the reader has not written yet: no series, no error
    assert "interface=" not in generate_latest(registry).decode()
