"""The simulator's step loop, compiled with numba (one call advances many steps).

One step of length dt (≤ 1 ms), in this order:

1. **ACKs.** Bytes that left the bottleneck one base RTT ago are acknowledged: inflight
   shrinks, the RTT sample updates SRTT, and the flow's congestion control grows its window
   (``congestion.py``). All flows of a class share one base RTT, so the bytes a class gets
   acknowledged in a step left the bottleneck in the same step: their RTT sample is base RTT +
   that step's mean queuing delay for the class (+ the shaper's delay for the campus). Losses
   whose detection time has come are declared: they leave inflight, return to the send
   backlog (retransmission) and trigger the window reduction; a loss with nothing sent after
   it waits one more SRTT for the tail-loss probe. A flow whose bytes are all acknowledged
   completes (FCT event; a stream of a pooled DTN transfer once the pool is empty too).
2. **Arrivals** of short flows (paper table 6) take a free column.
3. **Send.** Each flow sends ``min(cwnd·MSS − inflight, NIC rate·dt, backlog)``; BBR flows
   also respect their pacing rate; a window-limited sender holds back a burst too small to
   be worth sending, as Linux's TSO deferral does. With ``proportional_rate_reduction`` a Reno
   or Cubic sender in loss recovery sends as Linux's PRR lets it (``_reduce_in_recovery``).
   A pooled finite transfer tops each DTN stream's backlog up from the shared pool first
   (``_draw_from_pool``). With a DTN cap (the DTN actuator), the DTN streams share a token
   bucket at that rate; what does not fit waits at the host (``_cap_dtn``).
4. **Campus shaper** (S1-eth1): a drop-tail queue in front of a token bucket with rate u(t)
   and depth ``burst``; up to ``tokens + u·dt`` bytes leave per step.
5. **Bottleneck** (BR1→BR2): what arrives (campus bytes leaving the shaper, DTN bytes) passes the
   tap, is admitted up to the buffer (drop-tail: whole bursts of flows drawn in proportion
   to their arrivals are dropped until the rest fits) and served FIFO at capacity B.
6. **Departures** are scheduled for acknowledgement one base RTT later; their sojourn is the
   queuing-delay sample of the P4 register (paper algorithm 5).
7. **Tap activity rule** (paper algorithm 7): a flow becomes active once C_TH packets arrive
   with gaps under T_TH; FIN (completion) or ``idle`` seconds without packets remove it.

The link, the shaper and the DTN cap count frames (MSS + ``header_bytes``); the kernel counts
payload, so their rates and sizes arrive here scaled by ``P_PAYLOAD``.

The loop returns early (fewer steps done) when the event buffer could overflow or the
short-flow random numbers run out; the Python side drains or refills and calls again.

Speed: the common per-flow work is written as branch-free passes over contiguous rows, which
LLVM vectorises as long as no pass stores a value it loaded inside a branch or a select
(``congestion.kept``); the rare work (loss, completion, BBR, Cubic's epoch start) is marked by
such a pass, which also counts the marks, and done by a scalar pass only when there are any.
Sums over flows stay sequential so that the output does not depend on how a loop is compiled.
A change here is checked with ``hack/netsim_fingerprint.py`` (output byte-identical) and
``bench/netsim_speed.py --against REF``; docs/design/netsim-speed.md has the figures and what
was tried.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from scidmz.contract.compiled import compiled, compiled_inline
from scidmz.netsim.congestion import (
    HYSTART_OFF,
    bbr_on_loss,
    bbr_step,
    greater,
    grow_windows,
    hystart_update,
    kept,
    lesser,
    on_loss,
    on_timeout,
    prr_window,
    timeout_after,
)
from scidmz.netsim.fifo import fifo_pop, fifo_push
from scidmz.netsim.layout import (
    ACK_CAMPUS,
    ACK_GROUP0,
    ACK_SHAPER_DELAY,
    ACKED,
    ARRIVALS_EWMA,
    BACKOFF,
    BASE_RTT,
    BASE_STEPS,
    BBR,
    BOTTLENECK_DROPPED,
    BTL_BW,
    CAMPUS,
    CAMPUS_RATE_LIMIT,
    CC,
    CLASS,
    CUBIC,
    CWND,
    CWND_LIMITED,
    CYCLE_IDX,
    DEFERRED,
    DROPPED,
    DROPS_EWMA,
    DTN,
    EPOCH_T,
    EV_COLUMN,
    EV_KIND,
    EV_SERIAL,
    EV_SIZE,
    EV_TIME,
    EV_VALUE,
    FILLED_PIPE,
    FLOW_DONE,
    FLOW_START,
    FULL_BW_COUNT,
    G_BURST,
    G_DEPARTED,
    G_END,
    G_FIRST,
    G_POOL,
    G_QD_LAST,
    G_RATE_LIMIT,
    G_SOJOURN_W,
    G_TAP_BYTES,
    G_TOKENS,
    GROUP,
    HS_CURR_RTT,
    HS_FOUND,
    INFLIGHT,
    INFLIGHT_HI,
    KIND,
    LINE_BYTES,
    LOSS_AT,
    LOST_PENDING,
    MIN_RTT,
    MIN_RTT_AT,
    MODE,
    N_EVENTS,
    N_FLOW_F,
    NEXT_ARRIVAL,
    NEXT_SERIAL,
    OUT_ARR_CAMPUS,
    OUT_ARR_DTN,
    OUT_DEP_CAMPUS,
    OUT_DEP_DTN,
    OUT_DROP_CAMPUS,
    OUT_DROP_DTN,
    OUT_DROP_SHAPER,
    OUT_DTN_RATE_LIMIT,
    OUT_QD_CAMPUS_W,
    OUT_QD_DTN_W,
    OUT_QUEUE,
    OUT_RATE_LIMIT,
    OUT_RUNNING,
    OUT_SHAPED,
    OUT_SHAPER_QUEUE,
    OUT_SHAPER_W,
    OUT_TAP_ACTIVE,
    P_BBR_RECOVERY,
    P_BUFFER,
    P_BURST,
    P_C_TH,
    P_CAPACITY,
    P_DT,
    P_HYSTART,
    P_IDLE,
    P_IW,
    P_MIN_TSO,
    P_MSS,
    P_N_CAMPUS,
    P_PACED_DROP_WEIGHT,
    P_PAYLOAD,
    P_POOL_END,
    P_POOL_START,
    P_PRR,
    P_SHAPER_LIMIT,
    P_SHORT_CC,
    P_SHORT_LINE,
    P_SHORT_RTT,
    P_SHORTS_ON,
    P_T_TH,
    PACING_CREDIT,
    PROBE_UP_SEGS,
    PRR_OUT,
    PRR_PRIOR,
    QD_CAMPUS_LAST,
    QD_DTN_LAST,
    QUEUE,
    RAND_CURSOR,
    RECOVERY_UNTIL,
    REMAINING,
    RESEND_FROM,
    RESEND_OWED,
    RESENT_CAMPUS,
    RESENT_DTN,
    RESENT_TOTAL,
    RETIRED_ACKED,
    RETIRED_DROPPED,
    RETIRED_SENT,
    RNG_STATE,
    ROUND_COUNT,
    ROUND_LOST,
    ROUND_T,
    RUNNING,
    SAMPLE_ACKED,
    SAMPLE_RTT_W,
    SENT,
    SERIAL,
    SHAPER_ARRIVALS_EWMA,
    SHAPER_DROPPED,
    SHAPER_DROPS_EWMA,
    SHAPER_QUEUE,
    SHORT,
    SIZE,
    SRTT,
    SSTHRESH,
    START_T,
    STARTUP,
    STEP,
    TAIL_PROBED,
    TAP_ACTIVE,
    TAP_BYTES_CAMPUS,
    TAP_BYTES_DTN,
    TAP_LAST_SEEN,
    TAP_PACKETS,
    TAP_PACKETS_CAMPUS,
    TAP_PACKETS_DTN,
    TAP_RTT,
    TAP_RTT_AT,
    TAP_START,
    TAP_STOP_FIN,
    TAP_STOP_IDLE,
    TOKENS,
    W_MAX,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_PROBE_LOSS_WINDOW_S = 0.02
"""A tail-loss probe is lost with the share of arrivals dropped over about this long (the
moving averages DROPS_EWMA / ARRIVALS_EWMA): a drop-tail queue that has just been full."""

_DONE_TOLERANCE_BYTES = 1.0
"""A flow with less than a byte unacknowledged is done: no segment is that small, and the
float sums of a 1.25 GB stream's ACKs end ~1e-3 bytes short (at 1e-3, 5 of 10 capped 10 GB
transfers never completed)."""
_GSO_MAX_BYTES = 65_536.0 - 1448.0  # GSO_LEGACY_MAX_SIZE less headroom, as whole segments
SCRATCH_ROWS = 10
_UNDEFERRED = 1e300
"""A pacing rate no step can use up: a flow given it sends what its window allows at once,
without TSO deferral (a sender in loss recovery; Linux ``tcp_tso_should_defer``)."""


@compiled
def init_flow(
    flow_f: FloatArray,
    flow_i: IntArray,
    bw_filter: FloatArray,
    i: int,
    traffic_class: int,
    cc: int,
    kind: int,
    base_rtt: float,
    line_bytes: float,
    size: float,
    now: float,
    dt: float,
    initial_window: float,
    serial: int,
    mss: float,
    hystart: bool,
) -> None:
    """Put a new flow in column ``i`` (also used to recycle short-flow columns)."""
    for row in range(N_FLOW_F):
        flow_f[row, i] = 0.0
    for k in range(bw_filter.shape[1]):
        bw_filter[i, k] = 0.0
    flow_i[:, i] = 0
    flow_i[CLASS, i] = traffic_class
    flow_i[CC, i] = cc
    flow_i[KIND, i] = kind
    flow_i[RUNNING, i] = 1
    flow_i[SERIAL, i] = serial
    flow_i[BASE_STEPS, i] = max(1, round(base_rtt / dt))
    flow_i[MODE, i] = STARTUP
    flow_i[FILLED_PIPE, i] = 0
    flow_i[FULL_BW_COUNT, i] = 0
    flow_i[ROUND_COUNT, i] = 0
    flow_i[CYCLE_IDX, i] = 0
    flow_f[CWND, i] = initial_window
    flow_f[SSTHRESH, i] = np.inf
    flow_f[REMAINING, i] = size
    flow_f[SIZE, i] = size
    flow_f[START_T, i] = now
    flow_f[BASE_RTT, i] = base_rtt
    flow_f[LINE_BYTES, i] = line_bytes
    flow_f[EPOCH_T, i] = -1.0
    flow_f[W_MAX, i] = 0.0
    flow_f[MIN_RTT, i] = np.inf
    flow_f[MIN_RTT_AT, i] = now
    flow_f[ROUND_T, i] = now
    flow_f[INFLIGHT_HI, i] = np.inf
    # BBR's first pacing rate comes from the handshake RTT, as in Linux's bbr_init_pacing_rate.
    flow_f[BTL_BW, i] = initial_window * mss / base_rtt
    flow_f[PROBE_UP_SEGS, i] = 1.0
    flow_f[TAP_LAST_SEEN, i] = -np.inf
    flow_f[RECOVERY_UNTIL, i] = -np.inf
    flow_f[CWND_LIMITED, i] = 1.0
    flow_f[HS_CURR_RTT, i] = np.inf
    flow_i[HS_FOUND, i] = 0 if hystart and cc == CUBIC else HYSTART_OFF


@compiled
def _event(
    events: FloatArray,
    glob_i: IntArray,
    now: float,
    serial: int,
    kind: int,
    value: float,
    size: float,
    column: int,
) -> None:
    k = glob_i[N_EVENTS]
    events[EV_TIME, k] = now
    events[EV_SERIAL, k] = serial
    events[EV_KIND, k] = kind
    events[EV_VALUE, k] = value
    events[EV_SIZE, k] = size
    events[EV_COLUMN, k] = column
    glob_i[N_EVENTS] = k + 1


@compiled
def _drop(flow_f: FloatArray, i: int, dropped: float, now: float) -> None:
    flow_f[DROPPED, i] += dropped
    if flow_f[LOST_PENDING, i] <= 0.0:
        flow_f[LOSS_AT, i] = now + max(flow_f[SRTT, i], flow_f[BASE_RTT, i])
    flow_f[LOST_PENDING, i] += dropped


@compiled
def _fraction(part: float, whole: float) -> float:
    return min(part / whole, 1.0) if whole > 0.0 else 0.0


@compiled
def _probe_loss(glob_f: FloatArray, traffic_class: int) -> float:
    """Chance that a tail-loss probe of this class is dropped: the bottleneck's recent drop
    fraction, and for the campus also the shaper's in front of it."""
    bottleneck = _fraction(glob_f[DROPS_EWMA], glob_f[ARRIVALS_EWMA])
    if traffic_class == DTN:
        return bottleneck
    shaper = _fraction(glob_f[SHAPER_DROPS_EWMA], glob_f[SHAPER_ARRIVALS_EWMA])
    return 1.0 - (1.0 - shaper) * (1.0 - bottleneck)


@compiled
def _uniform(glob_i: IntArray) -> float:
    """xorshift32 in an int64 cell (no overflow), for deterministic per-simulator draws."""
    x = glob_i[RNG_STATE]
    x ^= (x << 13) & 0xFFFFFFFF
    x ^= x >> 17
    x ^= (x << 5) & 0xFFFFFFFF
    glob_i[RNG_STATE] = x
    return float(x / 4294967296.0)


@compiled
def _burst_bytes(flow_f: FloatArray, flow_i: IntArray, i: int, mss: float, min_tso: float) -> float:
    """The TSO/GSO burst flow ``i`` sends now (Linux ``tcp_tso_autosize``): ~1 ms at its
    pacing rate (BBR's; 1.2 cwnd / SRTT for the others), at least the minimum TSO burst (BBR:
    2 segments), at most 64 kB; a window-limited sender's bursts are about a third of its
    window, the room ACKs open before it sends (``tcp_tso_should_defer``)."""
    if flow_i[CC, i] >= BBR:
        return float(min(max(flow_f[BTL_BW, i] * 0.001, 2.0 * mss), _GSO_MAX_BYTES))
    cwnd_bytes = flow_f[CWND, i] * mss
    srtt = max(flow_f[SRTT, i], flow_f[BASE_RTT, i])
    goal = min(max(1.2 * cwnd_bytes / srtt * 0.001, min_tso), _GSO_MAX_BYTES)
    return float(max(min(goal, cwnd_bytes / 3.0), mss))


@compiled
def _tail_drop(
    flow_f: FloatArray,
    flow_i: IntArray,
    glob_i: IntArray,
    arriving: FloatArray,
    cumulative: FloatArray,
    columns: int,
    excess: float,
    mss: float,
    min_tso: float,
    now: float,
    paced_weight: float,
) -> tuple[float, float]:
    """Drop ``excess`` bytes of this step's arrivals, one TSO/GSO burst at a time.

    Each drop hits a flow drawn with probability proportional to its arrivals (a packet of
    that flow met the full buffer) and takes one of its bursts (``_burst_bytes``): a burst
    reaches the queue as one super-packet, and a drop-tail queue (a bfifo, a tbf's queue)
    drops it whole. So losses come in trains that hit few flows, each losing several
    segments for one window reduction — real drop-tail's loss pattern, which a per-byte or
    per-packet split spreads over every flow. Returns (campus, DTN) bytes dropped.

    A paced sender's (BBR's) arrivals weigh ``paced_weight`` (scenario
    ``paced_drop_weight``) per byte in the draw. Its packets are spread over the step by
    its pacing timer, an ACK-clocked sender's come in clumps as its ACKs do; at a full
    queue a packet in a clump meets the queue its predecessor has just filled, a paced
    packet more often finds the room a departure made. On the lab's packets (bench
    lab_packets.py, bbr-50-steps) a campus packet of 1-2 segments was dropped 1.3-1.4x as
    often as the BBR DTN's of the same size and one of 3-5 segments 1.6x. The weight is
    fitted, not measured: 0.8 brings the campus beside a BBR DTN to the lab's rate (scanned
    0.4-1 on the lab's matrix; docs/design/netsim-calibration.md), a stand-in
    for sub-millisecond timing a 1 ms step does not hold. When the step's excess is more
    than the other flows bring, a paced sender still loses the rest: the weight moves the
    losses a step shares, not their sum.
    """
    running_sum = 0.0
    for c in range(columns):
        running_sum += arriving[c] * (paced_weight if flow_i[CC, c] >= BBR else 1.0)
        cumulative[c] = running_sum
    dropped_campus = 0.0
    dropped_dtn = 0.0
    remaining = excess
    attempts = 0
    limit = 16 * columns + 64
    while remaining > 1e-9 and attempts < limit:
        attempts += 1
        target = _uniform(glob_i) * running_sum
        low = 0
        high = columns - 1
        while low < high:
            middle = (low + high) // 2
            if cumulative[middle] <= target:
                low = middle + 1
            else:
                high = middle
        taken = min(_burst_bytes(flow_f, flow_i, low, mss, min_tso), arriving[low])
        if taken <= 0.0:
            continue
        arriving[low] -= taken
        remaining -= taken
        if flow_i[CLASS, low] == DTN:
            dropped_dtn += taken
        else:
            dropped_campus += taken
        _drop(flow_f, low, taken, now)
    if remaining > 1e-9:
        # Nearly every arrival must go (a tiny buffer): take the rest proportionally.
        left = 0.0
        for c in range(columns):
            left += arriving[c]
        keep = max(left - remaining, 0.0) / left
        for c in range(columns):
            if arriving[c] > 0.0:
                taken = arriving[c] * (1.0 - keep)
                arriving[c] -= taken
                if flow_i[CLASS, c] == DTN:
                    dropped_dtn += taken
                else:
                    dropped_campus += taken
                _drop(flow_f, c, taken, now)
    return dropped_campus, dropped_dtn


@compiled_inline
def _account_acks(
    flow_f: FloatArray,
    ack_bytes: FloatArray,
    slot: int,
    first: int,
    end: int,
    queue_delay: float,
    shaper_delay: float,
    now: float,
    rtt_sample: FloatArray,
    acked_now: FloatArray,
) -> None:
    """Acknowledge what columns ``first..end`` (one class) sent one base RTT ago.

    Their bytes left the bottleneck in the same step, so they share its queuing delay (and,
    for the campus, the shaper's): RTT = base + queueing [+ shaper], with no division.
    Branch-free so it vectorises; columns with nothing to acknowledge keep their state.
    Each kept value is loaded before the select and passed through ``congestion.kept`` (see there).
    """
    for i in range(first, end):
        acked = ack_bytes[slot, i]
        has_ack = acked > 0.0
        tap = flow_f[BASE_RTT, i] + queue_delay
        rtt = tap + shaper_delay
        rtt_sample[i] = rtt if has_ack else 0.0
        acked_now[i] = acked
        flow_f[SAMPLE_RTT_W, i] += acked * rtt
        last_tap = flow_f[TAP_RTT, i]
        last_tap_at = flow_f[TAP_RTT_AT, i]
        flow_f[TAP_RTT, i] = tap if has_ack else kept(last_tap)
        flow_f[TAP_RTT_AT, i] = now if has_ack else kept(last_tap_at)
        srtt = flow_f[SRTT, i]
        smoothed = rtt if srtt <= 0.0 else srtt + 0.125 * (rtt - srtt)
        flow_f[SRTT, i] = smoothed if has_ack else kept(srtt)
        flow_f[INFLIGHT, i] -= acked
        flow_f[ACKED, i] += acked
        flow_f[SAMPLE_ACKED, i] += acked
        ack_bytes[slot, i] = 0.0


@compiled_inline
def _schedule_acks(
    flow_i: IntArray,
    ack_bytes: FloatArray,
    ack_delay: FloatArray,
    departed: FloatArray,
    sojourn_w: FloatArray,
    slot: int,
    first: int,
    end: int,
    delay_column: int,
    shaper_delay: float,
) -> tuple[float, float]:
    """Put columns ``first..end`` (the campus, or one DTN group: one base RTT) into the
    ACK ring; ``delay_column``: its ACK_DELAY column (the campus also writes the shaper's).

    Returns the bytes departed and their bytes x queueing delay.
    """
    if end <= first:
        return 0.0, 0.0
    ring = ack_bytes.shape[0]
    row = slot + flow_i[BASE_STEPS, first]
    if row >= ring:
        row -= ring
    total = 0.0
    weighted = 0.0
    for i in range(first, end):
        amount = departed[i]
        ack_bytes[row, i] += amount
        total += amount
        weighted += sojourn_w[i]
    ack_delay[row, delay_column] = weighted / total if total > 0.0 else 0.0
    if delay_column == ACK_CAMPUS:
        ack_delay[row, ACK_SHAPER_DELAY] = shaper_delay
    return total, weighted


@compiled_inline
def _tap(
    flow_f: FloatArray,
    flow_i: IntArray,
    glob_i: IntArray,
    events: FloatArray,
    arrive: FloatArray,
    first: int,
    end: int,
    now: float,
    per_mss: float,
    t_th: float,
    c_th: float,
    idle: float,
) -> tuple[float, int]:
    """The tap over columns ``first..end``: the C_TH / T_TH rule (paper algorithm 7).

    A flow's packets count while they arrive less than T_TH apart; C_TH of them make it
    active (new-flow digest); ``idle`` seconds without packets make it inactive again.
    Returns the bytes seen and the number of active flows.
    """
    seen = 0.0
    active = 0
    for i in range(first, end):
        amount = arrive[i]
        if amount > 0.0:
            seen += amount
            packets = amount * per_mss
            if now - flow_f[TAP_LAST_SEEN, i] < t_th:
                packets += flow_f[TAP_PACKETS, i]
            flow_f[TAP_PACKETS, i] = packets
            flow_f[TAP_LAST_SEEN, i] = now
            if flow_i[TAP_ACTIVE, i] == 0 and packets >= c_th:
                flow_i[TAP_ACTIVE, i] = 1
                _event(events, glob_i, now, flow_i[SERIAL, i], TAP_START, 0.0, 0.0, i)
        elif flow_i[TAP_ACTIVE, i] == 1 and now - flow_f[TAP_LAST_SEEN, i] > idle:
            flow_i[TAP_ACTIVE, i] = 0
            _event(events, glob_i, now, flow_i[SERIAL, i], TAP_STOP_IDLE, 0.0, 0.0, i)
        active += flow_i[TAP_ACTIVE, i]
    return seen, active


@compiled_inline
def _cap_dtn(
    flow_f: FloatArray,
    groups: FloatArray,
    g: int,
    payload: float,
    send: FloatArray,
    dt: float,
) -> None:
    """DTN host ``g``'s sending-rate cap (pacing, or a tbf on its egress): its streams share
    a token bucket at ``G_RATE_LIMIT`` in proportion to what each wants to send. What does
    not fit waits in the host (TCP small queues push back: nothing is dropped), and a
    stream held back is not window-limited, so its window does not grow (Linux
    ``tcp_is_cwnd_limited``, RFC 7661)."""
    first = int(groups[G_FIRST, g])
    end = int(groups[G_END, g])
    tokens = groups[G_TOKENS, g] + groups[G_RATE_LIMIT, g] * payload * dt
    wanted = 0.0
    for i in range(first, end):
        wanted += send[i]
    if wanted > tokens:
        share = max(tokens, 0.0) / wanted
        for i in range(first, end):
            if send[i] > 0.0:
                send[i] *= share
                flow_f[CWND_LIMITED, i] = 0.0
        wanted = max(tokens, 0.0)
    groups[G_TOKENS, g] = min(groups[G_BURST, g], tokens - wanted)


POOL_BLOCK_BYTES = 131_072.0
"""A pooled transfer hands its streams 128 KiB blocks (iperf3's default TCP write; GridFTP's
mode E sends blocks of the same order)."""


@compiled
def _draw_from_pool(
    flow_f: FloatArray, flow_i: IntArray, groups: FloatArray, g: int, mss: float
) -> None:
    """A pooled transfer: a DTN stream whose backlog is under two windows and a block takes
    whole blocks from the shared pool, as the transfer tool writes to whichever socket has
    room (iperf3 -n ends when the streams' total reaches n; GridFTP's mode E hands the next
    block to the next free stream). The streams then finish within a block or two of each
    other; a static split ends with the slowest stream, whose share of an intra-DTN
    unfairness can be tens of seconds of a 10 GB transfer (measured: the last of 8 Cubic
    streams finished 10-42 s after the first)."""
    for i in range(int(groups[G_FIRST, g]), int(groups[G_END, g])):
        pool = groups[G_POOL, g]
        if pool <= 0.0:
            return
        if flow_i[RUNNING, i] == 0:
            continue
        short = 2.0 * flow_f[CWND, i] * mss + POOL_BLOCK_BYTES - flow_f[REMAINING, i]
        if short > 0.0:
            take = min(math.ceil(short / POOL_BLOCK_BYTES) * POOL_BLOCK_BYTES, pool)
            flow_f[REMAINING, i] += take
            flow_f[SIZE, i] += take
            groups[G_POOL, g] = pool - take


@compiled
def _reduce_in_recovery(
    flow_f: FloatArray,
    pacing: FloatArray,
    n_flows: int,
    now: float,
    acked_now: FloatArray,
    mss: float,
) -> None:
    """Loss recovery with proportional rate reduction (``proportional_rate_reduction``): as
    Linux ``tcp_cwnd_reduction`` does, the window of a Reno or Cubic sender in recovery is
    what it has in flight + what ``prr_window`` lets it send, and it does not defer a small
    burst; when recovery ends the window is ssthresh (``tcp_end_cwnd_reduction``)."""
    for i in range(n_flows):
        if flow_f[PRR_PRIOR, i] <= 0.0:
            continue
        if now < flow_f[RECOVERY_UNTIL, i]:
            allowed = prr_window(flow_f, i, acked_now[i], mss)
            flow_f[CWND, i] = (flow_f[INFLIGHT, i] + allowed) / mss
            pacing[i] = _UNDEFERRED
        else:
            flow_f[CWND, i] = flow_f[SSTHRESH, i]
            flow_f[PRR_PRIOR, i] = 0.0


@compiled
def settle_resent(flow_f: FloatArray, glob_f: FloatArray, i: int, campus: bool) -> None:
    """Flow ``i``'s sends since the last settlement paid off its RESEND_OWED first: count
    what they re-sent in its class's RESENT total. Exactly what accounting every step
    would give, done only where it must be (a loss, a column's reuse, a read): a per-step
    pass over the flows cost the kernel 10-25 % of its speed."""
    resent = lesser(flow_f[RESEND_OWED, i], flow_f[SENT, i] - flow_f[RESEND_FROM, i])
    flow_f[RESEND_OWED, i] -= resent
    flow_f[RESEND_FROM, i] = flow_f[SENT, i]
    flow_f[RESENT_TOTAL, i] += resent
    glob_f[RESENT_CAMPUS if campus else RESENT_DTN] += resent


@compiled
def settle_all_resent(flow_f: FloatArray, glob_f: FloatArray, n_campus: int) -> None:
    """``settle_resent`` for every flow owing bytes (before the RESENT totals are read)."""
    for i in range(flow_f.shape[1]):
        if flow_f[RESEND_OWED, i] > 0.0:
            settle_resent(flow_f, glob_f, i, i < n_campus)


@compiled
def _start_short_flows(
    flow_f: FloatArray,
    flow_i: IntArray,
    glob_f: FloatArray,
    glob_i: IntArray,
    params: FloatArray,
    bw_filter: FloatArray,
    rand_gap: FloatArray,
    rand_size: FloatArray,
    events: FloatArray,
    now: float,
) -> int:
    started = 0
    pool_start = int(params[P_POOL_START])
    pool_end = int(params[P_POOL_END])
    while now >= glob_f[NEXT_ARRIVAL] and glob_i[RAND_CURSOR] < rand_gap.shape[0]:
        column = -1
        for c in range(pool_start, pool_end):
            if flow_i[RUNNING, c] == 0:
                column = c
                break
        if column < 0:
            glob_f[DEFERRED] += 1.0
            return started
        settle_resent(flow_f, glob_f, column, True)  # short flows are campus flows
        glob_f[RETIRED_SENT] += flow_f[SENT, column]
        glob_f[RETIRED_ACKED] += flow_f[ACKED, column]
        glob_f[RETIRED_DROPPED] += flow_f[DROPPED, column]
        cursor = glob_i[RAND_CURSOR]
        serial = glob_i[NEXT_SERIAL]
        glob_i[NEXT_SERIAL] = serial + 1
        init_flow(
            flow_f,
            flow_i,
            bw_filter,
            column,
            CAMPUS,
            int(params[P_SHORT_CC]),
            SHORT,
            params[P_SHORT_RTT],
            params[P_SHORT_LINE],
            rand_size[cursor],
            now,
            params[P_DT],
            params[P_IW],
            serial,
            params[P_MSS],
            params[P_HYSTART] > 0.0,
        )
        _event(events, glob_i, now, serial, FLOW_START, 0.0, rand_size[cursor], column)
        glob_f[NEXT_ARRIVAL] += rand_gap[cursor]
        glob_i[RAND_CURSOR] = cursor + 1
        started += 1
    return started


@compiled
def advance(
    flow_f: FloatArray,
    flow_i: IntArray,
    glob_f: FloatArray,
    glob_i: IntArray,
    params: FloatArray,
    bw_filter: FloatArray,
    ack_bytes: FloatArray,
    ack_delay: FloatArray,
    bn_slots: FloatArray,
    bn_step: IntArray,
    bn_total: FloatArray,
    bn_cursor: IntArray,
    sh_slots: FloatArray,
    sh_step: IntArray,
    sh_total: FloatArray,
    sh_cursor: IntArray,
    rand_gap: FloatArray,
    rand_size: FloatArray,
    step_out: FloatArray,
    out_offset: int,
    events: FloatArray,
    scratch: FloatArray,
    groups: FloatArray,
    n_steps: int,
) -> int:
    """Advance ``n_steps``; returns the number of steps done (see the module docstring)."""
    n_flows = flow_f.shape[1]
    n_groups = groups.shape[1]
    ring = ack_bytes.shape[0]
    dt = params[P_DT]
    capacity_step = params[P_CAPACITY] * dt
    buffer_bytes = params[P_BUFFER]
    mss = params[P_MSS]
    per_mss = 1.0 / mss
    n_campus = int(params[P_N_CAMPUS])
    shorts_on = params[P_SHORTS_ON] > 0.0
    c_th = params[P_C_TH]
    t_th = params[P_T_TH]
    idle = params[P_IDLE]
    payload = params[P_PAYLOAD]
    min_tso = params[P_MIN_TSO] * mss
    prr_on = params[P_PRR] > 0.0
    bbr_recovery = params[P_BBR_RECOVERY] > 0.0
    paced_weight = params[P_PACED_DROP_WEIGHT]
    smoothing = min(dt / _PROBE_LOSS_WINDOW_S, 1.0)
    event_room = events.shape[1] - 3 * n_flows - 8
    send = scratch[0]
    arrive = scratch[1]
    departed = scratch[2]
    sojourn_w = scratch[3]
    shaper_sojourn_w = scratch[4]  # per-flow weights fifo_pop needs; only the total is used
    cumulative = scratch[5]
    pacing = scratch[6]
    rtt_sample = scratch[7]
    acked_now = scratch[8]
    flags = scratch[9]  # per-flow marks of the branch-free passes for the rare scalar work

    for s in range(n_steps):
        if glob_i[N_EVENTS] > event_room:
            return s
        if shorts_on and glob_i[RAND_CURSOR] >= rand_gap.shape[0]:
            return s
        step = glob_i[STEP]
        now = step * dt
        slot = step % ring
        running = 0

        # 1. short-flow arrivals (a new flow sends in this step)
        if shorts_on:
            running += _start_short_flows(
                flow_f,
                flow_i,
                glob_f,
                glob_i,
                params,
                bw_filter,
                rand_gap,
                rand_size,
                events,
                now,
            )

        # 2. per flow: ACKs, window growth, loss detection, completion, send. The common
        # work runs as branch-free passes over every column (numba/LLVM vectorise them);
        # only the rare or per-algorithm work runs in the scalar pass 2c. Finished and free
        # columns have nothing left to acknowledge, so the passes read zeros there.
        # 2a. ACK accounting, per class (one shared delay each)
        _account_acks(
            flow_f, ack_bytes, slot, 0, n_campus, ack_delay[slot, ACK_CAMPUS],
            ack_delay[slot, ACK_SHAPER_DELAY], now, rtt_sample, acked_now,
        )  # fmt: skip
        for g in range(n_groups):
            _account_acks(
                flow_f, ack_bytes, slot, int(groups[G_FIRST, g]), int(groups[G_END, g]),
                ack_delay[slot, ACK_GROUP0 + g], 0.0, now, rtt_sample, acked_now,
            )  # fmt: skip
        grow_windows(flow_f, flow_i, acked_now, now, per_mss, n_flows, flags)

        # 2b. which running flows have rare work now (branch-free, vectorised): a backoff
        # to clear, a loss to detect, HyStart, completion, BBR; the others only count.
        # Most steps mark none, and then 2c does not scan.
        marked = 0
        for i in range(n_flows):
            pacing[i] = np.inf
            live = flow_i[RUNNING, i] != 0
            acked = acked_now[i] > 0.0
            rare = (
                ((flow_i[BACKOFF, i] > 0) & acked)
                | ((flow_f[LOST_PENDING, i] > 0.0) & (now >= flow_f[LOSS_AT, i]))
                | ((flow_i[HS_FOUND, i] == 0) & acked)
                | (flow_f[ACKED, i] >= flow_f[SIZE, i] - _DONE_TOLERANCE_BYTES)
                | (flow_i[CC, i] >= BBR)
            )
            flags[i] = 1.0 if live & rare else 0.0
            running += 1 if live & (not rare) else 0
            marked += 1 if live & rare else 0
        for i in range(n_flows if marked > 0 else 0):  # 2c. the marked flows (scalar)
            if flags[i] == 0.0:
                continue
            if flow_i[BACKOFF, i] > 0 and acked_now[i] > 0.0:
                flow_i[BACKOFF, i] = 0  # new data acknowledged: the timeouts' backoff is over
            if (
                flow_f[LOST_PENDING, i] > 0.0
                and now >= flow_f[LOSS_AT, i]
                and flow_i[TAIL_PROBED, i] == 0
                and flow_f[INFLIGHT, i] - flow_f[LOST_PENDING, i] < mss
            ):
                # Nothing sent after the loss is in flight: no SACK arrives to show it, and
                # the sender learns of it only from its tail-loss probe, two SRTTs after its
                # last send (RACK-TLP, RFC 8985 §7.2): one more SRTT of silence. A lost
                # probe (or, after a timeout, a lost retransmission: no probe in the Loss
                # state) leaves it to the retransmission timer, counted from the head's send.
                srtt = max(flow_f[SRTT, i], flow_f[BASE_RTT, i])
                if flow_i[BACKOFF, i] > 0 or _uniform(glob_i) < _probe_loss(
                    glob_f, flow_i[CLASS, i]
                ):
                    flow_i[TAIL_PROBED, i] = 2
                    flow_f[LOSS_AT, i] = now - srtt + timeout_after(flow_f, flow_i, i)
                else:
                    flow_i[TAIL_PROBED, i] = 1
                    flow_f[LOSS_AT, i] = now + srtt
            if flow_f[LOST_PENDING, i] > 0.0 and now >= flow_f[LOSS_AT, i]:
                timed_out = flow_i[TAIL_PROBED, i] == 2
                flow_i[TAIL_PROBED, i] = 0
                lost = flow_f[LOST_PENDING, i]
                flow_f[LOST_PENDING, i] = 0.0
                flow_f[INFLIGHT, i] -= lost
                flow_f[REMAINING, i] += lost
                settle_resent(flow_f, glob_f, i, i < n_campus)
                flow_f[RESEND_OWED, i] += lost
                flow_f[ROUND_LOST, i] += lost
                if timed_out:
                    on_timeout(flow_f, flow_i, i, now)
                elif bbr_recovery and flow_i[CC, i] >= BBR:
                    bbr_on_loss(flow_f, flow_i, i, now, lost)
                else:
                    on_loss(flow_f, flow_i, i, now)
            if flow_i[HS_FOUND, i] == 0 and acked_now[i] > 0.0:
                hystart_update(flow_f, flow_i, i, now, acked_now[i], rtt_sample[i], mss)
            if flow_f[ACKED, i] >= flow_f[SIZE, i] - _DONE_TOLERANCE_BYTES and (
                i < n_campus or groups[G_POOL, flow_i[GROUP, i]] <= 0.0
            ):
                flow_i[RUNNING, i] = 0
                fct = now - flow_f[START_T, i]
                _event(events, glob_i, now, flow_i[SERIAL, i], FLOW_DONE, fct, flow_f[SIZE, i], i)
                if flow_i[TAP_ACTIVE, i] == 1:
                    flow_i[TAP_ACTIVE, i] = 0
                    _event(events, glob_i, now, flow_i[SERIAL, i], TAP_STOP_FIN, 0.0, 0.0, i)
                continue
            running += 1
            if flow_i[CC, i] >= BBR:
                pacing[i] = bbr_step(
                    flow_f, flow_i, bw_filter, i, now, acked_now[i], rtt_sample[i], mss,
                    bbr_recovery,
                )  # fmt: skip

        if prr_on:
            _reduce_in_recovery(flow_f, pacing, n_flows, now, acked_now, mss)
        for g in range(n_groups):
            if groups[G_POOL, g] > 0.0:
                _draw_from_pool(flow_f, flow_i, groups, g, mss)
        for i in range(n_flows):  # 2d. what each flow may send (window, NIC, pacing, TSO)
            cwnd_bytes = flow_f[CWND, i] * mss
            window = cwnd_bytes - flow_f[INFLIGHT, i]
            amount = lesser(lesser(window, flow_f[LINE_BYTES, i]), flow_f[REMAINING, i])
            rate = pacing[i]
            paced = rate < np.inf
            credit_before = flow_f[PACING_CREDIT, i]  # loaded outside the select (congestion.kept)
            budget = credit_before + rate * dt if paced else np.inf
            amount = lesser(amount, budget)
            credit = lesser(budget - greater(amount, 0.0), rate * dt)
            flow_f[PACING_CREDIT, i] = credit if paced else 0.0
            amount = amount if (flow_i[RUNNING, i] == 1) & (amount > 0.0) else 0.0
            # the window was what held it back (not the NIC / application or pacing); in slow
            # start also while half the window is in flight, so slow start doubles the window
            # even when the NIC, not the window, paced the last burst (Linux
            # tcp_is_cwnd_limited: cwnd < 2 * max_packets_out)
            window_limited = amount >= window - 1e-9
            slow_start_limited = (cwnd_bytes < 2.0 * (flow_f[INFLIGHT, i] + amount)) & (
                flow_f[CWND, i] < flow_f[SSTHRESH, i]
            )
            flow_f[CWND_LIMITED, i] = 1.0 if window_limited | slow_start_limited else 0.0
            # A window-limited sender holds back a burst smaller than both the minimum TSO
            # burst and a third of its window (Linux tcp_tso_should_defer); BBR paces, and a
            # sender in PRR recovery does not defer (its "pacing" is _UNDEFERRED).
            small = amount < lesser(min_tso, cwnd_bytes * (1.0 / 3.0))
            more = flow_f[REMAINING, i] > amount + 1e-9
            send[i] = 0.0 if small & window_limited & more & (not paced) else amount
        for g in range(n_groups):
            if groups[G_RATE_LIMIT, g] < np.inf:
                _cap_dtn(flow_f, groups, g, payload, send, dt)
        for i in range(n_flows):  # 2e. send (what was declared lost goes first)
            amount = send[i]
            flow_f[INFLIGHT, i] += amount
            flow_f[SENT, i] += amount
            flow_f[REMAINING, i] -= amount
            departed[i] = 0.0
            sojourn_w[i] = 0.0
        if prr_on:
            for i in range(n_flows):
                flow_f[PRR_OUT, i] += send[i]
        offered = 0.0
        for i in range(n_campus):
            offered += send[i]

        # 3. campus shaper: drop-tail queue + token bucket at u(t)
        tokens = glob_f[TOKENS] + glob_f[CAMPUS_RATE_LIMIT] * payload * dt
        shaper_drops = 0.0
        shaper_w_sum = 0.0
        if glob_f[SHAPER_QUEUE] <= 0.0 and offered <= tokens:
            # Nothing waits and the bucket covers the step: the shaper is transparent.
            for i in range(n_campus):
                arrive[i] = send[i]
            released = offered
        else:
            for i in range(n_campus):
                arrive[i] = 0.0
            space = params[P_SHAPER_LIMIT] - glob_f[SHAPER_QUEUE]
            if offered > space:
                shaper_drops, _ = _tail_drop(
                    flow_f, flow_i, glob_i, send, cumulative, n_campus,
                    offered - max(space, 0.0), mss, min_tso, now, paced_weight,
                )  # fmt: skip
                offered -= shaper_drops
            fifo_push(sh_slots, sh_step, sh_total, sh_cursor, send, offered, n_campus, step)
            glob_f[SHAPER_QUEUE] += offered
            released, shaper_w_sum = fifo_pop(
                sh_slots,
                sh_step,
                sh_total,
                sh_cursor,
                min(tokens, glob_f[SHAPER_QUEUE]),
                n_campus,
                step,
                dt,
                arrive,
                shaper_sojourn_w,
            )
            glob_f[SHAPER_QUEUE] = max(glob_f[SHAPER_QUEUE] - released, 0.0)
        glob_f[TOKENS] = min(params[P_BURST], tokens - released)
        glob_f[SHAPER_DROPPED] += shaper_drops
        glob_f[SHAPER_DROPS_EWMA] += smoothing * (shaper_drops - glob_f[SHAPER_DROPS_EWMA])
        glob_f[SHAPER_ARRIVALS_EWMA] += smoothing * (
            offered + shaper_drops - glob_f[SHAPER_ARRIVALS_EWMA]
        )

        # 5. the tap (counters, the activity rule) and the bottleneck's drop-tail admission
        for i in range(n_campus, n_flows):
            arrive[i] = send[i]
        tap_campus, active_campus = _tap(
            flow_f, flow_i, glob_i, events, arrive, 0, n_campus, now, per_mss, t_th, c_th, idle
        )
        tap_dtn = 0.0
        active_dtn = 0
        for g in range(n_groups):
            seen, active = _tap(
                flow_f, flow_i, glob_i, events, arrive, int(groups[G_FIRST, g]),
                int(groups[G_END, g]), now, per_mss, t_th, c_th, idle,
            )  # fmt: skip
            groups[G_TAP_BYTES, g] += seen
            tap_dtn += seen
            active_dtn += active
        tap_active = active_campus + active_dtn
        arriving = tap_campus + tap_dtn
        glob_f[TAP_BYTES_DTN] += tap_dtn
        glob_f[TAP_BYTES_CAMPUS] += tap_campus
        glob_f[TAP_PACKETS_DTN] += tap_dtn * per_mss
        glob_f[TAP_PACKETS_CAMPUS] += tap_campus * per_mss

        drop_dtn = 0.0
        drop_campus = 0.0
        space = buffer_bytes + capacity_step - glob_f[QUEUE]
        if arriving > space:
            drop_campus, drop_dtn = _tail_drop(
                flow_f, flow_i, glob_i, arrive, cumulative, n_flows,
                arriving - max(space, 0.0), mss, min_tso, now, paced_weight,
            )  # fmt: skip
            arriving -= drop_dtn + drop_campus
        glob_f[BOTTLENECK_DROPPED] += drop_dtn + drop_campus
        glob_f[DROPS_EWMA] += smoothing * (drop_dtn + drop_campus - glob_f[DROPS_EWMA])
        glob_f[ARRIVALS_EWMA] += smoothing * (tap_campus + tap_dtn - glob_f[ARRIVALS_EWMA])
        fifo_push(bn_slots, bn_step, bn_total, bn_cursor, arrive, arriving, n_flows, step)
        glob_f[QUEUE] += arriving
        served, _ = fifo_pop(
            bn_slots,
            bn_step,
            bn_total,
            bn_cursor,
            capacity_step,
            n_flows,
            step,
            dt,
            departed,
            sojourn_w,
        )
        glob_f[QUEUE] = max(glob_f[QUEUE] - served, 0.0)

        # 6. departures: ACKs one base RTT later, queuing-delay samples. Every campus flow
        # shares the campus base RTT and every DTN stream the DTN's, so each class writes
        # one row of the ACK ring.
        shaper_delay = shaper_w_sum / released if released > 0.0 else 0.0
        dep_campus, qd_campus_w = _schedule_acks(
            flow_i, ack_bytes, ack_delay, departed, sojourn_w, slot, 0, n_campus, ACK_CAMPUS,
            shaper_delay,
        )  # fmt: skip
        dep_dtn = 0.0
        qd_dtn_w = 0.0
        for g in range(n_groups):
            dep_g, qd_g_w = _schedule_acks(
                flow_i, ack_bytes, ack_delay, departed, sojourn_w, slot,
                int(groups[G_FIRST, g]), int(groups[G_END, g]), ACK_GROUP0 + g, 0.0,
            )  # fmt: skip
            if dep_g > 0.0:
                groups[G_QD_LAST, g] = qd_g_w / dep_g
                groups[G_DEPARTED, g] += dep_g
                groups[G_SOJOURN_W, g] += qd_g_w
            dep_dtn += dep_g
            qd_dtn_w += qd_g_w
        if dep_dtn > 0.0:
            glob_f[QD_DTN_LAST] = qd_dtn_w / dep_dtn
        if dep_campus > 0.0:
            glob_f[QD_CAMPUS_LAST] = qd_campus_w / dep_campus

        col = out_offset + s
        step_out[OUT_DEP_DTN, col] = dep_dtn
        step_out[OUT_DEP_CAMPUS, col] = dep_campus
        step_out[OUT_ARR_DTN, col] = tap_dtn
        step_out[OUT_ARR_CAMPUS, col] = tap_campus
        step_out[OUT_DROP_DTN, col] = drop_dtn
        step_out[OUT_DROP_CAMPUS, col] = drop_campus
        step_out[OUT_DROP_SHAPER, col] = shaper_drops
        step_out[OUT_QUEUE, col] = glob_f[QUEUE]
        step_out[OUT_SHAPER_QUEUE, col] = glob_f[SHAPER_QUEUE]
        step_out[OUT_QD_DTN_W, col] = qd_dtn_w
        step_out[OUT_QD_CAMPUS_W, col] = qd_campus_w
        step_out[OUT_RUNNING, col] = running
        step_out[OUT_TAP_ACTIVE, col] = tap_active
        step_out[OUT_RATE_LIMIT, col] = glob_f[CAMPUS_RATE_LIMIT]
        step_out[OUT_SHAPER_W, col] = shaper_w_sum
        step_out[OUT_SHAPED, col] = released
        step_out[OUT_DTN_RATE_LIMIT, col] = groups[G_RATE_LIMIT, 0]
        glob_i[STEP] = step + 1
    return n_steps
