"""Files laid out as the kubelet projects a ConfigMap volume, for processes run outside a
cluster that must see a ConfigMap update the way a pod does.

The kubelet's AtomicWriter (pkg/volume/util/atomic_writer.go) writes each version into a
fresh hidden directory ``..<timestamp>``, points ``..data`` at it by renaming a new symlink
over the old one, keeps one symlink per key (``config.yaml -> ..data/config.yaml``) and
removes the old directory. A reader that opens ``config.yaml`` sees either the old or
the new file, never half of one; a reader that cached an inode or a resolved path keeps
reading the removed version.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

DATA_DIR_NAME = "..data"


def project_like_kubelet(volume: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (key → text) into ``volume`` as one atomic version; returns the new
    version's directory."""
    volume.mkdir(parents=True, exist_ok=True)
    data = volume / DATA_DIR_NAME
    previous = data.resolve() if data.is_symlink() else None
    stamp = dt.datetime.now(dt.UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    version = volume / stamp
    version.mkdir()
    for key, text in files.items():
        (version / key).write_text(text)
    link = volume / f"{DATA_DIR_NAME}_tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(stamp)
    link.replace(data)
    for key in files:
        user_visible = volume / key
        if not user_visible.is_symlink():
            user_visible.symlink_to(f"{DATA_DIR_NAME}/{key}")
    if previous is not None and previous != version.resolve():
        shutil.rmtree(previous)
    return version
