"""``scidmz preflight``: the parts of a link a node holds, the checks' verdicts on given
facts, and the command on a real network namespace, which it leaves as it found it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scidmz.cli import app
from scidmz.preflight.checks import evaluate
from scidmz.preflight.facts import (
    InterfaceFacts,
    NodeFacts,
    parse_capabilities,
    parse_kernel_config,
)
from scidmz.preflight.roles import Role, link_roles, link_spec, one_link, tap_roles
from tests.netns import ip, veth_netns

REPO = Path(__file__).resolve().parents[2]
EDGE = REPO / "examples" / "bbr-edge-tc.yaml"
OFFLOADS = {"gso": True, "tso": True, "gro": True}
GOOD = InterfaceFacts("eth1", exists=True, up=True, mtu=9000, offloads=OFFLOADS, root_qdisc="mq")
NODE = NodeFacts(
    kernel_release="6.1.0",
    interfaces={"eth1": GOOD},
    available_interfaces=("eth0", "eth1", "lo"),
    capabilities=frozenset({"NET_ADMIN", "NET_RAW"}),
    kernel_config={"CONFIG_NET_SCH_TBF": "m", "CONFIG_NET_SCH_FIFO": "y", "CONFIG_PACKET": "y"},
    congestion_controls=("reno", "cubic", "bbr"),
    compiler="/usr/bin/gcc",
)
SCIDMZ = Path(sys.executable).with_name("scidmz")
SHAPER = Role("campus-shaper", "eth1", "the campus shaper")


def _edge_spec():
    return link_spec(one_link(list(yaml.safe_load_all(EDGE.read_text()))))


def _levels(findings, check):
    return [f.level for f in findings if f.check == check]


def test_a_node_holds_the_parts_the_link_names_on_it():
    name, spec = _edge_spec()
    assert name == "edge-10g"
    assert [(r.kind, r.interface) for r in link_roles(spec, "edge-1")] == [
        ("campus-shaper", "eth1")
    ]
    assert [(r.kind, r.interface) for r in link_roles(spec, "dtn-2")] == [("dtn-shaper", "ens1f0")]
    assert link_roles(spec, "somewhere-else") == []
    taps = tap_roles({"campus": ["m1"], "dtn": ["m2", "m3"]})
    sides = ["the tap's campus side", "the tap's dtn side", "the tap's dtn side"]
    assert [r.what for r in taps] == sides


def test_a_stream_must_hold_one_link():
    link = {"kind": "BorderLink", "metadata": {"name": "a"}, "spec": {}}
    with pytest.raises(ValueError, match="2 BorderLinks \\(a, b\\)"):
        one_link([link, {**link, "metadata": {"name": "b"}}])
    with pytest.raises(ValueError, match="no BorderLink"):
        one_link([{"kind": "Namespace"}])
    assert one_link([{"capacity": "1Gbps"}]) == {"capacity": "1Gbps"}
    with pytest.raises(ValueError, match="a BorderLink is wanted"):
        link_spec({"kind": "DTNTransferPolicy"})


def test_a_ready_node_passes():
    findings = evaluate([SHAPER], NODE)
    assert {f.level for f in findings} == {"ok"}
    assert "a module" in next(f.detail for f in findings if f.check == "CONFIG_NET_SCH_TBF")


@pytest.mark.parametrize(
    ("change", "check", "level", "said"),
    [
        ({"interfaces": {"eth1": InterfaceFacts("eth1", exists=False)}}, "interface", "fail",
         "no interface eth1 on this node (it has: eth0, eth1, lo)"),
        ({"interfaces": {"eth1": InterfaceFacts("eth1", exists=True, up=False)}}, "interface",
         "fail", "ip link set eth1 up"),
        ({"kernel_config": {"CONFIG_PACKET": "y"}}, "CONFIG_NET_SCH_TBF", "fail",
         "not in this kernel"),
        ({"kernel_config": None}, "CONFIG_NET_SCH_TBF", "warn", "/boot/config-6.1.0"),
        ({"capabilities": frozenset()}, "CAP_NET_ADMIN", "warn", "--profile=netadmin"),
        ({"interfaces": {"eth1": InterfaceFacts("eth1", exists=True, up=True, root_qdisc="htb")}},
         "root qdisc", "warn", "htb, set up by someone"),
        ({"interfaces": {"eth1": InterfaceFacts("eth1", exists=True, up=True, root_qdisc="tbf")}},
         "root qdisc", "warn", "already a tbf"),
    ],
    ids=["no interface", "down", "no tbf", "no kernel config", "no NET_ADMIN", "htb root",
         "tbf root"],
)  # fmt: skip
def test_what_a_shaper_node_lacks_is_named(change, check, level, said):
    findings = evaluate([SHAPER], NodeFacts(**{**NODE.__dict__, **change}))
    (finding,) = [f for f in findings if f.check == check]
    assert finding.level == level and said in finding.detail, finding


def test_a_tap_node_needs_packet_sockets_and_its_frame_reader():
    tap = Role("tap", "eth1", "the tap's campus side")
    assert {f.level for f in evaluate([tap], NODE)} == {"ok"}
    refused = NodeFacts(**{**NODE.__dict__, "packet_socket_error": "Operation not permitted",
                           "compiler": None})  # fmt: skip
    findings = evaluate([tap], refused)
    # a tap started by hand needs gcc; the operator's runs the image's prebuilt reader
    assert _levels(findings, "packet socket") == ["fail"] and _levels(findings, "gcc") == ["warn"]
    image = NodeFacts(**{**refused.__dict__, "prebuilt_reader": "/usr/lib/scidmz/native/t-1"})
    assert _levels(evaluate([tap], image), "frame reader") == ["ok"]
    # BR1's buffer asks for bfifo, not tbf
    buffer = evaluate([Role("buffer", "eth1", "BR1's buffer")], NODE)
    assert _levels(buffer, "CONFIG_NET_SCH_FIFO") == ["ok"] and not _levels(
        buffer, "CONFIG_NET_SCH_TBF"
    )


def test_capabilities_and_kernel_options_are_read_as_the_kernel_writes_them():
    assert parse_capabilities("Name:\tx\nCapEff:\t0000000000003000\n") == {"NET_ADMIN", "NET_RAW"}
    assert parse_capabilities("CapEff:\t0000000000001000\n") == {"NET_ADMIN"}
    assert parse_capabilities("no such line") == frozenset()
    text = (
        "CONFIG_NET_SCH_TBF=m\n# CONFIG_NET_SCH_NETEM is not set\nCONFIG_PACKET=y\nCONFIG_HZ=250\n"
    )
    assert parse_kernel_config(text) == {"CONFIG_NET_SCH_TBF": "m", "CONFIG_PACKET": "y"}


def test_bad_input_is_refused_with_its_reason(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["preflight", "--link", str(EDGE), "--node", "nowhere"])
    assert result.exit_code == 2 and "runs nothing on node nowhere" in result.output
    assert "dtn-2, edge-1" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"kind": "BorderLink", "metadata": {"name": "x"},
                                   "spec": {"capacity": "fast"}}))  # fmt: skip
    result = runner.invoke(app, ["preflight", "--link", str(bad)])
    assert result.exit_code == 2 and "capacity" in result.output
    result = runner.invoke(app, ["preflight", "--taps", "campus=a"])
    assert result.exit_code == 2 and "missing" in result.output
    assert runner.invoke(app, ["preflight"]).exit_code == 2


def _state(netns: str) -> str:
    """Everything preflight could have changed: links (flags, promiscuity) and qdiscs."""

    def run(*args: str) -> str:
        return subprocess.run(["ip", "netns", "exec", netns, *args], check=True,
                              capture_output=True, text=True).stdout  # fmt: skip

    # the packets htb passed meanwhile (IPv6's own) are not a change
    qdiscs = re.sub(r"direct_packets_stat \d+", "", run("tc", "qdisc", "show"))
    return run("ip", "-d", "link", "show") + qdiscs


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_on_a_real_node_it_finds_what_is_there_and_changes_nothing(tmp_path):
    link = {"apiVersion": "scidmz.io/v1alpha1", "kind": "BorderLink",
            "metadata": {"name": "lab"}, "spec": yaml.safe_load(
                yaml.safe_dump(next(d for d in yaml.safe_load_all(EDGE.read_text())
                                    if d["kind"] == "BorderLink")["spec"]))}  # fmt: skip
    link["spec"]["actuator"]["tc"] = {"nodeName": "edge-1", "interface": "campus0"}
    path = tmp_path / "link.yaml"
    path.write_text(yaml.safe_dump(link))
    with veth_netns("campus0") as netns:
        ip("-n", netns, "link", "set", "campus0p", "up")
        subprocess.run(["tc", "-n", netns, "qdisc", "add", "dev", "campus0", "root", "handle",
                        "1:", "htb"], check=True)  # fmt: skip
        before = _state(netns)
        result = subprocess.run(
            ["ip", "netns", "exec", netns, str(SCIDMZ), "preflight",
             "--link", str(path), "--node", "edge-1",
             "--taps", "campus=campus0p,dtn=lo,bottleneck=nothere,acks=campus0", "--json"],
            check=False, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        after = _state(netns)
    assert result.returncode == 1, result.stderr
    findings = json.loads(result.stdout)
    by = {(f["subject"], f["check"]): f for f in findings}
    shaper = by[("the campus shaper (campus0)", "root qdisc")]
    assert shaper["level"] == "warn" and "htb, set up by someone" in shaper["detail"]
    assert by[("the campus shaper (campus0)", "interface")]["level"] == "ok"
    missing = by[("the tap's bottleneck side (nothere)", "interface")]
    assert missing["level"] == "fail" and "campus0, campus0p, lo" in missing["detail"]
    assert by[("the tap", "packet socket")]["level"] == "ok"
    assert before == after  # nothing changed, promiscuity included


def test_a_links_software_tap_is_checked_on_its_node_only():
    from scidmz.api.link import parse_link_spec
    from scidmz.preflight.roles import link_nodes, link_roles
    from tests.loops import link_spec

    spec = link_spec()
    spec["switch"] = {"tap": {"nodeName": "tap-1", "interfaces": {
        "campus": "m0", "dtn": ["m1", "m2"], "border": "m3"}}}  # fmt: skip
    link = parse_link_spec(spec)
    assert [(r.kind, r.interface) for r in link_roles(link, "tap-1")] == [
        ("tap", "m0"), ("tap", "m1"), ("tap", "m2"), ("tap", "m3")]  # fmt: skip
    assert link_roles(link, "edge-1") == [] and link_nodes(link) == ["tap-1"]
