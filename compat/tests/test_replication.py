"""Replication on a three-node `weir dev-cluster`: followers copy their leaders, the ISR holds
every replica, `acks=all` waits for it, and killing a leader (kill -9, then SIGTERM) moves
leadership to an in-sync replica without losing or duplicating an acknowledged write. Committed
offsets survive the loss of the group's coordinator.
"""

from __future__ import annotations

import signal
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from clients import admin, committed, group_consumer, read_confluent, unique_group, unique_topic
from harness import Deadline
from test_cluster import NODES, cluster  # noqa: F401  (the fixture)

PARTITIONS = 3


class Writer:
    """An idempotent acks=all librdkafka producer writing numbered values round-robin over
    the partitions until stopped; keeps every acknowledgement."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 120000,
                "log.connection.close": False,
            }
        )
        self.acked: list[tuple[int, int, bytes, float]] = []
        self.failed: list[str] = []
        self.sent_at: list[float] = []  # when each numbered value was handed to the producer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        sent = 0

        def report(err, msg):
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked.append((msg.partition(), msg.offset(), msg.value(), self.sent_at[int(msg.value().split(b"-")[1])]))

        while not self.stop.is_set():
            value = f"value-{sent}".encode()
            try:
                self.producer.produce(self.topic, value=value, partition=sent % PARTITIONS, on_delivery=report)
                self.sent_at.append(time.monotonic())
                sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(120)

    def acked_after(self, partition: int, since: float) -> bool:
        """Whether a write sent to ``partition`` after ``since`` was acknowledged (an answer
        already on its way at ``since`` does not count)."""
        return any(p == partition and at > since for p, _, _, at in list(self.acked))

    def finish(self):
        self.stop.set()
        self.thread.join(180)


def test_leader_failover_loses_no_acknowledged_write(cluster, tmp_path):  # noqa: F811
    cluster.start()
    topic = unique_topic("replicated")
    client = admin(cluster.bootstrap)
    client.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})])[topic].result(timeout=30)
    cluster.wait_in_sync(topic)

    writer = Writer(cluster.bootstrap, topic)
    failovers = {}
    try:
        deadline = Deadline(30)
        while len(writer.acked) < 300:
            assert not deadline.expired() and not writer.failed, (writer.failed, cluster.logs())
            time.sleep(0.05)
        for how in (signal.SIGKILL, signal.SIGTERM):
            leader = cluster.leader(topic, 0)
            killed_at = time.monotonic()
            cluster.kill_node(leader, how)
            deadline = Deadline(60)
            gone_at = time.monotonic()
            while not writer.acked_after(0, gone_at):
                assert not deadline.expired(), f"no write acknowledged after {how.name} of leader {leader}\n{cluster.logs()}"
                time.sleep(0.02)
            failovers[how.name] = time.monotonic() - killed_at
            new_leader = cluster.leader(topic, 0)
            assert new_leader != leader, (how.name, new_leader)
            time.sleep(1)  # writes go on against the new leader
            cluster.restart_node(leader)
            cluster.wait_in_sync(topic)
        writer.finish()
        assert not writer.failed, writer.failed[:5]

        # Every acknowledged write is where its acknowledgement said, once, in order.
        logged = read_confluent(cluster.bootstrap, topic, range(PARTITIONS))
        for partition in range(PARTITIONS):
            values = [rec.value for rec in logged[partition]]
            assert len(values) == len(set(values)), f"duplicates in partition {partition}"
            numbers = [int(v.split(b"-")[1]) for v in values]
            assert numbers == sorted(numbers), f"partition {partition} out of order"
        at = {(p, rec.offset): rec.value for p in range(PARTITIONS) for rec in logged[p]}
        lost = [(p, o, v) for p, o, v, _ in writer.acked if at.get((p, o)) != v]
        assert not lost, f"{len(lost)} acknowledged writes lost or moved, first {lost[:5]}\n{cluster.logs()}"

        # Committed offsets survive the loss of the coordinator.
        group = unique_group("replicated-group")
        consumer = group_consumer(cluster.bootstrap, group)
        consumer.subscribe([topic])
        total = sum(len(logged[p]) for p in range(PARTITIONS))
        seen = 0
        deadline = Deadline(90)
        while seen < total:
            assert not deadline.expired(), f"the group read {seen} of {total}"
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is None:
                    seen += 1
        consumer.commit(asynchronous=False)
        consumer.close()
        ends = {p: logged[p][-1].offset + 1 for p in range(PARTITIONS)}
        assert committed(cluster.bootstrap, group, topic, range(PARTITIONS)) == ends
        coordinator = client.describe_consumer_groups([group])[group].result(timeout=20).coordinator.id
        cluster.kill_node(coordinator)
        survivor = next(n for n in range(1, NODES + 1) if n != coordinator)
        deadline = Deadline(60)
        while True:
            try:
                if committed(cluster.address(survivor), group, topic, range(PARTITIONS)) == ends:
                    break
            except Exception:
                pass
            assert not deadline.expired(), f"committed offsets lost with coordinator {coordinator}\n{cluster.logs()}"
            time.sleep(0.5)
    finally:
        writer.stop.set()
        cluster.stop()
    report = ", ".join(f"{how} {seconds:.2f} s" for how, seconds in failovers.items())
    (tmp_path / "failover.txt").write_text(report + "\n")
    print(f"leader failover (kill → next acknowledged write): {report}")


def test_unclean_election_configured_on_the_servers_elects_an_out_of_sync_replica(tmp_path):
    """`unclean.leader.election.enable` in the servers' own configuration (spelled TRUE, as
    Kafka reads booleans) lets the controller elect an out-of-sync replica when the last in-sync
    one is gone, as Kafka's controller does; a topic that sets it to false keeps waiting for its
    in-sync replica."""
    from weir_cluster import DevCluster, free_base_port

    cluster = DevCluster(tmp_path / "cluster", free_base_port(), env={"WEIR_UNCLEAN_LEADER_ELECTION_ENABLE": "TRUE"})
    try:
        cluster.start()
        client = admin(cluster.bootstrap)
        unclean, clean = unique_topic("unclean"), unique_topic("clean")
        created = client.create_topics(
            [
                NewTopic(unclean, num_partitions=1, replica_assignment=[[1, 2]]),
                NewTopic(clean, num_partitions=1, replica_assignment=[[1, 2]], config={"unclean.leader.election.enable": "false"}),
            ]
        )
        for future in created.values():
            future.result(timeout=30)
        for topic in (unclean, clean):
            deadline = Deadline(30)
            while sorted(r.id for r in cluster.describe(topic).partitions[0].isr) != [1, 2]:
                assert not deadline.expired(), f"{topic}: ISR never filled"
                time.sleep(0.2)

        def leader_and_isr(topic: str) -> tuple[int, list[int]]:
            p = cluster.describe(topic).partitions[0]
            return (p.leader.id if p.leader is not None else -1), sorted(r.id for r in p.isr)

        # Node 2 goes away: node 1 leads alone, then goes away too, the last in sync.
        cluster.kill_node(2)
        deadline = Deadline(60)
        while any(leader_and_isr(t) != (1, [1]) for t in (unclean, clean)):
            assert not deadline.expired(), f"node 2 never left the ISRs: {leader_and_isr(unclean)}\n{cluster.logs()}"
            time.sleep(0.3)
        cluster.kill_node(1)
        cluster.restart_node(2)
        assert cluster.wait_serving(2, 60), cluster.exit_status(2)
        deadline = Deadline(60)
        while leader_and_isr(unclean) != (2, [2]):
            assert not deadline.expired(), f"the out-of-sync replica was not elected: {leader_and_isr(unclean)}\n{cluster.logs()}"
            time.sleep(0.3)
        assert leader_and_isr(clean) == (-1, [1])
    finally:
        cluster.kill()
