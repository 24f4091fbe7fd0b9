"""Class ids of the P4 programs (``p4/README.md``, "Classes"): what the pipeline measures
apart. No dependencies, so the API and the operator use them without the P4Runtime protos.
"""

from __future__ import annotations

CLASS_NONE = 0
"""Traffic no classification entry matches: not measured."""
CLASS_CAMPUS = 1
FIRST_DTN_CLASS = 2
DTN_CLASSES = 64
"""DTN classes the programs in ``p4/`` hold (class ids 2..65): one per DTN host of a link,
the API's ``dtnHosts`` maximum. Each costs the per-class counters and registers."""
CLASS_SLOTS = FIRST_DTN_CLASS + DTN_CLASSES
"""Cells of every per-class counter and register (index: class id)."""


def dtn_class(index: int) -> int:
    """The class id of a link's ``index``-th DTN host (``spec.dtnHosts`` order, from 0)."""
    if not 0 <= index < DTN_CLASSES:
        raise ValueError(f"DTN host index {index} is outside 0..{DTN_CLASSES - 1}")
    return FIRST_DTN_CLASS + index
