"""The step loop's arrays share one block, back to back (netsim/arena.py)."""

from __future__ import annotations

import numpy as np

from scidmz.netsim import layout
from scidmz.netsim.arena import Part, carve
from scidmz.netsim.scenario import Scenario
from scidmz.netsim.simulator import Simulator


def test_carve_gives_zeroed_contiguous_arrays_back_to_back_in_order() -> None:
    parts = [
        Part("rows", (3, 5), np.float64),
        Part("counts", (2, 5), np.int64),
        Part("tail", (7,), np.float64),
    ]
    arrays = carve(parts)
    assert list(arrays) == ["rows", "counts", "tail"]
    for part in parts:
        array = arrays[part.name]
        assert array.shape == part.shape
        assert array.dtype == part.dtype
        assert array.flags.c_contiguous and array.flags.writeable
        assert not array.any()
    assert arrays["rows"].ctypes.data % 64 == 0
    assert arrays["counts"].ctypes.data == arrays["rows"].ctypes.data + 3 * 5 * 8
    assert arrays["tail"].ctypes.data == arrays["counts"].ctypes.data + 2 * 5 * 8


def test_carved_arrays_do_not_overlap() -> None:
    arrays = carve([Part("a", (4, 3), np.float64), Part("b", (2, 3), np.int64)])
    arrays["a"][...] = 1.5
    arrays["b"][...] = -7
    assert (arrays["a"] == 1.5).all()
    assert (arrays["b"] == -7).all()


def test_the_simulator_lays_its_per_flow_rows_out_in_one_sequence() -> None:
    """State, integer state and scratch follow one another at one row stride, so no two
    of their rows can share their low 12 address bits while fewer than 4096 / gcd(stride,
    4096) rows are laid out (128 for the default scenario's 108 columns)."""
    sim = Simulator(Scenario())
    n = sim.flow_f.shape[1]
    stride = n * 8
    assert sim.flow_i.ctypes.data == sim.flow_f.ctypes.data + layout.N_FLOW_F * stride
    assert sim.scratch.ctypes.data == sim.flow_i.ctypes.data + layout.N_FLOW_I * stride
    first = sim.flow_f.ctypes.data
    rows = layout.N_FLOW_F + layout.N_FLOW_I + sim.scratch.shape[0]
    offsets = {(first + row * stride) % 4096 for row in range(rows)}
    assert len(offsets) == rows
