"""ListOffsets: earliest, latest, by timestamp and max timestamp, through
librdkafka (consumer and admin client) and kafka-python.

Partition 0 holds one record per batch; partition 1 holds the same records in
a single batch, so the timestamp search is checked across batches and within one.
Timestamps are deliberately not monotonic.
"""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from clients import (
    Rec,
    admin,
    confluent_consumer,
    create_topic,
    kafka_python_consumer,
    produce_confluent,
    unique_topic,
)

TIMESTAMPS = [1000, 3000, 2000, 4000, 9000, 5000, 6000, 7000]
MAX_TS_OFFSET = 4  # 9000 is the largest timestamp


def first_offset_at_or_after(target: int) -> int | None:
    for offset, ts in enumerate(TIMESTAMPS):
        if ts >= target:
            return offset
    return None


QUERIES = [0, 999, 1000, 1001, 2000, 2500, 3000, 3001, 4000, 4001, 5000, 8999, 9000, 9001, 10**12]


@pytest.fixture(scope="module")
def timed_topic(weir):
    bootstrap = weir.bootstrap
    topic = unique_topic("ts")
    create_topic(bootstrap, topic, partitions=2)
    # Partition 0: one record per produce request (flush after each).
    for i, ts in enumerate(TIMESTAMPS):
        rec = Rec(key=b"p0-%d" % i, value=b"ts=%d" % ts, timestamp=ts, partition=0)
        delivered = produce_confluent(bootstrap, topic, [rec], **{"linger.ms": 0})
        assert delivered == [(0, i, ts)]
    # Partition 1: all records in one batch.
    recs = [Rec(key=b"p1-%d" % i, value=b"ts=%d" % ts, timestamp=ts, partition=1) for i, ts in enumerate(TIMESTAMPS)]
    delivered = produce_confluent(bootstrap, topic, recs, **{"linger.ms": 200, "batch.num.messages": 1000})
    assert delivered == [(1, i, ts) for i, ts in enumerate(TIMESTAMPS)]
    return topic


def test_librdkafka_watermarks(bootstrap, timed_topic):
    consumer = confluent_consumer(bootstrap)
    try:
        for p in (0, 1):
            assert consumer.get_watermark_offsets(TopicPartition(timed_topic, p), timeout=20) == (0, len(TIMESTAMPS))
    finally:
        consumer.close()


@pytest.mark.parametrize("partition", [0, 1])
def test_librdkafka_offsets_for_times(bootstrap, timed_topic, partition):
    consumer = confluent_consumer(bootstrap)
    try:
        for target in QUERIES:
            [result] = consumer.offsets_for_times([TopicPartition(timed_topic, partition, target)], timeout=20)
            assert result.error is None, result.error
            want = first_offset_at_or_after(target)
            got = result.offset if result.offset >= 0 else None
            assert got == want, f"partition {partition}, timestamp {target}: offset {result.offset}, want {want}"
    finally:
        consumer.close()


@pytest.mark.parametrize("partition", [0, 1])
def test_admin_list_offsets(bootstrap, timed_topic, partition):
    client = admin(bootstrap)
    tp = TopicPartition(timed_topic, partition)

    def query(spec):
        return client.list_offsets({tp: spec}, request_timeout=20)[tp].result(timeout=30)

    assert query(OffsetSpec.earliest()).offset == 0
    assert query(OffsetSpec.latest()).offset == len(TIMESTAMPS)
    newest = query(OffsetSpec.max_timestamp())
    assert (newest.offset, newest.timestamp) == (MAX_TS_OFFSET, max(TIMESTAMPS))
    for target in (1500, 3000, 4001):
        info = query(OffsetSpec.for_timestamp(target))
        want = first_offset_at_or_after(target)
        assert (info.offset, info.timestamp) == (want, TIMESTAMPS[want]), f"timestamp {target}"
    past_the_end = query(OffsetSpec.for_timestamp(10**12))
    assert past_the_end.offset == -1


@pytest.mark.parametrize("partition", [0, 1])
def test_kafka_python_offsets(bootstrap, timed_topic, partition):
    from kafka import TopicPartition as KTopicPartition

    consumer = kafka_python_consumer(bootstrap)
    tp = KTopicPartition(timed_topic, partition)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: len(TIMESTAMPS)}
        for target in QUERIES:
            result = consumer.offsets_for_times({tp: target})[tp]
            want = first_offset_at_or_after(target)
            if want is None:
                assert result is None, f"timestamp {target}: got {result}, want no offset"
            else:
                assert result is not None, f"timestamp {target}: no offset, want {want}"
                assert (result.offset, result.timestamp) == (want, TIMESTAMPS[want]), f"timestamp {target}"
    finally:
        consumer.close()


def test_seek_to_offset_from_timestamp_reads_from_there(bootstrap, timed_topic):
    """offsets_for_times, then fetch from that offset: the first record is the one found."""
    consumer = confluent_consumer(bootstrap)
    try:
        [found] = consumer.offsets_for_times([TopicPartition(timed_topic, 1, 4500)], timeout=20)
        assert found.offset == first_offset_at_or_after(4500)
        consumer.assign([TopicPartition(timed_topic, 1, found.offset)])
        msg = None
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert (msg.offset(), msg.timestamp()[1], msg.value()) == (found.offset, 9000, b"ts=9000")
    finally:
        consumer.close()
