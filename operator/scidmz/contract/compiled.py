"""The one numba decorator every compiled function of scidmz uses (the simulator's kernel,
the collector's wire decoding, the packet tap's flow table).

``error_model="numpy"`` lets a division by zero give inf/NaN instead of raising, which removes
a branch from every division in the step loop.

``_nrt=False`` compiles without numba's reference counting. Every array these functions use
comes from the caller and none allocates one, so there is nothing to count; with counting on,
each array passed to a compiled call (and each array argument of an inlined one) cost an
atomic increment and decrement, 13–17 % of the simulator's step loop (``perf`` on
``bench/netsim_speed.py``). A function that needs to allocate fails to compile, loudly.

Machine code is cached between processes, but numba invalidates a cached function only when
*its own* source file changes, not when a function it calls (in another module) does. So the
cache lives in a directory named after a hash of every compiled module of this package and
the numba version: any edit starts a fresh cache. ``SCIDMZ_NUMBA_CACHE`` sets the parent
directory (default ``~/.cache/scidmz/numba``, or a temporary directory if that is not
writable, e.g. in a read-only container).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
from numba import njit

F = TypeVar("F", bound=Callable[..., object])

_COMPILED_MODULES = (
    "contract/compiled.py",
    "netsim/congestion.py",
    "netsim/fifo.py",
    "netsim/kernel.py",
    "netsim/layout.py",
    "telemetry/wire.py",
    "switch/packet_source.py",
)
"""Every module with compiled functions (or what they call), relative to the package."""


def _cache_dir() -> Path:
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(numba.__version__.encode())
    for name in _COMPILED_MODULES:
        digest.update((package / name).read_bytes())
    parent = Path(os.environ.get("SCIDMZ_NUMBA_CACHE", Path.home() / ".cache/scidmz/numba"))
    target = parent / digest.hexdigest()[:16]
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / ".writable"
        probe.touch()
    except OSError:
        target = Path(tempfile.gettempdir()) / "scidmz-numba" / digest.hexdigest()[:16]
        target.mkdir(parents=True, exist_ok=True)
    return target


numba.config.CACHE_DIR = str(_cache_dir())  # type: ignore[attr-defined]


_OPTIONS: dict[str, Any] = {"cache": True, "error_model": "numpy", "_nrt": False}
"""numba's options for every compiled function, as a mapping because ``_nrt`` is a private
option (numba is pinned) that numba's type stubs do not list."""


def compiled(function: F) -> F:
    """Compile ``function`` for the step loop (nopython mode, cached, numpy error model, no
    reference counting)."""
    return cast(F, njit(**_OPTIONS)(function))


def compiled_inline(function: F) -> F:
    """Like ``compiled``, but inlined into its callers at the numba IR level."""
    return cast(F, njit(inline="always", **_OPTIONS)(function))
