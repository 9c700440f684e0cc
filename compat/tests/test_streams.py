"""Kafka Streams with processing.guarantee=exactly_once_v2: a word count (a repartition topic,
a changelog topic, output through transactions that also commit the consumed offsets). Every
word's counts reach the output exactly once, in order, also when the application is killed
with SIGKILL mid-stream and started again, and on three nodes when the application, the node
of its transaction coordinator or of a partition leader is killed; Streams trims its repartition topic with
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
from confluent_kafka.admin import ConfigResource, NewTopic

import weir_cli
from clients import create_topic, unique_topic, wait_for_partitions
from harness import Deadline
from test_java import JARS_DIR, JVM_FLAGS, Java, compile_java
from test_transactions import KEY_TYPE_GROUP, coordinator, read_records, unique_id
from weir_cluster import DevCluster, free_base_port

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


def read_committed_pairs(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[tuple[str, str]]:
    """Every (key, value) of ``topic`` up to its end, as a read_committed consumer reads them."""
    return [(key.decode(), value.decode()) for key, value in read_records(bootstrap, topic, partitions, "read_committed")]


def earliest_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_id("wc-earliest")})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[0] for p in range(partitions)]
    finally:
        consumer.close()


def word_lines(count: int) -> tuple[list[str], collections.Counter]:
    """``count`` lines of three words each, and how often each word occurs in them."""
    lines = [f"w{i % 7} v{i % 11} u{i % 13}" for i in range(count)]
    return lines, collections.Counter(word for line in lines for word in line.split())


def assert_counted_exactly_once(bootstrap: str, sink: str, expected: collections.Counter, application: str,
                                app: WordCount, partitions: int = PARTITIONS) -> None:
    """Waits (120 s at most) until each word's last count in ``sink`` (read_committed) is its
    total, then checks that its counts are exactly 1, 2, ..., total (none lost, none twice);
    and that Streams trims its repartition topic (DeleteRecords moves its start)."""
    deadline = Deadline(120)
    while True:
        counts: dict[str, list[int]] = collections.defaultdict(list)
        for word, count in read_committed_pairs(bootstrap, sink, partitions):
            counts[word].append(int(count))
        if {word: c[-1] for word, c in counts.items()} == dict(expected):
            break
        assert not deadline.expired(), (
            f"counts not final within 120 s: {dict((w, c[-1]) for w, c in counts.items())}\n" + "".join(app.stderr))
    for word, total in expected.items():
        assert counts[word] == list(range(1, total + 1)), f"{word}: {counts[word]}"
    repartition = f"{application}-words-repartition"
    deadline = Deadline(30)
    while sum(earliest_offsets(bootstrap, repartition, partitions)) == 0:
        assert not deadline.expired(), "the repartition topic was never trimmed"


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
    lines, expected = word_lines(LINES)
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
        assert_counted_exactly_once(bootstrap, sink, expected, application, second)
    finally:
        second.stop()


def streams_transactional_id(bootstrap: str, application: str) -> str:
    """The transactional id of the application's one stream thread (``APPLICATION-PROCESS-0``
    under exactly_once_v2), as `weir txn list` shows it once the thread has begun one."""
    deadline = Deadline(60)
    while True:
        rows = weir_cli.ok(["txn", "list"], bootstrap).stdout.splitlines()[1:]
        ids = [row.split()[0] for row in rows if row.split()[0].startswith(application + "-")]
        if ids:
            assert len(ids) == 1, ids
            return ids[0]
        assert not deadline.expired(), f"no transactional id of {application} within 60 s: {rows}"
        time.sleep(0.2)


@pytest.mark.parametrize("victim", ["transaction coordinator", "partition leader", "application instance"])
def test_word_count_on_three_nodes_is_exactly_once_through_a_kill(tmp_path, java, victim):
    """The word count on a three-node cluster (every topic three partitions, three replicas),
    input fed at a steady rate, and one process killed with SIGKILL while the application runs:
    the node of the application's transaction coordinator (the next leader of its
    `__transaction_state` partition takes the open transaction over), or a node that
    coordinates neither its transactions nor its group and so only leads partitions of the
    input, the output and Streams' internal topics, either restarted 2 s later; or the
    application itself, started again on its state directory (its new producer fences the
    dead one's and aborts its open transaction). Each word's counts are exactly 1, 2, ...,
    its total; the changelog and repartition topics are the ones Streams created, with the
    configs it asked for."""
    partitions = 3
    cluster = DevCluster(tmp_path / "cluster", free_base_port(), env={"WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})
    cluster.start()
    app = None
    try:
        bootstrap = cluster.bootstrap
        source, sink = unique_topic("wc-in"), unique_topic("wc-out")
        futures = cluster.admin().create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=3) for name in (source, sink)],
            request_timeout=30)
        for future in futures.values():
            future.result(timeout=40)
        for name in (source, sink):
            wait_for_partitions(bootstrap, name, partitions)
        application = unique_id("wc3")
        lines, expected = word_lines(900)
        app = WordCount(java, bootstrap, source, sink, application, tmp_path / "state", 3)
        app.wait_running(120)
        produce_lines(bootstrap, source, lines[:300])
        deadline = Deadline(60)
        while not read_committed_pairs(bootstrap, sink, partitions):
            assert not deadline.expired(), "no output within 60 s:\n" + "".join(app.stderr)

        txn_node = cluster.node_at(coordinator(bootstrap, streams_transactional_id(bootstrap, application)))
        group_node = cluster.node_at(coordinator(bootstrap, application, key_type=KEY_TYPE_GROUP))
        victim_node = txn_node if victim == "transaction coordinator" else min(
            set(cluster.node_ids()) - {txn_node, group_node})
        # The rest arrives over about six seconds, a line every 10 ms or so; the kill lands
        # amid it.
        feeding = threading.Thread(target=produce_lines, args=(bootstrap, source, lines[300:], 0.01))
        feeding.start()
        try:
            time.sleep(0.5)
            if victim == "application instance":
                app.stop(signal.SIGKILL)
                assert feeding.is_alive(), "the kill must land while input arrives"
                app = WordCount(java, bootstrap, source, sink, application, tmp_path / "state", 3)
                app.wait_running(120)
            else:
                cluster.kill_node(victim_node)
                assert feeding.is_alive(), "the kill must land while input arrives"
                time.sleep(2)
                cluster.restart_node(victim_node)
        finally:
            feeding.join(120)
        assert app.proc.poll() is None, "the application died:\n" + "".join(app.stderr)
        assert_counted_exactly_once(bootstrap, sink, expected, application, app, partitions)
        internal = {f"{application}-counts-changelog": "compact", f"{application}-words-repartition": "delete"}
        topics = cluster.admin().list_topics(timeout=30).topics
        assert sorted(name for name in topics if name.startswith(application)) == sorted(internal)
        for name, policy in internal.items():
            assert len(topics[name].partitions) == partitions, name
            assert all(len(p.replicas) == 3 for p in topics[name].partitions.values()), name
            resource = ConfigResource(ConfigResource.Type.TOPIC, name)
            configs = cluster.admin().describe_configs([resource])[resource].result(timeout=30)
            assert configs["cleanup.policy"].value == policy, name
    finally:
        if app is not None:
            app.stop(signal.SIGKILL)
        cluster.kill()
