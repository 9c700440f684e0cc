#!/usr/bin/env python3
"""Share-group consumption: K `kafka-console-share-consumer`s (Kafka 4.4's KafkaShareConsumer,
max.poll.records 2000) in one share group on a one-partition topic; N records of 100 bytes are
produced once the group receives a warm-up record, and the run measures the time from the first
record produced to the last one printed (each consumer accepts what it printed at its next
poll). Prints the rate and how the records split between the consumers. Works against any
broker, so Weir and Kafka are measured the same way:

    .venv/bin/python bench/share_consumers.py --bootstrap 127.0.0.1:9092 --consumers 1 \\
        --records 1000000
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import tempfile
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

JARS = pathlib.Path(__file__).resolve().parent.parent / ".cache" / "kafka-jars"
VALUE = b"x" * 100
DEADLINE_S = 300


def printed(outs: list[pathlib.Path], prefix: bytes) -> list[int]:
    """How many lines starting with `prefix` each consumer printed."""
    return [sum(1 for line in out.read_bytes().splitlines() if line.startswith(prefix)) for out in outs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    topic, group = f"share-bench-{uuid.uuid4().hex[:6]}", f"share-bench-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    work = pathlib.Path(tempfile.mkdtemp(prefix="share-bench-"))
    outs = [work / f"consumer-{i}.txt" for i in range(args.consumers)]
    consumers = [
        subprocess.Popen(
            ["java", "-XX:+UseSerialGC", "-cp", f"{JARS}/*",
             "org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server", args.bootstrap,
             "--topic", topic, "--group", group, "--command-property", "max.poll.records=2000"],
            stdout=out.open("w"), stderr=subprocess.DEVNULL)
        for out in outs
    ]
    try:
        producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 5, "batch.size": 65536})
        deadline = time.monotonic() + 60
        while sum(printed(outs, b"warm-up")) == 0:
            if time.monotonic() > deadline:
                raise SystemExit("no consumer received a warm-up record in 60 s")
            producer.produce(topic, b"warm-up")
            producer.flush()
            time.sleep(0.5)
        time.sleep(2)
        start = time.monotonic()
        for _ in range(args.records):
            while True:
                try:
                    producer.produce(topic, VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush()
        produced_s = time.monotonic() - start
        while sum(printed(outs, b"x")) < args.records and time.monotonic() - start < DEADLINE_S:
            time.sleep(0.05)
        took = time.monotonic() - start
        split = printed(outs, b"x")
        print(f"consumers={args.consumers} records={sum(split)}/{args.records} produce_s={produced_s:.2f} "
              f"total_s={took:.2f} rate={sum(split) / took:.0f}/s per_consumer={split}")
    finally:
        for consumer in consumers:
            consumer.terminate()
        for consumer in consumers:
            consumer.wait(30)


if __name__ == "__main__":
    main()
