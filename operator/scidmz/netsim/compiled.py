"""The one numba decorator every compiled function of the simulator uses.

``error_model="numpy"`` lets a division by zero give inf/NaN instead of raising, which removes
a branch from every division in the step loop; ``cache=True`` keeps the machine code between
processes (set ``NUMBA_CACHE_DIR`` where the package directory is read-only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from numba import njit

F = TypeVar("F", bound=Callable[..., object])


def compiled(function: F) -> F:
    """Compile ``function`` for the step loop (nopython mode, cached, numpy error model)."""
    return njit(cache=True, error_model="numpy")(function)  # type: ignore[no-any-return]


def compiled_inline(function: F) -> F:
    """Like ``compiled``, but inlined into its callers at the IR level."""
    return njit(cache=True, error_model="numpy", inline="always")(function)  # type: ignore[no-any-return]
