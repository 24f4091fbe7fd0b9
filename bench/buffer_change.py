"""What a run-time change of a Linux router port's buffer does to the packets already queued.

    sudo .venv/bin/python bench/buffer_change.py [--repeats 20] [--write]

The border port is a tbf with a bfifo child (the lab's ``bn``). A UDP burst fills the fifo
to ~140 KB behind a 1 Mbit/s bucket (it drains ~125 B/ms, so what is queued stays put while
we look), then the buffer is lowered to 20 KB three ways: the bfifo's own ``limit`` through
``TcBufferActuator`` (netlink), the parent tbf's ``limit`` (``tc qdisc change … tbf``, which
``tbf_change`` passes to its fifo child and which also refills its bucket), and a new bfifo
grafted in the old one's place (``tc qdisc replace … handle 20:``). For each: the backlog
just before and just after (bytes, medians over the repeats), the new limit read back, and
the time the change took. Root: network namespaces.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests.netns import shaped_port, udp_burst, veth_netns

from scidmz.control.buffer_actuators import TcBufferActuator

RESULTS = Path(__file__).parent / "results" / "buffer_change.md"


def tc(netns: str, *args: str) -> None:
    """``tc qdisc ARGS`` in ``netns``."""
    subprocess.run(["tc", "-n", netns, "qdisc", *args], check=True, capture_output=True)


NEW_LIMIT = 20_000


async def one(netns: str, method: str) -> tuple[int, int, int, float]:
    """(backlog before, backlog after, limit read back, seconds the change took)."""
    shaped_port(netns, "bn0")
    probe = await TcBufferActuator.open("bn0", netns)
    try:
        udp_burst(netns)
        before = await probe.backlog_bytes() or 0
        start = time.perf_counter()
        if method == "bfifo limit (TcBufferActuator)":
            await probe.apply(NEW_LIMIT)
        elif method == "parent tbf limit":
            tc(netns, "change", "dev", "bn0", "root", "handle", "1:", "tbf", "rate", "1mbit",
               "burst", "1600", "limit", str(NEW_LIMIT))  # fmt: skip
        else:
            tc(netns, "replace", "dev", "bn0", "parent", "1:1", "handle", "20:", "bfifo",
               "limit", str(NEW_LIMIT))  # fmt: skip
        took = time.perf_counter() - start
        after = await probe.backlog_bytes() or 0
        limit = int(await probe.current() or 0)
    finally:
        await probe.close()
    return before, after, limit, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS}")
    args = parser.parse_args()
    methods = ["bfifo limit (TcBufferActuator)", "parent tbf limit", "new bfifo grafted"]
    rows = []
    with veth_netns("bn0") as netns:
        for method in methods:
            runs = [asyncio.run(one(netns, method)) for _ in range(args.repeats)]
            before = statistics.median(r[0] for r in runs)
            after = statistics.median(r[1] for r in runs)
            limits = sorted({r[2] for r in runs})
            took_ms = statistics.median(r[3] for r in runs) * 1e3
            kept = after / before if before else float("nan")
            rows.append(
                f"| {method} | {before:,.0f} | {after:,.0f} | {kept:.0%} | "
                f"{', '.join(f'{x:,}' for x in limits)} | {took_ms:.2f} |"
            )
            print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"Lowering a full 200 KB drop-tail buffer to {NEW_LIMIT:,} B, {args.repeats} "
            "repeats each (medians); `sudo .venv/bin/python bench/buffer_change.py --write`. "
            "The last two times include starting the `tc` binary.",
            "",
            "| method | backlog before (B) | backlog after (B) | kept | limit read back (B) "
            "| change took (ms) |",
            "|---|---:|---:|---:|---|---:|",
            *rows,
            "",
        ]
    )
    print(table)
    if args.write:
        RESULTS.write_text(table)


if __name__ == "__main__":
    main()
