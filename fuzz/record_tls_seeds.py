#!/usr/bin/env python3
"""Records the first bytes real clients send an SSL listener, as seeds of the `tls_handshake`
fuzz target.

    .venv/bin/python fuzz/record_tls_seeds.py

Listens on a loopback port that never answers, points each client at it (librdkafka through
confluent-kafka, Weir's own client (rustls; `WEIR_BIN`, else the release build), Python's ssl
at TLS 1.3 and at TLS 1.2 only, `openssl s_client`, and a Kafka client speaking plaintext to a
TLS port), and writes what arrived on each connection to
fuzz/seeds/tls_handshake/<client>-<hash>.bin. The files are content-addressed, so reruns only
add.
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

SEEDS = Path(__file__).resolve().parent / "seeds" / "tls_handshake"


def save(name: str, data: bytes) -> None:
    SEEDS.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()[:12]
    (SEEDS / f"{name}-{digest}.bin").write_bytes(data)
    print(f"{name}: {len(data)} bytes")


def record(name: str, client) -> None:
    """Runs `client(port)` in a thread and saves what its first connection sent within 2 s."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    thread = threading.Thread(target=client, args=(port,), daemon=True)
    thread.start()
    listener.settimeout(10)
    connection, _ = listener.accept()
    connection.settimeout(0.5)
    data = b""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            chunk = connection.recv(65536)
        except socket.timeout:
            if data:
                break
            continue
        if not chunk:
            break
        data += chunk
    connection.close()
    listener.close()
    save(name, data)


def python_ssl(maximum: ssl.TLSVersion):
    def client(port: int) -> None:
        context = ssl.create_default_context()
        context.maximum_version = maximum
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
                context.wrap_socket(sock, server_hostname="localhost")
        except OSError:
            pass
    return client


def librdkafka(port: int) -> None:
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                         "enable.ssl.certificate.verification": False})
    admin.list_topics(timeout=3)


def openssl_tls12(port: int) -> None:
    subprocess.run(["openssl", "s_client", "-tls1_2", "-connect", f"127.0.0.1:{port}"],
                   input=b"", capture_output=True, timeout=5)


def weir_client(port: int) -> None:
    weir = os.environ.get("WEIR_BIN") or str(Path(__file__).resolve().parent.parent / "target" / "release" / "weir")
    with tempfile.TemporaryDirectory() as scratch:
        # Any CA will do: the listener never answers.
        ca = Path(scratch) / "ca.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(Path(scratch) / "ca.key"),
                        "-out", str(ca), "-days", "1", "-subj", "/CN=seed-ca"], capture_output=True, check=True)
        properties = Path(scratch) / "client.properties"
        properties.write_text(f"security.protocol=SSL\nssl.truststore.location={ca}\n")
        subprocess.run([weir, "topic", "list", "--brokers", f"127.0.0.1:{port}", "--timeout", "3",
                        "--command-config", str(properties)], capture_output=True, timeout=10)


def plaintext_kafka(port: int) -> None:
    """ApiVersions v3 in the clear, as a client told PLAINTEXT sends it to a TLS port."""
    body = struct.pack(">hhi", 18, 3, 1) + struct.pack(">h", 4) + b"weir" + b"\x00"
    body += b"\x05weir\x04" + b"1.0" + b"\x00"
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        time.sleep(1)


def main() -> None:
    record("python-tls13", python_ssl(ssl.TLSVersion.TLSv1_3))
    record("python-tls12", python_ssl(ssl.TLSVersion.TLSv1_2))
    record("librdkafka", librdkafka)
    record("weir-rustls", weir_client)
    record("openssl-tls12", openssl_tls12)
    record("plaintext-api-versions", plaintext_kafka)


if __name__ == "__main__":
    main()
