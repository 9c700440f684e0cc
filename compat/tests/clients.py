"""Client-side helpers shared by the tests: producing, reading back and comparing
records with librdkafka (confluent-kafka) and kafka-python, plus Kafka's murmur2.

Records are compared as plain tuples so that a mismatch shows the exact field:
``Stored(partition, offset, key, value, headers, timestamp)``.

Consumers never join a group: they use ``assign()`` with explicit offsets and
commit nothing.  confluent-kafka refuses to build a Consumer without a
``group.id``, so a placeholder id is set; it is never used because nothing
subscribes or commits, and librdkafka only looks for a group coordinator on
brokers whose ApiVersions list FindCoordinator.
"""

from __future__ import annotations

import gc
import random
import time
import uuid
from dataclasses import dataclass
from typing import Iterable, NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

import wire
from harness import Deadline, wait_until

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
UNUSED_GROUP_ID = "weir-compat-assign-only"
TIMESTAMP_CREATE_TIME = 1  # librdkafka's TIMESTAMP_CREATE_TIME


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# ---------------------------------------------------------------------------------
# Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) and the Java
# client's default partitioner for keyed records.
# ---------------------------------------------------------------------------------

def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data``, as a signed Java int."""
    length = len(data)
    m = 0x5BD1E995
    r = 24
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    full = length & ~3
    for i in range(0, full, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[full + 2] << 16
    if rest >= 2:
        h ^= data[full + 1] << 8
    if rest >= 1:
        h ^= data[full]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, num_partitions: int) -> int:
    """Partition the Java client's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# ---------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rec:
    """A record to produce. ``partition``/``timestamp`` None = let the client decide."""

    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    timestamp: int | None = None
    partition: int | None = None


class Stored(NamedTuple):
    """A record as it sits in the log."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int


def norm_headers(headers) -> tuple:
    if not headers:
        return ()
    return tuple((k, None if v is None else bytes(v)) for k, v in headers)


def make_records(count: int, seed: int, tag: str, null_header_values: bool = True) -> list[Rec]:
    """Deterministic keyed records with varied, binary values and headers.

    Keys repeat, so several records share a partition and their order matters.
    Values cover empty, null (tombstone), tiny, binary and compressible payloads.
    """
    rng = random.Random(seed)
    records = []
    for i in range(count):
        if i % 7 == 3:
            key = bytes([0, 255, i % 251, 10, 13]) + tag.encode()  # binary key
        else:
            key = f"{tag}-key-{i % 211}".encode()
        shape = i % 10
        if shape == 0:
            value = b""
        elif shape == 1 and i % 20 == 1:
            value = None
        elif shape in (2, 3):
            value = rng.randbytes(rng.randint(1, 64))
        elif shape == 4:
            value = (f"{tag} record {i} " * rng.randint(10, 200)).encode()  # compressible
        elif shape == 5:
            value = rng.randbytes(rng.randint(500, 3000))
        else:
            value = f"{tag}:{i}:{rng.random()}".encode()
        if i % 5 == 0:
            headers = ()
        else:
            headers = [("i", str(i).encode()), ("bin", rng.randbytes(rng.randint(0, 16)))]
            if i % 3 == 0:
                headers += [("dup", b"first"), ("dup", b"second")]  # repeated key, order kept
            if i % 4 == 0:
                headers.append(("empty", b""))
            if null_header_values and i % 9 == 0:
                headers.append(("null", None))
            headers = tuple(headers)
        records.append(Rec(key=key, value=value, headers=headers))
    return records


def expected_log(records: list[Rec], delivered: list[tuple[int, int, int]]) -> dict[int, list[Stored]]:
    """Combine produced records with their (partition, offset, timestamp) delivery reports.

    Asserts that in every partition the offsets are contiguous from 0 in produce order.
    """
    per_partition: dict[int, list[Stored]] = {}
    for rec, (partition, offset, timestamp) in zip(records, delivered, strict=True):
        per_partition.setdefault(partition, []).append(
            Stored(partition, offset, rec.key, rec.value, norm_headers(rec.headers), timestamp)
        )
    for partition, rows in per_partition.items():
        offsets = [r.offset for r in rows]
        assert offsets == list(range(len(rows))), (
            f"partition {partition}: delivery-report offsets are not contiguous from 0 in produce order: "
            f"first few {offsets[:10]}"
        )
    return per_partition


def assert_same_log(actual: dict[int, list[Stored]], expected: dict[int, list[Stored]], context: str = ""):
    """Compare two logs partition by partition, record by record, field by field."""
    prefix = f"{context}: " if context else ""
    partitions = sorted(set(actual) | set(expected))
    for p in partitions:
        got = actual.get(p, [])
        want = expected.get(p, [])
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                diffs = [f for f in Stored._fields if getattr(g, f) != getattr(w, f)]
                raise AssertionError(
                    f"{prefix}partition {p} record #{i} differs in {diffs}:\n  got  {_short(g)}\n  want {_short(w)}"
                )
        assert len(got) == len(want), (
            f"{prefix}partition {p}: read {len(got)} records, expected {len(want)}"
        )


def _short(rec: Stored) -> str:
    def cut(b):
        if b is None:
            return "None"
        return repr(b[:40]) + (f"...({len(b)} bytes)" if len(b) > 40 else "")

    return (
        f"Stored(partition={rec.partition}, offset={rec.offset}, key={cut(rec.key)}, "
        f"value={cut(rec.value)}, headers={rec.headers!r}, timestamp={rec.timestamp})"
    )


# ---------------------------------------------------------------------------------
# Admin (confluent-kafka)
# ---------------------------------------------------------------------------------

_ADMIN_CLIENTS: dict[str, AdminClient] = {}


def admin(bootstrap: str) -> AdminClient:
    """A librdkafka admin client for ``bootstrap``, shared by the tests.

    It is kept alive on purpose: a client that is garbage collected while a
    request is pending fails that request with _DESTROY.
    """
    client = _ADMIN_CLIENTS.get(bootstrap)
    if client is None:
        client = AdminClient(
            {"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000, "log.connection.close": False}
        )
        _ADMIN_CLIENTS[bootstrap] = client
    return client


def drop_admin_client(bootstrap: str) -> None:
    """Forget (and so destroy) the shared admin client before its broker goes away for good."""
    _ADMIN_CLIENTS.pop(bootstrap, None)
    gc.collect()


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    """Create a topic with librdkafka's admin client and wait until its leaders are known."""
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        request_timeout=30,
    )
    futures[name].result(timeout=40)
    wait_for_partitions(bootstrap, name, partitions)


def topic_partition_counts(bootstrap: str, client: AdminClient | None = None) -> dict[str, int]:
    """All topics and their partition counts (a Metadata request for all topics)."""
    client = client or admin(bootstrap)
    md = client.list_topics(timeout=20)
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def wait_for_partitions(bootstrap: str, name: str, partitions: int, timeout: float = 30) -> None:
    client = admin(bootstrap)

    def ready():
        md = client.list_topics(timeout=10)
        t = md.topics.get(name)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        )

    wait_until(ready, timeout, interval=0.2, what=f"topic {name} with {partitions} partitions in metadata")


# ---------------------------------------------------------------------------------
# Producing
# ---------------------------------------------------------------------------------

def produce_confluent(bootstrap: str, topic: str, records: list[Rec], timeout: float = 120, per_second: float | None = None, **conf):
    """Produce ``records`` in order with librdkafka; returns [(partition, offset, timestamp)].

    With ``per_second`` the records are sent at that pace, so the load spans a change made
    meanwhile. Fails unless every record is acknowledged without error.
    """
    config = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "partitioner": "murmur2_random",
        "message.timeout.ms": int(timeout * 1000),
        "log.connection.close": False,
    }
    config.update(conf)
    producer = Producer(config)
    reports: list = [None] * len(records)

    def on_delivery(index):
        def callback(err, msg):
            reports[index] = (err, msg.partition(), msg.offset(), msg.timestamp())

        return callback

    deadline = Deadline(timeout)
    began = time.monotonic()
    for i, rec in enumerate(records):
        if per_second:
            pause = began + i / per_second - time.monotonic()
            if pause > 0:
                producer.poll(pause)
        kwargs = {"key": rec.key, "value": rec.value, "on_delivery": on_delivery(i)}
        if rec.headers:
            kwargs["headers"] = list(rec.headers)
        if rec.timestamp is not None:
            kwargs["timestamp"] = rec.timestamp
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
                assert not deadline.expired(), "producer queue stayed full"
        producer.poll(0)
    remaining = producer.flush(max(1.0, deadline.remaining()))
    assert remaining == 0, f"{remaining} records still undelivered after {timeout:.0f}s"

    delivered = []
    for i, report in enumerate(reports):
        assert report is not None, f"no delivery report for record {i}"
        err, partition, offset, (ts_type, ts) = report
        assert err is None, f"record {i} failed: {err}"
        assert ts_type == TIMESTAMP_CREATE_TIME, f"record {i}: timestamp type {ts_type}, want CreateTime"
        delivered.append((partition, offset, ts))
    return delivered


def kafka_python_producer(bootstrap: str, **conf):
    from kafka import KafkaProducer

    config = {
        "bootstrap_servers": bootstrap,
        "linger_ms": 5,
        "request_timeout_ms": 30000,
        "max_block_ms": 30000,
    }
    config.update(conf)
    return KafkaProducer(**config)


def produce_kafka_python(bootstrap: str, topic: str, records: list[Rec], timeout: float = 120, **conf):
    """Produce ``records`` in order with kafka-python; returns [(partition, offset, timestamp)]."""
    producer = kafka_python_producer(bootstrap, **conf)
    try:
        futures = []
        for rec in records:
            futures.append(
                producer.send(
                    topic,
                    key=rec.key,
                    value=rec.value,
                    headers=list(rec.headers) if rec.headers else None,
                    partition=rec.partition,
                    timestamp_ms=rec.timestamp,
                )
            )
        producer.flush(timeout=timeout)
        delivered = []
        for i, fut in enumerate(futures):
            md = fut.get(timeout=1)
            delivered.append((md.partition, md.offset, md.timestamp))
        return delivered
    finally:
        producer.close(timeout=10)


def produce(client: str, bootstrap: str, topic: str, records: list[Rec], **conf):
    if client == "librdkafka":
        return produce_confluent(bootstrap, topic, records, **conf)
    if client == "kafka-python":
        return produce_kafka_python(bootstrap, topic, records, **conf)
    raise ValueError(client)


# ---------------------------------------------------------------------------------
# Reading back by assignment (no consumer group)
# ---------------------------------------------------------------------------------

def confluent_consumer(bootstrap: str, **conf) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": UNUSED_GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        "auto.offset.reset": "error",
        "log.connection.close": False,
    }
    config.update(conf)
    return Consumer(config)


def group_consumer(bootstrap: str, group: str, **conf) -> Consumer:
    """A librdkafka consumer of ``group`` (manual commits, from the earliest offset, 500 ms
    heartbeats); a setting given as None is left at librdkafka's default."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "heartbeat.interval.ms": 500,
        "log.connection.close": False,
    }
    config.update(conf)
    return Consumer({k: v for k, v in config.items() if v is not None})


def kafka_python_consumer(bootstrap: str, **conf):
    from kafka import KafkaConsumer

    config = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 100,
        "request_timeout_ms": 30000,
    }
    config.update(conf)
    return KafkaConsumer(**config)


def read_confluent(bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = 90) -> dict[int, list[Stored]]:
    """Read every partition from its first offset up to its current high watermark with librdkafka."""
    partitions = list(partitions)
    consumer = confluent_consumer(bootstrap)
    try:
        ends = {}
        starts = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)
            starts[p], ends[p] = low, high
        out: dict[int, list[Stored]] = {p: [] for p in partitions}
        todo = [p for p in partitions if ends[p] > starts[p]]
        if not todo:
            return out
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        next_offset = dict(starts)
        deadline = Deadline(timeout)
        while any(next_offset[p] < ends[p] for p in todo):
            assert not deadline.expired(), (
                f"librdkafka read of {topic} incomplete after {timeout:.0f}s: "
                f"at {next_offset}, high watermarks {ends}"
            )
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                ts_type, ts = msg.timestamp()
                assert ts_type == TIMESTAMP_CREATE_TIME, f"timestamp type {ts_type} at offset {msg.offset()}"
                out[msg.partition()].append(
                    Stored(msg.partition(), msg.offset(), msg.key(), msg.value(), norm_headers(msg.headers()), ts)
                )
                next_offset[msg.partition()] = msg.offset() + 1
        return out
    finally:
        consumer.close()


def read_kafka_python(bootstrap: str, topic: str, partitions: Iterable[int], timeout: float = 90) -> dict[int, list[Stored]]:
    """Read every partition from its first offset up to its current high watermark with kafka-python."""
    from kafka import TopicPartition as KTopicPartition

    partitions = list(partitions)
    consumer = kafka_python_consumer(bootstrap)
    try:
        tps = [KTopicPartition(topic, p) for p in partitions]
        starts = {tp.partition: off for tp, off in consumer.beginning_offsets(tps).items()}
        ends = {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
        out: dict[int, list[Stored]] = {p: [] for p in partitions}
        todo = [tp for tp in tps if ends[tp.partition] > starts[tp.partition]]
        if not todo:
            return out
        consumer.assign(todo)
        consumer.seek_to_beginning(*todo)
        next_offset = dict(starts)
        deadline = Deadline(timeout)
        while any(next_offset[tp.partition] < ends[tp.partition] for tp in todo):
            assert not deadline.expired(), (
                f"kafka-python read of {topic} incomplete after {timeout:.0f}s: "
                f"at {next_offset}, high watermarks {ends}"
            )
            batches = consumer.poll(timeout_ms=500, max_records=2000)
            for tp, msgs in batches.items():
                for msg in msgs:
                    assert msg.timestamp_type == 0, f"timestamp type {msg.timestamp_type} at offset {msg.offset}"
                    out[tp.partition].append(
                        Stored(tp.partition, msg.offset, msg.key, msg.value, norm_headers(msg.headers), msg.timestamp)
                    )
                    next_offset[tp.partition] = msg.offset + 1
        return out
    finally:
        consumer.close()


def read_back(client: str, bootstrap: str, topic: str, partitions: Iterable[int], **kw) -> dict[int, list[Stored]]:
    if client == "librdkafka":
        return read_confluent(bootstrap, topic, partitions, **kw)
    if client == "kafka-python":
        return read_kafka_python(bootstrap, topic, partitions, **kw)
    raise ValueError(client)


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    consumer = confluent_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)[1]
    finally:
        consumer.close()


def assert_serving(bootstrap: str, topic: str) -> None:
    """A fresh raw connection answers ApiVersions and a normal client can produce and consume."""
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.api_versions_request(0, 4242))
        reply = conn.recv_frame(timeout=10)
        assert reply is not None, "ApiVersions v0 on a fresh connection: connection closed"
        parsed = wire.parse_api_versions_v0(reply)
        assert (parsed["correlation_id"], parsed["error_code"]) == (4242, 0)
    marker = f"still-serving-{time.monotonic_ns()}".encode()
    [(partition, offset, _ts)] = produce_confluent(bootstrap, topic, [Rec(key=b"health", value=marker, partition=0)])
    log = read_confluent(bootstrap, topic, [0])[0]
    assert log[offset].value == marker


# ---------------------------------------------------------------------------------
# Consumer groups, as librdkafka's admin client sees them
# ---------------------------------------------------------------------------------

def unique_group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def committed(bootstrap: str, group: str, topic: str, partitions) -> dict[int, int]:
    """The group's committed offsets, read with librdkafka's admin client (OFFSET_INVALID: none)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])
    deadline = Deadline(30)
    while True:
        # A client of its own, which looks the coordinator up afresh: librdkafka's admin client
        # caches the coordinator, and crashes (a NULL consumer group in its OffsetFetch
        # handler) when that broker answers NOT_COORDINATOR after the group moved.
        client = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 20000, "log.connection.close": False})
        try:
            result = client.list_consumer_group_offsets([request], request_timeout=20)[group].result(timeout=30)
            break
        except KafkaException as error:
            # The coordinator may be loading the group (after a restart or a failover): retry.
            loading = error.args[0].code() in (
                KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE,
                KafkaError.NOT_COORDINATOR,
            )
            if not loading or deadline.expired():
                raise
            time.sleep(0.2)
    out = {}
    for tp in result.topic_partitions:
        assert tp.error is None, f"{group} {tp.topic}[{tp.partition}]: {tp.error}"
        out[tp.partition] = tp.offset
    return out


def describe_group(bootstrap: str, group: str):
    """The group as librdkafka's admin client describes it."""
    return admin(bootstrap).describe_consumer_groups([group], request_timeout=20)[group].result(timeout=30)


def wait_empty(bootstrap: str, group: str):
    """The group's description once it is Empty (LeaveGroup travels on the leaving client's
    own connection, so another client may ask a moment before it is processed)."""
    return wait_until(
        lambda: (d := describe_group(bootstrap, group)).state == ConsumerGroupState.EMPTY and d,
        10, what=f"group {group} to become Empty",
    )
