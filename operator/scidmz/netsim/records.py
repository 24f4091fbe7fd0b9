"""What the simulator reports: ground-truth samples, per-flow tables, the tap's view, events."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from scidmz.netsim import layout

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.nan


@dataclass(frozen=True)
class FlowTable:
    """Per-flow columns (campus long flows, short-flow pool, DTN streams)."""

    serial: IntArray
    traffic_class: IntArray
    kind: IntArray
    running: BoolArray
    base_rtt_s: FloatArray
    cwnd_segments: FloatArray
    acked_bytes: FloatArray
    sent_bytes: FloatArray
    dropped_bytes: FloatArray
    sample_acked_bytes: FloatArray
    sample_rtt_s: FloatArray
    srtt_s: FloatArray

    def class_mask(self, traffic_class: int) -> BoolArray:
        mask: BoolArray = self.traffic_class == traffic_class
        return mask


@dataclass(frozen=True)
class Sample:
    """Ground truth over one sample time T ending at ``time_s``.

    Rates count bytes leaving the bottleneck; RTTs are the senders' samples (base RTT + shaper
    + bottleneck queueing) averaged per flow, then over the class's flows; queuing delays are
    the bytes-weighted mean sojourn in the bottleneck queue (NaN when a class sent nothing).
    """

    time_s: float
    campus_rate_limit_bps: float
    dtn_rate_bps: float
    campus_rate_bps: float
    dtn_rtt_s: float
    campus_rtt_s: float
    dtn_queuing_delay_s: float
    campus_queuing_delay_s: float
    running_flows: int
    tap_active_flows: int
    utilisation: float
    queue_bytes: float
    queue_max_bytes: float
    shaper_queue_bytes: float
    shaper_delay_s: float
    dtn_dropped_bytes: float
    campus_dropped_bytes: float
    shaper_dropped_bytes: float
    dtn_tap_rate_bps: float
    campus_tap_rate_bps: float

    @classmethod
    def from_steps(
        cls,
        end_s: float,
        sample_time_s: float,
        step_out: FloatArray,
        flows: FlowTable,
        capacity_bps: float,
    ) -> Sample:
        # one reduction for every row (a numpy call per figure cost more than the figures)
        sums = step_out.sum(axis=1)
        steps = step_out.shape[1]
        dep_dtn = float(sums[layout.OUT_DEP_DTN])
        dep_campus = float(sums[layout.OUT_DEP_CAMPUS])
        return cls(
            time_s=end_s,
            campus_rate_limit_bps=float(sums[layout.OUT_RATE_LIMIT] / steps * 8.0),
            dtn_rate_bps=dep_dtn * 8.0 / sample_time_s,
            campus_rate_bps=dep_campus * 8.0 / sample_time_s,
            dtn_rtt_s=_class_rtt(flows, layout.DTN),
            campus_rtt_s=_class_rtt(flows, layout.CAMPUS),
            dtn_queuing_delay_s=_ratio(float(sums[layout.OUT_QD_DTN_W]), dep_dtn),
            campus_queuing_delay_s=_ratio(float(sums[layout.OUT_QD_CAMPUS_W]), dep_campus),
            running_flows=int(step_out[layout.OUT_RUNNING, -1]),
            tap_active_flows=int(step_out[layout.OUT_TAP_ACTIVE, -1]),
            utilisation=(dep_dtn + dep_campus) * 8.0 / (capacity_bps * sample_time_s),
            queue_bytes=float(sums[layout.OUT_QUEUE] / steps),
            queue_max_bytes=float(step_out[layout.OUT_QUEUE].max()),
            shaper_queue_bytes=float(sums[layout.OUT_SHAPER_QUEUE] / steps),
            shaper_delay_s=_ratio(float(sums[layout.OUT_SHAPER_W]), float(sums[layout.OUT_SHAPED])),
            dtn_dropped_bytes=float(sums[layout.OUT_DROP_DTN]),
            campus_dropped_bytes=float(sums[layout.OUT_DROP_CAMPUS]),
            shaper_dropped_bytes=float(sums[layout.OUT_DROP_SHAPER]),
            dtn_tap_rate_bps=float(sums[layout.OUT_ARR_DTN]) * 8.0 / sample_time_s,
            campus_tap_rate_bps=float(sums[layout.OUT_ARR_CAMPUS]) * 8.0 / sample_time_s,
        )

    def as_row(self) -> dict[str, float | int]:
        # every field is a number: a shallow read, not dataclasses.asdict's deep copy (which
        # cost a streamed run ~0.14 ms a sample, a tenth of the simulation's own time)
        return {name: getattr(self, name) for name in SAMPLE_COLUMNS}


SAMPLE_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Sample))

SAMPLE_COLUMN_DOCS: dict[str, str] = {
    "time_s": "end of the sample interval, simulated seconds",
    "campus_rate_limit_bps": "u(t): campus token-bucket rate, mean over the interval (bit/s)",
    "dtn_rate_bps": "y1 R_DTN: DTN bytes leaving the bottleneck (bit/s)",
    "campus_rate_bps": "y2 R_campus: campus bytes leaving the bottleneck (bit/s)",
    "dtn_rtt_s": "y3 RTT_DTN: senders' RTT samples, mean per stream then over streams (s)",
    "campus_rtt_s": "y4 RTT_campus: as dtn_rtt_s over campus flows; includes shaper delay (s)",
    "dtn_queuing_delay_s": "y5 QD_DTN: bytes-weighted sojourn in the bottleneck queue (s)",
    "campus_queuing_delay_s": "y6 QD_campus: the same for campus bytes (s)",
    "running_flows": "flows started and not completed at the end of the interval",
    "tap_active_flows": "y7 AF: flows active under the C_TH/T_TH rule at the end of the interval",
    "utilisation": "rho: bytes leaving the bottleneck / (capacity x T) (paper eq. 4)",
    "queue_bytes": "bottleneck queue, mean over the interval",
    "queue_max_bytes": "bottleneck queue, maximum over the interval",
    "shaper_queue_bytes": "campus shaper queue, mean over the interval",
    "shaper_delay_s": "bytes-weighted sojourn in the campus shaper (s)",
    "dtn_dropped_bytes": "DTN bytes dropped at the bottleneck in the interval",
    "campus_dropped_bytes": "campus bytes dropped at the bottleneck in the interval",
    "shaper_dropped_bytes": "campus bytes dropped at the shaper in the interval",
    "dtn_tap_rate_bps": "DTN bytes arriving at the tap / T, drops included (P4 counter view)",
    "campus_tap_rate_bps": "campus bytes arriving at the tap / T, drops included",
}


def _class_rtt(flows: FlowTable, traffic_class: int) -> float:
    values = flows.sample_rtt_s[flows.class_mask(traffic_class)]
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan


@dataclass(frozen=True)
class TapView:
    """The P4 pipeline's state at the tap: direct counters, QD registers, RTT samples, flags.

    Counters are cumulative; the QD registers hold the last sample (paper algorithm 5); the
    per-flow RTT is the last sample the tap could take (data at the tap to its ACK at the tap:
    bottleneck queue + path, without the campus shaper, which sits upstream of the tap).
    """

    time_s: float
    dtn_bytes: float
    campus_bytes: float
    dtn_packets: float
    campus_packets: float
    dtn_queuing_delay_s: float
    campus_queuing_delay_s: float
    dtn_resent_bytes: float
    """Bytes the class sent again after declaring them lost (cumulative): what a tap counts
    as retransmissions (P4BS loss method 1)."""
    campus_resent_bytes: float
    serial: IntArray
    traffic_class: IntArray
    active: BoolArray
    rtt_s: FloatArray
    rtt_at_s: FloatArray


@dataclass(frozen=True)
class FlowEvent:
    """A flow start/stop: ground truth (``flow_start``/``flow_done``) or the tap's digests."""

    time_s: float
    serial: int
    kind: str
    fct_s: float
    size_bytes: float
    column: int

    @classmethod
    def from_row(cls, row: FloatArray) -> FlowEvent:
        return cls(
            time_s=float(row[layout.EV_TIME]),
            serial=int(row[layout.EV_SERIAL]),
            kind=layout.EVENT_NAMES[int(row[layout.EV_KIND])],
            fct_s=float(row[layout.EV_VALUE]),
            size_bytes=float(row[layout.EV_SIZE]),
            column=int(row[layout.EV_COLUMN]),
        )
