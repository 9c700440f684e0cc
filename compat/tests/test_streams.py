"""Kafka Streams with processing.guarantee=exactly_once_v2: a word count (a repartition topic,
a changelog topic, output through transactions that also commit the consumed offsets). Every
word's counts reach the output exactly once, in order, also when the application is killed
with SIGKILL mid-stream and started again; Streams trims its repartition topic with
DeleteRecords as it goes.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from clients import create_topic, unique_topic
from harness import Deadline
from test_java import JARS_DIR, JVM_FLAGS, Java, compile_java
from test_transactions import read_records, unique_id

PARTITIONS = 2
LINES = 600


@pytest.fixture(scope="module")
def server(make_weir):
    """A server whose groups rebalance without the initial delay (Streams starts sooner)."""
    return make_weir("streams", env={"WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})


@pytest.fixture(scope="module")
def java(server, tmp_path_factory) -> Java:
    classes = tmp_path_factory.mktemp("java_classes")
    return Java(compile_java(classes), classes, server)


class WordCount:
    """A StreamsWordCount process; its output is collected in a thread."""

    def __init__(self, java: Java, bootstrap: str, *args):
        self.proc = subprocess.Popen(
            [java.java, *JVM_FLAGS, "-cp", f"{java.classes}:{JARS_DIR}/*", "weir.compat.StreamsWordCount",
             bootstrap, *map(str, args)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.running = threading.Event()
        self.stderr: collections.deque[str] = collections.deque(maxlen=200)
        threading.Thread(target=self._watch, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _watch(self):
        for line in self.proc.stdout:
            if line.strip() == "RUNNING":
                self.running.set()

    def wait_running(self, timeout: float = 90):
        assert self.running.wait(timeout), "Streams not RUNNING:\n" + "".join(self.stderr)

    def stop(self, how=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(how)
        self.proc.wait(timeout=60)


def produce_lines(bootstrap: str, topic: str, lines: list[str], pause: float = 0) -> None:
    """Each line as a record, ``pause`` seconds apart (once each: the producer is idempotent,
    so a retried batch never doubles a line and the counts downstream)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for line in lines:
        producer.produce(topic, value=line.encode())
        if pause:
            producer.flush(30)
            time.sleep(pause)
    producer.flush(30)


def read_committed_pairs(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    """Every (key, value) of ``topic`` up to its end, as a read_committed consumer reads them."""
    return [(key.decode(), value.decode()) for key, value in read_records(bootstrap, topic, PARTITIONS, "read_committed")]


def earliest_offsets(bootstrap: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_id("wc-earliest")})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[0] for p in range(PARTITIONS)]
    finally:
        consumer.close()


def test_word_count_is_exactly_once_through_a_kill(server, java, tmp_path):
    """600 lines of three words each, the application killed with SIGKILL after the first half
    and started again on the same state directory: each word's counts in the output
    (read_committed) are exactly 1, 2, ..., its total, and the repartition topic's start has
    moved on (DeleteRecords)."""
    bootstrap = server.bootstrap
    source, sink = unique_topic("wc-in"), unique_topic("wc-out")
    create_topic(bootstrap, source, partitions=PARTITIONS)
    create_topic(bootstrap, sink, partitions=PARTITIONS)
    application = unique_id("wc")
    lines = [f"w{i % 7} v{i % 11} u{i % 13}" for i in range(LINES)]
    expected = collections.Counter(word for line in lines for word in line.split())
    state = tmp_path / "state"

    first = WordCount(java, bootstrap, source, sink, application, state, 1)
    # The first half arrives over about three seconds: the kill lands while it is processed.
    feeding = threading.Thread(target=produce_lines, args=(bootstrap, source, lines[: LINES // 2], 0.01))
    try:
        first.wait_running()
        feeding.start()
        deadline = Deadline(60)
        while not read_committed_pairs(bootstrap, sink):
            assert not deadline.expired(), "no output within 60 s:\n" + "".join(first.stderr)
        first.stop(signal.SIGKILL)
    finally:
        first.stop(signal.SIGKILL)
        if feeding.ident is not None:
            feeding.join(60)
    second = WordCount(java, bootstrap, source, sink, application, state, 1)
    try:
        produce_lines(bootstrap, source, lines[LINES // 2:])
        deadline = Deadline(120)
        while True:
            counts: dict[str, list[int]] = collections.defaultdict(list)
            for word, count in read_committed_pairs(bootstrap, sink):
                counts[word].append(int(count))
            if {word: c[-1] for word, c in counts.items()} == dict(expected):
                break
            assert not deadline.expired(), (
                f"counts not final within 120 s: {dict((w, c[-1]) for w, c in counts.items())}\n"
                + "".join(second.stderr))
        for word, total in expected.items():
            assert counts[word] == list(range(1, total + 1)), f"{word}: {counts[word]}"
        repartition = f"{application}-words-repartition"
        deadline = Deadline(30)
        while sum(earliest_offsets(bootstrap, repartition)) == 0:
            assert not deadline.expired(), "the repartition topic was never trimmed"
    finally:
        second.stop()
