#!/usr/bin/env python3
"""Usage: .venv/bin/python bench/commit_rate.py HOST:PORT [COMMITS]

Offset commit throughput and latency against a broker: synchronous commits by one
librdkafka consumer in a group, each waiting for its answer (one partition per commit)."""
import sys, time, statistics, threading
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
b = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
a = AdminClient({"bootstrap.servers": b})
t = f"commitbench-{int(time.time())}"
a.create_topics([NewTopic(t, 8, 1)])[t].result()
c = Consumer({"bootstrap.servers": b, "group.id": t, "enable.auto.commit": False})
lat = []
# warm up: find the coordinator
c.commit(offsets=[TopicPartition(t, 0, 1)], asynchronous=False)
start = time.perf_counter()
for i in range(n):
    s = time.perf_counter()
    c.commit(offsets=[TopicPartition(t, i % 8, i + 1)], asynchronous=False)
    lat.append(time.perf_counter() - s)
el = time.perf_counter() - start
lat.sort()
print(f"sync commits: {n/el:.0f}/s  p50 {lat[len(lat)//2]*1000:.3f} ms  p99 {lat[int(len(lat)*0.99)]*1000:.3f} ms  max {lat[-1]*1000:.3f} ms")
c.close()
