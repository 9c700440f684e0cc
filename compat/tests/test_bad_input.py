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
from clients import Rec, create_topic, produce_confluent, read_confluent, unique_topic

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


@pytest.fixture(scope="module")
def health_topic(weir):
    topic = unique_topic("health")
    create_topic(weir.bootstrap, topic, partitions=1)
    return topic


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


def test_garbage_frames(bootstrap, health_topic):
    rng = random.Random(20240601)
    frames = []
    # Unknown API key, garbage after it.
    frames.append(struct.pack(">hhi", 0x7F7F, 0, 1) + rng.randbytes(60))
    # Known API keys (Produce, Fetch, Metadata, CreateTopics) with garbage bodies.
    for key, version in ((0, 3), (1, 4), (3, 1), (19, 2)):
        frames.append(struct.pack(">hhi", key, version, 2) + wire.string("x") + rng.randbytes(rng.randint(1, 200)))
    # Header with a client-id length running past the end of the frame.
    frames.append(struct.pack(">hhih", 18, 0, 3, 5000) + b"abc")
    # Entirely random frames of assorted sizes.
    for _ in range(12):
        frames.append(rng.randbytes(rng.randint(1, 2048)))

    connections = []
    try:
        for payload in frames:
            conn = wire.Connection(bootstrap)
            conn.send(wire.int32(len(payload)) + payload)
            connections.append(conn)
        for i, conn in enumerate(connections):
            # Either the broker closes the connection or it answers; it must not hang.
            outcome = conn.wait_closed_or_reply(timeout=15)
            assert outcome in ("closed", "reply"), (i, outcome)
    finally:
        for conn in connections:
            conn.close()
    assert_serving(bootstrap, health_topic)


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
