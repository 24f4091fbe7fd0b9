"""The project's image built as a user's CI would, without a Docker daemon.

``buildah`` (Debian) builds the Dockerfile with chroot isolation and vfs storage, as root.
The official ``python:3.11-slim-bookworm`` base cannot be pulled here, so the base is a
stand-in made the way Debian images are made: ``debootstrap --variant=minbase`` of
bookworm with Python 3.11 and pip, committed as ``BASE_TAG`` and passed as the
Dockerfile's ``BASE_IMAGE``. The rootfs is cached (~300 MB, ~50 s to make); buildah keeps
the base image and the last image in its own storage between runs, and the image is
rebuilt only when its sources changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BASE_TAG = "localhost/scidmz-base:bookworm-py311"
IMAGE_TAG = "localhost/scidmz:test"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-pip", "ca-certificates")
BUILDAH = ("buildah", "--storage-driver", "vfs")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


BUILD_LOCK = threading.RLock()
"""One build at a time in this process: a test session starts the build in the background
(``tests/conftest.py``) and the image's users wait on this instead of starting another
buildah on the same storage."""


class ImageError(RuntimeError):
    """A step of the image build failed; the message holds the tool's last output."""


def _run(argv: Sequence[str], timeout_s: float, what: str) -> str:
    try:
        result = subprocess.run(
            list(argv), capture_output=True, text=True, check=False, timeout=timeout_s
        )
    except FileNotFoundError:
        raise ImageError(f"{what}: {argv[0]} is not installed (hack/system-deps.sh)") from None
    except subprocess.TimeoutExpired:
        raise ImageError(f"{what}: no result after {timeout_s:.0f} s") from None
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-3000:]
        raise ImageError(f"{what} failed ({result.returncode}):\n{tail}")
    return result.stdout


def missing_tools() -> list[str]:
    """What this module needs and cannot find (empty: ready)."""
    tools = ("buildah", "debootstrap")
    gone = [t for t in tools if shutil.which(t) is None]
    if os.geteuid() != 0:
        gone.append("root (buildah with chroot isolation and debootstrap)")
    return gone


def base_rootfs(cache: Path, mirror: str = DEFAULT_MIRROR) -> Path:
    """A minimal bookworm with Python 3.11 and pip, made once into ``cache/rootfs``.

    pip is made to behave as in the official image: Debian marks its Python as externally
    managed (PEP 668), which would refuse the Dockerfile's ``pip install``, and names the
    commands python3/pip3 only."""
    with BUILD_LOCK:
        rootfs = cache / "rootfs"
        if (cache / ".complete").exists():
            return rootfs
        staging = cache / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE,
             str(staging), mirror],
            900, "debootstrap",
        )  # fmt: skip
        finish_rootfs(staging)
        shutil.rmtree(rootfs, ignore_errors=True)
        staging.rename(rootfs)
        (cache / ".complete").touch()
        return rootfs


def finish_rootfs(root: Path) -> None:
    """pip and python as the official image has them; no apt caches."""
    for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    local_bin = root / "usr" / "local" / "bin"
    local_bin.mkdir(parents=True, exist_ok=True)
    for name, target in (("python", "/usr/bin/python3"), ("pip", "/usr/bin/pip3")):
        (local_bin / name).unlink(missing_ok=True)
        (local_bin / name).symlink_to(target)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (root / junk).glob("*"):
            if path.is_file():
                path.unlink()


def image_exists(tag: str) -> bool:
    result = subprocess.run(
        [*BUILDAH, "inspect", "--type", "image", tag], capture_output=True, check=False
    )
    return result.returncode == 0


def base_image(rootfs: Path, tag: str = BASE_TAG) -> str:
    """``rootfs`` committed as the image ``tag`` (kept when it exists)."""
    with BUILD_LOCK:
        if image_exists(tag):
            return tag
        container = _run([*BUILDAH, "from", "scratch"], 60, "buildah from scratch").strip()
        try:
            mount = _run([*BUILDAH, "mount", container], 60, "buildah mount").strip()
            _run(["cp", "-a", f"{rootfs}/.", mount], 600, "copying the rootfs")
            _run([*BUILDAH, "umount", container], 60, "buildah umount")
            _run(
                [*BUILDAH, "config", "--env", f"PATH={PATH}", "--env", "LANG=C.UTF-8",
                 "--cmd", "python3", container],
                60, "buildah config",
            )  # fmt: skip
            _run([*BUILDAH, "commit", "--quiet", container, tag], 600, "buildah commit")
        finally:
            subprocess.run([*BUILDAH, "rm", container], capture_output=True, check=False)
        return tag


def binary_image(tag: str, binary: Path, path: str, user: str) -> str:
    """A static ``binary`` alone on scratch at ``path``, its entrypoint, run as ``user``."""
    container = _run([*BUILDAH, "from", "scratch"], 60, "buildah from scratch").strip()
    try:
        _run([*BUILDAH, "copy", container, str(binary), path], 60, "buildah copy")
        _run([*BUILDAH, "config", "--entrypoint", json.dumps([path]), "--user", user,
              container], 60, "buildah config")  # fmt: skip
        _run([*BUILDAH, "commit", "--quiet", container, tag], 120, "buildah commit")
    finally:
        subprocess.run([*BUILDAH, "rm", container], capture_output=True, check=False)
    return tag


@dataclass(frozen=True)
class Build:
    tag: str
    seconds: float


SOURCES = ("Dockerfile", "pyproject.toml", "README.md", "operator", "models", "p4")
"""What the Dockerfile copies: the image is rebuilt only when one of these changed."""
SOURCE_LABEL = "io.scidmz.source-digest"


def source_digest(context: Path) -> str:
    """A digest of every file the Dockerfile copies (paths and contents; caches skipped)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        root = context / name
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            digest.update(str(path.relative_to(context)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _label(tag: str, key: str) -> str | None:
    """The image's label ``key`` (None: no such image or label)."""
    result = subprocess.run(
        [*BUILDAH, "inspect", "--type", "image", tag], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        return None
    labels = (json.loads(result.stdout).get("OCIv1") or {}).get("config", {}).get("Labels")
    value = (labels or {}).get(key)
    return str(value) if value is not None else None


def build(context: Path, base: str, tag: str = IMAGE_TAG, timeout_s: float = 1800) -> Build:
    """``buildah bud`` of ``context``/Dockerfile on ``base``, or nothing when ``tag`` was
    built from the same sources (``SOURCE_LABEL``). vfs storage copies every layer whole
    (~800 MB each), so a build's intermediate layers are removed after it: a few builds
    would otherwise fill the disk."""
    with BUILD_LOCK:
        started = time.monotonic()
        digest = source_digest(context)
        if _label(tag, SOURCE_LABEL) == digest:
            return Build(tag, 0.0)
        # The host's trust store for the RUN steps (pip), never copied into the image: a site
        # behind a TLS-intercepting proxy trusts its CA there, as this machine does.
        trust = (
            [f"--volume={HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"] if HOST_CA_BUNDLE.exists() else []
        )
        _run(
            [*BUILDAH, "bud", "--layers", "--pull=never", "--isolation", "chroot", *trust,
             "--build-arg", f"BASE_IMAGE={base}", "--label", f"{SOURCE_LABEL}={digest}",
             "--tag", tag, "--file", str(context / "Dockerfile"), str(context)],
            timeout_s, "buildah bud",
        )  # fmt: skip
        _run([*BUILDAH, "rmi", "--prune"], 900, "buildah rmi --prune")
        return Build(tag, time.monotonic() - started)


def image_id(tag: str) -> str:
    """The image's ID (a digest of its config: the same for the same content)."""
    return _run([*BUILDAH, "inspect", "--type", "image", "--format", "{{.FromImageID}}", tag],
                60, "buildah inspect").strip()  # fmt: skip


def archive(tag: str, path: Path) -> Path:
    """The image as a docker-archive tarball (what ``container-structure-test --driver tar``
    reads)."""
    path.unlink(missing_ok=True)
    _run([*BUILDAH, "push", "--quiet", tag, f"docker-archive:{path}:{tag}"], 900, "buildah push")
    return path


@contextmanager
def working_container(tag: str) -> Iterator[str]:
    """A container from ``tag``, removed afterwards."""
    name = _run([*BUILDAH, "from", "--pull=never", "--quiet", tag], 300, "buildah from").strip()
    try:
        yield name
    finally:
        subprocess.run([*BUILDAH, "rm", name], capture_output=True, check=False)


def start_in(
    container: str,
    argv: Sequence[str],
    log: Path,
    user: str | None = None,
    volumes: Sequence[tuple[Path, str]] = (),
) -> subprocess.Popen[bytes]:
    """``argv`` inside ``container`` as ``user`` (default: the image's USER; host network:
    chroot isolation), in its own process group so :func:`stop` reaches it."""
    mounts = [arg for host, inside in volumes for arg in ("--volume", f"{host}:{inside}:ro")]
    as_user = ["--user", user] if user else []
    with log.open("wb") as out:
        return subprocess.Popen(
            [*BUILDAH, "run", "--isolation", "chroot", *as_user, *mounts, container,
             "--", *argv],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes], timeout_s: float = 15) -> int:
    """Stop what ``start_in`` started as a container runtime would: SIGTERM to the command
    itself (buildah answers its own SIGTERM with SIGKILL to the command, which would skip
    the fail-safe restore), SIGKILL to the group after ``timeout_s``; buildah's exit code."""
    import psutil

    try:
        inner = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        inner = []
    commands = [p for p in inner if p.name() not in ("buildah", "conmon")]
    for command in commands[-1:]:  # the innermost: the entry point
        with contextlib.suppress(psutil.NoSuchProcess):
            command.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return process.wait(timeout=timeout_s)


def main() -> int:
    """``make image``: the stand-in base (cached) and the image, with the time each took."""
    import sys

    missing = missing_tools()
    if missing:
        print(f"cannot build the image: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    started = time.monotonic()
    cache = Path.home() / ".cache" / "scidmz" / f"image-base-{SUITE}"
    print(f"base: debootstrap {SUITE} into {cache} (once, ~1 min) ...", flush=True)
    try:
        base = base_image(base_rootfs(cache))
        print(f"base: {base} ready after {time.monotonic() - started:.0f} s", flush=True)
        print("buildah bud (first build ~5 min: pip installs every dependency) ...", flush=True)
        result = build(Path(__file__).resolve().parents[3], base)
    except ImageError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"built {result.tag} in {result.seconds:.0f} s (buildah, vfs storage)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
