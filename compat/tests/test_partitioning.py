"""Keyed records land on the partition chosen by the Java client's default
partitioner: ``(murmur2(key) & 0x7fffffff) % num_partitions``.
"""

from __future__ import annotations

import pytest

from clients import (
    Rec,
    create_topic,
    java_partition,
    murmur2,
    produce,
    read_back,
    unique_topic,
)

# Values of org.apache.kafka.common.utils.Utils.murmur2 from the Java client.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}

PARTITIONS = 6


def keys() -> list[bytes]:
    out = [f"user-{i}".encode() for i in range(400)]
    out += [bytes([i, 255 - i, 0]) for i in range(100)]  # binary keys, all tail lengths
    out += [b"x" * n for n in range(1, 20)]
    out += list(JAVA_MURMUR2)[:-1]
    return out


def test_murmur2_matches_java_client():
    for key, want in JAVA_MURMUR2.items():
        assert murmur2(key) == want, key


def test_kafka_python_partitioner_agrees_with_murmur2():
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    for key in keys():
        assert (kafka_python_murmur2(key) & 0xFFFFFFFF) == (murmur2(key) & 0xFFFFFFFF), key


@pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])
def test_keyed_records_land_on_murmur2_partition(bootstrap, client):
    topic = unique_topic(f"part-{client}")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    records = [Rec(key=k, value=b"value for " + k) for k in keys()]
    conf = {"partitioner": "murmur2_random"} if client == "librdkafka" else {}
    delivered = produce(client, bootstrap, topic, records, **conf)

    for rec, (partition, _offset, _ts) in zip(records, delivered):
        assert partition == java_partition(rec.key, PARTITIONS), (
            f"{client} sent key {rec.key!r} to partition {partition}, "
            f"Java's default partitioner picks {java_partition(rec.key, PARTITIONS)}"
        )

    # And the broker stored each record in exactly that partition.
    log = read_back("librdkafka", bootstrap, topic, range(PARTITIONS))
    seen = {}
    for partition, rows in log.items():
        for row in rows:
            seen[row.key] = partition
    assert seen == {k: java_partition(k, PARTITIONS) for k in keys()}
