"""The one numba decorator every compiled function of scidmz uses (the simulator's kernel,
the collector's wire decoding, the packet tap's flow table).

``error_model="numpy"`` lets a division by zero give inf/NaN instead of raising, which removes
a branch from every division in the step loop.

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
from typing import TypeVar, cast

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


def compiled(function: F) -> F:
    """Compile ``function`` for the step loop (nopython mode, cached, numpy error model)."""
    return cast(F, njit(cache=True, error_model="numpy")(function))


def compiled_inline(function: F) -> F:
    """Like ``compiled``, but inlined into its callers at the numba IR level."""
    return cast(F, njit(cache=True, error_model="numpy", inline="always")(function))
