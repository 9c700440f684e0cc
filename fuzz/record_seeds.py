#!/usr/bin/env python3
"""Records fuzz seeds from real Kafka clients talking to a real Weir server.

    .venv/bin/python fuzz/record_seeds.py [--weir target/release/weir]

Starts `weir server` advertising the address of a recording proxy, runs small workloads with
librdkafka (confluent-kafka), kafka-python, kcat and KafkaJS through the proxy, and writes:

  fuzz/seeds/decode_request/<client>-<api>-v<version>-<hash>.bin   request frames (no length prefix)
  fuzz/seeds/validate_batch/<client>-<codec>-<hash>.bin            produced record batches
  fuzz/seeds/recover_log/<client>-<hash>.bin                       segment files (a mode byte first)

The same request frames seed the live wire fuzzer (compat/tests/test_wire_fuzz.py). Run it
again after adding an API or a client; the files are content-addressed, so reruns only add.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "fuzz" / "seeds"
API_NAMES = {0: "produce", 1: "fetch", 2: "listoffsets", 3: "metadata", 18: "apiversions",
             19: "createtopics", 20: "deletetopics", 22: "initproducerid", 23: "offsetforleaderepoch",
             32: "describeconfigs", 33: "alterconfigs", 37: "createpartitions",
             44: "incrementalalterconfigs", 60: "describecluster"}
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
FRAME_BYTES_MAX = 256 * 1024  # keep seeds small: larger frames are not saved
SEGMENT_BYTES_MAX = 64 * 1024
LABEL = {"client": "none"}


def save(kind: str, name: str, data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()[:12]
    path = SEEDS / kind / f"{name}-{digest}.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(data)


def read_exact(sock: socket.socket, n: int) -> bytes | None:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def record_frame(frame: bytes) -> None:
    if len(frame) < 8 or len(frame) > FRAME_BYTES_MAX:
        return
    api, version = struct.unpack(">hh", frame[:4])
    client = LABEL["client"]
    save("decode_request", f"{client}-{API_NAMES.get(api, api)}-v{version}", frame)
    if api == 0:
        # Every v2 batch in the frame: find the magic byte at offset 16 of a batch header.
        for m in re.finditer(rb"\x00{8}", frame):
            start = m.start()
            if start + 61 > len(frame):
                continue
            length = struct.unpack(">i", frame[start + 8:start + 12])[0]
            if frame[start + 16] != 2 or length < 49 or start + 12 + length > len(frame):
                continue
            batch = frame[start:start + 12 + length]
            codec = struct.unpack(">h", batch[21:23])[0] & 7
            save("validate_batch", f"{client}-{CODECS.get(codec, codec)}", batch)


def pump_requests(client: socket.socket, server: socket.socket) -> None:
    try:
        while True:
            head = read_exact(client, 4)
            if head is None:
                break
            (size,) = struct.unpack(">i", head)
            body = read_exact(client, size)
            if body is None:
                break
            record_frame(body)
            server.sendall(head + body)
    except OSError:
        pass
    finally:
        shut_down(client, server)


def shut_down(*sockets: socket.socket) -> None:
    """Shuts both directions of each socket down, whatever state it is in."""
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pump_responses(server: socket.socket, client: socket.socket) -> None:
    try:
        while True:
            data = server.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass


def proxy(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        server = socket.create_connection(target)
        threading.Thread(target=pump_requests, args=(client, server), daemon=True).start()
        threading.Thread(target=pump_responses, args=(server, client), daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workloads(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic

    LABEL["client"] = "librdkafka"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("seeds", 2, 1), NewTopic("doomed", 1, 1)]).values():
        future.result(30)
    for future in admin.describe_configs([ConfigResource("topic", "seeds"), ConfigResource("broker", "1")]).values():
        future.result(30)
    for future in admin.alter_configs([ConfigResource("topic", "seeds", set_config={"retention.ms": "86400000"})]).values():
        future.result(30)
    list(admin.create_partitions([NewPartitions("seeds", 3)]).values())[0].result(30)
    list(admin.delete_topics(["doomed"]).values())[0].result(30)
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "enable.idempotence": True, "linger.ms": 20})
        for i in range(30):
            p.produce("seeds", key=f"k{i}".encode(), value=(f"librdkafka {codec} {i} " * 5).encode(), headers=[("h", b"v")])
        p.flush(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition("seeds", p, 0) for p in range(3)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if c.poll(0.5) is None:
            break
    c.offsets_for_times([TopicPartition("seeds", 0, 1000)], timeout=10)
    c.close()

    LABEL["client"] = "kafka-python"
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    kadmin.create_topics([KNewTopic("seeds-kp", 1, 1)])
    kadmin.close()
    for codec in [None, "gzip", "snappy", "lz4", "zstd"]:
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20)
        for i in range(30):
            p.send("seeds-kp", key=b"k", value=f"kafka-python {codec} {i} ".encode() * 4, headers=[("h", b"v")])
        p.flush(30)
        p.close()
    kc = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=2000, auto_offset_reset="earliest")
    from kafka import TopicPartition as KTP
    kc.assign([KTP("seeds-kp", 0)])
    for _ in kc:
        pass
    kc.close()

    LABEL["client"] = "kcat"
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "seeds", "-p", "0"], input=b"kcat one\nkcat two\n", check=True, timeout=30)
    subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "seeds", "-p", "0", "-e", "-q"], check=True, timeout=30, stdout=subprocess.DEVNULL)
    subprocess.run(["kcat", "-b", bootstrap, "-L"], check=True, timeout=30, stdout=subprocess.DEVNULL)

    LABEL["client"] = "kafkajs"
    subprocess.run(["node", str(ROOT / "compat" / "kafkajs" / "produce.js"), bootstrap, "seeds-js", "120"],
                   check=True, timeout=60, stdout=subprocess.DEVNULL, cwd=ROOT / "compat")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weir", default=str(ROOT / "target" / "release" / "weir"))
    args = parser.parse_args()
    proxy_port, broker_port = free_port(), free_port()
    listener = socket.create_server(("127.0.0.1", proxy_port))
    threading.Thread(target=proxy, args=(listener, ("127.0.0.1", broker_port)), daemon=True).start()
    with tempfile.TemporaryDirectory() as data:
        server = subprocess.Popen([args.weir, "server", "--data-dir", data, "--listen", f"127.0.0.1:{broker_port}",
                                   "--advertise", f"127.0.0.1:{proxy_port}"], stderr=subprocess.PIPE, text=True)
        assert server.stderr is not None
        for line in server.stderr:
            if "weir ready" in line:
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        try:
            workloads(f"127.0.0.1:{proxy_port}")
        finally:
            server.terminate()
            server.wait(20)
        for segment in sorted(Path(data, "logs").glob("*/*.log")):
            content = segment.read_bytes()[:SEGMENT_BYTES_MAX]
            if content:
                save("recover_log", f"{segment.parent.name}", b"\x00" + content)
                save("recover_log", f"{segment.parent.name}-clean", b"\x01" + content)
    for kind in ["decode_request", "validate_batch", "recover_log"]:
        print(f"{kind}: {len(list((SEEDS / kind).glob('*.bin')))} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
