"""Bad input on raw sockets: garbage frames, absurd length prefixes, truncated
and trickled requests, unsupported versions and corrupted record batches.

The broker must reject each of them without harm, and keep serving ordinary
clients afterwards, which every test checks.
"""

from __future__ import annotations

import random
import struct
import time

import pytest

import wire
from clients import Rec, assert_serving, create_topic, produce_confluent, read_confluent, read_kafka_python, unique_topic

REQUIRED_APIS = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    37: "CreatePartitions",
    44: "IncrementalAlterConfigs",
    60: "DescribeCluster",
}
UNSUPPORTED_VERSION = 35
CORRUPT_MESSAGE = 2
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87


@pytest.fixture(scope="module")
def health_topic(weir):
    topic = unique_topic("health")
    create_topic(weir.bootstrap, topic, partitions=1)
    return topic


def test_api_versions_unsupported_version_gets_v0_error_reply(bootstrap, health_topic):
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.api_versions_request(99, 777))
        reply = conn.recv_frame(timeout=10)
    assert reply is not None, "connection closed instead of an UNSUPPORTED_VERSION reply"
    parsed = wire.parse_api_versions_v0(reply)
    assert parsed["correlation_id"] == 777
    assert parsed["error_code"] == UNSUPPORTED_VERSION
    assert 18 in parsed["apis"], "the reply must list ApiVersions so the client can retry"
    lo, hi = parsed["apis"][18]
    assert lo == 0 and hi >= 3
    assert_serving(bootstrap, health_topic)


def test_api_versions_lists_required_apis(bootstrap):
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.api_versions_request(0, 1))
        v0 = wire.parse_api_versions_v0(conn.recv_frame(timeout=10))
        conn.send(wire.api_versions_request(3, 2))
        v3 = wire.parse_api_versions_v3(conn.recv_frame(timeout=10))
    assert (v0["correlation_id"], v0["error_code"]) == (1, 0)
    assert (v3["correlation_id"], v3["error_code"]) == (2, 0)
    assert v0["apis"] == v3["apis"]
    missing = {key: name for key, name in REQUIRED_APIS.items() if key not in v3["apis"]}
    assert not missing, f"ApiVersions does not list {missing}"
    for key, (lo, hi) in v3["apis"].items():
        assert 0 <= lo <= hi, f"api {key}: min {lo} > max {hi}"


def test_pipelined_requests_are_answered_in_order(bootstrap):
    """Several requests in one TCP write get their replies in request order."""
    with wire.Connection(bootstrap) as conn:
        conn.send(b"".join(wire.api_versions_request(v, 100 + i) for i, v in enumerate([0, 3, 1, 3, 2, 0])))
        ids = []
        for _ in range(6):
            reply = conn.recv_frame(timeout=10)
            assert reply is not None
            ids.append(struct.unpack(">i", reply[:4])[0])
    assert ids == [100, 101, 102, 103, 104, 105]


def test_request_trickled_byte_by_byte(bootstrap):
    with wire.Connection(bootstrap) as conn:
        for byte in wire.api_versions_request(3, 55):
            conn.send(bytes([byte]))
            time.sleep(0.002)
        parsed = wire.parse_api_versions_v3(conn.recv_frame(timeout=10))
    assert (parsed["correlation_id"], parsed["error_code"]) == (55, 0)


UNKNOWN_API_KEY = 0x7F7F


def garbage_frames() -> list[tuple[str, bytes]]:
    """Frames no broker can serve, each with why: every one must close its connection."""
    rng = random.Random(20240601)
    frames = [("unknown API key", struct.pack(">hhi", UNKNOWN_API_KEY, 0, 1) + rng.randbytes(60))]
    # Known API keys at supported versions, bodies cut short after a plausible start.
    for key, version in ((0, 3), (1, 4), (3, 1), (19, 2)):
        body = wire.string("x") + struct.pack(">i", 0x7FFFFFF0)
        frames.append((f"api {key} v{version} truncated body", struct.pack(">hhi", key, version, 2) + wire.string("x") + body))
    # Supported APIs at versions nobody serves (not ApiVersions, which answers).
    for key in (0, 1, 3):
        frames.append((f"api {key} v99", struct.pack(">hhi", key, 99, 3) + rng.randbytes(40)))
    # A header whose client-id length runs past the end of the frame.
    frames.append(("client id past the end", struct.pack(">hhih", 18, 0, 3, 5000) + b"abc"))
    # Random bytes after an unknown API key, in assorted sizes.
    for i in range(12):
        frames.append((f"random {i}", struct.pack(">h", UNKNOWN_API_KEY - i) + rng.randbytes(rng.randint(6, 2048))))
    return frames


def test_garbage_frames_close_the_connection(bootstrap, health_topic):
    connections = []
    try:
        for what, payload in garbage_frames():
            conn = wire.Connection(bootstrap)
            conn.send(wire.int32(len(payload)) + payload)
            connections.append((what, conn))
        for what, conn in connections:
            assert conn.wait_closed_or_reply(timeout=15) == "closed", f"{what}: the broker answered garbage"
    finally:
        for _, conn in connections:
            conn.close()
    assert_serving(bootstrap, health_topic)


def hostile_batches(now: int) -> list[tuple[str, bytes, int]]:
    """Batches under a valid CRC whose content lies, with the error code Kafka gives each."""
    good = wire.record_batch([(b"k", b"honest value")], base_timestamp=now)
    empty_span = struct.pack(">hiqqqhii", 0, 0x7FFFFFFE, now, now, -1, -1, -1, 0x7FFFFFFF)
    span = wire.recrc(struct.pack(">qiibI", 0, 49, -1, 2, 0) + empty_span)
    return [
        ("2^31-1 records claimed, none present", span, INVALID_RECORD),
        ("record length varint lies", wire.patch(good, 61, b"\x7e"), INVALID_RECORD),
        ("unknown codec 7", wire.patch(good, 21, b"\x00\x07"), INVALID_RECORD),
        ("gzip flag on plain bytes", wire.patch(good, 21, b"\x00\x01"), CORRUPT_MESSAGE),
        ("record count above the records", wire.patch(wire.patch(good, 23, struct.pack(">i", 1)), 57, struct.pack(">i", 2)), INVALID_RECORD),
        ("timestamp two hours ahead", wire.record_batch([(b"k", b"v")], base_timestamp=now + 2 * 3600 * 1000), INVALID_TIMESTAMP),
    ]


def test_hostile_batches_are_refused_and_consumers_never_stall(bootstrap, weir):
    """Each batch is refused with Kafka's code; the partition keeps serving and real consumers
    read every good record without stalling or a corrupt-record error."""
    topic = unique_topic("hostile")
    create_topic(bootstrap, topic, partitions=1)
    version = negotiate_produce_version(bootstrap)
    now = int(time.time() * 1000)
    for i in range(3):
        produce_confluent(bootstrap, topic, [Rec(key=b"k", value=b"before-%d" % i, partition=0)])
    for what, batch, code in hostile_batches(now):
        for attempt in range(50 if "2^31" in what else 1):
            result = raw_produce(bootstrap, version, topic, batch, correlation_id=100 + attempt)
            assert result["error_code"] == code, f"{what}: {result}"
    produce_confluent(bootstrap, topic, [Rec(key=b"k", value=b"after", partition=0)])
    want = [b"before-0", b"before-1", b"before-2", b"after"]
    for read in (read_confluent, read_kafka_python):
        log = read(bootstrap, topic, [0])[0]
        assert [r.value for r in log] == want, read.__name__
        assert [r.offset for r in log] == [0, 1, 2, 3], read.__name__
    assert_serving(bootstrap, topic)


@pytest.mark.parametrize("size", [0x7FFFFFFF, 0x40000000, -1, -0x80000000, 0], ids=["2GiB", "1GiB", "minus1", "int-min", "zero"])
def test_absurd_length_prefix_closes_connection(bootstrap, health_topic, weir, size):
    rss_before = weir.rss_bytes()
    with wire.Connection(bootstrap) as conn:
        conn.send(struct.pack(">i", size) + b"\x00\x12\x00\x00\x00\x00\x00\x01")
        assert conn.wait_closed_or_reply(timeout=10) == "closed"
    rss_after = weir.rss_bytes()
    if rss_before is not None and rss_after is not None:
        grown = rss_after - rss_before
        assert grown < 128 * 1024 * 1024, f"server memory grew by {grown >> 20} MiB on a length prefix of {size}"
    assert_serving(bootstrap, health_topic)


def test_truncated_request_then_close(bootstrap, health_topic):
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.int32(100) + b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x00")  # 10 of 100 bytes
    assert_serving(bootstrap, health_topic)


def test_stalled_request_does_not_block_others(bootstrap, health_topic):
    """A connection stuck mid-request must not hold up other clients."""
    with wire.Connection(bootstrap) as stalled:
        stalled.send(wire.int32(100) + b"\x00\x12\x00\x00")
        assert_serving(bootstrap, health_topic)
        stalled.send(b"\x00" * 6)  # still incomplete
        assert_serving(bootstrap, health_topic)


def negotiate_produce_version(bootstrap: str) -> int:
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.api_versions_request(0, 9))
        apis = wire.parse_api_versions_v0(conn.recv_frame(timeout=10))["apis"]
    lo, hi = apis[wire.API_PRODUCE]
    version = min(hi, 11)
    assert version >= max(lo, 3), f"broker Produce versions {lo}..{hi} leave nothing this encoder can send"
    return version


def raw_produce(bootstrap: str, version: int, topic: str, batch: bytes, correlation_id: int) -> dict:
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.produce_request(version, correlation_id, topic, 0, batch))
        reply = conn.recv_frame(timeout=30)
    assert reply is not None, "connection closed instead of a Produce response"
    parsed = wire.parse_produce_response(version, reply)
    assert parsed["correlation_id"] == correlation_id
    assert (parsed["topic"], parsed["partition"]) == (topic, 0)
    return parsed


def test_corrupted_crc_is_rejected(bootstrap, weir):
    topic = unique_topic("crc")
    create_topic(bootstrap, topic, partitions=1)
    produce_confluent(bootstrap, topic, [Rec(key=b"k%d" % i, value=b"client-%d" % i, partition=0) for i in range(3)])
    version = negotiate_produce_version(bootstrap)
    now = int(time.time() * 1000)

    # A correct hand-built batch is accepted: proves the encoder before trusting the negative case.
    good = wire.record_batch([(b"raw-key-1", b"raw-value-1"), (None, b"raw-value-2")], base_timestamp=now)
    result = raw_produce(bootstrap, version, topic, good, correlation_id=31)
    assert (result["error_code"], result["base_offset"]) == (0, 3), result

    # The same kind of batch with one payload byte flipped after the CRC was computed.
    batch = bytearray(wire.record_batch([(b"bad-key", b"this value gets corrupted")], base_timestamp=now))
    batch[-5] ^= 0x01
    result = raw_produce(bootstrap, version, topic, bytes(batch), correlation_id=32)
    assert result["error_code"] == CORRUPT_MESSAGE, result

    # A batch whose CRC field itself is wrong.
    batch = bytearray(wire.record_batch([(b"k", b"v")], base_timestamp=now))
    batch[17:21] = bytes(b ^ 0xFF for b in batch[17:21])
    result = raw_produce(bootstrap, version, topic, bytes(batch), correlation_id=33)
    assert result["error_code"] == CORRUPT_MESSAGE, result

    # Nothing of the rejected batches was stored.
    log = read_confluent(bootstrap, topic, [0])[0]
    assert [(r.offset, r.key, r.value) for r in log] == [
        (0, b"k0", b"client-0"),
        (1, b"k1", b"client-1"),
        (2, b"k2", b"client-2"),
        (3, b"raw-key-1", b"raw-value-1"),
        (4, None, b"raw-value-2"),
    ]
    assert [r.timestamp for r in log[3:]] == [now, now]
    assert_serving(bootstrap, topic)
