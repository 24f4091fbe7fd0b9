from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from scidmz.api.crd import RESOURCES, crd_file_name, render_crd_yaml
from scidmz.api.link import parse_link_spec, tls_secret_problem
from scidmz.api.loop_file import LoopFileError, load_loop_file
from scidmz.api.policy import parse_spec
from scidmz.api.runtime import (
    TUNED_GAINS,
    ConfigError,
    dump_runtime_config,
    load_runtime_config,
)
from tests.api_rules import set_dotted
from tests.loops import link_spec, policy_spec, render

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("resource", RESOURCES, ids=[r.kind for r in RESOURCES])
def test_committed_crds_match_models(resource):
    committed = (REPO / "crds" / crd_file_name(resource)).read_text()
    assert committed == render_crd_yaml(resource), "crds/ drifted from scidmz.api: run `make crds`"


def test_committed_admission_policy_matches_its_builder():
    from scidmz.api.admission_policy import render_chart_template

    committed = (REPO / "charts" / "scidmz" / "templates" / "admission-policy.yaml").read_text()
    assert committed == render_chart_template(), "run `make crds`"


@pytest.mark.parametrize("resource", RESOURCES, ids=[r.kind for r in RESOURCES])
def test_every_field_has_a_description(resource):
    crd = yaml.safe_load(render_crd_yaml(resource))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    missing = []

    def walk(node, path):
        for name, child in node.get("properties", {}).items():
            if not child.get("description"):
                missing.append(f"{path}.{name}")
            walk(child, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(schema["spec"], "spec")
    walk(schema["status"], "status")
    assert missing == []


def test_the_policy_asks_for_a_rate_and_nothing_privileged():
    """The tenant's resource names no node, interface, switch, election id or Secret."""
    crd = yaml.safe_load(render_crd_yaml(RESOURCES[1]))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == {"linkRef", "dtnHost", "targetRate", "congestionControl"}
    text = yaml.safe_dump(spec)
    for privileged in ("nodeName", "interface", "address", "electionId", "secretName"):
        assert privileged not in text
    assert crd["spec"]["scope"] == "Namespaced"
    assert yaml.safe_load(render_crd_yaml(RESOURCES[0]))["spec"]["scope"] == "Cluster"


def _loop_examples() -> list[Path]:
    """Every loop file under examples/lab (which also holds `lab record` matrices)."""
    return [
        p for p in sorted((REPO / "examples" / "lab").glob("*.yaml"))
        if "kind: BorderLink" in p.read_text()
    ]  # fmt: skip


def test_the_loop_examples_are_found():
    names = {p.name for p in _loop_examples()}
    assert {"cubic-1G.yaml", "bbr-1G.yaml", "cubic-300M.yaml"} <= names
    assert "matrix.yaml" not in names


@pytest.mark.parametrize("path", _loop_examples(), ids=lambda p: p.name)
def test_lab_examples_admit_their_policy(path):
    loop = load_loop_file(path)
    assert loop.policy.spec.target_rate and loop.link.switch.plaintext  # an isolated lab


def test_the_cluster_examples_are_valid():
    documents = [
        d for name in ("borderlink.yaml", "bbr-edge-tc.yaml", "dtntransferpolicy.yaml")
        for d in yaml.safe_load_all((REPO / "examples" / name).read_text())
    ]  # fmt: skip
    kinds = [d["kind"] for d in documents]
    assert kinds.count("BorderLink") == 2 and kinds.count("DTNTransferPolicy") == 2
    for document in documents:
        parse = parse_link_spec if document["kind"] == "BorderLink" else parse_spec
        parse(document["spec"])
        if document["kind"] == "BorderLink":
            assert not document["spec"]["switch"].get("plaintext")  # TLS to real switches


def _changed(spec, changes):
    for dotted, value in changes.items():
        set_dotted(spec, dotted, value)
    return spec


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"capacity": "1000"}, "capacity"),
        ({"capacity": "0Mbps"}, "greater than 0"),
        ({"sampleTime": "50ms"}, "between 100ms and 60s"),
        ({"dtnHosts": []}, "dtnHosts"),
        ({"dtnHosts": [{"name": "dtn-1", "receiverPrefix": "203.0.113.300/32"}]}, "receiverPrefix"),
        ({"dtnHosts": [{"name": "DTN_1", "receiverPrefix": "203.0.113.10/32"}]}, "name"),
        ({"campus.remotePrefix": "203.0.113.7/24"}, "host bits"),
        ({"campus.remotePrefix": "203.0.113.10/32"}, "overlap"),
        (
            {
                "dtnHosts": [
                    {"name": "a", "receiverPrefix": "203.0.113.0/28"},
                    {"name": "b", "receiverPrefix": "203.0.113.10/32"},
                ]
            },
            "must not overlap",
        ),
        ({"telemetry": {"rttSmoothing": 1.0}}, "rttSmoothing"),
        ({"telemetry": {"flowTimeout": "0s"}}, "flowTimeout\n.*must be above 0s and at most 60m"),
        ({"telemetry": {"activeFlowPackets": 0}}, "activeFlowPackets"),
        ({"controller.strategy": "pid"}, "strategy"),
        ({"controller.gains": {"kp": -1, "ki": 1, "kw": 1}}, "kp"),
        ({"controller.limits": {"min": "900Mbps", "max": "100Mbps"}}, "limits.min must not exceed"),
        ({"switch.address": "::1:9559"}, "address"),
        ({"switch.address": "host:70000"}, "port must be"),
        ({"switch.tls": None}, "switch.tls is required"),
        ({"switch.plaintext": True}, "contradict"),
        ({"capacity": None}, "capacity"),
        ({"surprise": 1}, "surprise"),
        ({"actuator": {"type": "tc"}}, "required when actuator.type is tc"),
        (
            {
                "dtnHosts": [
                    {"name": "d", "receiverPrefix": "203.0.113.10/32", "shaper": {"type": "tc"}}
                ]
            },
            "required when shaper.type is tc",
        ),
        (
            {
                "dtnHosts": [
                    {
                        "name": "d",
                        "receiverPrefix": "203.0.113.10/32",
                        "shaper": {"type": "sim", "failsafeRate": "2Gbps"},
                    }
                ]
            },
            "failsafeRate must not exceed capacity",
        ),
        (
            {
                "dtnHosts": [
                    {"name": "d", "receiverPrefix": "203.0.113.10/32", "shaper": {"type": "pacing"}}
                ]
            },
            "type",
        ),
        (
            {
                "actuator": {
                    "type": "tc",
                    "tc": {
                        "nodeName": "n",
                        "interface": "eth1",
                        "tolerations": [{"operator": "Equal"}],
                    },
                }
            },
            "without a key must use operator Exists",
        ),
        ({"tenants": {"namespaces": {"from": "Selector"}}}, "selector is required"),
        ({"tenants": {"namespaces": {"from": "Some"}}}, "from"),
        ({"tenants": {"maxTargetPercent": 100}}, "maxTargetPercent"),
        (
            {
                "tenants": {
                    "namespaces": {
                        "from": "Selector",
                        "selector": {"matchExpressions": [{"key": "k", "operator": "In"}]},
                    }
                }
            },
            "values must be non-empty",
        ),
        ({"controller.desiredState": {"mode": "zero"}}, "mode"),
    ],
)
def test_the_link_model_rejects_bad_specs(changes, fragment):
    with pytest.raises(ValidationError, match=fragment):
        parse_link_spec(_changed(link_spec(), changes))


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"targetRate": "600"}, "targetRate"),
        ({"targetRate": "0Mbps"}, "greater than 0"),
        ({"targetRate": "10Tbps"}, "below 10Tbps"),
        ({"targetRate": None}, "targetRate"),
        ({"dtnHost": "DTN 1"}, "dtnHost"),
        ({"linkRef": {}}, "name"),
        ({"congestionControl": "reno"}, "congestionControl"),
        # what a tenant may not say: every privileged field is unknown to the model
        ({"nodeName": "edge-1"}, "nodeName"),
        ({"interface": "eth0"}, "interface"),
        ({"switch": {"address": "s:9559"}}, "switch"),
        ({"electionId": 99}, "electionId"),
        ({"tls": {"secretName": "other-namespace-secret"}}, "tls"),
    ],
)
def test_the_policy_model_rejects_bad_and_privileged_specs(changes, fragment):
    with pytest.raises(ValidationError, match=fragment):
        parse_spec(_changed(policy_spec(), changes))


def test_resolution_fills_the_tuned_defaults():
    link = _changed(link_spec(), {"controller.limits": None})
    config = render(link, policy_spec(congestionControl="bbr"), 3, "p-collector.ns.svc:50051")
    assert config.link == "campus-border" and config.generation == 3
    assert config.target_rate_bps == 6e8
    assert config.bottleneck_capacity_bps == 1e9
    assert [(c.host, c.prefix, c.class_id) for c in config.dtn_classes] == [
        ("dtn-1", "203.0.113.10/32", 2)  # the first of spec.dtnHosts: class 2
    ]
    gains = config.controller.gains
    assert (gains.kp, gains.ki, gains.kw) == TUNED_GAINS["bbr"]["mlc"]
    assert config.controller.desired_state_mode == "reachable"
    assert config.actuator.dtn is None
    assert config.controller.max_rate_bps == 1e9
    assert config.controller.max_step_bps == pytest.approx(2e8)
    # bbr's shipped gains were tuned without a band: its campus filter integrates always
    assert config.controller.integral_band_bps == pytest.approx(1e9)
    cubic = render(link, policy_spec(congestionControl="cubic"))
    assert cubic.controller.integral_band_bps == pytest.approx(5e7)  # 5 % of B_max
    assert config.failsafe.rate_bps == pytest.approx(4e8)  # trivial: B_max - R*
    assert config.actuator.sim_address == link_spec()["switch"]["address"]
    assert config.telemetry.rtt_smoothing == 0.875  # the defaults of TelemetrySpec, in SI
    assert config.telemetry.active_flow_window_s == pytest.approx(0.1)
    (admitted,) = config.policies
    assert (admitted.namespace, admitted.name, admitted.dtn_host) == (
        "physics", "paper-testbed", "dtn-1"
    )  # fmt: skip


def test_an_idle_link_leaves_the_campus_the_whole_link():
    """No admitted policy: R* = 0, no DTN class, and the fail-safe is the whole link."""
    from scidmz.api.runtime import resolve_runtime_config

    config = resolve_runtime_config("l", 1, parse_link_spec(link_spec()), [], "c:1")
    assert config.target_rate_bps == 0 and config.policies == [] and config.dtn_prefixes == []
    assert config.failsafe.rate_bps == 1e9


def _host(**shaper):
    return [{**link_spec()["dtnHosts"][0], "shaper": shaper}]


def test_the_dtn_cap_resolves_per_type():
    tc = {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "ens1f0"}}
    config = render(link_spec(dtnHosts=_host(**tc)), shaper="p-dtn-shaper.ns.svc:9503")
    dtn = config.actuator.dtn
    assert dtn is not None and dtn.type == "tc" and dtn.host == "dtn-1"
    assert (dtn.tc_node_name, dtn.tc_interface) == ("dtn-1", "ens1f0")
    assert dtn.address == "p-dtn-shaper.ns.svc:9503"  # the agent the operator runs
    assert dtn.failsafe_rate_bps == config.target_rate_bps  # 'target' by default
    assert dtn.min_rate_bps == 0.5 * config.target_rate_bps  # the floor: half of R*
    assert (dtn.gains.kp, dtn.gains.ki, dtn.gains.kw) == TUNED_GAINS["cubic"]["dtn"]
    sim = {"type": "sim", "failsafeRate": "500Mbps", "minRate": "100Mbps",
           "gains": {"kp": 0.1, "ki": 0, "kw": 1}}  # fmt: skip
    dtn = render(link_spec(dtnHosts=_host(**sim))).actuator.dtn
    assert dtn is not None and dtn.address == link_spec()["switch"]["address"]
    assert dtn.failsafe_rate_bps == 5e8 and (dtn.gains.kp, dtn.gains.kw) == (0.1, 1.0)
    assert dtn.min_rate_bps == 1e8


def test_each_admitted_host_with_a_shaper_gets_its_own_cap_on_its_own_target():
    """Several policies on one link: R* is their sum, and each shaped host's cap holds
    its own policy's target; a host without a shaper is held only through the sum."""
    from scidmz.api.runtime import Admitted, resolve_runtime_config
    from scidmz.control.settings import controller_settings

    first = link_spec()["dtnHosts"][0]
    hosts = [
        {**first, "shaper": {"type": "sim"}},
        {**first, "name": "dtn-2", "receiverPrefix": "203.0.113.11/32",
         "shaper": {"type": "sim", "failsafeRate": "90Mbps"}},
        {**first, "name": "dtn-3", "receiverPrefix": "203.0.113.12/32"},
    ]  # fmt: skip
    spec = parse_link_spec(link_spec(dtnHosts=hosts))
    admitted = [
        Admitted("a", "climate", parse_spec(policy_spec(targetRate="300Mbps"))),
        Admitted("b", "genomics", parse_spec(policy_spec(targetRate="200Mbps", dtnHost="dtn-2"))),
        Admitted("c", "physics", parse_spec(policy_spec(targetRate="150Mbps", dtnHost="dtn-3"))),
    ]
    config = resolve_runtime_config("l", 1, spec, admitted, "c:1")
    assert config.target_rate_bps == 650e6
    caps = [(c.host, c.target_rate_bps, c.failsafe_rate_bps) for c in config.actuator.dtns]
    assert caps == [("dtn-1", 300e6, 300e6), ("dtn-2", 200e6, 90e6)]
    assert [c.class_id for c in config.dtn_classes] == [2, 3, 4]
    settings = controller_settings(config)
    assert [(c.host, c.target_bps) for c in settings.dtns] == [("dtn-1", 3e8), ("dtn-2", 2e8)]
    assert [p.dtn_host for p in settings.policies] == ["dtn-1", "dtn-2", "dtn-3"]


def test_the_campus_model_is_the_links_and_mixed_dtns_run_pi_until_one_is_set():
    from scidmz.api.runtime import Admitted, campus_model

    def admitted(*ccas):
        return [
            Admitted("ns", f"p{k}", parse_spec(policy_spec(congestionControl=cca)))
            for k, cca in enumerate(ccas)
        ]

    assert campus_model(None, "mlc", admitted("bbr")) == ("bbr", "mlc", None)
    assert campus_model(None, "mlc", admitted("bbr", "bbr")) == ("bbr", "mlc", None)
    assert campus_model(None, "mlc", []) == ("cubic", "mlc", None)
    cca, strategy, note = campus_model(None, "mlc", admitted("cubic", "bbr"))
    assert (cca, strategy) == ("cubic", "pi") and note is not None and "bbr, cubic" in note
    assert campus_model(None, "trivial", admitted("cubic", "bbr")) == ("cubic", "trivial", None)
    # the administrators' model wins over any tenant's congestion control
    assert campus_model("bbr", "mlc", admitted("cubic", "bbr")) == ("bbr", "mlc", None)
    config = render(link_spec(controller={"model": "bbr"}), policy_spec(congestionControl="cubic"))
    assert config.dtn_congestion_control == "bbr"
    assert (config.controller.gains.kp, config.controller.gains.ki, config.controller.gains.kw) == (
        TUNED_GAINS["bbr"]["mlc"]
    )


def test_runtime_config_carries_telemetry_settings():
    telemetry = {
        "rttSmoothing": 0.5,
        "flowTimeout": "5s",
        "activeFlowPackets": 4,
        "activeFlowWindow": "20ms",
        "idleTimeout": "500ms",
        "rttHorizon": "2s",
    }
    t = render(link_spec(telemetry=telemetry)).telemetry
    assert (t.rtt_smoothing, t.flow_timeout_s, t.active_flow_packets) == (0.5, 5.0, 4)
    assert (t.active_flow_window_s, t.idle_timeout_s, t.rtt_horizon_s) == (0.02, 0.5, 2.0)


def test_runtime_config_round_trips(tmp_path):
    config = render()
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(config))
    assert load_runtime_config(path) == config
    assert dump_runtime_config(config) == dump_runtime_config(render())


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[1, 2]", "must be a mapping"),
        ("a: [", "not valid YAML"),
        ("link: l\n", "invalid: generation"),
        ("api_version: scidmz.io/runtime/v1\n", "api_version"),
    ],
)
def test_bad_runtime_config_is_named(tmp_path, content, fragment):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=fragment):
        load_runtime_config(path)


def test_missing_runtime_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_runtime_config(tmp_path / "absent.yaml")


def test_switch_tls_secret_keys_and_server_name():
    assert tls_secret_problem({"ca.crt"}) is None
    assert tls_secret_problem({"ca.crt", "tls.crt", "tls.key"}) is None
    assert "no key ca.crt" in (tls_secret_problem({"tls.crt", "tls.key"}) or "")
    assert "go together" in (tls_secret_problem({"ca.crt", "tls.crt"}) or "")
    bad = _changed(link_spec(), {"switch.tls": {"secretName": "s", "serverName": "bad name!"}})
    with pytest.raises(ValidationError, match=r"server_?[nN]ame"):
        parse_link_spec(bad)


def test_digest_hold_reaches_the_switch_plan(tmp_path):
    from scidmz.telemetry.collector_config import collector_settings

    plaintext = {**link_spec()["switch"], "tls": None, "plaintext": True}

    def plan_hold_ns(telemetry: dict[str, str]) -> int:
        config = render(link_spec(telemetry=telemetry, switch=plaintext))
        return collector_settings(config, tmp_path, tmp_path).plan.digest_max_timeout_ns

    assert plan_hold_ns({}) == 10_000_000
    assert plan_hold_ns({"digestHold": "50ms"}) == 50_000_000
    for bad, message in (("500us", "between 1ms"), ("600ms", "half of sampleTime")):
        with pytest.raises(ValidationError, match=message):
            parse_link_spec(link_spec(sampleTime="1s", telemetry={"digestHold": bad}))


def test_the_dtn_shaper_agent_gets_the_hosts_failsafe_and_a_quiet_time_past_the_controllers():
    """One rule for the operator's DTN-shaper Deployment and the lab (whose agent once
    lacked --failsafe-rate and exited 2 before it capped anything)."""
    from scidmz.api.runtime import shaper_agent_args, shaper_bounds, shaper_failsafe

    config = load_loop_file(REPO / "examples" / "lab" / "bbr-1G.yaml").config("c:1", "s:2")
    args = shaper_agent_args(config, "0.0.0.0:9470")
    assert args[:3] == ["shaper", "--interface", "d0"]
    assert args[args.index("--failsafe-rate") + 1] == "600000000bps"  # 'target': R*
    quiet = config.failsafe.stale_after_s + 2 * config.sample_time_s
    assert args[args.index("--stale-after") + 1] == f"{quiet:g}s"
    campus_only = load_loop_file(REPO / "examples" / "lab" / "cubic-1G.yaml").config("c:1")
    with pytest.raises(ValueError, match=r"no tc DTN cap"):
        shaper_agent_args(campus_only, "0.0.0.0:9470")
    # from a mounted config file instead: no fail-safe options, the file gives them
    mounted = shaper_agent_args(config, "0.0.0.0:9470", "/etc/scidmz/config.yaml")
    assert mounted == [
        "shaper", "--interface", "d0", "--config", "/etc/scidmz/config.yaml",
        "--listen", "0.0.0.0:9470",
    ]  # fmt: skip
    assert shaper_failsafe(config) == (6e8, quiet)
    assert shaper_bounds(config) == (3e8, 1e9)  # minRate (half of R*) to the capacity


def test_a_loop_file_with_a_refused_policy_says_why(tmp_path):
    text = (REPO / "examples" / "lab" / "cubic-1G.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("targetRate: 600Mbps", "targetRate: 950Mbps"))
    with pytest.raises(LoopFileError, match="QuotaExceeded"):
        load_loop_file(bad)
    other = tmp_path / "other.yaml"
    other.write_text(text.replace("dtnHost: dtn", "dtnHost: nowhere"))
    with pytest.raises(LoopFileError, match="DtnHostNotFound"):
        load_loop_file(other)


def test_the_scale_manifests_stay_within_the_crds_dtn_host_limit():
    from scidmz.api.link import MAX_DTN_HOSTS
    from scidmz.testenv import policies

    assert policies.MAX_DTN_HOSTS == MAX_DTN_HOSTS
    links = [d for d in yaml.safe_load_all(policies.scale_manifest(10, 1000, "ops"))
             if d["kind"] == "BorderLink"]  # fmt: skip
    assert len(links) == 10
    assert all(len(link["spec"]["dtnHosts"]) == policies.HOSTS_PER_LINK for link in links)
    assert policies.HOSTS_PER_LINK <= MAX_DTN_HOSTS
    # the first policy on each host of a link fits in the tenants' share beside the others
    docs = list(yaml.safe_load_all(policies.scale_manifest(10, 1000, "ops")))
    first: dict[tuple[str, str], int] = {}
    for d in docs:
        if d["kind"] == "DTNTransferPolicy":
            key = (d["spec"]["linkRef"]["name"], d["spec"]["dtnHost"])
            first.setdefault(key, int(d["spec"]["targetRate"].removesuffix("Mbps")))
    for link in links:
        planned = sum(v for (name, _), v in first.items() if name == link["metadata"]["name"])
        assert planned <= 900


def test_the_three_dtn_example_admits_every_policy_and_caps_each_host_on_its_target():
    """examples/three-dtns.yaml as the operator takes it: all three policies admitted on
    their own hosts, R* their sum, a cap per host on its own target, and pi (mixed
    congestion control, set by the administrators)."""
    from scidmz.api.admission import PolicyView, admit, admitted
    from scidmz.api.runtime import Admitted, resolve_runtime_config

    documents = list(yaml.safe_load_all((REPO / "examples" / "three-dtns.yaml").read_text()))
    (link_doc,) = [d for d in documents if d["kind"] == "BorderLink"]
    link = parse_link_spec(link_doc["spec"])
    views = [
        PolicyView(d["metadata"]["namespace"], d["metadata"]["name"], "", parse_spec(d["spec"]))
        for d in documents
        if d["kind"] == "DTNTransferPolicy"
    ]
    labels = {v.namespace: {"scidmz.io/tenant": "true"} for v in views}
    decisions = admit("science-dmz", link, views, labels)
    assert all(d.accepted for d in decisions.values()), decisions
    chosen = admitted(views, decisions)
    config = resolve_runtime_config(
        "science-dmz", 1, link,
        [Admitted(p.namespace, p.name, p.spec) for p in chosen if p.spec],
        "collector:1", "shaper:1",
    )  # fmt: skip
    assert config.target_rate_bps == 6.5e9 and config.controller.strategy == "pi"
    caps = {c.host: c.target_rate_bps for c in config.actuator.dtns}
    assert caps == {"climate-archive": 3e9, "genomics-core": 2e9, "physics-daq": 1.5e9}
    assert sorted(c.class_id for c in config.dtn_classes) == [2, 3, 4]
