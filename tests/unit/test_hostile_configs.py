"""Hostile runtime configs handed straight to ``scidmz collector|controller --config``:
non-finite, absurd, negative, wrongly typed or missing values and YAML bombs are
refused with exit 2 naming the field, before anything starts; nothing else gets through."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from scidmz.api.runtime import RuntimeConfig, dump_runtime_config
from scidmz.cli import app

COMMANDS = ("collector", "controller")


@pytest.fixture(scope="module")
def base_config() -> dict[str, Any]:
    from tests.loops import link_spec, render

    # plaintext: --check reads no certificate files here
    switch = {**link_spec()["switch"], "tls": None, "plaintext": True}
    rendered = render(link_spec(switch=switch), collector="127.0.0.1:1")
    config: dict[str, Any] = yaml.safe_load(dump_runtime_config(rendered))
    return config


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def _set(config: dict[str, Any], dotted: str, value: Any, delete: bool = False) -> None:
    *parents, leaf = dotted.split(".")
    node = config
    for key in parents:
        node = node[key]
    if delete:
        node.pop(leaf)
    else:
        node[leaf] = value


def _run(command: str, text: str, tmp_path) -> tuple[int, str]:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, [command, "--config", str(path), "--check"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: the command must never get here
    return result.exit_code, result.output


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, -1.0, 0.0, 2**130]),
    st.sampled_from(["", "fast", "1e400", "nan", [], {}, None, True]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    # addresses whose port is out of range or missing, and values nested absurdly deep
    st.sampled_from(["switch-1:99999", "switch-1:0", "[2001:db8::1]:70000", "no-port", "a:b"]),
    st.integers(min_value=20, max_value=200).map(_nested),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_hostile_value_anywhere_is_refused_or_harmless(base_config, tmp_path, data):
    import copy

    config = copy.deepcopy(base_config)
    field = data.draw(st.sampled_from(_leaves(config)), label="field")
    delete = data.draw(st.booleans(), label="delete")
    value = None if delete else data.draw(HOSTILE, label="value")
    _set(config, field, value, delete=delete)
    text = yaml.safe_dump(config)
    try:
        RuntimeConfig.model_validate(yaml.safe_load(text))
        valid = True
    except ValueError:
        valid = False
    for command in COMMANDS:
        code, output = _run(command, text, tmp_path)
        if not valid:
            assert code == 2, output
            named = (field.rsplit(".", 1)[-1], "must", "nested deeper than")
            assert any(word in output for word in named), output
        elif command == "collector" and code == 2:
            # the collector's own checks: wiring (tap ports, class prefixes) and the files a
            # config names (the pipeline, the TLS Secret), not mounted here
            name = field.rsplit(".", 1)[-1].replace("_", " ")
            known = (name, "switch port", "pipeline", "TLS", "tls")
            assert output.startswith("error:") and any(k in output for k in known), output
        elif command == "controller" and code == 2 and field.endswith("inverse_model_key"):
            # a custom model the config names and nobody mounted here
            assert output.startswith("error: inverse model"), output
        else:
            assert code == 0, output


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("bottleneck_capacity_bps", math.inf),
        ("failsafe.rate_bps", math.inf),
        ("controller.desired_dtn_rtt_s", math.nan),
        ("target_rate_bps", 1e300),
        ("controller.gains.kp", -0.5),
        ("failsafe.stale_after_s", 0.0),
        ("telemetry.digest_hold_s", 0.9),
    ],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_the_issues_cases_exit_2_naming_the_field(base_config, tmp_path, command, field, value):
    import copy

    config = copy.deepcopy(base_config)
    _set(config, field, value)
    code, output = _run(command, yaml.safe_dump(config), tmp_path)
    assert code == 2, output
    assert field.rsplit(".", 1)[-1] in output


@pytest.mark.parametrize(
    "field",
    ["switch.address", "collector_address", "actuator.sim_address"],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_an_address_with_a_port_out_of_range_exits_2_naming_it(
    base_config, tmp_path, command, field
):
    import copy

    config = copy.deepcopy(base_config)
    _set(config, field, "switch-1:99999")
    code, output = _run(command, yaml.safe_dump(config), tmp_path)
    assert code == 2, output
    assert field.rsplit(".", 1)[-1] in output and "65535" in output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_config_nested_thousands_deep_exits_2_not_a_traceback(base_config, tmp_path, command):
    text = yaml.safe_dump(base_config) + "x: " + "[" * 2000 + "]" * 2000 + "\n"  # 4 kB
    code, output = _run(command, text, tmp_path)
    assert code == 2 and "nested deeper than" in output, output


@pytest.mark.parametrize(
    "argv",
    [["target", "--listen"], ["shaper", "--interface", "x", "--failsafe-rate", "1Mbps",
                                "--listen"]],
    ids=["target", "shaper"],
)  # fmt: skip
@pytest.mark.parametrize("address", ["127.0.0.1:99999", "127.0.0.1:0", "localhost"])
def test_a_listen_address_out_of_range_exits_2_naming_the_flag(argv, address):
    result = CliRunner().invoke(app, [*argv, address])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--listen'" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_port_in_use_exits_2_naming_it(base_config, tmp_path, command):
    import socket

    path = tmp_path / "config.yaml"
    config = dict(base_config, actuator={"type": "dryRun"})
    path.write_text(yaml.safe_dump(config))
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, [command, "--config", str(path), "--http-port", str(port)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 2, result.output
    assert f"port {port}" in result.output and "in use" in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_yaml_bombs_and_duplicate_keys_are_refused(base_config, tmp_path, command):
    text = yaml.safe_dump(base_config)
    bomb = 'lol: &a ["x","x","x","x","x","x","x","x"]\nlol2: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n'
    code, output = _run(command, bomb + text, tmp_path)
    assert code == 2 and "aliases" in output
    code, output = _run(command, text + "link: other\n", tmp_path)
    assert code == 2 and "duplicate key 'link'" in output
    code, output = _run(command, "x" * (2 << 20), tmp_path)
    assert code == 2 and "bytes" in output


@pytest.mark.parametrize("command", COMMANDS)
def test_the_rendered_config_passes_the_check(base_config, tmp_path, command):
    code, output = _run(command, yaml.safe_dump(base_config), tmp_path)
    assert code == 0 and "valid" in output, output


FLAGS = [
    (["sim", "run", "--out", "/nonexistent/x", "--duration"], "--duration"),
    (["target", "--speedup"], "--speedup"),
    (["demo", "--timeout"], "--timeout"),
    (["demo", "--duration"], "--duration"),
    (["train", "--cca", "cubic", "--duration"], "--duration"),
    (["lab", "traffic", "--out", "/nonexistent/x", "--duration"], "--duration"),
    (["lab", "run", "-f", "/nonexistent.yaml", "--duration"], "--duration"),
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e308"])
@pytest.mark.parametrize(("argv", "flag"), FLAGS, ids=[" ".join(a[:2]) for a, _ in FLAGS])
def test_numeric_flags_refuse_non_finite_and_absurd_values(argv, flag, value):
    result = CliRunner().invoke(app, [*argv, value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output
