"""Loss telemetry end to end over real gRPC: collector <-> software target <-> netsim.

Each sample's retransmission ratio per class (P4BS method 1) against the simulator's own
count of the bytes its senders sent again, and each class's mean BR1 sojourn against the
simulator's sum of sojourns over the packets that left, both over the same ticks as the
sample's reads (``harness.served_ticks``). The default scenario loses packets at BR1 (100
campus flows and a Cubic DTN fill its 100 ms buffer), so the ratios checked are not 0.
"""

from __future__ import annotations

import asyncio
import itertools
import math

import pytest

from scidmz.netsim import layout
from scidmz.netsim.scenario import Scenario
from tests.telemetry.harness import (
    running_collector,
    running_target,
    served_ticks,
    settings,
    truth_at,
    wait_for,
)

CHECKED_UNTIL_SIM_S = 14.0


async def _run():
    async with (
        running_target(Scenario(seed=5)) as (target, address),
        running_collector(settings(address)) as collector,
    ):
        await wait_for(lambda: collector.is_primary, 10, "mastership")
        seen: list = []
        last = 0
        reached = 0.0
        while reached < CHECKED_UNTIL_SIM_S:
            await asyncio.sleep(0.05)
            snap = collector.snapshot
            if snap is not None and snap.sequence != last:
                last = snap.sequence
                seen.append(snap)
                reached = truth_at(list(target.source.truth), snap.state.measured_at_s).sim_s
        points = list(target.source.truth)
        mss = float(target.source.sim.params[layout.P_MSS])
    return seen, points, mss


def test_retransmissions_and_mean_sojourns_match_the_simulators_own_counts():
    seen, points, mss = asyncio.run(_run())
    ticks = served_ticks(points, seen)
    checked = 0
    lossy = 0
    for previous, snap in itertools.pairwise(seen):
        if snap.sequence != previous.sequence + 1 or snap.stale:
            continue
        a, b = ticks.get(previous.sequence), ticks.get(snap.sequence)
        assert a is not None and b is not None
        signals = snap.state.signals
        for cls in ("dtn", "campus"):
            sent = getattr(b, f"{cls}_tap_bytes") - getattr(a, f"{cls}_tap_bytes")
            resent = getattr(b, f"{cls}_resent_bytes") - getattr(a, f"{cls}_resent_bytes")
            truth = resent / sent
            measured = getattr(signals, f"{cls}_retransmission_ratio")
            # packets are whole (bytes / MSS, truncated per tick): a few packets of slack
            slack = 3 * mss / sent
            assert measured == pytest.approx(truth, abs=max(0.02 * truth, slack)), (
                cls, snap.sequence, measured, truth,
            )  # fmt: skip
            lossy += truth > 0.001
            left = getattr(b, f"{cls}_departed_bytes") - getattr(a, f"{cls}_departed_bytes")
            waited = getattr(b, f"{cls}_sojourn_sum_s") - getattr(a, f"{cls}_sojourn_sum_s")
            mean = getattr(signals, f"{cls}_mean_queuing_delay_s")
            assert mean == pytest.approx(waited / (left / mss), abs=0.001), (cls, snap.sequence)
        assert 0.0 <= signals.bottleneck_loss_ratio <= 1.0
        assert signals.long_flows <= snap.state.active_flows
        checked += 1
    assert checked >= 8, f"only {checked} samples checked"
    assert lossy >= 3, "the scenario lost too little to check the counting"
    last = seen[-1].state.signals
    assert not math.isnan(last.long_flows) and last.long_flows > 50  # 100 campus flows, 8 DTN
