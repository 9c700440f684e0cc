#!/usr/bin/env python3
"""Records seeds for the controller port's framing from a real three-node quorum.

    python3 fuzz/record_controller_seeds.py [--weir target/release/weir] [--seconds 20]

Starts three `weir server` nodes whose quorum names, for node 2, the address of a recording
proxy in front of node 2's controller listener, so everything the others send node 2 (Raft's
votes, appends and snapshots, forwarded change requests) passes through it. Creates a topic
meanwhile so changes are forwarded and replicated, and writes each connection's bytes as sent
(length prefixes included, at most the first few frames) to

  fuzz/seeds/controller_frames/<hash>.bin

Content-addressed: reruns only add.
"""

from __future__ import annotations

import argparse
import hashlib
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from record_seeds import shut_down

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "fuzz" / "seeds" / "controller_frames"
SEED_BYTES_MAX = 64 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proxy(listen: int, target: int, captured: list[bytes], stop: threading.Event) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen))
    server.listen(64)
    server.settimeout(0.2)

    def pump(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        try:
            while not stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if record is not None and len(record) < SEED_BYTES_MAX:
                    record.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            shut_down(src, dst)
            if record is not None and record:
                captured.append(bytes(record))

    while not stop.is_set():
        try:
            client, _ = server.accept()
        except socket.timeout:
            continue
        upstream = socket.create_connection(("127.0.0.1", target))
        threading.Thread(target=pump, args=(client, upstream, bytearray()), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, None), daemon=True).start()
    server.close()


def whole_frames(data: bytes) -> bytes:
    """The longest prefix of ``data`` made of whole frames."""
    at = 0
    while at + 4 <= len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        if at + 4 + length > len(data):
            break
        at += 4 + length
    return data[:at]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weir", default=str(ROOT / "target" / "release" / "weir"))
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    kafka = {n: free_port() for n in (1, 2, 3)}
    controller = {n: free_port() for n in (1, 2, 3)}
    proxied = free_port()
    quorum = ",".join(f"{n}@127.0.0.1:{proxied if n == 2 else controller[n]}" for n in (1, 2, 3))
    captured: list[bytes] = []
    stop = threading.Event()
    threading.Thread(target=proxy, args=(proxied, controller[2], captured, stop), daemon=True).start()
    processes = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for n in (1, 2, 3):
                processes.append(subprocess.Popen(
                    [args.weir, "server", "--node-id", str(n), "--data-dir", f"{tmp}/node-{n}",
                     "--listen", f"127.0.0.1:{kafka[n]}", "--controller-quorum", quorum,
                     "--controller-listen", f"127.0.0.1:{controller[n]}", "--http-listen", "off"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(args.seconds / 2)
            bootstrap = f"127.0.0.1:{kafka[1]}"
            for i in range(3):
                subprocess.run([args.weir, "topic", "create", f"seed-{i}", "-p", "3", "-r", "3", "--brokers", bootstrap],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
            time.sleep(args.seconds / 2)
        finally:
            for p in processes:
                p.terminate()
            for p in processes:
                p.wait(30)
            stop.set()
            time.sleep(0.5)
    SEEDS.mkdir(parents=True, exist_ok=True)
    written = 0
    for data in captured:
        data = whole_frames(data)
        if not data:
            continue
        name = hashlib.sha256(data).hexdigest()[:12] + ".bin"
        if not (SEEDS / name).exists():
            (SEEDS / name).write_bytes(data)
            written += 1
    print(f"{len(captured)} connections captured, {written} new seeds in {SEEDS}")


if __name__ == "__main__":
    main()
