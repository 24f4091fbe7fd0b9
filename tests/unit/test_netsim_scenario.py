import pytest

from scidmz.netsim.scenario import (
    Scenario,
    ScenarioError,
    load_scenario,
    parse_bytes,
    parse_scenario,
)


def test_default_is_the_paper_testbed():
    s = Scenario()
    assert s.bottleneck.capacity_bps == 1e9
    assert s.campus.long_flows == 100 and s.campus.base_rtt_s == 0.010
    assert s.dtn.streams == 8 and s.dtn.base_rtt_s == 0.100
    assert s.step_s == 0.001 and s.sample_time_s == 1.0
    assert s.bottleneck.buffer_size_bytes == pytest.approx(0.1 * 1e9 / 8)
    short = s.campus.short_flows
    assert (short.inter_departure_s.shape, short.inter_departure_s.scale) == (0.5, 0.020)
    assert (short.size_bytes.minimum, short.size_bytes.maximum) == (10e3, 10e6)


def test_units_are_accepted_like_the_api(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "bottleneck: {capacity_bps: 100Mbps, buffer_bytes: 1MB}\n"
        "campus: {long_flows: 10, base_rtt_s: 10ms}\n"
        "dtn: {transfer_bytes: 10GB, congestion_control: bbr}\n"
    )
    s = load_scenario(path)
    assert s.bottleneck.capacity_bps == 1e8
    assert s.bottleneck.buffer_size_bytes == 1e6
    assert s.campus.base_rtt_s == pytest.approx(0.01)
    assert s.dtn.transfer_bytes == 1e10


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"bottleneck": {"capacity_bps": 0}}, "bottleneck.capacity_bps"),
        ({"bottleneck": {"capacity_bps": "-1Gbps"}}, "bottleneck.capacity_bps"),
        ({"shaper": {"initial_rate_bps": -5}}, "shaper.initial_rate_bps"),
        ({"step_s": 0}, "step_s"),
        ({"step_s": "5ms"}, "step_s"),
        ({"campus": {"lng_flows": 3}}, "campus.lng_flows"),
        ({"surprise": True}, "surprise"),
        ({"dtn": {"congestion_control": "vegas"}}, "dtn.congestion_control"),
        ({"bottleneck": {"buffer_bytes": "1MB", "buffer_s": "10ms"}}, "not both"),
        ({"sample_time_s": 0.0015}, "whole number of steps"),
    ],
)
def test_bad_scenarios_name_the_field(raw, fragment):
    with pytest.raises(ScenarioError, match=fragment.replace(".", r"\.")):
        parse_scenario(raw)


def test_bad_files(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="must be a mapping"):
        load_scenario(bad)


def test_parse_bytes():
    assert parse_bytes("10GB") == 1e10
    assert parse_bytes("1.5kB") == 1500
    with pytest.raises(ValueError, match="invalid size"):
        parse_bytes("10GiB")


def test_the_example_scenario_is_the_default():
    from scidmz.testenv.cluster import REPO_ROOT

    example = load_scenario(REPO_ROOT / "examples/netsim/paper-testbed.yaml")
    default = Scenario()
    assert example.bottleneck.buffer_size_bytes == default.bottleneck.buffer_size_bytes
    assert example.shaper.initial_rate_bps == default.bottleneck.capacity_bps  # u(0) = B
    spelled = example.model_dump(
        exclude={"bottleneck": {"buffer_s"}, "shaper": {"initial_rate_bps"}}
    )
    assert spelled == default.model_dump(
        exclude={"bottleneck": {"buffer_s"}, "shaper": {"initial_rate_bps"}}
    )


def test_the_example_schedules_load():
    from scidmz.netsim.schedule import load_schedule
    from scidmz.testenv.cluster import REPO_ROOT

    for name in ("u-random.yaml", "u-steps.yaml"):
        assert load_schedule(REPO_ROOT / "examples/netsim" / name).changes(0, 60)
