"""The hostile client of the fault runs (``--hostile``): beside the producers, the group consumer
and the nemesis, one thread attacks the cluster as a client may, in turn, about once a second:

* a forged replica fetch: a Fetch posing as another node (v11 with ``replica_id``, or v16 with
  ``ReplicaState`` and a guessed broker epoch) at a random node; the node must close the
  connection without an answer, or it would move its high watermark for a follower that never
  had the records;
* a flood of a node's controller port: 40 connections holding half a frame (one in ten a
  64 MiB length prefix and 64 KiB of its body) for 3 s;
* a join storm: 200 classic JoinGroups into a group of its own on as many connections, held
  for 2 s, and 4 with 2 MiB of metadata, which must be refused with INVALID_REQUEST;
* a consumer-protocol join storm: 2,000 ConsumerGroupHeartbeat joins into a group of its own,
  pipelined on 20 connections; each must be answered, and only with success or an error that
  says the coordinator is elsewhere or not ready.

What it checks, as anomalies of the run: a forged fetch answered, an oversized join not refused,
and (from the nodes' logs) a broker fenced while it was alive: a fence no fault of the nemesis
explains (a kill, stop or pause of that node, or a cut link, up to a broker lease after it ended).
"""

from __future__ import annotations

import base64
import errno
import random
import re
import socket
import struct
import threading
from datetime import datetime, timedelta, timezone

import wire

FORGED_FETCH = "forged-fetch"
CONTROLLER_FLOOD = "controller-flood"
JOIN_STORM = "join-storm"
CONSUMER_JOIN_STORM = "consumer-join-storm"
ATTACKS = (FORGED_FETCH, CONTROLLER_FLOOD, JOIN_STORM, CONSUMER_JOIN_STORM)
FLOOD_CONNECTIONS = 40
FLOOD_SECONDS = 3.0
STORM_MEMBERS = 200
STORM_SECONDS = 2.0
OVERSIZED_JOINS = 4
OVERSIZED_METADATA = 2 * 1024 * 1024
CONSUMER_STORM_CONNECTIONS = 20
CONSUMER_STORM_JOINS = 100  # per connection
INVALID_REQUEST = 42
# What a join may be answered while the coordinator moves or loads: COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
COORDINATOR_MOVING = (14, 15, 16)
# A fence explained by a fault may come this long after the fault ended: the broker lease
# (broker.session.timeout.ms, 9 s) and a margin for a loaded machine.
FENCE_GRACE_SECONDS = 14.0
FENCE_LINE = re.compile(r"^(\S+Z)\s+WARN weir::controller: broker fenced node_id=(\d+)")


def host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


class Hostile(threading.Thread):
    """Attacks ``cluster`` (its Kafka and controller addresses) until ``stop_event`` is set;
    ``topic_id`` (16 bytes) is the attacked topic's, for the v16 forged fetches."""

    def __init__(self, cluster, topic: str, topic_id: bytes, rng: random.Random, history, logger):
        super().__init__(name="hostile", daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.topic_id = topic_id
        self.rng = rng
        self.history = history
        self.logger = logger
        self.stop_event = threading.Event()
        self.abort = self.stop_event
        self.counts = {attack: 0 for attack in ATTACKS}
        self.anomalies: dict[str, list] = {}

    def run(self):
        turn = 0
        while not self.stop_event.wait(self.rng.uniform(0.5, 1.5)):
            attack = ATTACKS[turn % len(ATTACKS)]
            turn += 1
            node = self.rng.choice(list(self.cluster.node_ids()))
            try:
                getattr(self, attack.replace("-", "_"))(node)
                self.counts[attack] += 1
            except OSError as exc:
                # A node down or cut off by the nemesis: the attack did not reach it.
                self.logger.info("hostile %s at node %s: %r", attack, node, exc)
            except Exception as exc:  # noqa: BLE001 - an answer it could not parse; go on
                self.history.record("hostile-error", attack=attack, node=node, error=repr(exc))

    def anomaly(self, kind: str, **fields):
        self.anomalies.setdefault(kind, []).append(fields)
        self.history.record("hostile-anomaly", kind=kind, **fields)

    def forged_fetch(self, node: int):
        """A Fetch posing as another node; the connection must close unanswered."""
        posing = self.rng.choice([n for n in self.cluster.node_ids() if n != node])
        partition = self.rng.randrange(3)
        if self.rng.random() < 0.5:
            frame = wire.fetch_request(7, self.topic, partition, 0, 1024 * 1024, replica_id=posing)
            version = 11
        else:
            epoch = self.rng.randrange(1 << 40)
            frame = wire.replica_fetch_request(7, self.topic_id, partition, 0, posing, epoch)
            version = 16
        with wire.Connection(self.cluster.address(node), timeout=5) as conn:
            conn.send(frame)
            try:
                outcome = conn.wait_closed_or_reply(10)
            except TimeoutError:
                outcome = "no answer"
        self.history.record("hostile", attack=FORGED_FETCH, node=node, posing=posing, version=version, outcome=outcome)
        if outcome == "reply":
            self.anomaly("forged-replica-fetch-answered", node=node, posing=posing, version=version)

    def controller_flood(self, node: int):
        """Connections holding half a frame at ``node``'s controller port for a while."""
        host, port = host_port(self.cluster.controller_address(node))
        sockets = []
        try:
            for i in range(FLOOD_CONNECTIONS):
                sock = socket.socket()
                sock.setblocking(False)
                if sock.connect_ex((host, port)) not in (0, errno.EINPROGRESS):
                    sock.close()
                    continue
                sockets.append(sock)
                sock.settimeout(0.5)
                try:
                    if i % 10 == 0:
                        sock.sendall(struct.pack(">I", 64 * 1024 * 1024) + b"x" * (64 * 1024))
                    else:
                        sock.sendall(b"\x00\x00")
                except OSError:
                    pass
            self.history.record("hostile", attack=CONTROLLER_FLOOD, node=node, connections=len(sockets))
            self.stop_event.wait(FLOOD_SECONDS)
        finally:
            for sock in sockets:
                sock.close()

    def coordinator(self, node: int, group: str) -> str | None:
        """The group's coordinator as ``node`` names it (None while it cannot say)."""
        with wire.Connection(self.cluster.address(node), timeout=5) as conn:
            conn.send(wire.find_coordinator_request(3, group))
            reply = conn.recv_frame(timeout=10)
        if reply is None:
            return None
        error, address = wire.parse_find_coordinator(1, reply)
        if address is None:
            self.logger.info("hostile: no coordinator for %s from node %s (error %s)", group, node, error)
        return address

    def join_storm(self, node: int):
        """Many small classic joins held for a while, and a few oversized ones that must be
        refused at once."""
        group = f"hostile-{self.rng.randrange(1 << 30):08x}"
        address = self.coordinator(node, group)
        if address is None:
            return
        held = []
        codes = []
        try:
            for _ in range(STORM_MEMBERS):
                conn = wire.Connection(address, timeout=5)
                held.append(conn)
                conn.send(wire.join_group_request(1, group, b"hostile"))
            for _ in range(OVERSIZED_JOINS):
                with wire.Connection(address, timeout=10) as conn:
                    conn.send(wire.join_group_request(1, group, b"m" * OVERSIZED_METADATA))
                    reply = conn.recv_frame(timeout=10, max_size=64 * 1024 * 1024)
                codes.append(None if reply is None else wire.join_group_error(reply))
            self.history.record("hostile", attack=JOIN_STORM, coordinator=address, group=group, members=len(held), oversized=codes)
            # NOT_COORDINATOR and friends: the group lives elsewhere or is moving; only an
            # accepted oversized join is wrong.
            if 0 in codes:
                self.anomaly("oversized-join-accepted", coordinator=address, group=group, codes=codes)
            self.stop_event.wait(STORM_SECONDS)
        finally:
            for conn in held:
                conn.close()

    def consumer_join_storm(self, node: int):
        """Many ConsumerGroupHeartbeat joins pipelined into one group: every one answered,
        with success or an error that says the coordinator is moving."""
        group = f"hostile-c-{self.rng.randrange(1 << 30):08x}"
        address = self.coordinator(node, group)
        if address is None:
            return
        conns = [wire.Connection(address, timeout=10) for _ in range(CONSUMER_STORM_CONNECTIONS)]
        codes: dict[int, int] = {}
        unanswered = 0
        try:
            for c, conn in enumerate(conns):
                conn.send(b"".join(
                    wire.consumer_group_heartbeat_request(i, group, f"hostile-{c}-{i}", [self.topic])
                    for i in range(CONSUMER_STORM_JOINS)
                ))
            for conn in conns:
                for _ in range(CONSUMER_STORM_JOINS):
                    try:
                        reply = conn.recv_frame(timeout=30)
                    except (TimeoutError, OSError):
                        reply = None
                    if reply is None:
                        unanswered += 1
                        break
                    code = wire.consumer_group_heartbeat_error(reply)
                    codes[code] = codes.get(code, 0) + 1
        finally:
            for conn in conns:
                conn.close()
        self.history.record("hostile", attack=CONSUMER_JOIN_STORM, coordinator=address, group=group, codes=codes, unanswered_connections=unanswered)
        wrong = {code: n for code, n in codes.items() if code != 0 and code not in COORDINATOR_MOVING}
        if wrong:
            self.anomaly("consumer-join-refused", coordinator=address, group=group, codes=wrong)


def topic_id_bytes(topic_id) -> bytes:
    """A topic id as the admin client gives it, as its 16 bytes."""
    return base64.urlsafe_b64decode(str(topic_id) + "==")


def parse_utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)


def fences(server_logs: dict[int, str]) -> list[tuple[datetime, int, str]]:
    """Every "broker fenced" line of the nodes' logs: (when, fenced node, the line)."""
    found = []
    for text in server_logs.values():
        for line in text.splitlines():
            match = FENCE_LINE.match(line)
            if match:
                found.append((parse_utc(match.group(1)), int(match.group(2)), line.strip()))
    return sorted(found)


def fenced_while_alive(server_logs: dict[int, str], faults: list[list], partition_actions) -> list[dict]:
    """The fences no fault explains. ``faults`` are the nemesis's ``[start t, end t, event]``
    (the event with its UTC ``at``); a fault explains a fence of node N from its start until
    ``FENCE_GRACE_SECONDS`` after its end when it killed, stopped or paused N, or cut links."""
    windows = []
    for start_t, end_t, event in faults:
        recorded = parse_utc(event["at"])
        lasted = (end_t if end_t is not None else start_t + 3600) - start_t
        # The signal is sent just before the fault is recorded.
        begun = recorded - timedelta(seconds=2)
        until = recorded + timedelta(seconds=lasted + FENCE_GRACE_SECONDS)
        nodes = None if event.get("action") in partition_actions else {event.get("node")}
        windows.append((begun, until, nodes))
    unexplained = []
    for when, node, line in fences(server_logs):
        if not any(begun <= when <= until and (nodes is None or node in nodes) for begun, until, nodes in windows):
            unexplained.append({"node": node, "at": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "line": line})
    return unexplained


def server_logs(cluster) -> dict[int, str]:
    logs = {}
    for node in cluster.node_ids():
        path = cluster.node_dir(node) / "server.log"
        logs[node] = path.read_text(errors="replace") if path.exists() else ""
    return logs
