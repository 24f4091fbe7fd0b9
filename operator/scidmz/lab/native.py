"""The lab's C programs (``delayline.c``, ``tapreader.c``, and the capture benchmark's
``framegen.c``), compiled on first use with the host's gcc and cached by the hash of their
source. The image carries ``tapreader`` prebuilt under ``$SCIDMZ_NATIVE_DIR`` (named the
same way), so a tap runs there without a compiler."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from scidmz.lab.topology import LabError

NATIVE_DIR_ENV = "SCIDMZ_NATIVE_DIR"
"""Where the image keeps its prebuilt programs (``<name>-<source digest>``)."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scidmz"


def binary(name: str, cache: Path | None = None) -> Path:
    """``name`` (``delayline``, ``tapreader`` or ``framegen``) built from the packaged source."""
    source = resources.files("scidmz.lab").joinpath(f"{name}.c").read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    prebuilt = os.environ.get(NATIVE_DIR_ENV)
    if cache is None and prebuilt and (Path(prebuilt) / f"{name}-{digest}").is_file():
        return Path(prebuilt) / f"{name}-{digest}"
    where = cache or cache_dir()
    built = where / f"{name}-{digest}"
    if built.exists():
        return built
    if shutil.which("gcc") is None:
        raise LabError(f"building {name} needs gcc: apt-get install gcc")
    where.mkdir(parents=True, exist_ok=True)
    source_path = where / f"{name}-{digest}.c"
    source_path.write_bytes(source)
    partial = where / f"{name}-{digest}.partial"
    done = subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(partial), str(source_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise LabError(f"building {name} failed: {done.stderr.strip()}")
    partial.rename(built)
    return built
