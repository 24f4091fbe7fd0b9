"""Row numbers of the simulator's state arrays (struct-of-arrays, one column per flow).

The compiled kernel (``kernel.py``) takes a handful of 2-D numpy arrays instead of objects so
numba can run the whole step loop without touching Python. Each constant below names one row.
Flow columns are ordered campus long flows, then the short-flow pool, then the DTN streams, so
the campus flows are exactly columns ``0 .. n_campus-1`` (the shaper's columns).
"""

from __future__ import annotations

# ---- per-flow float rows: FLOW_F[row, flow] -----------------------------------------------
CWND = 0  # congestion window, segments
SSTHRESH = 1  # slow-start threshold, segments
INFLIGHT = 2  # bytes sent, neither acknowledged nor declared lost
REMAINING = 3  # bytes the application still has to send (incl. retransmissions); inf = endless
SIZE = 4  # bytes to deliver; inf = endless
ACKED = 5  # bytes acknowledged (delivered once; goodput)
SENT = 6  # bytes put on the wire (incl. retransmissions)
DROPPED = 7  # bytes dropped (shaper + bottleneck)
LOST_PENDING = 8  # dropped bytes the sender has not detected yet
LOSS_AT = 9  # when the pending loss is detected (s)
RECOVERY_UNTIL = 10  # no second window reduction before this time (s)
SRTT = 11  # smoothed RTT (s), RFC 6298 alpha = 1/8; 0 before the first sample
MIN_RTT = 12  # min-filtered RTT (s), BBR
MIN_RTT_AT = 13  # when MIN_RTT was last set (s)
START_T = 14  # flow start (s)
W_MAX = 15  # Cubic W_max, segments
CUBIC_K = 16  # Cubic K (s)
EPOCH_T = 17  # Cubic epoch start (s); < 0: not in an epoch
W_EST = 18  # Cubic Reno-friendly estimate, segments
BTL_BW = 19  # BBR max-filtered bottleneck bandwidth, bytes/s
ROUND_T = 20  # BBR round start (s)
ROUND_ACKED = 21  # bytes acknowledged in this round
ROUND_LOST = 22  # bytes declared lost in this round
FULL_BW = 23  # BBR full-pipe detector's reference bandwidth
CYCLE_T = 24  # BBR probe-bw phase start (s)
PROBE_RTT_DONE = 25  # BBR probe-rtt end (s)
PRIOR_CWND = 26  # cwnd saved on entering probe-rtt, segments
INFLIGHT_HI = 27  # BBRv2-like loss-derived cap on inflight, bytes; inf = none
PROBE_UP_SEGS = 28  # BBRv2-like growth of INFLIGHT_HI per round while probing up, segments
BASE_RTT = 29  # propagation RTT (s)
LINE_BYTES = 30  # NIC limit per step, bytes
TAP_LAST_SEEN = 31  # last packet seen at the tap (s)
TAP_PACKETS = 32  # packets counted towards C_TH
TAP_RTT = 33  # last RTT sample the tap could take (s): bottleneck queue + path
TAP_RTT_AT = 34  # when TAP_RTT was taken (s)
SAMPLE_ACKED = 35  # bytes acknowledged since the last reset (per-sample throughput)
SAMPLE_RTT_W = 36  # sum of RTT x bytes since the last reset (per-sample mean RTT)
PACING_CREDIT = 37  # unused pacing budget carried into the next step, bytes
CWND_LIMITED = 38  # 1 when the window limited the last send; 0: NIC/app, pacing or DTN cap did
RATE_Q0 = 39  # BBR: bytes acknowledged in each 1/8 of the last round (8 rows) ...
RATE_T0 = 47  # ... and when each began (8 rows): a sliding one-round delivery rate
ACK_EPOCH_T = 55  # BBR: start of the ACK-aggregation epoch (s)
ACK_EPOCH_ACKED = 56  # BBR: bytes acknowledged in that epoch
EXTRA_ACKED0 = 57  # BBR: max excess acknowledged bytes in each of two windows (2 rows)
HS_ROUND_T = 59  # Cubic HyStart: when this round's ACK train began (s) ...
HS_LAST_ACK = 60  # ... the train's last ACK (s; a gap over 2 ms ends the train)
HS_END = 61  # ... bytes sent when the round began: the round ends once ACKED passes them
HS_CURR_RTT = 62  # ... the round's minimum RTT sample so far (s)
HS_SAMPLES = 63  # ... ACKs the round's minimum has seen (the delay test needs 8)
LAST_MAX = 64  # Cubic last_max_cwnd: W_max of the last loss; 0 before any / after an RTO
PRR_PRIOR = 65  # PRR: the window when this recovery began, segments; 0: not in a PRR recovery
PRR_DELIVERED = 66  # PRR: bytes acknowledged since it began ...
PRR_OUT = 67  # ... and bytes sent since
LOST_NOW = 68  # BBR loss recovery: bytes declared lost since BBR last set its window
CONSERVE_UNTIL = 69  # BBR loss recovery: packet conservation until then (s): its first round
RESEND_OWED = 70  # bytes declared lost and not yet sent again (they go out before new data),
RESEND_FROM = 71  # ... as of SENT = this: sends since then paid it off first (kernel.settle_resent)
RESENT_TOTAL = 72  # bytes this column re-sent, as of its last settle_resent (cumulative)
N_FLOW_F = 73

# ---- per-flow integer rows: FLOW_I[row, flow] ----------------------------------------------
CLASS = 0  # CAMPUS or DTN
CC = 1  # RENO, CUBIC, BBR, BBR2
RUNNING = 2  # 1 while the flow exists and has not completed
BASE_STEPS = 3  # BASE_RTT in steps (>= 1)
MODE = 4  # BBR mode
CYCLE_IDX = 5  # BBR probe-bw phase
FULL_BW_COUNT = 6  # rounds without 25 % growth
FILLED_PIPE = 7  # BBR left startup
ROUND_COUNT = 8  # BBR rounds so far
TAP_ACTIVE = 9  # the tap's activity rule counts this flow as active
SERIAL = 10  # unique id of the flow occupying this column (columns of short flows are reused)
KIND = 11  # LONG, SHORT, DTN_STREAM
TAIL_PROBED = 12  # pending loss with nothing after it: 1 tail probe sent, 2 waits for the RTO
RATE_Q = 13  # BBR: the part (0-7) of the sliding delivery-rate window being filled
EXTRA_ACKED_IDX = 14  # BBR: which of the two EXTRA_ACKED windows is filling
EXTRA_ACKED_ROUNDS = 15  # BBR: rounds into that window
BACKOFF = 16  # retransmission timeouts since data was last acknowledged (RTO doubles each)
HS_FOUND = 17  # Cubic HyStart ended slow start (or does not apply: not Cubic, turned off)
BBR_RECOVERING = 18  # BBR loss recovery: 1 if the last window update was in recovery
GROUP = 19  # a DTN stream's DTN group (its host, GROUP_F's column); 0 for campus flows
N_FLOW_I = 20

CAMPUS = 0
DTN = 1

RENO = 0
CUBIC = 1
BBR = 2
BBR2 = 3
CC_CODES = {"reno": RENO, "cubic": CUBIC, "bbr": BBR, "bbr2": BBR2}

LONG = 0
SHORT = 1
DTN_STREAM = 2

STARTUP = 0
DRAIN = 1
PROBE_BW = 2
PROBE_RTT = 3

# ---- global floats: GLOB_F[row] ------------------------------------------------------------
CAMPUS_RATE_LIMIT = 0  # u(t), bytes/s
TOKENS = 1  # token-bucket content, bytes
QUEUE = 2  # bottleneck queue, bytes
SHAPER_QUEUE = 3  # shaper queue, bytes
NEXT_ARRIVAL = 4  # next short-flow arrival (s)
QD_DTN_LAST = 5  # last DTN queuing-delay sample at the bottleneck (s)  (QD register)
QD_CAMPUS_LAST = 6  # last campus queuing-delay sample (s)
TAP_BYTES_DTN = 7  # bytes of the DTN class seen at the tap (direct counter)
TAP_BYTES_CAMPUS = 8
TAP_PACKETS_DTN = 9
TAP_PACKETS_CAMPUS = 10
DEFERRED = 11  # short-flow arrivals that waited for a free column
SHAPER_DROPPED = 12
BOTTLENECK_DROPPED = 13
RETIRED_SENT = 14  # SENT / ACKED / DROPPED of finished short flows whose column was reused
RETIRED_ACKED = 15
RETIRED_DROPPED = 16
DROPS_EWMA = 17  # bottleneck drops per step, moving average (a probe's loss probability ...)
ARRIVALS_EWMA = 18  # ... is DROPS_EWMA / ARRIVALS_EWMA)
SHAPER_DROPS_EWMA = 19  # the same at the campus shaper
SHAPER_ARRIVALS_EWMA = 20
RESENT_DTN = 21  # bytes the DTN's streams sent again after declaring them lost (cumulative)
RESENT_CAMPUS = 22  # the same for campus flows, counted as they leave the sender (both as
# of the last settle_resent: at a loss, a column's reuse, and every read)
N_GLOB_F = 23

# ---- DTN groups: GROUP_F[row, group] -------------------------------------------------------
# One column per DTN host (scenario.dtns): its streams are flow columns FIRST..END-1, in
# scenario order after the campus columns; its cap, pool and what the tap saw of it.
G_FIRST = 0  # its first flow column
G_END = 1  # one past its last
G_RATE_LIMIT = 2  # its sending-rate cap (its host's pacing / tbf), bytes/s; inf = none
G_TOKENS = 3  # the cap's token-bucket content, bytes
G_BURST = 4  # the cap's bucket depth, bytes
G_POOL = 5  # a pooled transfer's bytes no stream of it has taken yet (0: none, or static)
G_TAP_BYTES = 6  # bytes of it seen at the tap (its class's direct counter)
G_QD_LAST = 7  # the last queuing delay of its bytes leaving the bottleneck (s)
G_DEPARTED = 8  # bytes of it that left the bottleneck (cumulative)
G_SOJOURN_W = 9  # ... and the sum of their bytes x queuing delay
N_GROUP_F = 10

# ---- global integers: GLOB_I[row] ----------------------------------------------------------
STEP = 0
N_EVENTS = 1
RAND_CURSOR = 2
NEXT_SERIAL = 3
RNG_STATE = 4  # xorshift32 state for drop sampling
N_GLOB_I = 5

# ---- ACK ring delays: ACK_DELAY[ring slot, column] ----------------------------------------
# Column ACK_CAMPUS holds the mean bottleneck queuing delay of the campus bytes that left in
# the step the slot acknowledges, ACK_SHAPER_DELAY the campus shaper's delay then, and
# ACK_GROUP0 + g the same as ACK_CAMPUS for DTN group g (each group its own base RTT).
ACK_CAMPUS = 0
ACK_SHAPER_DELAY = 1
ACK_GROUP0 = 2

# ---- per-step outputs: STEP_OUT[row, step] -------------------------------------------------
OUT_DEP_DTN = 0  # bytes leaving the bottleneck
OUT_DEP_CAMPUS = 1
OUT_ARR_DTN = 2  # bytes arriving at the bottleneck (the tap's view)
OUT_ARR_CAMPUS = 3
OUT_DROP_DTN = 4  # bottleneck drops
OUT_DROP_CAMPUS = 5
OUT_DROP_SHAPER = 6
OUT_QUEUE = 7  # bottleneck queue at the end of the step, bytes
OUT_SHAPER_QUEUE = 8
OUT_QD_DTN_W = 9  # sum of sojourn x bytes over departing DTN bytes
OUT_QD_CAMPUS_W = 10
OUT_RUNNING = 11  # flows running (ground truth)
OUT_TAP_ACTIVE = 12  # flows active under the C_TH / T_TH rule
OUT_RATE_LIMIT = 13  # u during the step, bytes/s
OUT_SHAPER_W = 14  # sum of shaper sojourn x bytes over bytes leaving the shaper
OUT_SHAPED = 15  # bytes leaving the shaper
OUT_DTN_RATE_LIMIT = 16  # the first DTN group's cap during the step, bytes/s (inf = none)
N_OUT = 17

# ---- events: EVENTS[row, k] ----------------------------------------------------------------
EV_TIME = 0
EV_SERIAL = 1
EV_KIND = 2
EV_VALUE = 3  # FCT (s) for FLOW_DONE
EV_SIZE = 4  # bytes for FLOW_DONE / FLOW_START
EV_COLUMN = 5
N_EV = 6

FLOW_START = 1  # ground truth: a flow began
FLOW_DONE = 2  # ground truth: a flow's last byte was acknowledged
TAP_START = 3  # the activity rule turned a flow active (new_flow digest)
TAP_STOP_FIN = 4  # FIN seen from an active flow (timeout digest)
TAP_STOP_IDLE = 5  # an active flow sent nothing for the idle timeout
EVENT_NAMES = {
    FLOW_START: "flow_start",
    FLOW_DONE: "flow_done",
    TAP_START: "tap_start",
    TAP_STOP_FIN: "tap_stop_fin",
    TAP_STOP_IDLE: "tap_stop_idle",
}

# ---- parameters: PARAMS[row] ---------------------------------------------------------------
P_DT = 0
P_CAPACITY = 1  # bytes/s
P_BUFFER = 2  # bytes
P_BURST = 3  # bytes
P_SHAPER_LIMIT = 4  # bytes
P_MSS = 5
P_IW = 6  # segments
P_C_TH = 7  # packets
P_T_TH = 8  # s
P_IDLE = 9  # s
P_POOL_START = 10  # first short-flow column
P_POOL_END = 11  # one past the last short-flow column
P_N_CAMPUS = 12  # campus columns (long + pool)
P_SHORT_CC = 13
P_SHORT_RTT = 14
P_SHORT_LINE = 15  # bytes per step
P_SHORTS_ON = 16
P_PAYLOAD = 17  # payload / frame bytes of a full segment: rates in frames -> payload bytes
P_MIN_TSO = 18  # a loss-based sender's smallest TSO burst, segments (tcp_min_tso_segs)
P_HYSTART = 19  # 1: Cubic's HyStart on (Linux tcp_cubic hystart=1)
P_PRR = 20  # 1: loss-based senders send in recovery as Linux's PRR lets them (RFC 6937)
P_BBR_RECOVERY = 21  # 1: BBR sets its window in loss recovery as Linux's tcp_bbr does
P_PACED_DROP_WEIGHT = 22  # a paced sender's arrivals' weight in the drop-tail draw
N_PARAMS = 23
