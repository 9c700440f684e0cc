"""Attacks on a three-node cluster and its control plane, over real sockets: a client posing as
a follower must get no write acknowledged, and a flood of the controller port must fence
nobody who is alive.
"""

from __future__ import annotations

import base64
import errno
import signal
import socket
import struct
import time

from confluent_kafka import TopicCollection
from confluent_kafka.admin import NewTopic

import wire
from clients import Rec, admin, produce_confluent, read_confluent, unique_topic
from harness import Deadline
from test_cluster import cluster  # noqa: F401  (the fixture)


NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


def topic_id_bytes(client, topic: str) -> bytes:
    described = client.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    return base64.urlsafe_b64decode(str(described.topic_id) + "==")


def leader_high_watermark(address: str, topic: str) -> int:
    """Partition 0's high watermark as the broker at ``address`` (its leader) answers a
    consumer's Fetch: that broker alone is asked (a client could pick a paused node for its
    metadata and wait out its timeout)."""
    with wire.Connection(address) as connection:
        connection.send(wire.fetch_request(99, topic, 0, 0, 1024))
        error_code, high_watermark = wire.parse_fetch_v11_high_watermark(connection.recv_frame(20))
    assert error_code == 0, f"Fetch of {topic}-0 from {address}: error {error_code}"
    return high_watermark


def test_a_client_posing_as_a_replica_gets_no_write_acknowledged(cluster):  # noqa: F811
    """Follower 3 of a partition on [1, 3] with min ISR 2 is paused, so an acks=all write
    waits. A plain client then fetches as replica 3 at the leader's log end: Fetch v11 (no
    broker epoch) and Fetch v16 with guessed epochs. Each is refused by closing the connection
    and the write stays unacknowledged; the leader is then killed and node 3 resumed, and every
    write that was acknowledged is there (before, the forged fetch moved the high watermark,
    the write was acknowledged at once, and node 3 led without it)."""
    cluster.start()
    client = admin(cluster.bootstrap)
    topic = unique_topic("posed")
    client.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 3]], config={"min.insync.replicas": "2"})])[topic].result(timeout=30)
    deadline = Deadline(60)
    while [r.id for r in cluster.describe(topic).partitions[0].isr] != [1, 3]:
        assert not deadline.expired(), cluster.logs()
        time.sleep(0.3)
    topic_id = topic_id_bytes(client, topic)
    leader = cluster.leader(topic, 0)
    assert leader == 1, f"the preferred leader of [1, 3] should lead, got {leader}"
    batch = wire.record_batch([(None, b"acknowledged-before")], int(time.time() * 1000))
    # The topic's first ISR is its replica list, so node 1 may not have applied the new topic
    # yet: retried as a client retries UNKNOWN_TOPIC_OR_PARTITION and NOT_LEADER_OR_FOLLOWER.
    deadline = Deadline(30)
    with wire.Connection(cluster.address(1)) as producer:
        while True:
            producer.send(wire.produce_request(9, 1, topic, 0, batch))
            answer = wire.parse_produce_response(9, producer.recv_frame(30))
            if answer["error_code"] not in (3, 6) or deadline.expired():
                break
            time.sleep(0.2)
        assert answer["error_code"] == 0, answer
    acknowledged = {answer["base_offset"]: b"acknowledged-before"}

    cluster.signal_node(3, signal.SIGSTOP)
    paused_at = time.monotonic()
    refused = 0
    try:
        pending = wire.Connection(cluster.address(1), timeout=60)
        batch = wire.record_batch([(None, b"must-wait-for-3")], int(time.time() * 1000))
        pending.send(wire.produce_request(9, 2, topic, 0, batch, timeout_ms=60000))
        time.sleep(0.5)
        log_end = answer["base_offset"] + 2
        # Epochs a client might guess: small numbers (an epoch that is a metadata log position),
        # negative ones, and large ones.
        forged = [wire.fetch_request(7, topic, 0, log_end, 1024 * 1024, replica_id=3)]
        forged += [wire.replica_fetch_request(8, topic_id, 0, log_end, 3, epoch) for epoch in (*range(0, 200, 7), -1, 1 << 40, (1 << 63) - 1)]
        for request in forged:
            with wire.Connection(cluster.address(1)) as attacker:
                attacker.send(request)
                outcome = attacker.wait_closed_or_reply(10)
                assert outcome == "closed", "a fetch posing as replica 3 was answered"
                refused += 1
        pending.sock.settimeout(2)
        try:
            reply = pending.recv_frame(2)
        except TimeoutError:
            reply = None
        # Asked of node 1 alone, as a client that knows node 3 might ask it and wait.
        leader_only = admin(cluster.address(1))
        described = leader_only.describe_topics(TopicCollection([topic]))[topic].result(timeout=5)
        isr = [r.id for r in described.partitions[0].isr]
        if reply is None:
            # 3 is still in the ISR (the write waits for it alone) and the high watermark has
            # not moved past the write.
            assert isr == [1, 3], cluster.logs(60)
            assert leader_high_watermark(cluster.address(1), topic) == log_end - 1
        else:
            # On a machine slow enough that paused node 3 missed its session
            # (broker.session.timeout.ms) before this point, the controller fenced it and took
            # it out of the ISR: the write is then answered, but never as written.
            outcome = wire.parse_produce_response(9, reply)
            assert outcome["error_code"] == NOT_ENOUGH_REPLICAS_AFTER_APPEND, f"the write was acknowledged while its follower was paused: {outcome}"
            assert isr == [1], f"answered {outcome} with ISR {isr}\n{cluster.logs(60)}"
            print(f"node 3 was fenced after {time.monotonic() - paused_at:.1f} s; the write was refused")
        print(f"paused for {time.monotonic() - paused_at:.1f} s")

        cluster.kill_node(1)
        pending.close()
    finally:
        cluster.signal_node(3, signal.SIGCONT)
    cluster.restart_node(1)
    deadline = Deadline(90)
    while True:
        try:
            logged = read_confluent(cluster.bootstrap, topic, [0])
            break
        except Exception:
            assert not deadline.expired(), cluster.logs()
            time.sleep(1)
    at = {rec.offset: rec.value for rec in logged[0]}
    lost = {offset: value for offset, value in acknowledged.items() if at.get(offset) != value}
    assert not lost, f"acknowledged writes lost: {lost}\n{cluster.logs()}"
    server_log = (cluster.node_dir(1) / "server.log").read_text(errors="replace")
    assert "posing as replica 3" in server_log, cluster.logs()
    print(f"forged replica fetches: {refused} refused with the connection closed, none acknowledged a write")


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def fenced_lines(cluster) -> int:  # noqa: F811
    return sum((cluster.node_dir(n) / "server.log").read_text(errors="replace").count("broker fenced") for n in cluster.node_ids())


class Flood:
    """Connections to the controller ports from ``sources`` (addresses on loopback), each
    holding half a frame: most send two bytes of a header, one in ten a 64 MiB length prefix
    and 1 MiB of its body. ``refill()`` opens new ones for those the nodes closed, as an
    attacker keeps the port full."""

    def __init__(self, ports: list[int], sources: list[str], per_source: int):
        self.ports, self.sources, self.per_source = ports, sources, per_source
        self.open: list[socket.socket] = []
        self.opened = 0
        self.big = 0

    def refill(self):
        alive = []
        for sock in self.open:
            try:
                if sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b"":
                    sock.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                sock.close()
                continue
            alive.append(sock)
        self.open = alive
        want = len(self.ports) * len(self.sources) * self.per_source
        while len(self.open) < want:
            port = self.ports[self.opened % len(self.ports)]
            source = self.sources[(self.opened // len(self.ports)) % len(self.sources)]
            self.opened += 1
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind((source, 0))
            if sock.connect_ex(("127.0.0.1", port)) not in (0, errno.EINPROGRESS):
                sock.close()
                continue
            sock.settimeout(0.5)
            try:
                if self.opened % 10 == 0:
                    sock.sendall(struct.pack(">I", 64 * 1024 * 1024) + b"x" * (1024 * 1024))
                    self.big += 1
                else:
                    sock.sendall(b"\x00\x00")
            except OSError:
                sock.close()
                continue
            sock.setblocking(False)
            self.open.append(sock)

    def close(self):
        for sock in self.open:
            sock.close()


def test_a_flood_of_the_controller_port_fences_nobody(cluster):  # noqa: F811
    """Connections holding half a frame flood every node's controller port for 25 s (more
    than twice broker.session.timeout.ms), first from twenty addresses that are no quorum
    member's, then from the members' own address, reopened as fast as the nodes close them;
    one in ten sends a 64 MiB length prefix and 1 MiB of its body. Brokers heartbeat and
    forward over connections they keep, strangers share a budget of their own, and frames are
    read as their bytes arrive: nobody is fenced, an RF 3 topic is created and written
    meanwhile, and no node grows by more than 150 MB (before: two of three brokers fenced
    within 5 s, and ten such frames took a node from 44 to 700 MB)."""
    cluster.start()
    ports = [cluster.base_port + 100 + n - 1 for n in cluster.node_ids()]
    pids = {n: cluster.pid(n) for n in cluster.node_ids()}
    deadline = Deadline(60)
    while cluster.quorum_leader() is None:
        assert not deadline.expired(), cluster.logs()
        time.sleep(0.5)
    fenced_before = fenced_lines(cluster)
    rss_before = {n: rss_mb(pid) for n, pid in pids.items()}
    rss_peak = dict(rss_before)
    client = admin(cluster.bootstrap)
    for label, sources, per_source in [
        ("twenty stranger addresses", [f"127.0.0.{i}" for i in range(3, 23)], 20),
        ("the members' own address", ["127.0.0.1"], 200),
    ]:
        flood = Flood(ports, sources, per_source)
        topic = unique_topic("flooded")
        created = None
        started = time.monotonic()
        try:
            while time.monotonic() - started < 25:
                flood.refill()
                for n, pid in pids.items():
                    rss_peak[n] = max(rss_peak[n], rss_mb(pid))
                if created is None and time.monotonic() - started > 10:
                    begun = time.monotonic()
                    client.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(timeout=30)
                    produce_confluent(cluster.bootstrap, topic, [Rec(None, b"during the flood")] * 10, acks="all")
                    created = time.monotonic() - begun
                time.sleep(0.2)
        finally:
            flood.close()
        fenced = fenced_lines(cluster) - fenced_before
        print(
            f"controller-port flood from {label}: {flood.opened} connections opened "
            f"({flood.big} with a 64 MiB prefix and 1 MiB of body), {fenced} brokers fenced, "
            f"RF 3 topic created and written in {created:.2f} s, "
            f"RSS {', '.join(f'node {n} {rss_before[n]:.0f}->{rss_peak[n]:.0f} MB' for n in pids)}"
        )
        assert fenced == 0, f"{fenced} brokers fenced during the flood from {label}\n{cluster.logs()}"
        records = read_confluent(cluster.bootstrap, topic, [0, 1, 2])
        assert sum(len(r) for r in records.values()) == 10
    for n in pids:
        assert rss_peak[n] - rss_before[n] < 150, f"node {n} grew from {rss_before[n]:.0f} to {rss_peak[n]:.0f} MB"
