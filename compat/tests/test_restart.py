"""Clean restart: SIGTERM exits 0, and a server started again on the same data
dir has the same cluster id, topics, partition counts, topic ids, configs and
data, and carries on appending where it left off.
"""

from __future__ import annotations

import random

from confluent_kafka import TopicCollection
from confluent_kafka.admin import ConfigResource, ResourceType

from clients import (
    Rec,
    admin,
    assert_same_log,
    create_topic,
    expected_log,
    make_records,
    produce,
    read_back,
    topic_partition_counts,
    unique_topic,
    wait_for_partitions,
)
from harness import wait_until


def snapshot(bootstrap: str, topics: dict[str, int]) -> dict:
    """Everything a restart must preserve, as plain data."""
    client = admin(bootstrap)
    cluster = client.describe_cluster(request_timeout=20).result(timeout=30)
    described = client.describe_topics(TopicCollection(list(topics)), request_timeout=20)
    ids = {name: str(f.result(timeout=30).topic_id) for name, f in described.items()}
    resources = {name: ConfigResource(ResourceType.TOPIC, name) for name in topics}
    futures = client.describe_configs(list(resources.values()), request_timeout=20)
    configs = {
        name: {k: (e.value, e.source) for k, e in futures[resources[name]].result(timeout=30).items()}
        for name in topics
    }
    counts = topic_partition_counts(bootstrap)
    return {
        "cluster_id": cluster.cluster_id,
        "node_ids": sorted(n.id for n in cluster.nodes),
        "partitions": {name: counts.get(name) for name in topics},
        "topic_ids": ids,
        "configs": configs,
    }


def read_all(bootstrap: str, topics: dict[str, int], reader: str = "librdkafka") -> dict:
    return {name: read_back(reader, bootstrap, name, range(n)) for name, n in topics.items()}


def test_restart_preserves_everything(restartable_weir):
    weir = restartable_weir
    bootstrap = weir.bootstrap
    client = admin(bootstrap)

    configured = unique_topic("rs-configured")  # config overrides, 1 MiB segments
    create_topic(bootstrap, configured, partitions=3, config={
        "retention.ms": "123456789",
        "segment.bytes": "1048576",
        "max.message.bytes": "2000000",
    })
    plain = unique_topic("rs-plain")
    create_topic(bootstrap, plain, partitions=1)
    grown = unique_topic("rs-grown")  # partitions added after creation
    create_topic(bootstrap, grown, partitions=1)
    from confluent_kafka.admin import NewPartitions

    client.create_partitions([NewPartitions(grown, 4)])[grown].result(timeout=30)
    wait_for_partitions(bootstrap, grown, 4)
    doomed = unique_topic("rs-deleted")  # deleted before the restart: stays deleted
    create_topic(bootstrap, doomed, partitions=2)
    client.delete_topics([doomed])[doomed].result(timeout=30)
    wait_until(lambda: doomed not in topic_partition_counts(bootstrap), 30, what=f"{doomed} to disappear")

    topics = {configured: 3, plain: 1, grown: 4}

    # Enough incompressible data to roll several 1 MiB segments per partition.
    rng = random.Random(5)
    records = make_records(3000, seed=11, tag="restart")
    records += [Rec(key=b"big-%d" % i, value=rng.randbytes(12000), headers=(("n", b"%d" % i),)) for i in range(400)]
    delivered = produce("librdkafka", bootstrap, configured, records, **{"compression.type": "zstd"})
    expected_configured = expected_log(records, delivered)
    plain_records = [Rec(key=b"p%d" % i, value=b"plain-%d" % i) for i in range(1000)]
    expected_plain = expected_log(plain_records, produce("kafka-python", bootstrap, plain, plain_records, enable_idempotence=True))
    grown_records = [Rec(key=b"g", value=b"grown-%d" % p, partition=p) for p in range(4)]
    expected_grown = expected_log(grown_records, produce("librdkafka", bootstrap, grown, grown_records))

    before = snapshot(bootstrap, topics)
    assert before["partitions"] == topics
    data_before = read_all(bootstrap, topics)
    assert_same_log(data_before[configured], expected_configured, context="before restart")
    assert_same_log(data_before[plain], expected_plain, context="before restart")
    assert_same_log(data_before[grown], expected_grown, context="before restart")

    for round_no in (1, 2):
        code = weir.stop()
        assert code == 0, f"SIGTERM exit code {code}"
        weir.start()

        after = snapshot(bootstrap, topics)
        assert after == before, f"state changed across restart #{round_no}"
        assert doomed not in topic_partition_counts(bootstrap), "a deleted topic came back"
        for reader in ("librdkafka", "kafka-python"):
            data_after = read_all(bootstrap, topics, reader)
            for name in topics:
                assert_same_log(data_after[name], data_before[name], context=f"{name} after restart #{round_no} ({reader})")

    # Writing continues at the old end offsets; a new idempotent producer gets a
    # fresh producer id and its records are appended, not mistaken for duplicates.
    more = [Rec(key=b"p%d" % i, value=b"after-restart-%d" % i) for i in range(500)]
    delivered = produce("librdkafka", bootstrap, plain, more, **{"enable.idempotence": True})
    assert [o for _p, o, _t in delivered] == list(range(1000, 1500))
    more_kp = [Rec(key=b"q%d" % i, value=b"kp-after-restart-%d" % i) for i in range(200)]
    delivered_kp = produce("kafka-python", bootstrap, plain, more_kp, enable_idempotence=True)
    assert [o for _p, o, _t in delivered_kp] == list(range(1500, 1700))
    log = read_back("kafka-python", bootstrap, plain, [0])[0]
    assert [r.value for r in log] == (
        [r.value for r in plain_records] + [r.value for r in more] + [r.value for r in more_kp]
    )

    # And a topic created after the restart gets an id no other topic has.
    fresh = unique_topic("rs-fresh")
    create_topic(bootstrap, fresh, partitions=1)
    fresh_id = str(client.describe_topics(TopicCollection([fresh]))[fresh].result(timeout=30).topic_id)
    assert fresh_id not in before["topic_ids"].values()


def test_sigterm_while_idle_exits_zero(restartable_weir):
    weir = restartable_weir
    assert weir.stop() == 0
    weir.start()
    # The server is usable again.
    topic = unique_topic("rs-idle")
    create_topic(weir.bootstrap, topic, partitions=1)
    delivered = produce("librdkafka", weir.bootstrap, topic, [Rec(key=b"k", value=b"v")])
    assert [(p, o) for p, o, _t in delivered] == [(0, 0)]
