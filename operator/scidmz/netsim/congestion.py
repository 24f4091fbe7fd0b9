"""Congestion-control models, compiled with numba and applied per flow per step.

Windows are in segments (as in the RFCs), byte counts in bytes, times in seconds. The state
is one column per flow of the arrays in ``layout``: ``grow_windows`` sweeps every column in
one pass, the other functions handle one column ``i``.

Sources and simplifications:

* **Reno** — RFC 5681: slow start (cwnd += acked), congestion avoidance (cwnd += 1 per window),
  halving on loss; one reduction per round trip (NewReno-style recovery, RFC 6582). Windows
  grow fluidly but a reduction lands on whole segments, as Linux's integer arithmetic does
  (``reduced_window``).
* **Cubic** — RFC 9438 as Linux ``tcp_cubic.c`` implements it: C = 0.4, β = 0.7, fast
  convergence (§4.7), the Reno-friendly region with α = 3(1−β)/(1+β) throughout (RFC 9438
  §4.3 raises α to 1 once W_est passes W_max; Linux does not, and with it the 10 ms class
  took more from 100 ms flows than on real TCP), the target W_cubic(t + RTT) clamped to
  [cwnd, 1.5·cwnd] (§4.4) with the path's minimum RTT for RTT, as Linux's ``delay_min``.
  Optionally HyStart as Linux runs it by default (``hystart=1``, ``hystart_detect=3``;
  scenario ``cubic_hystart``, see ``hystart_update``): slow start can end without a loss,
  with tcp_cubic's bookkeeping around it (``last_max_cwnd`` apart from the epoch's origin,
  growth of at least 5 % a round before the first loss, both reset by a timeout). Off by
  default: against the lab it helps the matrix a little and the ns-3 dumbbell not at all
  (docs/design/netsim-calibration.md, "Tried and dropped"), and the shipped models were identified
  without it.
* **Loss recovery of Reno and Cubic** — one window reduction per round trip; in recovery
  the sender may send its new window less what is in flight, at once. Optionally as Linux
  sends in recovery (scenario ``proportional_rate_reduction``; ``prr_window``, RFC 6937,
  Linux ``tcp_cwnd_reduction``): in proportion to what is acknowledged, without TSO deferral,
  the window ssthresh when recovery ends. Off by default: against the lab it changes the
  matrix within its seeds' noise and moves the dumbbell's DTN closer to Linux early and
  further from it later (docs/design/netsim-calibration.md, "Tried and dropped").
* **BBR v1** — draft-cardwell-iccrg-bbr-congestion-control-00 and Linux ``tcp_bbr.c``:
  startup (gain 2/ln 2), drain, the 8-phase probe-bw gain cycle [1.25, 0.75, 1 × 6] starting at
  a per-flow pseudo-random phase, probe-rtt (cwnd 4 for 200 ms + one round after min_rtt is
  10 s old); bandwidth max-filtered over 10 rounds, RTT min-filtered over 10 s; cwnd =
  2·BDP + 3 segments + the ACK-aggregation allowance (Linux ≥ 4.20's ``extra_acked``: data
  acknowledged beyond bw × time in an epoch, max over two 5-round windows, at most 100 ms at
  bw; see ``_update_ack_aggregation``). Delivery-rate samples over the trailing round every
  1/8 round, where Linux takes one per ACK. It paces 1 % under gain × estimate (Linux's
  ``bbr_pacing_margin_percent``). By default BBR's window ignores losses; the
  scenario's ``bbr_loss_recovery`` sets it in recovery as Linux's
  ``bbr_set_cwnd_to_recover_or_restore`` does (``bbr_on_loss``, ``_bbr_recovery_window``),
  which, against the lab, takes the twin's BBR DTN well below real BBR's rate and losses
  (bench/results/netsim_vs_lab_bbr_recovery.md), so it is off.
* **BBRv2-like** — BBR v1 plus the v2 loss response: a round that loses more than 2 % of its
  data caps inflight at ``inflight_hi = 0.7 · cwnd`` (and ends startup); while probing up
  without excess loss the cap grows by 1, 2, 4, … segments per round; the probe-down gain is
  0.9 rather than 0.75. It is *not* Google's BBRv2 (no bw_lo, no ECN, no 2–3 s probe timer).

Loss (``kernel``): drop-tail queues drop whole TSO/GSO bursts (Linux ``tcp_tso_autosize``:
~1 ms at the pacing rate, at least ``tcp_min_tso_segs``), so a congested flow loses a train of
segments for one window reduction. A loss is detected one smoothed RTT after the drop
(SACK/RACK), with any drops of the flow in between. A loss with nothing sent after it has no
SACK to reveal it and waits for the tail-loss probe, one more SRTT (RFC 8985 §7).
The probe is one segment and meets the queues as any other: it is lost with the bottleneck's
recent drop fraction (and the shaper's, for the campus). Then the retransmission timer fires
(``on_timeout``): RTO = SRTT + 200 ms (Linux ``__tcp_set_rto``: srtt + rttvar, rttvar at
least ``TCP_RTO_MIN``), counted from the lost head's send as ``tcp_rearm_rto`` does, doubling
for every further timeout until data is acknowledged again (``icsk_backoff``; no probe in
between, as Linux sends none in the Loss state), at most 120 s. A loss-based sender restarts
from a window of one segment (``tcp_enter_loss``); BBR's window stays its model's. This is
what starves small-window campus flows beside a BBR DTN on real TCP: in the lab's
``bbr-100-fixed`` 15 % of campus cwnd samples sit at 1–2 segments (0.2 % in the twin
without timeouts).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from scidmz.contract.compiled import compiled, compiled_inline
from scidmz.netsim.layout import (
    ACK_EPOCH_ACKED,
    ACK_EPOCH_T,
    ACKED,
    BACKOFF,
    BASE_RTT,
    BBR,
    BBR2,
    BBR_RECOVERING,
    BTL_BW,
    CC,
    CONSERVE_UNTIL,
    CUBIC,
    CUBIC_K,
    CWND,
    CWND_LIMITED,
    CYCLE_IDX,
    CYCLE_T,
    DRAIN,
    EPOCH_T,
    EXTRA_ACKED0,
    EXTRA_ACKED_IDX,
    EXTRA_ACKED_ROUNDS,
    FILLED_PIPE,
    FULL_BW,
    FULL_BW_COUNT,
    HS_CURR_RTT,
    HS_END,
    HS_FOUND,
    HS_LAST_ACK,
    HS_ROUND_T,
    HS_SAMPLES,
    INFLIGHT,
    INFLIGHT_HI,
    LAST_MAX,
    LOST_NOW,
    MIN_RTT,
    MIN_RTT_AT,
    MODE,
    PRIOR_CWND,
    PROBE_BW,
    PROBE_RTT,
    PROBE_RTT_DONE,
    PROBE_UP_SEGS,
    PRR_DELIVERED,
    PRR_OUT,
    PRR_PRIOR,
    RATE_Q,
    RATE_Q0,
    RATE_T0,
    RECOVERY_UNTIL,
    RENO,
    ROUND_ACKED,
    ROUND_COUNT,
    ROUND_LOST,
    ROUND_T,
    SENT,
    SERIAL,
    SRTT,
    SSTHRESH,
    STARTUP,
    W_EST,
    W_MAX,
)

FloatRows = npt.NDArray[np.float64]
IntRows = npt.NDArray[np.int64]

CUBIC_C = 0.4
CUBIC_BETA = 0.7
CUBIC_ALPHA = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
HYSTART_OFF = 2
"""``HS_FOUND`` of a flow HyStart does not apply to (not Cubic, or turned off)."""
CUBIC_FIRST_GROWTH = 1.0 / 20.0
"""Segments of growth per segment acknowledged at least, before the first loss (Linux
``bictcp_update``: ``if (ca->last_max_cwnd == 0 && ca->cnt > 20) ca->cnt = 20``)."""
MIN_CWND = 2.0
RTO_MIN_S = 0.2  # Linux TCP_RTO_MIN
RTO_MAX_S = 120.0  # Linux TCP_RTO_MAX
MAX_BACKOFF = 15
BBR_HIGH_GAIN = 2.0 / math.log(2.0)
BBR_MIN_CWND = 4.0
BBR_PACING_MARGIN = 0.99
"""Linux paces 1 % under gain x estimate (``bbr_pacing_margin_percent``, since 4.20)."""
BBR_BW_ROUNDS = 10
BBR_MIN_RTT_WINDOW_S = 10.0
BBR_PROBE_RTT_S = 0.2
BBR_FULL_BW_GROWTH = 1.25
BBR_FULL_BW_ROUNDS = 3
BBR_CYCLE_LEN = 8
BBR2_LOSS_THRESHOLD = 0.02
BBR2_BETA = 0.7
BBR2_PROBE_DOWN_GAIN = 0.9
BBR_PROBE_DOWN_GAIN = 0.75
BBR_EXTRA_ACKED_GAIN = 1.0
"""Linux ``bbr_extra_acked_gain`` (256 in BBR_UNIT): the whole aggregation estimate."""
BBR_EXTRA_ACKED_WIN_ROUNDS = 5
"""Linux ``bbr_extra_acked_win_rtts``: the estimate is the max over two 5-round windows."""
BBR_EXTRA_ACKED_MAX_S = 0.100
"""Linux ``bbr_extra_acked_max_us``: aggregation adds at most 100 ms at the estimated rate."""
BBR_ACK_EPOCH_RESET_SEGS = float(1 << 20)
"""Linux ``bbr_ack_epoch_acked_reset_thresh``, in segments."""
RATE_PARTS = 8
"""BBR's sliding delivery-rate window: a sample every 1/RATE_PARTS of a round."""


@compiled_inline
def lesser(a: float, b: float) -> float:
    """``min(a, b)`` as a select, by Python's rule (``a`` unless ``b < a``). numba's
    builtin ``min`` compiles to a call, and a loop with a call is not vectorised."""
    return b if b < a else a


@compiled_inline
def greater(a: float, b: float) -> float:
    """``max(a, b)`` as a select (Python's rule: ``a`` unless ``b > a``)."""
    return b if b > a else a


@compiled_inline
def kept(value: float) -> float:
    """``value`` as the "keep what was there" side of a select in a per-flow pass.

    ``row[i] = new if condition else row[i]`` compiles to a conditional store: LLVM then
    either leaves the loop scalar (the load inside the else branch defeats its alias checks)
    or vectorises it with masked stores (``vmaskmovpd``), which cost this machine's AMD cores
    ~10 cycles each. Adding 0.0 is exact for every value except −0.0 (which becomes +0.0; no
    time, rate or count here is −0.0), and LLVM may not drop it without fast-math, so the
    select stays a blend followed by a plain store (``hack/netsim_fingerprint.py``: output
    byte-identical; docs/design/netsim-speed.md for the figures).
    """
    return value + 0.0


@compiled_inline
def grow_windows(
    flow_f: FloatRows,
    flow_i: IntRows,
    acked: FloatRows,
    now: float,
    per_mss: float,
    n_flows: int,
    starts: FloatRows,
) -> None:
    """Reno and Cubic window growth for every flow acknowledged in this step.

    Slow start adds the acknowledged segments; Reno adds acked/cwnd (RFC 5681); Cubic moves
    towards W_cubic(t + RTT) clamped to [cwnd, 1.5 cwnd] and keeps the Reno-friendly W_est
    (RFC 9438 §4.2–4.4), both increments scaled by the window before this ACK. No growth in
    recovery, nor while something other than the window held the last send back (the NIC
    or application limit, the DTN cap: Linux's ``tcp_is_cwnd_limited``, RFC 7661) — except
    in slow start while half the window is in flight (``cwnd < 2 * max_packets_out``), so a
    flow whose NIC is no faster than the bottleneck still doubles its window a round; BBR
    sets its window in ``bbr_step``. An epoch start needs a cube root and is rare: a
    branch-free pass marks the flows that start one in ``starts`` (scratch, one per
    column; vectorised), a scalar pass starts them (its one branch is predictable: a loop
    that tested the conditions itself branched on "acknowledged in this step", which a
    flow sending in bursts is about half the time), and the growth is one branch-free
    pass (vectorised). Most steps start no epoch, and then the scalar pass does not scan.
    """
    started = 0
    for i in range(n_flows):
        start = (
            (acked[i] > 0.0)
            & (flow_i[CC, i] == CUBIC)
            & (flow_f[EPOCH_T, i] < 0.0)
            & (flow_f[CWND, i] >= flow_f[SSTHRESH, i])
            & (now >= flow_f[RECOVERY_UNTIL, i])
        )
        starts[i] = 1.0 if start else 0.0
        started += 1 if start else 0
    for i in range(n_flows if started > 0 else 0):
        if starts[i] != 0.0:
            cwnd = flow_f[CWND, i]
            flow_f[EPOCH_T, i] = now
            if cwnd < flow_f[W_MAX, i]:
                flow_f[CUBIC_K, i] = np.cbrt((flow_f[W_MAX, i] - cwnd) / CUBIC_C)
            else:
                flow_f[CUBIC_K, i] = 0.0
                flow_f[W_MAX, i] = cwnd
            flow_f[W_EST, i] = cwnd
    for i in range(n_flows):
        segs = acked[i] * per_mss
        cc = flow_i[CC, i]
        cwnd = flow_f[CWND, i]
        grow = (segs > 0.0) & (cc < BBR) & (now >= flow_f[RECOVERY_UNTIL, i])
        grow = grow & (flow_f[CWND_LIMITED, i] > 0.0)
        slow = cwnd < flow_f[SSTHRESH, i]
        per_cwnd = segs / cwnd
        reno = cwnd + per_cwnd
        elapsed = now - flow_f[EPOCH_T, i]
        k = flow_f[CUBIC_K, i]
        w_max = flow_f[W_MAX, i]
        offset = elapsed + flow_f[BASE_RTT, i] - k
        target = CUBIC_C * offset * offset * offset + w_max
        target = lesser(greater(target, cwnd), 1.5 * cwnd)
        cubic = cwnd + (target - cwnd) * per_cwnd
        # bictcp_update: before any loss (last_max_cwnd 0, e.g. after HyStart) at least 1
        # segment per 20 acknowledged, 5 % a round, where W_cubic's plateau would crawl
        cubic = (
            greater(cubic, cwnd + segs * CUBIC_FIRST_GROWTH)
            if flow_f[LAST_MAX, i] <= 0.0
            else cubic
        )
        w_est = flow_f[W_EST, i]
        new_w_est = w_est + CUBIC_ALPHA * per_cwnd
        now_offset = elapsed - k
        w_cubic = CUBIC_C * now_offset * now_offset * now_offset + w_max
        cubic = greater(cubic, new_w_est) if w_cubic < new_w_est else cubic
        is_cubic = cc == CUBIC
        avoided = cubic if is_cubic else reno
        grown = cwnd + segs if slow else avoided
        flow_f[CWND, i] = grown if grow else kept(cwnd)
        flow_f[W_EST, i] = new_w_est if grow & (not slow) & is_cubic else kept(w_est)


@compiled
def reduced_window(cwnd: float, beta: float) -> float:
    """The window after a multiplicative decrease, in whole segments as Linux computes it
    (``tcp_reno_ssthresh``: cwnd >> 1; ``bictcp_recalc_ssthresh``: cwnd · β / 1024 in
    integers), at least two. Between losses the twin's window grows fluidly; at the small
    windows beside a BBR DTN (3–5 segments) the rounding is 10–20 % of the window."""
    return float(max(math.floor(math.floor(cwnd) * beta), MIN_CWND))


@compiled
def on_loss(flow_f: FloatRows, flow_i: IntRows, i: int, now: float) -> None:
    """Multiplicative decrease, once per round trip (RFC 5681 §3.2, RFC 9438 §4.6–4.7)."""
    cc = flow_i[CC, i]
    if cc >= BBR:  # BBR v1 sets its window in bbr_step; see the module docstring
        return
    if now < flow_f[RECOVERY_UNTIL, i]:
        return
    flow_f[PRR_PRIOR, i] = flow_f[CWND, i]
    flow_f[PRR_DELIVERED, i] = 0.0
    flow_f[PRR_OUT, i] = 0.0
    cwnd = _ssthresh(flow_f, flow_i, i)
    flow_f[EPOCH_T, i] = -1.0
    flow_f[CWND, i] = cwnd
    flow_f[SSTHRESH, i] = cwnd
    flow_f[RECOVERY_UNTIL, i] = now + max(flow_f[SRTT, i], flow_f[BASE_RTT, i])


@compiled
def bbr_on_loss(flow_f: FloatRows, flow_i: IntRows, i: int, now: float, lost: float) -> None:
    """A BBR sender declares ``lost`` bytes lost (scenario ``bbr_loss_recovery``).

    The bytes come off the window at the next window update (Linux: ``rs->losses`` in
    ``bbr_set_cwnd_to_recover_or_restore``). A loss outside recovery starts one, lasting a
    round trip as the loss-based senders' does; entering it saves the window to restore at
    its end (Linux ``bbr_ssthresh`` -> ``bbr_save_cwnd``: the window as it is, unless
    recovery or probe-rtt has already cut it, then the larger of the two)."""
    flow_f[LOST_NOW, i] += lost
    if now < flow_f[RECOVERY_UNTIL, i]:
        return
    if flow_i[BBR_RECOVERING, i] == 0 and flow_i[MODE, i] != PROBE_RTT:
        flow_f[PRIOR_CWND, i] = flow_f[CWND, i]
    else:
        flow_f[PRIOR_CWND, i] = max(flow_f[PRIOR_CWND, i], flow_f[CWND, i])
    flow_f[RECOVERY_UNTIL, i] = now + max(flow_f[SRTT, i], flow_f[BASE_RTT, i])


@compiled
def _bbr_recovery_window(
    flow_f: FloatRows,
    flow_i: IntRows,
    i: int,
    now: float,
    cwnd: float,
    acked_segs: float,
    round_length: float,
    mss: float,
) -> tuple[float, bool]:
    """Linux ``bbr_set_cwnd_to_recover_or_restore`` for an update that acknowledged data:
    lost segments off the window; the first round of a recovery conserves packets (the
    window is what is in flight + what this update acknowledged, at least; Linux restarts
    its round count there, so conservation lasts one round); leaving recovery restores the
    saved window. Returns the window and whether packet conservation decides it alone."""
    losses = flow_f[LOST_NOW, i] / mss
    flow_f[LOST_NOW, i] = 0.0
    if losses > 0.0:
        cwnd = max(cwnd - losses, 1.0)
    recovering = now < flow_f[RECOVERY_UNTIL, i]
    was_recovering = flow_i[BBR_RECOVERING, i] == 1
    conserving_floor = flow_f[INFLIGHT, i] / mss + acked_segs
    if recovering and not was_recovering:
        flow_f[CONSERVE_UNTIL, i] = now + round_length
        cwnd = conserving_floor
    elif was_recovering and not recovering:
        cwnd = max(cwnd, flow_f[PRIOR_CWND, i])
        flow_f[CONSERVE_UNTIL, i] = 0.0
    flow_i[BBR_RECOVERING, i] = 1 if recovering else 0
    if now < flow_f[CONSERVE_UNTIL, i]:
        return max(cwnd, conserving_floor), True
    return cwnd, False


@compiled
def _ssthresh(flow_f: FloatRows, flow_i: IntRows, i: int) -> float:
    """A loss-based sender's window after a decrease (Linux ``tcp_reno_ssthresh``,
    ``bictcp_recalc_ssthresh``); Cubic also remembers W_max, with fast convergence.

    With HyStart (``cubic_hystart``) fast convergence compares with the window at the last
    loss (Linux's ``last_max_cwnd``); without it, with W_max as the epoch start may have
    raised it (the twin the shipped models were trained on)."""
    cwnd = flow_f[CWND, i]
    if flow_i[CC, i] == RENO:
        return reduced_window(cwnd, 0.5)
    linux = flow_i[HS_FOUND, i] != HYSTART_OFF
    fast = cwnd < (flow_f[LAST_MAX, i] if linux else flow_f[W_MAX, i])
    flow_f[W_MAX, i] = cwnd * (1.0 + CUBIC_BETA) / 2.0 if fast else cwnd
    flow_f[LAST_MAX, i] = flow_f[W_MAX, i]
    return reduced_window(cwnd, CUBIC_BETA)


@compiled_inline
def prr_window(flow_f: FloatRows, i: int, acked: float, mss: float) -> float:
    """What flow ``i`` may send in this step of its loss recovery, in bytes: Linux
    ``tcp_cwnd_reduction`` (PRR, RFC 6937), which sets cwnd to what is in flight + this.
    While more than ssthresh is in flight, ssthresh / prior window per byte acknowledged
    since recovery began (less what was sent since); once no more is, up to ssthresh, but no
    more than was acknowledged (this step's ACKs at least) + 1 segment (PRR-SSRB). So a
    sender that lost much does not refill its window in one burst into the queue that just
    dropped it: it grows back with its ACKs, and after recovery its window is ssthresh."""
    delivered = flow_f[PRR_DELIVERED, i] + acked
    flow_f[PRR_DELIVERED, i] = delivered
    sent = flow_f[PRR_OUT, i]
    pipe = flow_f[INFLIGHT, i]
    ssthresh = flow_f[SSTHRESH, i] * mss
    proportional = delivered * flow_f[SSTHRESH, i] / flow_f[PRR_PRIOR, i] - sent
    bounded = lesser(ssthresh - pipe, greater(delivered - sent, acked) + mss)
    allowed = proportional if pipe > ssthresh else bounded
    # Linux sends at least one segment on the recovery's first ACK (the fast retransmit)
    return greater(allowed, 0.0 if sent > 0.0 else mss)


@compiled
def on_timeout(flow_f: FloatRows, flow_i: IntRows, i: int, now: float) -> None:
    """A retransmission timeout (RFC 6298 §5, Linux ``tcp_enter_loss``): ssthresh from the
    window in force (not again on a repeated timeout), the window back to one segment, and
    the next timeout twice as long."""
    first = flow_i[BACKOFF, i] == 0
    flow_i[BACKOFF, i] = min(flow_i[BACKOFF, i] + 1, MAX_BACKOFF)
    if flow_i[CC, i] >= BBR:
        return
    if first:
        flow_f[SSTHRESH, i] = _ssthresh(flow_f, flow_i, i)
    if flow_i[HS_FOUND, i] != HYSTART_OFF:
        # cubictcp_state(TCP_CA_Loss): bictcp_reset (the next epoch starts from the window
        # then, and grows >= 5 % a round until a loss) and HyStart again
        flow_i[HS_FOUND, i] = 0
        flow_f[HS_END, i] = -1.0
        flow_f[LAST_MAX, i] = 0.0
        flow_f[W_MAX, i] = 0.0
    flow_f[CWND, i] = 1.0
    flow_f[PRR_PRIOR, i] = 0.0  # the Loss state: slow start from one segment, no PRR
    flow_f[EPOCH_T, i] = -1.0
    flow_f[RECOVERY_UNTIL, i] = now + max(flow_f[SRTT, i], flow_f[BASE_RTT, i])


@compiled
def timeout_after(flow_f: FloatRows, flow_i: IntRows, i: int) -> float:
    """Seconds from a lost head's send to its retransmission timeout, with backoff."""
    srtt = max(flow_f[SRTT, i], flow_f[BASE_RTT, i])
    return float(min((srtt + RTO_MIN_S) * 2.0 ** flow_i[BACKOFF, i], RTO_MAX_S))


HYSTART_LOW_WINDOW = 16.0
"""Segments below which HyStart does not judge (tcp_cubic ``hystart_low_window``)."""
HYSTART_ACK_DELTA_S = 0.002
"""ACKs at most this far apart continue an ACK train (``hystart_ack_delta_us``)."""
HYSTART_ACK_DELAY_S = 0.001
"""``hystart_ack_delay``: min(1 ms, 4 GSO_MAX_SIZE / pacing rate), 1 ms below ~2 Gb/s."""
HYSTART_MIN_SAMPLES = 8
"""ACKs a round's minimum RTT needs before the delay test judges it."""
HYSTART_DELAY_MIN_S = 0.004
HYSTART_DELAY_MAX_S = 0.016
"""The delay test's margin over the minimum RTT: min RTT / 8, clamped to 4–16 ms."""


@compiled
def hystart_update(
    flow_f: FloatRows,
    flow_i: IntRows,
    i: int,
    now: float,
    acked: float,
    rtt_sample: float,
    mss: float,
) -> None:
    """Cubic's HyStart for the ACKs flow ``i`` received in this step (Linux tcp_cubic.c
    ``hystart_update``, called from ``bictcp_acked``).

    A round runs until the ACKs pass what was sent when it began. **ACK train:** ACKs
    arriving at most 2 ms apart from the round's first one form a train; a train longer than
    half the minimum RTT (+ 1 ms) means the window already fills the pipe. **Delay:** once
    the round has 8 ACKs, a round minimum RTT more than min RTT / 8 (4–16 ms) above the
    flow's minimum means a queue is building. Either ends slow start without a loss:
    ssthresh = cwnd. Only above 16 segments, in slow start, until it has fired once (again
    after a retransmission timeout, as ``cubictcp_state`` resets it). One step's ACKs share
    one RTT sample; the receiver acknowledges every second segment (delayed ACKs).
    Runs after this step's window growth, where Linux runs it just before: at most one step
    of slow start apart. Against Linux with and without HyStart on the ns-3 dumbbell it
    lowers the DTN's early share as Linux's does (−16 % against −15 %);
    docs/design/netsim-calibration.md ("Tried and dropped") says why it is still off by
    default.
    """
    flow_f[MIN_RTT, i] = min(flow_f[MIN_RTT, i], rtt_sample)  # Cubic's delay_min
    cwnd = flow_f[CWND, i]
    if cwnd >= flow_f[SSTHRESH, i] or cwnd < HYSTART_LOW_WINDOW:
        return
    if flow_f[ACKED, i] > flow_f[HS_END, i]:  # bictcp_hystart_reset: a new round
        flow_f[HS_ROUND_T, i] = now
        flow_f[HS_LAST_ACK, i] = now
        flow_f[HS_END, i] = flow_f[SENT, i]
        flow_f[HS_CURR_RTT, i] = np.inf
        flow_f[HS_SAMPLES, i] = 0.0
    delay_min = flow_f[MIN_RTT, i]
    found = False
    if now - flow_f[HS_LAST_ACK, i] <= HYSTART_ACK_DELTA_S + 1e-9:
        flow_f[HS_LAST_ACK, i] = now
        found = now - flow_f[HS_ROUND_T, i] > (delay_min + HYSTART_ACK_DELAY_S) * 0.5
    flow_f[HS_CURR_RTT, i] = min(flow_f[HS_CURR_RTT, i], rtt_sample)
    samples = flow_f[HS_SAMPLES, i]
    flow_f[HS_SAMPLES, i] = samples + max(math.ceil(acked / mss * 0.5), 1.0)
    if flow_f[HS_SAMPLES, i] > HYSTART_MIN_SAMPLES:
        margin = min(max(delay_min * 0.125, HYSTART_DELAY_MIN_S), HYSTART_DELAY_MAX_S)
        found = found or flow_f[HS_CURR_RTT, i] > delay_min + margin
    if found:
        flow_i[HS_FOUND, i] = 1
        flow_f[SSTHRESH, i] = cwnd


@compiled
def _probe_bw_gain(phase: int, v2: bool) -> float:
    if phase == 0:
        return 1.25
    if phase == 1:
        return BBR2_PROBE_DOWN_GAIN if v2 else BBR_PROBE_DOWN_GAIN
    return 1.0


@compiled
def bbr_step(
    flow_f: FloatRows,
    flow_i: IntRows,
    bw_filter: FloatRows,
    i: int,
    now: float,
    acked: float,
    rtt_sample: float,
    mss: float,
    recovery: bool,
) -> float:
    """Advance BBR's model and state machine by one step; returns the pacing rate (bytes/s).

    With ``recovery`` (scenario ``bbr_loss_recovery``) the window also answers losses as
    Linux's does (``_bbr_recovery_window``)."""
    v2 = flow_i[CC, i] == BBR2
    # Expiry is judged before this sample refreshes the filter (Linux bbr_update_min_rtt):
    # an expired min_rtt both takes the sample and sends the flow to probe-rtt.
    expired = flow_f[MIN_RTT, i] < np.inf and now - flow_f[MIN_RTT_AT, i] > BBR_MIN_RTT_WINDOW_S
    if rtt_sample > 0.0 and (
        rtt_sample <= flow_f[MIN_RTT, i] or (expired and flow_i[MODE, i] != PROBE_RTT)
    ):
        flow_f[MIN_RTT, i] = rtt_sample
        flow_f[MIN_RTT_AT, i] = now
    flow_f[ROUND_ACKED, i] += acked
    round_length = max(flow_f[SRTT, i], flow_f[BASE_RTT, i] * 0.5)
    _slide_rate(flow_f, flow_i, bw_filter, i, now, acked, round_length)
    round_start = flow_f[ROUND_ACKED, i] > 0.0 and now - flow_f[ROUND_T, i] >= round_length
    if round_start:
        _end_round(flow_f, flow_i, bw_filter, i, now, mss, v2)
    if acked > 0.0:
        _update_ack_aggregation(flow_f, flow_i, i, now, acked, mss, round_start)

    mode = flow_i[MODE, i]
    min_rtt = flow_f[MIN_RTT, i]
    bdp = flow_f[BTL_BW, i] * min_rtt if min_rtt < np.inf else 0.0
    if mode == STARTUP and flow_i[FILLED_PIPE, i] == 1:
        mode = DRAIN
    if mode == DRAIN and flow_f[INFLIGHT, i] <= bdp:
        mode = PROBE_BW
        flow_i[CYCLE_IDX, i] = _first_phase(flow_i, i)
        flow_f[CYCLE_T, i] = now
    if mode == PROBE_BW and now - flow_f[CYCLE_T, i] > min_rtt:
        flow_i[CYCLE_IDX, i] = (flow_i[CYCLE_IDX, i] + 1) % BBR_CYCLE_LEN
        flow_f[CYCLE_T, i] = now
    if mode != PROBE_RTT and expired:
        mode = PROBE_RTT
        flow_f[PRIOR_CWND, i] = flow_f[CWND, i]
        flow_f[PROBE_RTT_DONE, i] = now + BBR_PROBE_RTT_S + min_rtt
    if mode == PROBE_RTT and now >= flow_f[PROBE_RTT_DONE, i]:
        flow_f[MIN_RTT_AT, i] = now
        mode = PROBE_BW if flow_i[FILLED_PIPE, i] == 1 else STARTUP
        flow_f[CWND, i] = max(flow_f[CWND, i], flow_f[PRIOR_CWND, i])
        flow_i[CYCLE_IDX, i] = _first_phase(flow_i, i)
        flow_f[CYCLE_T, i] = now
    flow_i[MODE, i] = mode

    if mode == STARTUP:
        pacing_gain = BBR_HIGH_GAIN
        cwnd_gain = BBR_HIGH_GAIN
    elif mode == DRAIN:
        pacing_gain = 1.0 / BBR_HIGH_GAIN
        cwnd_gain = BBR_HIGH_GAIN
    elif mode == PROBE_BW:
        pacing_gain = _probe_bw_gain(flow_i[CYCLE_IDX, i], v2)
        cwnd_gain = 2.0
    else:
        pacing_gain = 1.0
        cwnd_gain = 1.0

    cwnd = flow_f[CWND, i]
    acked_segs = acked / mss
    conserving = False
    if recovery and acked > 0.0:
        cwnd, conserving = _bbr_recovery_window(
            flow_f, flow_i, i, now, cwnd, acked_segs, round_length, mss
        )
    if not conserving:
        cwnd = _bbr_window_towards_target(
            flow_f, flow_i, i, cwnd, acked_segs, bdp, cwnd_gain, mss, v2
        )
    if mode == PROBE_RTT:
        cwnd = BBR_MIN_CWND
    flow_f[CWND, i] = cwnd
    return float(pacing_gain * flow_f[BTL_BW, i] * BBR_PACING_MARGIN)


@compiled
def _bbr_window_towards_target(
    flow_f: FloatRows,
    flow_i: IntRows,
    i: int,
    cwnd: float,
    acked_segs: float,
    bdp: float,
    cwnd_gain: float,
    mss: float,
    v2: bool,
) -> float:
    """Linux ``bbr_set_cwnd``'s target: cwnd_gain x BDP + 3 segments + the ACK-aggregation
    allowance (BBRv2-like: at most inflight_hi); once the pipe is full the window moves
    towards it by what was acknowledged, before that it only grows; at least 4 segments."""
    if bdp > 0.0:
        target = cwnd_gain * bdp / mss + 3.0
        if flow_i[FILLED_PIPE, i] == 1:  # Linux bbr_ack_aggregation_cwnd
            extra = max(flow_f[EXTRA_ACKED0, i], flow_f[EXTRA_ACKED0 + 1, i])
            target += (
                min(BBR_EXTRA_ACKED_GAIN * extra, flow_f[BTL_BW, i] * BBR_EXTRA_ACKED_MAX_S) / mss
            )
        if v2:
            target = min(target, flow_f[INFLIGHT_HI, i] / mss)
        if flow_i[FILLED_PIPE, i] == 1:
            cwnd = min(cwnd + acked_segs, target)
        elif cwnd < target:
            cwnd += acked_segs
    else:
        cwnd += acked_segs
    return max(cwnd, BBR_MIN_CWND)


@compiled
def _slide_rate(
    flow_f: FloatRows,
    flow_i: IntRows,
    bw_filter: FloatRows,
    i: int,
    now: float,
    acked: float,
    round_length: float,
) -> None:
    """A delivery-rate sample over the last round, taken every 1/RATE_PARTS of a round, into
    the bandwidth max filter. Linux takes one per ACK, each over the round trip behind it
    (``tcp_rate_gen``): the max filter then holds the peaks of a fluctuating share, which
    one sample per disjoint round averages away (in the lab each stream's estimate sat at
    107–145 Mb/s while it delivered ~104)."""
    q = flow_i[RATE_Q, i]
    flow_f[RATE_Q0 + q, i] += acked
    if now - flow_f[RATE_T0 + q, i] < round_length / RATE_PARTS:
        return
    oldest = (q + 1) % RATE_PARTS
    elapsed = now - flow_f[RATE_T0 + oldest, i]
    if flow_f[RATE_T0 + oldest, i] > 0.0 and elapsed > 0.0:
        total = 0.0
        for k in range(RATE_PARTS):
            total += flow_f[RATE_Q0 + k, i]
        sample = total / elapsed
        slot = flow_i[ROUND_COUNT, i] % BBR_BW_ROUNDS
        bw_filter[i, slot] = max(bw_filter[i, slot], sample)
        flow_f[BTL_BW, i] = max(flow_f[BTL_BW, i], sample)
    flow_i[RATE_Q, i] = oldest
    flow_f[RATE_Q0 + oldest, i] = 0.0
    flow_f[RATE_T0 + oldest, i] = now


@compiled
def _update_ack_aggregation(
    flow_f: FloatRows,
    flow_i: IntRows,
    i: int,
    now: float,
    acked: float,
    mss: float,
    round_start: bool,
) -> None:
    """Linux ``bbr_update_ack_aggregation`` (tcp_bbr.c, since 4.20): an epoch runs while
    acknowledgements arrive faster than the bandwidth estimate; what they acknowledge beyond
    bw × the epoch's length is the data the sender would have idled on with a 2·BDP window,
    and the window grows by it. Without it the twin's BBR DTN streams held ~470 segments at
    100 ms where the lab's held ~630 (bbr-100-fixed: campus 83 Mb/s in the twin, 39 in the
    lab). Linux sees per-ACK bursts the twin's 1 ms steps smooth out; the probe-bw phase at
    gain 1.25 still delivers above the estimate for a round, which is most of the effect."""
    if round_start:
        flow_i[EXTRA_ACKED_ROUNDS, i] = min(flow_i[EXTRA_ACKED_ROUNDS, i] + 1, 31)
        if flow_i[EXTRA_ACKED_ROUNDS, i] >= BBR_EXTRA_ACKED_WIN_ROUNDS:
            flow_i[EXTRA_ACKED_ROUNDS, i] = 0
            flow_i[EXTRA_ACKED_IDX, i] = 1 - flow_i[EXTRA_ACKED_IDX, i]
            flow_f[EXTRA_ACKED0 + flow_i[EXTRA_ACKED_IDX, i], i] = 0.0
    expected = flow_f[BTL_BW, i] * (now - flow_f[ACK_EPOCH_T, i])
    if (
        flow_f[ACK_EPOCH_ACKED, i] <= expected
        or flow_f[ACK_EPOCH_ACKED, i] + acked >= BBR_ACK_EPOCH_RESET_SEGS * mss
    ):
        flow_f[ACK_EPOCH_ACKED, i] = 0.0
        flow_f[ACK_EPOCH_T, i] = now
        expected = 0.0
    flow_f[ACK_EPOCH_ACKED, i] += acked
    extra = min(flow_f[ACK_EPOCH_ACKED, i] - expected, flow_f[CWND, i] * mss)
    slot = EXTRA_ACKED0 + flow_i[EXTRA_ACKED_IDX, i]
    flow_f[slot, i] = max(flow_f[slot, i], extra)


@compiled
def _first_phase(flow_i: IntRows, i: int) -> int:
    # Linux starts probe-bw at a random phase other than the probe-down one; a hash of the
    # flow's serial keeps runs deterministic.
    draw = ((flow_i[SERIAL, i] % 1000003) * 2654435761 + 12345) % 7
    return 0 if draw == 0 else draw + 1


@compiled
def _end_round(
    flow_f: FloatRows,
    flow_i: IntRows,
    bw_filter: FloatRows,
    i: int,
    now: float,
    mss: float,
    v2: bool,
) -> None:
    elapsed = now - flow_f[ROUND_T, i]
    sample = flow_f[ROUND_ACKED, i] / elapsed
    slot = flow_i[ROUND_COUNT, i] % BBR_BW_ROUNDS
    bw_filter[i, slot] = max(bw_filter[i, slot], sample)
    best = 0.0
    for k in range(BBR_BW_ROUNDS):
        best = max(best, bw_filter[i, k])
    flow_f[BTL_BW, i] = best
    flow_i[ROUND_COUNT, i] += 1
    bw_filter[i, flow_i[ROUND_COUNT, i] % BBR_BW_ROUNDS] = 0.0
    if v2:
        lost = flow_f[ROUND_LOST, i]
        total = lost + flow_f[ROUND_ACKED, i]
        if total > 0.0 and lost / total > BBR2_LOSS_THRESHOLD:
            flow_f[INFLIGHT_HI, i] = max(BBR2_BETA * flow_f[CWND, i] * mss, BBR_MIN_CWND * mss)
            flow_f[PROBE_UP_SEGS, i] = 1.0
            flow_i[FILLED_PIPE, i] = 1
        elif (
            flow_i[MODE, i] == PROBE_BW
            and flow_i[CYCLE_IDX, i] == 0
            and flow_f[INFLIGHT_HI, i] < np.inf
        ):
            flow_f[INFLIGHT_HI, i] += flow_f[PROBE_UP_SEGS, i] * mss
            flow_f[PROBE_UP_SEGS, i] *= 2.0
    if flow_i[FILLED_PIPE, i] == 0:
        if best >= flow_f[FULL_BW, i] * BBR_FULL_BW_GROWTH:
            flow_f[FULL_BW, i] = best
            flow_i[FULL_BW_COUNT, i] = 0
        else:
            flow_i[FULL_BW_COUNT, i] += 1
            if flow_i[FULL_BW_COUNT, i] >= BBR_FULL_BW_ROUNDS:
                flow_i[FILLED_PIPE, i] = 1
    flow_f[ROUND_T, i] = now
    flow_f[ROUND_ACKED, i] = 0.0
    flow_f[ROUND_LOST, i] = 0.0
