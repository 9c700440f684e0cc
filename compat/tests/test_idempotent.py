"""Idempotent producers (InitProducerId + sequence numbers): every record is
acknowledged and stored exactly once, in produce order.
"""

from __future__ import annotations

from clients import (
    Rec,
    assert_same_log,
    create_topic,
    expected_log,
    make_records,
    produce,
    read_back,
    unique_topic,
)


def test_librdkafka_idempotent_producer(bootstrap):
    topic = unique_topic("idem-rdk")
    create_topic(bootstrap, topic, partitions=3)
    records = make_records(5000, seed=7, tag="idem")
    delivered = produce(
        "librdkafka",
        bootstrap,
        topic,
        records,
        **{
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 2,
            "batch.num.messages": 200,
            "compression.type": "lz4",
        },
    )
    expected = expected_log(records, delivered)
    assert_same_log(read_back("librdkafka", bootstrap, topic, range(3)), expected)


def test_two_idempotent_producers_share_a_partition(bootstrap):
    """Two producers get distinct producer ids; interleaved writes keep each one's order."""
    from confluent_kafka import Producer

    topic = unique_topic("idem-two")
    create_topic(bootstrap, topic, partitions=1)
    producers = {
        name: Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1})
        for name in ("a", "b")
    }
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for i in range(2000):
        for name, producer in producers.items():
            producer.produce(topic, key=name.encode(), value=f"{name}{i}".encode(), partition=0, on_delivery=on_delivery)
            producer.poll(0)
    for producer in producers.values():
        assert producer.flush(60) == 0
    assert errors == []

    log = read_back("librdkafka", bootstrap, topic, [0])[0]
    assert [r.offset for r in log] == list(range(4000))
    for name in ("a", "b"):
        assert [r.value for r in log if r.key == name.encode()] == [f"{name}{i}".encode() for i in range(2000)]


def test_kafka_python_idempotent_producer(bootstrap):
    topic = unique_topic("idem-kp")
    create_topic(bootstrap, topic, partitions=2)
    records = [Rec(key=b"k%d" % (i % 13), value=b"v%d" % i) for i in range(3000)]
    delivered = produce("kafka-python", bootstrap, topic, records, enable_idempotence=True, acks="all")
    expected = expected_log(records, delivered)
    assert_same_log(read_back("kafka-python", bootstrap, topic, range(2)), expected)
