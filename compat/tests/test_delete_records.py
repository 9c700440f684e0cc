"""DeleteRecords: a partition's records below an offset are deleted by moving its log start
offset (the leader's, checkpointed at once; followers follow it from their fetches), through
librdkafka's admin client and Kafka's `kafka-delete-records` tool. The records below are no
longer read or listed, a restart keeps them deleted, and retention removes the segments
wholly below. The answer is the partition's low watermark, once every in-sync replica has
the new start.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from clients import admin, create_topic, unique_topic, wait_for_partitions
from harness import Deadline
from test_java import JARS_DIR, Java, compile_java
from weir_cluster import DevCluster, free_base_port


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    producer.flush(30)


def delete_records(bootstrap: str, topic: str, partition: int, offset: int) -> tuple[int | None, int]:
    """librdkafka's DeleteRecords of ``topic``-``partition`` below ``offset``: (None, the low
    watermark), or (the error code, -1) when refused."""
    futures = admin(bootstrap).delete_records([TopicPartition(topic, partition, offset)], request_timeout=30)
    try:
        return None, futures[TopicPartition(topic, partition, offset)].result(timeout=40).low_watermark
    except KafkaException as refused:
        return refused.args[0].code(), -1


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)
    finally:
        consumer.close()


def first_offset_read(bootstrap: str, topic: str, partition: int = 0, timeout: float = 30) -> int:
    """The offset of the first record a consumer reads from the beginning of the partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "first-read", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = Deadline(timeout)
        while not deadline.expired():
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return msg.offset()
        raise AssertionError(f"nothing read from {topic}-{partition} within {timeout}s")
    finally:
        consumer.close()


def test_deleted_records_are_not_read_listed_or_brought_back_by_a_restart(restartable_weir):
    """DeleteRecords below offset 40 of 100: the earliest offset and a consumer from the
    beginning start there, the low watermark answered is 40, an offset past the high
    watermark is refused (OFFSET_OUT_OF_RANGE) and changes nothing, and after a restart the
    records stay deleted."""
    bootstrap = restartable_weir.bootstrap
    topic = unique_topic("delete-records")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, 100)
    assert delete_records(bootstrap, topic, 0, 40) == (None, 40)
    assert watermarks(bootstrap, topic) == (40, 100)
    assert first_offset_read(bootstrap, topic) == 40

    assert delete_records(bootstrap, topic, 0, 101) == (KafkaError.OFFSET_OUT_OF_RANGE, -1)
    assert watermarks(bootstrap, topic) == (40, 100)

    bootstrap = restartable_weir.restart()
    wait_for_partitions(bootstrap, topic, 1)
    assert watermarks(bootstrap, topic) == (40, 100)
    assert first_offset_read(bootstrap, topic) == 40


def test_compacted_and_internal_topics_are_refused(bootstrap):
    """A compacted topic's records go by key only (POLICY_VIOLATION), and an internal topic's
    are the coordinators' (INVALID_TOPIC_EXCEPTION); nothing is deleted."""
    topic = unique_topic("delete-compacted")
    create_topic(bootstrap, topic, partitions=1, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, key=b"k", value=f"v{i}".encode())
    producer.flush(30)
    assert delete_records(bootstrap, topic, 0, 3) == (KafkaError.POLICY_VIOLATION, -1)
    assert watermarks(bootstrap, topic) == (0, 5)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "delete-internal"})
    consumer.subscribe([topic])
    consumer.poll(1)  # creates __consumer_offsets
    consumer.close()
    assert delete_records(bootstrap, "__consumer_offsets", 0, -1) == (KafkaError.TOPIC_EXCEPTION, -1)


@pytest.fixture(scope="module")
def java(weir, tmp_path_factory) -> Java:
    classes = tmp_path_factory.mktemp("java_classes")
    return Java(compile_java(classes), classes, weir)


def test_kafka_delete_records_tool(bootstrap, java, tmp_path):
    """Kafka's `kafka-delete-records` (DeleteRecordsCommand) with an offset JSON file, the
    second partition to its end (-1, the high watermark): it reports each partition's low
    watermark."""
    topic = unique_topic("delete-tool")
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 60, partitions=2)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 10},
        {"topic": topic, "partition": 1, "offset": -1},
    ]}))
    proc = java._run(f"{JARS_DIR}/*", "org.apache.kafka.tools.DeleteRecordsCommand",
                     ["--bootstrap-server", bootstrap, "--offset-json-file", str(offsets)], None, 60)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    assert f"partition: {topic}-0\tlow_watermark: 10" in proc.stdout, proc.stdout
    assert f"partition: {topic}-1\tlow_watermark: 30" in proc.stdout, proc.stdout
    assert watermarks(bootstrap, topic, 0) == (10, 30)
    assert watermarks(bootstrap, topic, 1) == (30, 30)


def test_followers_follow_the_leaders_log_start(tmp_path):
    """On a three-node cluster (replication 3) the answer waits until every in-sync follower
    has the new start; a new leader after the leader is killed starts there too."""
    cluster = DevCluster(tmp_path / "cluster", free_base_port())
    cluster.start()
    try:
        bootstrap = cluster.bootstrap
        topic = unique_topic("delete-replicated")
        admin(bootstrap).create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)],
                                       request_timeout=30)[topic].result(timeout=40)
        wait_for_partitions(bootstrap, topic, 1)
        produce(bootstrap, topic, 100)
        assert delete_records(bootstrap, topic, 0, 70) == (None, 70)
        leader = admin(bootstrap).list_topics(topic, timeout=20).topics[topic].partitions[0].leader
        cluster.kill_node(leader)
        deadline = Deadline(60)
        while True:
            try:
                if watermarks(bootstrap, topic) == (70, 100):
                    break
            except KafkaException:
                pass
            assert not deadline.expired(), "the new leader does not start at 70"
        assert first_offset_read(bootstrap, topic) == 70
    finally:
        cluster.kill()
