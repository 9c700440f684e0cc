"""A librdkafka group consumer used by test_groups.py, run as a separate process so that
it can be killed with SIGKILL in the middle of its work.

    python group_consumer.py BOOTSTRAP TOPIC GROUP WORKDIR NAME MODE INTERVAL

MODE is ``at-least-once`` (process, then commit synchronously every INTERVAL records,
with offsets stored only after processing) or ``at-most-once`` (take up to INTERVAL
records, commit them synchronously, then process them).  "Processing" a record is
appending ``partition offset`` to WORKDIR/NAME.processed, flushed at once, after a
short pause so that a kill lands mid-stream.  Each synchronous commit that succeeds is
appended to WORKDIR/NAME.commits as ``partition:offset,...``.

Runs until WORKDIR/NAME.stop exists (then, at-least-once, commits what it processed),
or a hard time limit passes; exits 0 after a clean close.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException

MAX_RUNTIME_S = 120
PROCESS_PAUSE_S = 0.002


def main() -> int:
    bootstrap, topic, group, workdir, name, mode, interval = sys.argv[1:8]
    interval = int(interval)
    assert mode in ("at-least-once", "at-most-once"), mode
    processed = open(os.path.join(workdir, f"{name}.processed"), "a", buffering=1, encoding="ascii")
    commits = open(os.path.join(workdir, f"{name}.commits"), "a", buffering=1, encoding="ascii")
    stop_path = os.path.join(workdir, f"{name}.stop")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"group-consumer-{name}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # at-least-once: an offset is stored only after its record was processed.
            "enable.auto.offset.store": mode == "at-most-once",
            "session.timeout.ms": 2000,
            "heartbeat.interval.ms": 300,
            "fetch.wait.max.ms": 50,
            "max.partition.fetch.bytes": 1024,
            "log.connection.close": False,
        }
    )
    consumer.subscribe([topic])

    def process(msg) -> None:
        time.sleep(PROCESS_PAUSE_S)
        processed.write(f"{msg.partition()} {msg.offset()}\n")
        processed.flush()

    def commit() -> None:
        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._NO_OFFSET:
                return  # nothing new to commit
            raise
        commits.write(",".join(f"{tp.partition}:{tp.offset}" for tp in done) + "\n")
        commits.flush()

    started = time.monotonic()
    since_commit = 0
    try:
        while not os.path.exists(stop_path) and time.monotonic() - started < MAX_RUNTIME_S:
            batch_size = interval if mode == "at-most-once" else 100
            msgs = [m for m in consumer.consume(num_messages=batch_size, timeout=0.2) if m.error() is None]
            if not msgs:
                continue
            if mode == "at-most-once":
                commit()  # before processing: a crash loses, never repeats
                for msg in msgs:
                    process(msg)
                continue
            for msg in msgs:
                process(msg)
                consumer.store_offsets(message=msg)
                since_commit += 1
                if since_commit == interval:
                    commit()  # after processing: a crash repeats, never loses
                    since_commit = 0
        if mode == "at-least-once":
            commit()
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
