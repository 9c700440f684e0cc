"""The client matrix on a three-node `weir dev-cluster`: librdkafka, the Java client, franz-go,
kafka-python, KafkaJS and kcat each produce (acks=all, idempotent) to a topic replicated three
times while a consumer of the same client reads it in a consumer group, and the leader of one
of its partitions is killed (-9) midway and comes back afterwards.

Every record fed to the producer is in the log exactly once, in the order it was sent within
its partition, at the offset its acknowledgement named; the group member reads all of them and
its committed offsets are the partitions' ends.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from clients import admin, committed, group_consumer, kafka_python_consumer, kafka_python_producer, read_confluent, unique_group, unique_topic
from harness import REPO_ROOT, Deadline
from test_cluster import DevCluster, free_base_port
from test_franz_go import build_franz_go
from test_java import JARS_DIR, JVM_FLAGS, compile_java

PARTITIONS = 3
COUNT = 1200  # records fed to each producer
RATE = 150  # records a second
KILL_AT = 300  # the leader of partition 0 is killed once this many were fed
COMPAT_DIR = REPO_ROOT / "compat"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = DevCluster(tmp_path_factory.mktemp("matrix") / "cluster", free_base_port())
    started.start()
    yield started
    try:
        started.stop()
    finally:
        started.kill()


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """The compiled Java programs and the franz-go program."""
    classes = tmp_path_factory.mktemp("matrix_java")
    return {"java": compile_java(classes), "classes": classes, "franz": build_franz_go()}


class Process:
    """A client program fed on stdin, whose stdout is collected by a thread; ``finish`` closes
    its stdin and returns what it printed, failing with its stderr if it exits non-zero."""

    def __init__(self, argv: list[str], workdir, name: str, cwd=None):
        self.name = name
        self.stderr_path = workdir / f"{name}.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=cwd,
                env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
            )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def write(self, text: str):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self, timeout: float = 150, close_stdin: bool = True) -> str:
        if close_stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{self.name} still running after {timeout} s:\n{self.stderr()}") from None
        self.reader.join(10)
        assert code == 0, f"{self.name} exited {code}:\n{self.stderr()}"
        return "".join(self.lines)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-5000:]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# ---------------------------------------------------------------------------------
# Producers: send(value) as values are fed, finish() -> [(partition, offset, value)] acknowledged
# (None where the client reports no offsets: kcat, whose exit status says every line was delivered)
# ---------------------------------------------------------------------------------

class LibrdkafkaProducer:
    def __init__(self, cluster, topic, workdir, tools):
        self.topic = topic
        self.acked, self.failed = [], []
        self.producer = Producer({
            "bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "log.connection.close": False,
        })

    def _report(self, err, msg):
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value().decode()))

    def send(self, value: str):
        self.producer.produce(self.topic, value=value.encode(), on_delivery=self._report)
        self.producer.poll(0)

    def finish(self):
        assert self.producer.flush(120) == 0, "librdkafka: records still undelivered after 120 s"
        assert not self.failed, self.failed[:5]
        return self.acked

    def kill(self):
        pass


class KafkaPythonProducer:
    def __init__(self, cluster, topic, workdir, tools):
        self.topic = topic
        self.producer = kafka_python_producer(cluster.bootstrap, acks="all", enable_idempotence=True, retries=1000, retry_backoff_ms=200, delivery_timeout_ms=120000)
        self.futures = []

    def send(self, value: str):
        self.futures.append((value, self.producer.send(self.topic, value=value.encode())))

    def finish(self):
        self.producer.flush(timeout=120)
        acked = []
        for value, future in self.futures:
            md = future.get(timeout=1)
            acked.append((md.partition, md.offset, value))
        self.producer.close(timeout=10)
        return acked

    def kill(self):
        self.producer.close(timeout=0)


def acknowledged(delivered, values) -> list[tuple[int, int, str]]:
    """A driver's [[partition, offset, timestamp]] in send order, paired with the values sent."""
    return [(p, o, v) for (p, o, _ts), v in zip(delivered, values, strict=True)]


class JavaProducer:
    def __init__(self, cluster, topic, workdir, tools):
        self.values = []
        self.process = Process([tools["java"], *JVM_FLAGS, "-cp", f"{tools['classes']}:{JARS_DIR}/*", "weir.compat.Produce", cluster.bootstrap, topic], workdir, "java-produce")

    def send(self, value: str):
        self.values.append(value)
        self.process.write(f"~\t{b64(value)}\n")

    def finish(self):
        delivered = json.loads(self.process.finish())["delivered"]
        return acknowledged(delivered, self.values)

    def kill(self):
        self.process.kill()


class FranzGoProducer:
    def __init__(self, cluster, topic, workdir, tools):
        self.values = []
        self.process = Process([str(tools["franz"]), "produce", cluster.bootstrap, topic, "none"], workdir, "franz-go-produce")
        self.process.write('{"records":[')

    def send(self, value: str):
        separator = "," if self.values else ""
        self.values.append(value)
        self.process.write(separator + json.dumps({"key": None, "value": b64(value), "headers": []}) + "\n")

    def finish(self):
        self.process.write("]}\n")
        delivered = json.loads(self.process.finish())["delivered"]
        return acknowledged(delivered, self.values)

    def kill(self):
        self.process.kill()


class KafkaJSProducer:
    def __init__(self, cluster, topic, workdir, tools):
        self.process = Process(["node", str(COMPAT_DIR / "kafkajs" / "produce_lines.js"), cluster.bootstrap, topic, str(PARTITIONS)], workdir, "kafkajs-produce", cwd=COMPAT_DIR)

    def send(self, value: str):
        self.process.write(value + "\n")

    def finish(self):
        return [tuple(row) for row in json.loads(self.process.finish())["acked"]]

    def kill(self):
        self.process.kill()


class KcatProducer:
    def __init__(self, cluster, topic, workdir, tools):
        kcat = shutil.which("kcat")
        assert kcat, "kcat is not on PATH (scripts/test.sh installs the Debian package 'kcat')"
        self.process = Process([kcat, "-P", "-b", cluster.bootstrap, "-t", topic, "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=5"], workdir, "kcat-produce")

    def send(self, value: str):
        self.process.write(value + "\n")

    def finish(self):
        self.process.finish()
        return None

    def kill(self):
        self.process.kill()


# ---------------------------------------------------------------------------------
# Group consumers: started before the producer; finish() -> the values read, once COUNT are in
# ---------------------------------------------------------------------------------

class ThreadConsumer:
    """A Python client's group member polling in a thread until it read COUNT distinct values,
    then committing synchronously and leaving."""

    def __init__(self, cluster, topic, group, workdir, tools):
        self.values, self.error = set(), None
        self.consumer = self.make(cluster.bootstrap, group, topic)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            deadline = Deadline(120)
            while len(self.values) < COUNT and not deadline.expired():
                self.values.update(self.poll())
            self.commit_and_close()
        except Exception as exc:  # reported by finish
            self.error = exc

    def finish(self):
        self.thread.join(150)
        assert not self.thread.is_alive(), f"still consuming: {len(self.values)} of {COUNT}"
        assert self.error is None, repr(self.error)
        return self.values

    def kill(self):
        pass


class LibrdkafkaConsumer(ThreadConsumer):
    def make(self, bootstrap, group, topic):
        consumer = group_consumer(bootstrap, group)
        consumer.subscribe([topic])
        return consumer

    def poll(self):
        return [m.value().decode() for m in self.consumer.consume(num_messages=500, timeout=0.2) if m.error() is None]

    def commit_and_close(self):
        self.consumer.commit(asynchronous=False)
        self.consumer.close()


class KafkaPythonConsumer(ThreadConsumer):
    def make(self, bootstrap, group, topic):
        consumer = kafka_python_consumer(bootstrap, group_id=group, heartbeat_interval_ms=500)
        consumer.subscribe([topic])
        return consumer

    def poll(self):
        return [r.value.decode() for batch in self.consumer.poll(timeout_ms=200).values() for r in batch]

    def commit_and_close(self):
        self.consumer.commit()
        self.consumer.close()


class JavaConsumer:
    def __init__(self, cluster, topic, group, workdir, tools):
        self.process = Process(
            [tools["java"], *JVM_FLAGS, "-cp", f"{tools['classes']}:{JARS_DIR}/*", "weir.compat.GroupConsume", cluster.bootstrap, topic, str(PARTITIONS), group, str(COUNT), "1"],
            workdir, "java-group-consume",
        )

    def finish(self):
        [member] = json.loads(self.process.finish())["members"]
        return {base64.b64decode(row[3]).decode() for row in member["records"]}

    def kill(self):
        self.process.kill()


class FranzGoConsumer:
    def __init__(self, cluster, topic, group, workdir, tools):
        self.process = Process([str(tools["franz"]), "group-consume", cluster.bootstrap, topic, group, "matrix-franz-go"], workdir, "franz-go-group-consume")

    def finish(self):
        deadline = Deadline(120)
        while not any(json.loads(line).get("count", 0) >= COUNT for line in list(self.process.lines) if '"consumed"' in line):
            assert self.process.proc.poll() is None, f"franz-go member exited:\n{self.process.stderr()}"
            assert not deadline.expired(), f"franz-go member short of {COUNT} records:\n{self.process.stderr()}"
            time.sleep(0.05)
        self.process.write("stop\n")
        done = json.loads(self.process.finish().splitlines()[-1])
        assert done["event"] == "done" and done["errors"] == 0, done
        return {base64.b64decode(row[3]).decode() for row in done["records"]}

    def kill(self):
        self.process.kill()


class KafkaJSConsumer:
    def __init__(self, cluster, topic, group, workdir, tools):
        self.process = Process(["node", str(COMPAT_DIR / "kafkajs" / "consume_group.js"), cluster.bootstrap, topic, group, str(COUNT)], workdir, "kafkajs-group-consume", cwd=COMPAT_DIR)

    def finish(self):
        return {base64.b64decode(r["value"]).decode() for r in json.loads(self.process.finish())["records"]}

    def kill(self):
        self.process.kill()


class KcatConsumer:
    """kcat's balanced (group) consumer, stopped with SIGTERM once it printed COUNT values; it
    commits what it read as it leaves."""

    def __init__(self, cluster, topic, group, workdir, tools):
        kcat = shutil.which("kcat")
        assert kcat, "kcat is not on PATH (scripts/test.sh installs the Debian package 'kcat')"
        self.process = Process([kcat, "-b", cluster.bootstrap, "-G", group, "-q", "-u", "-f", "%s\\n", "-X", "auto.offset.reset=earliest", topic], workdir, "kcat-group-consume")

    def finish(self):
        deadline = Deadline(120)
        while len(set(self.process.lines)) < COUNT:
            assert self.process.proc.poll() is None, f"kcat exited:\n{self.process.stderr()}"
            assert not deadline.expired(), f"kcat read {len(self.process.lines)} of {COUNT}:\n{self.process.stderr()}"
            time.sleep(0.05)
        self.process.proc.send_signal(signal.SIGTERM)
        return {line.rstrip("\n") for line in self.process.finish(close_stdin=False).splitlines()}

    def kill(self):
        self.process.kill()


CLIENTS = {
    "librdkafka": (LibrdkafkaProducer, LibrdkafkaConsumer),
    "java": (JavaProducer, JavaConsumer),
    "franz-go": (FranzGoProducer, FranzGoConsumer),
    "kafka-python": (KafkaPythonProducer, KafkaPythonConsumer),
    "kafkajs": (KafkaJSProducer, KafkaJSConsumer),
    "kcat": (KcatProducer, KcatConsumer),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_produces_and_consumes_in_a_group_across_a_leader_kill(cluster, tools, client, tmp_path):
    producer_kind, consumer_kind = CLIENTS[client]
    topic, group = unique_topic(f"matrix-{client}"), unique_group(f"matrix-{client}")
    # The node an earlier case killed may still be registering again if that case failed.
    cluster.wait_registered()
    admin(cluster.bootstrap).create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})]
    )[topic].result(timeout=30)
    cluster.wait_in_sync(topic)

    values = [f"{client}-{i:05d}" for i in range(COUNT)]
    consumer = consumer_kind(cluster, topic, group, tmp_path, tools)
    producer = producer_kind(cluster, topic, tmp_path, tools)
    killed = None
    try:
        began = time.monotonic()
        for i, value in enumerate(values):
            if i == KILL_AT:
                killed = cluster.leader(topic, 0)
                cluster.kill_node(killed)
            time.sleep(max(0.0, began + i / RATE - time.monotonic()))
            producer.send(value)
        acked = producer.finish()
        consumed = consumer.finish()
    finally:
        producer.kill()
        consumer.kill()
        if killed is not None:
            cluster.restart_node(killed)

    # The log holds every value once, in order within each partition, where it was acknowledged.
    logged = read_confluent(cluster.bootstrap, topic, range(PARTITIONS))
    in_log = [rec.value.decode() for p in range(PARTITIONS) for rec in logged[p]]
    assert len(in_log) == len(set(in_log)), f"{client}: {len(in_log) - len(set(in_log))} duplicates in the log"
    assert set(in_log) == set(values), f"{client}: {len(set(values) - set(in_log))} records missing from the log\n{cluster.logs()}"
    for p in range(PARTITIONS):
        sent_order = [rec.value.decode() for rec in logged[p]]
        assert sent_order == sorted(sent_order), f"{client}: partition {p} out of order"
    if acked is not None:
        at = {(p, rec.offset): rec.value.decode() for p in range(PARTITIONS) for rec in logged[p]}
        moved = [(p, o, v) for p, o, v in acked if at.get((p, o)) != v]
        assert not moved and len(acked) == COUNT, f"{client}: {len(moved)} acknowledgements name another offset: {moved[:5]}"

    # The group read everything and committed the ends.
    assert consumed >= set(values), f"{client}: the group member missed {len(set(values) - consumed)} records"
    ends = {p: logged[p][-1].offset + 1 for p in range(PARTITIONS) if logged[p]}
    deadline = Deadline(30)
    while (got := committed(cluster.bootstrap, group, topic, ends)) != ends:
        assert not deadline.expired(), f"{client}: committed {got}, ends {ends}"
        time.sleep(0.5)
    cluster.wait_in_sync(topic, timeout=90)
