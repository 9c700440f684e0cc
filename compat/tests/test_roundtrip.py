"""Produce keyed records with headers through every compression codec with
librdkafka and kafka-python, then read them back by assignment with both
clients and compare every partition, offset, key, value, header and timestamp.
"""

from __future__ import annotations

import zlib

import pytest

from clients import (
    CODECS,
    Rec,
    Stored,
    assert_same_log,
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
