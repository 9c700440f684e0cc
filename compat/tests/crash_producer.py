"""Idempotent acks=all producer used by test_crash.py, run as a separate process.

    python crash_producer.py BOOTSTRAP TOPIC WORKDIR [COUNT]

Sends values "0", "1", "2", ... to partition 0 of TOPIC until WORKDIR/stop
exists, COUNT records are sent, or a hard cap is reached; then flushes and
exits.  It appends:

  WORKDIR/acked   one line per acknowledged value, in acknowledgement order,
                  flushed as soon as the delivery report arrives;
  WORKDIR/errors  one line per error reported by the client (not fatal by itself);
  WORKDIR/result  a JSON summary at the end: produced, delivered, failed.

Exit code 0 means every produced record was acknowledged.
"""

from __future__ import annotations

import json
import os
import sys
import time

from confluent_kafka import Producer

MAX_RECORDS = 2_000_000
MAX_RUNTIME_S = 240
FLUSH_TIMEOUT_S = 150


def main() -> int:
    bootstrap, topic, workdir = sys.argv[1:4]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else MAX_RECORDS
    acked = open(os.path.join(workdir, "acked"), "a", buffering=1, encoding="ascii")
    errors = open(os.path.join(workdir, "errors"), "a", buffering=1, encoding="utf-8")
    stop_path = os.path.join(workdir, "stop")
    state = {"delivered": 0, "failed": 0, "fatal": None}

    def on_error(err):
        errors.write(f"{err.name()} fatal={err.fatal()} {err.str()}\n")
        if err.fatal():
            state["fatal"] = err.str()

    def on_delivery(err, msg):
        if err is None:
            state["delivered"] += 1
            acked.write(msg.value().decode() + "\n")
            acked.flush()
        else:
            state["failed"] += 1
            errors.write(f"delivery failed for {msg.value()!r}: {err.name()} {err.str()}\n")

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "queue.buffering.max.messages": 20000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 500,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
            "socket.connection.setup.timeout.ms": 5000,
            "error_cb": on_error,
        }
    )

    started = time.monotonic()
    produced = 0
    while produced < min(count, MAX_RECORDS) and time.monotonic() - started < MAX_RUNTIME_S:
        if state["fatal"] is not None:
            break
        if produced % 500 == 0 and os.path.exists(stop_path):
            break
        try:
            producer.produce(topic, value=str(produced).encode(), partition=0, on_delivery=on_delivery)
            produced += 1
            producer.poll(0)
        except BufferError:
            producer.poll(0.05)

    remaining = producer.flush(FLUSH_TIMEOUT_S)
    result = {
        "produced": produced,
        "delivered": state["delivered"],
        "failed": state["failed"],
        "undelivered": remaining,
        "fatal": state["fatal"],
    }
    with open(os.path.join(workdir, "result"), "w", encoding="utf-8") as out:
        json.dump(result, out)
    ok = state["fatal"] is None and remaining == 0 and state["failed"] == 0 and state["delivered"] == produced
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
