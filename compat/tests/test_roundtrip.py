"""Produce keyed records with headers through every compression codec with
librdkafka and kafka-python, then read them back by assignment with both
clients and compare every partition, offset, key, value, header and timestamp; and
the topic configs that change what is stored (LogAppendTime, compression.type).
"""

from __future__ import annotations

import time
import zlib

import pytest

from clients import (
    CODECS,
    Rec,
    Stored,
    assert_same_log,
    confluent_consumer,
    create_topic,
    expected_log,
    high_watermark,
    java_partition,
    make_records,
    produce,
    read_back,
    read_confluent,
    read_kafka_python,
    unique_topic,
)
from harness import wait_until

PARTITIONS = 4
RECORDS_PER_CODEC = 2000
CLIENTS = ("librdkafka", "kafka-python")


def _producer_conf(client: str, codec: str) -> dict:
    if client == "librdkafka":
        return {"compression.type": codec, "acks": "all"}
    return {"compression_type": None if codec == "none" else codec, "acks": "all"}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer_client", CLIENTS)
def test_codec_roundtrip(bootstrap, producer_client, codec):
    topic = unique_topic(f"rt-{producer_client}-{codec}")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    seed = zlib.crc32(f"{producer_client}/{codec}".encode())
    # kafka-python cannot send a header with a null value; librdkafka can.
    records = make_records(
        RECORDS_PER_CODEC,
        seed=seed,
        tag=f"{producer_client}/{codec}",
        null_header_values=producer_client == "librdkafka",
    )

    delivered = produce(producer_client, bootstrap, topic, records, **_producer_conf(producer_client, codec))

    # Keyed records go where the Java client's default partitioner puts them.
    for i, (rec, (partition, _offset, _ts)) in enumerate(zip(records, delivered)):
        assert partition == java_partition(rec.key, PARTITIONS), (
            f"record {i} with key {rec.key!r} was delivered to partition {partition}, "
            f"murmur2 says {java_partition(rec.key, PARTITIONS)}"
        )
    expected = expected_log(records, delivered)
    assert set(expected) == set(range(PARTITIONS)), "records should reach every partition"

    for reader in CLIENTS:
        actual = read_back(reader, bootstrap, topic, range(PARTITIONS))
        assert_same_log(actual, expected, context=f"{producer_client}/{codec} read by {reader}")


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_zero_and_one(bootstrap, acks):
    """acks=0 gets no offsets back, acks=1 does; either way the log holds every record in order."""
    topic = unique_topic(f"acks{acks}")
    create_topic(bootstrap, topic, partitions=1)
    records = [Rec(key=b"k%d" % i, value=b"acks-%d-value-%d" % (acks, i), partition=0) for i in range(500)]
    delivered = produce("librdkafka", bootstrap, topic, records, acks=acks, **{"enable.idempotence": False})
    if acks == 1:
        assert [offset for _p, offset, _ts in delivered] == list(range(len(records)))
    else:
        # acks=0 returns before the broker appends: wait for the high watermark.
        wait_until(
            lambda: high_watermark(bootstrap, topic, 0) == len(records),
            30,
            what="acks=0 records to be appended",
        )
    log = read_confluent(bootstrap, topic, [0])[0]
    assert [(r.offset, r.key, r.value) for r in log] == [
        (i, rec.key, rec.value) for i, rec in enumerate(records)
    ]
    # Timestamps are CreateTime, exactly what the producer stamped.
    assert [r.timestamp for r in log] == [ts for _p, _o, ts in delivered]


def test_explicit_partitions_and_large_records(bootstrap):
    """Records sent to explicit partitions, including ~900 KB values, come back intact."""
    topic = unique_topic("explicit")
    create_topic(bootstrap, topic, partitions=3)
    big = bytes(range(256)) * 3500  # 896000 bytes, below the default max.message.bytes
    records = [
        Rec(key=None, value=b"no key", partition=2),
        Rec(key=b"big", value=big, headers=(("h", b"v"),), partition=1),
        Rec(key=b"", value=b"empty key", partition=0),
        Rec(key=b"k", value=None, partition=0),
        Rec(key=None, value=None, partition=0),
    ]
    delivered = produce("librdkafka", bootstrap, topic, records, **{"linger.ms": 0})
    assert [p for p, _o, _t in delivered] == [2, 1, 0, 0, 0]
    expected = expected_log(records, delivered)
    for reader in (read_confluent, read_kafka_python):
        assert_same_log(reader(bootstrap, topic, range(3)), expected, context=reader.__name__)


def test_cross_client_interleaving(bootstrap):
    """Both clients append to the same partition; offsets stay contiguous and each sees the other's records."""
    topic = unique_topic("interleave")
    create_topic(bootstrap, topic, partitions=1)
    expected: list[Stored] = []
    next_offset = 0
    for round_no in range(4):
        for client in ("librdkafka", "kafka-python"):
            records = [
                Rec(key=f"{client}-{round_no}-{i}".encode(), value=f"v{i}".encode(), headers=(("c", client.encode()),), partition=0)
                for i in range(50)
            ]
            delivered = produce(client, bootstrap, topic, records, **_producer_conf(client, "none"))
            offsets = [o for _p, o, _t in delivered]
            assert offsets == list(range(next_offset, next_offset + 50)), f"{client} round {round_no}: {offsets[:5]}..."
            next_offset += 50
            expected += [
                Stored(0, o, r.key, r.value, r.headers, ts) for r, (_p, o, ts) in zip(records, delivered)
            ]
    for reader in CLIENTS:
        assert_same_log(read_back(reader, bootstrap, topic, [0]), {0: expected}, context=reader)


APPEND_TIME_RECORDS = 50


def test_log_append_time_topic_stamps_what_clients_see(bootstrap):
    """On a topic with message.timestamp.type=LogAppendTime, librdkafka's delivery reports and
    consumer, and kafka-python's consumer, see the broker's append time, typed as such, instead
    of the (ancient) timestamp the producer set."""
    from confluent_kafka import Producer, TIMESTAMP_LOG_APPEND_TIME, TopicPartition

    topic = unique_topic("rt-append-time")
    create_topic(bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log.connection.close": False})
    reports = []
    for i in range(APPEND_TIME_RECORDS):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=1_000,
                         on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
    assert producer.flush(30) == 0
    after = int(time.time() * 1000)
    assert len(reports) == APPEND_TIME_RECORDS
    for err, (ts_type, ts) in reports:
        assert err is None
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after, (ts_type, ts, before, after)

    consumer = confluent_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < APPEND_TIME_RECORDS and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen.append(msg.timestamp())
    finally:
        consumer.close()
    assert len(seen) == APPEND_TIME_RECORDS
    assert all(t == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after for t, ts in seen), seen[:3]

    from kafka import KafkaConsumer, TopicPartition as KTopicPartition

    reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        reader.assign([KTopicPartition(topic, 0)])
        reader.seek(KTopicPartition(topic, 0), 0)
        stamped = [(m.timestamp_type, m.timestamp) for m in reader]
    finally:
        reader.close()
    assert len(stamped) == APPEND_TIME_RECORDS
    assert all(t == 1 and before <= ts <= after for t, ts in stamped), stamped[:3]


@pytest.mark.parametrize("topic_codec,producer_codec", [
    ("zstd", "none"), ("uncompressed", "gzip"), ("gzip", "lz4"), ("snappy", "zstd"), ("lz4", "snappy"),
])
def test_topic_compression_type_recompresses_and_every_client_reads_it(bootstrap, topic_codec, producer_codec):
    """A topic's compression.type makes the broker store batches in its codec, whatever the
    producer used: every record, key, header and timestamp reads back the same with both
    clients."""
    topic = unique_topic(f"rt-recompress-{topic_codec}")
    create_topic(bootstrap, topic, partitions=PARTITIONS, config={"compression.type": topic_codec})
    records = make_records(500, seed=zlib.crc32(topic_codec.encode()), tag=f"{producer_codec}->{topic_codec}")
    delivered = produce("librdkafka", bootstrap, topic, records, **_producer_conf("librdkafka", producer_codec))
    expected = expected_log(records, delivered)
    for reader in CLIENTS:
        actual = read_back(reader, bootstrap, topic, range(PARTITIONS))
        assert_same_log(actual, expected, context=f"{producer_codec} into a {topic_codec} topic, read by {reader}")
