"""How the ``tc`` actuators size a token-bucket filter for a rate, as pure numbers.

One rule for everything that models or builds a tbf: the campus shaper and the DTN cap the
``tc`` actuators write (``control.actuators``), and the simulator's copies of them
(``netsim.simulator``), which must hold the same bucket and queue at every u(t) or the twin's
campus RTT and shaper losses drift from the real shaper's (issue 13).
"""

from __future__ import annotations

from dataclasses import dataclass

TBF_MIN_RATE_BPS = 8_000.0
"""tbf cannot express 0: u = 0 is applied as 8 kbit/s (a few packets a second)."""
TBF_MAX_RATE_BPS = 8.0 * (2**32 - 1)
"""tbf's 32-bit rate field in bytes/s, as pyroute2 writes it (~34 Gbit/s)."""
TBF_BURST_S = 0.005
"""Bucket depth as time at the rate: above one timer tick (4 ms at HZ = 250)."""
TBF_MIN_BURST_BYTES = 15_000
"""At least ten full frames, so a low rate still passes a TSO burst without splitting it."""
TBF_QUEUE_S = 0.010
"""The tbf queue limit, beyond the bucket, as time at the rate."""


@dataclass(frozen=True)
class TbfSize:
    """A tbf's rate as tc can hold it, its bucket depth and its ``limit`` (bytes of frames
    that may queue waiting for tokens)."""

    rate_bps: float
    burst_bytes: int
    limit_bytes: int


def tbf_size(rate_bps: float) -> TbfSize:
    """The bucket and queue the actuators give a tbf at ``rate_bps``: burst = 5 ms at the
    rate (≥ 15 kB), limit = 10 ms at the rate + burst."""
    rate = min(max(rate_bps, TBF_MIN_RATE_BPS), TBF_MAX_RATE_BPS)
    burst = max(int(rate / 8 * TBF_BURST_S), TBF_MIN_BURST_BYTES)
    limit = int(rate / 8 * TBF_QUEUE_S) + burst
    return TbfSize(rate_bps=rate, burst_bytes=burst, limit_bytes=limit)
