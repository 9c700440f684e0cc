#!/usr/bin/env python3
"""Usage: .venv/bin/python bench/rebalance.py HOST:PORT [ROUNDS]
   PROTOCOL=classic (default; HB=ms sets heartbeat.interval.ms) or PROTOCOL=consumer (KIP-848:
   the broker assigns and sets the heartbeat interval)

Rebalance time: 3 librdkafka members (cooperative-sticky, or the consumer protocol's broker
assignor) on 60 partitions; one leaves; time until the other two own all 60 and have read a
record from every moved partition."""
import os, sys, time, threading
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
b = sys.argv[1]; rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
a = AdminClient({"bootstrap.servers": b})
topic = f"rebal-{int(time.time())}"
a.create_topics([NewTopic(topic, 60, 1)])[topic].result()
stop = threading.Event()
def produce():
    p = Producer({"bootstrap.servers": b, "linger.ms": 5})
    i = 0
    while not stop.is_set():
        for part in range(60):
            p.produce(topic, value=b"x", partition=part)
        p.poll(0); i += 1; time.sleep(0.01)
    p.flush(10)
threading.Thread(target=produce, daemon=True).start()
class Member:
    def __init__(self, name, group):
        conf = {"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "latest", "enable.auto.commit": True}
        if os.environ.get("PROTOCOL", "classic") == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": int(os.environ.get("HB", "3000"))})
        self.c = Consumer(conf)
        self.owned = set(); self.seen = {}; self.lock = threading.Lock(); self.run = True
        self.c.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        self.t = threading.Thread(target=self.loop, daemon=True); self.t.start()
    def on_assign(self, c, parts):
        with self.lock: self.owned |= {p.partition for p in parts}
    def on_revoke(self, c, parts):
        with self.lock: self.owned -= {p.partition for p in parts}
    def loop(self):
        while self.run:
            m = self.c.poll(0.005)
            if m is not None and not m.error():
                with self.lock: self.seen.setdefault(m.partition(), time.perf_counter())
        self.c.close()
results = []
for r in range(rounds):
    group = f"{topic}-g{r}"
    members = [Member(n, group) for n in "abc"]
    t0 = time.time()
    while sum(len(m.owned) for m in members) < 60 or any(len(m.owned) == 0 for m in members):
        time.sleep(0.01); assert time.time() - t0 < 60
    time.sleep(2)
    leaving = members[2]; moved = set(leaving.owned)
    for m in members[:2]:
        with m.lock: m.seen.clear()
    start = time.perf_counter()
    leaving.run = False; leaving.t.join()
    left = time.perf_counter()
    while len(members[0].owned | members[1].owned) < 60:
        time.sleep(0.002); assert time.perf_counter() - start < 60
    assigned = time.perf_counter()
    def all_seen():
        seen = {}
        for m in members[:2]:
            with m.lock: seen.update({p: t for p, t in m.seen.items() if t > assigned - 10})
        return all(p in seen for p in moved), seen
    while not all_seen()[0]:
        time.sleep(0.002); assert time.perf_counter() - start < 60
    consuming = max(t for p, t in all_seen()[1].items() if p in moved)
    results.append((left - start, assigned - start, consuming - start))
    print(f"round {r}: close {left-start:.3f}s, reassigned {assigned-start:.3f}s, consuming every moved partition {consuming-start:.3f}s ({len(moved)} moved)")
    for m in members[:2]:
        m.run = False; m.t.join()
stop.set()
