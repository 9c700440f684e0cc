"""Share groups (KIP-932) with Kafka's own tools: kafka-console-share-consumer (the Java
KafkaShareConsumer) joins a share group and consumes from it, and kafka-share-groups lists it
and describes its members, as against Apache Kafka 4.4 (COMPAT_BOOTSTRAP runs the same tests
there)."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

from pathlib import Path

from clients import Rec, create_topic, produce_confluent, unique_topic
from harness import Deadline
from test_http import metrics, sample
from test_java import JARS_DIR, JVM_FLAGS


def java(main_class: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs one of Kafka's tools (kafka-tools, from .cache/kafka-jars)."""
    binary = shutil.which("java")
    assert binary, "java is not on PATH (scripts/test.sh installs a JDK)"
    return subprocess.run([binary, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", main_class, *args],
                          capture_output=True, text=True, timeout=timeout)


def console_share_consumer(bootstrap: str, topic: str, group: str, out: Path) -> subprocess.Popen:
    """kafka-console-share-consumer on `topic` in `group`, printing each record's value to
    `out` (it accepts each record it printed at its next poll)."""
    binary = shutil.which("java")
    assert binary, "java is not on PATH (scripts/test.sh installs a JDK)"
    return subprocess.Popen(
        [binary, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
         "--bootstrap-server", bootstrap, "--topic", topic, "--group", group],
        stdout=out.open("w"), stderr=subprocess.DEVNULL)


def test_two_share_consumers_on_one_partition_get_every_record_once(weir, bootstrap, tmp_path):
    """Two KafkaShareConsumers share one partition: between them every record is delivered,
    none to both (each accepts what it printed; no lock expires in so short a run)."""
    topic = unique_topic("share-queue")
    create_topic(bootstrap, topic, partitions=1)
    group = f"queue-{uuid.uuid4().hex[:8]}"
    outs = [tmp_path / "first.txt", tmp_path / "second.txt"]
    consumers = [console_share_consumer(bootstrap, topic, group, out) for out in outs]
    try:
        # The group starts at the log's end once a member fetches (share.auto.offset.reset
        # latest): records go in once one warm-up record has come out.
        deadline = Deadline(60)
        sent = 0
        while not any("warm-up" in out.read_text() for out in outs):
            assert not deadline.expired(), "no share consumer received a warm-up record in 60 s"
            produce_confluent(bootstrap, topic, [Rec(None, f"warm-up {sent}".encode())])
            sent += 1
            time.sleep(1)
        expected = [f"record {i}" for i in range(300)]
        produce_confluent(bootstrap, topic, [Rec(None, v.encode()) for v in expected])
        deadline = Deadline(60)
        while True:
            got = [line for out in outs for line in out.read_text().splitlines() if line.startswith("record ")]
            if len(got) >= len(expected) or deadline.expired():
                break
            time.sleep(0.5)
        assert sorted(got) == sorted(expected), \
            f"{len(got)} deliveries of {len(set(got))} distinct records; {len(expected)} sent"
        # kafka-share-groups --describe: once every record is accepted nothing lags, and
        # Weir's start offset is the log's end (Kafka 4.4 stores its start offset later:
        # it showed 7 of 307 with lag 0).
        end = sent + len(expected)
        deadline = Deadline(30)
        while True:
            described = java("org.apache.kafka.tools.consumer.group.ShareGroupCommand",
                             "--bootstrap-server", bootstrap, "--describe", "--group", group)
            # GROUP TOPIC PARTITION START-OFFSET LAG
            rows = [line.split() for line in described.stdout.splitlines() if line.startswith(group)]
            if len(rows) == 1 and rows[0][:3] == [group, topic, "0"] and rows[0][4:] == ["0"] \
                    and (weir.is_external or rows[0][3] == str(end)):
                break
            assert not deadline.expired(), \
                f"kafka-share-groups --describe never showed start offset {end}, lag 0:\n" \
                + described.stdout[-2000:] + described.stderr[-2000:]
            time.sleep(1)
        if not weir.is_external:
            # Each consumer accepts what it printed at its next poll.
            deadline = Deadline(15)
            while True:
                samples = metrics(f"http://{weir.http}")
                accepted = sample(samples, "weir_share_acknowledged_records_total", type="accept")
                if accepted >= len(expected) or deadline.expired():
                    break
                time.sleep(0.2)
            assert accepted >= len(expected)
            assert sample(samples, "weir_share_acquired_records_total") >= len(expected) + 1
    finally:
        for consumer in consumers:
            consumer.terminate()
        for consumer in consumers:
            consumer.wait(30)


def test_kafka_share_groups_lists_and_describes_a_console_share_consumer(bootstrap):
    topic = unique_topic("share")
    create_topic(bootstrap, topic, partitions=2)
    group = f"share-{uuid.uuid4().hex[:8]}"
    binary = shutil.which("java")
    assert binary
    consumer = subprocess.Popen(
        [binary, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
         "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
         "--consumer-property", "client.id=share-tool-test"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = Deadline(45)
        while True:
            described = java("org.apache.kafka.tools.consumer.group.ShareGroupCommand",
                             "--bootstrap-server", bootstrap, "--describe", "--group", group, "--members")
            rows = [line.split() for line in described.stdout.splitlines() if line.startswith(group)]
            if rows and rows[0][-1] in (f"{topic}:0,1", f"{topic}:1,0"):
                break
            assert not deadline.expired(), \
                f"kafka-share-groups never showed {group}'s member with both partitions:\n" \
                + described.stdout[-2000:] + described.stderr[-2000:]
            time.sleep(1)
        # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT
        assert len(rows) == 1, described.stdout
        _, member_id, host, client_id, partitions, _ = rows[0]
        assert (host, client_id, partitions) == ("/127.0.0.1", "share-tool-test", "2"), rows
        assert len(member_id) >= 16
        listed = java("org.apache.kafka.tools.consumer.group.ShareGroupCommand",
                      "--bootstrap-server", bootstrap, "--list")
        assert group in listed.stdout.split(), listed.stdout[-2000:] + listed.stderr[-2000:]
    finally:
        consumer.terminate()
        consumer.wait(30)


def test_acknowledged_records_are_not_delivered_again_after_a_crash(restartable_weir, tmp_path):
    """A share consumer accepts 200 records and closes; Weir is killed with SIGKILL and
    started again: a new share consumer of the group gets only what came after, since the
    group's acknowledgements were stored in __share_group_state before they were answered."""
    weir = restartable_weir
    bootstrap = weir.bootstrap
    topic = unique_topic("share-durable")
    create_topic(bootstrap, topic, partitions=1)
    group = f"durable-{uuid.uuid4().hex[:8]}"
    first_out, second_out = tmp_path / "first.txt", tmp_path / "second.txt"
    first = console_share_consumer(bootstrap, topic, group, first_out)
    try:
        deadline = Deadline(60)
        sent = 0
        while "warm-up" not in first_out.read_text():
            assert not deadline.expired(), "the share consumer received no warm-up record in 60 s"
            produce_confluent(bootstrap, topic, [Rec(None, f"warm-up {sent}".encode())])
            sent += 1
            time.sleep(1)
        before = [f"before {i}" for i in range(200)]
        produce_confluent(bootstrap, topic, [Rec(None, v.encode()) for v in before])
        deadline = Deadline(60)
        while sum(line.startswith("before ") for line in first_out.read_text().splitlines()) < 200:
            assert not deadline.expired(), "the share consumer did not get the 200 records in 60 s"
            time.sleep(0.5)
    finally:
        # SIGTERM: the console consumer closes, acknowledging what it printed.
        first.terminate()
        first.wait(30)
    weir.kill()
    weir.start()
    second = console_share_consumer(bootstrap, topic, group, second_out)
    try:
        after = [f"after {i}" for i in range(100)]
        produce_confluent(bootstrap, topic, [Rec(None, v.encode()) for v in after])
        deadline = Deadline(60)
        while True:
            got = second_out.read_text().splitlines()
            if sum(line.startswith("after ") for line in got) >= 100 or deadline.expired():
                break
            time.sleep(0.5)
        assert sorted(line for line in got if line.startswith("after ")) == sorted(after), got[-20:]
        again = [line for line in got if not line.startswith("after ")]
        assert again == [], f"delivered again after the crash: {again[:10]}"
    finally:
        second.terminate()
        second.wait(30)
