"""Kafka Connect in distributed mode with exactly-once source support
(`exactly.once.source.support=enabled`), as a user runs it: workers over Weir keep their
config, offsets and status in compacted topics they create, a file source connector writes
each poll's lines to a topic in one transaction together with its source offsets
(`exactly.once.support=required`), and a file sink connector reads them back
(read_committed) into another file. The source's worker is killed with SIGKILL while lines
arrive and started again: the topic holds every line of the source exactly once, in order,
and the sink file is the source file.

Connect runs at 4.3.1 (the newest connect-file the registry serves) on its own jars, fetched
by scripts/test.sh from compat/connect/pom.xml into .cache/connect-jars.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka.admin import ConfigResource

import weir_cli
from clients import admin, create_topic, unique_topic
from harness import REPO_ROOT, Deadline, wait_until
from test_transactions import read_records, unique_id

CONNECT_JARS = REPO_ROOT / ".cache" / "connect-jars"
FIRST_LINES = 2000
LINES = 5000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ConnectWorker:
    """A `ConnectDistributed` process on ``properties``, its REST API on ``port``; its log (all
    of Connect's, at INFO) goes to ``log``."""

    def __init__(self, properties: Path, port: int, log: Path):
        java = shutil.which("java")
        assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
        assert (CONNECT_JARS / "connect-file-4.3.1.jar").is_file(), (
            f"{CONNECT_JARS} lacks Connect: run scripts/test.sh, or "
            "`mvn -q -f compat/connect/pom.xml dependency:copy-dependencies`")
        self.port = port
        self.log = log
        with open(log, "a") as out:
            self.proc = subprocess.Popen(
                [java, "-XX:+UseSerialGC", "-cp", f"{CONNECT_JARS}/*",
                 "org.apache.kafka.connect.cli.ConnectDistributed", str(properties)],
                stdout=out, stderr=subprocess.STDOUT,
            )

    def request(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as answer:
            return json.loads(answer.read() or b"null")

    def wait_ready(self, timeout: float = 90) -> None:
        def ready():
            assert self.proc.poll() is None, f"the worker exited {self.proc.returncode}:\n{self.tail()}"
            try:
                return self.request("GET", "/")
            except (urllib.error.URLError, ConnectionError):
                return None

        wait_until(ready, timeout, interval=0.5, what="Connect's REST API")

    def wait_running(self, connector: str, timeout: float = 90) -> None:
        def running():
            try:
                status = self.request("GET", f"/connectors/{connector}/status")
            except urllib.error.HTTPError:
                return None
            states = [status["connector"]["state"]] + [task["state"] for task in status["tasks"]]
            assert "FAILED" not in states, f"{connector}: {status}\n{self.tail()}"
            return len(states) > 1 and set(states) == {"RUNNING"}

        wait_until(running, timeout, interval=0.5, what=f"connector {connector} and its task to run")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def tail(self, lines: int = 60) -> str:
        return "".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-lines:])


def append_lines(path: Path, numbers: range, per_tick: int = 50, tick: float = 0.1) -> None:
    """Appends ``line-N`` for each N, ``per_tick`` lines every ``tick`` seconds."""
    for start in range(numbers.start, numbers.stop, per_tick):
        with open(path, "a") as out:
            out.writelines(f"line-{n}\n" for n in range(start, min(start + per_tick, numbers.stop)))
        time.sleep(tick)


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def transaction_state(bootstrap: str, transactional_id: str) -> str | None:
    """The state `weir txn list` shows for ``transactional_id`` (None when it is not listed)."""
    for row in weir_cli.ok(["txn", "list"], bootstrap).stdout.splitlines()[1:]:
        if row.split()[0] == transactional_id:
            return row.split()[2]
    return None


def worker_properties(path: Path, bootstrap: str, group: str, port: int, exactly_once: bool) -> Path:
    """A distributed worker's settings: group ``group``, its configs, offsets and status in
    ``GROUP-configs``, ``GROUP-offsets`` and ``GROUP-status``, strings in and out."""
    path.write_text("\n".join([
        f"bootstrap.servers={bootstrap}",
        f"group.id={group}",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        *(f"{kind}.storage.topic={group}-{kind}s" for kind in ("config", "offset")),
        f"status.storage.topic={group}-status",
        *(f"{kind}.storage.replication.factor=1" for kind in ("config", "offset", "status")),
        "offset.flush.interval.ms=500",
        f"exactly.once.source.support={'enabled' if exactly_once else 'disabled'}",
        f"listeners=http://127.0.0.1:{port}",
    ]) + "\n")
    return path


def test_exactly_once_source_through_a_worker_kill(make_weir, tmp_path):
    """The source connector runs on one Connect cluster, the sink on another (so the kill is
    the source's alone: a sink is at-least-once by Connect's design, and a killed sink writes
    again what it wrote after its last offset commit). The source's worker is killed with
    SIGKILL while lines arrive, with a transaction of the source task open (its records
    written), and a new one started (it fences the dead task's producer, whose open
    transaction is aborted, and resumes from the source offsets committed with the last
    transaction): the topic holds every line once, in order, as read_committed consumers read
    it, the aborted records are in the log as read_uncommitted consumers read it, and the sink
    file is the source file."""
    weir = make_weir("connect", env={"WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})
    bootstrap = weir.bootstrap
    topic = unique_topic("connect-lines")
    create_topic(bootstrap, topic, partitions=1)
    source_group, sink_group = unique_id("connect-source"), unique_id("connect-sink")
    source_port, sink_port = free_port(), free_port()
    source_properties = worker_properties(tmp_path / "source.properties", bootstrap, source_group, source_port, True)
    sink_properties = worker_properties(tmp_path / "sink.properties", bootstrap, sink_group, sink_port, False)
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    append_lines(source, range(1, FIRST_LINES + 1), per_tick=FIRST_LINES, tick=0)
    source_worker = ConnectWorker(source_properties, source_port, tmp_path / "connect-source.log")
    sink_worker = ConnectWorker(sink_properties, sink_port, tmp_path / "connect-sink.log")
    appending = threading.Thread(target=append_lines, args=(source, range(FIRST_LINES + 1, LINES + 1)))
    try:
        source_worker.wait_ready()
        sink_worker.wait_ready()
        source_worker.request("POST", "/connectors", {"name": "source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "file": str(source), "topic": topic, "tasks.max": "1",
            "exactly.once.support": "required",
            # A transaction every 3 s, so the kill finds one open with records written.
            "transaction.boundary": "interval", "transaction.boundary.interval.ms": "3000"}})
        sink_worker.request("POST", "/connectors", {"name": "sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "file": str(sink), "topics": topic, "tasks.max": "1",
            "consumer.override.isolation.level": "read_committed"}})
        source_worker.wait_running("source")
        sink_worker.wait_running("sink")
        wait_until(lambda: len(lines_of(sink)) >= FIRST_LINES, 60, what="the first lines in the sink file")

        # About six seconds of new lines; the source's worker dies amid them and a new one
        # takes over.
        appending.start()
        time.sleep(1)
        wait_until(lambda: transaction_state(bootstrap, f"{source_group}-source-0") == "Ongoing", 10,
                   what="the source task's transaction to be open")
        assert appending.is_alive(), "the kill must land while lines arrive"
        source_worker.kill()
        time.sleep(2)
        source_worker = ConnectWorker(source_properties, source_port, tmp_path / "connect-source.log")
        source_worker.wait_ready()
        appending.join(60)
        expected = lines_of(source)
        assert len(expected) == LINES
        deadline = Deadline(120)
        while lines_of(sink)[-1:] != expected[-1:]:
            assert not deadline.expired(), (
                f"the sink has {len(lines_of(sink))} lines after 120 s:\n{source_worker.tail()}\n{sink_worker.tail()}")
            time.sleep(0.5)

        in_topic = [value.decode() for _, value in read_records(bootstrap, topic, 1, "read_committed")]
        assert in_topic == expected, f"{len(in_topic)} records for {len(expected)} lines"
        written = len(read_records(bootstrap, topic, 1))
        assert written > len(in_topic), "no aborted record in the log: the kill found no transaction open"
        assert lines_of(sink) == expected

        # The source cluster's leader wrote its configs through the cluster's transactional id;
        # Connect's own topics are compacted.
        assert transaction_state(bootstrap, f"connect-cluster-{source_group}") is not None
        client = admin(bootstrap)
        for name in (f"{source_group}-configs", f"{source_group}-offsets", f"{source_group}-status"):
            resource = ConfigResource(ConfigResource.Type.TOPIC, name)
            configs = client.describe_configs([resource])[resource].result(timeout=30)
            assert configs["cleanup.policy"].value == "compact", name
    finally:
        if appending.ident is not None:
            appending.join(60)
        source_worker.kill()
        sink_worker.kill()
