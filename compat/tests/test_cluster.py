"""`weir dev-cluster`: three `weir server` processes forming one metadata quorum.

Topics created through any node are placed over all three brokers, each partition served by
its leader; real clients (librdkafka, kafka-python) produce to and consume from every leader,
and a consumer group is coordinated by the leader of its offsets partition. Killing the
quorum's leader elects another and metadata changes go on. Ctrl-C stops the nodes cleanly and
a restart resumes the same cluster with its data.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import NewTopic

from clients import (
    admin,
    assert_same_log,
    committed,
    expected_log,
    group_consumer,
    make_records,
    produce_confluent,
    read_confluent,
    read_kafka_python,
    unique_group,
    unique_topic,
)
import weir_cli
import wire
from harness import Deadline, weir_binary

# The cluster code is shared with the fault harness and the failover benchmark (weir_cluster.py);
# other tests import it from here (`from test_cluster import DevCluster, free_base_port`).
from weir_cluster import NODES, DevCluster, free_base_port  # noqa: F401


@pytest.fixture
def cluster(tmp_path):
    started = DevCluster(tmp_path / "cluster", free_base_port())
    yield started
    started.kill()


def test_a_three_node_cluster_places_serves_and_restarts(cluster):
    table = cluster.start()
    pids = {}
    for node in range(1, NODES + 1):
        pid_file = cluster.data_dir / f"node-{node}" / "pid"
        assert pid_file.exists(), table
        pids[node] = int(pid_file.read_text())
        assert f"{node}     {pids[node]}" in table, table
    client = admin(cluster.bootstrap)
    cluster_metadata = client.list_topics(timeout=20)
    assert sorted(cluster_metadata.brokers) == [1, 2, 3], cluster_metadata.brokers

    # Topics created through different nodes: the non-leaders forward to the active controller.
    spread, replicated = unique_topic("cluster-spread"), unique_topic("cluster-rf3")
    for name, replication, node in ((spread, 1, 0), (replicated, 3, 2)):
        through = admin(cluster.address(node + 1))
        futures = through.create_topics([NewTopic(name, num_partitions=6, replication_factor=replication)])
        futures[name].result(timeout=30)
    leaders = {}
    for name in (spread, replicated):
        # The node asked may apply the new topic a moment after the one that created it.
        deadline = Deadline(30)
        while True:
            try:
                topic = client.describe_topics(TopicCollection([name]))[name].result(timeout=20)
                break
            except Exception:
                assert not deadline.expired(), f"{name} never described\n{cluster.logs()}"
                time.sleep(0.2)
        leaders[name] = [p.leader.id for p in topic.partitions]
        for p in topic.partitions:
            replicas = [r.id for r in p.replicas]
            assert replicas[0] == p.leader.id, (name, p)
            assert len(replicas) == (1 if name == spread else 3), (name, p)
            # Every replica of a new partition is in sync.
            assert sorted(r.id for r in p.isr) == sorted(replicas), (name, p)
    assert sorted(leaders[spread]) == [1, 1, 2, 2, 3, 3], leaders

    # librdkafka produces to every leader; librdkafka and kafka-python read it all back.
    records = make_records(600, seed=8, tag="cluster")
    delivered = produce_confluent(cluster.bootstrap, spread, records, acks="all", **{"enable.idempotence": True})
    expected = expected_log(records, delivered)
    assert {p for p, _, _ in delivered} == set(range(6))
    assert_same_log(read_confluent(cluster.bootstrap, spread, range(6)), expected, "librdkafka")
    assert_same_log(read_kafka_python(cluster.bootstrap, spread, range(6)), expected, "kafka-python")

    # A consumer group, coordinated by the leader of its offsets partition, commits offsets.
    group = unique_group("cluster-group")
    consumer = group_consumer(cluster.bootstrap, group)
    consumer.subscribe([spread])
    seen = 0
    deadline = Deadline(90)
    while seen < len(records):
        assert not deadline.expired(), f"the group read {seen} of {len(records)}\n{cluster.logs()}"
        for msg in consumer.consume(num_messages=500, timeout=0.5):
            if msg.error() is None:
                seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    ends = {p: len(expected[p]) for p in range(6)}
    assert committed(cluster.bootstrap, group, spread, range(6)) == ends

    # `weir cluster status` shows the quorum: a leader, its term, and three voters in step.
    status = subprocess.run([str(weir_binary()), "cluster", "status", "--brokers", cluster.bootstrap], capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    quorum = re.search(r"^metadata quorum:\s+leader (\d), term (\d+), commit index (\d+)$", status.stdout, re.M)
    assert quorum, status.stdout
    assert len(re.findall(r"^  voter \d  log end \d+  heard from \d+ ms ago$", status.stdout, re.M)) == 3, status.stdout
    first_leader, first_term = int(quorum.group(1)), int(quorum.group(2))

    # The quorum's leader killed outright: the two left elect another and metadata changes go
    # on through either of them.
    os.kill(pids[first_leader], signal.SIGKILL)
    deadline = Deadline(30)
    while f"node {first_leader} exited" not in cluster.text():
        assert not deadline.expired(), cluster.text()
        time.sleep(0.1)
    survivors = [n for n in range(1, NODES + 1) if n != first_leader]
    after = unique_topic("cluster-after-kill")
    survivor = admin(cluster.address(survivors[0]))
    survivor.create_topics([NewTopic(after, num_partitions=3, replication_factor=1)])[after].result(timeout=30)
    seen_by = admin(cluster.address(survivors[1]))
    deadline = Deadline(30)
    while after not in seen_by.list_topics(timeout=10).topics:
        assert not deadline.expired(), cluster.logs()
        time.sleep(0.1)
    status = subprocess.run([str(weir_binary()), "cluster", "status", "--brokers", cluster.address(survivors[0])], capture_output=True, text=True, timeout=30)
    quorum = re.search(r"^metadata quorum:\s+leader (\d), term (\d+)", status.stdout, re.M)
    assert quorum and int(quorum.group(1)) in survivors and int(quorum.group(2)) > first_term, status.stdout
    del pids[first_leader]

    # Ctrl-C stops every node cleanly; the same data directory resumes the cluster.
    assert cluster.stop() == 0, cluster.text() + cluster.logs()
    for node, pid in pids.items():
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), node
        assert "stopped cleanly" in (cluster.data_dir / f"node-{node}" / "server.log").read_text(), cluster.logs()
    cluster.start()
    assert_same_log(read_confluent(cluster.bootstrap, spread, range(6)), expected, "after a restart")
    assert committed(cluster.bootstrap, group, spread, range(6)) == ends
    assert cluster.stop() == 0, cluster.text() + cluster.logs()


def quorum_view(bootstrap: str) -> tuple[int, int, list[str]] | None:
    """(leader, term, voter lines) from `weir cluster status`, or None while it has none."""
    status = subprocess.run([str(weir_binary()), "cluster", "status", "--brokers", bootstrap, "--timeout", "5"], capture_output=True, text=True, timeout=30)
    found = re.search(r"^metadata quorum:\s+leader (\d), term (\d+)", status.stdout, re.M)
    if status.returncode != 0 or not found:
        return None
    voters = re.findall(r"^  voter \d  log end \d+  heard from \d+ ms ago$", status.stdout, re.M)
    return int(found.group(1)), int(found.group(2)), voters


def test_killing_the_active_controller_twenty_times(cluster, tmp_path):
    """Kill -9 the quorum's leader twenty times, restarting it each time: every time another
    is elected and a metadata change through a survivor succeeds within a few seconds."""
    cluster.start()
    failovers = []
    try:
        for round_ in range(20):
            deadline = Deadline(60)
            while True:
                view = quorum_view(cluster.bootstrap)
                if view and len(view[2]) == NODES:
                    break
                assert not deadline.expired(), f"round {round_}: the quorum never had all three voters in step\n{cluster.logs()}"
                time.sleep(0.2)
            leader, term, _ = view
            killed_at = time.monotonic()
            cluster.kill_node(leader)
            survivor = next(n for n in range(1, NODES + 1) if n != leader)
            name = unique_topic(f"failover-{round_}")
            # A fresh client each round: a cached one may still take the killed node for its
            # controller. The survivor forwards to whichever controller leads.
            created = subprocess.run(
                [str(weir_binary()), "topic", "create", name, "-p", "1", "--brokers", cluster.address(survivor), "--timeout", "30"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert created.returncode == 0, f"round {round_}: {created.stderr}\n{cluster.logs()}"
            failovers.append(time.monotonic() - killed_at)
            view = quorum_view(cluster.address(survivor))
            assert view and view[0] != leader and view[1] > term, (round_, view)
            cluster.restart_node(leader)
    finally:
        cluster.stop()
    ordered = sorted(failovers)
    report = f"controller failovers over {len(ordered)} kills: median {ordered[len(ordered) // 2]:.2f} s, max {ordered[-1]:.2f} s"
    (tmp_path / "failover.txt").write_text(report + "\n" + " ".join(f"{t:.2f}" for t in failovers) + "\n")
    print(report)
    assert ordered[-1] < 10, report


def test_every_node_creating_the_internal_topics_at_once_stalls_no_node(cluster):
    """The first FindCoordinator of a group and of a transactional id creates
    ``__consumer_offsets`` and ``__transaction_state``. Asked of every node at once, each node
    but one finds the topic already created; none may stop applying metadata while it waits for
    the creation to reach it (each node then stalled for 30 s: its FindCoordinator unanswered,
    its Metadata stale, replicas restarted elsewhere refused as posing)."""
    cluster.start()
    addresses = cluster.bootstrap.split(",")

    def find(address: str, key_type: int) -> tuple[int, float]:
        started = time.monotonic()
        with wire.Connection(address) as conn:
            conn.send(wire.find_coordinator_v3_request(1, f"first-{key_type}", key_type))
            error, _ = wire.parse_find_coordinator(3, conn.recv_frame(timeout=20))
        return error, time.monotonic() - started

    asks = [(address, key_type) for address in addresses for key_type in (0, 1)]
    with ThreadPoolExecutor(len(asks)) as pool:
        answers = list(pool.map(lambda ask: find(*ask), asks))
    # Answered at once: the coordinator, or "not yet" (retriable) while a partition loads.
    assert all(error in (0, 14, 15) and seconds < 5 for error, seconds in answers), answers

    def knows(address: str, topic: str) -> bool:
        with wire.Connection(address) as conn:
            conn.send(wire.metadata_request(2, topic))
            described = wire.parse_metadata_v1(conn.recv_frame(timeout=5))
        return described is not None and described[0] == 0 and all(leader >= 0 for _, leader in described[1])

    deadline = Deadline(5)
    for address in addresses:
        for topic in ("__consumer_offsets", "__transaction_state"):
            while not knows(address, topic):
                assert not deadline.expired(), f"{address} does not show {topic} led 5 s after it was created"
                time.sleep(0.1)


def test_a_controller_mutation_rate_holds_for_the_whole_cluster(cluster):
    """``controller_mutation_rate`` is counted by the controller leading the quorum, as Kafka's
    active controller counts it: a client creating topics through each node in turn draws on
    one bucket, not one per node."""
    cluster.start()
    weir_cli.ok(["quota", "set", "--client-id", "spread", "controller_mutation_rate=2"],
                cluster.bootstrap)
    addresses = cluster.bootstrap.split(",")
    prefix = unique_topic("mutation")

    def create(address: str, name: str, partitions: int) -> tuple[int, int]:
        # A fresh connection each time: a throttled one is muted for the pause.
        with wire.Connection(address) as conn:
            conn.send(wire.create_topics_v4_request(1, name, partitions, "spread"))
            return wire.parse_create_topics_v4(conn.recv_frame(timeout=30))

    # 22 partitions in the bucket (11 s at 2 a second): 11 through the first node, 11 through
    # the second, then 4 through the third put it 4 in debt, a 2 s throttle.
    assert create(addresses[0], f"{prefix}-1", 11) == (0, 0)
    assert create(addresses[1], f"{prefix}-2", 11)[1] == 0
    throttle_ms, error = create(addresses[2], f"{prefix}-3", 4)
    assert error == 0, "CreateTopics v4 is made and only throttled"
    assert 1_500 <= throttle_ms <= 2_100, f"one bucket for the cluster: throttled {throttle_ms} ms"
