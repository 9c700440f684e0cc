"""A flooded partition (a flash-sale key) beside quiet ones. Once a second the broker finds a
partition taking a quarter or more of what producers append to it, lists it in /metrics
(``weir_hot_partition_bytes_per_second``) and appends its batches in the bulk lane, at a lower
priority than the rest of the broker (``weir_bulk_lane_appends_total``). Nothing is lost or
reordered for it: every record, flooded or quiet, is acknowledged and read back in order.
The latency the quiet partitions keep beside the flood is a benchmark (docs/benchmarks.md).
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from clients import create_topic
from test_http import metrics, sample

PARTITIONS = 8


def read_keys(bootstrap: str, topic: str, partition: int, count: int) -> list[int]:
    """The keys of the first ``count`` records of ``partition``, as integers."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.max.bytes": 8 << 20})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    keys: list[int] = []
    deadline = time.monotonic() + 60
    while len(keys) < count and time.monotonic() < deadline:
        for message in consumer.consume(10_000, timeout=1):
            assert message.error() is None, message.error()
            keys.append(int(message.key()))
    consumer.close()
    return keys


def test_a_flooded_partition_is_listed_hot_and_loses_nothing(weir_only, bootstrap):
    topic = f"sale-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    http = f"http://{weir_only.http}"
    lane_before = sample(metrics(http), "weir_bulk_lane_appends_total")
    sent = [0] * PARTITIONS
    errors: list = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    flood = Producer({"bootstrap.servers": bootstrap, "client.id": "flash-sale", "acks": 1,
                      "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 65536})
    quiet = Producer({"bootstrap.servers": bootstrap, "client.id": "quiet", "acks": 1, "linger.ms": 0})
    value = b"f" * 1000
    hot: float | None = None
    lane_after = lane_before
    start = time.monotonic()
    last_look = start
    while time.monotonic() - start < 30:
        for _ in range(1000):
            try:
                flood.produce(topic, value, key=str(sent[0]), partition=0, callback=delivered)
            except BufferError:
                flood.poll(0.01)
                break
            sent[0] += 1
        flood.poll(0)
        for partition in range(1, PARTITIONS):
            quiet.produce(topic, b"q", key=str(sent[partition]), partition=partition, callback=delivered)
            sent[partition] += 1
        quiet.poll(0)
        if time.monotonic() - last_look >= 0.5:
            last_look = time.monotonic()
            samples = metrics(http)
            hot = sample(samples, "weir_hot_partition_bytes_per_second", topic=topic, partition=0)
            lane_after = sample(samples, "weir_bulk_lane_appends_total")
            if hot is not None and lane_after > lane_before:
                break
    assert flood.flush(60) == 0 and quiet.flush(60) == 0, "every record delivered"
    assert not errors, errors[:3]
    print(f"partition 0 found hot at {hot:.0f} bytes/s after {time.monotonic() - start:.1f} s; "
          f"{lane_after - lane_before:.0f} produce requests appended in the bulk lane")
    assert hot is not None and hot >= 1 << 20, "the flooded partition is listed hot"
    assert lane_after > lane_before, "its batches were appended in the bulk lane"
    samples = metrics(http)
    for partition in range(1, PARTITIONS):
        assert sample(samples, "weir_hot_partition_bytes_per_second", topic=topic, partition=partition) is None
    for partition in range(PARTITIONS):
        keys = read_keys(bootstrap, topic, partition, sent[partition])
        assert keys == list(range(sent[partition])), f"partition {partition}: every record, in order"
