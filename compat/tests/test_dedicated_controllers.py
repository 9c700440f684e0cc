"""Dedicated controllers: three `weir server --process-roles controller` nodes form the metadata
quorum with no Kafka listener, and three broker-only nodes serve the clients. Killing the active
controller (-9) elects another among the controllers while the brokers and their clients go
on, and the killed one rejoins when it restarts."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

import weir_cli
from clients import admin, expected_log, assert_same_log, make_records, produce_confluent, read_confluent, unique_topic
from weir_cluster import Deadline, free_base_port, weir_binary

CONTROLLERS = (1, 2, 3)
BROKERS = (4, 5, 6)
NODES = len(CONTROLLERS) + len(BROKERS)


class Nodes:
    """Six `weir server` processes: dedicated controllers 1–3 and broker-only nodes 4–6."""

    def __init__(self, root: Path):
        self.root = root
        self.base = free_base_port(NODES)
        self.quorum = ",".join(f"{n}@127.0.0.1:{self.controller_port(n)}" for n in CONTROLLERS)
        self.processes: dict[int, subprocess.Popen] = {}
        self.started: dict[int, int] = {}

    def kafka_port(self, node: int) -> int:
        return self.base + node - 1

    def controller_port(self, node: int) -> int:
        return self.base + 100 + node - 1

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka_port(n)}" for n in BROKERS)

    def log(self, node: int) -> str:
        path = self.root / f"node-{node}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, node: int) -> None:
        command = [str(weir_binary()), "server", "--node-id", str(node), "--data-dir", str(self.root / f"node-{node}"), "--controller-quorum", self.quorum]
        if node in CONTROLLERS:
            command += ["--process-roles", "controller"]
        else:
            command += ["--listen", f"127.0.0.1:{self.kafka_port(node)}", "--controller-listen", f"127.0.0.1:{self.controller_port(node)}"]
        with open(self.root / f"node-{node}.log", "ab") as log:
            self.processes[node] = subprocess.Popen(command, stdout=log, stderr=log)
        self.started[node] = self.started.get(node, 0) + 1

    def wait_ready(self, nodes, timeout: float = 60) -> None:
        deadline = Deadline(timeout)
        for node in nodes:
            while self.log(node).count("weir ready") < self.started[node]:
                assert self.processes[node].poll() is None, self.log(node)[-3000:]
                assert not deadline.expired(), f"node {node} never ready:\n{self.log(node)[-3000:]}"
                time.sleep(0.1)

    def kill(self, node: int) -> None:
        process = self.processes.pop(node)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.kill()
            process.wait(timeout=30)


@pytest.fixture
def nodes(tmp_path):
    cluster = Nodes(tmp_path)
    try:
        for node in CONTROLLERS + BROKERS:
            cluster.start(node)
        cluster.wait_ready(CONTROLLERS + BROKERS)
        yield cluster
    finally:
        cluster.stop_all()


def quorum_status(bootstrap: str) -> str:
    return weir_cli.run(["cluster", "status"], bootstrap, deadline=30).stdout


def quorum_leader(bootstrap: str) -> int | None:
    found = re.search(r"^metadata quorum:\s+leader (\d+)", quorum_status(bootstrap), re.M)
    return int(found.group(1)) if found else None


def create(bootstrap: str, name: str, timeout: float) -> float:
    """Creates a three-replica topic, retrying until ``timeout``; the seconds it took."""
    began = time.monotonic()
    deadline = Deadline(timeout)
    while True:
        future = admin(bootstrap).create_topics(
            [NewTopic(name, num_partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})],
            request_timeout=10,
        )[name]
        try:
            future.result(timeout=15)
            return time.monotonic() - began
        except Exception as error:  # noqa: BLE001 - retried until the deadline
            if "already exists" in str(error):
                return time.monotonic() - began
            assert not deadline.expired(), f"topic {name} not created in {timeout} s: {error}"
            time.sleep(0.5)


def test_dedicated_controllers_lead_the_quorum_while_brokers_serve_clients(nodes):
    bootstrap = nodes.bootstrap
    for node in CONTROLLERS:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", nodes.kafka_port(node)), timeout=2).close()
    assert set(admin(bootstrap).list_topics(timeout=20).brokers) == set(BROKERS)
    first = quorum_leader(bootstrap)
    assert first in CONTROLLERS, quorum_status(bootstrap)

    topic = unique_topic("dedicated")
    create(bootstrap, topic, timeout=30)
    before = make_records(300, seed=1, tag="before")
    delivered = produce_confluent(bootstrap, topic, before, acks="all", **{"enable.idempotence": True})

    nodes.kill(first)
    took = create(bootstrap, unique_topic("after-kill"), timeout=30)
    second = quorum_leader(bootstrap)
    assert second in CONTROLLERS and second != first, quorum_status(bootstrap)
    print(f"active controller {first} killed: {second} elected, a topic created {took:.1f} s later")
    assert took < 15, f"metadata changes resumed only after {took:.1f} s"

    after = make_records(300, seed=2, tag="after")
    delivered += produce_confluent(bootstrap, topic, after, acks="all", **{"enable.idempotence": True})
    stored = read_confluent(bootstrap, topic, range(3))
    assert_same_log(stored, expected_log(before + after, delivered), "across the controller's death")

    nodes.start(first)
    nodes.wait_ready([first])
    deadline = Deadline(60)
    while not re.search(rf"^  voter {first}  log end \d+", quorum_status(bootstrap), re.M):
        assert not deadline.expired(), quorum_status(bootstrap)
        time.sleep(0.5)


def test_roles_that_contradict_the_quorum_are_refused(tmp_path):
    quorum = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"
    cases = [
        (["--node-id", "7", "--process-roles", "controller"], "runs a controller only as a voter"),
        (["--node-id", "1", "--process-roles", "broker"], "so it is a controller"),
        (["--node-id", "1", "--process-roles", "router"], "unknown role `router`"),
    ]
    for args, message in cases:
        done = subprocess.run(
            [str(weir_binary()), "server", "--data-dir", str(tmp_path / "d"), "--controller-quorum", quorum, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode != 0 and message in done.stderr, done.stderr
