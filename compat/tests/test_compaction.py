"""Log compaction (`cleanup.policy=compact`) as Kafka clients see it: a topic with many updates
per key and tombstones, read from the beginning by librdkafka and kafka-python after the
cleaner ran, holds exactly the latest value per key (offsets kept, gaps between them);
tombstones stay readable for `delete.retention.ms` and are gone after; keyless records are
refused; `__consumer_offsets` is compacted. On a topic written by transactions the aborted
records go, and each transaction's marker once none of its records is left and
`delete.retention.ms` has passed.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from confluent_kafka import KafkaError, Producer

from clients import Rec, admin, create_topic, produce_confluent, read_confluent, read_kafka_python, unique_topic
from harness import wait_until
from test_transactions import read_records, unique_id

KEYS = 40
ROUNDS = 8
SEGMENT_MS = 150
TOMBSTONED = range(0, 8)


def key(k: int) -> bytes:
    return f"key-{k:03}".encode()


def write_rounds(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """ROUNDS updates of every key, then tombstones for some; each round after `segment.ms`
    so it starts a new segment. Returns the latest value per key."""
    latest: dict[bytes, bytes | None] = {}
    for r in range(ROUNDS):
        records = [Rec(key=key(k), value=f"round-{r}-{k}".encode() * 3) for k in range(KEYS)]
        if r == ROUNDS - 1:
            records = [Rec(key=key(k), value=None) for k in TOMBSTONED]
        produce_confluent(bootstrap, topic, records, **{"compression.type": ["none", "gzip", "lz4", "zstd", "snappy"][r % 5]})
        for rec in records:
            latest[rec.key] = rec.value
        time.sleep(SEGMENT_MS * 1.5 / 1000)
    return latest


def roll(bootstrap: str, topic: str, tag: str) -> None:
    """One more record after segment.ms, so everything before it is in inactive segments."""
    time.sleep(SEGMENT_MS * 1.5 / 1000)
    produce_confluent(bootstrap, topic, [Rec(key=b"zz-roll", value=tag.encode())])


def compacted_view(records) -> dict[bytes, bytes | None]:
    """Key → value as read, asserting each key below the active segment appears once."""
    seen: dict[bytes, bytes | None] = {}
    for r in records:
        if r.key != b"zz-roll":
            assert r.key not in seen, f"key {r.key!r} read twice after cleaning (offsets {r.offset})"
        seen[r.key] = r.value
    return seen


def compacted_topic(make_weir, name: str):
    """A server whose cleaner looks every 200 ms, and a compacted topic of one partition on it
    that rolls a segment every SEGMENT_MS, cleans at any dirty ratio and keeps tombstones
    (and spent transaction markers) 4 s: (server, topic)."""
    weir = make_weir(name, env={"WEIR_LOG_CLEANER_BACKOFF_MS": "200"})
    topic = unique_topic(name)
    create_topic(
        weir.bootstrap,
        topic,
        partitions=1,
        config={
            "cleanup.policy": "compact",
            "segment.ms": str(SEGMENT_MS),
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "4000",
        },
    )
    return weir, topic


def test_a_compacted_topic_keeps_the_latest_value_per_key_and_drops_old_tombstones(make_weir):
    weir, topic = compacted_topic(make_weir, "compacted")
    bootstrap = weir.bootstrap
    latest = write_rounds(bootstrap, topic)
    roll(bootstrap, topic, "first")
    written = ROUNDS * KEYS - KEYS + len(TOMBSTONED) + 1
    expected = dict(latest)
    expected[b"zz-roll"] = b"first"

    def cleaned():
        # The cleaner may have passed over part of the log while it was being written; wait
        # for the pass that covers everything below the active segment.
        records = read_confluent(bootstrap, topic, [0])[0]
        return records if len(records) == len(expected) else None

    records = wait_until(cleaned, 30, what="the cleaner to compact the whole topic")
    view = compacted_view(records)
    assert view == expected, "not exactly the latest value per key (tombstones still readable)"
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert offsets[-1] == written - 1, "the newest record kept its offset"
    # kafka-python reads the same compacted log (gaps in offsets, rewritten batches).
    again = read_kafka_python(bootstrap, topic, [0])[0]
    assert [(r.offset, r.key, r.value) for r in again] == [(r.offset, r.key, r.value) for r in records]

    # After delete.retention.ms the tombstones go at the next cleaning.
    time.sleep(4.5)
    roll(bootstrap, topic, "second")

    def tombstones_gone():
        records = read_confluent(bootstrap, topic, [0])[0]
        view = {r.key: r.value for r in records}
        return view if all(key(k) not in view for k in TOMBSTONED) else None

    view = wait_until(tombstones_gone, 30, what="expired tombstones to be removed")
    expected = {k: v for k, v in latest.items() if v is not None}
    expected[b"zz-roll"] = b"second"
    assert view == expected


def test_keyless_records_are_refused_by_a_compacted_topic(bootstrap):
    topic = unique_topic("compacted-keys")
    create_topic(bootstrap, topic, partitions=1, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 20000})
    errors = []
    # Separate requests: a batch with one keyless record is refused whole, as in Kafka.
    producer.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    producer.produce(topic, key=b"k", value=b"keyed", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors
    assert errors[1] is None, errors
    assert [(r.key, r.value) for r in read_confluent(bootstrap, topic, [0])[0]] == [(b"k", b"keyed")]


def test_consumer_offsets_is_a_compacted_internal_topic(bootstrap):
    from confluent_kafka import Consumer

    group_topic = unique_topic("offsets-policy")
    create_topic(bootstrap, group_topic, partitions=1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([group_topic])
        wait_until(lambda: consumer.poll(0.2) is None and consumer.assignment(), 30, what="an assignment")
    finally:
        consumer.close()
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, "__consumer_offsets")
    configs = admin(bootstrap).describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "compact"
    metadata = admin(bootstrap).list_topics(timeout=10)
    assert "__consumer_offsets" in metadata.topics


def test_kill_9_while_cleaning_loses_nothing_and_reads_compacted(make_weir):
    """The server is killed with SIGKILL at varying moments while the cleaner works on a
    compacted topic; after every restart each key reads its latest acknowledged value (no
    cleaning half-applied, nothing acknowledged lost), and the cleaning finishes."""
    weir = make_weir("compaction-kill", env={"WEIR_LOG_CLEANER_BACKOFF_MS": "50"})
    topic = unique_topic("compacted-kill")
    create_topic(
        weir.bootstrap,
        topic,
        partitions=1,
        config={"cleanup.policy": "compact", "segment.ms": "50", "min.cleanable.dirty.ratio": "0.01"},
    )
    latest: dict[bytes, bytes] = {}
    for attempt in range(4):
        for r in range(5):
            records = [Rec(key=key(k), value=f"a{attempt}-r{r}-{k}".encode() * 20) for k in range(200)]
            produce_confluent(weir.bootstrap, topic, records, **{"acks": "all"})
            latest.update({rec.key: rec.value for rec in records})
            time.sleep(0.08)
        produce_confluent(weir.bootstrap, topic, [Rec(key=b"zz-roll", value=str(attempt).encode())])
        latest[b"zz-roll"] = str(attempt).encode()
        time.sleep(0.02 + 0.07 * attempt)
        weir.kill()
        weir.start()
        view = {}
        for r in read_confluent(weir.bootstrap, topic, [0])[0]:
            view[r.key] = r.value
        assert view == latest, f"after kill -9 #{attempt + 1}: not every key reads its latest value"

    def compacted():
        records = read_confluent(weir.bootstrap, topic, [0])[0]
        return records if len(records) <= len(latest) + 200 else None

    wait_until(compacted, 30, what="the cleaning to finish after the restarts")


def control_batches(partition_dir: Path) -> list[int] | None:
    """Base offsets of the control batches (transaction markers) in a partition's segments as
    the disk holds them; None when a segment went while it was read (a cleaning's swap)."""
    found = []
    try:
        for segment in sorted(partition_dir.glob("*.log")):
            data = segment.read_bytes()
            at = 0
            while at + 23 <= len(data):
                base, length = struct.unpack_from(">qi", data, at)
                if length <= 0:
                    break
                (attributes,) = struct.unpack_from(">h", data, at + 21)
                if attributes & 0x20:
                    found.append(base)
                at += 12 + length
    except FileNotFoundError:
        return None
    return found


def test_transactions_on_a_compacted_topic_lose_aborted_records_then_spent_markers(make_weir):
    """A compacted topic written by a transactional producer: one transaction commits ten keys,
    the next writes all ten and aborts, a third commits five of them again. Once cleaned,
    read_committed and read_uncommitted consumers alike read the latest committed value of
    each key (the aborted records are gone) and every marker is still on disk; after
    `delete.retention.ms` the aborted transaction's marker goes, and the committed ones stay,
    as records of each remain."""
    weir, topic = compacted_topic(make_weir, "compacted-txn")
    bootstrap = weir.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("compacted-txn")})
    producer.init_transactions(30)
    for values, keys, commit in (("old", range(10), True), ("aborted", range(10), False), ("new", range(5), True)):
        producer.begin_transaction()
        for k in keys:
            producer.produce(topic, key=key(k), value=values.encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        time.sleep(SEGMENT_MS * 1.5 / 1000)
    roll(bootstrap, topic, "first")
    expected = {key(k): (b"new" if k < 5 else b"old") for k in range(10)} | {b"zz-roll": b"first"}
    partition_dir = next(weir.data_dir.rglob(f"{topic}-0"))

    def cleaned():
        records = read_confluent(bootstrap, topic, [0])[0]
        return records if len(records) == len(expected) else None

    records = wait_until(cleaned, 30, what="the cleaner to remove the aborted and superseded records")
    assert compacted_view(records) == expected, "read_uncommitted reads aborted or superseded records"
    assert dict(read_records(bootstrap, topic, 1, "read_committed")) == expected
    assert len(control_batches(partition_dir) or []) == 3, "every marker stays before delete.retention.ms"

    # Past delete.retention.ms, the next cleaning finds no record of the aborted transaction
    # (the last one removed them) and removes its marker.
    time.sleep(4.5)
    roll(bootstrap, topic, "second")
    markers = wait_until(lambda: (found := control_batches(partition_dir)) is not None and len(found) == 2 and found,
                         30, what="the aborted transaction's marker to be removed")
    expected[b"zz-roll"] = b"second"
    assert dict(read_records(bootstrap, topic, 1, "read_committed")) == expected
    assert {r.key: r.value for r in read_kafka_python(bootstrap, topic, [0])[0]} == expected
    first, last = markers
    assert first == 10 and last > first, f"the two commit markers stay: {markers}"
