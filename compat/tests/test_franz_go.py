"""franz-go (github.com/twmb/franz-go: kgo and kadm) against Weir, beside librdkafka: its
idempotent acks=all producer with every codec read back byte for byte by librdkafka; its
group consumer (classic protocol, cooperative-sticky) reading a whole topic, committing,
and splitting 6 partitions between two processes; kadm listing and describing a running
group and computing its lag; its consumer reading a compacted topic after cleaning.

compat/go/install.sh builds compat/go (versions pinned by its go.mod and go.sum) into
.cache/franz-go/weir-franz-go; the module runs it first (a no-op when the build is current),
so pytest alone works. A missing Go toolchain or a failed build fails the tests, never skips
them. The program prints JSON on stdout and logs to stderr (FRANZ_GO_LOG=info or debug for
more). The tests run on dedicated servers without the initial rebalance delay.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import threading
import time

import pytest
from confluent_kafka import (
    TopicPartition,
)

from clients import (
    committed,
    unique_group,
    wait_empty,
    CODECS,
    Rec,
    Stored,
    admin,
    assert_same_log,
    create_topic,
    expected_log,
    java_partition,
    make_records,
    produce_confluent,
    read_confluent,
    unique_topic,
)
from harness import REPO_ROOT, wait_until

GO_DIR = REPO_ROOT / "compat" / "go"
INSTALL = GO_DIR / "install.sh"
BINARY = REPO_ROOT / ".cache" / "franz-go" / "weir-franz-go"
_GO_MOD = (GO_DIR / "go.mod").read_text()
VERSIONS = {
    name: re.search(rf"^\s*github\.com/twmb/franz-go{path} (v\S+)", _GO_MOD, re.M).group(1)
    for name, path in (("franz-go", ""), ("kadm", "/pkg/kadm"))
}


# ---------------------------------------------------------------------------------
# Fixtures: the servers, and the built program
# ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(make_weir):
    """A dedicated server whose first rebalance of a group does not wait for more members."""
    return make_weir("franz_go", env={"WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0"})


@pytest.fixture(scope="module")
def franz():
    return build_franz_go()


def build_franz_go() -> Path:
    """The program of compat/go, built (or found up to date) by compat/go/install.sh."""
    # A missing tool is a failure, not a skip: scripts/test.sh runs install.sh, and so does this.
    proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"compat/go/install.sh failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr[-6000:]}"
    assert BINARY.is_file(), f"compat/go/install.sh succeeded but {BINARY} is missing"
    return BINARY


def run_franz(franz, server, *args, stdin: str | None = None, timeout: float = 120) -> dict:
    """Run one subcommand and parse its JSON; fails with its stderr and the server's log tail
    if it exits non-zero, or if it was built with other franz-go versions than go.mod names."""
    proc = subprocess.run(
        [str(franz), *map(str, args)], input=stdin, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"weir-franz-go {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr[-6000:]}\n"
        + server.log_tail(80)
    )
    out = json.loads(proc.stdout)
    assert {k: out["versions"].get(k) for k in VERSIONS} == VERSIONS, out["versions"]
    return out


def decode(value):
    return None if value is None else base64.b64decode(value)


def franz_stored(row) -> Stored:
    partition, offset, key, value, headers, timestamp, ts_type, _codec = row
    assert ts_type == "CreateTime", f"partition {partition} offset {offset}: timestamp type {ts_type}"
    return Stored(partition, offset, decode(key), decode(value), tuple((k, decode(v)) for k, v in headers), timestamp)


def by_partition(records) -> dict[int, list[Stored]]:
    out: dict[int, list[Stored]] = {}
    for rec in records:
        out.setdefault(rec.partition, []).append(rec)
    return out


class Member:
    """One franz-go group member (``group-consume``) in its own process: its JSON events are
    read by a thread; what it owns and how many records it read are kept up to date."""

    def __init__(self, franz, server, topic: str, group: str, client_id: str, workdir):
        self.server = server
        self.client_id = client_id
        self.stderr_path = workdir / f"{client_id}.stderr"
        self.lock = threading.RLock()
        self.events: list[dict] = []
        self.owned: set[int] = set()
        self.count = 0
        self.done: dict | None = None
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                [str(franz), "group-consume", server.bootstrap, topic, group, client_id],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )
        self.reader = threading.Thread(target=self._read, name=f"franz-{client_id}", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self.lock:
                self.events.append(event)
                if "owned" in event:
                    self.owned = set(event["owned"])
                if event["event"] == "consumed":
                    self.count = event["count"]
                if event["event"] == "done":
                    self.done = event

    def snapshot(self, kind: str | None = None) -> list[dict]:
        with self.lock:
            return [e for e in self.events if kind is None or e["event"] == kind]

    def wait(self, predicate, what: str, timeout: float = 30):
        """Poll ``predicate(self)`` (bounded); fails with the member's stderr if it exited."""
        def check():
            assert self.proc.poll() is None or self.done is not None, (
                f"{self.client_id} exited {self.proc.returncode}:\n{self.stderr()}"
            )
            with self.lock:
                return predicate(self)
        try:
            return wait_until(check, timeout, interval=0.02, what=f"{self.client_id}: {what}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nevents: {self.brief()}\n{self.stderr()}\n{self.server.log_tail(60)}") from None

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def commit(self) -> dict[int, int]:
        """Commit what it polled; returns the committed offsets it reports."""
        before = len(self.snapshot("committed"))
        self.command("commit")
        self.wait(lambda m: len(m.snapshot("committed")) > before, "a commit")
        event = self.snapshot("committed")[before]
        assert event["why"] == "command", event
        return {int(p): off for p, off in event["offsets"].items()}

    def stop(self, timeout: float = 30) -> dict:
        """Commit, leave the group and return the done event (with every record it read)."""
        self.command("stop")
        self.proc.stdin.close()
        self.wait(lambda m: m.done is not None, "the done event after stop", timeout)
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        assert code == 0, f"{self.client_id} exited {code}:\n{self.stderr()}"
        errors = self.snapshot("error")
        assert not errors and self.done["errors"] == 0, f"{self.client_id} reported errors: {errors}"
        assert {k: self.done["versions"].get(k) for k in VERSIONS} == VERSIONS, self.done["versions"]
        return self.done

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stderr(self) -> str:
        return f"--- {self.client_id} stderr ---\n" + self.stderr_path.read_text(errors="replace")[-4000:]

    def brief(self) -> list:
        return [(e["event"], e.get("owned", e.get("count", e.get("offsets", e.get("error"))))) for e in self.snapshot()][-30:]


@pytest.fixture
def members(franz, server, tmp_path):
    """Starts franz-go group members; any still running at the end of the test is killed."""
    started: list[Member] = []

    def start(topic: str, group: str, client_id: str) -> Member:
        member = Member(franz, server, topic, group, client_id, tmp_path)
        started.append(member)
        return member

    yield start
    for member in started:
        member.kill()


# ---------------------------------------------------------------------------------
# librdkafka helpers
# ---------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------
# 1. franz-go producer -> librdkafka
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_franz_go_idempotent_producer_read_back_by_librdkafka(server, franz, codec):
    """franz-go's default producer (idempotent, acks=all) with CODEC sends 400 keyed records
    with headers (binary, empty, null and repeated header values; null, empty and 3 KB values)
    to a 3-partition topic under one producer id; each lands on Java's murmur2 partition at
    the offset franz-go reported, contiguous from 0, and librdkafka reads every one back byte
    for byte with franz-go's CreateTime timestamps. franz-go reads the same log back, from
    batches stored with CODEC (or uncompressed, when compressing would not shrink a batch)."""
    bootstrap = server.bootstrap
    topic = unique_topic(f"franz-produce-{codec}")
    create_topic(bootstrap, topic, partitions=3)
    records = make_records(400, seed=91 + CODECS.index(codec), tag=f"franz-{codec}")

    def b64(data: bytes | None):
        return None if data is None else base64.b64encode(data).decode()

    payload = {"records": [
        {"key": b64(r.key), "value": b64(r.value), "headers": [[k, b64(v)] for k, v in r.headers]} for r in records
    ]}
    out = run_franz(franz, server, "produce", bootstrap, topic, codec, stdin=json.dumps(payload))

    [producer] = out["producers"]
    pid, epoch = map(int, producer.split("/"))
    assert pid >= 0 and epoch >= 0, f"franz-go did not produce idempotently (producer id/epoch {producer})"
    delivered = [tuple(d) for d in out["delivered"]]
    assert len(delivered) == len(records)
    wrong = [(i, p, java_partition(r.key, 3)) for i, (r, (p, _, _)) in enumerate(zip(records, delivered))
             if p != java_partition(r.key, 3)]
    assert not wrong, f"records on other partitions than murmur2(key) % 3 (index, got, want): {wrong[:5]}"
    expected = expected_log(records, delivered)
    assert sorted(expected) == [0, 1, 2], "every partition should get records"
    assert_same_log(read_confluent(bootstrap, topic, range(3)), expected, context=f"franz-go {codec} read by librdkafka")

    again = run_franz(franz, server, "consume", bootstrap, topic)
    assert_same_log(by_partition(map(franz_stored, again["records"])), expected, context=f"franz-go {codec} read by franz-go")
    stored_codecs = {row[7] for row in again["records"]}
    assert codec in stored_codecs and stored_codecs <= {codec, "none"}, f"batches read back compressed with {stored_codecs}"


# ---------------------------------------------------------------------------------
# 2. franz-go group consumers
# ---------------------------------------------------------------------------------

def test_franz_go_group_consumer_reads_everything_and_commits(server, members):
    """A franz-go group consumer (kgo.ConsumerGroup, classic protocol, cooperative-sticky,
    manual commits) alone in its group is assigned all 6 partitions in one generation, reads
    every record librdkafka produced, byte for byte and exactly once, and its commit
    (CommitUncommittedOffsets) equals the high watermarks, as librdkafka's admin reads them;
    after it leaves, the group is Empty."""
    bootstrap = server.bootstrap
    topic = unique_topic("franz-group")
    create_topic(bootstrap, topic, partitions=6)
    records = make_records(1200, seed=92, tag="franz-group")
    expected = expected_log(records, produce_confluent(bootstrap, topic, records))
    assert sorted(expected) == list(range(6)), "every partition should get records"
    ends = {p: len(rows) for p, rows in expected.items()}
    group = unique_group("g-franz-one")

    member = members(topic, group, "franz-one")
    member.wait(lambda m: m.count >= len(records), f"{len(records)} records")
    done = member.stop()

    assigned = [e for e in member.snapshot() if e["event"] in ("assigned", "revoked", "lost")]
    assert [(e["event"], e["partitions"]) for e in assigned if e["partitions"]] == [
        ("assigned", list(range(6))), ("revoked", list(range(6)))
    ], "one member should get everything once and give it back on leaving"
    assert done["generation"] >= 1 and done["memberId"], done
    assert done["owned"] == list(range(6))
    assert_same_log(by_partition(map(franz_stored, done["records"])), expected, context="franz-go group consumer")
    assert {int(p): off for p, off in done["committed"].items()} == ends
    assert committed(bootstrap, group, topic, range(6)) == ends
    assert wait_empty(bootstrap, group).members == []


def test_two_franz_go_members_split_six_partitions_cooperatively(server, members):
    """Two franz-go members (separate processes, cooperative-sticky) of one group: the first
    gets all 6 partitions and reads the first 600 records; when the second joins, the first
    commits and gives up exactly the partitions the second then owns, without losing any,
    so that they own 3 and 3, disjoint and complete. The next 600 records are read by their
    owners: between them every record exactly once, byte for byte, and the group's commits
    equal the high watermarks."""
    bootstrap = server.bootstrap
    topic = unique_topic("franz-split")
    create_topic(bootstrap, topic, partitions=6)
    records = make_records(1200, seed=93, tag="franz-split")
    first, second = records[:600], records[600:]
    delivered = produce_confluent(bootstrap, topic, first)
    group = unique_group("g-franz-two")
    everything = set(range(6))

    a = members(topic, group, "franz-a")
    a.wait(lambda m: m.owned == everything and m.count >= len(first), "all 6 partitions and the first 600 records")
    b = members(topic, group, "franz-b")

    def split(_m):
        return a.owned and b.owned and a.owned.isdisjoint(b.owned) and a.owned | b.owned == everything
    b.wait(split, "the two members to split the 6 partitions")
    owned_a, owned_b = set(a.owned), set(b.owned)
    assert (len(owned_a), len(owned_b)) == (3, 3), f"cooperative-sticky should split 6 partitions 3/3: {owned_a} {owned_b}"

    delivered += produce_confluent(bootstrap, topic, second)
    expected = expected_log(records, delivered)
    ends = {p: len(rows) for p, rows in expected.items()}
    assert sorted(ends) == list(range(6)), "every partition should get records"
    a.wait(lambda m: m.count + b.count >= len(records), "the two members to read all 1200 records")
    done_a, done_b = a.stop(), b.stop()

    for m in (a, b):
        lost = m.snapshot("lost")
        assert not [e for e in lost if e["partitions"]], f"{m.client_id} lost partitions: {lost}"
    a_changes = [(e["event"], set(e["partitions"])) for e in a.snapshot() if e["event"] in ("assigned", "revoked") and e["partitions"]]
    b_changes = [(e["event"], set(e["partitions"])) for e in b.snapshot() if e["event"] in ("assigned", "revoked") and e["partitions"]]
    assert a_changes == [("assigned", everything), ("revoked", owned_b), ("revoked", owned_a)], a_changes
    assert b_changes == [("assigned", owned_b), ("revoked", owned_b)], b_changes
    revoke_commits = [e for e in a.snapshot("committed") if e["why"] == "revoke"]
    assert revoke_commits, "the first member should commit before giving partitions up"
    assert (done_a["owned"], done_b["owned"]) == (sorted(owned_a), sorted(owned_b))
    assert done_a["memberId"] != done_b["memberId"]
    assert done_a["generation"] == done_b["generation"], (done_a["generation"], done_b["generation"])

    assert {r[0] for r in done_b["records"]} <= owned_b, "the second member read partitions it does not own"
    for done in (done_a, done_b):
        for p, got in by_partition(map(franz_stored, done["records"])).items():
            offsets = [r.offset for r in got]
            assert offsets == sorted(set(offsets)), f"{done['memberId']} read partition {p} out of order or twice"
    union = sorted((franz_stored(r) for d in (done_a, done_b) for r in d["records"]), key=lambda r: (r.partition, r.offset))
    assert_same_log(by_partition(union), expected, context="two franz-go members together")
    assert {int(p): off for p, off in done_b["committed"].items()} == {p: ends[p] for p in owned_b}
    assert committed(bootstrap, group, topic, range(6)) == ends
    assert wait_empty(bootstrap, group).members == []


# ---------------------------------------------------------------------------------
# 3. kadm: list, describe, lag
# ---------------------------------------------------------------------------------

def test_kadm_lists_describes_and_computes_lag_of_a_running_group(server, franz, members):
    """kadm against a franz-go member that committed part of what librdkafka produced: while
    it runs, ListGroups shows the group Stable (also filtered to Stable), DescribeGroups gives
    its state, protocol, coordinator and the member with its client id, host, subscription
    and all 3 partitions; FetchOffsets gives the commits, ListEndOffsets the high watermarks,
    and both CalculateGroupLag and Lag give per partition produced minus committed. Once the
    member committed everything and left, the group is Empty with no members and no lag."""
    bootstrap = server.bootstrap
    topic = unique_topic("franz-lag")
    create_topic(bootstrap, topic, partitions=3)
    first = {0: 12, 1: 20, 2: 7}
    extra = {0: 3, 1: 0, 2: 5}

    def produce(sizes, tag):
        rows = [Rec(key=f"{tag}-{p}-{i}".encode(), value=f"v{i}".encode(), partition=p) for p, n in sizes.items() for i in range(n)]
        produce_confluent(bootstrap, topic, rows)

    produce(first, "first")
    group = unique_group("g-franz-lag")
    member = members(topic, group, "weir-franz-go-lag")
    member.wait(lambda m: m.count >= sum(first.values()), "the first 39 records")
    assert member.commit() == first
    produce(extra, "extra")
    ends = {p: first[p] + extra[p] for p in first}
    member.wait(lambda m: m.count >= sum(ends.values()), "the extra 8 records")  # read, not committed
    [assigned] = [e for e in member.snapshot("assigned") if e["partitions"]]
    member_id = assigned["memberId"]
    host, port = bootstrap.rsplit(":", 1)

    out = run_franz(franz, server, "admin", bootstrap, group, topic)
    assert out["listGroups"].get(group) == {
        "state": "Stable", "protocolType": "consumer", "groupType": "classic", "coordinator": server.node_id
    }, out["listGroups"]
    assert group in out["listGroupsStable"]
    assert out["describe"] == {
        "group": group, "state": "Stable", "protocolType": "consumer", "protocol": "cooperative-sticky",
        "coordinator": [server.node_id, host, int(port)], "error": None,
        "members": [{
            "memberId": member_id, "instanceId": None, "clientId": "weir-franz-go-lag", "clientHost": "/127.0.0.1",
            "joinTopics": [topic], "assigned": {topic: [0, 1, 2]},
        }],
    }
    assert out["fetchOffsets"] == {topic: {str(p): off for p, off in first.items()}}
    assert out["endOffsets"] == {str(p): off for p, off in ends.items()}
    assert out["calculatedLag"] == [[topic, p, first[p], ends[p], extra[p], None] for p in range(3)]
    assert out["lag"] == {
        "state": "Stable", "total": sum(extra.values()), "error": None,
        "partitions": [
            {"topic": topic, "partition": p, "commit": first[p], "start": 0, "end": ends[p], "lag": extra[p],
             "memberId": member_id, "error": None}
            for p in range(3)
        ],
    }

    done = member.stop()
    assert {int(p): off for p, off in done["committed"].items()} == ends
    wait_empty(bootstrap, group)
    out = run_franz(franz, server, "admin", bootstrap, group, topic)
    assert out["listGroups"].get(group, {}).get("state") == "Empty", out["listGroups"]
    assert group not in out["listGroupsStable"]
    assert (out["describe"]["state"], out["describe"]["members"]) == ("Empty", [])
    assert out["fetchOffsets"] == {topic: {str(p): off for p, off in ends.items()}}
    assert out["lag"]["total"] == 0
    assert [(r["partition"], r["commit"], r["end"], r["lag"], r["memberId"]) for r in out["lag"]["partitions"]] == [
        (p, ends[p], ends[p], 0, None) for p in range(3)
    ]


# ---------------------------------------------------------------------------------
# 4. A compacted topic
# ---------------------------------------------------------------------------------

KEYS = 40
ROUNDS = 6
SEGMENT_MS = 150


def test_franz_go_reads_a_compacted_topic_after_cleaning(make_weir, franz):
    """librdkafka writes 6 rounds of updates to 40 keys (a new segment each round, every
    codec) and tombstones for 5 of them into a compacted topic; once the cleaner ran, the
    log has gaps in its offsets and franz-go, reading from the start by assignment, gets
    exactly what librdkafka gets: the latest value per key (tombstones as null values, kept
    for delete.retention.ms) at its original offset, once each."""
    weir = make_weir("franz_go_compaction", env={"WEIR_LOG_CLEANER_BACKOFF_MS": "200"})
    bootstrap = weir.bootstrap
    topic = unique_topic("franz-compacted")
    create_topic(bootstrap, topic, partitions=1, config={
        "cleanup.policy": "compact", "segment.ms": str(SEGMENT_MS), "min.cleanable.dirty.ratio": "0.01",
    })
    latest: dict[bytes, bytes | None] = {}
    written = 0
    for r in range(ROUNDS):
        rows = [Rec(key=f"key-{k:03}".encode(), value=f"round-{r}-{k}".encode() * 3) for k in range(KEYS)]
        if r == ROUNDS - 1:
            rows = [Rec(key=f"key-{k:03}".encode(), value=None) for k in range(5)]
        produce_confluent(bootstrap, topic, rows, **{"compression.type": CODECS[r % len(CODECS)]})
        latest.update((row.key, row.value) for row in rows)
        written += len(rows)
        time.sleep(SEGMENT_MS * 1.5 / 1000)  # the next round starts a new segment (segment.ms)
    # One more record, so that everything before it is in inactive segments.
    produce_confluent(bootstrap, topic, [Rec(key=b"zz-roll", value=b"roll")])
    latest[b"zz-roll"] = b"roll"
    written += 1

    def cleaned():
        # The cleaner may have passed over part of the log while it was being written; wait
        # for the pass that covers everything below the active segment.
        rows = read_confluent(bootstrap, topic, [0])[0]
        return rows if len(rows) == len(latest) else None

    rdk = wait_until(cleaned, 30, what="the cleaner to compact the whole topic")
    assert {r.key: r.value for r in rdk} == latest
    offsets = [r.offset for r in rdk]
    assert offsets[-1] == written - 1 and len(offsets) < written, "the cleaned log should have gaps in its offsets"

    out = run_franz(franz, weir, "consume", bootstrap, topic)
    assert (out["starts"], out["ends"]) == ({"0": 0}, {"0": written})
    got = [franz_stored(row) for row in out["records"]]
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (r.offset, r.key, r.value, r.headers, r.timestamp) for r in rdk
    ], "franz-go and librdkafka read different compacted logs"
    assert len({r.key for r in got}) == len(got), "a key read twice after cleaning"
