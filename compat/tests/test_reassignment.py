"""Scaling out: a broker-only fourth node joins a running three-node `weir dev-cluster` (it
follows the metadata quorum as an observer), and `weir partitions reassign` moves every replica
of node 1 of a topic living on nodes 1–3 to it while an idempotent acks=all producer writes. The move copies first and switches after: no
acknowledged write is lost or duplicated, the new placement holds, node 1 deletes its copies,
and a preferred election gives each partition its first replica as leader. Kafka's own
kafka-reassign-partitions and kafka-leader-election tools work against the same APIs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic

from clients import (
    Rec,
    admin,
    assert_same_log,
    confluent_consumer,
    expected_log,
    make_records,
    produce_confluent,
    read_confluent,
    unique_topic,
    wait_for_partitions,
)
from harness import Deadline
from weir_cluster import DevCluster, free_base_port
import weir_cli
from test_java import JARS_DIR, JVM_FLAGS

NODES = 4
PARTITIONS = 3
RECORDS = 3000
PER_SECOND = 400


def start_broker_only(cluster: DevCluster, node: int, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Starts broker-only node ``node`` (not in the quorum list) joining ``cluster``, as an
    operator adds a broker to a running cluster; returns it and its Kafka address."""
    template = [arg.decode() for arg in cluster.commands[1]]
    quorum = template[template.index("--controller-quorum") + 1]
    kafka = f"127.0.0.1:{cluster.base_port + node - 1}"
    controller = f"127.0.0.1:{cluster.base_port + 100 + node - 1}"
    node_dir = cluster.data_dir / f"node-{node}"
    node_dir.mkdir(parents=True, exist_ok=True)
    command = [
        template[0], "server", "--node-id", str(node), "--data-dir", str(node_dir),
        "--listen", kafka, "--controller-listen", controller, "--controller-quorum", quorum,
    ]
    with open(node_dir / "server.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=log, env={**os.environ, **env})
    deadline = Deadline(60)
    while node not in admin(cluster.bootstrap).list_topics(timeout=10).brokers:
        assert process.poll() is None, (node_dir / "server.log").read_text()[-3000:]
        assert not deadline.expired(), "the new broker never registered"
        time.sleep(0.2)
    return process, kafka


def create_on_1_and_2(bootstrap: str, topic: str, config: dict | None = None) -> None:
    """Creates a one-partition topic on nodes 1 and 2 and waits until every node knows it, so
    a command sent to any of them next finds it."""
    new = NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]], config=config or {})
    admin(bootstrap).create_topics([new])[topic].result(timeout=30)
    for node in bootstrap.split(","):
        wait_for_partitions(node, topic, 1)


@pytest.fixture
def four_nodes(tmp_path):
    """A three-node cluster (brokers and the metadata quorum) joined, while running, by a
    fourth, broker-only node."""
    # Retention runs every second, so a test can have it delete a log's head.
    env = {"WEIR_LOG_RETENTION_CHECK_INTERVAL_MS": "1000"}
    cluster = DevCluster(tmp_path / "cluster", free_base_port(NODES), nodes=NODES - 1, env=env)
    added = None
    try:
        cluster.start()
        added, kafka = start_broker_only(cluster, NODES, env)
        yield cluster.data_dir, f"{cluster.bootstrap},{kafka}"
    finally:
        if added is not None:
            added.kill()
            added.wait(timeout=30)
        cluster.kill()


def weir(bootstrap: str, *args: str, timeout: float = 180) -> weir_cli.CliResult:
    """`weir ARGS --brokers BOOTSTRAP`, bounded by ``timeout``."""
    return weir_cli.run(list(args), bootstrap, deadline=timeout)


def partitions_of(bootstrap: str, topic: str):
    client = admin(bootstrap)
    return client.describe_topics(TopicCollection([topic]))[topic].result(timeout=10).partitions


def wait_for_placement(bootstrap: str, topic: str, want: dict, told: str) -> None:
    """Waits until the metadata shows each partition's (replicas, sorted ISR) of `want`. A move
    reported done is done on the broker asked; the one this client asks may apply the move's
    last image a heartbeat later."""
    deadline = Deadline(5)
    while True:
        seen = {p.id: ([r.id for r in p.replicas], sorted(r.id for r in p.isr)) for p in partitions_of(bootstrap, topic)}
        if seen == want:
            return
        assert not deadline.expired(), (seen, want, told)
        time.sleep(0.1)


def node_logs(data_dir: Path, node: int, topic: str) -> list[str]:
    logs = data_dir / f"node-{node}" / "logs"
    return sorted(p.name for p in logs.glob(f"{topic}-*")) if logs.exists() else []


def test_reassignment_onto_a_fourth_broker_under_load_loses_nothing(four_nodes):
    data_dir, bootstrap = four_nodes
    topic = unique_topic("moved")
    placement = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    created = admin(bootstrap).create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replica_assignment=[placement[p] for p in range(PARTITIONS)], config={"min.insync.replicas": "2"})]
    )
    created[topic].result(timeout=30)
    deadline = Deadline(30)
    while any(len(p.isr) != 3 for p in partitions_of(bootstrap, topic)):
        assert not deadline.expired(), "the new topic's ISRs never filled"
        time.sleep(0.2)
    assert node_logs(data_dir, 4, topic) == []

    # An idempotent acks=all producer writes for RECORDS / PER_SECOND seconds; the move starts
    # a second in.
    records = make_records(RECORDS, seed=41, tag="move")
    delivered: list = []
    failure: list = []

    def produce():
        try:
            delivered.extend(
                produce_confluent(bootstrap, topic, records, per_second=PER_SECOND, acks="all", **{"enable.idempotence": True})
            )
        except BaseException as error:  # reported by the main thread
            failure.append(error)

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(1.0)
    moved = weir(bootstrap, "partitions", "reassign", topic, "--replace", "1=4", "--wait-timeout", "120")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert f"started: {PARTITIONS} of {PARTITIONS} partitions" in moved.stdout, moved.stdout
    assert f"reassigned {PARTITIONS} partitions in" in moved.stdout, moved.stdout
    assert "copying to 4" in moved.stdout, moved.stdout
    producer.join(timeout=120)
    assert not producer.is_alive(), "the producer never finished"
    assert not failure, failure
    assert producer_was_writing_during(moved, delivered)

    # The new placement: node 4 where node 1 was, every replica in sync, nothing left moving.
    want = {p: [4 if r == 1 else r for r in placement[p]] for p in range(PARTITIONS)}
    wait_for_placement(bootstrap, topic, {p: (w, sorted(w)) for p, w in want.items()}, moved.stdout)
    listed = weir(bootstrap, "partitions", "reassignments")
    assert listed.returncode == 0 and "no reassignment in progress" in listed.stdout, listed.stdout + listed.stderr
    deadline = Deadline(30)
    while node_logs(data_dir, 1, topic):
        assert not deadline.expired(), f"node 1 kept its copies: {node_logs(data_dir, 1, topic)}"
        time.sleep(0.2)
    assert node_logs(data_dir, 4, topic) == [f"{topic}-{p}" for p in range(PARTITIONS)]

    # Every acknowledged write is there once, in order, with its acknowledged offset.
    expected = expected_log(records, delivered)
    assert_same_log(read_confluent(bootstrap, topic, range(PARTITIONS)), expected, "after the move")

    # The preferred replicas lead after a preferred election.
    elected = weir(bootstrap, "partitions", "elect-leaders", topic)
    assert elected.returncode == 0, elected.stdout + elected.stderr
    deadline = Deadline(30)
    while any(p.leader.id != p.replicas[0].id for p in partitions_of(bootstrap, topic)):
        assert not deadline.expired(), [(p.id, p.leader.id, [r.id for r in p.replicas]) for p in partitions_of(bootstrap, topic)]
        time.sleep(0.2)


def producer_was_writing_during(moved: weir_cli.CliResult, delivered: list) -> bool:
    """The move ran while the load did: it reported copying, and the producer's records span
    more than the move's first second (a sanity check that the test exercised the overlap)."""
    return "copying to" in moved.stdout and len(delivered) == RECORDS


def test_a_new_replica_starts_at_the_leaders_log_start_when_retention_deleted_the_head(four_nodes):
    """A replica added to a topic whose first segments retention deleted cannot fetch from
    offset 0 (OFFSET_OUT_OF_RANGE): it asks the leader for its log start and copies from there."""
    _, bootstrap = four_nodes
    topic = unique_topic("old")
    config = {"segment.bytes": "1048576", "retention.bytes": "2097152"}
    create_on_1_and_2(bootstrap, topic, config)
    records = [Rec(key=None, value=bytes([i % 251]) * 1000) for i in range(6000)]
    produce_confluent(bootstrap, topic, records, acks="all")
    deadline = Deadline(30)
    while low_watermark(bootstrap, topic) == 0:
        assert not deadline.expired(), "retention never deleted the head"
        time.sleep(0.2)
    start = low_watermark(bootstrap, topic)
    moved = weir(bootstrap, "partitions", "reassign", topic, "--replicas", "1,3", "--wait-timeout", "60")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    wait_for_placement(bootstrap, topic, {0: ([1, 3], [1, 3])}, moved.stdout)
    # Node 3 now leads alone with node 1 out of the way: it serves from the leader's start.
    elected = weir(bootstrap, "partitions", "reassign", topic, "--replicas", "3", "--allow-replication-factor-change")
    assert elected.returncode == 0, elected.stdout + elected.stderr
    deadline = Deadline(30)
    while partitions_of(bootstrap, topic)[0].leader.id != 3:
        assert not deadline.expired(), "node 3 never led"
        time.sleep(0.2)
    read = read_confluent(bootstrap, topic, [0])[0]
    assert read[0].offset >= start and read[-1].offset == len(records) - 1, (start, read[0].offset, read[-1].offset)
    assert [r.offset for r in read] == list(range(read[0].offset, len(records)))
    assert all(r.value == records[r.offset].value for r in read), "a record differs from what was acknowledged"


def low_watermark(bootstrap: str, topic: str) -> int:
    consumer = confluent_consumer(bootstrap)
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return low
    finally:
        consumer.close()


def kafka_tool(main_class: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """One of Kafka's own admin tools (kafka-tools, from .cache/kafka-jars) against Weir."""
    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    return subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", main_class, "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=120,
    )


def test_kafkas_reassignment_and_election_tools_move_a_partition(four_nodes, tmp_path):
    """kafka-reassign-partitions --execute, then --verify until it reports completion, and
    kafka-leader-election, as an operator coming from Kafka would run them."""
    _, bootstrap = four_nodes
    topic = unique_topic("kafka-tool")
    create_on_1_and_2(bootstrap, topic)
    records = make_records(200, seed=5, tag="tool")
    # Idempotent, as the other producers here: a write retried after a timeout must not be
    # appended twice (the tools are what this test is about).
    delivered = produce_confluent(bootstrap, topic, records, acks="all", **{"enable.idempotence": True})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 4]}]}))
    reassign = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    executed = kafka_tool(reassign, bootstrap, "--reassignment-json-file", str(plan), "--execute")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert "Successfully started partition reassignment" in executed.stdout, executed.stdout
    deadline = Deadline(60)
    while True:
        verified = kafka_tool(reassign, bootstrap, "--reassignment-json-file", str(plan), "--verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        if f"Reassignment of partition {topic}-0 is completed" in verified.stdout:
            break
        assert not deadline.expired(), verified.stdout
        time.sleep(0.5)
    wait_for_placement(bootstrap, topic, {0: ([3, 4], [3, 4])}, verified.stdout)
    elected = kafka_tool("org.apache.kafka.tools.LeaderElectionCommand", bootstrap, "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert elected.returncode == 0, elected.stdout + elected.stderr
    deadline = Deadline(30)
    while partitions_of(bootstrap, topic)[0].leader.id != 3:
        assert not deadline.expired(), "the preferred replica never led"
        time.sleep(0.2)
    assert_same_log(read_confluent(bootstrap, topic, [0]), expected_log(records, delivered), "after the tool's move")


def test_refusals_and_cancellation(four_nodes):
    _, bootstrap = four_nodes
    topic = unique_topic("refused")
    create_on_1_and_2(bootstrap, topic)
    unknown = weir(bootstrap, "partitions", "reassign", topic, "--replicas", "1,9")
    assert unknown.returncode == 1 and "InvalidReplicaAssignment" in unknown.stderr, unknown.stderr
    grown = weir(bootstrap, "partitions", "reassign", topic, "--replicas", "1,2,3")
    assert grown.returncode == 1 and "InvalidReplicationFactor" in grown.stderr, grown.stderr
    nothing = weir(bootstrap, "partitions", "reassign", topic, "--cancel")
    assert nothing.returncode == 1 and "NoReassignmentInProgress" in nothing.stderr, nothing.stderr
    not_needed = weir(bootstrap, "partitions", "elect-leaders", topic)
    assert not_needed.returncode == 0 and "already led" in not_needed.stdout, not_needed.stdout + not_needed.stderr
    for p in partitions_of(bootstrap, topic):
        assert [r.id for r in p.replicas] == [1, 2], "a refusal changed the placement"
