from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from scidmz.api.crd import render_crd_yaml
from scidmz.api.policy import parse_spec, tls_secret_problem
from scidmz.api.runtime import (
    TUNED_GAINS,
    ConfigError,
    dump_runtime_config,
    load_runtime_config,
    resolve_runtime_config,
)
from tests.api_rules import set_dotted

REPO = Path(__file__).resolve().parents[2]


def test_committed_crd_matches_models():
    committed = (REPO / "crds" / "scidmz.io_dtntransferpolicies.yaml").read_text()
    assert committed == render_crd_yaml(), "crds/ drifted from scidmz.api: run `make crds`"


def test_every_spec_field_has_a_description():
    crd = yaml.safe_load(render_crd_yaml())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    missing = []

    def walk(node, path):
        for name, child in node.get("properties", {}).items():
            if not child.get("description"):
                missing.append(f"{path}.{name}")
            walk(child, f"{path}.{name}")

    walk(schema, "spec")
    assert missing == []


def _policy_examples() -> list[Path]:
    """Every DTNTransferPolicy under examples/ (examples/lab also holds `lab record` matrices)."""
    candidates = sorted((REPO / "examples").glob("*.yaml")) + sorted(
        (REPO / "examples" / "lab").glob("*.yaml")
    )
    return [p for p in candidates if "kind: DTNTransferPolicy" in p.read_text()]


def test_the_policy_examples_are_found():
    names = {p.name for p in _policy_examples()}
    assert {"cubic-1G.yaml", "bbr-1G.yaml", "cubic-300M.yaml"} <= names
    assert "matrix.yaml" not in names


@pytest.mark.parametrize("path", _policy_examples())
def test_examples_are_valid(path):
    spec = parse_spec(yaml.safe_load(path.read_text())["spec"])
    assert spec.target_rate


def _spec(example_policy, **changes):
    spec = example_policy["spec"]
    for dotted, value in changes.items():
        set_dotted(spec, dotted, value)
    return spec


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"targetRate": "600"}, "targetRate"),
        ({"targetRate": "1.2Gbps"}, "targetRate must be below bottleneckCapacity"),
        ({"targetRate": "0Mbps"}, "greater than 0"),
        ({"sampleTime": "50ms"}, "between 100ms and 60s"),
        ({"dtn.receiverPrefix": "203.0.113.300/32"}, "receiverPrefix"),
        ({"campus.remotePrefix": "203.0.113.7/24"}, "host bits"),
        ({"campus.remotePrefix": "203.0.113.10/32"}, "overlap"),
        ({"dtn.receiverPrefix": "203.0.0.0/16"}, "overlap"),
        ({"telemetry": {"rttSmoothing": 1.0}}, "rttSmoothing"),
        ({"telemetry": {"flowTimeout": "0s"}}, "flowTimeout\n.*must be above 0s and at most 60m"),
        ({"telemetry": {"activeFlowPackets": 0}}, "activeFlowPackets"),
        ({"controller.strategy": "pid"}, "strategy"),
        ({"controller.gains": {"kp": -1, "ki": 1, "kw": 1}}, "kp"),
        ({"controller.limits": {"min": "900Mbps", "max": "100Mbps"}}, "limits.min must not exceed"),
        ({"switch.address": "::1:9559"}, "address"),
        ({"switch.address": "host:70000"}, "port must be"),
        ({"targetRate": None}, "targetRate"),
        ({"surprise": 1}, "surprise"),
        ({"actuator": {"type": "tc"}}, "required when actuator.type is tc"),
        ({"actuator.dtn": {"type": "tc"}}, "required when actuator.dtn.type is tc"),
        ({"actuator.dtn": {"type": "sim", "failsafeRate": "fast"}}, "failsafeRate"),
        (
            {"actuator.dtn": {"type": "sim", "failsafeRate": "2Gbps"}},
            "actuator.dtn.failsafeRate must not exceed bottleneckCapacity",
        ),
        ({"actuator.dtn": {"type": "dryRun", "gains": {"kp": 200, "ki": 0, "kw": 0}}}, "kp"),
        ({"actuator.dtn": {"type": "pacing"}}, "type"),
        ({"controller.desiredState": {"mode": "zero"}}, "mode"),
    ],
)
def test_model_rejects_bad_specs(example_policy, changes, fragment):
    with pytest.raises(ValidationError, match=fragment):
        parse_spec(_spec(example_policy, **changes))


def test_resolution_fills_the_tuned_defaults(example_policy):
    spec = parse_spec(
        _spec(example_policy, **{"controller.limits": None, "dtn.congestionControl": "bbr"})
    )
    config = resolve_runtime_config("p", "ns", 3, spec, "p-collector.ns.svc:50051")
    assert config.target_rate_bps == 6e8
    assert config.bottleneck_capacity_bps == 1e9
    gains = config.controller.gains
    assert (gains.kp, gains.ki, gains.kw) == TUNED_GAINS["bbr"]["mlc"]
    assert config.controller.desired_state_mode == "reachable"
    assert config.actuator.dtn is None
    assert config.controller.max_rate_bps == 1e9
    assert config.controller.max_step_bps == pytest.approx(2e8)
    # bbr's shipped gains were tuned without a band: its campus filter integrates always
    assert config.controller.integral_band_bps == pytest.approx(1e9)
    cubic = resolve_runtime_config(
        "p", "ns", 3, parse_spec(_spec(example_policy, **{"dtn.congestionControl": "cubic"})), "c:1"
    )
    assert cubic.controller.integral_band_bps == pytest.approx(5e7)  # 5 % of B_max
    assert config.failsafe.rate_bps == pytest.approx(4e8)  # trivial: B_max - R*
    assert config.actuator.sim_address == spec.switch.address
    assert config.telemetry.rtt_smoothing == 0.875  # the defaults of TelemetrySpec, in SI
    assert config.telemetry.active_flow_window_s == pytest.approx(0.1)


def test_the_dtn_actuator_resolves_per_type(example_policy):
    dtn_tc = {"type": "tc", "tc": {"nodeName": "dtn-1", "interface": "ens1f0"}}
    spec = parse_spec(_spec(example_policy, **{"actuator.dtn": dtn_tc}))
    config = resolve_runtime_config("p", "ns", 1, spec, "x:1", "p-dtn-shaper.ns.svc:9470")
    dtn = config.actuator.dtn
    assert dtn is not None and dtn.type == "tc"
    assert (dtn.tc_node_name, dtn.tc_interface) == ("dtn-1", "ens1f0")
    assert dtn.address == "p-dtn-shaper.ns.svc:9470"  # the agent the operator runs
    assert dtn.failsafe_rate_bps == config.target_rate_bps  # 'target' by default
    cca = spec.dtn.congestion_control
    assert (dtn.gains.kp, dtn.gains.ki, dtn.gains.kw) == TUNED_GAINS[cca]["dtn"]
    sim = {"type": "sim", "failsafeRate": "500Mbps", "gains": {"kp": 0.1, "ki": 0, "kw": 1}}
    spec = parse_spec(_spec(example_policy, **{"actuator.dtn": sim}))
    dtn = resolve_runtime_config("p", "ns", 1, spec, "x:1").actuator.dtn
    assert dtn is not None and dtn.address == spec.switch.address
    assert dtn.failsafe_rate_bps == 5e8 and (dtn.gains.kp, dtn.gains.kw) == (0.1, 1.0)


def test_runtime_config_carries_telemetry_settings(example_policy):
    example_policy["spec"]["telemetry"] = {
        "rttSmoothing": 0.5,
        "flowTimeout": "5s",
        "activeFlowPackets": 4,
        "activeFlowWindow": "20ms",
        "idleTimeout": "500ms",
        "rttHorizon": "2s",
    }
    config = resolve_runtime_config("p", "ns", 1, parse_spec(example_policy["spec"]), "x:1")
    t = config.telemetry
    assert (t.rtt_smoothing, t.flow_timeout_s, t.active_flow_packets) == (0.5, 5.0, 4)
    assert (t.active_flow_window_s, t.idle_timeout_s, t.rtt_horizon_s) == (0.02, 0.5, 2.0)


def test_runtime_config_round_trips(tmp_path, example_policy):
    spec = parse_spec(example_policy["spec"])
    config = resolve_runtime_config("p", "ns", 1, spec, "x:1")
    path = tmp_path / "config.yaml"
    path.write_text(dump_runtime_config(config))
    assert load_runtime_config(path) == config
    assert dump_runtime_config(config) == dump_runtime_config(
        resolve_runtime_config("p", "ns", 1, parse_spec(example_policy["spec"]), "x:1")
    )


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[1, 2]", "must be a mapping"),
        ("a: [", "not valid YAML"),
        ("policy: p\n", "invalid: namespace"),
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


def test_switch_tls_secret_keys_and_server_name(example_policy):
    assert tls_secret_problem({"ca.crt"}) is None
    assert tls_secret_problem({"ca.crt", "tls.crt", "tls.key"}) is None
    assert "no key ca.crt" in (tls_secret_problem({"tls.crt", "tls.key"}) or "")
    assert "go together" in (tls_secret_problem({"ca.crt", "tls.crt"}) or "")
    spec = dict(example_policy["spec"])
    spec["switch"] = {**spec["switch"], "tls": {"secretName": "s", "serverName": "bad name!"}}
    with pytest.raises(ValidationError, match=r"server_?[nN]ame"):
        parse_spec(spec)


def test_digest_hold_reaches_the_switch_plan(example_policy, tmp_path):
    from scidmz.telemetry.collector_config import collector_settings

    def plan_hold_ns(telemetry: dict[str, str]) -> int:
        spec = {**example_policy["spec"], "telemetry": telemetry}
        config = resolve_runtime_config("p", "ns", 1, parse_spec(spec), "x:1")
        return collector_settings(config, tmp_path, tmp_path).plan.digest_max_timeout_ns

    assert plan_hold_ns({}) == 10_000_000
    assert plan_hold_ns({"digestHold": "50ms"}) == 50_000_000
    for bad, message in (("500us", "between 1ms"), ("600ms", "half of sampleTime")):
        spec = {**example_policy["spec"], "sampleTime": "1s", "telemetry": {"digestHold": bad}}
        with pytest.raises(ValidationError, match=message):
            parse_spec(spec)


def test_the_dtn_shaper_agent_gets_the_policys_failsafe_and_a_quiet_time_past_the_controllers():
    """One rule for the operator's DTN-shaper Deployment and the lab (whose agent once
    lacked --failsafe-rate and exited 2 before it capped anything)."""
    from scidmz.api.runtime import shaper_agent_args, shaper_failsafe

    raw = yaml.safe_load((REPO / "examples" / "lab" / "bbr-1G.yaml").read_text())
    config = resolve_runtime_config("p", "ns", 1, parse_spec(raw["spec"]), "c:1", "s:2")
    args = shaper_agent_args(config, "0.0.0.0:9470")
    assert args[:3] == ["shaper", "--interface", "d0"]
    assert args[args.index("--failsafe-rate") + 1] == "600000000bps"  # 'target': R*
    quiet = config.failsafe.stale_after_s + 2 * config.sample_time_s
    assert args[args.index("--stale-after") + 1] == f"{quiet:g}s"
    campus_only = resolve_runtime_config(
        "p",
        "ns",
        1,
        parse_spec(
            yaml.safe_load((REPO / "examples" / "lab" / "cubic-1G.yaml").read_text())["spec"]
        ),
        "c:1",
        "s:2",
    )
    with pytest.raises(ValueError, match=r"actuator\.dtn\.type: tc"):
        shaper_agent_args(campus_only, "0.0.0.0:9470")
    # from a mounted config file instead: no fail-safe options, the file gives them
    mounted = shaper_agent_args(config, "0.0.0.0:9470", "/etc/scidmz/config.yaml")
    assert mounted == [
        "shaper", "--interface", "d0", "--config", "/etc/scidmz/config.yaml",
        "--listen", "0.0.0.0:9470",
    ]  # fmt: skip
    assert shaper_failsafe(config) == (6e8, quiet)
