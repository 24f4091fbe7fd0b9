"""A fluid first-in-first-out queue over per-flow byte vectors, compiled with numba.

Each occupied slot holds the bytes every flow put into the queue during one step, tagged with
that step. Serving drains slots from the head, so bytes leave in arrival order and each
departure knows its sojourn (departure step − arrival step) exactly — the quantity the P4
pipeline's queuing-delay register measures (paper algorithm 5). A full ring merges new bytes
into the tail slot: bytes are conserved, only their timestamps coarsen.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scidmz.contract.compiled import compiled_inline

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_EPSILON_BYTES = 1e-9


@compiled_inline
def fifo_push(
    slots: FloatArray,
    slot_step: IntArray,
    slot_total: FloatArray,
    cursor: IntArray,
    arrivals: FloatArray,
    total: float,
    columns: int,
    step: int,
) -> None:
    """Append ``arrivals[:columns]`` (summing to ``total``); ``cursor`` is ``[head, count]``."""
    if total <= 0.0:
        return
    size = slots.shape[0]
    head = cursor[0]
    count = cursor[1]
    # the ring's indices wrap by a subtraction: an integer modulo is a ~40-cycle division
    tail = head + count - 1
    if tail >= size:
        tail -= size
    if count > 0 and (count == size or slot_step[tail] == step):
        for c in range(columns):
            slots[tail, c] += arrivals[c]
        slot_total[tail] += total
        return
    slot = head + count
    if slot >= size:
        slot -= size
    for c in range(columns):
        slots[slot, c] = arrivals[c]
    slot_step[slot] = step
    slot_total[slot] = total
    cursor[1] = count + 1


@compiled_inline
def fifo_pop(
    slots: FloatArray,
    slot_step: IntArray,
    slot_total: FloatArray,
    cursor: IntArray,
    budget: float,
    columns: int,
    step: int,
    dt: float,
    out: FloatArray,
    sojourn_weighted: FloatArray,
) -> tuple[float, float]:
    """Serve up to ``budget`` bytes from the head into ``out`` (added per column).

    ``sojourn_weighted[c]`` gains bytes × sojourn for every departing byte, so a caller gets
    each flow's mean sojourn as ``sojourn_weighted / out``. Returns the bytes served and
    their total bytes × sojourn. The per-column loops are branch-free so they vectorise.
    """
    size = slots.shape[0]
    head = cursor[0]
    count = cursor[1]
    served = 0.0
    weighted = 0.0
    while budget > _EPSILON_BYTES and count > 0:
        sojourn = (step - slot_step[head]) * dt
        total = slot_total[head]
        if total <= budget:
            for c in range(columns):
                moved = slots[head, c]
                out[c] += moved
                sojourn_weighted[c] += moved * sojourn
                slots[head, c] = 0.0
            budget -= total
            served += total
            weighted += total * sojourn
            head = head + 1 if head + 1 < size else 0
            count -= 1
        else:
            fraction = budget / total
            for c in range(columns):
                moved = slots[head, c] * fraction
                out[c] += moved
                sojourn_weighted[c] += moved * sojourn
                slots[head, c] -= moved
            slot_total[head] = total - budget
            served += budget
            weighted += budget * sojourn
            budget = 0.0
    cursor[0] = head
    cursor[1] = count
    return served, weighted
