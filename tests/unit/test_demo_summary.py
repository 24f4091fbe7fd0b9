"""The demo's summary: the settled error over a stated window, not the ramp."""

from scidmz.demo_loop import summary_lines


def _rows(n: int, ramp_s: int) -> list[dict[str, float]]:
    """n one-second samples at R* = 600 Mb/s: the DTN at 300 Mb/s during the ramp, then
    at 612 Mb/s (2 % off)."""
    return [
        {"t_s": float(t), "target_rate_bps": 600e6,
         "dtn_rate_bps": 300e6 if t < ramp_s else 612e6, "mrae": 0.2}
        for t in range(n)
    ]  # fmt: skip


def test_the_settled_error_leaves_the_ramp_out_and_names_its_window() -> None:
    lines = "\n".join(summary_lines(_rows(60, 10), settle_s=20))
    assert "settled, over t = 20–59 s, 40 samples: 2.0%" in lines
    assert "samples: 60 over 59 s from the loop's first decision" in lines
    assert "DTN rate, mean over t = 20–59 s, 40 samples: 612Mbps" in lines
    # the controller's own figure is kept beside it, saying what it includes
    assert "its window includes the start): 20.0%" in lines


def test_a_run_shorter_than_the_settling_time_uses_every_sample() -> None:
    lines = "\n".join(summary_lines(_rows(10, 0), settle_s=20))
    assert "over t = 0–9 s, 10 samples: 2.0%" in lines
    assert summary_lines([]) == ["- no sample was recorded"]
