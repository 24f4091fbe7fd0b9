"""The one numba decorator every compiled function of the simulator uses.

``error_model="numpy"`` lets a division by zero give inf/NaN instead of raising, which removes
a branch from every division in the step loop; ``cache=True`` keeps the machine code between
processes (set ``NUMBA_CACHE_DIR`` where the package directory is read-only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from numba import njit

F = TypeVar("F", bound=Callable[..., object])


def compiled(function: F) -> F:
    """Compile ``function`` for the step loop (nopython mode, cached, numpy error model)."""
    return cast(F, njit(cache=True, error_model="numpy")(function))
