"""The gRPC channel options every scidmz client dials with (P4Runtime, the sample stream)."""

from __future__ import annotations

RECONNECT_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.use_local_subchannel_pool", 1),
]
"""gRPC's own reconnect policy bounded by ours. Left to its defaults a channel backs off up
to 120 s, and channels share a process-wide subchannel pool, so a new session inherited the
old one's backoff: after a 60 s switch outage the collector became primary 9–27 s after the
switch accepted again. With these a session's channel is fresh and retries within 2 s,
the collector's own cap (``CollectorSettings.backoff_max_s``)."""
