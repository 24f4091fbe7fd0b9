"""A built docs site served locally and opened in headless Chromium (Debian's headless shell
driven by Playwright), for the render tests and the landing page's screenshot.

``python -m scidmz.testenv.browser SITE_DIR OUT.png`` writes the screenshot (``make
docs-screenshot``).
"""

from __future__ import annotations

import functools
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = (
    "/usr/lib/chromium/chromium-headless-shell",
    "/usr/lib/chromium/chromium",
)
"""Debian's ``chromium-headless-shell`` (or ``chromium``) binary; Playwright's own download
cannot be fetched here."""

VIEWPORT = {"width": 1280, "height": 800}


class BrowserUnavailable(RuntimeError):
    """No Chromium binary or no Playwright: the caller skips, naming what to install."""


def chromium_path() -> str:
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    found = shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if found is None:
        raise BrowserUnavailable(
            "no Chromium: apt-get install chromium-headless-shell (make sysdeps does it as root)"
        )
    return found


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """The test output is no place for an access log."""


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on a free loopback port; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:  # pragma: no cover - the dev extra installs it
        raise BrowserUnavailable(f"playwright is not installed: {error}") from error
    executable = chromium_path()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def screenshot(site: Path, out: Path, page_path: str = "") -> None:
    """``page_path`` of the built ``site`` as a PNG at ``out`` (the viewport, not the page)."""
    with serve(site) as url, browser() as chromium:
        page = chromium.new_page(viewport=VIEWPORT)
        page.goto(url + page_path, wait_until="networkidle")
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m scidmz.testenv.browser SITE_DIR OUT.png", file=sys.stderr)
        return 2
    site, out = Path(argv[0]), Path(argv[1])
    if not (site / "index.html").is_file():
        print(f"{site}: no index.html (build the site first: make docs)", file=sys.stderr)
        return 2
    try:
        screenshot(site, out)
    except BrowserUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
