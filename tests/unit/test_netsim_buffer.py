"""BR1's buffer set while the twin runs (the buffer actuator's hook, P4BS's knob): the
FIFO is sized for a declared maximum, so a run that never moves the buffer computes what
it always did."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from scidmz.netsim import layout
from scidmz.netsim.scenario import Bottleneck, Scenario
from scidmz.netsim.simulator import Simulator

STEPS_PER_S = 1000  # the default dt is 1 ms


def _queue_delay_ms(out: np.ndarray, sim: Simulator) -> np.ndarray:
    capacity = sim.scenario.bottleneck.capacity_bps / 8 * sim.payload_fraction
    return out[layout.OUT_QUEUE] / capacity * 1e3


def test_a_run_that_keeps_its_buffer_computes_the_same_with_room_for_more() -> None:
    plain = Simulator(Scenario(seed=3))
    roomy = Simulator(Scenario(seed=3, bottleneck=Bottleneck(max_buffer_s=0.2)))
    assert roomy.bn_slots.shape[0] > plain.bn_slots.shape[0]
    assert roomy.bottleneck_buffer_bytes == plain.bottleneck_buffer_bytes == pytest.approx(12.5e6)
    for _ in range(10):
        assert np.array_equal(plain.advance(1000), roomy.advance(1000))


def test_the_buffer_moves_while_running_and_the_queue_follows() -> None:
    sim = Simulator(Scenario(seed=5, bottleneck=Bottleneck(max_buffer_s=0.2)))
    sim.advance(20 * STEPS_PER_S)  # Cubic fills the 100 ms buffer
    full = _queue_delay_ms(sim.advance(5 * STEPS_PER_S), sim).max()
    assert 80 < full <= 101
    sim.set_bottleneck_buffer(0.01 * 1e9 / 8)  # 10 ms
    assert sim.bottleneck_buffer_bytes == pytest.approx(1.25e6)
    first = _queue_delay_ms(sim.advance(STEPS_PER_S // 10), sim)
    assert first[0] > 10  # the backlog is kept, not flushed...
    settled = _queue_delay_ms(sim.advance(10 * STEPS_PER_S), sim)
    assert settled[-5 * STEPS_PER_S :].max() <= 10.5  # ...and drains below the new limit
    sim.set_bottleneck_buffer(0.2 * 1e9 / 8)  # the maximum
    grown = _queue_delay_ms(sim.advance(30 * STEPS_PER_S), sim).max()
    assert grown > 120  # beyond the old 100 ms: the ring holds it


def test_a_buffer_outside_its_bounds_is_refused_naming_them() -> None:
    sim = Simulator(Scenario(bottleneck=Bottleneck(max_buffer_s=0.05, buffer_s=0.02)))
    for bad in (0.0, -1.0, float("nan"), float("inf"), 0.051 * 1e9 / 8):
        with pytest.raises(ValueError, match=r"\(0, 6250000\] bytes"):
            sim.set_bottleneck_buffer(bad)
    assert sim.bottleneck_buffer_bytes == pytest.approx(2.5e6)  # unchanged
    with pytest.raises(ValidationError, match=r"maximum buffer .* is below the buffer"):
        Bottleneck(buffer_s=0.1, max_buffer_s=0.05)
    with pytest.raises(ValidationError, match="max_buffer_bytes or max_buffer_s"):
        Bottleneck(max_buffer_s=0.2, max_buffer_bytes=1e7)
