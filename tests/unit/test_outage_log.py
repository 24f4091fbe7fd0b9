"""One line when something goes down (with its cause), one a minute while it stays down,
one when it is back."""

import logging

import pytest

from scidmz.outage_log import OutageLog


def test_first_failure_then_one_line_a_minute_then_the_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.outage")
    outage = OutageLog(log, "collector c:50051")
    with caplog.at_level(logging.INFO, logger="test.outage"):
        assert not outage.recovered(0.0)  # nothing was down
        written = [outage.failed("UNAVAILABLE: DNS resolution failed", t * 0.5, "retrying")
                   for t in range(241)]  # fmt: skip
        assert outage.down
        assert outage.recovered(121.0)
        assert not outage.down
    assert written.count(True) == 3  # t = 0, 60, 120 s
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "collector c:50051: UNAVAILABLE: DNS resolution failed; retrying"
    assert "(120 failed attempt(s) since the last line)" in lines[1]
    assert lines[-1] == "collector c:50051: works again after 121 s"
    assert caplog.records[0].levelno == logging.WARNING
    # the next outage starts afresh
    assert outage.failed("refused", 500.0)
