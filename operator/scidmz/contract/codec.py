"""y(t) on the wire: ``scidmz.v1.StateSample`` to and from the network state, both ways.

The collector encodes (``to_message``), the controller decodes (``from_message``); in-process
feeds (benchmarks, the control-quality experiments) build fresh samples from seven values
(``state_message``). A value the collector could not measure travels with ``valid`` False
and comes back as NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from scidmz.contract.state import (
    DTN_FIGURES,
    PATH_SIGNALS,
    STATE_VARIABLES,
    DtnFigures,
    NetworkState,
    PathSignals,
    StateVector,
)
from scidmz.proto import telemetry_pb2


def to_message(
    sample: NetworkState,
    sequence: int,
    wall_time_s: float,
    interval_s: float,
    stale: bool,
    link: str,
) -> telemetry_pb2.StateSample:
    measured = Timestamp()
    measured.FromNanoseconds(round(wall_time_s * 1e9))
    return telemetry_pb2.StateSample(
        sequence=sequence,
        measured_at=measured,
        interval_s=interval_s if math.isfinite(interval_s) else 0.0,
        tap_clock_ns=sample.tap_clock_ns,
        dtn_rate_bps=sample.dtn_rate_bps,
        campus_rate_bps=sample.campus_rate_bps,
        dtn_rtt_s=sample.dtn_rtt_s,
        campus_rtt_s=sample.campus_rtt_s,
        dtn_queuing_delay_s=sample.dtn_queuing_delay_s,
        campus_queuing_delay_s=sample.campus_queuing_delay_s,
        active_flows=sample.active_flows,
        valid=list(sample.valid()) if not stale else [False] * 7,
        stale=stale,
        link=link,
        has_signals=True,
        dtns=[
            telemetry_pb2.DtnSample(
                host=dtn.host,
                class_id=dtn.class_id,
                **{name: float(getattr(dtn, name)) for name in DTN_FIGURES},
            )
            for dtn in sample.dtns
        ],
        **{name: float(getattr(sample.signals, name)) for name in PATH_SIGNALS},
    )


def state_message(
    values: Sequence[float],
    sequence: int,
    link: str = "",
    dtns: tuple[DtnFigures, ...] = (),
) -> telemetry_pb2.StateSample:
    """A fresh sample from the seven values in model order (and each DTN host's figures),
    for in-process feeds (the control-quality experiments, benchmarks); validity is each
    value's finiteness."""
    if len(values) != len(STATE_VARIABLES):
        raise ValueError(f"a state has {len(STATE_VARIABLES)} values, got {len(values)}")
    state = NetworkState(*StateVector(*values), measured_at_s=0.0, dtns=dtns)
    return to_message(state, sequence, 0.0, math.nan, stale=False, link=link)


def from_message(sample: telemetry_pb2.StateSample) -> StateVector:
    """y(t) of a sample, by name: NaN where the collector marked a value not measured
    (a stale sample marks them all), the inverse of ``to_message``."""
    values = StateVector(*(float(getattr(sample, name)) for name in STATE_VARIABLES))
    valid = list(sample.valid)
    if len(valid) != len(STATE_VARIABLES):
        return values
    return StateVector(*(v if ok else math.nan for v, ok in zip(values, valid, strict=True)))


def dtns_from_message(sample: telemetry_pb2.StateSample) -> tuple[DtnFigures, ...]:
    """Each DTN host's own figures (none from a stale sample: they are not fresh)."""
    if sample.stale:
        return ()
    return tuple(
        DtnFigures(
            host=dtn.host,
            class_id=dtn.class_id,
            **{name: float(getattr(dtn, name)) for name in DTN_FIGURES},
        )
        for dtn in sample.dtns
    )


def signals_from_message(sample: telemetry_pb2.StateSample) -> PathSignals:
    """The loss telemetry of a sample (all NaN from a collector that does not send it)."""
    if not sample.has_signals:
        return PathSignals()
    return PathSignals(**{name: float(getattr(sample, name)) for name in PATH_SIGNALS})
