#!/usr/bin/env python3
"""Leader failover time on a three-node `weir dev-cluster`.

An idempotent acks=all librdkafka producer writes to a one-partition topic with replication
factor 3 (min.insync.replicas 2). Each run stops the partition's leader (kill -9, or SIGTERM
for a controlled shutdown) and measures the time from the signal to the first write
acknowledged after it; the stopped node is restarted and the ISR refilled before the next run.
Prints each run, then the median and maximum for each signal.

    .venv/bin/python bench/failover.py --runs 10 [--weir target/release/weir] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

# Starting the cluster, killing and restarting its nodes: the code the compat suite and the
# fault harness use (compat/tests/weir_cluster.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat" / "tests"))
from weir_cluster import NODES, ClusterError, DevCluster, free_base_port  # noqa: E402

TOPIC = "failover"


def wait(what: str, check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def partition_state(admin: AdminClient):
    described = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(timeout=10)
    p = described.partitions[0]
    return p.leader.id, [r.id for r in p.isr]


class Writer:
    def __init__(self, bootstrap: str):
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 1,
                "message.timeout.ms": 120000,
                "log_level": 0,
            }
        )
        # (sent, acknowledged) per write, in acknowledgement order.
        self.acks: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        def report(sent):
            def on_delivery(err, _msg):
                if err is None:
                    self.acks.append((sent, time.monotonic()))
                else:
                    self.errors.append(str(err))

            return on_delivery

        while not self.stop.is_set():
            try:
                self.producer.produce(TOPIC, value=b"x" * 100, on_delivery=report(time.monotonic()))
            except BufferError:
                pass
            self.producer.poll(0.001)
        self.producer.flush(60)

    def first_ack_after(self, since: float) -> float | None:
        """When the first write sent after `since` was acknowledged (answers to writes already
        in flight at the stop do not count)."""
        later = [acked for sent, acked in self.acks[-50000:] if sent > since]
        return min(later) if later else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--weir", default=os.environ.get("WEIR_BIN", "target/release/weir"))
    parser.add_argument("--json")
    args = parser.parse_args()
    weir = Path(args.weir).resolve()
    work = Path(tempfile.mkdtemp(prefix="weir-failover-"))
    cluster = DevCluster(work / "cluster", free_base_port(), binary=weir, output=work / "dev-cluster.out")
    bootstrap = cluster.bootstrap
    results: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    try:
        try:
            cluster.start()
        except ClusterError as exc:
            raise SystemExit(f"the cluster did not start: {exc}")
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})])[TOPIC].result(timeout=30)
        wait("a full ISR", lambda: len(partition_state(admin)[1]) == NODES)
        writer = Writer(bootstrap)
        wait("first writes", lambda: len(writer.acks) > 100)
        for how in (signal.SIGKILL, signal.SIGTERM):
            for run in range(args.runs):
                leader, _ = partition_state(admin)
                stopped_at = time.monotonic()
                cluster.signal_node(leader, how)
                acked = wait("a write acknowledged after the stop", lambda: writer.first_ack_after(stopped_at))
                seconds = acked - stopped_at
                results[how.name].append(seconds)
                print(f"{how.name} run {run + 1}: leader {leader}, writes acknowledged again after {seconds:.2f} s", flush=True)
                if not cluster.wait_exit(leader, 60):
                    raise SystemExit(f"timed out waiting for node {leader} to exit")
                cluster.restart_node(leader)
                wait("the ISR to refill", lambda: len(partition_state(admin)[1]) == NODES)
        writer.stop.set()
        writer.thread.join(120)
        summary = {
            how: {"runs": len(times), "median_s": statistics.median(times), "max_s": max(times), "all_s": times}
            for how, times in results.items()
        }
        for how, s in summary.items():
            print(f"{how}: median {s['median_s']:.2f} s, max {s['max_s']:.2f} s over {s['runs']} runs")
        print(f"producer errors: {len(writer.errors)}")
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2))
        return 0
    finally:
        try:
            cluster.stop()
        except Exception:  # noqa: BLE001 - killed below
            pass
        cluster.kill()


if __name__ == "__main__":
    sys.exit(main())
