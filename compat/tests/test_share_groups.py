"""Share groups (KIP-932) with Kafka's own tools: kafka-console-share-consumer joins a share
group (its ShareGroupHeartbeats), and kafka-share-groups lists it and describes its members as
it does against Apache Kafka 4.4 (COMPAT_BOOTSTRAP runs the same test there)."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

from clients import create_topic, unique_topic
from harness import Deadline
from test_java import JARS_DIR, JVM_FLAGS


def java(main_class: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs one of Kafka's tools (kafka-tools, from .cache/kafka-jars)."""
    binary = shutil.which("java")
    assert binary, "java is not on PATH (scripts/test.sh installs a JDK)"
    return subprocess.run([binary, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", main_class, *args],
                          capture_output=True, text=True, timeout=timeout)


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
