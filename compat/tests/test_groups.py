"""Consumer groups (classic protocol) with real clients: librdkafka, kafka-python and
KafkaJS consumers join groups, split partitions, commit and resume; committed offsets
and group state survive a clean restart and a kill -9; bad group requests get Kafka's
error codes and change nothing; DeleteGroups and OffsetDelete remove what they name.

Most tests run on dedicated servers with ``group.initial.rebalance.delay.ms=0`` so that
their many rebalances are quick; the librdkafka basics and the restart test run on the
module's server with the default settings (a 3 s initial delay).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupState,
    KafkaError,
    KafkaException,
    TopicPartition,
)

import wire
from clients import (
    group_consumer,
    committed,
    describe_group,
    unique_group,
    wait_empty,
    Rec,
    Stored,
    admin,
    assert_same_log,
    confluent_consumer,
    create_topic,
    drop_admin_client,
    expected_log,
    make_records,
    norm_headers,
    produce_confluent,
    unique_topic,
)
from harness import Deadline, wait_until
from weir_cluster import coordinator_partition

COMPAT_DIR = Path(__file__).resolve().parents[1]
GROUP_CONSUMER = Path(__file__).resolve().with_name("group_consumer.py")
KAFKAJS_CONSUMER = COMPAT_DIR / "kafkajs" / "consume_group.js"
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_PARTITIONS = 50  # offsets.topic.num.partitions default

# Kafka error codes.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
INVALID_TOPIC_EXCEPTION = 17
ILLEGAL_GENERATION = 22
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
NON_EMPTY_GROUP = 68
MEMBER_ID_REQUIRED = 79
GROUP_SUBSCRIBED_TO_TOPIC = 86

API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_FIND_COORDINATOR = 10
API_JOIN_GROUP = 11
API_HEARTBEAT = 12
API_LEAVE_GROUP = 13
API_SYNC_GROUP = 14
API_DESCRIBE_GROUPS = 15
API_DELETE_GROUPS = 42


@pytest.fixture(scope="module")
def fast(make_weir):
    """A dedicated server whose first rebalance of a group does not wait for more members, and
    whose consumer-protocol (KIP-848) members heartbeat every 300 ms."""
    return make_weir(
        "groups_fast",
        env={"WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "WEIR_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "300"},
    )


@pytest.fixture(scope="module")
def expiry(make_weir):
    """A dedicated server that allows 2 s sessions, so a killed consumer's partitions move on quickly."""
    return make_weir(
        "groups_expiry",
        env={"WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "WEIR_GROUP_MIN_SESSION_TIMEOUT_MS": "1000"},
    )


# ---------------------------------------------------------------------------------
# Client helpers
# ---------------------------------------------------------------------------------

def consume(consumer: Consumer, count: int, timeout: float = 60) -> list[Stored]:
    """Poll until ``count`` records arrived (bounded); returns them in arrival order."""
    out: list[Stored] = []
    deadline = Deadline(timeout)
    while len(out) < count:
        assert not deadline.expired(), f"only {len(out)} of {count} records within {timeout:.0f}s"
        for msg in consumer.consume(num_messages=1000, timeout=0.2):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append(
                Stored(msg.partition(), msg.offset(), msg.key(), msg.value(), norm_headers(msg.headers()), msg.timestamp()[1])
            )
    return out


def by_partition(records: list[Stored]) -> dict[int, list[Stored]]:
    out: dict[int, list[Stored]] = {}
    for rec in records:
        out.setdefault(rec.partition, []).append(rec)
    return out


def listed_groups(bootstrap: str, **filters) -> dict:
    """ListGroups through librdkafka's admin client (``states=...`` filters by state)."""
    result = admin(bootstrap).list_consumer_groups(request_timeout=20, **filters).result(timeout=30)
    assert not result.errors, result.errors
    return {g.group_id: g for g in result.valid}


def high_watermarks(bootstrap: str, topic: str, partitions) -> dict[int, int]:
    probe = confluent_consumer(bootstrap)  # assign-only: never joins a group
    try:
        return {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in partitions}
    finally:
        probe.close()


def assignment_of(member) -> list[tuple[str, int]]:
    return sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)


def restarted(server, how: str) -> None:
    """Restart the server cleanly ("restart") or after SIGKILL ("kill"), then forget the shared
    admin client: after librdkafka 2.16 re-bootstraps, a client that lived through the outage
    can leave a coordinator lookup waiting on a decommissioned broker handle, sending nothing."""
    if how == "restart":
        server.restart()
    else:
        server.kill()
        server.start()
    drop_admin_client(server.bootstrap)


def produce_spread(bootstrap: str, topic: str, partitions: int, count: int, tag: str) -> dict[int, list[Stored]]:
    """``count`` keyed records spread round-robin over the partitions; the expected log."""
    records = [
        Rec(key=f"{tag}-{i}".encode(), value=f"{tag} value {i}".encode(), partition=i % partitions)
        for i in range(count)
    ]
    delivered = produce_confluent(bootstrap, topic, records)
    per_partition: dict[int, list[Stored]] = {}
    for rec, (p, offset, ts) in zip(records, delivered, strict=True):
        per_partition.setdefault(p, []).append(Stored(p, offset, rec.key, rec.value, (), ts))
    return per_partition


# ---------------------------------------------------------------------------------
# 1. librdkafka basics (default settings)
# ---------------------------------------------------------------------------------

def test_librdkafka_group_consumes_commits_and_is_listed_and_described(bootstrap):
    """A subscribed librdkafka consumer gets all 6 partitions, reads every record exactly once,
    commits synchronously (committed == high watermark, seen by Consumer.committed and by the
    admin client); the group is listed and described Stable with that member while it runs,
    Empty with no members after close. On the default 3 s initial rebalance delay."""
    topic = unique_topic("grp-rdk")
    create_topic(bootstrap, topic, partitions=6)
    records = make_records(1200, seed=41, tag="grp-rdk")
    expected = expected_log(records, produce_confluent(bootstrap, topic, records))
    assert sorted(expected) == list(range(6)), "every partition should get records"
    ends = {p: len(rows) for p, rows in expected.items()}
    group = unique_group("g-rdk")

    consumer = group_consumer(bootstrap, group, **{"client.id": "weir-groups-rdk"})
    try:
        consumer.subscribe([topic])
        got = consume(consumer, len(records))
        assert_same_log(by_partition(got), expected, context="group consumer")
        assert sorted(tp.partition for tp in consumer.assignment()) == list(range(6))

        desc = describe_group(bootstrap, group)
        assert desc.state == ConsumerGroupState.STABLE
        assert not desc.is_simple_consumer_group
        assert desc.partition_assignor == "range"  # librdkafka's first preference
        assert [m.member_id for m in desc.members] == [consumer.memberid()]
        assert desc.members[0].client_id == "weir-groups-rdk"
        assert assignment_of(desc.members[0]) == [(topic, p) for p in range(6)]
        listing = listed_groups(bootstrap)
        assert group in listing, f"{group} not listed: {sorted(listing)}"
        assert listing[group].state == ConsumerGroupState.STABLE
        assert not listing[group].is_simple_consumer_group
        assert group in listed_groups(bootstrap, states={ConsumerGroupState.STABLE})
        assert group not in listed_groups(bootstrap, states={ConsumerGroupState.EMPTY})

        done = consumer.commit(asynchronous=False)
        assert sorted((tp.partition, tp.offset, tp.error) for tp in done) == [(p, ends[p], None) for p in range(6)]
        seen = consumer.committed([TopicPartition(topic, p) for p in range(6)], timeout=20)
        assert {tp.partition: tp.offset for tp in seen} == ends
    finally:
        consumer.close()

    desc = wait_empty(bootstrap, group)
    assert desc.members == []
    assert listed_groups(bootstrap)[group].state == ConsumerGroupState.EMPTY
    assert group in listed_groups(bootstrap, states={ConsumerGroupState.EMPTY})
    assert group not in listed_groups(bootstrap, states={ConsumerGroupState.STABLE})
    assert committed(bootstrap, group, topic, range(6)) == ends


# ---------------------------------------------------------------------------------
# 2. Cooperative-sticky: three members, one leaves, one joins
# ---------------------------------------------------------------------------------

class Ledger:
    """Who owns which partition, updated from the members' rebalance callbacks under one lock,
    so that the events of all members are in one order."""

    def __init__(self):
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.events: list[tuple[str, str, frozenset]] = []  # (member, "assign"/"revoke"/"lost", partitions)
        self.violations: list[str] = []

    def assign(self, name: str, partitions) -> None:
        with self.lock:
            ps = frozenset(tp.partition for tp in partitions)
            self.events.append((name, "assign", ps))
            for p in ps:
                if p in self.owner:
                    self.violations.append(f"{name} was assigned partition {p} still owned by {self.owner[p]}")
                self.owner[p] = name

    def revoke(self, name: str, partitions, how: str = "revoke") -> None:
        with self.lock:
            ps = frozenset(tp.partition for tp in partitions)
            self.events.append((name, how, ps))
            if how == "lost":
                self.violations.append(f"{name} lost partitions {sorted(ps)}")
            for p in ps:
                if self.owner.get(p) != name:
                    self.violations.append(f"{name} revoked partition {p} owned by {self.owner.get(p)}")
                self.owner.pop(p, None)

    def owned(self) -> dict[str, set[int]]:
        with self.lock:
            out: dict[str, set[int]] = {}
            for p, name in self.owner.items():
                out.setdefault(name, set()).add(p)
            return out

    def since(self, mark: int, name: str, kind: str) -> set[int]:
        with self.lock:
            return set().union(*[ps for n, k, ps in self.events[mark:] if n == name and k == kind])


# Per group protocol: the member's settings, and the assignor the broker reports.
PROTOCOLS = {
    "classic": (
        {"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10000, "heartbeat.interval.ms": 300},
        "cooperative-sticky",
    ),
    # KIP-848: the broker assigns (its default assignor) and sets the session and heartbeat.
    "consumer": ({"group.protocol": "consumer"}, "uniform"),
}


class CooperativeMember:
    """A librdkafka consumer polling in its own thread: cooperative-sticky under the classic
    protocol, or a consumer-protocol (KIP-848) member."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ledger: Ledger, protocol: str = "classic"):
        self.name = name
        self.protocol = protocol
        self.member_id = ""
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._args = (bootstrap, group, topic, ledger)
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        bootstrap, group, topic, ledger = self._args
        settings, _assignor = PROTOCOLS[self.protocol]
        conf = {"client.id": f"coop-{self.name}", **settings}
        if self.protocol == "consumer":
            conf["heartbeat.interval.ms"] = None  # set by the broker
        consumer = group_consumer(bootstrap, group, **conf)
        try:
            consumer.subscribe(
                [topic],
                on_assign=lambda c, ps: ledger.assign(self.name, ps),
                on_revoke=lambda c, ps: ledger.revoke(self.name, ps),
                on_lost=lambda c, ps: ledger.revoke(self.name, ps, how="lost"),
            )
            while not self.stop.is_set():
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is not None:
                    self.errors.append(str(msg.error()))
                self.member_id = consumer.memberid() or ""
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
        finally:
            consumer.close()  # revokes what it owns through on_revoke, then leaves the group

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"member {self.name} did not close within 30s"


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_cooperative_sticky_members_split_and_keep_partitions(fast, protocol):
    """Three librdkafka members split 6 partitions 2/2/2 with no partition ever owned twice;
    when one closes, the other two keep theirs and split its two (3/3, nothing revoked); when
    a new member joins, it takes exactly what the old two give up (revoked incrementally) and
    they gain nothing. The broker's description (DescribeGroups, or ConsumerGroupDescribe
    for the consumer protocol) agrees with the members at every settled point. Under the
    classic protocol with the cooperative-sticky assignor; under the consumer protocol
    (KIP-848) with the broker's uniform assignor."""
    bootstrap = fast.bootstrap
    topic = unique_topic("grp-coop")
    create_topic(bootstrap, topic, partitions=6)
    group = unique_group("g-coop")
    ledger = Ledger()
    members: dict[str, CooperativeMember] = {}

    def settled(names: list[str], sizes: list[int]):
        owned = ledger.owned()
        if sorted(owned) != sorted(names):
            return False
        if set().union(*owned.values()) != set(range(6)) or sorted(len(s) for s in owned.values()) != sizes:
            return False
        desc = describe_group(bootstrap, group)
        if desc.state != ConsumerGroupState.STABLE:
            return False
        broker_view = {m.member_id: {p for t, p in assignment_of(m)} for m in desc.members}
        client_view = {members[n].member_id: owned[n] for n in names}
        return owned if broker_view == client_view else False

    def wait_settled(names, sizes, what):
        return wait_until(lambda: settled(names, sizes), 45, interval=0.2, what=what)

    try:
        for name in ("a", "b", "c"):
            members[name] = CooperativeMember(name, bootstrap, group, topic, ledger, protocol)
        three = wait_settled(["a", "b", "c"], [2, 2, 2], "three members owning 2 partitions each")
        assert describe_group(bootstrap, group).partition_assignor == PROTOCOLS[protocol][1]

        mark = len(ledger.events)
        members["c"].close()
        assert ledger.owned().get("c") is None, "a closed member still owns partitions"
        two = wait_settled(["a", "b"], [3, 3], "the two remaining members owning 3 partitions each")
        for name in ("a", "b"):
            assert two[name] >= three[name], f"{name} lost partitions when c left: {three[name]} -> {two[name]}"
            assert ledger.since(mark, name, "revoke") == set(), f"{name} had partitions revoked when c left"
        assert two["a"] | two["b"] == set(range(6))

        mark = len(ledger.events)
        members["d"] = CooperativeMember("d", bootstrap, group, topic, ledger, protocol)
        again = wait_settled(["a", "b", "d"], [2, 2, 2], "a new member d taking its share")
        moved = set()
        for name in ("a", "b"):
            assert again[name] <= two[name], f"{name} gained partitions when d joined: {two[name]} -> {again[name]}"
            gave = two[name] - again[name]
            assert ledger.since(mark, name, "revoke") == gave, f"{name}: revoked other than what moved"
            assert ledger.since(mark, name, "assign") == set(), f"{name} was assigned partitions when d joined"
            moved |= gave
        assert again["d"] == moved, f"d got {again['d']}, the others gave up {moved}"
        assert ledger.violations == [], ledger.violations
    finally:
        for member in members.values():
            member.close()
    for member in members.values():
        assert member.errors == [], f"member {member.name}: {member.errors}"
    assert ledger.violations == [], ledger.violations
    assert wait_empty(bootstrap, group).members == []


# ---------------------------------------------------------------------------------
# 3. kill -9 of a consumer: at-least-once and at-most-once
# ---------------------------------------------------------------------------------

def read_processed(path: Path) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        p, o = line.split()
        out.setdefault(int(p), []).append(int(o))
    return out


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("mode", ["at-least-once", "at-most-once"])
def test_consumer_killed_mid_stream_replacement_resumes_at_commit(expiry, tmp_path, mode):
    """A consumer process is SIGKILLed mid-stream; its session expires (group Empty) and a
    replacement in the same group starts at exactly the offsets committed at the kill. At-least-once (commit after processing every
    50): every record is processed, duplicates are exactly the records after the last commit
    (at most 50). At-most-once (commit before processing): no record is processed twice,
    and only the last committed batch (at most 50) can be lost."""
    bootstrap = expiry.bootstrap
    partitions, total, interval = 3, 1500, 50
    topic = unique_topic(f"grp-kill-{mode}")
    create_topic(bootstrap, topic, partitions=partitions)
    # Produced in small batches, and read (max.partition.fetch.bytes) about a batch per
    # partition per fetch, so that the consumer works on every partition at once.
    ends = {p: 0 for p in range(partitions)}
    for chunk in range(total // 150):
        for p, rows in produce_spread(bootstrap, topic, partitions, 150, tag=f"{mode}-{chunk}").items():
            assert rows[0].offset == ends[p]
            ends[p] += len(rows)
    group = unique_group(f"g-kill-{mode}")

    def launch(name: str) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "wb")
        try:
            return subprocess.Popen(
                [sys.executable, str(GROUP_CONSUMER), bootstrap, topic, group, str(tmp_path), name, mode, str(interval)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()

    def output(name: str) -> str:
        return (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]

    procs = []
    try:
        victim = launch("victim")
        procs.append(victim)
        wait_until(
            lambda: count_lines(tmp_path / "victim.processed") >= 600 or victim.poll() is not None,
            60, interval=0.02, what="the first consumer to process 600 records",
        )
        assert victim.poll() is None, "the first consumer stopped early:\n" + output("victim")
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        # Once its 2 s session has expired the group is Empty, and no commit the victim had
        # in flight can still land.
        wait_until(
            lambda: describe_group(bootstrap, group).state == ConsumerGroupState.EMPTY,
            30, what="the killed consumer's session to expire (group Empty)",
        )
        at_kill = committed(bootstrap, group, topic, range(partitions))
        first = read_processed(tmp_path / "victim.processed")
        # Where the replacement must start: the committed offset, or (nothing committed for
        # a partition the victim had not reached) the earliest offset, 0.
        start = {p: 0 if at_kill[p] == OFFSET_INVALID else at_kill[p] for p in range(partitions)}

        replacement = launch("replacement")
        procs.append(replacement)

        def replacement_done():
            assert replacement.poll() is None, "the replacement stopped early:\n" + output("replacement")
            got = read_processed(tmp_path / "replacement.processed")
            return all(len(got.get(p, [])) >= ends[p] - start[p] for p in range(partitions))

        wait_until(replacement_done, 60, interval=0.05, what="the replacement to reach the end of every partition")
        (tmp_path / "replacement.stop").touch()
        assert replacement.wait(timeout=30) == 0, "the replacement did not exit cleanly:\n" + output("replacement")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    second = read_processed(tmp_path / "replacement.processed")

    processed_first = sum(len(v) for v in first.values())
    assert 600 <= processed_first < total, f"the kill was not mid-stream: {processed_first} of {total} processed"
    assert sum(start.values()) > 0, f"nothing was committed before the kill: {at_kill}"
    for p in range(partitions):
        done = first.get(p, [])
        assert done == list(range(len(done))), f"partition {p}: the first consumer did not process in order from 0"
        assert at_kill[p] == OFFSET_INVALID or 0 < at_kill[p] <= ends[p], f"partition {p}: committed {at_kill[p]}"
        # The replacement starts exactly at the committed offset and reads to the end once.
        assert second.get(p, []) == list(range(start[p], ends[p])), (
            f"partition {p}: committed {at_kill[p]} at the kill, the replacement processed "
            f"{second.get(p, [])[:5]}...{second.get(p, [])[-3:]} (end {ends[p]})"
        )
    if mode == "at-least-once":
        duplicates = {p: len(first.get(p, [])) - start[p] for p in range(partitions)}
        assert all(0 <= d <= interval for d in duplicates.values()), f"duplicates per partition {duplicates}"
        assert sum(duplicates.values()) <= interval, f"duplicates {duplicates} exceed one commit interval"
        for p in range(partitions):
            assert set(first.get(p, [])) | set(second.get(p, [])) == set(range(ends[p])), f"partition {p}: records lost"
    else:
        lost = {p: start[p] - len(first.get(p, [])) for p in range(partitions)}
        assert all(loss >= 0 for loss in lost.values()), f"committed offsets behind processing: {lost}"
        assert sum(lost.values()) <= interval, f"lost {lost}: more than the last committed batch"
        for p in range(partitions):
            assert not set(first.get(p, [])) & set(second.get(p, [])), f"partition {p}: a record was processed twice"
    assert committed(bootstrap, group, topic, range(partitions)) == ends


# ---------------------------------------------------------------------------------
# 4. kafka-python
# ---------------------------------------------------------------------------------

def test_kafka_python_group_consumer_commits_readable_by_both_clients(fast):
    """kafka-python's KafkaConsumer(group_id=...) reads every record of a 4-partition topic
    exactly once and commits synchronously; the committed offsets (== high watermarks) are
    read back by kafka-python (a fresh consumer of the group, and its admin client) and by
    librdkafka's admin client; kafka-python's admin describes the group Empty afterwards."""
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    bootstrap = fast.bootstrap
    topic = unique_topic("grp-kp")
    create_topic(bootstrap, topic, partitions=4)
    records = make_records(800, seed=7, tag="grp-kp")
    expected = expected_log(records, produce_confluent(bootstrap, topic, records))
    ends = {p: len(expected.get(p, [])) for p in range(4)}
    assert all(ends.values())
    group = unique_group("g-kp")
    tps = [KTopicPartition(topic, p) for p in range(4)]

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
        request_timeout_ms=30000,
    )
    try:
        got: list[Stored] = []
        deadline = Deadline(60)
        while len(got) < len(records):
            assert not deadline.expired(), f"kafka-python group consumer got {len(got)} of {len(records)}"
            for tp, msgs in consumer.poll(timeout_ms=200, max_records=1000).items():
                for m in msgs:
                    got.append(Stored(tp.partition, m.offset, m.key, m.value, norm_headers(m.headers), m.timestamp))
        assert_same_log(by_partition(got), expected, context="kafka-python group consumer")
        assert sorted(tp.partition for tp in consumer.assignment()) == list(range(4))
        consumer.commit()
        assert {tp.partition: consumer.committed(tp) for tp in tps} == ends
    finally:
        consumer.close()

    reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, request_timeout_ms=30000)
    try:
        assert {tp.partition: reader.committed(tp) for tp in tps} == ends
    finally:
        reader.close()
    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        listed = kp_admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in listed.items() if tp.topic == topic} == ends
        assert len(listed) == 4
        state = kp_admin.describe_groups([group])[group]
        assert state["group_state"] == "Empty", state
        assert state["protocol_type"] == "consumer", state
    finally:
        kp_admin.close()
    assert committed(bootstrap, group, topic, range(4)) == ends


# ---------------------------------------------------------------------------------
# 5. KafkaJS
# ---------------------------------------------------------------------------------

def run_node(script: Path, *args: str, timeout: float = 120) -> dict:
    node = shutil.which("node")
    # A missing tool is a failure, not a skip: scripts/test.sh installs both.
    assert node is not None, "node is not on PATH (scripts/test.sh installs Node.js)"
    assert (COMPAT_DIR / "node_modules" / "kafkajs").is_dir(), "kafkajs is not installed: run `npm ci --prefix compat`"
    proc = subprocess.run(
        [node, str(script), *args],
        cwd=COMPAT_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
    )
    assert proc.returncode == 0, f"{script.name} failed ({proc.returncode}):\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout)


def test_kafkajs_group_consumer_reads_everything_and_commits(fast):
    """A KafkaJS consumer.run/eachMessage member reads every record of a 3-partition topic
    produced by librdkafka, exactly once; KafkaJS's admin sees the group Stable with that
    member while it runs; after it disconnects, the offsets it auto-committed equal the high
    watermarks, read by KafkaJS's admin and by librdkafka's."""
    bootstrap = fast.bootstrap
    topic = unique_topic("grp-kjs")
    create_topic(bootstrap, topic, partitions=3)
    records = make_records(900, seed=23, tag="grp-kjs")
    expected = expected_log(records, produce_confluent(bootstrap, topic, records))
    ends = {p: len(expected.get(p, [])) for p in range(3)}
    assert all(ends.values())
    group = unique_group("g-kjs")

    out = run_node(KAFKAJS_CONSUMER, bootstrap, topic, group, str(len(records)))

    dec = lambda v: None if v is None else base64.b64decode(v)  # noqa: E731
    got = by_partition([Stored(r["partition"], r["offset"], dec(r["key"]), dec(r["value"]), (), 0) for r in out["records"]])
    want = {p: [r._replace(headers=(), timestamp=0) for r in rows] for p, rows in expected.items()}
    assert_same_log(got, want, context="KafkaJS group consumer")

    join = out["joins"][-1]
    assert join["isLeader"] is True
    assert join["memberAssignment"] == {topic: [0, 1, 2]}
    [described] = out["described"]["groups"]
    assert described["errorCode"] == 0
    assert described["groupId"] == group
    assert described["state"] == "Stable"
    assert described["protocolType"] == "consumer"
    assert described["protocol"] == join["groupProtocol"]
    assert [m["memberId"] for m in described["members"]] == [join["memberId"]]

    [fetched] = out["committed"]
    assert fetched["topic"] == topic
    assert {int(p["partition"]): int(p["offset"]) for p in fetched["partitions"]} == ends
    assert committed(bootstrap, group, topic, range(3)) == ends
    assert wait_empty(bootstrap, group).members == []


# ---------------------------------------------------------------------------------
# 6. Restart and kill -9 of the broker (default settings)
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_offsets_and_groups_survive_restart_and_kill_9(restartable_weir, protocol):
    """Committed offsets and group state survive a clean restart and a kill -9: the group is
    listed with its state, its offsets read back, a new consumer of the group starts at the
    committed offsets (it receives only records produced afterwards), and a member that was
    running across a kill -9 is still the group's Stable member, keeps its partitions and
    goes on consuming. Under the classic protocol, and under the consumer protocol (KIP-848),
    whose members, epochs and assignments are restored from Kafka's records."""
    weir = restartable_weir
    # The consumer protocol's session and heartbeat are the broker's (45 s, 5 s).
    settings = {"classic": {}, "consumer": {"group.protocol": "consumer", "heartbeat.interval.ms": None}}[protocol]
    long_session = {"classic": {"session.timeout.ms": 30000}, "consumer": settings}[protocol]
    bootstrap = weir.bootstrap
    topic = unique_topic("grp-restart")
    create_topic(bootstrap, topic, partitions=3)
    group = unique_group("g-restart")
    ends = {p: 0 for p in range(3)}

    def produce_batch(tag: str) -> dict[int, list[Stored]]:
        batch = produce_spread(bootstrap, topic, 3, 150, tag)
        assert {p: rows[0].offset for p, rows in batch.items()} == ends, "batch did not start at the old end"
        for p, rows in batch.items():
            ends[p] = rows[-1].offset + 1
        return batch

    def consume_batch(consumer: Consumer, batch: dict[int, list[Stored]], what: str) -> None:
        got = by_partition([r._replace(headers=()) for r in consume(consumer, sum(map(len, batch.values())))])
        assert_same_log(got, batch, context=what)
        done = consumer.commit(asynchronous=False)
        assert {tp.partition: tp.offset for tp in done} == ends

    batch = produce_batch("one")
    first = group_consumer(bootstrap, group, **settings)
    try:
        first.subscribe([topic])
        consume_batch(first, batch, "first consumer")
    finally:
        first.close()
    wait_empty(bootstrap, group)

    restarted(weir, "restart")
    assert committed(bootstrap, group, topic, range(3)) == ends, "offsets after a clean restart"
    assert listed_groups(bootstrap)[group].state == ConsumerGroupState.EMPTY
    batch = produce_batch("two")
    second = group_consumer(bootstrap, group, **long_session)
    try:
        second.subscribe([topic])
        consume_batch(second, batch, "a new consumer after a clean restart (must start at the committed offsets)")
        member_id = second.memberid()
        assert [m.member_id for m in describe_group(bootstrap, group).members] == [member_id]

        restarted(weir, "kill")
        assert committed(bootstrap, group, topic, range(3)) == ends, "offsets after kill -9"
        desc = describe_group(bootstrap, group)
        assert desc.state == ConsumerGroupState.STABLE, f"group after kill -9: {desc.state}"
        assert [m.member_id for m in desc.members] == [member_id], "the running member was not restored"
        assert assignment_of(desc.members[0]) == [(topic, p) for p in range(3)]
        batch = produce_batch("three")
        consume_batch(second, batch, "the member running across kill -9")
        assert second.memberid() == member_id, "the member had to rejoin after the kill -9"
    finally:
        second.close()
    wait_empty(bootstrap, group)

    restarted(weir, "kill")
    assert committed(bootstrap, group, topic, range(3)) == ends, "offsets after the second kill -9"
    assert listed_groups(bootstrap)[group].state == ConsumerGroupState.EMPTY
    batch = produce_batch("four")
    third = group_consumer(bootstrap, group, **settings)
    try:
        third.subscribe([topic])
        consume_batch(third, batch, "a new consumer after kill -9 (must start at the committed offsets)")
    finally:
        third.close()
    assert committed(bootstrap, group, topic, range(3)) == ends


# ---------------------------------------------------------------------------------
# 7. Bad group requests, on raw frames
# ---------------------------------------------------------------------------------

def int64(v: int) -> bytes:
    return struct.pack(">q", v)


def nbytes(b: bytes | None) -> bytes:
    return wire.int32(-1) if b is None else wire.int32(len(b)) + b


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0."""
    return wire.int16(0) + wire.int32(1) + wire.string(topic) + nbytes(None)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    body = wire.int32(1) + wire.string(topic) + wire.int32(len(partitions))
    body += b"".join(wire.int32(p) for p in partitions)
    return wire.int16(0) + body + nbytes(None)


class Raw:
    """Group requests on one raw connection, encoded by hand (non-flexible versions, and
    DescribeGroups v5, the first flexible one)."""

    def __init__(self, bootstrap: str):
        self.conn = wire.Connection(bootstrap, timeout=20)
        self.correlation = 0

    def call(self, api: int, version: int, body: bytes, flexible: bool = False) -> wire.Reader:
        self.correlation += 1
        self.conn.send(wire.request(api, version, self.correlation, body, flexible))
        payload = self.conn.recv_frame(timeout=40)
        assert payload is not None, f"api {api} v{version}: connection closed"
        r = wire.Reader(payload)
        assert r.int32() == self.correlation
        if flexible:
            r.tags()
        return r

    def find_coordinator(self, group: str) -> tuple[int, str, int]:
        """FindCoordinator v1 for a group: (error, host, port)."""
        r = self.call(API_FIND_COORDINATOR, 1, wire.string(group) + b"\x00")
        r.int32()
        error, _message, _node = r.int16(), r.string(), r.int32()
        return error, r.string(), r.int32()

    def join(self, group: str, member_id: str, topic: str, session_ms: int = 30000) -> dict:
        """JoinGroup v5; a new member's MEMBER_ID_REQUIRED is answered by joining again
        (``asked_for_id`` says whether that happened)."""
        asked_for_id = False
        while True:
            body = wire.string(group) + wire.int32(session_ms) + wire.int32(30000) + wire.string(member_id)
            body += wire.string(None) + wire.string("consumer")
            body += wire.int32(1) + wire.string("range") + nbytes(subscription(topic))
            r = self.call(API_JOIN_GROUP, 5, body)
            r.int32()  # throttle
            out = {"error": r.int16(), "generation": r.int32(), "protocol": r.string(), "leader": r.string(), "member_id": r.string()}
            out["members"] = []
            for _ in range(r.int32()):
                mid, _instance, metadata = r.string(), r.string(), r.take(r.int32())
                out["members"].append((mid, metadata))
            assert r.remaining() == 0
            if out["error"] == MEMBER_ID_REQUIRED and not member_id:
                assert out["member_id"], "MEMBER_ID_REQUIRED without a member id"
                member_id, asked_for_id = out["member_id"], True
                continue
            out["asked_for_id"] = asked_for_id
            return out

    def sync(self, group: str, generation: int, member_id: str, assignments: dict[str, bytes]) -> tuple[int, bytes]:
        """SyncGroup v3: (error, this member's assignment)."""
        body = wire.string(group) + wire.int32(generation) + wire.string(member_id) + wire.string(None)
        body += wire.int32(len(assignments))
        for mid, data in assignments.items():
            body += wire.string(mid) + nbytes(data)
        r = self.call(API_SYNC_GROUP, 3, body)
        r.int32()
        error = r.int16()
        return error, r.take(r.int32())

    def heartbeat(self, group: str, generation: int, member_id: str) -> int:
        r = self.call(API_HEARTBEAT, 3, wire.string(group) + wire.int32(generation) + wire.string(member_id) + wire.string(None))
        r.int32()
        return r.int16()

    def leave(self, group: str, member_id: str) -> int:
        r = self.call(API_LEAVE_GROUP, 1, wire.string(group) + wire.string(member_id))
        r.int32()
        return r.int16()

    def commit(self, group: str, generation: int, member_id: str, topic: str, offsets: dict[int, tuple[int, str | None]]) -> dict[int, int]:
        """OffsetCommit v7 for one topic: {partition: error}."""
        body = wire.string(group) + wire.int32(generation) + wire.string(member_id) + wire.string(None)
        body += wire.int32(1) + wire.string(topic) + wire.int32(len(offsets))
        for p, (offset, metadata) in offsets.items():
            body += wire.int32(p) + int64(offset) + wire.int32(-1) + wire.string(metadata)
        r = self.call(API_OFFSET_COMMIT, 7, body)
        r.int32()
        assert r.int32() == 1
        assert r.string() == topic
        out = {}
        for _ in range(r.int32()):
            p = r.int32()
            out[p] = r.int16()
        return out

    def fetch(self, group: str, topic: str, partitions: list[int]) -> dict:
        """OffsetFetch v5: (top-level error, {partition: (offset, metadata, error)})."""
        body = wire.string(group) + wire.int32(1) + wire.string(topic) + wire.int32(len(partitions))
        body += b"".join(wire.int32(p) for p in partitions)
        r = self.call(API_OFFSET_FETCH, 5, body)
        r.int32()
        rows = {}
        for _ in range(r.int32()):
            assert r.string() == topic
            for _ in range(r.int32()):
                p, offset, _epoch, metadata, error = r.int32(), r.int64(), r.int32(), r.string(), r.int16()
                rows[p] = (offset, metadata, error)
        return {"error": r.int16(), "offsets": rows}

    def delete_groups(self, groups: list[str]) -> dict[str, int]:
        body = wire.int32(len(groups)) + b"".join(wire.string(g) for g in groups)
        r = self.call(API_DELETE_GROUPS, 1, body)
        r.int32()
        return {r.string(): r.int16() for _ in range(r.int32())}

    def describe_v5(self, group: str) -> dict:
        body = wire.uvarint(2) + wire.compact_string(group) + b"\x00" + wire.EMPTY_TAGS
        r = self.call(API_DESCRIBE_GROUPS, 5, body, flexible=True)
        r.int32()
        assert r.uvarint() - 1 == 1
        out = {"error": r.int16(), "group": r.compact_string(), "state": r.compact_string(),
               "protocol_type": r.compact_string(), "protocol": r.compact_string(), "members": []}
        for _ in range(r.uvarint() - 1):
            member = {"member_id": r.compact_string(), "instance_id": r.compact_string(),
                      "client_id": r.compact_string(), "client_host": r.compact_string()}
            member["metadata"] = r.take(r.uvarint() - 1)
            member["assignment"] = r.take(r.uvarint() - 1)
            r.tags()
            out["members"].append(member)
        r.int32()  # authorized operations
        r.tags()
        r.tags()
        assert r.remaining() == 0
        return out

    def close(self) -> None:
        self.conn.close()


def test_bad_group_requests_get_kafka_errors_and_change_nothing(fast):
    """On a group with one active (raw) member at generation 2: commits to an unknown topic or
    partition, with the stale generation 1, with an unknown member id, with metadata over
    4096 bytes; joins with session timeouts outside [6000, 1800000] and with an empty group
    id; DeleteGroups of the active group; Produce to __consumer_offsets. Each gets Kafka's
    error code and leaves the committed offsets, the member's generation and the offsets
    topic as they were. An unknown group is described Dead with no error at v5."""
    bootstrap = fast.bootstrap
    topic = unique_topic("grp-bad")
    create_topic(bootstrap, topic, partitions=2)
    produce_spread(bootstrap, topic, 2, 20, "bad")
    group = unique_group("g-bad")
    raw = Raw(bootstrap)
    try:
        # As a client would: find the coordinator first (this creates __consumer_offsets).
        host, port = bootstrap.rsplit(":", 1)
        wait_until(lambda: raw.find_coordinator(group) == (NONE, host, int(port)), 30, what="FindCoordinator to name this broker")
        joined = raw.join(group, "", topic)
        assert (joined["error"], joined["asked_for_id"]) == (NONE, True), joined
        member, generation = joined["member_id"], joined["generation"]
        assert joined["leader"] == member and joined["protocol"] == "range"
        assert joined["members"] == [(member, subscription(topic))]
        mine = assignment(topic, [0, 1])
        assert raw.sync(group, generation, member, {member: mine}) == (NONE, mine)
        assert raw.commit(group, generation, member, topic, {0: (5, "m0"), 1: (7, None)}) == {0: NONE, 1: NONE}

        # The leader rejoins: generation 2; generation 1 is stale from now on.
        rejoined = raw.join(group, member, topic)
        assert (rejoined["error"], rejoined["member_id"], rejoined["generation"]) == (NONE, member, generation + 1)
        generation += 1
        assert raw.sync(group, generation, member, {member: mine}) == (NONE, mine)
        assert raw.heartbeat(group, generation, member) == NONE

        baseline = {0: (5, "m0", NONE), 1: (7, "", NONE)}

        def unchanged(what: str) -> None:
            assert raw.fetch(group, topic, [0, 1]) == {"error": NONE, "offsets": baseline}, f"offsets changed by {what}"
            assert raw.heartbeat(group, generation, member) == NONE, f"the member lost its generation after {what}"

        assert raw.commit(group, generation, member, "no-such-topic-" + uuid.uuid4().hex[:8], {0: (1, None)}) == {0: UNKNOWN_TOPIC_OR_PARTITION}
        unchanged("a commit to an unknown topic")
        assert raw.commit(group, generation, member, topic, {2: (1, None)}) == {2: UNKNOWN_TOPIC_OR_PARTITION}
        unchanged("a commit to an unknown partition")
        assert raw.commit(group, generation - 1, member, topic, {0: (9, None)}) == {0: ILLEGAL_GENERATION}
        unchanged("a commit with a stale generation")
        assert raw.heartbeat(group, generation - 1, member) == ILLEGAL_GENERATION
        assert raw.commit(group, generation, "not-a-member", topic, {0: (9, None)}) == {0: UNKNOWN_MEMBER_ID}
        unchanged("a commit with an unknown member id")
        assert raw.commit(group, generation, member, topic, {1: (9, "x" * 4097)}) == {1: OFFSET_METADATA_TOO_LARGE}
        unchanged("a commit with 4097 bytes of metadata")
        # 4096 bytes is still allowed.
        assert raw.commit(group, generation, member, topic, {1: (8, "y" * 4096)}) == {1: NONE}
        baseline[1] = (8, "y" * 4096, NONE)
        unchanged("a commit with 4096 bytes of metadata")

        for session_ms in (5999, 1800001):
            assert raw.join(group, "", topic, session_ms=session_ms)["error"] == INVALID_SESSION_TIMEOUT
            unchanged(f"a new member's JoinGroup with session timeout {session_ms}")
        assert raw.join(group, member, topic, session_ms=5999)["error"] == INVALID_SESSION_TIMEOUT
        unchanged("the member's own JoinGroup with session timeout 5999")
        assert raw.join("", "", topic)["error"] == INVALID_GROUP_ID
        assert "" not in listed_groups(bootstrap), "a group with an empty id was created"

        assert raw.delete_groups([group]) == {group: NON_EMPTY_GROUP}
        unchanged("DeleteGroups of the active group")

        described = raw.describe_v5(group)
        assert {k: described[k] for k in ("error", "group", "state", "protocol_type", "protocol")} == {
            "error": NONE, "group": group, "state": "Stable", "protocol_type": "consumer", "protocol": "range"}
        assert [(m["member_id"], m["metadata"], m["assignment"]) for m in described["members"]] == [(member, subscription(topic), mine)]
        unknown = unique_group("g-never")
        assert raw.describe_v5(unknown) == {
            "error": NONE, "group": unknown, "state": "Dead", "protocol_type": "", "protocol": "", "members": []}

        offsets_partition = coordinator_partition(group, OFFSETS_TOPIC_PARTITIONS)
        offsets_end = high_watermarks(bootstrap, OFFSETS_TOPIC, [offsets_partition])
        assert offsets_end[offsets_partition] > 0, "the group's commits are not on its partition of __consumer_offsets"
        batch = wire.record_batch([(b"k", b"forged offset commit")], base_timestamp=1_700_000_000_000)
        with wire.Connection(bootstrap) as conn:
            conn.send(wire.produce_request(9, 4711, OFFSETS_TOPIC, offsets_partition, batch))
            reply = wire.parse_produce_response(9, conn.recv_frame(timeout=20))
        assert (reply["correlation_id"], reply["error_code"]) == (4711, INVALID_TOPIC_EXCEPTION)
        assert high_watermarks(bootstrap, OFFSETS_TOPIC, [offsets_partition]) == offsets_end, "the produce was appended"
        unchanged("a Produce to __consumer_offsets")

        assert raw.leave(group, member) == NONE
        assert raw.describe_v5(group)["state"] == "Empty"
        assert raw.fetch(group, topic, [0, 1]) == {"error": NONE, "offsets": baseline}
    finally:
        raw.close()


# ---------------------------------------------------------------------------------
# 8. DeleteGroups and OffsetDelete
# ---------------------------------------------------------------------------------

def test_delete_group_offsets_and_delete_groups(fast):
    """OffsetDelete (kafka-python's admin) is refused with GROUP_SUBSCRIBED_TO_TOPIC while a
    member subscribes to the topic, then removes exactly the one partition's offset once the
    group is Empty; DeleteGroups (librdkafka's admin) removes the group: it is no longer
    listed, is described Dead, has no committed offsets, and a second delete gets
    GROUP_ID_NOT_FOUND. Both deletions survive a restart."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    server = fast
    bootstrap = server.bootstrap
    topic = unique_topic("grp-del")
    create_topic(bootstrap, topic, partitions=3)
    expected = produce_spread(bootstrap, topic, 3, 90, "del")
    ends = {p: len(expected[p]) for p in range(3)}
    group = unique_group("g-del")
    other = unique_group("g-keep")  # an unrelated group that must not be touched

    def kp_admin():
        return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)

    for g in (group, other):
        consumer = group_consumer(bootstrap, g)
        try:
            consumer.subscribe([topic])
            consume(consumer, 90)
            consumer.commit(asynchronous=False)
            if g == group:
                client = kp_admin()
                try:
                    result = client.delete_group_offsets(group, [KTopicPartition(topic, 1)])
                finally:
                    client.close()
                assert {tp.partition: err.errno for tp, err in result.items()} == {1: GROUP_SUBSCRIBED_TO_TOPIC}
                assert committed(bootstrap, group, topic, range(3)) == ends
        finally:
            consumer.close()
    wait_empty(bootstrap, group)

    client = kp_admin()
    try:
        result = client.delete_group_offsets(group, [KTopicPartition(topic, 1)])
    finally:
        client.close()
    assert {tp.partition: err.errno for tp, err in result.items()} == {1: NONE}
    after_offset_delete = {0: ends[0], 1: OFFSET_INVALID, 2: ends[2]}
    assert committed(bootstrap, group, topic, range(3)) == after_offset_delete

    restarted(server, "restart")
    assert committed(bootstrap, group, topic, range(3)) == after_offset_delete, "OffsetDelete undone by a restart"
    assert describe_group(bootstrap, group).state == ConsumerGroupState.EMPTY

    admin(bootstrap).delete_consumer_groups([group], request_timeout=20)[group].result(timeout=30)
    listing = listed_groups(bootstrap)
    assert group not in listing, "a deleted group is still listed"
    assert other in listing
    assert describe_group(bootstrap, group).state == ConsumerGroupState.DEAD
    assert committed(bootstrap, group, topic, range(3)) == {p: OFFSET_INVALID for p in range(3)}
    with pytest.raises(KafkaException) as failure:
        admin(bootstrap).delete_consumer_groups([group], request_timeout=20)[group].result(timeout=30)
    assert failure.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND

    restarted(server, "restart")
    assert group not in listed_groups(bootstrap), "a deleted group came back after a restart"
    assert committed(bootstrap, group, topic, range(3)) == {p: OFFSET_INVALID for p in range(3)}
    assert committed(bootstrap, other, topic, range(3)) == ends, "the other group's offsets changed"
