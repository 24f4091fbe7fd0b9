"""Digest batching by the P4Runtime rule: max_timeout_ns, max_list_size, acks, bounds."""

from scidmz.switch.digests import DigestConfig, DigestQueue

MS = 1_000_000


def _queue(timeout_ms=10, size=3, ack_ms=100, **kwargs):
    queue = DigestQueue(**kwargs)
    queue.configure(DigestConfig(timeout_ms * MS, size, ack_ms * MS))
    return queue


def test_unconfigured_digests_are_not_kept():
    queue = DigestQueue()
    queue.push([(1,), (2,)], 0)
    assert queue.pending == 0
    assert queue.poll(10**12) is None


def test_a_list_waits_for_the_timeout_or_the_size():
    queue = _queue(timeout_ms=10, size=3)
    queue.push([(1,), (2,)], 0)
    assert queue.poll(9 * MS) is None  # neither old enough nor full
    ready = queue.poll(10 * MS)
    assert ready is not None and ready.records == ((1,), (2,))
    queue.push([(3,), (4,), (5,), (6,)], 20 * MS)
    full = queue.poll(20 * MS)  # full at once: no waiting
    assert full is not None and full.records == ((3,), (4,), (5,))
    assert queue.poll(20 * MS) is None  # one left, young
    assert queue.poll(30 * MS).records == ((6,),)


def test_zero_size_means_no_limit_and_zero_timeout_means_at_once():
    queue = _queue(timeout_ms=0, size=0)
    queue.push([(i,) for i in range(5000)], 0)
    ready = queue.poll(0)
    assert ready is not None and len(ready.records) == 5000


def test_unacked_lists_hold_back_delivery_until_acked_or_expired():
    queue = _queue(timeout_ms=0, size=1, ack_ms=100, max_outstanding=2)
    queue.push([(1,), (2,), (3,)], 0)
    first, second = queue.poll(0), queue.poll(0)
    assert first is not None and second is not None and first.list_id != second.list_id
    assert queue.poll(0) is None  # two outstanding
    assert queue.ack(first.list_id) and not queue.ack(first.list_id)
    third = queue.poll(1 * MS)
    assert third is not None and third.records == ((3,),)
    queue.push([(4,)], 2 * MS)
    assert queue.poll(2 * MS) is None
    assert queue.poll(200 * MS) is not None  # the unacked ones expired
    assert queue.expired_lists == 2


def test_a_full_buffer_drops_and_counts_the_excess():
    queue = _queue(capacity=4)
    queue.push([(i,) for i in range(6)], 0)
    assert queue.pending == 4 and queue.dropped == 2


def test_bad_configuration_is_named():
    assert DigestConfig(-1, -2, -3).problems() == [
        "max_timeout_ns must be >= 0",
        "max_list_size must be >= 0",
        "ack_timeout_ns must be >= 0",
    ]
