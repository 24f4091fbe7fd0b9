import math

import pytest

from scidmz.api.units import (
    UnitError,
    format_duration,
    format_rate,
    parse_duration,
    parse_rate,
)


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("600Mbps", 6e8),
        ("1Gbps", 1e9),
        ("1.5Gbps", 1.5e9),
        ("0bps", 0.0),
        ("250kbps", 2.5e5),
        ("2Tbps", 2e12),
        ("12bps", 12.0),
        ("0.25Mbps", 2.5e5),
    ],
)
def test_parse_rate(text, bps):
    assert parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize(
    "text",
    ["600", "600 Mbps", "600MBps", "600mbps", "-5Mbps", "1e9bps", "Mbps", "1.Gbps", "1Gb/s", ""],
)
def test_parse_rate_rejects(text):
    with pytest.raises(UnitError, match="invalid rate"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("text", "seconds"), [("1s", 1.0), ("100ms", 0.1), ("1.5m", 90.0), ("250us", 2.5e-4)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["1", "1h", "-1s", "1 s", "ms"])
def test_parse_duration_rejects(text):
    with pytest.raises(UnitError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize("bps", [0.0, 1.0, 999.0, 5.982e8, 1e9, 1.234e10, 3e12])
def test_format_rate_round_trips(bps):
    assert parse_rate(format_rate(bps)) == pytest.approx(bps, rel=1e-3)


def test_format_rate_examples():
    assert format_rate(5.982e8) == "598.2Mbps"
    assert format_rate(1e9) == "1Gbps"
    assert format_duration(0.1012) == "101.2ms"
    assert format_duration(2.0) == "2s"


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_format_rejects_nonsense(bad):
    with pytest.raises(UnitError):
        format_rate(bad)
    with pytest.raises(UnitError):
        format_duration(bad)
