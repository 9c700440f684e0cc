"""Fault injection for a replicated three-node Weir cluster, checked the way Jepsen checks.

Each run starts a fresh three-node cluster, creates a topic of 3 partitions (replication factor
3, ``min.insync.replicas=2``) and, while two idempotent ``acks=all`` producers write numbered
values (``p{producer}-{seq}``, round-robin over the partitions) and one consumer-group member
reads and commits every ~2 s, a nemesis hurts the cluster one fault at a time every 3-6 s:

* process faults: kill -9 a partition leader, kill -9 a node, SIGTERM a node, or SIGSTOP a node
  for 12 s (longer than the 9 s broker lease) before SIGCONT. Killed nodes are restarted after
  2-5 s, so a quorum of two is always up;
* network partitions, when the nodes run in network namespaces (below): cut the leader of a
  partition, the active controller (the metadata quorum's leader, from DescribeQuorum) or a
  random node off from the other two nodes, while the clients still reach every node, only the
  two others, or only the cut node (a stale leader that clients keep writing to); or a bridge:
  one node sees both others, which do not see each other. A partition lasts 2-7 s (less than
  the broker lease) or 11-20 s (more: the cut node is fenced and its leaderships move), then
  every link is restored.

Then everything is healed, the producers flush, the consumer catches up, and a fresh consumer
reads every partition from offset 0 to its high watermark.

Network namespaces (``--netns``, default ``auto``: used when running as root with iproute2's
``ip``; ``compat/tests/weir_netns.py``): a hub namespace with a bridge, one namespace per node
on it (10.213.0.11-13, Kafka on port 9092, controller on 9093; started directly as ``weir
server`` with the flags ``weir dev-cluster`` gives), and the clients (this process's threads)
in the hub at 10.213.0.1. Links are cut silently in both directions, as a DROP rule would.
Nothing is added outside those namespaces; they are deleted at the end, also after Ctrl-C or
SIGTERM, and those of a killed earlier run at the next start. Without namespaces the cluster is
a ``weir dev-cluster`` on 127.0.0.1 and the nemesis has the process faults only.

The checker compares that final log with the history of the run:

* lost acknowledged writes: every acknowledged (partition, offset, value) is in the final log,
  at that offset, with that value (each loss is reported with the fault in effect when it was
  acknowledged);
* duplicates: no value appears twice in the final log;
* reordering: within a partition, each producer's sequence numbers increase;
* read disagreement: every (partition, offset) the group consumer read holds the same value in
  the final log;
* consumer position moving backwards: within one assignment the group consumer's offsets only
  go up, and after a rebalance it never restarts before the last acknowledged commit;
* lost commits: the group's final committed offsets are at least the last acknowledged commit;
* besides: records of the final log the group consumer never received, offset gaps, nodes that
  died without being killed, and a cluster that does not heal (full ISRs within 90 s, producers
  flushed, the consumer caught up).

With ``--workload txn`` the clients are transactional instead (``txn.py``): two writers
(librdkafka, and franz-go in a process of its own) committing and aborting transactions over the partitions, a read-process-write processor
copying the topic to ``TOPIC-out`` with its offsets in each transaction, and the group consumer
reading read_committed; the nemesis may also kill -9 the node coordinating one of their
transactional ids (``kill-txn-coordinator``). Its checker (``txn.check``) finds aborted and
uncommitted reads, torn transactions, lost committed writes, duplicates, a writer's records out
of order, an output that is not its input exactly once, and offsets committed without their
records or the reverse; the group consumer's checks stay (never moving backwards, no lost
commit, no committed record skipped).

With ``--hostile`` a hostile client attacks beside the faults (``hostile.py``: forged replica
fetches, controller-port floods, join storms); the checker adds a forged fetch answered, an
oversized join accepted and a broker fenced while no fault touched it.

Run it from the repository root (or through ``scripts/faults.sh``)::

    .venv/bin/python compat/faults/harness.py --runs 10 --seed 7 [--duration 60] [--keep DIR]
        [--netns auto|on|off] [--faults all|process|partition] [--first-fault ACTION[:SECONDS]]
        [--hostile] [--workload append|txn]

Run ``i`` uses ``random.Random(seed + i)`` for every nemesis decision, so ``--runs 1 --seed S``
(with the same ``--netns`` and ``--faults``) repeats the schedule of a run printed with seed
``S``; a failed run prints the command that repeats it. Each run leaves ``history.jsonl`` (every
nemesis action, with the links it cut, the controller and the partition leaders at the time,
every acknowledgement, read, commit and rebalance, with UTC timestamps comparable with the
server logs), ``result.json``, the client log and the nodes' ``server.log`` files in
``DIR/run-I``. The exit code is 1 if any run found an anomaly. ``WEIR_BIN`` names the binary
(default ``target/release/weir``). ``--client-debug topic,fetch`` adds the group consumer's
librdkafka debug contexts to the client log: what it was told by whom before it moved.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]
# The cluster and network code shared with the compat suite and bench/failover.py, and the
# hostile client next to this file.
for shared in (REPO_ROOT / "compat" / "tests", REPO_ROOT / "compat" / "faults"):
    if str(shared) not in sys.path:
        sys.path.insert(0, str(shared))

import weir_netns  # noqa: E402
import txn  # noqa: E402
from hostile import Hostile, fenced_while_alive, server_logs, topic_id_bytes  # noqa: E402
from weir_cluster import Deadline, DevCluster, NamespacedCluster, coordinator_partition, free_base_port  # noqa: E402

NODES = 3
PARTITIONS = 3
PAUSE_SECONDS = 12.0
# A partition lasts either less than the broker lease (broker.session.timeout.ms, 9 s: the
# controller never fences the cut node) or more (it is fenced and its leaderships move while it
# may still be taking writes).
SHORT_CUT_SECONDS = (2.0, 7.0)
LONG_CUT_SECONDS = (11.0, 20.0)
# A node killed outright stays in the metadata (leader, ISR member) until its broker lease
# (broker.session.timeout.ms, 9 s) runs out: the heal waits this long after the last fault
# before it asks for full ISRs, so a full ISR is not just the picture from before the fence.
SETTLE_SECONDS = 11.0
COMMIT_EVERY = 2.0
# A run in which no write was acknowledged for this long says so (a note, not an anomaly: a
# fault may well stop writes for a while, e.g. a node cut off past its lease).
STALL_NOTE_SECONDS = 20.0
EXAMPLES = 5
# librdkafka debug contexts for the group consumer (`--client-debug`); None: none.
CLIENT_DEBUG: str | None = None

# ---------------------------------------------------------------------------------------------
# Small utilities
# ---------------------------------------------------------------------------------------------


def default_binary() -> Path:
    """``$WEIR_BIN``, else ``<repo>/target/release/weir``."""
    explicit = os.environ.get("WEIR_BIN")
    if explicit:
        return Path(explicit).resolve()
    return REPO_ROOT / "target" / "release" / "weir"


def utc_now() -> str:
    """A UTC timestamp in the format of the server logs (2026-01-02T03:04:05.678901Z)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class History:
    """The run's history: one JSON object per line, each with a UTC timestamp and the seconds
    since the run started. Written by every thread of the run."""

    def __init__(self, path: Path):
        self.path = path
        self.start = time.monotonic()
        self._file = open(path, "w", buffering=1 << 16)
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def record(self, kind: str, **fields) -> dict:
        event = {"at": utc_now(), "t": round(self.elapsed(), 3), "type": kind, **fields}
        line = json.dumps(event, default=str)
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
        return event

    def close(self):
        with self._lock:
            self._file.close()


def client_logger(path: Path, name: str) -> logging.Logger:
    """A logger for librdkafka's messages (connection refused and the like while nodes are
    down) that writes to the run's client log instead of the terminal."""
    logger = logging.getLogger(name)
    logger.propagate = False
    logger.setLevel(logging.DEBUG if CLIENT_DEBUG else logging.INFO)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(message)s"))
    logger.addHandler(handler)
    return logger


def close_logger(logger: logging.Logger):
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


def parse_value(value: bytes | None):
    """(producer, seq) of a value written by the harness, or None."""
    try:
        head, seq = value.decode().split("-", 1)
        if not head.startswith("p"):
            return None
        return int(head[1:]), int(seq)
    except Exception:  # noqa: BLE001 - anything else is not ours
        return None


TRANSACTION_STATE = "__transaction_state"


def short(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.hex()
    return str(value)


# ---------------------------------------------------------------------------------------------
# The cluster and its processes
# ---------------------------------------------------------------------------------------------


class FaultCluster:
    """What the nemesis needs on top of a cluster of ``weir_cluster`` (a ``DevCluster`` on
    loopback or a ``NamespacedCluster``): the run's history, the nodes it stopped or paused on
    purpose, and restarts that wait (bounded) until the node serves again."""

    def __init__(self, *args, history: History, **kwargs):
        super().__init__(*args, **kwargs)
        self.history = history
        self.down: set[int] = set()  # killed or stopped on purpose, not yet restarted
        self.paused: set[int] = set()
        self.starts = Counter()

    def start(self, timeout: float = 90) -> str:
        try:
            text = super().start(timeout)
        except AssertionError as exc:  # ClusterError: a failed run, not a failed assertion
            raise RuntimeError(str(exc)) from None
        for node in self.node_ids():
            self.starts[node] += 1
        self.history.record("cluster-ready", pids={n: self.pid(n) for n in self.node_ids()}, bootstrap=self.bootstrap)
        return text

    def log_tails(self, lines: int = 30) -> str:
        return self.logs(lines)

    def send(self, node: int, sig: signal.Signals):
        self.signal_node(node, sig)

    def restart(self, node: int, timeout: float = 30) -> int:
        """Starts a stopped node again with its original command line; waits (bounded) until its
        Kafka port accepts connections. Its pid."""
        assert not self.running(node), f"node {node} is still running"
        last = ""
        for attempt in range(3):
            process = self.restart_node(node)
            self.starts[node] += 1
            if self.wait_serving(node, timeout):
                self.down.discard(node)
                return process.pid
            last = f"exit code {process.returncode}" if process.poll() is not None else "port not open"
            if process.poll() is None:
                process.kill()
                process.wait(10)
            self.history.record("restart-failed", node=node, attempt=attempt, reason=last)
            time.sleep(1)
        raise RuntimeError(f"node {node} did not come back ({last})\n{self.log_tails()}")

    def kill_everything(self):
        """SIGKILL every process of the run (only processes whose command line names this run's
        data directory)."""
        self.kill()


class LoopbackCluster(FaultCluster, DevCluster):
    """``weir dev-cluster`` on 127.0.0.1."""


class PartitionableCluster(FaultCluster, NamespacedCluster):
    """The nodes in network namespaces of a ``weir_netns.Network``, so links can be cut."""


# ---------------------------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------------------------


class Admin:
    """The run's admin client: topic descriptions with bounded retries."""

    def __init__(self, bootstrap: str, logger: logging.Logger, history: History):
        self.history = history
        self.client = AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "socket.timeout.ms": 10000,
                "log.connection.close": False,
                "logger": logger,
                "error_cb": lambda err: None,
            }
        )

    def describe(self, topic: str, timeout: float = 30):
        deadline = Deadline(timeout)
        last = None
        while True:
            self.client.poll(0)
            try:
                return self.client.describe_topics(TopicCollection([topic]), request_timeout=10)[topic].result(timeout=15)
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                last = exc
            if deadline.expired():
                raise TimeoutError(f"{topic} not described within {timeout:.0f} s: {last!r}")
            time.sleep(0.3)

    def create_topic(self, topic: str, timeout: float = 60):
        deadline = Deadline(timeout)
        while True:
            futures = self.client.create_topics(
                [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=NODES, config={"min.insync.replicas": "2"})],
                request_timeout=20,
            )
            try:
                futures[topic].result(timeout=30)
                return
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    return
                if deadline.expired():
                    raise
            time.sleep(0.5)

    def isr_state(self, topic: str):
        described = self.describe(topic, timeout=15)
        return {p.id: (p.leader.id if p.leader is not None else None, sorted(r.id for r in p.isr)) for p in described.partitions}

    def wait_full_isr(self, topic: str, timeout: float) -> tuple[bool, dict]:
        deadline = Deadline(timeout)
        state: dict = {}
        while True:
            try:
                state = self.isr_state(topic)
                if len(state) == PARTITIONS and all(leader is not None and len(isr) == NODES for leader, isr in state.values()):
                    return True, state
            except Exception as exc:  # noqa: BLE001 - retried until the deadline
                state = {"error": repr(exc)}
            if deadline.expired():
                return False, state
            time.sleep(0.5)

    def close(self):
        self.client = None
        gc.collect()


class Writer(threading.Thread):
    """An idempotent acks=all producer writing ``p{index}-{seq}`` to partition ``seq % 3`` at
    about ``rate`` records a second; keeps every acknowledgement and every error. A producer
    that hits a fatal error is replaced by a new one (a new producer id) and the seq goes on."""

    MAX_IN_FLIGHT = 5000

    def __init__(self, index: int, bootstrap: str, topic: str, rate: float, history: History, logger: logging.Logger):
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index = index
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.history = history
        self.logger = logger
        self.acked: list[tuple[int, int, bytes]] = []
        self.ack_t: dict[bytes, float] = {}  # when each value was acknowledged (run seconds)
        self.errors: list[dict] = []
        self.fatal: list[str] = []
        self.client_errors = Counter()
        self.sent = 0
        self.unflushed = 0
        self.stop_event = threading.Event()
        self.abort = threading.Event()  # stop at once: no flush
        self.flush_timeout = 120.0
        self._fatal_seen = False

    def _producer(self) -> Producer:
        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 120000,
                "linger.ms": 5,
                "log.connection.close": False,
                "logger": self.logger,
                "error_cb": self._on_error,
            }
        )

    def _on_error(self, err):
        self.client_errors[err.name()] += 1
        if err.fatal():
            self._fatal_seen = True
            self.fatal.append(str(err))
            self.history.record("producer-fatal", producer=self.index, error=str(err))

    def _report(self, err, msg):
        value = msg.value()
        if err is not None:
            self.errors.append({"value": short(value), "partition": msg.partition(), "error": str(err)})
            self.history.record("produce-error", producer=self.index, partition=msg.partition(), value=short(value), error=str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), value))
            event = self.history.record("ack", producer=self.index, partition=msg.partition(), offset=msg.offset(), value=short(value))
            self.ack_t[value] = event["t"]

    def run(self):
        producer = self._producer()
        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                if self._fatal_seen:
                    self._fatal_seen = False
                    producer.flush(10)
                    producer = self._producer()
                    self.history.record("producer-replaced", producer=self.index, next_seq=seq)
                now = time.monotonic()
                if len(producer) >= self.MAX_IN_FLIGHT:
                    producer.poll(0.05)
                    continue
                if now >= next_at:
                    value = f"p{self.index}-{seq}".encode()
                    try:
                        producer.produce(self.topic, value=value, partition=seq % PARTITIONS, on_delivery=self._report)
                    except BufferError:
                        producer.poll(0.05)
                        continue
                    except KafkaException as exc:
                        self.history.record("produce-refused", producer=self.index, value=short(value), error=str(exc))
                        self._fatal_seen = self._fatal_seen or exc.args[0].fatal()
                        producer.poll(0.1)
                        continue
                    seq += 1
                    self.sent = seq
                    next_at = max(next_at + interval, now - 1.0)
                producer.poll(min(0.01, max(0.0, next_at - time.monotonic())))
        finally:
            self.unflushed = producer.flush(0 if self.abort.is_set() else self.flush_timeout)
            self.history.record("producer-stopped", producer=self.index, sent=seq, acked=len(self.acked), unflushed=self.unflushed)


class GroupReader(threading.Thread):
    """One consumer-group member that reads everything and commits the offsets it has read
    every ~2 s. It checks its own positions as it goes: within one assignment a partition's
    offsets only go up; the first offset after a rebalance is never below the last commit the
    broker acknowledged."""

    def __init__(
        self, bootstrap: str, topic: str, group: str, history: History, logger: logging.Logger, debug: str | None = None,
        isolation: str = "read_uncommitted",
    ):
        super().__init__(name="group-consumer", daemon=True)
        self.debug = debug
        self.isolation = isolation
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.history = history
        self.logger = logger
        self.reads: list[tuple[int, int, bytes]] = []
        self.last_read: dict[int, int] = {}
        self.max_next: dict[int, int] = {}
        self.acked_commit: dict[int, int] = {}
        self.commits_acked = 0
        self.commits_failed = 0
        self.rebalances = 0
        self.fresh: set[int] = set()  # partitions (re)assigned and not read since
        self.read_since_assign: set[int] = set()
        self.backwards: list[dict] = []
        self.consume_errors = Counter()
        self.client_errors = Counter()
        self.final_committed: dict[int, int] | None = None
        self.final_committed_error: str | None = None
        self.stop_event = threading.Event()
        self.abort = threading.Event()  # stop at once: no last commit
        self.failure: str | None = None

    def position(self, partition: int) -> int:
        """The offset after the last record read from ``partition`` (0 before any)."""
        last = self.last_read.get(partition)
        return 0 if last is None else last + 1

    def _on_assign(self, consumer, partitions):
        self.rebalances += 1
        parts = sorted(tp.partition for tp in partitions)
        self.fresh |= set(parts)
        self.read_since_assign.clear()
        self.history.record("assigned", partitions=parts)

    def _on_revoke(self, consumer, partitions):
        parts = sorted(tp.partition for tp in partitions)
        self.fresh |= set(parts)
        self.read_since_assign.clear()
        self.history.record("revoked", partitions=parts)

    def _on_lost(self, consumer, partitions):
        parts = sorted(tp.partition for tp in partitions)
        self.fresh |= set(parts)
        self.read_since_assign.clear()
        self.history.record("lost", partitions=parts)

    def _handle(self, msg):
        p, o, v = msg.partition(), msg.offset(), msg.value()
        if p in self.fresh:
            self.fresh.discard(p)
            floor = self.acked_commit.get(p)
            if floor is not None and o < floor:
                self.backwards.append({"partition": p, "offset": o, "last_commit": floor, "after_rebalance": True, "at": utc_now()})
            self.history.record("restart-position", partition=p, offset=o, last_commit=floor, last_read=self.last_read.get(p))
        else:
            last = self.last_read.get(p)
            if last is not None and o <= last:
                self.backwards.append({"partition": p, "offset": o, "previous": last, "after_rebalance": False, "at": utc_now()})
        self.last_read[p] = o
        self.max_next[p] = max(self.max_next.get(p, 0), o + 1)
        self.read_since_assign.add(p)
        self.reads.append((p, o, v))
        self.history.record("read", partition=p, offset=o, value=short(v))

    def _commit(self, consumer) -> bool:
        offsets = {
            p: self.last_read[p] + 1
            for p in sorted(self.read_since_assign)
            if self.last_read[p] + 1 > self.acked_commit.get(p, -1)
        }
        if not offsets:
            return True
        try:
            result = consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)
        except KafkaException as exc:
            self.commits_failed += 1
            self.history.record("commit-failed", offsets=offsets, error=str(exc))
            return False
        acked = {}
        failed = {}
        for tp in result or []:
            if tp.error is None:
                acked[tp.partition] = tp.offset
            else:
                failed[tp.partition] = str(tp.error)
        for p, o in acked.items():
            self.acked_commit[p] = max(self.acked_commit.get(p, -1), o)
        if acked:
            self.commits_acked += 1
        if failed:
            self.commits_failed += 1
        self.history.record("commit", acked=acked, failed=failed)
        return not failed

    def _read_committed(self, consumer):
        deadline = Deadline(60)
        while True:
            try:
                tps = consumer.committed([TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=15)
                self.final_committed = {tp.partition: tp.offset for tp in tps}
                self.history.record("final-committed", offsets=self.final_committed)
                return
            except KafkaException as exc:
                self.final_committed_error = str(exc)
                if deadline.expired():
                    self.history.record("final-committed-failed", error=str(exc))
                    return
            time.sleep(0.5)

    def run(self):
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "isolation.level": self.isolation,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "log.connection.close": False,
                "logger": self.logger,
                "error_cb": lambda err: self.client_errors.update([err.name()]),
                **({"debug": self.debug} if self.debug else {}),
            }
        )
        try:
            consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
            last_commit = time.monotonic()
            while not self.stop_event.is_set():
                for msg in consumer.consume(num_messages=500, timeout=0.2):
                    err = msg.error()
                    if err is not None:
                        self.consume_errors[err.name()] += 1
                        self.history.record("consume-error", error=str(err))
                        continue
                    self._handle(msg)
                if time.monotonic() - last_commit >= COMMIT_EVERY:
                    self._commit(consumer)
                    last_commit = time.monotonic()
            if self.abort.is_set():
                return
            # The last commit, retried until acknowledged (bounded), then the group's offsets.
            deadline = Deadline(60)
            while not self._commit(consumer) and not deadline.expired():
                # A failed commit (a rebalance, a moving coordinator) needs the consumer
                # polled; anything it still returns is recorded like every other read.
                for msg in consumer.consume(num_messages=500, timeout=0.5):
                    if msg.error() is None:
                        self._handle(msg)
            self._read_committed(consumer)
        except Exception:  # noqa: BLE001 - reported as a harness failure
            self.failure = traceback.format_exc()
        finally:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass


def read_all(bootstrap: str, topic: str, logger: logging.Logger, history: History, timeout: float = 120, isolation: str = "read_uncommitted"):
    """Every partition from offset 0 to its high watermark, read by a fresh consumer outside
    any group. Returns ({partition: {offset: value}}, {partition: (low, high)}, complete).
    With ``read_committed`` a partition is read once the consumer's end of it (the last
    stable offset) reaches the high watermark: every transaction in it has ended."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"weir-faults-final-{os.getpid()}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 100,
            "log.connection.close": False,
            "logger": logger,
            "error_cb": lambda err: None,
        }
    )
    try:
        deadline = Deadline(timeout)
        marks = {}
        for p in range(PARTITIONS):
            while True:
                try:
                    marks[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    break
                except KafkaException:
                    if deadline.expired():
                        raise
                    time.sleep(0.5)
        history.record("final-read-start", watermarks=marks)
        log: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        next_offset = {p: 0 for p in range(PARTITIONS)}
        todo = [p for p in range(PARTITIONS) if marks[p][1] > 0]
        if todo:
            consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        while any(next_offset[p] < marks[p][1] for p in todo):
            if deadline.expired():
                history.record("final-read-incomplete", next=next_offset, watermarks=marks)
                return log, marks, False
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    # Past the last record: control batches and aborted transactions.
                    next_offset[msg.partition()] = max(next_offset[msg.partition()], msg.offset())
                    continue
                if err is not None:
                    history.record("final-read-error", error=str(err))
                    continue
                p, o = msg.partition(), msg.offset()
                if o < marks[p][1]:
                    log[p].setdefault(o, msg.value())
                next_offset[p] = max(next_offset[p], o + 1)
        return log, marks, True
    finally:
        consumer.close()


def watermarks(bootstrap: str, topic: str, timeout: float = 60) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "weir-faults-watermarks", "log_level": 0, "log.connection.close": False, "error_cb": lambda err: None})
    try:
        deadline = Deadline(timeout)
        out = {}
        for p in range(PARTITIONS):
            while True:
                try:
                    out[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    break
                except KafkaException:
                    if deadline.expired():
                        raise
                    time.sleep(0.5)
        return out
    finally:
        consumer.close()


def group_offsets(bootstrap: str, topic: str, group: str, timeout: float = 60) -> dict[int, int] | None:
    """The committed offsets of ``group`` on ``topic`` (waiting for pending transactional ones,
    as a read_committed consumer asks), or None if they cannot be read within ``timeout``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed", "log_level": 0, "log.connection.close": False, "error_cb": lambda err: None}
    )
    try:
        deadline = Deadline(timeout)
        while True:
            try:
                tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException:
                if deadline.expired():
                    return None
            time.sleep(0.5)
    finally:
        consumer.close()


class TxnWorkload:
    """The transactional workload (``txn.py``): a ``TxnWriter`` and a ``FranzTxnWriter`` on the run's topic, a
    ``Processor`` copying it to ``TOPIC-out`` and the group consumer reading it
    read_committed. ``finish`` ends them once the cluster healed and checks the run."""

    def __init__(self, bootstrap: str, admin: Admin, topic: str, group: str, seed: int, history: History, logger: logging.Logger):
        self.bootstrap = bootstrap
        self.admin = admin
        self.topic = topic
        self.sink = f"{topic}-out"
        self.processor_group = f"{group}-processor"
        self.history = history
        self.logger = logger
        admin.create_topic(self.sink)
        full, state = admin.wait_full_isr(self.sink, 60)
        if not full:
            raise RuntimeError(f"the output topic's ISRs never filled: {state}")
        # One writer of each client: librdkafka in this process, franz-go in a process of its own.
        self.writers = [
            txn.TxnWriter(0, bootstrap, topic, PARTITIONS, random.Random(seed * 7907), history, logger),
            txn.FranzTxnWriter(1, bootstrap, topic, PARTITIONS, seed * 7907 + 1, txn.franz_go_binary(), history, logger),
        ]
        # Every processor the run had, the one at work last; one stuck in the client is replaced.
        self.processors = [
            txn.Processor(bootstrap, topic, self.sink, self.processor_group, random.Random(seed * 7907 + 97), history, logger, CLIENT_DEBUG)
        ]
        self.reader = GroupReader(bootstrap, topic, group, history, logger, debug=CLIENT_DEBUG, isolation="read_committed")

    @property
    def processor(self) -> txn.Processor:
        """The processor at work."""
        return self.processors[-1]

    def _processor_going(self, notes: list) -> bool:
        """Whether the processor at work runs, a stuck one replaced first: a call past its own
        timeout (``txn.STUCK_AFTER``) is the client's fault, not the cluster's; the run goes on
        with a successor, and exactly-once is checked over both."""
        stuck = self.processor.stuck()
        if stuck is not None:
            call, seconds = stuck
            self.history.record("processor-stuck", call=call, seconds=round(seconds, 1))
            notes.append(
                f"txn-processor: {call} still running after {seconds:.0f} s, its timeout {txn.CALL_TIMEOUT:.0f} s (librdkafka keeps "
                "a decommissioned group coordinator, issues 5511 and 5456); replaced by a processor of the same transactional id"
            )
            self.processor.abandon()
            self.processors.append(self.processor.successor())
            self.processor.start()
        return self.processor.is_alive()

    def threads(self) -> list[threading.Thread]:
        return [*self.writers, *self.processors, self.reader]

    def transactional_ids(self) -> tuple[str, ...]:
        return tuple(t.transactional_id for t in (*self.writers, self.processor))

    def start(self):
        for thread in self.threads():
            thread.start()

    def _catch_up(self, name: str, position, ends: dict[int, int], alive, anomalies: dict) -> None:
        """Waits (bounded) until ``position(p)`` reaches ``ends[p]`` on every partition."""
        deadline = Deadline(120)
        while any(position(p) < ends[p] for p in range(PARTITIONS)) and alive() and not deadline.expired():
            time.sleep(0.5)
        behind = [{"partition": p, "position": position(p), "end": ends[p]} for p in range(PARTITIONS) if position(p) < ends[p]]
        if behind:
            anomalies[f"{name}-did-not-catch-up"] = behind

    def finish(self, nemesis: "Nemesis", anomalies: dict, notes: list, result: dict, phase) -> None:
        full, state = self.admin.wait_full_isr(self.sink, 90)
        if not full:
            anomalies["isr-not-full-after-heal"] = [{"topic": self.sink, "state": state}]
        for writer in self.writers:
            writer.stop_event.set()
        for writer in self.writers:
            writer.join(txn.END_BUDGET + 60)
            if writer.is_alive():
                anomalies.setdefault("producer-not-flushed", []).append({"producer": writer.index, "alive": True})
        phase("producers-stopped")

        # Every transaction has ended (the coordinator aborts one a dead producer left open)
        # once the last stable offsets reach the high watermarks.
        nemesis.check_nodes("final-read")
        final_in, marks, complete = read_all(self.bootstrap, self.topic, self.logger, self.history, isolation="read_committed")
        if not complete:
            anomalies["final-read-incomplete"] = [{"topic": self.topic, "watermarks": marks, "read": {p: len(v) for p, v in final_in.items()}}]
        ends = txn.last_offsets(final_in)
        committed: dict[int, int] = {}

        def processed(p: int) -> int:
            if p not in committed or committed[p] < ends[p]:
                committed.update(group_offsets(self.bootstrap, self.topic, self.processor_group, timeout=10) or {})
            return committed.get(p, 0)

        self._catch_up("processor", processed, ends, lambda: self._processor_going(notes), anomalies)
        self._catch_up("consumer", self.reader.position, ends, self.reader.is_alive, anomalies)
        for thread in (self.processor, self.reader):
            thread.stop_event.set()
        for thread in (self.processor, self.reader):
            thread.join(150)
            if thread.is_alive():
                stack = "".join(traceback.format_stack(sys._current_frames()[thread.ident]))
                anomalies.setdefault("client-stuck", []).append({"thread": thread.name, "stack": stack})
                self.history.record("client-stuck", thread=thread.name, stack=stack)
        for thread in (*self.writers, self.processor):
            if thread.failure:
                raise RuntimeError(f"{thread.name} failed:\n{thread.failure}")
        if self.reader.failure:
            raise RuntimeError(f"the group consumer failed:\n{self.reader.failure}")
        phase("consumers-caught-up")

        final_out, marks_out, complete = read_all(self.bootstrap, self.sink, self.logger, self.history, isolation="read_committed")
        if not complete:
            anomalies["final-read-incomplete"] = [{"topic": self.sink, "watermarks": marks_out, "read": {p: len(v) for p, v in final_out.items()}}]
        processor_committed = group_offsets(self.bootstrap, self.topic, self.processor_group)
        if processor_committed is None:
            notes.append("the processor group's committed offsets could not be read: its offsets are not checked")
        phase("final-read")

        transactions = [t for w in self.writers for t in w.transactions]
        anomalies.update(txn.check(transactions, final_in, final_out, self.reader.reads, processor_committed))
        reader = self.reader
        anomalies.update(group_anomalies(reader.reads, final_in, reader.backwards, reader.acked_commit, reader.final_committed, reader.max_next))
        if reader.final_committed is None:
            notes.append(f"the group's committed offsets could not be read: {reader.final_committed_error}")
        outcomes = Counter(t.outcome for t in transactions)
        for thread in (*self.writers, self.processor):
            if thread.replaced:
                notes.append(f"{thread.name}: producer replaced {thread.replaced} times; errors {dict(thread.errors.most_common(3))}")
        result.update(
            acked=sum(len(t.values) for t in transactions if t.outcome == "committed"),
            read=len(reader.reads),
            transactions=dict(outcomes),
            transactions_by_writer={w.name: dict(Counter(t.outcome for t in w.transactions)) for w in self.writers},
            processed_batches={
                outcome: sum(getattr(p, f"{outcome}_batches") for p in self.processors) for outcome in ("committed", "aborted", "unknown")
            },
            final_records={"input": sum(len(v) for v in final_in.values()), "output": sum(len(v) for v in final_out.values())},
            watermarks={p: marks[p] for p in marks},
            processor_committed=processor_committed,
            commits_acked=reader.commits_acked,
            commits_failed=reader.commits_failed,
            final_committed=reader.final_committed,
            rebalances=reader.rebalances,
            consume_errors=dict(reader.consume_errors),
        )


# ---------------------------------------------------------------------------------------------
# The nemesis
# ---------------------------------------------------------------------------------------------

PROCESS_FAULTS = ("kill-leader", "kill-node", "term-node", "pause-node")
ACTIONS = PROCESS_FAULTS  # the loopback nemesis (no network namespaces)
PARTITION_FAULTS = ("partition-leader", "partition-controller", "partition-node", "bridge")
# With the transactional workload, beside the process faults: kill -9 the node coordinating a
# transactional id (the leader of its partition of __transaction_state).
TXN_FAULTS = ("kill-txn-coordinator",)
# Who the clients reach while one node is cut off: every node, the majority only, the cut node
# only. Drawn with these weights.
CLIENT_SIDES = ("all", "all", "majority", "minority")
FAULT_SETS = ("all", "process", "partition")
WORKLOADS = ("append", "txn")


def fault_actions(faults: str, network: bool) -> tuple[str, ...]:
    """The nemesis actions of fault set ``faults`` (all, process, partition)."""
    if faults not in FAULT_SETS:
        raise ValueError(f"--faults must be one of {', '.join(FAULT_SETS)}")
    if faults != "process" and not network:
        if faults == "partition":
            raise ValueError("partition faults need network namespaces (--netns)")
        return PROCESS_FAULTS
    return {"all": PROCESS_FAULTS + PARTITION_FAULTS, "process": PROCESS_FAULTS, "partition": PARTITION_FAULTS}[faults]


def parse_first_fault(spec: str | None) -> tuple[str, float | None] | None:
    """``ACTION[:SECONDS]`` (the first fault of every run, and how long it lasts), or None."""
    if not spec:
        return None
    what, _, seconds = spec.partition(":")
    known = PROCESS_FAULTS + PARTITION_FAULTS + TXN_FAULTS
    if what not in known:
        raise ValueError(f"unknown fault {what!r}: one of {', '.join(known)}")
    return what, (float(seconds) if seconds else None)


class Nemesis:
    """One fault at a time, every 3-6 s (the rng decides the wait, the fault, its target, how
    long a killed node stays down and how long a partition lasts); a killed node is restarted, a
    paused one continued, a partition healed before the next fault, so two nodes are always up
    and, between faults, every link is.

    With a network (the nodes in namespaces), the partition faults cut links: isolate the
    leader of a partition, the active controller (the metadata quorum's leader) or a node from
    the other nodes, the clients reaching every node, only the majority or only the cut node;
    or a bridge: one node sees both others, which do not see each other. Each lasts 2-7 s (less
    than the 9 s broker lease) or 11-20 s (more), half the time each."""

    def __init__(
        self, cluster, admin: Admin, topic: str, rng: random.Random, history: History, network=None, actions: tuple[str, ...] = ACTIONS,
        first: tuple[str, float | None] | None = None, transactional_ids: tuple[str, ...] = (),
    ):
        self.cluster = cluster
        self.transactional_ids = transactional_ids
        self.admin = admin
        self.topic = topic
        self.rng = rng
        self.history = history
        self.network = network
        self.choices = actions
        self.first = first
        self.actions: list[dict] = []
        self.crashes: list[dict] = []
        self.notes: list[str] = []
        # (start t, end t or None, action record) of every fault, for the checker's reports.
        self.faults: list[list] = []
        self.last_fault_end = time.monotonic()

    def check_nodes(self, phase: str):
        """Restart any node that died without being killed, and remember it (a crash)."""
        for node in self.cluster.node_ids():
            if node in self.cluster.down or self.cluster.running(node):
                continue
            status = self.cluster.exit_status(node)
            crash = {"node": node, "phase": phase, "status": status, "at": utc_now()}
            self.crashes.append(crash)
            self.history.record("node-crashed", **crash)
            self.restart(node)

    def restart(self, node: int):
        pid = self.cluster.restart(node)
        self.history.record("nemesis", action="restart", node=node, pid=pid)

    def _began(self, record: dict) -> dict:
        event = self.history.record("nemesis", **record)
        self.actions.append(event)
        self.faults.append([event["t"], None, event])
        return event

    def _ended(self):
        self.faults[-1][1] = round(self.history.elapsed(), 3)
        self.last_fault_end = time.monotonic()

    def leader_of(self, partition: int) -> int:
        leader = self.admin.describe(self.topic, timeout=10).partitions[partition].leader
        if leader is None or leader.id not in self.cluster.node_ids():
            raise LookupError("no leader")
        return leader.id

    def txn_coordinator_of(self, transactional_id: str) -> int:
        state = self.admin.describe(TRANSACTION_STATE, timeout=10).partitions
        leader = state[coordinator_partition(transactional_id, len(state))].leader
        if leader is None or leader.id not in self.cluster.node_ids():
            raise LookupError("no coordinator")
        return leader.id

    def act(self, what: str, node: int, partition: int, down_for: float, cut_for: float = 0.0, clients: str = "all", pause_for: float = PAUSE_SECONDS):
        if what in PARTITION_FAULTS:
            self.partition(what, node, partition, cut_for, clients)
            return
        record = {"action": what, "node": node}
        if what == "kill-leader":
            record["partition"] = partition
            try:
                record["node"] = node = self.leader_of(partition)
            except Exception as exc:  # noqa: BLE001 - falls back to the random node
                record["leader_unknown"] = repr(exc)
        elif what == "kill-txn-coordinator" and self.transactional_ids:
            transactional_id = self.transactional_ids[partition % len(self.transactional_ids)]
            record["transactional_id"] = transactional_id
            try:
                record["node"] = node = self.txn_coordinator_of(transactional_id)
            except Exception as exc:  # noqa: BLE001 - falls back to the random node
                record["coordinator_unknown"] = repr(exc)
        pid = self.cluster.pid(node)
        record["pid"] = pid
        if what == "pause-node":
            seconds = pause_for
            self.cluster.paused.add(node)
            self.cluster.send(node, signal.SIGSTOP)
            self._began({**record, "seconds": seconds})
            time.sleep(seconds)
            self.cluster.send(node, signal.SIGCONT)
            self.cluster.paused.discard(node)
            self.history.record("nemesis", action="resume", node=node, pid=pid)
            self._ended()
            return
        how = signal.SIGTERM if what == "term-node" else signal.SIGKILL
        self.cluster.down.add(node)
        self.cluster.send(node, how)
        self._began({**record, "signal": how.name, "down_for": round(down_for, 2)})
        started = time.monotonic()
        if not self.cluster.wait_exit(node, 30 if how == signal.SIGTERM else 10):
            note = f"node {node} (pid {pid}) still running {time.monotonic() - started:.0f} s after {how.name}; killed"
            self.notes.append(note)
            self.history.record("nemesis", action="force-kill", node=node, pid=pid, note=note)
            self.cluster.send(node, signal.SIGKILL)
            self.cluster.wait_exit(node, 10)
        self.history.record("node-exited", node=node, pid=pid, after=round(time.monotonic() - started, 3), status=self.cluster.exit_status(node))
        time.sleep(down_for)
        self.restart(node)
        self._ended()

    def partition(self, what: str, node: int, partition: int, seconds: float, clients: str):
        """Cuts links for ``seconds``, then heals them all."""
        nodes = list(self.cluster.node_ids())
        record: dict = {"action": what, "seconds": round(seconds, 2)}
        controller = self.cluster.quorum_leader(timeout=3)
        record["controller"] = controller[0] if controller else None
        try:
            record["leaders"] = {p: leader for p, (leader, _) in self.admin.isr_state(self.topic).items()}
        except Exception as exc:  # noqa: BLE001 - only for the record
            record["leaders"] = repr(exc)
        if what == "partition-leader":
            record["partition"] = partition
            try:
                node = self.leader_of(partition)
            except Exception as exc:  # noqa: BLE001 - falls back to the random node
                record["leader_unknown"] = repr(exc)
        elif what == "partition-controller":
            if controller is not None and controller[0] in nodes:
                node = controller[0]
            else:
                record["controller_unknown"] = True
        if what == "bridge":
            cuts = weir_netns.bridge(node, nodes)
            record.update(bridge=node, clients="all")
        else:
            cuts = weir_netns.isolation(node, nodes, clients)
            record.update(node=node, clients=clients)
        self.network.cut(cuts)
        record["cut"] = self.network.describe()
        self._began(record)
        time.sleep(seconds)
        self.network.heal()
        self.history.record("nemesis", action="heal", after=what, node=node)
        self._ended()

    def run(self, duration: float):
        end = time.monotonic() + duration
        partitions = any(a in PARTITION_FAULTS for a in self.choices)
        first = self.first
        while True:
            # Every decision is drawn up front, so the schedule depends on the seed alone
            # (kill-leader's target is whichever node leads the drawn partition at the time).
            # The loopback nemesis draws exactly what it always did, so its seeds repeat.
            wait = self.rng.uniform(3, 6)
            what = self.rng.choice(self.choices)
            node = self.rng.randint(1, NODES)
            partition = self.rng.randrange(PARTITIONS)
            down_for = self.rng.uniform(2, 5)
            cut_for, clients, pause_for = 0.0, "all", PAUSE_SECONDS
            if partitions:
                long_cut = self.rng.random() < 0.5
                cut_for = self.rng.uniform(*(LONG_CUT_SECONDS if long_cut else SHORT_CUT_SECONDS))
                clients = self.rng.choice(CLIENT_SIDES)
            if first is not None:
                what, seconds = first
                first = None
                if seconds is not None:
                    down_for = cut_for = pause_for = seconds
                if what in PARTITION_FAULTS:
                    clients = "all"
                    if seconds is None:
                        cut_for = self.rng.uniform(*LONG_CUT_SECONDS)
            if time.monotonic() + wait >= end:
                time.sleep(max(0.0, end - time.monotonic()))
                return
            time.sleep(wait)
            self.check_nodes("nemesis")
            self.act(what, node, partition, down_for, cut_for, clients, pause_for)

    def heal(self):
        if self.network is not None and self.network.cuts:
            self.network.heal()
            self.history.record("nemesis", action="heal")
        for node in list(self.cluster.paused):
            self.cluster.send(node, signal.SIGCONT)
            self.cluster.paused.discard(node)
            self.history.record("nemesis", action="resume", node=node)
        for node in list(self.cluster.down):
            if not self.cluster.running(node):
                self.restart(node)
        self.check_nodes("heal")
        settle = self.last_fault_end + SETTLE_SECONDS - time.monotonic()
        if settle > 0:
            time.sleep(settle)
        self.check_nodes("heal")

    def during(self, t: float) -> str | None:
        """The fault in effect at run time ``t`` (seconds), or the last one before it."""
        last = None
        for start, end, event in self.faults:
            if start > t:
                break
            last = (start, end, event)
        if last is None:
            return None
        start, end, event = last
        what = {k: v for k, v in event.items() if k not in ("at", "t", "type", "leaders")}
        state = "in effect" if end is None or t <= end else f"ended at t={end}"
        return f"{what} from t={start} ({state})"


# ---------------------------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------------------------


def check(acked, group_reads, final, marks, backwards, acked_commit, final_committed, max_next) -> dict[str, list]:
    """Anomalies of the run, by kind, each a list of examples (all of them)."""
    anomalies: dict[str, list] = defaultdict(list)

    # (a) Lost acknowledged writes.
    everywhere = {}
    for p, log in final.items():
        for o, v in log.items():
            everywhere.setdefault(v, (p, o))
    for p, o, v in acked:
        if o is None or o < 0:
            if v not in everywhere:
                anomalies["lost-acknowledged-write"].append({"partition": p, "offset": o, "value": short(v), "found": None})
            continue
        found = final.get(p, {}).get(o)
        if found != v:
            where = everywhere.get(v)
            anomalies["lost-acknowledged-write"].append(
                {"partition": p, "offset": o, "value": short(v), "found": short(found), "value_at": where}
            )

    # (b) Duplicates.
    seen: dict[bytes, list] = defaultdict(list)
    for p, log in final.items():
        for o, v in log.items():
            seen[v].append((p, o))
    for v, places in seen.items():
        if len(places) > 1:
            anomalies["duplicate"].append({"value": short(v), "at": places})

    # (c) Reordering, and values the harness never wrote.
    for p, log in final.items():
        last: dict[int, tuple[int, int]] = {}
        for o in sorted(log):
            parsed = parse_value(log[o])
            if parsed is None:
                anomalies["unknown-value"].append({"partition": p, "offset": o, "value": short(log[o])})
                continue
            producer, seq = parsed
            if producer in last and seq < last[producer][0]:
                anomalies["reordered"].append(
                    {"partition": p, "offset": o, "value": short(log[o]), "after": f"p{producer}-{last[producer][0]}@{last[producer][1]}"}
                )
            last[producer] = (seq, o)

    # Offset gaps in the final log (no transactions or compaction here: offsets are dense).
    for p, (low, high) in marks.items():
        missing = [o for o in range(low, high) if o not in final.get(p, {})]
        if missing:
            anomalies["offset-gap"].append({"partition": p, "missing": len(missing), "first": missing[:10], "low": low, "high": high})

    # (d) Offsets that two reads disagree on.
    for p, o, v in group_reads:
        found = final.get(p, {}).get(o)
        if found != v:
            anomalies["read-disagreement"].append({"partition": p, "offset": o, "group_read": short(v), "final_read": short(found)})

    for kind, examples in group_anomalies(group_reads, final, backwards, acked_commit, final_committed, max_next).items():
        anomalies[kind].extend(examples)
    return {kind: examples for kind, examples in anomalies.items() if examples}


def group_anomalies(group_reads, final, backwards, acked_commit, final_committed, max_next) -> dict[str, list]:
    """What the group consumer (a ``GroupReader``) did wrong against the ``final`` log: moved
    backwards, lost an acknowledged commit, or skipped records below its position."""
    anomalies: dict[str, list] = defaultdict(list)
    # (e) Consumer position moving backwards.
    anomalies["consumer-went-backwards"].extend(backwards)

    # (f) Committed offsets lost.
    for p, offset in sorted(acked_commit.items()):
        now = None if final_committed is None else final_committed.get(p)
        if now is None or now < offset:
            anomalies["lost-commit"].append({"partition": p, "acknowledged": offset, "final_committed": now})

    # Records below the group's position it never received (under read_committed: committed
    # records it skipped).
    read_at = defaultdict(set)
    for p, o, _ in group_reads:
        read_at[p].add(o)
    for p, log in final.items():
        skipped = [o for o in sorted(log) if o < max_next.get(p, 0) and o not in read_at[p]]
        if skipped:
            anomalies["never-delivered-to-group"].append({"partition": p, "count": len(skipped), "first": skipped[:10]})
    return {kind: examples for kind, examples in anomalies.items() if examples}


# ---------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------


def run_once(
    index: int,
    seed: int,
    duration: float,
    run_dir: Path,
    binary: Path,
    rate: float = 150.0,
    keep_data: bool = False,
    network: "weir_netns.Network | None" = None,
    faults: str = "all",
    first_fault: str | None = None,
    hostile: bool = False,
    workload: str = "append",
) -> dict:
    """One run with ``random.Random(seed)``; returns its result (also written to
    ``run_dir/result.json``).

    ``network`` (a created ``weir_netns.Network``) runs the nodes in its namespaces and the
    clients, in this thread and the threads it starts, in its hub, so the nemesis can cut links;
    without it the cluster is a ``weir dev-cluster`` on loopback. ``faults``: the nemesis's
    actions, ``all`` (process faults, and partitions with a network), ``process`` or
    ``partition``. ``first_fault`` (``ACTION[:SECONDS]``) forces the first fault. ``hostile``
    adds the hostile client (``hostile.py``) beside the faults. ``workload``: ``append``
    (idempotent producers and a group consumer) or ``txn`` (``TxnWorkload``)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload}: one of {', '.join(WORKLOADS)}")
    transactional = workload == "txn"
    actions = fault_actions(faults, network is not None)
    if transactional and "kill-node" in actions:
        actions += TXN_FAULTS
    first = parse_first_fault(first_fault)
    if first is not None and first[0] in TXN_FAULTS and not transactional:
        raise ValueError(f"{first[0]} needs the txn workload")
    if first is not None and first[0] in PARTITION_FAULTS and network is None:
        raise ValueError(f"{first[0]} needs network namespaces")
    if network is None:
        return _run_once(index, seed, duration, run_dir, binary, rate, keep_data, None, actions, first, hostile, transactional)
    network.heal()
    try:
        with network.inside():
            return _run_once(index, seed, duration, run_dir, binary, rate, keep_data, network, actions, first, hostile, transactional)
    finally:
        network.heal()


def _run_once(index, seed, duration, run_dir: Path, binary: Path, rate, keep_data, network, actions, first, hostile=False, transactional=False) -> dict:
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    history = History(run_dir / "history.jsonl")
    logger = client_logger(run_dir / "clients.log", f"weir-faults-{index}-{seed}-{time.monotonic_ns()}")
    started = time.monotonic()
    phases: dict[str, float] = {}
    result: dict = {
        "run": index, "seed": seed, "duration": duration, "run_dir": str(run_dir), "netns": network is not None, "faults": list(actions),
        "workload": "txn" if transactional else "append",
    }
    anomalies: dict[str, list] = {}
    notes: list[str] = []
    if network is None:
        cluster = LoopbackCluster(run_dir / "cluster", free_base_port(), binary=binary, output=run_dir / "dev-cluster.out", new_session=True, history=history)
    else:
        cluster = PartitionableCluster(run_dir / "cluster", network, binary=binary, output=run_dir / "nodes.out", history=history)
    admin = None
    writers: list[Writer] = []
    reader = None
    workload: TxnWorkload | None = None
    nemesis = None
    attacker = None
    history.record(
        "run-start", run=index, seed=seed, duration=duration, binary=str(binary), faults=list(actions), first_fault=first,
        network={"namespaces": network.created, "clients": network.address(0)} if network else None,
    )

    def phase(name: str):
        phases[name] = round(time.monotonic() - started, 2)
        history.record("phase", name=name)

    try:
        cluster.start()
        phase("cluster-ready")
        result["bootstrap"] = cluster.bootstrap
        admin = Admin(cluster.bootstrap, logger, history)
        topic = f"faults-{seed}-{rng.randrange(1 << 30):08x}"
        group = f"faults-group-{seed}-{rng.randrange(1 << 30):08x}"
        result["topic"], result["group"] = topic, group
        admin.create_topic(topic)
        full, state = admin.wait_full_isr(topic, 60)
        if not full:
            raise RuntimeError(f"the new topic's ISRs never filled: {state}\n{cluster.log_tails()}")
        phase("topic-in-sync")

        if transactional:
            workload = TxnWorkload(cluster.bootstrap, admin, topic, group, seed, history, logger)
            workload.start()
        else:
            writers = [Writer(i, cluster.bootstrap, topic, rate, history, logger) for i in range(2)]
            reader = GroupReader(cluster.bootstrap, topic, group, history, logger, debug=CLIENT_DEBUG)
            for thread in (*writers, reader):
                thread.start()
        if hostile:
            # Its own generator, so a seed's nemesis schedule is the same with and without it.
            topic_id = topic_id_bytes(admin.describe(topic).topic_id)
            attacker = Hostile(cluster, topic, topic_id, random.Random(seed * 7919 + 1), history, logger)
            attacker.start()
        time.sleep(2)

        nemesis = Nemesis(
            cluster, admin, topic, rng, history, network=network, actions=actions, first=first,
            transactional_ids=workload.transactional_ids() if workload else (),
        )
        nemesis.run(duration)
        if attacker is not None:
            attacker.stop_event.set()
            attacker.join(30)
            result["hostile"] = dict(attacker.counts)
        phase("nemesis-done")

        nemesis.heal()
        full, state = admin.wait_full_isr(topic, 90)
        history.record("healed" if full else "not-healed", isr=state)
        if not full:
            anomalies["isr-not-full-after-heal"] = [{"state": state}]
        phase("healed")
        if workload is not None:
            workload.finish(nemesis, anomalies, notes, result, phase)
        else:
            for writer in writers:
                writer.stop_event.set()
            for writer in writers:
                writer.join(writer.flush_timeout + 30)
                if writer.is_alive() or writer.unflushed:
                    anomalies.setdefault("producer-not-flushed", []).append({"producer": writer.index, "unflushed": writer.unflushed, "alive": writer.is_alive()})
            phase("producers-flushed")

            ends = watermarks(cluster.bootstrap, topic)
            deadline = Deadline(120)
            while any(reader.position(p) < ends[p] for p in range(PARTITIONS)) and reader.is_alive() and not deadline.expired():
                time.sleep(0.2)
            behind = {p: (reader.position(p), ends[p]) for p in range(PARTITIONS) if reader.position(p) < ends[p]}
            if behind:
                anomalies["consumer-did-not-catch-up"] = [{"partition": p, "position": pos, "high_watermark": hw} for p, (pos, hw) in behind.items()]
            reader.stop_event.set()
            reader.join(150)
            if reader.failure:
                raise RuntimeError(f"the group consumer failed:\n{reader.failure}")
            phase("consumer-caught-up")

            nemesis.check_nodes("final-read")
            final, marks, complete = read_all(cluster.bootstrap, topic, logger, history)
            if not complete:
                anomalies["final-read-incomplete"] = [{"watermarks": marks, "read": {p: len(v) for p, v in final.items()}}]
            if marks and any(marks[p][1] != ends[p] for p in range(PARTITIONS)):
                notes.append(f"high watermarks moved after the producers stopped: {ends} then {marks}")
            phase("final-read")

            acked = [a for w in writers for a in w.acked]
            anomalies.update(
                check(acked, reader.reads, final, marks, reader.backwards, reader.acked_commit, reader.final_committed, reader.max_next)
            )
            # Each lost write with when it was acknowledged and the fault in effect then.
            ack_t = {short(v): t for w in writers for v, t in w.ack_t.items()}
            for example in anomalies.get("lost-acknowledged-write", []):
                t = ack_t.get(example["value"])
                example["acked_at_t"] = t
                example["fault"] = nemesis.during(t) if t is not None else None
            # Availability, for the record (not an anomaly): the longest time without any
            # acknowledged write while the producers ran.
            gap = longest_gap(sorted(ack_t.values()))
            if gap is not None:
                result["longest_ack_gap"] = {**gap, "fault": nemesis.during(gap["from_t"])}
                if gap["seconds"] >= STALL_NOTE_SECONDS:
                    notes.append(f"no write acknowledged for {gap['seconds']:.1f} s (t={gap['from_t']} to t={gap['to_t']}); fault: {result['longest_ack_gap']['fault']}")
            if reader.final_committed is None:
                notes.append(f"the group's committed offsets could not be read: {reader.final_committed_error}")
            for writer in writers:
                if writer.errors:
                    kinds = Counter(e["error"] for e in writer.errors)
                    notes.append(f"producer {writer.index}: {len(writer.errors)} delivery errors {dict(kinds.most_common(3))}")
                if writer.fatal:
                    notes.append(f"producer {writer.index}: fatal errors {writer.fatal[:3]}")
            result.update(
                acked=len(acked),
                sent=sum(w.sent for w in writers),
                delivery_errors=sum(len(w.errors) for w in writers),
                read=len(reader.reads),
                final_records=sum(len(v) for v in final.values()),
                watermarks={p: marks[p] for p in marks},
                commits_acked=reader.commits_acked,
                commits_failed=reader.commits_failed,
                last_acked_commit=reader.acked_commit,
                final_committed=reader.final_committed,
                rebalances=reader.rebalances,
                consume_errors=dict(reader.consume_errors),
            )
        result["nemesis"] = nemesis.actions
        if nemesis.crashes:
            anomalies["node-crashed"] = nemesis.crashes
        if attacker is not None:
            anomalies.update(attacker.anomalies)
            unexplained = fenced_while_alive(server_logs(cluster), nemesis.faults, PARTITION_FAULTS)
            if unexplained:
                anomalies["fenced-while-alive"] = unexplained
        notes.extend(nemesis.notes)
    except Exception as exc:  # noqa: BLE001 - a run that could not finish is a failed run
        anomalies["harness-error"] = [{"error": repr(exc), "traceback": traceback.format_exc()}]
        history.record("harness-error", error=repr(exc))
    finally:
        clients = [*writers, *([reader] if reader else []), *(workload.threads() if workload else [])]
        for thread in (*clients, *([attacker] if attacker else [])):
            thread.abort.set()
            thread.stop_event.set()
        if nemesis is not None and cluster.paused:
            for node in list(cluster.paused):
                try:
                    cluster.send(node, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        for thread in clients:
            if thread.is_alive():
                thread.join(10)
        cluster.kill_everything()
        if admin is not None:
            admin.close()
        gc.collect()
        close_logger(logger)
        result.setdefault("acked", sum(len(w.acked) for w in writers))
        result.setdefault("read", len(reader.reads) if reader else 0)
        result.setdefault("nemesis", nemesis.actions if nemesis else [])
        result["phases"] = phases
        result["elapsed"] = round(time.monotonic() - started, 2)
        result["anomalies"] = {kind: {"count": len(ex), "examples": ex[:50]} for kind, ex in anomalies.items()}
        result["notes"] = notes
        history.record("run-end", anomalies={k: len(v) for k, v in anomalies.items()}, elapsed=result["elapsed"])
        history.close()
        (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        if not anomalies and not keep_data:
            prune(cluster.data_dir)
    return result


def longest_gap(times: list[float]) -> dict | None:
    """The longest interval between two consecutive times (seconds), or None."""
    if len(times) < 2:
        return None
    seconds, start, end = max((b - a, a, b) for a, b in zip(times, times[1:]))
    return {"seconds": round(seconds, 3), "from_t": start, "to_t": end}


def prune(data_dir: Path):
    """Drop a clean run's partition data and metadata, keeping the nodes' server logs."""
    for node in range(1, NODES + 1):
        directory = data_dir / f"node-{node}"
        if not directory.exists():
            continue
        for entry in directory.iterdir():
            if entry.name == "server.log":
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def summary(result: dict) -> str:
    actions = result.get("nemesis") or []
    cuts = sum(1 for a in actions if a.get("action") in PARTITION_FAULTS)
    head = (
        f"run {result['run']} seed {result['seed']}: acked {result.get('acked', 0)}, read {result.get('read', 0)}, "
        f"nemesis {len(actions)} actions{f' ({cuts} partitions)' if cuts else ''}, anomalies: "
    )
    anomalies = result.get("anomalies") or {}
    if not anomalies:
        return head + "none"
    parts = []
    for kind, entry in anomalies.items():
        examples = [_example(e) for e in entry["examples"][:3]]
        parts.append(f"{kind} x{entry['count']} (e.g. {'; '.join(examples)})")
    return head + ", ".join(parts)


def _example(example: dict) -> str:
    if "traceback" in example:
        return example["error"]
    return ", ".join(f"{k}={v}" for k, v in example.items())


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def pin_binary(binary: Path, keep: Path) -> Path:
    """The binary as it is now, linked (or copied) into the results directory: a node restarted
    late in a run must not pick up a binary rebuilt in the meantime."""
    pinned = keep / "weir"
    pinned.unlink(missing_ok=True)
    try:
        os.link(binary, pinned)
    except OSError:
        shutil.copy2(binary, pinned)
    return pinned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="number of runs (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="seed of run 0; run i uses seed + i (default: random)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults per run (default 60)")
    parser.add_argument("--keep", type=Path, default=None, help="directory for the runs' histories, results and server logs (default: a new temporary directory)")
    parser.add_argument("--rate", type=float, default=150.0, help="records a second per producer (default 150)")
    parser.add_argument("--keep-data", action="store_true", help="keep the nodes' data directories of clean runs too")
    parser.add_argument(
        "--netns",
        choices=("auto", "on", "off"),
        default="auto",
        help="run the nodes in network namespaces so the nemesis can cut links (needs root and iproute2's ip): "
        "auto (default) when available, on (refuse to run without), off (weir dev-cluster on loopback)",
    )
    parser.add_argument(
        "--faults",
        choices=FAULT_SETS,
        default="all",
        help="the nemesis's actions: all (default: the process faults, and the partitions when the nodes are in "
        f"namespaces), process ({', '.join(PROCESS_FAULTS)}) or partition ({', '.join(PARTITION_FAULTS)}; needs namespaces)",
    )
    parser.add_argument("--first-fault", metavar="ACTION[:SECONDS]", default=None, help="make the first fault of every run this one (e.g. partition-leader:14)")
    parser.add_argument(
        "--hostile", action="store_true",
        help="add a hostile client beside the faults: forged replica fetches, controller-port floods and join storms "
        "(compat/faults/hostile.py); a forged fetch answered, an oversized join accepted or a live broker fenced is an anomaly",
    )
    parser.add_argument(
        "--workload", choices=WORKLOADS, default="append",
        help="append (default): idempotent producers and a group consumer, checked for lost, duplicated or reordered "
        "records and lost commits; txn: transactional writers committing and aborting, a read-process-write processor "
        "and a read_committed group consumer, checked for aborted and uncommitted reads, torn transactions, lost "
        "committed writes and offsets committed without their records (compat/faults/txn.py)",
    )
    parser.add_argument(
        "--client-debug", metavar="CONTEXTS", default=None,
        help="librdkafka debug contexts for the group consumer and the txn workload's processor (e.g. topic,fetch,cgrp,eos), written to each run's clients.log",
    )
    args = parser.parse_args(argv)
    global CLIENT_DEBUG
    CLIENT_DEBUG = args.client_debug

    binary = default_binary()
    if not binary.exists():
        print(f"weir binary not found at {binary}; build it or set WEIR_BIN", file=sys.stderr)
        return 2
    reason = weir_netns.unavailable() if args.netns != "off" else "--netns off"
    if reason and (args.netns == "on" or args.faults == "partition"):
        print(f"network namespaces are needed and not available: {reason}", file=sys.stderr)
        return 2
    try:
        first = parse_first_fault(args.first_fault)
        fault_actions(args.faults, reason is None)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if first is not None and first[0] in TXN_FAULTS and args.workload != "txn":
        print(f"{first[0]} needs --workload txn", file=sys.stderr)
        return 2
    if first is not None and first[0] in PARTITION_FAULTS and reason:
        print(f"{first[0]} needs network namespaces, not available: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    keep = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="weir-faults-"))
    keep.mkdir(parents=True, exist_ok=True)
    print(f"weir faults: {args.runs} run(s) of the {args.workload} workload, seed {seed}, {args.duration:.0f} s of faults each, binary {binary}", flush=True)
    if reason:
        print(f"nodes on loopback, process faults only (no network partitions: {reason})", flush=True)
    else:
        print(f"nodes in network namespaces; faults: {', '.join(fault_actions(args.faults, True))}", flush=True)
    print(f"results in {keep}", flush=True)
    binary = pin_binary(binary, keep)

    # SIGTERM and SIGHUP unwind like Ctrl-C, so the run's finally blocks kill its nodes and
    # delete its namespaces.
    def interrupted(signum, frame):
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    network = None
    try:
        if not reason:
            network = weir_netns.Network(NODES).create()
            print(f"network: namespaces {', '.join(network.created)}; clients at {network.address(0)}", flush=True)
        return run_all(args, seed, keep, binary, network)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 130
    finally:
        if network is not None:
            network.destroy()
        binary.unlink(missing_ok=True)


def run_all(args, seed: int, keep: Path, binary: Path, network=None) -> int:
    failed = 0
    done = 0
    flags = f" --netns {'on' if network else 'off'} --faults {args.faults}"
    flags += f" --first-fault {args.first_fault}" if args.first_fault else ""
    flags += f" --rate {args.rate:g}" if args.rate != 150.0 else ""
    flags += " --hostile" if args.hostile else ""
    flags += f" --workload {args.workload}" if args.workload != "append" else ""
    try:
        for index in range(args.runs):
            run_seed = seed + index
            print(f"run {index} seed {run_seed}: starting", flush=True)
            result = run_once(
                index, run_seed, args.duration, keep / f"run-{index}", binary, rate=args.rate, keep_data=args.keep_data,
                network=network, faults=args.faults, first_fault=args.first_fault, hostile=args.hostile, workload=args.workload,
            )
            done += 1
            print(summary(result), flush=True)
            print(f"  {result['elapsed']:.0f} s, {result.get('rebalances', 0)} rebalances, {result.get('commits_acked', 0)} commits acknowledged", flush=True)
            if "transactions" in result:
                print(f"  transactions {result['transactions']}, processor batches {result.get('processed_batches')}", flush=True)
            if "hostile" in result:
                print(f"  hostile client: {result['hostile']}", flush=True)
            for note in result.get("notes", []):
                print(f"  note: {note}", flush=True)
            if result["anomalies"]:
                failed += 1
                print(
                    f"  FAILED: seed {run_seed} (repeat with --runs 1 --seed {run_seed} --duration {args.duration:g}{flags}); "
                    f"history and logs in {keep / f'run-{index}'}",
                    flush=True,
                )
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        print(f"{done} runs, {failed} with anomalies", flush=True)
        return 130
    print(f"{done} runs, {failed} with anomalies", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
