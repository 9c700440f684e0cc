"""Attacks on a three-node cluster over real sockets: a client posing as a follower must get no
write acknowledged.
"""

from __future__ import annotations

import base64
import signal
import time

from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic

import wire
from clients import admin, confluent_consumer, read_confluent, unique_topic
from harness import Deadline
from test_cluster import cluster  # noqa: F401  (the fixture)


def topic_id_bytes(client, topic: str) -> bytes:
    described = client.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    return base64.urlsafe_b64decode(str(described.topic_id) + "==")


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = confluent_consumer(bootstrap)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)[1]
    finally:
        consumer.close()


def test_a_client_posing_as_a_replica_gets_no_write_acknowledged(cluster):  # noqa: F811
    """Follower 3 of a partition on [1, 3] with min ISR 2 is paused, so an acks=all write
    waits. A plain client then fetches as replica 3 at the leader's log end: Fetch v11 (no
    broker epoch) and Fetch v16 with guessed epochs. Each is refused by closing the connection
    and the write stays unacknowledged; the leader is then killed and node 3 resumed, and every
    write that was acknowledged is there (before, the forged fetch moved the high watermark,
    the write was acknowledged at once, and node 3 led without it)."""
    cluster.start()
    client = admin(cluster.bootstrap)
    topic = unique_topic("posed")
    client.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 3]], config={"min.insync.replicas": "2"})])[topic].result(timeout=30)
    deadline = Deadline(60)
    while [r.id for r in cluster.describe(topic).partitions[0].isr] != [1, 3]:
        assert not deadline.expired(), cluster.logs()
        time.sleep(0.3)
    topic_id = topic_id_bytes(client, topic)
    leader = cluster.leader(topic, 0)
    assert leader == 1, f"the preferred leader of [1, 3] should lead, got {leader}"
    batch = wire.record_batch([(None, b"acknowledged-before")], int(time.time() * 1000))
    with wire.Connection(cluster.address(1)) as producer:
        producer.send(wire.produce_request(9, 1, topic, 0, batch))
        answer = wire.parse_produce_response(9, producer.recv_frame(30))
        assert answer["error_code"] == 0, answer
    acknowledged = {answer["base_offset"]: b"acknowledged-before"}

    cluster.signal_node(3, signal.SIGSTOP)
    paused_at = time.monotonic()
    refused = 0
    try:
        pending = wire.Connection(cluster.address(1), timeout=60)
        batch = wire.record_batch([(None, b"must-wait-for-3")], int(time.time() * 1000))
        pending.send(wire.produce_request(9, 2, topic, 0, batch, timeout_ms=60000))
        time.sleep(0.5)
        log_end = answer["base_offset"] + 2
        # Epochs a client might guess: small numbers (an epoch that is a metadata log position),
        # negative ones, and large ones.
        forged = [wire.fetch_request(7, topic, 0, log_end, 1024 * 1024, replica_id=3)]
        forged += [wire.replica_fetch_request(8, topic_id, 0, log_end, 3, epoch) for epoch in (*range(0, 200, 7), -1, 1 << 40, (1 << 63) - 1)]
        for request in forged:
            with wire.Connection(cluster.address(1)) as attacker:
                attacker.send(request)
                outcome = attacker.wait_closed_or_reply(10)
                assert outcome == "closed", "a fetch posing as replica 3 was answered"
                refused += 1
        pending.sock.settimeout(2)
        try:
            reply = pending.recv_frame(2)
        except TimeoutError:
            reply = None
        assert reply is None, f"the write was answered while its follower was paused: {wire.parse_produce_response(9, reply)}"
        # The high watermark has not moved past the write, and 3 is still in the ISR (the
        # write waits for it alone).
        assert high_watermark(cluster.address(1), topic) == log_end - 1
        assert [r.id for r in cluster.describe(topic).partitions[0].isr] == [1, 3]
        print(f"paused for {time.monotonic() - paused_at:.1f} s")

        cluster.kill_node(1)
        pending.close()
    finally:
        cluster.signal_node(3, signal.SIGCONT)
    cluster.restart_node(1)
    deadline = Deadline(90)
    while True:
        try:
            logged = read_confluent(cluster.bootstrap, topic, [0])
            break
        except Exception:
            assert not deadline.expired(), cluster.logs()
            time.sleep(1)
    at = {rec.offset: rec.value for rec in logged[0]}
    lost = {offset: value for offset, value in acknowledged.items() if at.get(offset) != value}
    assert not lost, f"acknowledged writes lost: {lost}\n{cluster.logs()}"
    server_log = (cluster.node_dir(1) / "server.log").read_text(errors="replace")
    assert "posing as replica 3" in server_log, cluster.logs()
    print(f"forged replica fetches: {refused} refused with the connection closed, none acknowledged a write")
