"""Per-DTN classes live: the collector (re)programs a DTN host's class on the software
target over real gRPC as policies come and go, without a restart, and its samples carry
each host's own figures beside the aggregate the inverse model reads."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest
import yaml

from scidmz.contract.classes import CLASS_CAMPUS, FIRST_DTN_CLASS
from scidmz.telemetry.program import DtnClass
from scidmz.telemetry.service import CollectorProcess
from tests.loops import plaintext_link_spec, render
from tests.telemetry.harness import PLAN, running_collector, running_target, settings, wait_for

DTN_1 = DtnClass("dtn-1", "203.0.113.10/32", FIRST_DTN_CLASS)


def _classes(target) -> dict[str, int]:
    return {str(r.network): r.class_id for r in target.service.dataplane.routes}


def _dtn_rate(collector) -> float:
    snap = collector.snapshot
    return math.nan if snap is None or snap.stale else snap.state.dtn_rate_bps


def test_a_dtn_class_is_programmed_and_removed_live_and_measured_at_the_next_samples():
    async def main():
        idle = replace(PLAN, dtn_classes=())
        async with (
            running_target() as (target, address),
            running_collector(settings(address, plan=idle)) as collector,
        ):
            await wait_for(lambda: collector.snapshot is not None, 10, "a first sample")
            assert _classes(target) == {"198.51.100.0/24": CLASS_CAMPUS}
            assert math.isnan(_dtn_rate(collector)) and collector.snapshot.state.dtns == ()
            sequence = collector.snapshot.sequence
            await collector.set_plan(replace(PLAN, dtn_classes=(DTN_1,)))
            assert _classes(target)["203.0.113.10/32"] == FIRST_DTN_CLASS  # at once
            await wait_for(lambda: _dtn_rate(collector) > 0, 10, "the DTN's rate")
            state = collector.snapshot.state
            (dtn,) = state.dtns
            assert (dtn.host, dtn.class_id) == ("dtn-1", FIRST_DTN_CLASS)
            assert dtn.rate_bps == state.dtn_rate_bps and dtn.rtt_s == state.dtn_rtt_s
            assert collector.snapshot.sequence > sequence
            # the same host moved to another class (its spec.dtnHosts index changed)
            moved = replace(DTN_1, class_id=FIRST_DTN_CLASS + 7)
            await collector.set_plan(replace(PLAN, dtn_classes=(moved,)))
            assert _classes(target)["203.0.113.10/32"] == FIRST_DTN_CLASS + 7
            await wait_for(
                    lambda: [d.class_id for d in collector.snapshot.state.dtns]
                    == [FIRST_DTN_CLASS + 7] and collector.snapshot.state.dtns[0].rate_bps > 0,
                    10, "the moved class measured",
                )  # fmt: skip
            await collector.set_plan(replace(PLAN, dtn_classes=()))
            assert _classes(target) == {"198.51.100.0/24": CLASS_CAMPUS}
            await wait_for(lambda: collector.snapshot.state.dtns == (), 10, "no DTN")
            assert collector.sessions_ready == 1  # never reconnected to do it

    asyncio.run(main())


def test_the_collector_process_takes_new_dtn_classes_from_its_config_file(tmp_path):
    """As the operator writes it: the link's config with the admitted hosts' classes. A
    file the collector cannot use (two classes on one prefix) changes nothing."""
    link = plaintext_link_spec()
    config = render(link)
    path = tmp_path / "config.yaml"

    def write(runtime) -> None:
        path.write_text(yaml.safe_dump(runtime.model_dump(mode="json")))

    async def main():
        async with running_target() as (target, address):
            idle = config.model_copy(update={"dtn_classes": []})
            write(idle)
            process = CollectorProcess(
                settings(address, plan=replace(PLAN, dtn_classes=()), sample_time_s=0.5),
                "127.0.0.1:0", 0, config=(path, idle),
            )  # fmt: skip
            follower = asyncio.create_task(process.follow_config())
            stop = asyncio.Event()
            running = asyncio.create_task(process.collector.run(stop))
            try:
                await wait_for(lambda: process.collector.is_primary, 10, "primary")
                write(config)
                await wait_for(
                    lambda: "203.0.113.10/32" in _classes(target), 10, "the class installed"
                )
                assert process.state()["dtn_classes"] == {"dtn-1": FIRST_DTN_CLASS}
                overlapping = config.dtn_classes[0].model_copy(
                    update={"host": "dtn-2", "prefix": "203.0.113.0/28", "class_id": 3}
                )
                bad = config.model_copy(update={"dtn_classes": [*config.dtn_classes, overlapping]})
                write(bad)
                await asyncio.sleep(1.5)
                assert "203.0.113.0/28" not in _classes(target)  # refused: it overlaps
                assert "203.0.113.10/32" in _classes(target)  # kept as it ran
                write(idle)
                await wait_for(
                    lambda: "203.0.113.10/32" not in _classes(target), 10, "the class removed"
                )
            finally:
                follower.cancel()
                stop.set()
                await asyncio.wait_for(running, 10)

    asyncio.run(main())


def test_each_dtn_hosts_rate_through_the_switch_matches_the_twins_truth():
    """Two DTN hosts in the twin, each its own class: the collector's per-host rate over
    the run against the simulator's own per-host tap bytes (the 2 % target of the
    accuracy test), and the aggregate is their sum."""
    import ipaddress

    from scidmz.netsim.scenario import parse_scenario
    from scidmz.switch.netsim_source import Wiring
    from tests.telemetry.harness import WIRING, served_ticks

    scenario = parse_scenario(
        {
            "campus": {"long_flows": 20},
            "dtn": {"streams": 4, "rate_limit_bps": "300Mbps"},
            "more_dtns": [
                {"name": "dtn-2", "streams": 4, "base_rtt_s": "50ms",
                 "rate_limit_bps": "200Mbps"},
            ],
            "shaper": {"initial_rate_bps": "400Mbps"},
        }
    )  # fmt: skip
    wiring = Wiring(
        WIRING.campus_port, WIRING.dtn_port, WIRING.bottleneck_port, WIRING.dtn_address,
        WIRING.campus_address, more_dtn_addresses=(ipaddress.ip_address("203.0.113.11"),),
    )  # fmt: skip
    two = (DTN_1, DtnClass("dtn-2", "203.0.113.11/32", FIRST_DTN_CLASS + 1))

    async def main():
        async with (
            running_target(scenario, wiring=wiring) as (target, address),
            running_collector(
                settings(address, plan=replace(PLAN, dtn_classes=two), sample_time_s=0.5)
            ) as collector,
        ):
            await wait_for(lambda: collector.sequence >= 6, 20, "warm-up samples")
            first = collector.snapshot
            seen = {}
            while collector.sequence < first.sequence + 8:
                snap = collector.snapshot
                seen[snap.sequence] = snap
                await asyncio.sleep(0.02)
            seen[collector.snapshot.sequence] = collector.snapshot
            return first, collector.snapshot, seen, list(target.source.truth)

    first, last, seen, points = asyncio.run(main())
    # the truth at the ticks the first and last reads saw (found by their byte counters),
    # not at whichever tick ran when this test woke up: tens of ms later on a loaded host
    ticks = served_ticks(points, [first, *seen.values()])
    truth_first, truth_last = ticks.get(first.sequence), ticks.get(last.sequence)
    assert truth_first is not None and truth_last is not None, "no tick has the reads' counters"
    (a, b) = last.state.dtns
    assert (a.host, b.host) == ("dtn-1", "dtn-2") and a.rate_bps > 0 and b.rate_bps > 0
    assert last.state.dtn_rate_bps == pytest.approx(a.rate_bps + b.rate_bps, rel=1e-9)
    # bytes counted per class by the switch against the twin's own per-host counts
    span = [t - f for t, f in zip(truth_last.dtn_host_tap_bytes, truth_first.dtn_host_tap_bytes,
                                   strict=True)]  # fmt: skip
    assert span[0] > 0 and span[1] > 0
    assert last.dtn_bytes - first.dtn_bytes == pytest.approx(sum(span), rel=0.02)
    assert min(span) / max(span) > 0.3  # both hosts really sent
    # each host's bytes as the collector measured them: its rate over each interval
    measured = [0.0, 0.0]
    for sequence in range(first.sequence + 1, last.sequence + 1):
        snap = seen[sequence]  # every sample of the window was seen
        for k, dtn in enumerate(snap.state.dtns):
            measured[k] += dtn.rate_bps * snap.interval_s / 8
    for host, (got, truth) in enumerate(zip(measured, span, strict=True)):
        assert got == pytest.approx(truth, rel=0.02), f"host {host}"
