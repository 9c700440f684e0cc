"""A full disk, for real: the server's data directory on a small tmpfs.

Before, ENOSPC stopped the broker and producers saw only timeouts. Now a write that does not
fit is undone and refused with KAFKA_STORAGE_ERROR (which clients retry), reads go on, and
once space returns the producer's retries land: every record exactly once, in order. The
operator's way out, deleting a topic, works on the full disk: the metadata log writes into
space the quorum keeps for it.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, Producer

from clients import Rec, admin, create_topic, produce_confluent, read_confluent, unique_topic
from harness import wait_until

MIB = 1024 * 1024
RECORDS = 36_000
VALUE_BYTES = 1000


@pytest.fixture
def small_disk(tmp_path):
    """A 56 MiB tmpfs holding 16 MiB of ballast that the test can delete to free space (and 8
    MiB the metadata quorum reserves for its log)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=56m", "tmpfs", str(mount)], capture_output=True, text=True)
    assert mounted.returncode == 0, f"mounting a tmpfs needs root (the test command runs as root): {mounted.stderr}"
    try:
        (mount / "ballast").write_bytes(bytes(16 * MIB))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def produce_to_partition_0(producer: Producer, topic: str, value: bytes, on_delivery) -> None:
    """Queues ``value`` for partition 0 of ``topic``, waiting while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)


def make_offsets_topic(bootstrap: str) -> None:
    """Makes the group coordinator's ``__consumer_offsets`` now. Made later, by the first
    consumer while the disk is full, it is a metadata change that releases the space the
    quorum keeps for its log, into which the producer's retries then fit."""
    client = admin(bootstrap)
    for answer in client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(unique_topic("coordinator"))]).values():
        answer.result(timeout=30)
    wait_until(lambda: "__consumer_offsets" in client.list_topics(timeout=10).topics, timeout=30,
               what="__consumer_offsets to exist")


def test_a_full_disk_refuses_writes_then_every_record_lands_once(make_weir, small_disk):
    weir = make_weir("diskfull", data_dir=small_disk / "data")
    bootstrap = weir.bootstrap
    topic = unique_topic("full")
    create_topic(bootstrap, topic, partitions=1)
    make_offsets_topic(bootstrap)
    failures: list[str] = []
    delivered = []

    def on_delivery(err, msg):
        if err is None:
            delivered.append(int(msg.value()[:12]))
        else:
            failures.append(err.str())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 240_000,
            "retry.backoff.max.ms": 500,
        }
    )
    for i in range(RECORDS):
        produce_to_partition_0(producer, topic, b"%012d" % i + bytes(VALUE_BYTES - 12), on_delivery)
        producer.poll(0)
    wait_until(
        lambda: "writes refused until space returns" in weir.log_text(),
        timeout=120,
        what="the broker to report the disk full",
    )
    producer.poll(1)
    stored = read_confluent(bootstrap, topic, [0], timeout=60)[0]
    assert [int(r.value[:12]) for r in stored] == list(range(len(stored))), "reads go on, in order"
    assert 0 < len(stored) < RECORDS
    assert weir.is_running()

    (small_disk / "ballast").unlink()
    remaining = producer.flush(240)
    assert remaining == 0 and not failures, f"{remaining} undelivered, failures {set(failures)}"
    wait_until(lambda: "writes accepted again" in weir.log_text(), timeout=30, what="the broker to resume")
    log = read_confluent(bootstrap, topic, [0], timeout=120)[0]
    assert [int(r.value[:12]) for r in log] == list(range(RECORDS)), "every record once, in order"
    assert [r.offset for r in log] == list(range(RECORDS))
    assert sorted(delivered) == list(range(RECORDS))
    code = weir.stop()
    assert code == 0, f"SIGTERM on a nearly full disk: exit code {code}\n" + weir.log_tail()
    time.sleep(0.1)


def free_mib(path) -> float:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize / MIB


def test_deleting_a_topic_on_a_full_disk_frees_it_and_writes_resume(make_weir, small_disk):
    """The disk filled by one topic's records. Before, deleting that topic answered
    KAFKA_STORAGE_ERROR (the metadata log could not be written), so the operator had no way
    out through Kafka's tools. Now the quorum gives up the space it keeps for its log: the
    delete is written, the topic's files go, new topics take writes, and the reserve is made
    again."""
    weir = make_weir("diskfull-delete", data_dir=small_disk / "data")
    bootstrap = weir.bootstrap
    hog = unique_topic("hog")
    create_topic(bootstrap, hog, partitions=1)
    refused = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "message.send.max.retries": 0, "message.timeout.ms": 30_000})

    def on_delivery(err, _msg):
        if err is not None:
            refused.append(err.code())

    value = bytes(VALUE_BYTES)
    sent = 0
    while not refused and sent < 200_000:
        for _ in range(1000):
            produce_to_partition_0(producer, hog, value, on_delivery)
        sent += 1000
        producer.flush(60)
    assert KafkaError.KAFKA_STORAGE_ERROR in refused, f"the disk never filled: {set(refused)}"
    full = free_mib(small_disk)
    assert full < 1, f"{full:.1f} MiB still free"

    client = admin(bootstrap)
    started = time.monotonic()
    client.delete_topics([hog])[hog].result(timeout=30)
    deleted_in = time.monotonic() - started
    wait_until(lambda: free_mib(small_disk) > 16, timeout=30, what="the deleted topic's files to go")
    assert "the space reserved for the metadata log is released" in weir.log_text()

    after = unique_topic("after")
    create_topic(bootstrap, after, partitions=1)
    produce_confluent(bootstrap, after, [Rec(None, b"%d" % i) for i in range(100)], acks="all")
    assert [r.value for r in read_confluent(bootstrap, after, [0])[0]] == [b"%d" % i for i in range(100)]
    wait_until(lambda: weir.log_text().count("space for the metadata log reserved") >= 2, timeout=30, what="the reserve to be made again")
    print(f"disk full after {sent} records ({full:.2f} MiB free): the topic deleted in {deleted_in:.2f} s, {free_mib(small_disk):.1f} MiB free after, writes resumed, the reserve made again")
    # Stopped here, before the tmpfs goes.
    code = weir.stop()
    assert code == 0, f"SIGTERM: exit code {code}\n" + weir.log_tail()
