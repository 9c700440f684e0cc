"""Just enough of the Kafka wire protocol, written by hand, to send exact bytes:
request framing and headers, ApiVersions, Produce (v3-v11) and magic-v2 record
batches with their CRC-32C.  Used by the bad-input tests, which must not rely
on a client library that would refuse to send broken data.
"""

from __future__ import annotations

import socket
import struct
import time

API_PRODUCE = 0
API_API_VERSIONS = 18

# ---------------------------------------------------------------------------------
# Primitive encodings
# ---------------------------------------------------------------------------------


def int16(v: int) -> bytes:
    return struct.pack(">h", v)


def int32(v: int) -> bytes:
    return struct.pack(">i", v)


def string(s: str | None) -> bytes:
    if s is None:
        return int16(-1)
    raw = s.encode()
    return int16(len(raw)) + raw


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(v: int) -> bytes:
    """Zig-zag signed varint (record fields)."""
    return uvarint((v << 1) ^ (v >> 63))


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def compact_bytes(b: bytes | None) -> bytes:
    if b is None:
        return uvarint(0)
    return uvarint(len(b) + 1) + b


EMPTY_TAGS = b"\x00"


class Reader:
    """Sequential decoder over a response body."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"response too short: need {n} bytes at {self.pos}, have {len(self.data)}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())

    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------------------------
# CRC-32C (Castagnoli), as used by record batches
# ---------------------------------------------------------------------------------

def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------------------------
# Record batches (magic 2)
# ---------------------------------------------------------------------------------

def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = b"\x00"  # attributes
    body += varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(0)  # headers
    return varint(len(body)) + body


def record_batch(records: list[tuple[bytes | None, bytes | None]], base_timestamp: int) -> bytes:
    """An uncompressed, non-idempotent magic-2 batch with a correct CRC."""
    encoded = b"".join(encode_record(i, 0, k, v) for i, (k, v) in enumerate(records))
    after_crc = struct.pack(
        ">hiqqqhii",
        0,  # attributes: no compression, CreateTime, not transactional
        len(records) - 1,  # last offset delta
        base_timestamp,
        base_timestamp,  # max timestamp
        -1,  # producer id
        -1,  # producer epoch
        -1,  # base sequence
        len(records),
    ) + encoded
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + rest
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc32c(after_crc)) + after_crc


def recrc(batch: bytes) -> bytes:
    """The batch with its CRC-32C recomputed: hostile content under a valid checksum."""
    return batch[:17] + struct.pack(">I", crc32c(batch[21:])) + batch[21:]


def patch(batch: bytes, offset: int, value: bytes) -> bytes:
    """The batch with `value` written at `offset` and the CRC made valid again."""
    return recrc(batch[:offset] + value + batch[offset + len(value):])


# ---------------------------------------------------------------------------------
# Requests and responses
# ---------------------------------------------------------------------------------

def request(api_key: int, version: int, correlation_id: int, body: bytes, flexible: bool, client_id: str = "weir-compat-raw") -> bytes:
    """A framed request; header v2 (with tagged fields) for flexible versions, else v1."""
    header = struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)
    if flexible:
        header += EMPTY_TAGS
    payload = header + body
    return int32(len(payload)) + payload


def produce_is_flexible(version: int) -> bool:
    return version >= 9


def produce_request(version: int, correlation_id: int, topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 30000,
                    transactional_id: str | None = None) -> bytes:
    if not 3 <= version <= 12:
        raise ValueError(f"Produce v{version} is not supported by this encoder")
    if produce_is_flexible(version):
        body = compact_string(transactional_id) + int16(acks) + int32(timeout_ms)
        body += uvarint(2) + compact_string(topic)
        body += uvarint(2) + int32(partition) + compact_bytes(records) + EMPTY_TAGS
        body += EMPTY_TAGS  # topic tags
        body += EMPTY_TAGS  # request tags
    else:
        body = string(transactional_id) + int16(acks) + int32(timeout_ms)
        body += int32(1) + string(topic)
        body += int32(1) + int32(partition) + int32(len(records)) + records
    return request(API_PRODUCE, version, correlation_id, body, produce_is_flexible(version))


API_FETCH = 1


def fetch_request(correlation_id: int, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int = 0, replica_id: int = -1) -> bytes:
    """A Fetch v11 request (the last non-flexible version) for one partition, without a session;
    a consumer's unless ``replica_id`` names a broker."""
    body = int32(replica_id) + int32(max_wait_ms) + int32(1) + int32(max_bytes) + b"\x00" + int32(0) + int32(-1)
    body += int32(1) + string(topic)
    body += int32(1) + int32(partition) + int32(-1) + struct.pack(">qq", offset, -1) + int32(max_bytes)
    body += int32(0) + string("")
    return request(API_FETCH, 11, correlation_id, body, flexible=False)


def parse_fetch_v11_high_watermark(payload: bytes) -> tuple[int, int]:
    """(partition error code, high watermark) of the one partition a Fetch v11 response
    answers (``fetch_request``)."""
    r = Reader(payload)
    r.int32()  # correlation id
    r.int32()  # throttle time
    r.int16()  # top-level error code
    r.int32()  # session id
    topics = r.int32()
    assert topics == 1, f"expected one topic in the Fetch response, got {topics}"
    r.string()  # name
    partitions = r.int32()
    assert partitions == 1, f"expected one partition in the Fetch response, got {partitions}"
    r.int32()  # index
    error_code = r.int16()
    return error_code, r.int64()


def replica_fetch_request(correlation_id: int, topic_id: bytes, partition: int, offset: int, replica_id: int, replica_epoch: int, max_wait_ms: int = 0) -> bytes:
    """A Fetch v16 request as a follower sends it (KIP-903): ``ReplicaState`` (tagged field 1)
    names the replica and its broker epoch; one partition of the topic with id ``topic_id``
    (16 bytes), read from ``offset``."""
    assert len(topic_id) == 16
    replica_state = int32(replica_id) + struct.pack(">q", replica_epoch) + EMPTY_TAGS
    body = int32(max_wait_ms) + int32(1) + int32(1024 * 1024) + b"\x00" + int32(0) + int32(-1)
    body += uvarint(2) + topic_id
    body += uvarint(2) + int32(partition) + int32(-1) + struct.pack(">q", offset) + int32(-1)
    body += struct.pack(">q", -1) + int32(1024 * 1024) + EMPTY_TAGS
    body += EMPTY_TAGS  # topic tags
    body += uvarint(1)  # no forgotten topics
    body += compact_string("")  # rack
    body += uvarint(1) + uvarint(1) + uvarint(len(replica_state)) + replica_state
    return request(API_FETCH, 16, correlation_id, body, flexible=True)


def find_coordinator_request(correlation_id: int, group: str) -> bytes:
    """FindCoordinator v1 for ``group``."""
    return request(10, 1, correlation_id, string(group) + b"\x00", flexible=False)


def find_coordinator_v3_request(correlation_id: int, key: str, key_type: int) -> bytes:
    """FindCoordinator v3 for ``key`` of ``key_type`` (0 a group, 1 a transactional id)."""
    return request(10, 3, correlation_id, compact_string(key) + struct.pack(">b", key_type) + EMPTY_TAGS, flexible=True)


def parse_find_coordinator(version: int, payload: bytes) -> tuple[int, str | None]:
    """(error code, "host:port" of the coordinator) from a FindCoordinator v1-3 response."""
    flexible = version >= 3
    reader = Reader(payload)
    reader.int32()  # correlation id
    if flexible:
        reader.tags()
    reader.int32()  # throttle time
    error = reader.int16()
    text = reader.compact_string if flexible else reader.string
    text()  # error message
    reader.int32()  # node id
    host = text()
    port = reader.int32()
    return error, (f"{host}:{port}" if error == 0 else None)


def init_producer_id_request(correlation_id: int, version: int, transactional_id: str | None, timeout_ms: int = 60000, producer_id: int = -1, producer_epoch: int = -1) -> bytes:
    """InitProducerId v0-4 (flexible from v2)."""
    flexible = version >= 2
    body = (compact_string if flexible else string)(transactional_id) + int32(timeout_ms)
    if version >= 3:
        body += struct.pack(">qh", producer_id, producer_epoch)
    if flexible:
        body += EMPTY_TAGS
    return request(22, version, correlation_id, body, flexible=flexible)


def parse_init_producer_id(version: int, payload: bytes) -> tuple[int, int, int]:
    """(error code, producer id, producer epoch) from an InitProducerId response."""
    reader = Reader(payload)
    reader.int32()  # correlation id
    if version >= 2:
        reader.tags()
    reader.int32()  # throttle time
    return reader.int16(), reader.int64(), reader.int16()


def join_group_request(correlation_id: int, group: str, metadata: bytes, member_id: str = "", session_timeout_ms: int = 10000) -> bytes:
    """JoinGroup v3 (no MEMBER_ID_REQUIRED round): one `range` protocol carrying ``metadata``."""
    body = (
        string(group) + int32(session_timeout_ms) + int32(session_timeout_ms) + string(member_id)
        + string("consumer") + int32(1) + string("range") + int32(len(metadata)) + metadata
    )
    return request(11, 3, correlation_id, body, flexible=False)


def join_group_error(payload: bytes) -> int:
    """The error code of a JoinGroup v3 response (after the correlation id and throttle time)."""
    return struct.unpack(">h", payload[8:10])[0]


def consumer_group_heartbeat_request(correlation_id: int, group: str, member_id: str, topics: list[str], member_epoch: int = 0) -> bytes:
    """ConsumerGroupHeartbeat v1 (KIP-848): by default a join (epoch 0) of ``member_id``, chosen
    by the client, subscribing to ``topics`` and owning nothing."""
    names = uvarint(len(topics) + 1) + b"".join(compact_string(t) for t in topics)
    body = (
        compact_string(group) + compact_string(member_id) + int32(member_epoch)
        + compact_string(None) + compact_string(None)  # instance id, rack id
        + int32(30000) + names
        + compact_string(None) + compact_string(None)  # topic regex, server assignor
        + uvarint(1)  # owned partitions: none
        + EMPTY_TAGS
    )
    return request(68, 1, correlation_id, body, flexible=True)


def consumer_group_heartbeat_error(payload: bytes) -> int:
    """The error code of a ConsumerGroupHeartbeat response (after the correlation id, the
    header's tagged fields and the throttle time)."""
    return struct.unpack(">h", payload[9:11])[0]


def create_topics_v4_request(correlation_id: int, topic: str, partitions: int, client_id: str) -> bytes:
    """CreateTopics v4 (the last version before the strict controller_mutation_rate) for one
    topic of ``partitions`` partitions, one replica each, as ``client_id``."""
    body = (int32(1) + string(topic) + int32(partitions) + int16(1) + int32(0) + int32(0)
            + int32(30000) + b"\x00")
    return request(19, 4, correlation_id, body, flexible=False, client_id=client_id)


def parse_create_topics_v4(payload: bytes) -> tuple[int, int]:
    """A CreateTopics v4 response's throttle_time_ms and its first topic's error code."""
    r = Reader(payload)
    r.int32()  # correlation id
    throttle_ms = r.int32()
    assert r.int32() >= 1, "one topic answered"
    r.string()
    return throttle_ms, r.int16()


def metadata_request(correlation_id: int, topic: str) -> bytes:
    """Metadata v1 for ``topic`` alone, without creating it."""
    return request(3, 1, correlation_id, int32(1) + string(topic), flexible=False)


def parse_metadata_v1(payload: bytes) -> tuple[int, list[tuple[int, int]]] | None:
    """(topic error code, [(partition error code, leader id)]) of the one topic a Metadata v1
    response describes; None if it describes none."""
    reader = Reader(payload)
    reader.int32()  # correlation id
    for _ in range(reader.int32()):  # brokers
        reader.int32()
        reader.string()
        reader.int32()
        reader.string()  # rack
    reader.int32()  # controller id
    if reader.int32() < 1:
        return None
    error = reader.int16()
    reader.string()  # name
    reader.int8()  # is internal
    partitions = []
    for _ in range(reader.int32()):
        partition_error = reader.int16()
        reader.int32()  # index
        leader = reader.int32()
        for _ in range(2):  # replicas, ISR
            for _ in range(reader.int32()):
                reader.int32()
        partitions.append((partition_error, leader))
    return error, partitions


def parse_produce_response(version: int, payload: bytes) -> dict:
    """Correlation id plus error code and base offset of the single partition."""
    r = Reader(payload)
    correlation_id = r.int32()
    flexible = produce_is_flexible(version)
    if flexible:
        r.tags()
        topics = r.uvarint() - 1
    else:
        topics = r.int32()
    assert topics == 1, f"expected one topic in the Produce response, got {topics}"
    name = r.compact_string() if flexible else r.string()
    partitions = r.uvarint() - 1 if flexible else r.int32()
    assert partitions == 1, f"expected one partition in the Produce response, got {partitions}"
    index = r.int32()
    error_code = r.int16()
    base_offset = r.int64()
    return {"correlation_id": correlation_id, "topic": name, "partition": index, "error_code": error_code, "base_offset": base_offset}


def api_versions_request(version: int, correlation_id: int) -> bytes:
    if version >= 3:
        body = compact_string("weir-compat-raw") + compact_string("1.0") + EMPTY_TAGS
        return request(API_API_VERSIONS, version, correlation_id, body, flexible=True)
    return request(API_API_VERSIONS, version, correlation_id, b"", flexible=False)


def parse_api_versions_v0(payload: bytes) -> dict:
    """ApiVersions response in the v0 layout (also used for UNSUPPORTED_VERSION replies).

    Requires the body to be exactly the v0 layout, with nothing after the array.
    """
    r = Reader(payload)
    correlation_id = r.int32()
    error_code = r.int16()
    count = r.int32()
    assert 0 <= count < 1000, f"implausible api key count {count}"
    apis = {}
    for _ in range(count):
        key, lo, hi = r.int16(), r.int16(), r.int16()
        apis[key] = (lo, hi)
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after the v0 ApiVersions body"
    return {"correlation_id": correlation_id, "error_code": error_code, "apis": apis}


def parse_api_versions_v3(payload: bytes) -> dict:
    """ApiVersions v3 response: response header v0 (never flexible), flexible body."""
    r = Reader(payload)
    correlation_id = r.int32()
    error_code = r.int16()
    count = r.uvarint() - 1
    apis = {}
    for _ in range(count):
        key, lo, hi = r.int16(), r.int16(), r.int16()
        r.tags()
        apis[key] = (lo, hi)
    throttle = r.int32()
    r.tags()
    assert r.remaining() == 0, f"{r.remaining()} unexpected bytes after the v3 ApiVersions body"
    return {"correlation_id": correlation_id, "error_code": error_code, "apis": apis, "throttle_time_ms": throttle}


class Connection:
    """A raw TCP connection to the broker with bounded reads."""

    def __init__(self, bootstrap: str, timeout: float = 10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int, timeout: float) -> bytes | None:
        """Read exactly n bytes; None if the peer closed (or reset) the connection first."""
        deadline = time.monotonic() + timeout
        chunks = bytearray()
        while len(chunks) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete reply within {timeout:.0f}s (got {len(chunks)} of {n} bytes)")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(n - len(chunks))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks += chunk
        return bytes(chunks)

    def recv_frame(self, timeout: float = 10.0, max_size: int = 64 * 1024 * 1024) -> bytes | None:
        """One response frame's payload, or None if the connection was closed."""
        head = self.recv_exact(4, timeout)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        assert 0 <= size <= max_size, f"implausible response size {size}"
        return self.recv_exact(size, timeout)

    def wait_closed_or_reply(self, timeout: float) -> str:
        """'closed' if the peer closes the connection, 'reply' if it sends anything; bounded."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"connection neither closed nor answered within {timeout:.0f}s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return "closed"
            except socket.timeout:
                continue
            return "reply" if data else "closed"

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------------
# SASL PLAIN login and a follower's fetch answer
# ---------------------------------------------------------------------------------

API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36


def sasl_plain_login(connection: "Connection", user: str, password: str) -> tuple[int, int]:
    """Logs ``connection`` in with PLAIN as a Kafka client does (SaslHandshake v1, then
    SaslAuthenticate v0 with ``\\0user\\0password``): the error codes of the two answers."""
    connection.send(request(API_SASL_HANDSHAKE, 1, 1, string("PLAIN"), flexible=False))
    handshake = Reader(connection.recv_frame())
    handshake.int32()
    handshake_error = handshake.int16()
    token = b"\0" + user.encode() + b"\0" + password.encode()
    connection.send(request(API_SASL_AUTHENTICATE, 0, 2, int32(len(token)) + token, flexible=False))
    answer = Reader(connection.recv_frame())
    answer.int32()
    return handshake_error, answer.int16()


def parse_fetch_v16_first_error(payload: bytes) -> tuple[int, int]:
    """The top-level error code of a Fetch v16 answer and that of its first partition."""
    reader = Reader(payload)
    reader.int32()  # correlation id
    reader.tags()
    reader.int32()  # throttle time
    error = reader.int16()
    reader.int32()  # session id
    assert reader.uvarint() > 1, "no topic in the answer"
    reader.take(16)  # topic id
    assert reader.uvarint() > 1, "no partition in the answer"
    reader.int32()  # partition index
    return error, reader.int16()
