"""The control-quality experiments run the real controller against the simulator."""

import math

from scidmz.learn.evaluation import Episode, mean_interval, tracking, transfer
from scidmz.learn.report import markdown


def test_tracking_and_transfer_produce_the_paper_metrics():
    track = tracking("pi", "cubic", 1, None)
    assert 0 < track.mrae < 0.5 and 0.9 < track.utilisation <= 1.0
    run = transfer("trivial", "cubic", 1, None, size_bytes=2e9)
    # 2 GB at R* = 600 Mb/s: ~27 s if the trivial split gives the DTN its target
    assert 20 < run.fct_s < 40
    episodes = [track, run, Episode("tracking", "trivial", "cubic", 1, 100, mrae=0.1)]
    text = markdown(episodes, "test")
    assert "| cubic | pi |" in text and "| cubic | trivial |" in text


def test_mean_interval():
    mean, half = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and math.isclose(half, 2.4841, rel_tol=1e-3)
    assert math.isnan(mean_interval([math.nan])[0])
