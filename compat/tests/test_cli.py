"""The ``weir`` command-line client against the module's server: every command's
happy path and error paths (exact exit codes and messages), producing with every
codec (read back byte for byte by librdkafka and kafka-python), the partitioner
agreeing with librdkafka's ``murmur2_random`` and Kafka's murmur2, and ``weir bench``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

from clients import (
    CODECS,
    Rec,
    admin,
    create_topic,
    high_watermark,
    java_partition,
    produce_confluent,
    read_back,
    read_confluent,
    topic_partition_counts,
    unique_topic,
    wait_for_partitions,
)
from harness import wait_until
from weir_cli import (
    Background,
    command,
    environment,
    ok,
    parse_describe,
    parse_verbose,
    run,
    runtime_error,
    usage_error,
)

UNREACHABLE = "127.0.0.1:1"
UNREACHABLE_MESSAGE = (
    "error: cannot reach any broker at 127.0.0.1:1 (is `weir server` running? see --brokers)\n"
)
DEFAULT_RETENTION_MS = "604800000"
DEFAULT_SEGMENT_BYTES = "1073741824"


def now_ms() -> int:
    return int(time.time() * 1000)


def topic_names(bootstrap: str) -> list[str]:
    return ok(["topic", "list"], bootstrap).lines


def describe(bootstrap: str, topic: str):
    return parse_describe(ok(["topic", "describe", topic], bootstrap).stdout)


def produce_lines(bootstrap: str, topic: str, lines: list[str], *flags: str, deadline: float = 60):
    """``weir produce TOPIC -v FLAGS`` fed ``lines``; returns [(partition, offset)] in input order."""
    result = ok(["produce", topic, "-v", *flags], bootstrap, stdin="".join(f"{l}\n" for l in lines), deadline=deadline)
    landed = parse_verbose(result.stdout)
    assert len(landed) == len(lines), f"produce -v printed {len(landed)} lines for {len(lines)} records"
    return landed


def consume_json(bootstrap: str, topic: str, *flags: str, deadline: float = 60) -> list[dict]:
    return ok(["consume", topic, "--format", "json", *flags], bootstrap, deadline=deadline).json_lines()


def split_line(line: str, sep: str = ":"):
    """Key and value the way ``--key-separator`` splits a line (no separator: null key)."""
    if sep in line:
        key, value = line.split(sep, 1)
        return key, value
    return None, line


def by_partition(records: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in records:
        out.setdefault(r["partition"], []).append(r)
    return out


def config_sources(bootstrap: str, topic: str) -> dict[str, tuple[str, str]]:
    """librdkafka's view of a topic's configs: key -> (value, source as the CLI names it)."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin(bootstrap).describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
    names = {"DYNAMIC_TOPIC_CONFIG": "TOPIC_CONFIG"}
    out = {}
    for key, entry in entries.items():
        source = ConfigSource(entry.source).name
        out[key] = (entry.value, names.get(source, source))
    return out


def uuid_of_kafka_id(text: str) -> str:
    """A Kafka topic id as librdkafka prints it (base64url, no padding) in UUID form."""
    return str(uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))))


# ---------------------------------------------------------------------------------
# weir topic
# ---------------------------------------------------------------------------------

def test_topic_create_list_describe(bootstrap):
    topic = unique_topic("cli-create")
    result = ok(["topic", "create", topic, "-p", "3", "-c", "retention.ms=86400000", "-c", "max.message.bytes=200000"], bootstrap)
    assert result.stdout == f"created topic {topic}\n"

    names = topic_names(bootstrap)
    assert topic in names
    assert names == sorted(names), f"topic list is not sorted: {names}"
    wait_for_partitions(bootstrap, topic, 3)

    # Some data so that the offsets columns have something to show.
    produce_confluent(bootstrap, topic, [Rec(key=None, value=b"p1-%d" % i, partition=1) for i in range(5)])
    produce_confluent(bootstrap, topic, [Rec(key=None, value=b"p2-%d" % i, partition=2) for i in range(2)])

    d = describe(bootstrap, topic)
    assert (d.name, d.partitions) == (topic, 3)
    assert sorted(d.rows) == [0, 1, 2]
    assert [(d.rows[p].start, d.rows[p].high_watermark) for p in range(3)] == [(0, 0), (0, 5), (0, 2)]

    md = admin(bootstrap).list_topics(topic, timeout=20).topics[topic]
    for p, meta in md.partitions.items():
        row = d.rows[p]
        assert (row.leader, row.replicas, row.isr) == (meta.leader, list(meta.replicas), list(meta.isrs)), (
            f"partition {p}: describe says leader/replicas/isr {row}, metadata says "
            f"{meta.leader}/{meta.replicas}/{meta.isrs}"
        )

    described = admin(bootstrap).describe_topics(TopicCollection([topic]), request_timeout=20)[topic].result(timeout=30)
    assert d.topic_id == uuid_of_kafka_id(str(described.topic_id))

    assert d.configs["retention.ms"] == ("86400000", "TOPIC_CONFIG")
    assert d.configs["max.message.bytes"] == ("200000", "TOPIC_CONFIG")
    assert d.configs["segment.bytes"] == (DEFAULT_SEGMENT_BYTES, "DEFAULT_CONFIG")
    assert d.configs["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")
    # Every config the CLI shows is what DescribeConfigs tells librdkafka.
    theirs = config_sources(bootstrap, topic)
    for key, (value, source) in d.configs.items():
        assert key in theirs, f"describe shows {key}, DescribeConfigs does not"
        assert theirs[key] == (value, source), f"{key}: CLI {value!r} ({source}), librdkafka {theirs[key]}"


def test_topic_create_with_broker_defaults(bootstrap, weir_only):
    topic = unique_topic("cli-defaults")
    ok(["topic", "create", topic], bootstrap)
    d = describe(bootstrap, topic)
    assert d.partitions == 1 and len(d.rows) == 1  # num.partitions defaults to 1
    assert all(source == "DEFAULT_CONFIG" for _, source in d.configs.values()), d.configs


def test_metadata_query_reads_the_running_servers_tables(bootstrap, weir_only):
    """`weir metadata query` reads the relational metadata a running server keeps: a topic
    created and configured through the CLI is in its tables at once; a statement that writes is
    refused and changes nothing."""
    topic = unique_topic("cli-sql")
    ok(["topic", "create", topic, "-p", "3", "-c", "retention.ms=3600000"], bootstrap)
    data_dir = str(weir_only.data_dir)
    sql = (
        "SELECT t.name, count(DISTINCT p.partition_index), c.value FROM topics t"
        " JOIN partitions p USING (topic_id) JOIN topic_configs c USING (topic_id)"
        f" WHERE t.name = '{topic}' AND c.name = 'retention.ms' GROUP BY t.name"
    )
    result = ok(["metadata", "query", "--data-dir", data_dir, sql])
    assert re.search(rf"^{topic}\s+3\s+3600000$", result.stdout, re.M), result.describe()
    assert result.stdout.endswith("(1 row)\n"), result.describe()
    host = bootstrap.rsplit(":", 1)[0]
    placement = (
        "SELECT p.partition_index, l.host, r.node_id, r.in_sync FROM partitions p"
        " JOIN topics t USING (topic_id) JOIN broker_listeners l ON l.node_id = p.leader"
        f" JOIN replicas r USING (topic_id, partition_index) WHERE t.name = '{topic}'"
        " ORDER BY p.partition_index"
    )
    rows = ok(["metadata", "query", "--data-dir", data_dir, placement])
    for index in range(3):
        assert re.search(rf"^{index}\s+{re.escape(host)}\s+1\s+1$", rows.stdout, re.M), rows.describe()
    assert rows.stdout.endswith("(3 rows)\n"), rows.describe()
    refused = run(["metadata", "query", "--data-dir", data_dir, f"DELETE FROM topics WHERE name = '{topic}'"])
    assert refused.returncode == 1 and "only statements that read" in refused.stderr, refused.describe()
    again = ok(["metadata", "query", "--data-dir", data_dir, f"SELECT name FROM topics WHERE name = '{topic}'"])
    assert topic in again.stdout, again.describe()


def test_topic_alter_config_set_and_delete(bootstrap):
    topic = unique_topic("cli-alter")
    ok(["topic", "create", topic, "-p", "1", "-c", "max.message.bytes=200000"], bootstrap)

    result = ok(["topic", "alter-config", topic, "--set", "retention.ms=3600000", "--set", "segment.ms=7200000"], bootstrap)
    assert result.stdout == f"altered configs of topic {topic}\n"
    d = describe(bootstrap, topic)
    assert d.configs["retention.ms"] == ("3600000", "TOPIC_CONFIG")
    assert d.configs["segment.ms"] == ("7200000", "TOPIC_CONFIG")
    # Altering some keys leaves the other overrides alone.
    assert d.configs["max.message.bytes"] == ("200000", "TOPIC_CONFIG")
    assert config_sources(bootstrap, topic)["retention.ms"] == ("3600000", "TOPIC_CONFIG")

    result = ok(["topic", "alter-config", topic, "--delete", "retention.ms"], bootstrap)
    assert result.stdout == f"altered configs of topic {topic}\n"
    d = describe(bootstrap, topic)
    assert d.configs["retention.ms"] == (DEFAULT_RETENTION_MS, "DEFAULT_CONFIG")
    assert d.configs["segment.ms"] == ("7200000", "TOPIC_CONFIG")
    assert d.configs["max.message.bytes"] == ("200000", "TOPIC_CONFIG")
    assert config_sources(bootstrap, topic)["retention.ms"] == (DEFAULT_RETENTION_MS, "DEFAULT_CONFIG")

    # --set and --delete together.
    ok(["topic", "alter-config", topic, "--set", "retention.bytes=1048576", "--delete", "segment.ms"], bootstrap)
    d = describe(bootstrap, topic)
    assert d.configs["retention.bytes"] == ("1048576", "TOPIC_CONFIG")
    assert d.configs["segment.ms"][1] == "DEFAULT_CONFIG"
    assert d.configs["max.message.bytes"] == ("200000", "TOPIC_CONFIG")


def test_topic_add_partitions(bootstrap):
    topic = unique_topic("cli-grow")
    ok(["topic", "create", topic, "-p", "2"], bootstrap)
    result = ok(["topic", "add-partitions", topic, "--total", "5"], bootstrap)
    assert result.stdout == f"topic {topic} now has 5 partitions\n"

    d = describe(bootstrap, topic)
    assert d.partitions == 5 and sorted(d.rows) == [0, 1, 2, 3, 4]
    assert all((r.start, r.high_watermark) == (0, 0) for r in d.rows.values())
    wait_for_partitions(bootstrap, topic, 5)
    assert topic_partition_counts(bootstrap)[topic] == 5

    assert produce_lines(bootstrap, topic, ["into the new partition"], "-p", "4") == [(4, 0)]

    err = runtime_error(["topic", "add-partitions", topic, "--total", "5"], bootstrap)
    assert topic in err.stderr
    err = runtime_error(["topic", "add-partitions", topic, "--total", "3"], bootstrap)
    assert topic in err.stderr
    assert describe(bootstrap, topic).partitions == 5


def test_topic_delete(bootstrap):
    topic = unique_topic("cli-delete")
    ok(["topic", "create", topic, "-p", "2"], bootstrap)
    produce_lines(bootstrap, topic, ["a", "b", "c"])

    result = ok(["topic", "delete", topic], bootstrap)
    assert result.stdout == f"deleted topic {topic}\n"
    assert topic not in topic_names(bootstrap)
    wait_until(lambda: topic not in topic_partition_counts(bootstrap), 10, what=f"{topic} gone from metadata")
    assert runtime_error(["topic", "describe", topic], bootstrap).stderr == f"error: unknown topic {topic}\n"
    assert runtime_error(["consume", topic], bootstrap).stderr == f"error: unknown topic {topic}\n"


def test_topic_runtime_errors(bootstrap, weir_only):
    topic = unique_topic("cli-errs")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)

    err = runtime_error(["topic", "create", topic], bootstrap).stderr
    assert topic in err and "already exists" in err

    other = unique_topic("cli-errs")
    err = runtime_error(["topic", "create", other, "-c", "no.such.config=1"], bootstrap).stderr
    assert "no.such.config" in err
    err = runtime_error(["topic", "create", other, "-c", "retention.ms=soon"], bootstrap).stderr
    assert "retention.ms" in err
    err = runtime_error(["topic", "create", other, "-p", "0"], bootstrap).stderr
    assert "partitions" in err
    err = runtime_error(["topic", "create", other, "-r", "3"], bootstrap).stderr
    assert "replication factor" in err
    err = runtime_error(["topic", "create", "bad/name"], bootstrap).stderr
    assert "bad/name" in err or "'/'" in err
    assert other not in topic_names(bootstrap)

    err = runtime_error(["topic", "alter-config", topic, "--set", "no.such.config=1"], bootstrap).stderr
    assert "no.such.config" in err
    err = runtime_error(["topic", "alter-config", topic, "--set", "retention.ms=soon"], bootstrap).stderr
    assert "retention.ms" in err
    err = runtime_error(["produce", topic, "-p", "7"], bootstrap, stdin="x\n").stderr
    assert err == f"error: unknown partition 7 of topic {topic}\n"
    err = runtime_error(["consume", topic, "-p", "7"], bootstrap).stderr
    assert err == f"error: topic {topic} has no partition 7 (it has 1)\n"


# ---------------------------------------------------------------------------------
# weir produce / weir consume
# ---------------------------------------------------------------------------------

ROUNDTRIP_LINES = [
    "alpha:1",
    "beta:value with spaces: and a second colon",
    "no separator here",  # null key
    ":empty key",
    "empty value:",
    "ключ:значение",  # non-ASCII key and value
    "日本:東京",
    "alpha:2",
    "tab\tin key:tab\tin value",
    "",  # empty line: null key, empty value
    "alpha:3",
    "beta:x",
    "",
] + [f"key-{i % 17}:value {i}" for i in range(200)]

HEADER_FLAGS = ["-H", "trace=abc-123", "-H", "expr=a=b", "-H", "empty=", "-H", "utf8=ü"]
HEADERS = [
    {"key": "trace", "value": "abc-123"},
    {"key": "expr", "value": "a=b"},
    {"key": "empty", "value": ""},
    {"key": "utf8", "value": "ü"},
]


def test_produce_consume_json_roundtrip(bootstrap):
    topic = unique_topic("cli-json")
    ok(["topic", "create", topic, "-p", "4"], bootstrap)
    before = now_ms()
    landed = produce_lines(bootstrap, topic, ROUNDTRIP_LINES, "--key-separator", ":", *HEADER_FLAGS)
    after = now_ms()

    # Offsets from -v: contiguous from 0 per partition, in input order; keys by murmur2.
    per_partition: dict[int, list[int]] = {}
    for line, (partition, offset) in zip(ROUNDTRIP_LINES, landed):
        assert 0 <= partition < 4
        per_partition.setdefault(partition, []).append(offset)
        key, _ = split_line(line)
        if key is not None:
            assert partition == java_partition(key.encode(), 4), f"key {key!r} on partition {partition}"
    for partition, offsets in per_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {partition}: offsets {offsets[:20]}"

    expected = {}
    for line, (partition, offset) in zip(ROUNDTRIP_LINES, landed):
        key, value = split_line(line)
        expected[(partition, offset)] = {
            "topic": topic, "partition": partition, "offset": offset,
            "key": key, "value": value, "headers": HEADERS,
        }

    got = consume_json(bootstrap, topic)
    assert len(got) == len(ROUNDTRIP_LINES)
    for record in got:
        assert set(record) == {"topic", "partition", "offset", "key", "value", "timestamp", "headers"}, record
        assert before - 1 <= record["timestamp"] <= after + 1, record
        ts = record.pop("timestamp")
        assert isinstance(ts, int)
        assert record == expected[(record["partition"], record["offset"])]
    # Within a partition the output is in offset order.
    for partition, rows in by_partition(got).items():
        assert [r["offset"] for r in rows] == list(range(len(rows))), partition

    # The same records as librdkafka sees them, byte for byte.
    log = read_confluent(bootstrap, topic, range(4))
    for partition, rows in log.items():
        for row in rows:
            want = expected[(partition, row.offset)]
            assert row.key == (None if want["key"] is None else want["key"].encode())
            assert row.value == want["value"].encode()
            assert row.headers == tuple((h["key"], h["value"].encode()) for h in HEADERS)


def test_consume_formats_one_partition(bootstrap):
    topic = unique_topic("cli-formats")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    lines = ["k1:v1", "nokey", ":v3", "k4:", "k5:a:b"]
    assert produce_lines(bootstrap, topic, lines, "--key-separator", ":") == [(0, i) for i in range(5)]

    assert ok(["consume", topic], bootstrap).stdout == "v1\nnokey\nv3\n\na:b\n"
    assert ok(["consume", topic, "--format", "value"], bootstrap).stdout == "v1\nnokey\nv3\n\na:b\n"
    assert ok(["consume", topic, "--format", "kv"], bootstrap).stdout == "k1\tv1\n\tnokey\n\tv3\nk4\t\nk5\ta:b\n"
    got = consume_json(bootstrap, topic)
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in got] == [
        (0, "k1", "v1", []), (1, None, "nokey", []), (2, "", "v3", []), (3, "k4", "", []), (4, "k5", "a:b", []),
    ]

    # Without --key-separator the whole line is the value and the key is null.
    topic2 = unique_topic("cli-formats")
    ok(["topic", "create", topic2, "-p", "1"], bootstrap)
    produce_lines(bootstrap, topic2, lines)
    got = consume_json(bootstrap, topic2)
    assert [(r["key"], r["value"]) for r in got] == [(None, line) for line in lines]

    # A multi-character separator.
    topic3 = unique_topic("cli-formats")
    ok(["topic", "create", topic3, "-p", "1"], bootstrap)
    produce_lines(bootstrap, topic3, ["a=>b=>c", "plain"], "--key-separator", "=>")
    assert [(r["key"], r["value"]) for r in consume_json(bootstrap, topic3)] == [("a", "b=>c"), (None, "plain")]


def test_produce_repeated_header_keys_are_kept(bootstrap):
    """`-H` is repeatable and Kafka headers are a list: repeated keys are all kept, in order."""
    topic = unique_topic("cli-dup-hdr")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    produce_lines(bootstrap, topic, ["v"], "-H", "dup=first", "-H", "dup=second", "-H", "other=x")
    stored = read_confluent(bootstrap, topic, [0])[0]
    assert stored[0].headers == (("dup", b"first"), ("dup", b"second"), ("other", b"x")), (
        f"weir produce stored headers {stored[0].headers}"
    )


def test_consume_shows_repeated_header_keys(bootstrap):
    topic = unique_topic("cli-dup-hdr-in")
    create_topic(bootstrap, topic, partitions=1)
    produce_confluent(bootstrap, topic, [Rec(key=b"k", value=b"v", headers=(("dup", b"first"), ("dup", b"second"), ("n", None)))])
    got = consume_json(bootstrap, topic)
    assert got[0]["headers"] == [
        {"key": "dup", "value": "first"},
        {"key": "dup", "value": "second"},
        {"key": "n", "value": None},
    ]


def test_produce_with_every_acks_level(bootstrap):
    topic = unique_topic("cli-acks")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    assert produce_lines(bootstrap, topic, ["a1", "b1"], "--acks", "1") == [(0, 0), (0, 1)]
    assert produce_lines(bootstrap, topic, ["a2", "b2"], "--acks", "all") == [(0, 2), (0, 3)]
    assert produce_lines(bootstrap, topic, ["a3"], "--acks=-1") == [(0, 4)]
    assert ok(["consume", topic], bootstrap).lines == ["a1", "b1", "a2", "b2", "a3"]
    # acks=0: no offsets to report (see also the next test).
    assert produce_lines(bootstrap, topic, ["a0", "b0"], "--acks", "0") == [(0, -1), (0, -1)]


def test_produce_acks0_records_arrive_after_a_clean_exit(bootstrap):
    """acks=0 has no acknowledgement, but a command that exits 0 against a healthy broker has sent its records."""
    topic = unique_topic("cli-acks0")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    lost = []
    expected = 0
    runs = 50
    for i in range(runs):
        assert produce_lines(bootstrap, topic, [f"a{i}", f"b{i}"], "--acks", "0") == [(0, -1), (0, -1)]
        expected += 2
        deadline = time.monotonic() + 3
        while high_watermark(bootstrap, topic, 0) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        hw = high_watermark(bootstrap, topic, 0)
        if hw < expected:
            lost.append(i)
            expected = hw
    assert not lost, f"records of {len(lost)} of {runs} `weir produce --acks 0` runs (exit 0) never arrived: runs {lost}"


def test_produce_acks_minus_one_as_separate_argument(bootstrap):
    """`--help` lists -1 among the --acks values; it must work written the usual way too."""
    topic = unique_topic("cli-acks-m1")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    assert produce_lines(bootstrap, topic, ["x"], "--acks", "-1") == [(0, 0)]


def test_produce_from_file_and_auto_create(bootstrap, weir_only, tmp_path):
    topic = unique_topic("cli-auto")  # not created: the broker auto-creates it
    path = tmp_path / "records.txt"
    lines = [f"line {i}" for i in range(1000)]
    path.write_text("".join(f"{l}\n" for l in lines))
    ok(["produce", topic, "--file", str(path)], bootstrap)
    assert topic in topic_names(bootstrap)
    assert describe(bootstrap, topic).partitions == 1
    assert ok(["consume", topic], bootstrap).lines == lines

    # Input without a final newline, and CRLF line ends.
    topic2 = unique_topic("cli-crlf")
    ok(["topic", "create", topic2, "-p", "1"], bootstrap)
    ok(["produce", topic2], bootstrap, stdin=b"one\r\ntwo\nthree")
    assert [r["value"] for r in consume_json(bootstrap, topic2)] == ["one", "two", "three"]

    err = runtime_error(["produce", topic, "--file", str(tmp_path / "missing.txt")], bootstrap).stderr
    assert "missing.txt" in err


def test_consume_count_limit(bootstrap):
    topic = unique_topic("cli-count")
    ok(["topic", "create", topic, "-p", "3"], bootstrap)
    lines = [f"k{i % 5}:v{i}" for i in range(60)]
    produce_lines(bootstrap, topic, lines, "--key-separator", ":")

    assert ok(["consume", topic, "-p", "0", "-n", "0"], bootstrap).stdout == ""
    one = ok(["consume", topic, "-n", "7", "--format", "kv"], bootstrap).lines
    assert len(one) == 7 and set(one) <= {l.replace(":", "\t", 1) for l in lines}

    everything = consume_json(bootstrap, topic, "-p", "1")
    limited = consume_json(bootstrap, topic, "-p", "1", "-n", "3")
    assert limited == everything[:3]
    limited = consume_json(bootstrap, topic, "--count", "3", "-p", "1", "--offset", "2")
    assert limited == everything[2:5]


def test_consume_from_offset_one_partition(bootstrap):
    topic = unique_topic("cli-offset")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    values = [f"v{i}" for i in range(10)]
    produce_lines(bootstrap, topic, values)

    assert ok(["consume", topic, "--offset", "4"], bootstrap).lines == values[4:]
    assert ok(["consume", topic, "-p", "0", "--offset", "9"], bootstrap).lines == values[9:]
    assert ok(["consume", topic, "--offset", "0"], bootstrap).lines == values
    assert ok(["consume", topic, "--offset", "earliest"], bootstrap).lines == values
    assert ok(["consume", topic, "--offset", "10"], bootstrap).lines == []
    assert ok(["consume", topic, "--offset", "latest"], bootstrap).lines == []
    got = consume_json(bootstrap, topic, "--offset", "6")
    assert [r["offset"] for r in got] == [6, 7, 8, 9]


def test_consume_from_offset_all_partitions(bootstrap):
    """`--offset N` over every partition starts each at N; shorter partitions have nothing to give."""
    topic = unique_topic("cli-offset-all")
    ok(["topic", "create", topic, "-p", "3"], bootstrap)
    produce_lines(bootstrap, topic, [f"p0-{i}" for i in range(5)], "-p", "0")
    produce_lines(bootstrap, topic, [f"p1-{i}" for i in range(2)], "-p", "1")
    # partition 2 stays empty

    got = run(["consume", topic, "--offset", "1", "--format", "json"], bootstrap, deadline=30)
    assert got.returncode == 0, got.describe()
    rows = by_partition(got.json_lines())
    assert {p: [r["value"] for r in rs] for p, rs in rows.items()} == {
        0: ["p0-1", "p0-2", "p0-3", "p0-4"],
        1: ["p1-1"],
    }, got.describe()

    got = run(["consume", topic, "--offset", "3"], bootstrap, deadline=30)
    assert got.returncode == 0, got.describe()
    assert got.lines == ["p0-3", "p0-4"], got.describe()


def test_consume_from_timestamp(bootstrap):
    topic = unique_topic("cli-ts")
    create_topic(bootstrap, topic, partitions=2)
    base = now_ms() - 3_600_000
    recs = [Rec(key=None, value=f"p0-{i}".encode(), timestamp=base + 1000 * i, partition=0) for i in range(6)]
    recs += [Rec(key=None, value=f"p1-{i}".encode(), timestamp=base + 500 + 2000 * i, partition=1) for i in range(3)]
    produce_confluent(bootstrap, topic, recs)

    got = consume_json(bootstrap, topic, "-p", "0", "--offset", f"@{base + 2500}")
    assert [(r["offset"], r["timestamp"]) for r in got] == [(i, base + 1000 * i) for i in (3, 4, 5)]
    # The first record whose timestamp is at or after the target.
    got = consume_json(bootstrap, topic, "-p", "0", "--offset", f"@{base + 2000}")
    assert [r["offset"] for r in got] == [2, 3, 4, 5]
    got = consume_json(bootstrap, topic, "-p", "0", "--offset", "@0")
    assert [r["offset"] for r in got] == list(range(6))
    assert consume_json(bootstrap, topic, "--offset", f"@{now_ms() + 60_000}") == []

    # Every partition starts at its own first offset for the timestamp.
    got = by_partition(consume_json(bootstrap, topic, "--offset", f"@{base + 2200}"))
    assert {p: [r["value"] for r in rs] for p, rs in got.items()} == {
        0: ["p0-3", "p0-4", "p0-5"],
        1: ["p1-1", "p1-2"],  # timestamps base+2500, base+4500
    }


def test_consume_one_partition(bootstrap):
    topic = unique_topic("cli-part")
    ok(["topic", "create", topic, "-p", "3"], bootstrap)
    for p in range(3):
        produce_lines(bootstrap, topic, [f"p{p}-{i}" for i in range(4 + p)], "-p", str(p))
    for p in range(3):
        got = consume_json(bootstrap, topic, "-p", str(p))
        assert [(r["partition"], r["offset"], r["value"]) for r in got] == [(p, i, f"p{p}-{i}") for i in range(4 + p)]
    assert Counter(ok(["consume", topic], bootstrap).lines) == Counter(
        f"p{p}-{i}" for p in range(3) for i in range(4 + p)
    )


def test_consume_stops_at_end_of_data(bootstrap):
    topic = unique_topic("cli-end")
    ok(["topic", "create", topic, "-p", "3"], bootstrap)
    lines = [f"k{i % 101}:value-{i:06d}" for i in range(30_000)]
    produce_lines(bootstrap, topic, lines, "--key-separator", ":", "--acks", "1")
    result = ok(["consume", topic, "--format", "kv"], bootstrap, deadline=30)
    assert Counter(result.lines) == Counter(l.replace(":", "\t", 1) for l in lines)
    # An empty topic ends at once.
    empty = unique_topic("cli-end-empty")
    ok(["topic", "create", empty, "-p", "2"], bootstrap)
    assert ok(["consume", empty], bootstrap, deadline=15).stdout == ""


def test_consume_follow_waits_for_new_records(bootstrap):
    topic = unique_topic("cli-follow")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    produce_lines(bootstrap, topic, ["old-0", "old-1"])

    # -n with --follow: wait for exactly the next two records, then exit 0.
    counted = Background(["consume", topic, "--offset", "2", "-n", "2", "--follow"], bootstrap)
    follower = Background(["consume", topic, "--follow", "--format", "kv"], bootstrap)
    try:
        assert follower.wait_for_lines(2, 15) == ["\told-0", "\told-1"], follower.describe()
        time.sleep(0.5)
        assert counted.proc.poll() is None, "consume -n 2 --follow exited before any new record\n" + counted.describe()
        produce_lines(bootstrap, topic, ["k:new-2", "k:new-3", "k:new-4"], "--key-separator", ":")
        assert follower.wait_for_lines(5, 15)[2:] == ["k\tnew-2", "k\tnew-3", "k\tnew-4"], follower.describe()
        code = counted.wait(15)
        assert code == 0, counted.describe()
        assert counted.lines() == ["new-2", "new-3"]
        assert follower.proc.poll() is None, "consume --follow stopped by itself\n" + follower.describe()
    finally:
        follower.stop()
        counted.stop()


# ---------------------------------------------------------------------------------
# weir cluster status
# ---------------------------------------------------------------------------------

def test_cluster_status(bootstrap, weir):
    topic = unique_topic("cli-status")
    ok(["topic", "create", topic, "-p", "4"], bootstrap)
    out = ok(["cluster", "status"], bootstrap).stdout
    lines = out.splitlines()

    fields = {}
    brokers = []
    voters = []
    quorum = None
    for line in lines:
        m = re.match(r"^metadata quorum:\s+leader (\d+), term (\d+), commit index (\d+)$", line)
        if m:
            quorum = tuple(int(g) for g in m.groups())
            continue
        m = re.match(r"^  voter (\d+)  log end (\d+)  heard from (\d+) ms ago$", line)
        if m:
            voters.append((int(m.group(1)), int(m.group(2))))
            continue
        m = re.match(r"^([a-z -]+):\s+(\S+)$", line)
        if m:
            fields[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^  (\d+)  (\S+)$", line)
        assert m, f"unexpected cluster status line {line!r} in\n{out}"
        brokers.append((int(m.group(1)), m.group(2)))
    assert list(fields) == ["cluster id", "controller", "brokers", "topics", "partitions", "under-replicated",
                            "hung transactions"], out
    # The metadata quorum: one voter, leading, holding every committed entry.
    assert quorum is not None and len(voters) >= 1, out
    leader, _term, commit_index = quorum
    if not weir.is_external:
        assert (leader, voters) == (weir.node_id, [(weir.node_id, commit_index + 1)]), out

    md = admin(bootstrap).list_topics(timeout=20)
    assert fields["cluster id"] == md.cluster_id
    if not weir.is_external:
        assert fields["cluster id"] == weir.cluster_id
        assert brokers == [(weir.node_id, bootstrap)]
    assert int(fields["controller"]) == md.controller_id
    assert int(fields["brokers"]) == len(md.brokers) == len(brokers) == 1
    assert brokers == [(b.id, f"{b.host}:{b.port}") for b in md.brokers.values()]
    counts = topic_partition_counts(bootstrap)
    assert topic in counts
    assert int(fields["topics"]) == len(counts)
    assert int(fields["partitions"]) == sum(counts.values())
    assert fields["under-replicated"] == "0"
    assert fields["hung transactions"] == "0"


# ---------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------

UNKNOWN_TOPIC_COMMANDS = [
    ["consume", "{t}"],
    ["consume", "{t}", "-p", "0", "--follow"],
    ["topic", "describe", "{t}"],
    ["topic", "delete", "{t}"],
    ["topic", "alter-config", "{t}", "--set", "retention.ms=1000"],
    ["topic", "alter-config", "{t}", "--delete", "retention.ms"],
    ["topic", "add-partitions", "{t}", "--total", "3"],
]


@pytest.mark.parametrize("argv", UNKNOWN_TOPIC_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_unknown_topic(bootstrap, argv):
    topic = unique_topic("cli-nosuch")
    args = [a.format(t=topic) for a in argv]
    result = runtime_error(args, bootstrap, deadline=30)
    assert result.stderr == f"error: unknown topic {topic}\n"
    assert result.elapsed < 5, f"took {result.elapsed:.1f}s to report an unknown topic"
    assert topic not in topic_names(bootstrap), "the command created the topic"


UNREACHABLE_COMMANDS = [
    ["topic", "list"],
    ["topic", "create", "t"],
    ["topic", "describe", "t"],
    ["topic", "delete", "t"],
    ["topic", "alter-config", "t", "--set", "retention.ms=1"],
    ["topic", "add-partitions", "t", "--total", "2"],
    ["produce", "t"],
    ["consume", "t"],
    ["consume", "t", "--follow"],
    ["cluster", "status"],
    ["bench", "--duration", "1", "--warmup", "0"],
]


@pytest.mark.parametrize("timeout", [None, "1"], ids=["default-timeout", "timeout-1"])
@pytest.mark.parametrize("argv", UNREACHABLE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_unreachable_broker_fails_fast(argv, timeout):
    args = argv + (["--timeout", timeout] if timeout else [])
    result = run(args, UNREACHABLE, stdin="x\n", deadline=30)
    assert result.returncode == 1, result.describe()
    assert result.stdout == ""
    assert result.stderr == UNREACHABLE_MESSAGE, result.describe()
    assert result.elapsed < 5, f"took {result.elapsed:.1f}s to give up on a closed port"


def test_unreachable_broker_from_environment():
    result = run(["topic", "list"], env={"WEIR_BROKERS": UNREACHABLE}, deadline=30)
    assert (result.returncode, result.stderr) == (1, UNREACHABLE_MESSAGE), result.describe()


def test_brokers_from_environment(bootstrap):
    result = run(["cluster", "status"], env={"WEIR_BROKERS": bootstrap}, deadline=30)
    assert result.returncode == 0, result.describe()
    assert f"  {bootstrap}" in result.stdout
    # --brokers wins over the environment.
    result = run(["topic", "list", "--brokers", bootstrap], env={"WEIR_BROKERS": UNREACHABLE}, deadline=30)
    assert result.returncode == 0, result.describe()
    # Before the command's name too, as a global flag.
    result = run(["--brokers", bootstrap, "--timeout", "5", "topic", "list"], env={"WEIR_BROKERS": UNREACHABLE}, deadline=30)
    assert result.returncode == 0, result.describe()
    # Only for the client commands: the server refuses it.
    result = run(["--brokers", bootstrap, "server", "--help"], deadline=30)
    assert result.returncode == 2 and "--brokers" in result.stderr, result.describe()


@pytest.fixture
def silent_broker():
    """A TCP listener that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    held = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1:%d" % listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        listener.close()


@pytest.mark.parametrize("argv", [["topic", "list"], ["consume", "t"], ["produce", "t"], ["cluster", "status"]], ids=" ".join)
def test_silent_broker_respects_timeout(silent_broker, argv):
    result = run(argv + ["--timeout", "2"], silent_broker, stdin="x\n", deadline=30)
    assert result.returncode == 1, result.describe()
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.describe()
    assert silent_broker in result.stderr, result.describe()
    assert result.elapsed < 6, f"--timeout 2 against a silent broker took {result.elapsed:.1f}s"


USAGE_ERRORS = [
    ["consume", "t", "--offset", "banana"],
    ["consume", "t", "--offset", "@yesterday"],
    ["consume", "t", "--offset", "-5"],
    ["consume", "t", "--format", "xml"],
    ["consume", "t", "-n", "many"],
    ["consume", "t", "-p", "zero"],
    ["consume", "t", "--bogus"],
    ["consume"],
    ["produce", "t", "--acks", "7"],
    ["produce", "t", "--acks", "2"],
    ["produce", "t", "--compression", "brotli"],
    ["produce", "t", "-H", "no-equals-sign"],
    ["produce", "t", "-H", "=value"],
    ["produce", "t", "--file"],
    ["produce"],
    ["topic", "create"],
    ["topic", "create", "t", "-p", "abc"],
    ["topic", "create", "t", "-c", "novalue"],
    ["topic", "add-partitions", "t"],
    ["topic", "add-partitions", "t", "--total", "x"],
    ["topic", "alter-config"],
    ["topic", "frobnicate"],
    ["topic"],
    ["cluster"],
    ["cluster", "explode"],
    ["bench", "--rate", "fast"],
    ["bench", "--acks", "7"],
    ["bench", "--compression", "brotli"],
    ["bench", "--duration", "soon"],
    ["topic", "list", "--timeout", "abc"],
    ["nosuchcommand"],
]


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=" ".join)
def test_usage_errors(argv):
    # The unreachable broker shows that arguments are checked before connecting.
    result = usage_error(argv, UNREACHABLE, stdin="x\n", deadline=30)
    assert "cannot reach" not in result.stderr


def test_usage_error_messages():
    err = usage_error(["consume", "t", "--offset", "banana"]).stderr
    assert err.splitlines()[0] == (
        "error: invalid value 'banana' for '--offset <OFFSET>': "
        'expected earliest, latest, an offset or @TIMESTAMP_MS, got "banana"'
    )
    err = usage_error(["produce", "t", "--acks", "7"]).stderr
    assert err.splitlines()[0] == "error: invalid value '7' for '--acks <ACKS>'"
    err = usage_error(["topic", "add-partitions", "t"]).stderr
    assert "--total" in err


def test_help_and_version():
    for args in (["--help"], ["topic", "--help"], ["produce", "--help"], ["consume", "--help"],
                 ["cluster", "--help"], ["bench", "--help"], ["topic", "create", "--help"]):
        result = ok(args, deadline=15)
        assert "Usage: weir" in result.stdout, result.describe()
    result = ok(["--version"], deadline=15)
    assert re.match(r"^weir \d+\.\d+\.\d+", result.stdout), result.stdout


# ---------------------------------------------------------------------------------
# Codecs and partitioning
# ---------------------------------------------------------------------------------

def log_bytes_on_disk(weir, topic: str) -> int:
    return sum(f.stat().st_size for f in (weir.data_dir / "logs").glob(f"{topic}-*/*.log"))


@pytest.mark.parametrize("codec", CODECS)
def test_produce_every_codec_read_back_byte_for_byte(bootstrap, weir, codec):
    topic = unique_topic(f"cli-codec-{codec}")
    ok(["topic", "create", topic, "-p", "3"], bootstrap)
    lines = [f"key-{i % 37}:value {i} " + "abcdefgh" * 40 for i in range(600)]
    lines += ["kö:ünïcödé", "nokey-line", ":empty key", "k:"]
    landed = produce_lines(
        bootstrap, topic, lines, "--key-separator", ":", "--compression", codec, "-H", f"codec={codec}", "-H", "n=1"
    )
    expected = {}
    for line, (partition, offset) in zip(lines, landed):
        key, value = split_line(line)
        expected[(partition, offset)] = (None if key is None else key.encode(), value.encode())
    headers = (("codec", codec.encode()), ("n", b"1"))

    for client in ("librdkafka", "kafka-python"):
        log = read_back(client, bootstrap, topic, range(3))
        seen = {}
        for partition, rows in log.items():
            for row in rows:
                assert row.headers == headers, (client, row)
                seen[(partition, row.offset)] = (row.key, row.value)
        assert seen == expected, f"{client} read back something else than weir produce --compression {codec} sent"

    if not weir.is_external:
        payload = sum(len(line) for line in lines)
        on_disk = log_bytes_on_disk(weir, topic)
        if codec == "none":
            assert on_disk > payload, f"uncompressed: {on_disk} bytes on disk for {payload} bytes of payload"
        else:
            assert on_disk < payload / 4, f"{codec}: {on_disk} bytes on disk for {payload} bytes of compressible payload"


def partitioner_keys() -> list[str]:
    keys = [f"user-{i}" for i in range(300)]
    keys += ["x" * n for n in range(1, 41)]  # every tail length
    keys += [f"ключ-{i}" for i in range(30)] + [f"日本語-{i}" for i in range(30)]
    keys += ["21", "foobar", "a-little-bit-long-string", "a-little-bit-longer-string", "abc", "a", " "]
    return keys


def test_partitioner_agrees_with_librdkafka_and_murmur2(bootstrap):
    partitions = 7
    keys = partitioner_keys()
    ours = unique_topic("cli-part-weir")
    theirs = unique_topic("cli-part-rdkafka")
    ok(["topic", "create", ours, "-p", str(partitions)], bootstrap)
    create_topic(bootstrap, theirs, partitions=partitions)

    landed = produce_lines(bootstrap, ours, [f"{k}:value of {k}" for k in keys], "--key-separator", ":")
    delivered = produce_confluent(
        bootstrap, theirs, [Rec(key=k.encode(), value=b"v") for k in keys], partitioner="murmur2_random"
    )
    mismatches = []
    for key, (weir_partition, _), (rd_partition, _, _) in zip(keys, landed, delivered):
        want = java_partition(key.encode(), partitions)
        if not (weir_partition == rd_partition == want):
            mismatches.append((key, weir_partition, rd_partition, want))
    assert not mismatches, f"(key, weir, librdkafka, murmur2) disagree: {mismatches[:20]}"

    # The broker stored every record where -v said it went.
    stored = {r["key"]: r["partition"] for r in consume_json(bootstrap, ours)}
    assert stored == {k: java_partition(k.encode(), partitions) for k in keys}

    # Producing the same keys again picks the same partitions.
    again = produce_lines(bootstrap, ours, [f"{k}:again" for k in keys], "--key-separator", ":")
    assert [p for p, _ in again] == [p for p, _ in landed]


def test_keyless_records_spread_over_partitions(bootstrap):
    """Keyless records are sticky per batch, then move on: a large input reaches every partition."""
    topic = unique_topic("cli-sticky")
    ok(["topic", "create", topic, "-p", "6"], bootstrap)
    lines = [f"keyless record {i:06d} " + "z" * 180 for i in range(100_000)]  # ~20 MB, many full batches
    ok(["produce", topic, "--acks", "1"], bootstrap, stdin="".join(f"{l}\n" for l in lines))
    rows = describe(bootstrap, topic).rows
    counts = {p: r.high_watermark for p, r in rows.items()}
    assert sum(counts.values()) == len(lines)
    assert all(c > 0 for c in counts.values()), f"records per partition: {counts}"


def test_idempotent_produce_is_reliable(bootstrap, tmp_path):
    """The default (acks=all, idempotent) produce of a few MB succeeds every time, exactly once, in order."""
    topic = unique_topic("cli-idem")
    ok(["topic", "create", topic, "-p", "1"], bootstrap)
    runs = 10
    expected = []
    for run_no in range(runs):
        lines = [f"run{run_no}-line-{i:06d} " + "q" * 80 for i in range(20_000)]
        path = tmp_path / f"run{run_no}.txt"
        path.write_text("".join(f"{l}\n" for l in lines))
        result = run(["produce", topic, "--file", str(path), "--timeout", "5"], bootstrap, deadline=60)
        assert result.returncode == 0, f"run {run_no + 1} of {runs} failed\n" + result.describe()
        expected += lines
        hw = describe(bootstrap, topic).rows[0].high_watermark
        assert hw == len(expected), f"after run {run_no + 1}: high watermark {hw}, expected {len(expected)}"
    assert ok(["consume", topic, "-p", "0"], bootstrap, deadline=60).lines == expected


# ---------------------------------------------------------------------------------
# weir bench
# ---------------------------------------------------------------------------------

NUMBER = r"(\d+(?:\.\d+)?)"
LATENCY_FIELDS = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")


def parse_bench(out: str) -> dict:
    lines = out.splitlines()
    report: dict = {}
    header = re.match(
        r"^weir bench: topic (\S+) \| (\d+) B records \| (\d+) producer\(s\), (\d+) consumer\(s\) \| acks (\S+) \| "
        + NUMBER + r" s measured$",
        lines[0],
    )
    assert header, f"unexpected bench header {lines[0]!r}"
    report["header"] = header.groups()
    assert lines[1].split() == ["records/s", "MB/s"], lines[1]
    for name, line in (("produce", lines[2]), ("consume", lines[3])):
        m = re.match(rf"^{name}\s+{NUMBER}\s+{NUMBER}$", line)
        assert m, f"unexpected {name} line {line!r}"
        report[name] = (float(m.group(1)), float(m.group(2)))
    rest = lines[4:]
    if rest and rest[0].startswith("target rate"):
        m = re.match(r"^target rate (\d+)/s: (held|NOT held)$", rest[0])
        assert m, f"unexpected rate line {rest[0]!r}"
        report["rate"] = (int(m.group(1)), m.group(2) == "held")
        rest = rest[1:]
    assert len(rest) == 3, f"expected the latency table, got {rest}"
    assert rest[0].split() == ["latency", "(ms)", "p50", "p90", "p99", "p99.9", "max"], rest[0]
    for key, label, line in (("publish", "publish (send→ack)", rest[1]), ("end_to_end", "end-to-end", rest[2])):
        assert line.startswith(label), line
        values = [float(v) for v in line[len(label):].split()]
        assert len(values) == 5, line
        report[key] = values
    return report


def check_bench_json(data: dict, topic: str, report: dict):
    assert data["topic"] == topic
    for key in ("record_size", "producers", "consumers", "acks", "duration_s", "target_rate", "rate_held"):
        assert key in data, key
    for section in ("produce", "consume"):
        assert set(data[section]) >= {"records_per_s", "mb_per_s"}, data[section]
    for section, printed in (("publish_latency", report["publish"]), ("end_to_end_latency", report["end_to_end"])):
        values = [data[section][f] for f in LATENCY_FIELDS]
        assert values == sorted(values), f"{section} percentiles not monotonic: {values}"
        assert [round(v, 2) for v in values] == pytest.approx(printed, abs=0.011), (section, values, printed)
        assert "samples" in data[section]
    assert round(data["produce"]["records_per_s"]) == pytest.approx(report["produce"][0], abs=1)
    assert round(data["consume"]["records_per_s"]) == pytest.approx(report["consume"][0], abs=1)


def test_bench_full_report(bootstrap, tmp_path):
    topic = unique_topic("cli-bench")
    json_path = tmp_path / "bench.json"
    result = ok(
        ["bench", "--topic", topic, "--duration", "5", "--warmup", "1", "--json", str(json_path)], bootstrap, deadline=60
    )
    try:
        report = parse_bench(result.stdout)
        assert report["header"] == (topic, "100", "1", "1", "1", "5")
        assert "rate" not in report
        assert report["produce"][0] > 0 and report["consume"][0] > 0
        for key in ("publish", "end_to_end"):
            assert report[key] == sorted(report[key]), f"{key} percentiles not monotonic: {report[key]}"
        data = json.loads(json_path.read_text())
        check_bench_json(data, topic, report)
        assert data["target_rate"] is None and data["rate_held"] is None
        assert (data["record_size"], data["producers"], data["consumers"], data["acks"]) == (100, 1, 1, "1")
        assert data["publish_latency"]["samples"] > 0 and data["end_to_end_latency"]["samples"] > 0
    finally:
        ok(["topic", "delete", topic], bootstrap)  # give the disk space back


def test_bench_target_rate(bootstrap, tmp_path):
    topic = unique_topic("cli-bench-rate")
    json_path = tmp_path / "bench.json"
    result = ok(
        ["bench", "--topic", topic, "--rate", "2000", "--duration", "2", "--warmup", "1", "--record-size", "64",
         "--partitions", "2", "--json", str(json_path)],
        bootstrap, deadline=60,
    )
    report = parse_bench(result.stdout)
    assert report["header"][:5] == (topic, "64", "1", "1", "1")
    assert report["rate"][0] == 2000
    data = json.loads(json_path.read_text())
    check_bench_json(data, topic, report)
    assert data["target_rate"] == 2000
    assert data["rate_held"] is report["rate"][1]
    assert describe(bootstrap, topic).partitions == 2


def test_bench_idempotent_compressed_finishes(bootstrap):
    """Short `--acks all` runs with compression finish on time, again and again."""
    topic = unique_topic("cli-bench-idem")
    for i, codec in enumerate(["lz4", "zstd", "gzip", "lz4", "zstd"]):
        result = run(
            ["bench", "--topic", topic, "--partitions", "3", "--duration", "1", "--warmup", "0", "--consumers", "0",
             "--acks", "all", "--compression", codec],
            bootstrap, deadline=20,
        )
        assert result.returncode == 0, f"run {i + 1} ({codec})\n" + result.describe()
        parse_bench(result.stdout)
    ok(["topic", "delete", topic], bootstrap)


def test_bench_limits(tmp_path):
    limits_dir = tmp_path / "limits"
    limits_dir.mkdir()
    result = ok(["bench", "--limits", "--limits-dir", str(limits_dir)], deadline=120)
    lines = result.lines
    assert lines[0].split() == ["machine", "limit", "MB/s"], lines
    labels = [
        "loopback TCP, one connection, 1 MiB writes",
        "disk: 1 GiB sequential, no fsync (page cache)",
        "disk: 1 GiB sequential, one fsync at the end",
        "disk: 16 KiB writes, fsync after each",
    ]
    assert len(lines) == 1 + len(labels), lines
    for label, line in zip(labels, lines[1:]):
        m = re.match(rf"^{re.escape(label)}\s+{NUMBER}$", line)
        assert m, f"unexpected limits line {line!r}"
        assert float(m.group(1)) > 0
    assert list(limits_dir.iterdir()) == [], "bench --limits left files behind"


def test_bench_limits_dir_missing(tmp_path):
    err = runtime_error(["bench", "--limits", "--limits-dir", str(tmp_path / "missing")], deadline=60).stderr
    assert str(tmp_path / "missing") in err, "the error does not name the directory"


def test_arguments_refused_without_a_broker_are_usage_errors():
    """Values that are wrong whatever the broker says are usage errors (exit 2), like clap's own."""
    err = usage_error(["bench", "--record-size", "4"], UNREACHABLE, deadline=30).stderr
    assert "--record-size" in err
    err = usage_error(["topic", "alter-config", "t"], UNREACHABLE, deadline=30).stderr
    assert "--set" in err and "--delete" in err


def test_output_into_a_closed_pipe_ends_quietly(bootstrap):
    """A reader that stops early (`weir topic describe T | head -1`) ends the command with
    exit code 0 and nothing on stderr, as Unix tools do, not with a panic."""
    topic = unique_topic("cli-pipe")
    ok(["topic", "create", topic, "-p", "200"], bootstrap)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first line is written
    try:
        done = subprocess.run(
            command(["topic", "describe", topic], bootstrap),
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=environment(),
            timeout=30,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"", done.stderr
