"""How the ``tc`` actuators size a token-bucket filter for a rate, as pure numbers.

One rule for everything that models or builds a tbf: the campus shaper and the DTN cap the
``tc`` actuators write (``control.actuators``), and the simulator's copies of them
(``netsim.simulator``), which must hold the same bucket and queue at every u(t) or the twin's
campus RTT and shaper losses drift from the real shaper's.
"""

from __future__ import annotations

from dataclasses import dataclass

TBF_MIN_RATE_BPS = 8_000.0
"""tbf cannot express 0: u = 0 is applied as 8 kbit/s (a few packets a second)."""
TBF_MAX_RATE_BPS = 8.0 * (2**32 - 1)
"""tbf's 32-bit rate field in bytes/s, as pyroute2 writes it (~34 Gbit/s)."""
TBF_BURST_S = 0.005
"""Bucket depth as time at the rate: above one timer tick (4 ms at HZ = 250)."""
LARGEST_PACKET_BYTES = 65_536
"""The largest packet Linux hands a qdisc without BIG TCP: a GSO/GRO super-packet of up to
``gso_max_size`` / ``gro_max_size``, 65,536 bytes by default (IPv4's 16-bit total length).

The bucket is never smaller than this, and not only so a TSO burst passes unsplit. Linux's
``tbf_change`` keeps the packets already queued, and ``tbf_dequeue`` caps the tokens at the
bucket: a queued packet larger than a new, smaller bucket can never be sent, and the shaper
stops for good. The lab hit it lowering u from 40 to 30 Mb/s with a 15 kB floor (bucket
25 -> 18.75 kB, 16-segment GSO packets of ~23 kB): sent frozen, 56 kB in 4 packets queued,
all campus flows at 0 until the end (6 of 11 runs). A bucket that always holds the largest
packet cannot be wedged by any change of rate."""
TBF_QUEUE_S = 0.010
"""The tbf queue limit, beyond the bucket, as time at the rate."""


@dataclass(frozen=True)
class TbfSize:
    """A tbf's rate as tc can hold it, its bucket depth and its ``limit`` (bytes of frames
    that may queue waiting for tokens)."""

    rate_bps: float
    burst_bytes: int
    limit_bytes: int


def tbf_size(rate_bps: float, largest_packet_bytes: int = LARGEST_PACKET_BYTES) -> TbfSize:
    """The bucket and queue the actuators give a tbf at ``rate_bps``: burst = 5 ms at the
    rate, and at least ``largest_packet_bytes`` (the largest packet the host's interfaces
    may hand the qdisc; see ``LARGEST_PACKET_BYTES``); limit = 10 ms at the rate + burst."""
    rate = min(max(rate_bps, TBF_MIN_RATE_BPS), TBF_MAX_RATE_BPS)
    burst = max(int(rate / 8 * TBF_BURST_S), largest_packet_bytes, LARGEST_PACKET_BYTES)
    limit = int(rate / 8 * TBF_QUEUE_S) + burst
    return TbfSize(rate_bps=rate, burst_bytes=burst, limit_bytes=limit)
