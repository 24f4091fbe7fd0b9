"""bench/lab_packets.py's bookkeeping: reading the border's captures, telling dropped frames
from delivered ones, and the per-class and per-millisecond figures (lab and twin alike)."""

from __future__ import annotations

import math
import socket
from pathlib import Path
from types import ModuleType

import dpkt
import numpy as np
import pytest

from scidmz.netsim import layout
from scidmz.netsim.scenario import parse_scenario
from scidmz.netsim.simulator import Simulator
from tests.bench_scripts import load_bench

MSS = 1448


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("lab_packets")


def _frame(src: str, dst: str, sport: int, seq: int, payload: int) -> bytes:
    tcp = dpkt.tcp.TCP(sport=sport, dport=5201, seq=seq, flags=dpkt.tcp.TH_ACK, data=b"x" * payload)
    tcp.off = 8  # 32-byte header: timestamps, as the lab's senders use
    tcp.opts = b"\x01\x01\x08\x0a" + b"\x00" * 8
    ip = dpkt.ip.IP(
        src=socket.inet_aton(src), dst=socket.inet_aton(dst), p=dpkt.ip.IP_PROTO_TCP, data=tcp
    )
    ip.len = 20 + 32 + payload
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, data=ip))


def _write(path: Path, frames: list[tuple[float, bytes]], snaplen: int = 96) -> None:
    with path.open("wb") as handle:
        writer = dpkt.pcap.Writer(handle, snaplen=snaplen)
        for t_s, raw in frames:
            writer.writepkt(raw[:snaplen], ts=t_s)


def test_frames_are_read_per_class_with_the_payload_the_ip_header_gives(
    bench: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "bd.pcap"
    _write(
        path,
        [
            (
                10.0,
                _frame("10.71.3.1", "10.71.4.10", 40000, 1, 16 * MSS),
            ),  # a 16-segment GSO packet
            (10.1, _frame("10.71.4.10", "10.71.3.1", 5201, 7, 0)),  # an ACK: not data
            (10.2, _frame("10.71.1.1", "10.71.4.2", 41000, 9, 3 * MSS)),  # campus
            (10.3, _frame("10.71.9.9", "10.71.4.2", 42000, 9, MSS)),  # neither class
        ],
    )
    frames = bench.read_frames(path)
    assert [(f.traffic_class, f.port, f.seq, f.payload_bytes) for f in frames] == [
        ("dtn", 40000, 1, 16 * MSS),
        ("campus", 41000, 9, 3 * MSS),
    ]
    assert frames[0].t_s == pytest.approx(10.0)


def test_of_a_resent_sequence_number_the_earlier_copy_is_the_dropped_one(bench: ModuleType) -> None:
    frame = bench.Frame
    entered = [
        frame(1.0, "dtn", 1, 100, 10 * MSS),  # dropped ...
        frame(1.1, "campus", 2, 500, 4 * MSS),  # delivered
        frame(1.3, "dtn", 1, 100, 10 * MSS),  # ... and its resend delivered
        frame(1.9, "campus", 2, 900, MSS),  # may still be queued at the end: not judged
    ]
    left = [
        frame(1.2, "campus", 2, 500, 4 * MSS),
        frame(1.5, "dtn", 1, 100, 10 * MSS),
        frame(2.0, "dtn", 1, 0, MSS),
    ]
    judged = bench.judge(entered, left)
    assert [(s.t_s, s.traffic_class, s.dropped) for s in judged] == [
        (1.0, "dtn", True),
        (1.1, "campus", False),
        (1.3, "dtn", False),
    ]
    assert judged[0].lost_bytes == 10 * MSS


def test_class_figures_give_sizes_losses_and_the_drop_chance_by_size(bench: ModuleType) -> None:
    sent = bench.Sent
    small = [sent(0.001 * k, "dtn", k % 2, 2 * MSS, 0.0) for k in range(100)]
    large = [
        sent(0.001 * k, "dtn", k % 2, 14 * MSS, 14 * MSS if k < 10 else 0.0) for k in range(100)
    ]
    campus = [sent(0.0, "campus", 5, 3 * MSS, 0.0)]
    figures = bench.class_figures(small + large + campus, "dtn", 2.0, MSS)
    assert figures.packets_per_flow_s == pytest.approx(200 / 2 / 2.0)
    assert figures.mean_segments == pytest.approx(8.0)
    assert figures.loss_per_byte == pytest.approx(10 * 14 / (100 * 2 + 100 * 14))
    assert figures.drop_by_size[0] == 0.0  # 1-2 segments: none of 100 dropped
    assert figures.drop_by_size[-1] == pytest.approx(0.10)  # 14+: 10 of 100
    assert math.isnan(figures.drop_by_size[2])  # 6-9: too few packets to say
    assert math.isnan(bench.class_figures(campus, "dtn", 1.0, MSS).loss_per_byte)
    # sized in a jumbo MSS four times as large, the 14-segment packets hold 3.5 (rounded 4)
    jumbo = bench.class_figures(small + large, "dtn", 2.0, 4 * MSS)
    assert jumbo.mean_segments == pytest.approx((100 * 1 + 100 * 4) / 200)


def test_millisecond_figures_weigh_the_dtn_where_drops_happen(bench: ModuleType) -> None:
    sent = bench.Sent
    packets = [
        sent(0.0005, "dtn", 1, 1000.0, 0.0),
        sent(0.0006, "campus", 2, 3000.0, 3000.0),  # ms 0 holds a drop; DTN 1/4 of it
        sent(0.0015, "campus", 2, 4000.0, 0.0),
        sent(0.0016, "campus", 3, 4000.0, 0.0),  # ms 1: no DTN, no drop
    ]
    figures = bench.millisecond_figures(packets, 0.0, 0.004)
    assert figures.drop_fraction == pytest.approx(1 / 4)
    assert figures.dtn_share == pytest.approx(1000 / 12000)
    assert figures.dtn_share_when_dropping == pytest.approx(1000 / 4000)
    counts = np.array([1, 2, 0, 0])
    assert figures.campus_count_dispersion == pytest.approx(counts.var() / counts.mean())


def test_the_twins_packets_are_what_each_flow_sent_in_a_step_after_slow_start(
    bench: ModuleType,
) -> None:
    raw = {
        "bottleneck": {"capacity_bps": 50e6},
        "campus": {"long_flows": 3, "base_rtt_s": 0.01},
        "dtn": {"streams": 2, "base_rtt_s": 0.05},
    }
    seconds = 6.0
    records = bench.twin_sent(raw, seconds, seed=1)
    assert records and min(r.t_s for r in records) >= bench.SETTLED_S
    assert {r.traffic_class for r in records} == {"dtn", "campus"}
    assert all(0.0 <= r.lost_bytes <= r.payload_bytes for r in records)
    # the same run, counted from the flows' totals, sent what the records hold
    sim = Simulator(parse_scenario(dict(raw, seed=1, sample_time_s=0.001), "case"))
    sim.advance(round(bench.SETTLED_S / 0.001))
    before = sim.flow_f[layout.SENT].sum()
    sim.advance(round((seconds - bench.SETTLED_S) / 0.001))
    assert sum(r.payload_bytes for r in records) == pytest.approx(
        sim.flow_f[layout.SENT].sum() - before
    )
