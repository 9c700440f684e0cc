"""A wire fuzzer: requests recorded from real clients (fuzz/seeds/decode_request, see
fuzz/record_seeds.py), mutated and sent to a live server as fast as it takes them.

Whatever arrives, the server must answer, refuse or close that connection, and go on serving
everyone else: it never panics, never hangs, never exits. The default run is short; set
WEIR_WIRE_FUZZ_SECONDS for a soak and WEIR_WIRE_FUZZ_SEED to vary or replay the mutations.
"""

from __future__ import annotations

import os
import random
import select
import socket
import struct
import time
from pathlib import Path

import wire
from clients import assert_serving, create_topic, unique_topic

SEEDS = Path(__file__).resolve().parents[2] / "fuzz" / "seeds" / "decode_request"
ITERATIONS = int(os.environ.get("WEIR_WIRE_FUZZ_ITERATIONS", "30000"))
SECONDS = float(os.environ.get("WEIR_WIRE_FUZZ_SECONDS", "0"))
SEED = int(os.environ.get("WEIR_WIRE_FUZZ_SEED", "20261201"))
CONNECTIONS = 8
INTERESTING_INT32 = [0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 0xFFFF, 0x10000, 64, 1000]


def mutate(rng: random.Random, frame: bytes, seeds: list[bytes]) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        if not data:
            data = bytearray(rng.choice(seeds))
        op = rng.randrange(9)
        # Mostly keep the API key and version so the mutation reaches the body decoders.
        low = 4 if len(data) > 8 and rng.random() < 0.8 else 0
        at = rng.randrange(low, len(data)) if len(data) > low else 0
        if op == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[at] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01])
        elif op == 2 and at + 4 <= len(data):
            data[at:at + 4] = struct.pack(">i", rng.choice(INTERESTING_INT32))
        elif op == 3:
            del data[at:]
        elif op == 4:
            data[at:at] = rng.randbytes(rng.randint(1, 64))
        elif op == 5:
            end = min(len(data), at + rng.randint(1, 256))
            data[at:at] = data[at:end]
        elif op == 6:
            del data[at:at + rng.randint(1, 32)]
        elif op == 7:
            other = rng.choice(seeds)
            cut = rng.randrange(len(other)) if other else 0
            data = data[:at] + other[cut:]
        elif op == 8 and at + 2 <= len(data):
            data[at:at + 2] = struct.pack(">h", rng.choice([0, -1, 0x7FFF, 2, 18]))
    return bytes(data)


class Pool:
    """A few raw connections, reopened when the server closes one; replies are drained and
    discarded so the server never stops reading for lack of a reader."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.socks: list[socket.socket | None] = [None] * CONNECTIONS
        self.closed = 0

    def get(self, i: int) -> socket.socket:
        sock = self.socks[i]
        if sock is None:
            sock = socket.create_connection(self.address, timeout=5)
            sock.settimeout(2)
            self.socks[i] = sock
        return sock

    def drop(self, i: int) -> None:
        sock = self.socks[i]
        if sock is not None:
            sock.close()
            self.socks[i] = None
            self.closed += 1

    def drain(self) -> None:
        live = [s for s in self.socks if s is not None]
        if not live:
            return
        readable, _, _ = select.select(live, [], [], 0)
        for sock in readable:
            i = self.socks.index(sock)
            try:
                if not sock.recv(1 << 20):
                    self.drop(i)
            except OSError:
                self.drop(i)

    def close(self) -> None:
        for i in range(CONNECTIONS):
            self.drop(i)


def test_mutated_real_client_requests_never_take_the_server_down(make_weir):
    # A low open-file limit bounds the partitions mutated CreateTopics requests can make.
    weir = make_weir("wirefuzz", open_files=2048)
    bootstrap = weir.bootstrap
    health = unique_topic("health")
    create_topic(bootstrap, health, partitions=1)
    seeds = [p.read_bytes() for p in sorted(SEEDS.glob("*.bin"))]
    assert len(seeds) >= 50, f"only {len(seeds)} recorded requests in {SEEDS}"
    rng = random.Random(SEED)
    pool = Pool(bootstrap)
    started = time.monotonic()
    sent = 0
    try:
        while (time.monotonic() - started < SECONDS) if SECONDS else sent < ITERATIONS:
            frame = mutate(rng, rng.choice(seeds), seeds)
            i = rng.randrange(CONNECTIONS)
            try:
                pool.get(i).sendall(struct.pack(">i", len(frame)) + frame)
            except OSError:
                pool.drop(i)
            sent += 1
            pool.drain()
            if sent % 1000 == 0:
                assert weir.is_running(), f"the server died after {sent} mutated requests\n" + weir.log_tail()
                assert_serving(bootstrap, health)
    finally:
        pool.close()
    elapsed = time.monotonic() - started
    assert weir.is_running(), "the server died\n" + weir.log_tail()
    assert_serving(bootstrap, health)
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.api_versions_request(3, 1))
        assert conn.recv_frame(timeout=10) is not None
    log = weir.log_text()
    assert "panicked" not in log and "storage failure" not in log, weir.log_tail()
    print(f"wire fuzz: {sent} mutated requests from {len(seeds)} seeds in {elapsed:.1f}s "
          f"({sent / elapsed:.0f}/s), {pool.closed} connections closed by the server, seed {SEED}")
