"""The collector's sample stream: a reader that falls behind loses its oldest samples,
never blocks the others, and the loss is exported."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from scidmz.metrics import names
from scidmz.proto import telemetry_pb2
from scidmz.telemetry.exporter import StreamExporter
from scidmz.telemetry.stream import QUEUE_DEPTH, TelemetryService


def test_a_stalled_reader_keeps_the_newest_samples_and_costs_the_others_nothing():
    stream = TelemetryService()
    registry = CollectorRegistry()
    registry.register(StreamExporter(stream, ("p", "ns")))
    stalled, reader = stream.subscribe(), stream.subscribe()
    read = []
    for sequence in range(1, QUEUE_DEPTH + 11):
        stream.publish(telemetry_pb2.StateSample(sequence=sequence))
        read.append(reader.get_nowait().sequence)  # the well-behaved one reads each
    assert read == list(range(1, QUEUE_DEPTH + 11))
    kept = [stalled.get_nowait().sequence for _ in range(stalled.qsize())]
    assert kept == list(range(11, QUEUE_DEPTH + 11))  # the newest QUEUE_DEPTH, in order
    labels = {"link": "p"}
    assert registry.get_sample_value(names.STREAM_DROPPED, labels) == 10
    assert registry.get_sample_value(names.STREAM_SUBSCRIBERS, labels) == 2
    stream.unsubscribe(stalled)
    stream.unsubscribe(reader)
    assert registry.get_sample_value(names.STREAM_SUBSCRIBERS, labels) == 0


def test_a_new_subscriber_starts_from_the_latest_sample():
    stream = TelemetryService()
    stream.publish(telemetry_pb2.StateSample(sequence=7))
    assert stream.subscribe().get_nowait().sequence == 7
