"""Log lines for something retried every second or two while it is down.

A loop that retries a switch, a collector or a controller's /state every second would
write sixty identical lines a minute, and the line that names the cause (a name that does
not resolve, a refused certificate) scrolls away. ``OutageLog`` writes the first failure
of an outage with its reason at once, then at most one line a minute with how many
attempts failed since, and one line when it works again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass


@dataclass
class OutageLog:
    """The log of one outage-prone thing (``what``: "collector 10.0.0.1:50051").
    Time is injected (``now_s``, monotonic seconds) so tests need no clock."""

    logger: logging.Logger
    what: str
    interval_s: float = 60.0
    _failed_since_s: float | None = None
    _logged_s: float = 0.0
    _unlogged: int = 0

    @property
    def down(self) -> bool:
        return self._failed_since_s is not None

    def failed(self, reason: str, now_s: float, retry: str = "") -> bool:
        """Count a failed attempt; log it (with the latest reason) when it starts an outage
        or when the last line is ``interval_s`` old. True when a line was written."""
        self._unlogged += 1
        first = self._failed_since_s is None
        if first:
            self._failed_since_s = now_s
        elif now_s - self._logged_s < self.interval_s:
            return False
        since = "" if first else f" ({self._unlogged} failed attempt(s) since the last line)"
        self.logger.warning("%s: %s%s%s", self.what, reason, f"; {retry}" if retry else "", since)
        self._logged_s, self._unlogged = now_s, 0
        return True

    def recovered(self, now_s: float) -> bool:
        """The thing works again: one line saying after how long. True when a line was
        written (only after a failure)."""
        if self._failed_since_s is None:
            return False
        self.logger.info("%s: works again after %.0f s", self.what, now_s - self._failed_since_s)
        self._failed_since_s, self._unlogged = None, 0
        return True
