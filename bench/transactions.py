#!/usr/bin/env python3
"""Transactional produce beside plain produce, on Weir and on Apache Kafka, one node each.

Usage: .venv/bin/python bench/transactions.py [options]

Each broker is started afresh on an empty data directory (Weir: `weir server` with its
defaults; Kafka: bench/kafka.sh, KRaft, its own server.properties), loaded for --prewarm
seconds, then measured case by case, one new one-partition topic each, for --seconds each:

  plain N        an idempotent producer (acks=all) sends N records of --value-bytes, then
                 flush() waits for them; again and again
  transactional N  a transactional producer: begin, N records, flush(), commit_transaction()

One librdkafka (confluent-kafka) producer and one read_committed consumer run in this process
for every case, on both brokers. Reported per case and broker:

  records/s           records acknowledged (plain) or committed (transactional) per second
  batches/s           flushes (plain) or transactions (transactional) per second
  flush p50/p99       flush() of the N records: their produce round trip
  EndTxn p50/p99      commit_transaction() after the flush: AddPartitionsToTxn where the
                      client sends it, EndTxn, and the coordinator's answer
  end-to-end p50/p99  from produce() to the read_committed consumer's receipt
  broker CPU ms/1k    broker CPU (utime+stime from /proc) per thousand records

Options:
  --weir PATH          weir binary (default $CARGO_TARGET_DIR/release/weir, else target/release/weir)
  --kafka-version V    Apache Kafka 4.x for bench/kafka.sh (default 4.4.0)
  --sizes LIST         records per transaction (and per plain flush), comma-separated (default 1,10,100)
  --seconds S          measured seconds per case (default 10)
  --prewarm S          load before measuring, so Kafka's JVM has compiled its hot paths (default 5)
  --value-bytes B      record value size (default 100)
  --only LIST          of weir (its default, flush.policy=acks-all: an fsync before acks=all
                       is answered), weir-never (log.flush.policy=never, no fsync on the produce
                       path, as Kafka) and kafka (default: all three)
  --work DIR           run directory parent (default $WEIR_BENCH_WORK or /tmp/weir-bench)
  --quick              --seconds 2 --prewarm 1: checks the setup, not for figures

Prints one markdown table per size, with each Weir's ratio to Kafka."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
READY_TIMEOUT = 180
# The longest the consumer is waited for after the producer stops.
DRAIN_TIMEOUT = 60
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid`, every thread."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Weir:
    def __init__(self, binary: Path, run_dir: Path, flush_policy: str):
        # Weir's default answers acks=all after an fsync; Kafka does not fsync on that path,
        # as Weir's log.flush.policy=never does not.
        self.name = "Weir" if flush_policy == "acks-all" else f"Weir ({flush_policy})"
        self.env = {**os.environ, "WEIR_LOG_FLUSH_POLICY": flush_policy}
        self.run_dir = run_dir / f"weir-{flush_policy}"
        self.run_dir.mkdir(parents=True)
        # A copy, so a rebuild does not change a running benchmark.
        self.binary = self.run_dir / "weir"
        shutil.copy2(binary, self.binary)

    def start(self) -> None:
        self.log = self.run_dir / "weir.log"
        out = open(self.log, "w")
        self.process = subprocess.Popen(
            [self.binary, "server", "--data-dir", self.run_dir / "data", "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            found = re.search(r"weir ready .*advertised=(\S+)", self.log.read_text())
            if found:
                self.bootstrap, self.pid = found.group(1), self.process.pid
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"weir did not become ready (log {self.log})")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


class Kafka:
    name = "Kafka"

    def __init__(self, version: str, run_dir: Path):
        self.version = version
        self.work = run_dir / "kafka"
        self.port = free_port()

    def kafka_sh(self, *args) -> str:
        command = [str(HERE / "kafka.sh"), *args, "--work", str(self.work), "--version", self.version]
        # The jars the compatibility suite fetched, when there: no second download.
        libs = REPO / ".cache" / f"kafka-reference-{self.version}" / "libs"
        if libs.is_dir():
            command += ["--libs", str(libs)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=READY_TIMEOUT + 120,
                              stdin=subprocess.DEVNULL)
        if done.returncode not in (0, 3):
            raise SystemExit(f"kafka.sh {args[0]} failed: {(done.stderr or done.stdout)[-2000:]}")
        return done.stdout

    def start(self) -> None:
        self.kafka_sh("start", "--fresh", "--port", str(self.port), "--controller-port", str(free_port()))
        status = self.kafka_sh("status")
        found = re.search(r"running pid (\d+) (\S+)", status)
        if not found:
            raise SystemExit(f"kafka.sh status: {status}")
        self.pid, self.bootstrap = int(found.group(1)), found.group(2)

    def stop(self) -> None:
        self.kafka_sh("stop")


class Case:
    """One measured run: `size` records per flush or transaction, for `seconds`."""

    def __init__(self, broker, transactional: bool, size: int, seconds: float, value_bytes: int):
        self.broker, self.transactional, self.size = broker, transactional, size
        self.seconds, self.value_bytes = seconds, value_bytes
        self.topic = f"txnbench-{'txn' if transactional else 'plain'}-{size}-{uuid.uuid4().hex[:6]}"

    def run(self) -> dict:
        bootstrap = self.broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.topic, 1, 1)])[self.topic].result(30)
        config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        if self.transactional:
            config["transactional.id"] = f"txnbench-{uuid.uuid4().hex[:8]}"
        producer = Producer(config)
        if self.transactional:
            producer.init_transactions(30)
        consumer = Reader(bootstrap, self.topic)
        padding = b"x" * max(0, self.value_bytes - 8)
        flushes, commits, records = [], [], 0
        cpu_before = cpu_seconds(self.broker.pid)
        started = time.monotonic()
        while time.monotonic() - started < self.seconds:
            if self.transactional:
                producer.begin_transaction()
            for _ in range(self.size):
                producer.produce(self.topic, value=struct.pack(">q", time.perf_counter_ns()) + padding, partition=0)
            at = time.perf_counter()
            if producer.flush(30) != 0:
                raise SystemExit(f"{self.broker.name}: records not delivered within 30 s")
            flushes.append(time.perf_counter() - at)
            if self.transactional:
                at = time.perf_counter()
                producer.commit_transaction(30)
                commits.append(time.perf_counter() - at)
            records += self.size
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(self.broker.pid) - cpu_before
        latencies = consumer.finish(records)
        flushes.sort()
        commits.sort()
        return {
            "records/s": records / elapsed,
            "batches/s": records / self.size / elapsed,
            "flush p50 ms": percentile(flushes, 0.5) * 1000,
            "flush p99 ms": percentile(flushes, 0.99) * 1000,
            "EndTxn p50 ms": percentile(commits, 0.5) * 1000 if commits else None,
            "EndTxn p99 ms": percentile(commits, 0.99) * 1000 if commits else None,
            "end-to-end p50 ms": percentile(latencies, 0.5) * 1000,
            "end-to-end p99 ms": percentile(latencies, 0.99) * 1000,
            "broker CPU ms/1k records": cpu * 1000 / (records / 1000),
        }


class Reader:
    """A read_committed consumer of partition 0 of `topic` in a thread, noting each record's
    end-to-end latency from the send time in its value."""

    def __init__(self, bootstrap: str, topic: str):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txnbench-{uuid.uuid4().hex[:8]}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self) -> None:
        while not self.stop.is_set():
            # What is queued, at once; else a wait for the next record, returning when it comes
            # (consume(n, timeout) would wait for n records or the timeout).
            messages = self.consumer.consume(1000, 0)
            if not messages:
                message = self.consumer.poll(0.1)
                messages = [message] if message is not None else []
            for message in messages:
                if message.error() is None:
                    sent = struct.unpack(">q", message.value()[:8])[0]
                    self.latencies.append((time.perf_counter_ns() - sent) / 1e9)

    def finish(self, records: int) -> list[float]:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while len(self.latencies) < records and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()
        if len(self.latencies) != records:
            raise SystemExit(f"the read_committed consumer read {len(self.latencies)} of {records} records")
        return sorted(self.latencies)


def measure(broker, args) -> dict:
    log(f"{broker.name}: starting")
    broker.start()
    results = {}
    try:
        log(f"{broker.name}: ready at {broker.bootstrap} (pid {broker.pid}); prewarm {args.prewarm} s")
        if args.prewarm > 0:
            Case(broker, True, 10, args.prewarm, args.value_bytes).run()
            Case(broker, False, 10, args.prewarm, args.value_bytes).run()
        for size in args.sizes:
            for transactional in (False, True):
                case = Case(broker, transactional, size, args.seconds, args.value_bytes)
                results[(transactional, size)] = case.run()
                row = results[(transactional, size)]
                log(f"{broker.name} {'transactional' if transactional else 'plain'} {size}: "
                    f"{row['records/s']:.0f} records/s, end-to-end p99 {row['end-to-end p99 ms']:.1f} ms")
    finally:
        broker.stop()
    return results


def cell(value) -> str:
    if value is None:
        return "—"
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}"


def table(size: int, measured: dict[str, dict], args) -> str:
    names = list(measured)
    columns = [(name, transactional) for transactional in (True, False) for name in names]
    kafka = "Kafka" if "Kafka" in names else None
    ratios = [(name, transactional) for transactional in (True, False) for name in names
              if kafka and name != kafka]
    kind = {True: "txn", False: "plain"}
    head = ["", *[f"{n} {kind[t]}" for n, t in columns], *[f"{kind[t]}: {n} / Kafka" for n, t in ratios]]
    lines = [f"### {size} record{'s' if size > 1 else ''} per transaction (plain: per flush), "
             f"{args.value_bytes} B, 1 partition, acks=all, {args.seconds:g} s per case",
             "", "| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for metric in measured[names[0]][(True, size)]:
        row = [metric, *(cell(measured[n][(t, size)][metric]) for n, t in columns)]
        for name, transactional in ratios:
            w, k = measured[name][(transactional, size)][metric], measured[kafka][(transactional, size)][metric]
            row.append("—" if w is None or k is None or k == 0 else f"{w / k:.2f}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--help", "-h", action="store_true")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    parser.add_argument("--weir", type=Path, default=target / "release" / "weir")
    parser.add_argument("--kafka-version", default="4.4.0")
    parser.add_argument("--sizes", default="1,10,100")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--prewarm", type=float, default=5)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--only", default="weir,weir-never,kafka")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("WEIR_BENCH_WORK", "/tmp/weir-bench")))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.help:
        print(__doc__)
        return
    if args.quick:
        args.seconds, args.prewarm = 2, 1
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.value_bytes < 8:
        raise SystemExit("--value-bytes must be at least 8 (the send time)")
    run_dir = args.work / f"transactions-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    makers = {"weir": lambda: Weir(args.weir, run_dir, "acks-all"),
              "weir-never": lambda: Weir(args.weir, run_dir, "never"),
              "kafka": lambda: Kafka(args.kafka_version, run_dir)}
    chosen = args.only.split(",")
    if not chosen or any(name not in makers for name in chosen):
        raise SystemExit(f"--only takes a list of {', '.join(makers)}")
    brokers = [makers[name]() for name in chosen]
    measured = {}
    for broker in brokers:
        try:
            measured[broker.name] = measure(broker, args)
        except KafkaException as error:
            raise SystemExit(f"{broker.name}: {error}") from error
    print(f"<!-- bench/transactions.py, run directory {run_dir} -->")
    for size in args.sizes:
        print()
        print(table(size, measured, args))


if __name__ == "__main__":
    main()
