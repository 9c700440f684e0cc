#!/usr/bin/env python3
"""Usage: .venv/bin/python bench/cleaner_latency.py HOST:PORT WEIR_BIN [ROUNDS]

Produce latency while the log cleaner works, against the same without it. The broker at
HOST:PORT should run with a short `log.cleaner.backoff.ms` (200) and a cleaner throttle
(`log.cleaner.io.max.bytes.per.second`, e.g. 20000000) so one cleaning lasts the whole run.

Each round fills a compacted topic (1,000,000 records of 300 B over 10,000 keys, 16 MiB
segments) whose `min.compaction.lag.ms` keeps it from being cleaned, then runs
`weir bench` (20,000 records/s of 1 KiB, acks=1, another topic) twice: once with the cleaner
idle, once right after lowering `min.compaction.lag.ms` to 0, which starts the cleaning. The
filling is done before either run, so no client competes for the CPU while measuring."""
import json, os, subprocess, sys, tempfile, time
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, AlterConfigOpType, ConfigEntry

bootstrap, weir = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
admin = AdminClient({"bootstrap.servers": bootstrap})


def fill(topic: str) -> None:
    configs = {"cleanup.policy": "compact", "segment.bytes": str(16 << 20), "min.compaction.lag.ms": "3600000"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "queue.buffering.max.messages": 200000})
    value = os.urandom(300)
    for i in range(1_000_000):
        while True:
            try:
                p.produce(topic, key=b"k%05d" % (i % 10_000), value=value[i % 7:] + value[: i % 7])
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def start_cleaning(topic: str) -> None:
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result()


def bench(label: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([weir, "bench", "--brokers", bootstrap, "--topic", f"cl-lat-{label}", "--record-size", "1024",
                        "--rate", "20000", "--acks", "1", "--duration", "15", "--json", out.name],
                       check=True, stdout=subprocess.DEVNULL)
        return json.load(open(out.name))


for r in range(rounds):
    topic = f"cl-compacted-{int(time.time())}-{r}"
    fill(topic)
    time.sleep(2)
    off = bench(f"{r}-off")
    start_cleaning(topic)
    on = bench(f"{r}-on")
    for label, report in (("off", off), ("on", on)):
        print(f"round {r} cleaner {label}: {json.dumps(report)}", flush=True)
