"""One block of memory for the step loop's arrays, carved in a fixed order.

Where numpy's allocator puts each array decides how fast the kernel runs. Its passes walk
many rows at once (one per state variable), and two rows whose addresses agree in their
low 12 bits collide twice: in the L1 cache's sets, and in the CPU's check of a load
against earlier stores (which compares only those bits: "4K aliasing"). Separate
allocations land at offsets that differ from process to process, so the same code ran at
579-683x real time on the default scenario depending on where its arrays lay (16
placements in one process, ``bench/netsim_speed.py --placements 16``). Carved back to back,
the rows of the per-flow arrays follow one another at the same stride; for the default
scenario (108 columns, an 864-byte stride = 27 x 32 bytes, odd) any 128 consecutive rows
start at distinct 32-byte offsets within a 4 KiB page, so no two of the 101 fixed per-flow
rows (state, integer state, scratch) can collide; 16 simulators laid out so ran at
660-698x in the same process.

A stride that is a multiple of a large power of two (e.g. 128 columns) still collides row
with row; this layout cannot help there, and does not make it worse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

_ALIGN_BYTES = 64
"""The block starts on a cache line: no row of the first array straddles one needlessly."""


@dataclass(frozen=True)
class Part:
    """One array of the block: its name, shape and element type (8 bytes wide)."""

    name: str
    shape: tuple[int, ...]
    dtype: type[np.float64] | type[np.int64]


def carve(parts: Sequence[Part]) -> dict[str, npt.NDArray[Any]]:
    """Zeroed, C-contiguous arrays in one block, back to back in the order given."""
    sizes = [int(np.prod(part.shape)) * 8 for part in parts]
    block = np.zeros(sum(sizes) + _ALIGN_BYTES, dtype=np.uint8)
    offset = -block.ctypes.data % _ALIGN_BYTES
    arrays: dict[str, npt.NDArray[Any]] = {}
    for part, size in zip(parts, sizes, strict=True):
        view = block[offset : offset + size].view(part.dtype).reshape(part.shape)
        arrays[part.name] = view
        offset += size
    return arrays
