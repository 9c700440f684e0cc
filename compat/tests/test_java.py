"""The Apache Kafka Java client (4.x) and Kafka's own kafka-consumer-groups tool against
Weir, beside librdkafka: an idempotent acks=all lz4 Java producer read back byte for byte by
librdkafka; Java KafkaConsumers (classic protocol, cooperative-sticky) that consume a whole
topic, commit, and split its partitions; kafka-consumer-groups listing, describing,
resetting and deleting a librdkafka group; the Java AdminClient listing and describing a
running librdkafka group.

The jars named by compat/java/pom.xml are fetched into .cache/kafka-jars by scripts/test.sh;
the programs in compat/java/src are compiled with javac once per module. Each prints JSON on
stdout and logs to stderr. A missing JDK or missing jars fail the tests, never skip them.
All of it runs on a dedicated server without the initial rebalance delay.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaException,
    TopicPartition,
)

from clients import (
    group_consumer,
    committed,
    unique_group,
    wait_empty,
    Rec,
    Stored,
    admin,
    assert_same_log,
    create_topic,
    expected_log,
    java_partition,
    make_records,
    norm_headers,
    produce_confluent,
    read_confluent,
    unique_topic,
)
from harness import REPO_ROOT, Deadline, wait_until

JAVA_DIR = REPO_ROOT / "compat" / "java"
JARS_DIR = REPO_ROOT / ".cache" / "kafka-jars"
KAFKA_VERSION = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", (JAVA_DIR / "pom.xml").read_text()).group(1)
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# Short-lived JVMs: quick start over peak speed; client logs (slf4j-simple) to stderr at WARN.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


# ---------------------------------------------------------------------------------
# Fixtures: the server, and the compiled Java programs
# ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(make_weir):
    """A dedicated server whose first rebalance of a group does not wait for more members, and
    whose consumer-protocol members heartbeat every 500 ms (so they learn of moves quickly)."""
    return make_weir(
        "java",
        env={"WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0", "WEIR_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "500"},
    )


class Java:
    """Runs the compiled programs of compat/java/src and Kafka's tools on the fetched jars."""

    def __init__(self, java: str, classes: Path, server):
        self.java = java
        self.classes = classes
        self.server = server

    def _run(self, classpath: str, main: str, args, stdin: str | None, timeout: float):
        return subprocess.run(
            [self.java, *JVM_FLAGS, "-cp", classpath, main, *map(str, args)],
            input=stdin, capture_output=True, text=True, timeout=timeout,
        )

    def program(self, name: str, *args, stdin: str | None = None, timeout: float = 120) -> dict:
        """Run weir.compat.NAME and parse the JSON it prints; fails with its stderr and the
        server's log tail if it exits non-zero."""
        proc = self._run(f"{self.classes}:{JARS_DIR}/*", f"weir.compat.{name}", args, stdin, timeout)
        assert proc.returncode == 0, (
            f"{name} {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr[-6000:]}\n"
            + self.server.log_tail(80)
        )
        out = json.loads(proc.stdout)
        assert out["version"] == KAFKA_VERSION, f"kafka-clients {out['version']} on the classpath, want {KAFKA_VERSION}"
        return out

    def consumer_groups(self, *args, expect_error: bool = False, timeout: float = 60) -> tuple[list[str], str]:
        """kafka-consumer-groups with ``--bootstrap-server`` and ``args``: (stdout lines, stderr).

        The tool exits 0 even when its command fails and prints ``Error: ...`` on stdout, so
        that line is what tells success from failure."""
        argv = ["--bootstrap-server", self.server.bootstrap, *args]
        proc = self._run(f"{JARS_DIR}/*", CONSUMER_GROUP_COMMAND, argv, None, timeout)
        context = f"kafka-consumer-groups {' '.join(argv)}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
        assert proc.returncode == 0, f"exit code {proc.returncode}: {context}\n" + self.server.log_tail(60)
        failed = any(line.startswith("Error:") for line in proc.stdout.splitlines())
        assert failed == expect_error, ("it failed: " if failed else "it did not fail: ") + context
        return [line.rstrip() for line in proc.stdout.splitlines() if line.strip()], proc.stderr


def compile_java(classes: Path) -> str:
    """javac compat/java/src into ``classes`` against the jars of compat/java/pom.xml; returns
    the ``java`` to run them with."""
    # A missing tool is a failure, not a skip: scripts/test.sh installs the JDK and the jars.
    java_bin, javac_bin = shutil.which("java"), shutil.which("javac")
    assert java_bin and javac_bin, "java/javac are not on PATH (scripts/test.sh installs a JDK)"
    for artifact in ("kafka-clients", "kafka-tools"):
        jar = JARS_DIR / f"{artifact}-{KAFKA_VERSION}.jar"
        assert jar.is_file(), (
            f"{jar} is missing: run scripts/test.sh, or `mvn -q -f compat/java/pom.xml "
            "dependency:copy-dependencies`"
        )
    sources = sorted(str(p) for p in (JAVA_DIR / "src").rglob("*.java"))
    proc = subprocess.run(
        [javac_bin, "-Xlint:all,-processing", "-Werror", "-d", str(classes), "-cp", f"{JARS_DIR}/*", *sources],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}{proc.stderr}"
    return java_bin


@pytest.fixture(scope="module")
def java(server, tmp_path_factory) -> Java:
    classes = tmp_path_factory.mktemp("java_classes")
    return Java(compile_java(classes), classes, server)


# ---------------------------------------------------------------------------------
# librdkafka helpers
# ---------------------------------------------------------------------------------

# Per group protocol: librdkafka's settings, and the assignor the tools report.
PROTOCOLS = {
    "classic": ({}, "range"),
    "consumer": ({"group.protocol": "consumer", "heartbeat.interval.ms": None}, "uniform"),
}


def rdk_consume(consumers: list[Consumer], count: int, timeout: float = 60) -> list[Stored]:
    """Poll the consumers in turn until ``count`` records arrived between them (bounded)."""
    out: list[Stored] = []
    deadline = Deadline(timeout)
    while len(out) < count:
        assert not deadline.expired(), f"only {len(out)} of {count} records within {timeout:.0f}s"
        for consumer in consumers:
            for msg in consumer.consume(num_messages=1000, timeout=0.1):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                out.append(Stored(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                  norm_headers(msg.headers()), msg.timestamp()[1]))
    return out


def listed_groups(bootstrap: str) -> dict:
    result = admin(bootstrap).list_consumer_groups(request_timeout=20).result(timeout=30)
    assert not result.errors, result.errors
    return {g.group_id: g for g in result.valid}


def wait_assigned(consumers: list[Consumer], partitions: int, timeout: float = 30) -> None:
    """Poll until the members' assignments are non-empty and cover all
    ``partitions`` between them, each partition once."""
    def split():
        owned = []
        for c in consumers:
            c.consume(num_messages=100, timeout=0.05)  # serves the rebalance; the records are not needed
            owned.append({tp.partition for tp in c.assignment()})
        return all(owned) and sorted(p for ps in owned for p in ps) == list(range(partitions))

    wait_until(split, timeout, interval=0.0, what=f"{len(consumers)} librdkafka members to split {partitions} partitions")


def java_stored(row) -> Stored:
    partition, offset, key, value, headers, timestamp, ts_type = row
    assert ts_type == "CreateTime", f"partition {partition} offset {offset}: timestamp type {ts_type}"
    dec = lambda v: None if v is None else base64.b64decode(v)  # noqa: E731
    return Stored(partition, offset, dec(key), dec(value), tuple((k, dec(v)) for k, v in headers), timestamp)


def by_partition(records) -> dict[int, list[Stored]]:
    out: dict[int, list[Stored]] = {}
    for rec in records:
        out.setdefault(rec.partition, []).append(rec)
    return out


# kafka-consumer-groups 4.4 prints space-padded tables under one header line (after a blank
# line, dropped here), for example:
#   --describe:           GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
#                         (HOST is "/127.0.0.1"; an Empty group has "-" for the last three, and
#                         "Consumer group 'G' has no active members." goes to stderr)
#   --describe --state:   GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS
#                         (coordinator as "host:port  (id)")
#   --describe --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS (--verbose adds CURRENT-EPOCH
#                         CURRENT-ASSIGNMENT TARGET-EPOCH TARGET-ASSIGNMENT, "-" but the
#                         assignment for a classic group)
#   --list --state:       GROUP STATE;  --list alone: one group id a line, no header
#   --reset-offsets:      GROUP TOPIC PARTITION NEW-OFFSET
#   --delete:             "Deletion of requested consumer groups ('G') was successful."
def table(lines: list[str], header: str) -> list[dict[str, str]]:
    """The rows under the table header that starts with ``header``, as {column: value}.
    Columns are split on runs of spaces; no value has a space in it except COORDINATOR (ID),
    whose line the test matches whole instead."""
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    columns = lines[start].split()
    rows = []
    for line in lines[start + 1:]:
        values = line.split()
        assert len(values) == len(columns), f"row {line!r} does not fit the header {lines[start]!r}"
        rows.append(dict(zip(columns, values)))
    return rows


# ---------------------------------------------------------------------------------
# 1. Java producer -> librdkafka
# ---------------------------------------------------------------------------------

def test_java_idempotent_lz4_producer_read_back_by_librdkafka(server, java):
    """An idempotent acks=all lz4 KafkaProducer sends 1000 keyed records with headers (binary,
    empty, null and repeated header values, null and 3 KB values) to a 6-partition topic; each
    lands on the Java default partitioner's partition at the offset its RecordMetadata
    reported, contiguous from 0, and librdkafka reads every one back byte for byte, with the
    producer's CreateTime timestamps."""
    bootstrap = server.bootstrap
    topic = unique_topic("java-produce")
    create_topic(bootstrap, topic, partitions=6)
    records = make_records(1000, seed=77, tag="java")

    def b64(data: bytes | None) -> str:
        return "~" if data is None else base64.b64encode(data).decode()

    lines = []
    for rec in records:
        fields = [b64(rec.key), b64(rec.value)]
        for name, value in rec.headers:
            fields += [b64(name.encode()), b64(value)]
        lines.append("\t".join(fields) + "\n")
    out = java.program("Produce", bootstrap, topic, stdin="".join(lines))

    delivered = [tuple(d) for d in out["delivered"]]
    assert len(delivered) == len(records)
    placed = [(i, p, java_partition(rec.key, 6)) for i, (rec, (p, _, _)) in enumerate(zip(records, delivered))]
    wrong = [row for row in placed if row[1] != row[2]]
    assert not wrong, f"records on other partitions than murmur2(key) % 6 (index, got, want): {wrong[:5]}"
    expected = expected_log(records, delivered)
    assert sorted(expected) == list(range(6)), "every partition should get records"
    assert_same_log(read_confluent(bootstrap, topic, range(6)), expected, context="Java producer read by librdkafka")


def test_java_consumer_reads_batches_weir_compressed_with_lz4(server, java):
    """A topic with compression.type=lz4 stores what librdkafka sends uncompressed as lz4
    batches Weir writes itself; a KafkaConsumer, whose lz4 reader takes only frames of
    independent blocks, reads every record back byte for byte."""
    bootstrap = server.bootstrap
    topic = unique_topic("java-lz4-topic")
    create_topic(bootstrap, topic, partitions=2, config={"compression.type": "lz4"})
    records = make_records(400, seed=79, tag="java-lz4")
    expected = expected_log(records, produce_confluent(bootstrap, topic, records))
    group = unique_group("g-java-lz4")
    [member] = java.program("GroupConsume", bootstrap, topic, 2, group, len(records), 1)["members"]
    rows = by_partition(java_stored(r) for r in member["records"])
    assert_same_log(rows, expected, context="a Java consumer of a topic Weir recompresses to lz4")


# ---------------------------------------------------------------------------------
# 2. Java group consumers
# ---------------------------------------------------------------------------------

def test_java_group_consumers_consume_commit_and_split_partitions(server, java):
    """A KafkaConsumer subscribed alone (group.protocol=classic with the CooperativeStickyAssignor,
    and again with group.protocol=consumer) gets all 6 partitions, reads every record librdkafka
    produced, byte for byte and exactly once, and its commitSync offsets (read back by itself
    and by librdkafka's admin) equal the high watermarks. Then two KafkaConsumers of a new group split the 6 partitions 3 and 3,
    disjoint and complete, in one generation: the second joins while the first, which had all
    6, is mid-stream; the first commits the positions of the 3 it gives up in
    onPartitionsRevoked, the second resumes there, so between them they read every record
    exactly once, and their commits equal the high watermarks."""
    bootstrap = server.bootstrap
    topic = unique_topic("java-group")
    create_topic(bootstrap, topic, partitions=6)
    records = make_records(1200, seed=78, tag="java-group")
    expected = expected_log(records, produce_confluent(bootstrap, topic, records))
    assert sorted(expected) == list(range(6)), "every partition should get records"
    ends = {p: len(rows) for p, rows in expected.items()}
    everything = list(range(6))

    # One member, under either group protocol (KIP-848's commits and fetches carry the
    # member epoch).
    for protocol in ("classic", "consumer"):
        group = unique_group(f"g-java-one-{protocol}")
        [member] = java.program("GroupConsume", bootstrap, topic, 6, group, len(records), 1, protocol)["members"]
        assert member["assignment"] == everything
        events = [(kind, ps) for _seq, kind, ps in member["events"] if ps]
        assert events == [("assign", everything), ("revoke", everything)], (
            f"{protocol}: one member should see exactly its first assignment and the revocation on close"
        )
        assert_same_log(by_partition(java_stored(r) for r in member["records"]), expected, context=f"Java group consumer ({protocol})")
        assert {int(p): off for p, off in member["committed"].items()} == ends
        assert committed(bootstrap, group, topic, everything) == ends
        assert wait_empty(bootstrap, group).members == []

    # Two members of another group, in one JVM.
    group = unique_group("g-java-two")
    members = java.program("GroupConsume", bootstrap, topic, 6, group, len(records), 2)["members"]
    owned = [set(m["assignment"]) for m in members]
    assert [len(ps) for ps in owned] == [3, 3], f"cooperative-sticky should split 6 partitions 3/3: {owned}"
    assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == set(everything), owned
    assert members[0]["memberId"] != members[1]["memberId"]
    assert members[0]["generation"] == members[1]["generation"] > 0, [m["generation"] for m in members]
    lost = [(m["clientId"], e) for m in members for e in m["events"] if e[1] == "lost"]
    assert not lost, f"partitions lost (a generation was fenced): {lost}"
    # The first member had everything, gave up exactly what the second one ended with, and
    # both revoked their own assignment on close.
    first, second = ([(kind, set(ps)) for _seq, kind, ps in m["events"]] for m in members)
    assert first[0] == ("assign", set(everything)), members[0]["events"]
    assert set().union(*(ps for kind, ps in first[1:-1] if kind == "revoke")) == owned[1], members[0]["events"]
    assert set().union(*(ps for kind, ps in second if kind == "assign")) == owned[1], members[1]["events"]
    assert (first[-1], second[-1]) == (("revoke", owned[0]), ("revoke", owned[1]))
    assert members[1]["records"], "the second member should read the rest of the partitions handed to it"
    for m in members:
        rows = [java_stored(r) for r in m["records"]]
        for p, got in by_partition(rows).items():
            offsets = [r.offset for r in got]
            assert offsets == sorted(set(offsets)), f"{m['clientId']} read partition {p} out of order or twice"
        assert {int(p): off for p, off in m["committed"].items()} == {p: ends[p] for p in m["assignment"]}
    union = sorted((java_stored(r) for m in members for r in m["records"]), key=lambda r: (r.partition, r.offset))
    assert_same_log(by_partition(union), expected, context="two Java group consumers together")
    assert committed(bootstrap, group, topic, everything) == ends
    assert wait_empty(bootstrap, group).members == []


def test_java_consumer_protocol_members_split_and_only_moved_partitions_are_revoked(server, java):
    """KafkaConsumers with group.protocol=consumer (KIP-848: the broker's uniform assignor
    assigns, members reconcile incrementally): a, b and c split 6 partitions 2/2/2; c closes
    and a and b each keep theirs and take one of c's, with nothing revoked from them; d joins
    and takes exactly what a and b give up, and they are assigned nothing. No partition is ever
    assigned while another member holds it, and nothing is lost (no member was fenced)."""
    bootstrap = server.bootstrap
    topic = unique_topic("java-848")
    create_topic(bootstrap, topic, partitions=6)
    group = unique_group("g-java-848")
    out = java.program("GroupMembers", bootstrap, topic, 6, group)
    assert out["violations"] == [], out["violations"]
    phases = {p["name"]: {m: set(ps) for m, ps in p["owned"].items()} for p in out["phases"]}
    settled_at = {p["name"]: p["seq"] for p in out["phases"]}
    three, two, again = phases["three"], phases["c-left"], phases["d-joined"]
    assert sorted(len(ps) for ps in three.values()) == [2, 2, 2], three
    events = {m: [(seq, kind, set(ps)) for seq, kind, ps in evs] for m, evs in out["events"].items()}
    lost = [(m, e) for m, evs in events.items() for e in evs if e[1] == "lost"]
    assert not lost, f"partitions lost (a member was fenced): {lost}"

    def between(member, start, end, kind):
        return set().union(*(ps for seq, k, ps in events[member] if start < seq <= end and k == kind))

    assert events["c"][-1][1:] == ("revoke", three["c"]), events["c"]
    for m in ("a", "b"):
        assert len(two[m]) == 3 and two[m] >= three[m], f"{m} when c left: {three[m]} -> {two[m]}"
        assert between(m, settled_at["three"], settled_at["c-left"], "revoke") == set(), f"{m} had partitions revoked when c left"
    assert two["a"] | two["b"] == set(range(6))
    moved = set()
    for m in ("a", "b"):
        assert again[m] <= two[m], f"{m} gained partitions when d joined: {two[m]} -> {again[m]}"
        gave = two[m] - again[m]
        assert between(m, settled_at["c-left"], settled_at["d-joined"], "revoke") == gave, events[m]
        assert between(m, settled_at["c-left"], settled_at["d-joined"], "assign") == set(), events[m]
        moved |= gave
    assert again["d"] == moved and len(moved) == 2, f"d got {again['d']}, the others gave up {moved}"
    ids = out["memberIds"]
    assert len(set(ids.values())) == 3 and all(ids.values()), ids
    assert wait_empty(bootstrap, group).members == []


# ---------------------------------------------------------------------------------
# 3. kafka-consumer-groups
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_kafka_consumer_groups_lists_describes_resets_and_deletes(server, java, protocol):
    """Kafka's kafka-consumer-groups on a group that a librdkafka consumer committed to, under
    the classic protocol and under the consumer protocol (KIP-848, where the tool describes
    the group with ConsumerGroupDescribe and shows member epochs and target assignments):
    --list (and --list --state) show it; --describe shows per partition the committed offset,
    the log end offset and their difference as LAG, with the member's id, host and client
    id, and --state and --members its coordinator, assignor, state and member; while the
    member runs, --reset-offsets and --delete are refused and change nothing. Once the group
    is Empty, --describe says it has no active members, --reset-offsets --to-earliest
    --execute moves every committed offset to 0 (read back with librdkafka's admin), and
    --delete removes the group and its offsets."""
    bootstrap = server.bootstrap
    topic = unique_topic("java-cg")
    create_topic(bootstrap, topic, partitions=3)
    sizes = {0: 12, 1: 20, 2: 7}
    records = [Rec(key=f"cg-{p}-{i}".encode(), value=f"v{i}".encode(), partition=p) for p, n in sizes.items() for i in range(n)]
    produce_confluent(bootstrap, topic, records)
    commits = {0: 5, 1: 20, 2: 1}
    group = unique_group("g-java-cg")
    host, port = bootstrap.rsplit(":", 1)

    settings, assignor = PROTOCOLS[protocol]
    consumer = group_consumer(bootstrap, group, **{"client.id": "weir-compat-cg", **settings})
    try:
        consumer.subscribe([topic])
        rdk_consume([consumer], len(records))
        consumer.commit(offsets=[TopicPartition(topic, p, off) for p, off in commits.items()], asynchronous=False)
        member_id = consumer.memberid()
        assert committed(bootstrap, group, topic, range(3)) == commits

        lines, _ = java.consumer_groups("--list")
        assert group in lines, lines
        lines, _ = java.consumer_groups("--list", "--state")
        assert {r["GROUP"]: r["STATE"] for r in table(lines, "GROUP")}[group] == "Stable"

        lines, _ = java.consumer_groups("--describe", "--group", group)
        rows = table(lines, "GROUP")
        assert [r["PARTITION"] for r in rows] == ["0", "1", "2"], lines
        for r in rows:
            p = int(r["PARTITION"])
            assert (r["GROUP"], r["TOPIC"]) == (group, topic)
            assert (int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"]), int(r["LAG"])) == (commits[p], sizes[p], sizes[p] - commits[p]), r
            assert (r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) == (member_id, "/127.0.0.1", "weir-compat-cg"), r

        lines, _ = java.consumer_groups("--describe", "--group", group, "--state")
        header = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
        state = lines[header + 1]
        assert re.fullmatch(
            rf"{re.escape(group)}\s+{re.escape(host)}:{port}\s+\({server.node_id}\)\s+{assignor}\s+Stable\s+1", state
        ), lines

        lines, _ = java.consumer_groups("--describe", "--group", group, "--members")
        [m] = table(lines, "GROUP")
        assert (m["CONSUMER-ID"], m["HOST"], m["CLIENT-ID"], m["#PARTITIONS"]) == (member_id, "/127.0.0.1", "weir-compat-cg", "3"), m
        if protocol == "consumer":
            lines, _ = java.consumer_groups("--describe", "--group", group, "--members", "--verbose")
            [m] = table(lines, "GROUP")
            everything = f"{topic}:0,1,2"
            assert (m["CURRENT-ASSIGNMENT"], m["TARGET-ASSIGNMENT"]) == (everything, everything), m
            assert m["CURRENT-EPOCH"] == m["TARGET-EPOCH"] and int(m["CURRENT-EPOCH"]) >= 1, m
            lines, _ = java.consumer_groups("--list", "--type")
            assert {r["GROUP"]: r["TYPE"] for r in table(lines, "GROUP")}[group] == "Consumer", lines

        lines, _ = java.consumer_groups(
            "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute", expect_error=True
        )
        assert (
            f"Error: Assignments can only be reset if the group '{group}' is inactive, "
            "but the current state is Stable."
        ) in lines, lines
        lines, _ = java.consumer_groups("--delete", "--group", group, expect_error=True)
        assert (
            f"* Group '{group}' could not be deleted due to: "
            "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty."
        ) in lines, lines
        assert committed(bootstrap, group, topic, range(3)) == commits
    finally:
        consumer.close()
    wait_empty(bootstrap, group)

    lines, err = java.consumer_groups("--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in err
    rows = table(lines, "GROUP")
    assert {int(r["PARTITION"]): (int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"]), int(r["LAG"])) for r in rows} == {
        p: (commits[p], sizes[p], sizes[p] - commits[p]) for p in range(3)
    }
    assert {(r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) for r in rows} == {("-", "-", "-")}

    lines, _ = java.consumer_groups("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert sorted((r["GROUP"], r["TOPIC"], int(r["PARTITION"]), int(r["NEW-OFFSET"])) for r in table(lines, "GROUP")) == [
        (group, topic, p, 0) for p in range(3)
    ]
    assert committed(bootstrap, group, topic, range(3)) == {0: 0, 1: 0, 2: 0}

    lines, _ = java.consumer_groups("--delete", "--group", group)
    assert lines == [f"Deletion of requested consumer groups ('{group}') was successful."]
    assert group not in listed_groups(bootstrap)
    assert committed(bootstrap, group, topic, range(3)) == {p: OFFSET_INVALID for p in range(3)}


# ---------------------------------------------------------------------------------
# 4. Java AdminClient
# ---------------------------------------------------------------------------------

def test_java_admin_lists_and_describes_librdkafka_groups(server, java):
    """The Java AdminClient sees a running two-member librdkafka group (roundrobin) as Stable
    in listConsumerGroups (also when filtered to Stable), listGroups and describeConsumerGroups,
    with its assignor, coordinator, both members' ids, client ids, hosts and assignments, and
    reads its committed offsets; a group that only committed offsets (assign, no join) is
    listed Empty and simple, and left out of the Stable filter."""
    bootstrap = server.bootstrap
    topic = unique_topic("java-admin")
    create_topic(bootstrap, topic, partitions=4)
    records = [Rec(key=f"a{i}".encode(), value=b"x" * i, partition=i % 4) for i in range(40)]
    produce_confluent(bootstrap, topic, records)
    ends = {p: 10 for p in range(4)}
    group = unique_group("g-java-admin")
    simple = unique_group("g-java-simple")

    committer = Consumer({"bootstrap.servers": bootstrap, "group.id": simple, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        committer.close()

    members = [
        group_consumer(bootstrap, group, **{"client.id": f"rdk-{name}", "partition.assignment.strategy": "roundrobin"})
        for name in ("a", "b")
    ]
    try:
        for c in members:
            c.subscribe([topic])
        wait_assigned(members, 4)
        for c in members:
            c.commit(offsets=[TopicPartition(topic, tp.partition, ends[tp.partition]) for tp in c.assignment()], asynchronous=False)
        assignments = {c.memberid(): sorted((tp.topic, tp.partition) for tp in c.assignment()) for c in members}
        client_ids = {members[0].memberid(): "rdk-a", members[1].memberid(): "rdk-b"}

        out = java.program("AdminGroups", bootstrap, group)
    finally:
        for c in members:
            c.close()

    listed = {g["groupId"]: g for g in out["listConsumerGroups"]}
    assert listed.get(group) == {"groupId": group, "state": "Stable", "type": "Classic", "simple": False}, listed
    assert listed.get(simple) == {"groupId": simple, "state": "Empty", "type": "Classic", "simple": True}, listed
    stable = {g["groupId"] for g in out["listConsumerGroupsStable"]}
    assert group in stable and simple not in stable, stable
    assert all(g["state"] == "Stable" for g in out["listConsumerGroupsStable"]), out["listConsumerGroupsStable"]
    groups = {g["groupId"]: g for g in out["listGroups"]}
    assert groups.get(group) == {"groupId": group, "type": "Classic", "protocol": "consumer", "state": "Stable", "simple": False}, groups
    assert groups.get(simple) == {"groupId": simple, "type": "Classic", "protocol": "", "state": "Empty", "simple": True}, groups

    desc = out["describe"]
    host, port = bootstrap.rsplit(":", 1)
    assert {k: desc[k] for k in ("groupId", "state", "type", "simple", "assignor", "coordinator")} == {
        "groupId": group, "state": "Stable", "type": "Classic", "simple": False, "assignor": "roundrobin",
        "coordinator": [server.node_id, host, int(port)],
    }
    assert len(desc["members"]) == 2
    for m in desc["members"]:
        assert m["memberId"] in assignments, (m["memberId"], sorted(assignments))
        assert (m["clientId"], m["host"], m["groupInstanceId"]) == (client_ids[m["memberId"]], "/127.0.0.1", None)
        assert [tuple(tp) for tp in m["assignment"]] == assignments[m["memberId"]]
    assert sorted(tp for ps in assignments.values() for tp in ps) == [(topic, p) for p in range(4)]
    assert out["offsets"] == {topic: {str(p): off for p, off in ends.items()}}
