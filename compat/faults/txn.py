"""The transactional workload of the fault harness (``--workload txn``) and its checker, in the
manner of Jepsen's Kafka test.

Clients, while the nemesis hurts the cluster:

* ``TxnWriter``: transactional producers (librdkafka, ``transactional.id`` of their own; and
  ``FranzTxnWriter``, the same in franz-go, a process of its own), each
  running transactions one after another of 1-6 records ``t{writer}-{txn}-{k}`` to random
  partitions of the input topic, committing four in five and aborting the rest. Every outcome
  is kept: committed (``commit_transaction`` returned), aborted (``abort_transaction``
  returned, or nothing was ever committed), or unknown (a commit that never answered, so either
  is allowed). A writer whose producer hits a fatal error (fenced, say) replaces it; the new one
  fences the old and aborts its open transaction.
* ``Processor``: a read-process-write loop (read_committed consumer in a group of its own,
  transactional producer): each batch it reads from the input goes to the same partition of the
  output topic and its offsets to ``send_offsets_to_transaction``, in one transaction; one batch
  in ten it aborts on purpose, and on any failure it aborts too, then rewinds to the group's
  committed offsets.
* the harness's group consumer reads the input with ``isolation.level=read_committed``.

The checker (``check``) compares the outcomes with the final logs (read_committed, by a fresh
consumer, once every transaction has ended) and finds:

* ``lost-committed-write``: a record of a committed transaction missing from the final input,
  or found elsewhere than its delivery report said;
* ``torn-transaction``: a transaction whose outcome is unknown with some of its records
  visible and others not;
* ``aborted-read``: a record of an aborted transaction in the final input or output, or read
  by a read_committed consumer;
* ``uncommitted-read``: a record the read_committed group consumer read that no final log holds
  (its transaction never committed);
* ``duplicate``: a record twice in the final input, or twice in the output;
* ``reordered``: within a partition, one writer's records out of the order it sent them (its
  transactions ran one after another, so a later one never precedes an earlier one);
* ``unknown-value``: a record the harness never wrote;
* ``output-missing``, ``output-not-in-input``, ``output-wrong-partition``,
  ``offsets-without-records`` and ``records-without-offsets``: the processor's output is
  exactly its input, each record once and in its partition, and the group's committed offsets
  cover exactly the input records whose output is there.

Cycles between transactions of different writers are not anomalies for Kafka: it orders
concurrent transactions per partition only (a producer's later transaction follows its earlier
one, which ``reordered`` checks).
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import threading
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from weir_cluster import Deadline

# How long a transaction may stay open before the coordinator aborts it, and each client call's
# bound: well under the run, so a writer that died mid-transaction does not hold the
# read_committed consumers back for long.
TRANSACTION_TIMEOUT_MS = 20000
CALL_TIMEOUT = 30.0
# A transaction's commit (or abort) retried this long at most; then its outcome is unknown and
# the producer is replaced.
END_BUDGET = 90.0
ABORT_RATIO = 0.2
# Aborted transactions whose records reach the logs first (the others never write any).
FLUSHED_ABORT_RATIO = 0.5
MAX_RECORDS = 6
# A call this long past its own timeout is stuck in the client: librdkafka's
# ``send_offsets_to_transaction`` never returns once the broker it cached as the group's
# coordinator left the metadata (stopped or fenced, as Kafka leaves such brokers out too) and
# its handle was decommissioned (librdkafka issues 5511 and 5456).
STUCK_AFTER = CALL_TIMEOUT + 30.0


def txn_value(writer: int, txn: int, k: int) -> bytes:
    return f"t{writer}-{txn}-{k}".encode()


def parse_txn_value(value: bytes | None) -> tuple[int, int, int] | None:
    """(writer, transaction, index) of a value written by a ``TxnWriter``, or None."""
    try:
        head, txn, k = value.decode().split("-")
        if not head.startswith("t"):
            return None
        return int(head[1:]), int(txn), int(k)
    except Exception:  # noqa: BLE001 - anything else is not ours
        return None


def text(value: bytes | None) -> str:
    return "None" if value is None else value.decode(errors="replace")


def _error_of(exc: KafkaException) -> KafkaError | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None


class Transaction:
    """One transaction of a writer: its values, their delivery reports and its outcome."""

    def __init__(self, writer: int, number: int, partitions: list[int]):
        self.writer = writer
        self.number = number
        self.values = [txn_value(writer, number, k) for k in range(len(partitions))]
        self.partitions = partitions
        self.delivered: dict[bytes, tuple[int, int]] = {}
        self.outcome = "open"  # committed, aborted or unknown once ended

    def summary(self) -> dict:
        return {"writer": self.writer, "txn": self.number, "outcome": self.outcome, "partitions": self.partitions}


class _Transactional(threading.Thread):
    """A thread with a transactional producer: its creation (with ``init_transactions``
    retried), replacement after a fatal error, and the end of a transaction retried within
    ``END_BUDGET``."""

    def __init__(self, name: str, bootstrap: str, transactional_id: str, history, logger: logging.Logger, debug: str | None = None):
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self.history = history
        self.logger = logger
        self.debug = {"debug": debug} if debug else {}  # librdkafka debug contexts, to ``logger``
        self.errors = Counter()
        self.replaced = 0
        self.stop_event = threading.Event()
        self.abort = threading.Event()  # stop at once
        self.failure: str | None = None

    def _new_producer(self) -> Producer | None:
        """A producer whose ``init_transactions`` succeeded, or None once stopped."""
        while not self.abort.is_set():
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": self.transactional_id,
                    "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    "linger.ms": 5,
                    "log.connection.close": False,
                    "logger": self.logger,
                    "error_cb": lambda err: self.errors.update([err.name()]),
                    **self.debug,
                }
            )
            try:
                producer.init_transactions(CALL_TIMEOUT)
                return producer
            except KafkaException as exc:
                self.history.record("txn-init-failed", client=self.name, error=str(exc))
                time.sleep(0.5)
        return None

    def _replace(self, producer: Producer | None, reason: str) -> Producer | None:
        self.replaced += 1
        self.history.record("txn-producer-replaced", client=self.name, reason=reason)
        if producer is not None:
            try:
                producer.flush(0)
            except KafkaException:  # the fatal error it is replaced for
                pass
        return self._new_producer()

    def _end(self, producer: Producer, commit: bool) -> tuple[str, bool]:
        """Commits (or aborts) the open transaction: (outcome, producer still usable).
        A retriable failure retries the same call; a failure that needs an abort aborts; a
        fatal one, or a commit never answered within ``END_BUDGET``, leaves the outcome
        unknown (after a commit was asked) and the producer to be replaced."""
        deadline = Deadline(END_BUDGET)
        asked_commit = False
        while not deadline.expired() and not self.abort.is_set():
            try:
                if commit:
                    asked_commit = True
                    producer.commit_transaction(CALL_TIMEOUT)
                    return "committed", True
                producer.abort_transaction(CALL_TIMEOUT)
                return "aborted", True
            except KafkaException as exc:
                error = _error_of(exc)
                self.errors.update([error.name() if error else "unknown"])
                self.history.record("txn-end-failed", client=self.name, commit=commit, error=str(exc))
                if error is None or error.fatal():
                    return ("unknown" if asked_commit else "aborted"), False
                if error.txn_requires_abort():
                    commit = False
                    continue
                time.sleep(0.1)  # retriable: the same call again
        return ("unknown" if asked_commit else "aborted"), False


class TxnWriter(_Transactional):
    """Transactions one after another, each of 1-6 records to random partitions; four in five
    committed, the rest aborted (decided by ``rng``), half of those once their records were
    written (the others before: the client drops what it has not sent)."""

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int, rng: random.Random, history, logger: logging.Logger):
        super().__init__(f"txn-writer-{index}", bootstrap, f"{topic}-writer-{index}", history, logger)
        self.index = index
        self.topic = topic
        self.partitions = partitions
        self.rng = rng
        self.transactions: list[Transaction] = []

    def _report(self, txn: Transaction):
        def report(err, msg):
            if err is None:
                txn.delivered[msg.value()] = (msg.partition(), msg.offset())
            else:
                self.errors.update(["delivery: " + err.name()])
        return report

    def run(self):
        producer = None
        try:
            producer = self._new_producer()
            number = 0
            while producer is not None and not self.stop_event.is_set():
                count = self.rng.randint(1, MAX_RECORDS)
                txn = Transaction(self.index, number, [self.rng.randrange(self.partitions) for _ in range(count)])
                commit = self.rng.random() >= ABORT_RATIO
                number += 1
                self.transactions.append(txn)
                try:
                    producer.begin_transaction()
                    for value, partition in zip(txn.values, txn.partitions):
                        producer.produce(self.topic, value=value, partition=partition, on_delivery=self._report(txn))
                    producer.poll(0)
                    if not commit and self.rng.random() < FLUSHED_ABORT_RATIO:
                        # Its records in the logs before the abort, for readers to skip.
                        producer.flush(CALL_TIMEOUT)
                except (KafkaException, BufferError) as exc:
                    self.history.record("txn-produce-failed", client=self.name, txn=txn.number, error=str(exc))
                    commit = False
                txn.outcome, usable = self._end(producer, commit)
                try:
                    producer.poll(0)  # the last delivery reports
                except KafkaException as exc:  # a fatal error surfaces here too
                    self.history.record("txn-poll-failed", client=self.name, error=str(exc))
                    usable = False
                self.history.record("txn", **txn.summary(), delivered={text(v): po for v, po in txn.delivered.items()})
                if not usable:
                    producer = self._replace(producer, f"transaction {txn.number} ended {txn.outcome}")
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - reported as a harness failure
            self.failure = traceback.format_exc()
        finally:
            if producer is not None:
                try:
                    producer.flush(0 if self.abort.is_set() else 30)
                except KafkaException as exc:
                    self.history.record("txn-flush-failed", client=self.name, error=str(exc))


FRANZ_GO_INSTALL = Path(__file__).resolve().parents[1] / "go" / "install.sh"


def franz_go_binary() -> str:
    """The franz-go program of compat/go, built by its install.sh (a no-op when current)."""
    proc = subprocess.run(["bash", str(FRANZ_GO_INSTALL)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{FRANZ_GO_INSTALL} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr[-4000:]}")
    return str(FRANZ_GO_INSTALL.parents[2] / ".cache" / "franz-go" / "weir-franz-go")


class FranzTxnWriter(threading.Thread):
    """A ``TxnWriter`` in franz-go: ``weir-franz-go txn-writer`` (compat/go/txn_writer.go), a
    process of its own running the same transactions with the same bounds and reporting each
    as a JSON line. A transaction it began and never reported the end of (the process died)
    is unknown."""

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int, seed: int, binary: str, history, logger: logging.Logger):
        super().__init__(name=f"txn-writer-{index}", daemon=True)
        self.index = index
        self.transactional_id = f"{topic}-writer-{index}"
        self.argv = [binary, "txn-writer", bootstrap, topic, str(partitions), self.transactional_id, str(index), str(seed)]
        self.history = history
        self.logger = logger
        self.transactions: list[Transaction] = []
        self.errors = Counter()
        self.replaced = 0
        self.stop_event = threading.Event()
        self.abort = threading.Event()  # stop at once
        self.failure: str | None = None

    def _stop_when_asked(self, proc: subprocess.Popen):
        while not (self.stop_event.wait(0.2) or self.abort.is_set()):
            pass
        if self.abort.is_set():
            proc.kill()
            return
        try:
            proc.stdin.write("stop\n")
            proc.stdin.close()
        except OSError:  # it has ended
            pass

    def _log(self, stream):
        for line in stream:
            self.logger.info("%s: %s", self.name, line.rstrip())

    def _event(self, event: dict, by_number: dict[int, Transaction]):
        if "begin" in event:
            txn = Transaction(self.index, event["begin"], event["partitions"])
            txn.outcome = "unknown"  # until it reports the end
            by_number[txn.number] = txn
            self.transactions.append(txn)
        elif "txn" in event:
            txn = by_number[event["txn"]]
            txn.outcome = event["outcome"]
            txn.delivered = {v.encode(): tuple(po) for v, po in event["delivered"].items()}
            self.history.record("txn", **txn.summary(), delivered=event["delivered"])
        elif "reason" in event:
            self.replaced = event["replaced"]
            self.errors.update([event["reason"].split(": ", 1)[-1][:80]])
            self.history.record("txn-producer-replaced", client=self.name, reason=event["reason"])

    def run(self):
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError:
            self.failure = traceback.format_exc()
            return
        threading.Thread(target=self._stop_when_asked, args=(proc,), daemon=True).start()
        threading.Thread(target=self._log, args=(proc.stderr,), daemon=True).start()
        by_number: dict[int, Transaction] = {}
        try:
            for line in proc.stdout:
                self._event(json.loads(line), by_number)
            if proc.wait() != 0 and not self.abort.is_set():
                self.failure = f"{' '.join(self.argv)} exited {proc.returncode} (its log is in the harness log)"
        except Exception:  # noqa: BLE001 - reported as a harness failure
            self.failure = traceback.format_exc()
            proc.kill()


class Processor(_Transactional):
    """Read-process-write from ``source`` to ``sink``: each batch read (read_committed) is
    written to the same partitions of ``sink`` and its offsets given to the transaction, which
    commits both or neither; one batch in ten is aborted (decided by ``rng``) and read again."""

    def __init__(
        self, bootstrap: str, source: str, sink: str, group: str, rng: random.Random, history, logger: logging.Logger, debug: str | None = None
    ):
        super().__init__("txn-processor", bootstrap, f"{sink}-processor", history, logger, debug)
        self.rng = rng
        self.source = source
        self.sink = sink
        self.group = group
        self.committed_batches = 0
        self.aborted_batches = 0
        self.unknown_batches = 0
        self.committed_offsets: dict[int, int] = {}  # the last acknowledged, per input partition
        self.consumer: Consumer | None = None
        self.calling: tuple[str, float] | None = None  # the client call under way, since when
        self.abandoned = threading.Event()  # stuck in the client and replaced: ends quietly

    def successor(self) -> "Processor":
        """A processor to take over from this one: the same transactional id (its
        ``init_transactions`` fences this one's producer and aborts its transaction) and group."""
        return Processor(self.bootstrap, self.source, self.sink, self.group, self.rng, self.history, self.logger, self.debug.get("debug"))

    def stuck(self) -> tuple[str, float] | None:
        """The client call this processor has been in for longer than ``STUCK_AFTER``, and for how
        long, if any."""
        calling = self.calling
        if calling is None:
            return None
        seconds = time.monotonic() - calling[1]
        return (calling[0], seconds) if seconds > STUCK_AFTER else None

    def abandon(self):
        """Gives this (stuck) processor up: its consumer leaves the group, so the partitions go
        to its successor, and the thread ends without a word if its call ever returns."""
        self.abandoned.set()
        consumer = self.consumer
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closed either way
                pass

    def _consumer(self) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "log.connection.close": False,
                "logger": self.logger,
                "error_cb": lambda err: self.errors.update(["consumer: " + err.name()]),
                **self.debug,
            }
        )

    def _rewind(self, consumer: Consumer) -> Consumer:
        """Back to the group's committed offsets after a batch that did not commit (its records
        are read again); where that fails, a new consumer starts from them."""
        try:
            assigned = consumer.assignment()
            if assigned:
                for tp in consumer.committed(assigned, timeout=CALL_TIMEOUT):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            return consumer
        except KafkaException as exc:
            self.history.record("processor-rewind-failed", error=str(exc))
        try:
            consumer.close()
        except Exception:  # noqa: BLE001 - a new member replaces it either way
            pass
        consumer = self._consumer()
        consumer.subscribe([self.source])
        return consumer

    def _process(self, producer: Producer, consumer: Consumer, batch) -> tuple[str, bool]:
        offsets: dict[int, int] = {}
        try:
            producer.begin_transaction()
            for msg in batch:
                producer.produce(self.sink, value=msg.value(), partition=msg.partition())
                offsets[msg.partition()] = msg.offset() + 1
            self.calling = ("send_offsets_to_transaction", time.monotonic())
            try:
                producer.send_offsets_to_transaction(
                    [TopicPartition(self.source, p, o) for p, o in offsets.items()], consumer.consumer_group_metadata(), CALL_TIMEOUT
                )
            finally:
                self.calling = None
        except (KafkaException, BufferError) as exc:
            self.history.record("processor-batch-failed", error=str(exc))
            outcome, usable = self._end(producer, False)
            return outcome, usable
        # One batch in ten is aborted on purpose: its output and its offsets must both vanish,
        # and it is read again from the offsets committed before it.
        outcome, usable = self._end(producer, self.rng.random() >= ABORT_RATIO / 2)
        if outcome == "committed":
            for p, o in offsets.items():
                self.committed_offsets[p] = max(self.committed_offsets.get(p, 0), o)
        self.history.record("processor-batch", outcome=outcome, records=len(batch), offsets=offsets)
        return outcome, usable

    def run(self):
        producer = None
        consumer = None
        try:
            producer = self._new_producer()
            consumer = self.consumer = self._consumer()
            consumer.subscribe([self.source])
            while producer is not None and not self.stop_event.is_set():
                batch = [m for m in consumer.consume(num_messages=200, timeout=0.2) if m.error() is None]
                if not batch:
                    continue
                outcome, usable = self._process(producer, consumer, batch)
                if self.abandoned.is_set():
                    return
                if outcome == "committed":
                    self.committed_batches += 1
                else:
                    self.aborted_batches += outcome == "aborted"
                    self.unknown_batches += outcome == "unknown"
                    if not usable:
                        producer = self._replace(producer, f"a batch ended {outcome}")
                    consumer = self.consumer = self._rewind(consumer)
        except Exception:  # noqa: BLE001 - reported as a harness failure
            if not self.abandoned.is_set():
                self.failure = traceback.format_exc()
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:  # noqa: BLE001
                    pass
            if producer is not None:
                try:
                    producer.flush(0)
                except KafkaException:  # a fatal error: nothing left to deliver
                    pass


def last_offsets(log: dict[int, dict[int, bytes]]) -> dict[int, int]:
    """The offset after each partition's last record (0 for an empty one)."""
    return {p: (max(records) + 1 if records else 0) for p, records in log.items()}


def check(transactions: list[Transaction], final_in, final_out, group_reads, processor_committed: dict[int, int] | None) -> dict[str, list]:
    """Anomalies by kind, each a list of examples. ``final_in`` and ``final_out`` are the
    read_committed final logs ({partition: {offset: value}}) of the input and output topics,
    ``group_reads`` the (partition, offset, value) the read_committed group consumer read, and
    ``processor_committed`` the processor group's final committed offsets of the input."""
    anomalies: dict[str, list] = defaultdict(list)
    by_value: dict[bytes, Transaction] = {v: t for t in transactions for v in t.values}
    place_in: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, log in final_in.items():
        for o, v in log.items():
            place_in[v].append((p, o))
    place_out: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, log in final_out.items():
        for o, v in log.items():
            place_out[v].append((p, o))

    for name, places in (("input", place_in), ("output", place_out)):
        for v, at in places.items():
            if len(at) > 1:
                anomalies["duplicate"].append({"topic": name, "value": text(v), "at": sorted(at)})
            txn = by_value.get(v)
            if txn is None:
                anomalies["unknown-value"].append({"topic": name, "value": text(v), "at": sorted(at)})
            elif txn.outcome == "aborted":
                anomalies["aborted-read"].append({"topic": name, "value": text(v), "at": sorted(at), "reader": "final"})

    for txn in transactions:
        visible = [v for v in txn.values if v in place_in]
        if txn.outcome == "committed":
            for v in txn.values:
                at = place_in.get(v)
                told = txn.delivered.get(v)
                if not at or (told is not None and told not in at):
                    anomalies["lost-committed-write"].append({"value": text(v), "delivered": told, "found": at, **txn.summary()})
        elif txn.outcome == "unknown" and 0 < len(visible) < len(txn.values):
            anomalies["torn-transaction"].append({**txn.summary(), "visible": [text(v) for v in visible], "of": len(txn.values)})

    for p, o, v in group_reads:
        txn = by_value.get(v)
        if txn is not None and txn.outcome == "aborted":
            anomalies["aborted-read"].append({"topic": "input", "value": text(v), "at": [(p, o)], "reader": "group"})
        elif v not in place_in:
            anomalies["uncommitted-read"].append({"value": text(v), "at": (p, o), "outcome": txn.outcome if txn else None})

    for p, log in final_in.items():
        last: dict[int, tuple[tuple[int, int], int]] = {}
        for o in sorted(log):
            parsed = parse_txn_value(log[o])
            if parsed is None:
                continue
            writer, number, k = parsed
            if writer in last and (number, k) < last[writer][0]:
                before, at = last[writer]
                anomalies["reordered"].append({"partition": p, "offset": o, "value": text(log[o]), "after": f"t{writer}-{before[0]}-{before[1]}@{at}"})
            last[writer] = ((number, k), o)

    # The processor's output against its input and its group's offsets (when they could be
    # read): an input record is in the output exactly when the offsets cover it.
    for v, at in place_in.items():
        p, o = at[0]
        output = place_out.get(v)
        if output is None:
            anomalies["output-missing"].append({"value": text(v), "at": (p, o)})
        elif any(q != p for q, _ in output):
            anomalies["output-wrong-partition"].append({"value": text(v), "input": (p, o), "output": sorted(output)})
        if processor_committed is None:
            continue
        committed = processor_committed.get(p, 0)
        if output is None and o < committed:
            anomalies["offsets-without-records"].append({"value": text(v), "at": (p, o), "committed": committed})
        elif output is not None and o >= committed:
            anomalies["records-without-offsets"].append({"value": text(v), "at": (p, o), "committed": committed})
    for v, at in place_out.items():
        if v not in place_in:
            anomalies["output-not-in-input"].append({"value": text(v), "output": sorted(at)})
    return {kind: examples for kind, examples in anomalies.items() if examples}
