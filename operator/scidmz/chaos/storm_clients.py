"""Many Subscribe clients on a collector's sample stream, most of them bad readers.

    python -m scidmz.chaos.storm_clients --address 127.0.0.1:50051 --clients 200 \
        --duration 60 [--stalled 0.5] [--slow-read 5]

A ``--stalled`` fraction reads one sample and then nothing (its HTTP/2 window fills, then
the collector's queue for it), the rest read one sample every ``--slow-read`` seconds.
Each client has its own TCP connection. Prints one JSON line: how many opened and how
many samples each kind read. Run as its own process by the chaos benchmark, so that 200
clients do not share the interpreter (and the GIL) of the probes that judge the collector.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import grpc

from scidmz.proto import telemetry_pb2, telemetry_pb2_grpc

OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
STALLED_CONNECTION = [*OWN_CONNECTION, ("grpc.http2.bdp_probe", 0)]
"""A stalled reader keeps HTTP/2's initial 64 KiB stream window (no window growth from
bandwidth probing), so the collector meets its back-pressure within minutes, not hours."""


async def _client(address: str, stalled: bool, slow_read_s: float, until: float) -> int:
    """Samples read before ``until`` (monotonic); the stream is cancelled then."""
    read = 0
    options = STALLED_CONNECTION if stalled else OWN_CONNECTION
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        call = telemetry_pb2_grpc.TelemetryStub(channel).Subscribe(telemetry_pb2.SubscribeRequest())
        try:
            while time.monotonic() < until:
                remaining = until - time.monotonic()
                try:
                    await asyncio.wait_for(call.read(), timeout=max(remaining, 0.01))
                except TimeoutError:
                    break
                read += 1
                pause = remaining if stalled else slow_read_s
                await asyncio.sleep(max(min(pause, until - time.monotonic()), 0.0))
        except grpc.aio.AioRpcError:
            pass
        finally:
            call.cancel()
    return read


async def storm(
    address: str, clients: int, duration_s: float, stalled: float, slow_read_s: float
) -> dict[str, Any]:
    until = time.monotonic() + duration_s
    n_stalled = round(clients * stalled)
    tasks = [
        asyncio.create_task(_client(address, k < n_stalled, slow_read_s, until))
        for k in range(clients)
    ]
    reads = await asyncio.gather(*tasks, return_exceptions=True)
    counts = [r if isinstance(r, int) else -1 for r in reads]
    return {
        "clients": clients,
        "stalled": n_stalled,
        "failed": sum(c < 0 for c in counts),
        "opened": sum(c > 0 for c in counts),
        "stalled_reads": sum(max(c, 0) for c in counts[:n_stalled]),
        "slow_reads": sum(max(c, 0) for c in counts[n_stalled:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--stalled", type=float, default=0.5)
    parser.add_argument("--slow-read", type=float, default=5.0)
    args = parser.parse_args()
    result = asyncio.run(
        storm(args.address, args.clients, args.duration, args.stalled, args.slow_read)
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
