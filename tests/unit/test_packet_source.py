"""The packet tap's reduction (frames -> the P4 program's observations), on frames built by
hand so every rule can be checked: counters, sojourns, SEQ→ACK with Karn, algorithm 7."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import numpy as np
import pytest

from scidmz.contract.pipeline import STOP_FIN, STOP_IDLE
from scidmz.switch.observation import ActivityRule
from scidmz.switch.packet_source import (
    RECORD,
    ROLE_ACKS_IN,
    ROLE_BORDER,
    ROLE_BOTTLENECK_OUT,
    ROLE_CAMPUS_IN,
    ROLE_DTN_IN,
    TCP_FIN,
    TapState,
    TapWiring,
    release,
)

MS = 1_000_000
DTN_SENDER, DTN_RECEIVER = IPv4Address("10.71.3.1"), IPv4Address("10.71.4.10")
CAMPUS_SENDER, CAMPUS_RECEIVER = IPv4Address("10.71.1.1"), IPv4Address("10.71.4.2")


def _u32(address: IPv4Address) -> int:
    return int.from_bytes(address.packed, "little")  # as the reader stores network order


def frame(
    t_ms: float, role: int, seq: int = 0, payload: int = 1448, ack: int = 0, flags: int = 0x10,
    dtn: bool = True, sport: int = 40000,
) -> tuple[object, ...]:  # fmt: skip
    sender, receiver = (DTN_SENDER, DTN_RECEIVER) if dtn else (CAMPUS_SENDER, CAMPUS_RECEIVER)
    dport = 5201 if dtn else 5202
    if role == ROLE_ACKS_IN:  # from the receiver back to the sender
        return (int(t_ms * MS), _u32(receiver), _u32(sender), 1, ack, 52, 0, dport, sport,
                role, flags, 1)  # fmt: skip
    segments = max(1, -(-payload // 1448))
    return (int(t_ms * MS), _u32(sender), _u32(receiver), seq, 1, payload + 52, payload,
            sport, dport, role, flags, segments)  # fmt: skip


def records(*frames: tuple[object, ...]) -> np.ndarray:
    return np.array(list(frames), dtype=RECORD)


@pytest.fixture
def tap() -> TapState:
    state = TapState(TapWiring("bc", "bd", "bn", "br"), rtt_sample_interval_s=0.0)
    state.set_activity_rule(ActivityRule(packets_threshold=3, window_s=0.1, idle_timeout_s=2.0))
    return state


def test_bytes_packets_and_sojourn_per_side_and_destination(tap: TapState) -> None:
    obs = tap.reduce(
        records(
            frame(0, ROLE_DTN_IN, seq=1000),
            frame(1, ROLE_DTN_IN, seq=2448, payload=2896),  # a GSO frame: 2 segments
            frame(2, ROLE_CAMPUS_IN, seq=5000, dtn=False),
            frame(30, ROLE_BOTTLENECK_OUT, seq=1000),
            frame(41, ROLE_BOTTLENECK_OUT, seq=2448, payload=2896),
        ),
        now_ns=50 * MS,
    )
    by_port = {t.port: t for t in obs.traffic}
    dtn, campus = by_port[2], by_port[1]
    assert (dtn.destination, dtn.bytes, dtn.packets) == (DTN_RECEIVER, 1500 + 2948, 3)
    assert dtn.queuing_delay_ns == 40 * MS  # the last DTN frame out: 41 − 1 ms
    assert (campus.destination, campus.bytes, campus.queuing_delay_ns) == (CAMPUS_RECEIVER, 1500, 0)
    # The campus frame leaves in the next tick: its sojourn is matched across ticks.
    later = tap.reduce(records(frame(60, ROLE_BOTTLENECK_OUT, seq=5000, dtn=False)), 70 * MS)
    assert [(t.port, t.bytes, t.queuing_delay_ns) for t in later.traffic] == [(1, 0, 58 * MS)]


def test_a_frame_read_leaving_before_its_entering_copy_is_matched_when_that_arrives(
    tap: TapState,
) -> None:
    """The reader drains one socket after another: with an empty queue a frame's leaving
    copy can come a tick before its entering copy. It waits for it, so it counts as what
    left BR1 rather than as BR1's loss."""
    early = tap.reduce(records(frame(5.1, ROLE_BOTTLENECK_OUT, seq=1000)), now_ns=6 * MS)
    assert sum(t.egress_bytes for t in early.traffic) == 0  # its side is not known yet
    late = tap.reduce(records(frame(5.0, ROLE_DTN_IN, seq=1000)), now_ns=7 * MS)
    (dtn,) = late.traffic
    assert (dtn.bytes, dtn.egress_bytes, dtn.egress_packets) == (1500, 1500, 1)
    assert dtn.queuing_delay_ns == 100_000  # 5.1 − 5.0 ms


def test_a_frame_never_matched_stops_waiting_after_the_reorder_window(tap: TapState) -> None:
    tap.reduce(records(frame(1, ROLE_BOTTLENECK_OUT, seq=77)), now_ns=2 * MS)
    tap.reduce(records(frame(900, ROLE_CAMPUS_IN, seq=5, dtn=False)), now_ns=901 * MS)
    late = tap.reduce(records(frame(1000, ROLE_DTN_IN, seq=77)), now_ns=1001 * MS)
    assert sum(t.egress_bytes for t in late.traffic) == 0  # 999 ms on: given up


def test_a_leaving_frame_is_matched_to_the_copy_that_entered_before_it(tap: TapState) -> None:
    """A retransmission read in the same tick as the original's departure: the original's
    departure takes the original entering copy (sojourn ≥ 0), the retransmission its own."""
    obs = tap.reduce(
        records(
            frame(0, ROLE_DTN_IN, seq=1000),
            frame(20, ROLE_BOTTLENECK_OUT, seq=1000),
            frame(30, ROLE_DTN_IN, seq=1000),  # resent (spuriously)
            frame(35, ROLE_BOTTLENECK_OUT, seq=1000),
        ),
        now_ns=40 * MS,
    )
    (dtn,) = obs.traffic
    assert (dtn.bytes, dtn.egress_bytes) == (3000, 3000)
    assert dtn.queuing_delay_sum_ns == 20 * MS + 5 * MS
    assert dtn.queuing_delay_ns == 5 * MS


def test_frames_go_forward_once_every_socket_was_read_past_them() -> None:
    held = records(
        frame(10, ROLE_CAMPUS_IN, seq=1, dtn=False),
        frame(12, ROLE_BOTTLENECK_OUT, seq=2),
        frame(11, ROLE_DTN_IN, seq=3),
        frame(30, ROLE_BOTTLENECK_OUT, seq=4),
    )
    latest = {ROLE_CAMPUS_IN: 10 * MS, ROLE_DTN_IN: 11 * MS, ROLE_BOTTLENECK_OUT: 30 * MS}
    ready, rest, watermark = release(held, latest, now_ns=40 * MS, max_hold_ns=100 * MS)
    assert watermark == 10 * MS  # the campus socket is read only up to 10 ms
    assert ready["seq"].tolist() == [1]
    assert sorted(rest["seq"].tolist()) == [2, 3, 4]
    latest[ROLE_CAMPUS_IN] = 25 * MS
    ready, rest, watermark = release(rest, latest, now_ns=41 * MS, max_hold_ns=100 * MS)
    assert watermark == 11 * MS and ready["seq"].tolist() == [3]
    latest[ROLE_DTN_IN] = 26 * MS
    ready, rest, _ = release(rest, latest, now_ns=42 * MS, max_hold_ns=100 * MS)
    assert ready["seq"].tolist() == [2] and rest["seq"].tolist() == [4]


def test_a_socket_idle_or_lagging_past_the_hold_holds_nothing_back() -> None:
    held = records(frame(500, ROLE_DTN_IN, seq=1), frame(520, ROLE_BOTTLENECK_OUT, seq=2))
    # the ACK socket last heard 400 ms ago: idle, not lagging
    latest = {ROLE_DTN_IN: 500 * MS, ROLE_BOTTLENECK_OUT: 520 * MS, ROLE_ACKS_IN: 100 * MS}
    ready, rest, watermark = release(held, latest, now_ns=530 * MS, max_hold_ns=300 * MS)
    assert watermark == 500 * MS and ready["seq"].tolist() == [1]
    # a socket more than 300 ms behind no longer holds the others back
    latest = {ROLE_DTN_IN: 240 * MS, ROLE_BOTTLENECK_OUT: 510 * MS}
    ready, rest, watermark = release(held, latest, now_ns=560 * MS, max_hold_ns=300 * MS)
    assert watermark == 510 * MS and ready["seq"].tolist() == [1]
    ready, rest, watermark = release(rest, {}, now_ns=600 * MS, max_hold_ns=300 * MS)
    assert watermark == 600 * MS and rest.shape[0] == 0  # nothing heard: all goes


def test_an_ack_covering_the_segment_gives_its_rtt(tap: TapState) -> None:
    obs = tap.reduce(
        records(
            frame(0, ROLE_DTN_IN, seq=1000),
            frame(60, ROLE_ACKS_IN, ack=2000),  # does not cover 1000 + 1448
            frame(105, ROLE_ACKS_IN, ack=2448),
        ),
        now_ns=110 * MS,
    )
    assert [(m.remote, m.rtt_ns) for m in obs.rtt_matches] == [(DTN_RECEIVER, 105 * MS)]


def test_karns_rule_drops_the_sample_of_a_retransmitted_flow(tap: TapState) -> None:
    obs = tap.reduce(
        records(
            frame(0, ROLE_DTN_IN, seq=1000),
            frame(1, ROLE_DTN_IN, seq=2448),
            frame(50, ROLE_DTN_IN, seq=1000),  # retransmission of the measured segment
            frame(150, ROLE_ACKS_IN, ack=3896),
        ),
        now_ns=160 * MS,
    )
    assert obs.rtt_matches == ()
    # The next new segment starts a fresh measurement.
    obs = tap.reduce(
        records(frame(200, ROLE_DTN_IN, seq=3896), frame(301, ROLE_ACKS_IN, ack=5344)), 310 * MS
    )
    assert [m.rtt_ns for m in obs.rtt_matches] == [101 * MS]


def test_sequence_numbers_wrap(tap: TapState) -> None:
    top = 2**32 - 1000
    obs = tap.reduce(
        records(frame(0, ROLE_DTN_IN, seq=top), frame(100, ROLE_ACKS_IN, ack=(top + 1448) % 2**32)),
        now_ns=110 * MS,
    )
    assert [m.rtt_ns for m in obs.rtt_matches] == [100 * MS]


def test_activity_rule_starts_at_c_th_packets_and_stops_on_fin_and_idle(tap: TapState) -> None:
    started = tap.reduce(
        records(
            frame(0, ROLE_DTN_IN, seq=0),
            frame(150, ROLE_DTN_IN, seq=1448),  # outside T_TH of the first: a new window
            frame(160, ROLE_DTN_IN, seq=2896),
            frame(170, ROLE_DTN_IN, seq=4344),  # third packet within 100 ms: active
            frame(171, ROLE_CAMPUS_IN, seq=0, dtn=False),
        ),
        now_ns=200 * MS,
    )
    assert [(c.port, c.destination, c.started) for c in started.flow_changes] == [
        (2, DTN_RECEIVER, True)
    ]
    dtn_flow = started.flow_changes[0].flow_hash
    fin = tap.reduce(records(frame(300, ROLE_DTN_IN, seq=5792, flags=0x11)), 310 * MS)
    assert [(c.flow_hash, c.started, c.reason) for c in fin.flow_changes] == [
        (dtn_flow, False, STOP_FIN)
    ]
    # Campus: active after three packets, then silent past the idle timeout.
    tap.reduce(
        records(*(frame(400 + i, ROLE_CAMPUS_IN, seq=1448 * (i + 1), dtn=False) for i in range(3))),
        500 * MS,
    )
    idle = tap.reduce(records(), now_ns=3000 * MS)
    assert [(c.port, c.started, c.reason) for c in idle.flow_changes] == [(1, False, STOP_IDLE)]
    assert TCP_FIN == 0x01


def test_an_ack_of_an_unknown_flow_is_ignored(tap: TapState) -> None:
    obs = tap.reduce(records(frame(5, ROLE_ACKS_IN, ack=10, sport=1234)), now_ns=10 * MS)
    assert obs == type(obs)(bottleneck_port=3, clock_ns=5 * MS)  # the tap saw it: its clock


def test_a_flow_takes_its_side_and_destination_from_data_not_from_its_syn_ack(
    tap: TapState,
) -> None:
    obs = tap.reduce(
        records(
            frame(0, ROLE_ACKS_IN, ack=1, flags=0x12, dtn=False),  # the SYN-ACK comes first
            *(frame(1 + i, ROLE_CAMPUS_IN, seq=1 + 1448 * i, dtn=False) for i in range(3)),
        ),
        now_ns=10 * MS,
    )
    assert [(c.port, c.destination) for c in obs.flow_changes] == [(1, CAMPUS_RECEIVER)]


def test_rtt_samples_are_rate_limited_per_flow() -> None:
    tap = TapState(TapWiring("bc", "bd", "bn", "br"), rtt_sample_interval_s=0.05)
    frames = []
    for i in range(10):  # a segment and its ACK every 10 ms, each ACK 5 ms later
        frames += [
            frame(10 * i, ROLE_DTN_IN, seq=1448 * i),
            frame(10 * i + 5, ROLE_ACKS_IN, ack=1448 * (i + 1)),
        ]
    obs = tap.reduce(records(*frames), now_ns=200 * MS)
    assert [m.rtt_ns for m in obs.rtt_matches] == [5 * MS, 5 * MS]  # closed at 5 ms and at 65 ms


def test_resent_data_is_counted_per_group_but_not_a_keepalive_or_a_fin(tap: TapState) -> None:
    """P4BS loss method 1 on the tap: data starting below the flow's highest SEQ sent."""
    obs = tap.reduce(
        records(
            frame(0, ROLE_DTN_IN, seq=1000),
            frame(1, ROLE_DTN_IN, seq=2448, payload=2896),  # sent up to 5344
            frame(20, ROLE_DTN_IN, seq=2448, payload=2896),  # a GSO retransmission: 2 segments
            frame(21, ROLE_DTN_IN, seq=5343, payload=1),  # a keep-alive: one byte just below
            frame(22, ROLE_DTN_IN, seq=5344, payload=0, flags=TCP_FIN | 0x10),  # FIN, no data
            frame(23, ROLE_CAMPUS_IN, seq=7000, dtn=False),
        ),
        now_ns=30 * MS,
    )
    by_port = {t.port: t for t in obs.traffic}
    assert (by_port[2].retrans_bytes, by_port[2].retrans_packets) == (2948, 2)
    assert (by_port[1].retrans_bytes, by_port[1].retrans_packets) == (0, 0)
    # a later tick still knows the flow's highest SEQ, across the 2^32 wrap too
    top = 2**32 - 1448
    obs = tap.reduce(
        records(
            frame(40, ROLE_CAMPUS_IN, seq=top, dtn=False, sport=40001),  # another flow
            frame(41, ROLE_CAMPUS_IN, seq=0, dtn=False, sport=40001),  # past the wrap: new
            frame(42, ROLE_CAMPUS_IN, seq=top, dtn=False, sport=40001),  # resent
            frame(43, ROLE_DTN_IN, seq=1000),  # resent again
        ),
        now_ns=50 * MS,
    )
    by_port = {t.port: t for t in obs.traffic}
    assert by_port[1].retrans_packets == 1 and by_port[2].retrans_packets == 1


def test_what_left_br1_is_counted_with_its_sojourns(tap: TapState) -> None:
    """Method 2's egress and the mean sojourn's sum, per group of the frame that entered."""
    obs = tap.reduce(
        records(
            frame(0, ROLE_DTN_IN, seq=1000),
            frame(1, ROLE_DTN_IN, seq=2448, payload=2896),
            frame(2, ROLE_CAMPUS_IN, seq=5000, dtn=False),
            frame(30, ROLE_BOTTLENECK_OUT, seq=1000),
            frame(41, ROLE_BOTTLENECK_OUT, seq=2448, payload=2896),
            frame(45, ROLE_BOTTLENECK_OUT, seq=9999),  # never seen entering: not counted
        ),
        now_ns=50 * MS,
    )
    by_port = {t.port: t for t in obs.traffic}
    dtn, campus = by_port[2], by_port[1]
    assert (dtn.egress_bytes, dtn.egress_packets) == (1500 + 2948, 3)
    assert dtn.queuing_delay_sum_ns == 30 * MS + 2 * 40 * MS  # per segment
    assert (campus.egress_packets, campus.queuing_delay_sum_ns) == (0, 0)


def test_several_dtn_links_are_read_as_the_one_dtn_port() -> None:
    from scidmz.cli.target import parse_taps

    given = parse_taps("campus=bc,dtn=bd,bottleneck=bn,acks=br,dtn=bd2, dtn = bd3")
    assert given == {"campus": ["bc"], "dtn": ["bd", "bd2", "bd3"], "bottleneck": ["bn"],
                     "acks": ["br"]}  # fmt: skip
    wiring = TapWiring("bc", "bd", "bn", "br", more_dtn_in=("bd2", "bd3"))
    assert wiring.taps() == [
        f"bc={ROLE_CAMPUS_IN}", f"bd={ROLE_DTN_IN}", f"bd2={ROLE_DTN_IN}", f"bd3={ROLE_DTN_IN}",
        f"bn={ROLE_BOTTLENECK_OUT},out", f"br={ROLE_ACKS_IN}",
    ]  # fmt: skip
    # mirror ports: the bottleneck side's copies arrive, as every other side's do
    mirrored = TapWiring("bc", "bd", "bn", "br", mirrored=True).taps()
    assert f"bn={ROLE_BOTTLENECK_OUT}" in mirrored and not any(",out" in t for t in mirrored)


@pytest.mark.parametrize(
    ("taps", "says"),
    [
        ("campus=bc,dtn=bd,bottleneck=bn", "acks missing"),
        ("campus=bc,campus=bx,dtn=bd,bottleneck=bn,acks=br", "campus given twice"),
        ("campus=bc,dtn=bd,dtn=bd,bottleneck=bn,acks=br", "interface bd given twice"),
        ("campus=bc,dtn=,bottleneck=bn,acks=br", "got"),
        ("campus=bc,uplink=bu,dtn=bd,bottleneck=bn,acks=br", "got"),
        ("campus=bc,bottleneck=bn,acks=br," + ",".join(f"dtn=d{k}" for k in range(30)),
         "at most 32"),
    ],
)  # fmt: skip
def test_a_tap_list_that_cannot_be_read_is_refused_naming_why(taps: str, says: str) -> None:
    from scidmz.cli.target import parse_taps

    with pytest.raises(ValueError, match=says):
        parse_taps(taps)


REMOTE = (IPv4Network("10.71.4.0/24"),)


def test_one_border_port_is_split_into_both_directions_by_the_remote_prefixes() -> None:
    """A mirror port with both directions of the border link: frames to the remote prefix
    are the bottleneck side, frames from it the ACKs; the reduction is then the same as
    with two interfaces."""
    two = TapState(TapWiring("bc", "bd", "bn", "br"), rtt_sample_interval_s=0.0)
    one = TapState(TapWiring("bc", "bd", "bx", "bx", remote_prefixes=REMOTE), 0.0)
    sequence = [
        frame(0, ROLE_DTN_IN, seq=1000),
        frame(1, ROLE_CAMPUS_IN, seq=5000, dtn=False),
        frame(30, ROLE_BOTTLENECK_OUT, seq=1000),
        frame(31, ROLE_BOTTLENECK_OUT, seq=5000, dtn=False),
        frame(130, ROLE_ACKS_IN, ack=2448),
    ]
    as_border = [(*f[:9], ROLE_BORDER, *f[10:]) if f[9] != ROLE_DTN_IN and f[9] != ROLE_CAMPUS_IN
                 else f for f in sequence]  # fmt: skip
    separate, mirrored = (
        two.reduce(records(*sequence), 140 * MS),
        one.reduce(records(*as_border), 140 * MS),
    )
    assert mirrored == separate
    assert [m.rtt_ns for m in mirrored.rtt_matches] == [130 * MS]
    assert {t.port: t.queuing_delay_ns for t in mirrored.traffic} == {2: 30 * MS, 1: 30 * MS}


def test_a_border_frame_of_no_remote_prefix_is_dropped_and_a_default_route_splits_by_payload() -> (
    None
):
    from scidmz.switch.packet_source import split_border

    stranger = (0, _u32(IPv4Address("192.0.2.1")), _u32(IPv4Address("192.0.2.2")), 1, 1, 52, 0,
                1, 2, ROLE_BORDER, 0x10, 1)  # fmt: skip
    data = frame(0, ROLE_BORDER, seq=1000)
    ack = (*frame(1, ROLE_ACKS_IN, ack=2448)[:9], ROLE_BORDER, 0x10, 1)
    split = split_border(records(stranger, data, ack), REMOTE)
    assert split["role"].tolist() == [ROLE_BOTTLENECK_OUT, ROLE_ACKS_IN]
    # a remote prefix as wide as a default route: payload (or FIN) says data, else an ACK
    wide = split_border(records(data, ack), (IPv4Network("0.0.0.0/0"),))
    assert wide["role"].tolist() == [ROLE_BOTTLENECK_OUT, ROLE_ACKS_IN]


def test_one_border_interface_is_read_once_as_a_mirror_port_and_needs_the_prefixes() -> None:
    from scidmz.cli.target import parse_prefixes, parse_taps

    given = parse_taps("campus=bc,dtn=bd,border=bx")
    assert given["bottleneck"] == given["acks"] == ["bx"]
    wiring = TapWiring("bc", "bd", "bx", "bx", remote_prefixes=parse_prefixes("10.71.4.0/24"))
    assert wiring.taps() == [f"bc={ROLE_CAMPUS_IN}", f"bd={ROLE_DTN_IN}", f"bx={ROLE_BORDER}"]
    with pytest.raises(ValueError, match="remote prefixes are needed"):
        TapWiring("bc", "bd", "bx", "bx")
    with pytest.raises(ValueError, match="--remote-prefix"):
        parse_prefixes("10.71.4.0/33")
    with pytest.raises(ValueError, match="border replaces bottleneck and acks"):
        parse_taps("campus=bc,dtn=bd,border=bx,acks=br")


def test_the_tap_clock_is_the_latest_frames_time_and_never_goes_back(tap: TapState) -> None:
    assert tap.reduce(records(), now_ns=1 * MS).clock_ns == 0  # nothing tapped yet
    # any order inside a tick: the latest frame's time, whatever its side
    obs = tap.reduce(records(frame(9, ROLE_DTN_IN), frame(12, ROLE_ACKS_IN, ack=1),
                             frame(4, ROLE_CAMPUS_IN, dtn=False)), now_ns=20 * MS)  # fmt: skip
    assert obs.clock_ns == 12 * MS
    assert tap.reduce(records(), now_ns=30 * MS).clock_ns == 12 * MS  # an empty tick keeps it
    # a late frame from another interface's socket counts, but the clock stays at the latest
    assert tap.reduce(records(frame(11, ROLE_DTN_IN, seq=9_000)), now_ns=40 * MS).clock_ns == (
        12 * MS
    )
