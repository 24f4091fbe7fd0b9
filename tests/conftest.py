from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """When the session runs the image's or the real node's tests, start building the image
    at once, in the background: the build is mostly buildah copying layers and pip
    downloading, and the tests before them (the docs') do not time anything. Its users wait
    on ``testenv.image.BUILD_LOCK`` and find it built; a failed build here is left for them
    to report. SCIDMZ_PREBUILD_IMAGE=0 turns this off."""
    if os.environ.get("SCIDMZ_PREBUILD_IMAGE", "1") == "0":
        return
    wanted = ("tests/image/", "tests/node/")
    if not any(item.nodeid.startswith(wanted) for item in items):
        return
    from scidmz.testenv import image, installed

    if image.missing_tools():
        return

    def build() -> None:
        with contextlib.suppress(Exception):
            installed.image_archive(log=lambda _: None)

    threading.Thread(target=build, name="image-prebuild", daemon=True).start()
