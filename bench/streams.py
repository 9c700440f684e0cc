#!/usr/bin/env python3
"""Kafka Streams' exactly-once word count on Weir and on Apache Kafka, one node each.

Usage: .venv/bin/python bench/streams.py [options]

Each broker is started afresh on an empty data directory (as bench/transactions.py starts
them: Weir with its defaults, Weir with log.flush.policy=never, Kafka 4.4 through
bench/kafka.sh). An input topic of --partitions partitions is loaded with --lines lines of
--words words each (drawn from --vocabulary distinct words); then compat/java's
StreamsWordCount (Kafka Streams 4.4, processing.guarantee=exactly_once_v2, commit every
100 ms, no record cache, so every count goes out) starts, and the time from its start to the
moment a read_committed consumer of its output has read one count per input word is the run's
time (the JVM's start and the group's first rebalance included, about 5 s). Reported per
broker:

  words/s            input words counted per second (each a record through the repartition
                     topic, the changelog and the output, in transactions)
  seconds            start of the application to the last count read
  broker CPU s       broker CPU (utime+stime from /proc) over the run
  broker CPU ms/1k   the same per thousand words

Options:
  --weir PATH          weir binary (default $CARGO_TARGET_DIR/release/weir, else target/release/weir)
  --kafka-version V    Apache Kafka 4.x for bench/kafka.sh (default 4.4.0)
  --lines N            input lines (default 200000)
  --words N            words per line (default 10)
  --vocabulary N       distinct words (default 1000)
  --partitions N       input partitions (default 3)
  --only LIST          of weir, weir-never and kafka (default: all three)
  --work DIR           run directory parent (default $WEIR_BENCH_WORK or /tmp/weir-bench)
  --quick              --lines 2000: checks the setup, not for figures

Needs the Java jars of compat/java/pom.xml in .cache/kafka-jars (scripts/test.sh fetches them)."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "compat" / "tests"))

from test_java import JARS_DIR, compile_java  # noqa: E402
from transactions import Kafka, Weir, cpu_seconds, log  # noqa: E402

# The longest one run may take.
RUN_TIMEOUT = 900


def load_input(bootstrap: str, topic: str, partitions: int, args) -> int:
    """Creates `topic` and `topic`-out, fills `topic`; returns the number of words."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, count in ((topic, partitions), (f"{topic}-out", partitions)):
        admin.create_topics([NewTopic(name, count, 1)])[name].result(30)
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(args.vocabulary)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(args.lines):
        line = " ".join(rng.choice(vocabulary) for _ in range(args.words))
        while True:
            try:
                producer.produce(topic, key=str(i), value=line)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise SystemExit("the input was not all delivered within 120 s")
    return args.lines * args.words


def run_word_count(broker, java: str, classes: Path, run_dir: Path, args) -> dict:
    topic = f"words-{int(time.time())}"
    words = load_input(broker.bootstrap, topic, args.partitions, args)
    out = f"{topic}-out"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(out, p, 0) for p in range(args.partitions)])
    state_dir = run_dir / f"streams-state-{broker.name.replace(' ', '-')}"
    cpu_before = cpu_seconds(broker.pid)
    started = time.monotonic()
    app = subprocess.Popen(
        [java, "-Xmx1g", "-cp", f"{classes}:{JARS_DIR}/*", "weir.compat.StreamsWordCount",
         broker.bootstrap, topic, out, f"{topic}-app", str(state_dir), "1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(run_dir / f"{topic}-app.log", "w"))
    read = 0
    try:
        while read < words:
            if time.monotonic() - started > RUN_TIMEOUT:
                raise SystemExit(f"{broker.name}: {read} of {words} counts read within {RUN_TIMEOUT} s")
            if app.poll() is not None:
                raise SystemExit(f"{broker.name}: the word count exited {app.returncode} (log in {run_dir})")
            read += sum(1 for m in consumer.consume(10000, 0.2) if m.error() is None)
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(broker.pid) - cpu_before
    finally:
        app.terminate()
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait(10)
        consumer.close()
    if read != words:
        raise SystemExit(f"{broker.name}: read {read} counts for {words} words (exactly once broken?)")
    return {"words/s": words / elapsed, "seconds": elapsed, "broker CPU s": cpu,
            "broker CPU ms/1k words": cpu * 1000 / (words / 1000)}


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--help", "-h", action="store_true")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    parser.add_argument("--weir", type=Path, default=target / "release" / "weir")
    parser.add_argument("--kafka-version", default="4.4.0")
    parser.add_argument("--lines", type=int, default=200000)
    parser.add_argument("--words", type=int, default=10)
    parser.add_argument("--vocabulary", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--only", default="weir,weir-never,kafka")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("WEIR_BENCH_WORK", "/tmp/weir-bench")))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.help:
        print(__doc__)
        return
    if args.quick:
        args.lines = 2000
    run_dir = args.work / f"streams-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    classes = run_dir / "classes"
    java = compile_java(classes)
    makers = {"weir": lambda: Weir(args.weir, run_dir, "acks-all"),
              "weir-never": lambda: Weir(args.weir, run_dir, "never"),
              "kafka": lambda: Kafka(args.kafka_version, run_dir)}
    chosen = args.only.split(",")
    if any(name not in makers for name in chosen):
        raise SystemExit(f"--only takes a list of {', '.join(makers)}")
    measured = {}
    for broker in (makers[name]() for name in chosen):
        log(f"{broker.name}: starting")
        broker.start()
        try:
            measured[broker.name] = run_word_count(broker, java, classes, run_dir, args)
            log(f"{broker.name}: {measured[broker.name]['words/s']:.0f} words/s")
        finally:
            broker.stop()
    names = list(measured)
    head = ["", *names] + ([f"{n} / Kafka" for n in names if n != "Kafka"] if "Kafka" in names else [])
    print(f"<!-- bench/streams.py, run directory {run_dir} -->\n")
    print(f"### Streams word count, exactly_once_v2: {args.lines} lines of {args.words} words, "
          f"{args.partitions} partitions\n")
    print("| " + " | ".join(head) + " |")
    print("|---" + "|---:" * (len(head) - 1) + "|")
    for metric in measured[names[0]]:
        row = [metric, *(f"{measured[n][metric]:.2f}" if measured[n][metric] < 100 else f"{measured[n][metric]:.0f}"
                         for n in names)]
        if "Kafka" in names:
            row += [f"{measured[n][metric] / measured['Kafka'][metric]:.2f}" for n in names if n != "Kafka"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
