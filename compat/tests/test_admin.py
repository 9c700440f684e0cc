"""Topic administration through librdkafka's AdminClient and kafka-python's
KafkaAdminClient: create, describe, delete, add partitions, describe and
alter configs, and the errors each of these must return.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from clients import (
    Rec,
    admin,
    assert_serving,
    create_topic,
    high_watermark,
    produce_confluent,
    read_confluent,
    topic_partition_counts,
    unique_topic,
    wait_for_partitions,
)
from harness import wait_until
import wire

STANDARD_TOPIC_CONFIGS = (
    "retention.ms",
    "retention.bytes",
    "segment.bytes",
    "segment.ms",
    "max.message.bytes",
    "cleanup.policy",
    "message.timestamp.type",
)
DEFAULT_SOURCES = {
    ConfigSource.DEFAULT_CONFIG.value,
    ConfigSource.STATIC_BROKER_CONFIG.value,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
}


def error_code(future, timeout: float = 30) -> int:
    """Error code a librdkafka admin future fails with (0 if it succeeds)."""
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        return exc.args[0].code()
    return 0


def describe(client, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return client.describe_configs([resource], request_timeout=20)[resource].result(timeout=30)


def values(entries: dict) -> dict[str, str]:
    return {name: entry.value for name, entry in entries.items()}


def incremental_alter(client, topic: str, *ops: tuple[str, str | None, AlterConfigOpType]):
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops],
    )
    return client.incremental_alter_configs([resource], request_timeout=20)[resource]


# ---------------------------------------------------------------------------------
# Create, describe, delete
# ---------------------------------------------------------------------------------

def test_create_and_describe_topic(bootstrap, weir):
    client = admin(bootstrap)
    topic = unique_topic("adm-create")
    create_topic(bootstrap, topic, partitions=5)
    [description] = [f.result(timeout=30) for f in client.describe_topics(TopicCollection([topic])).values()]
    assert description.name == topic
    assert str(description.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA"), "topic id must not be the zero uuid"
    assert sorted(p.id for p in description.partitions) == list(range(5))
    node_ids = {n.id for n in client.describe_cluster().result(timeout=30).nodes}
    for p in description.partitions:
        assert p.leader is not None and p.leader.id in node_ids
        assert [r.id for r in p.replicas] == [p.leader.id]
        assert [r.id for r in p.isr] == [p.leader.id]


def test_describe_cluster(bootstrap, weir):
    cluster = admin(bootstrap).describe_cluster(request_timeout=20).result(timeout=30)
    assert cluster.cluster_id
    [node] = cluster.nodes
    assert f"{node.host}:{node.port}" == bootstrap
    assert cluster.controller is not None and cluster.controller.id == node.id
    if not weir.is_external:
        assert cluster.cluster_id == weir.cluster_id, "cluster id differs from the one the server logged"
        if weir.node_id is not None:
            assert node.id == weir.node_id


def test_metadata_lists_broker_and_cluster_id(bootstrap, weir):
    md = admin(bootstrap).list_topics(timeout=20)
    assert md.cluster_id
    [broker] = md.brokers.values()
    assert f"{broker.host}:{broker.port}" == bootstrap
    assert md.controller_id == broker.id


def test_create_existing_topic_fails(bootstrap):
    topic = unique_topic("adm-exists")
    create_topic(bootstrap, topic, partitions=2)
    futures = admin(bootstrap).create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    assert error_code(futures[topic]) == KafkaError.TOPIC_ALREADY_EXISTS
    assert topic_partition_counts(bootstrap)[topic] == 2, "the existing topic must be left alone"


@pytest.mark.parametrize(
    "name",
    ["bad/name", "a" * 250, "..", "has space", "tab\tname", "ünicode"],
    ids=["slash", "250-chars", "dot-dot", "space", "tab", "non-ascii"],
)
def test_create_invalid_topic_name_fails(bootstrap, name):
    futures = admin(bootstrap).create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    assert error_code(futures[name]) == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION (17)
    assert name not in topic_partition_counts(bootstrap)


def test_create_topic_with_bad_partition_count_fails(bootstrap):
    topic = unique_topic("adm-zero")
    futures = admin(bootstrap).create_topics([NewTopic(topic, num_partitions=0, replication_factor=1)])
    assert error_code(futures[topic]) == KafkaError.INVALID_PARTITIONS
    assert topic not in topic_partition_counts(bootstrap)


def test_create_topic_with_bad_replication_factor_fails(bootstrap):
    topic = unique_topic("adm-rf")
    futures = admin(bootstrap).create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])
    assert error_code(futures[topic]) == KafkaError.INVALID_REPLICATION_FACTOR
    assert topic not in topic_partition_counts(bootstrap)


def test_validate_only_create_does_not_create(bootstrap):
    topic = unique_topic("adm-validate")
    futures = admin(bootstrap).create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=1)], validate_only=True
    )
    assert error_code(futures[topic]) == 0
    assert topic not in topic_partition_counts(bootstrap)


def test_delete_topic(bootstrap):
    client = admin(bootstrap)
    topic = unique_topic("adm-delete")
    create_topic(bootstrap, topic, partitions=2)
    produce_confluent(bootstrap, topic, [Rec(key=b"k", value=b"old data", partition=1)])

    assert error_code(client.delete_topics([topic], request_timeout=20)[topic]) == 0
    wait_until(lambda: topic not in topic_partition_counts(bootstrap, client), 30, what=f"{topic} to disappear")

    # Deleting it again: it is unknown.
    assert error_code(client.delete_topics([topic], request_timeout=20)[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART

    # A new topic with the same name starts empty, with a new topic id.
    create_topic(bootstrap, topic, partitions=1)
    assert read_confluent(bootstrap, topic, [0]) == {0: []}


def test_delete_unknown_topic_fails(bootstrap):
    topic = unique_topic("adm-never")
    futures = admin(bootstrap).delete_topics([topic], request_timeout=20)
    assert error_code(futures[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_topic_id_changes_when_topic_is_recreated(bootstrap):
    client = admin(bootstrap)
    topic = unique_topic("adm-id")
    create_topic(bootstrap, topic, partitions=1)
    first = client.describe_topics(TopicCollection([topic]))[topic].result(timeout=30).topic_id
    assert error_code(client.delete_topics([topic])[topic]) == 0
    wait_until(lambda: topic not in topic_partition_counts(bootstrap, client), 30, what=f"{topic} to disappear")
    create_topic(bootstrap, topic, partitions=1)
    second = client.describe_topics(TopicCollection([topic]))[topic].result(timeout=30).topic_id
    assert str(first) != str(second)


# ---------------------------------------------------------------------------------
# CreatePartitions
# ---------------------------------------------------------------------------------

def test_create_partitions(bootstrap):
    client = admin(bootstrap)
    topic = unique_topic("adm-grow")
    create_topic(bootstrap, topic, partitions=2)
    before = [Rec(key=b"a", value=b"before", partition=p) for p in (0, 1)]
    produce_confluent(bootstrap, topic, before)

    futures = client.create_partitions([NewPartitions(topic, 5)], request_timeout=20)
    assert error_code(futures[topic]) == 0
    wait_for_partitions(bootstrap, topic, 5)

    # The new partitions take writes; the old ones keep their data.
    after = [Rec(key=b"b", value=b"after-%d" % p, partition=p) for p in range(5)]
    delivered = produce_confluent(bootstrap, topic, after, **{"topic.metadata.refresh.interval.ms": 500})
    assert [(p, o) for p, o, _ in delivered] == [(0, 1), (1, 1), (2, 0), (3, 0), (4, 0)]
    log = read_confluent(bootstrap, topic, range(5))
    assert {p: [r.value for r in rows] for p, rows in log.items()} == {
        0: [b"before", b"after-0"],
        1: [b"before", b"after-1"],
        2: [b"after-2"],
        3: [b"after-3"],
        4: [b"after-4"],
    }


@pytest.mark.parametrize("new_total", [5, 3])
def test_create_partitions_cannot_shrink_or_keep(bootstrap, new_total):
    topic = unique_topic("adm-shrink")
    create_topic(bootstrap, topic, partitions=5)
    futures = admin(bootstrap).create_partitions([NewPartitions(topic, new_total)], request_timeout=20)
    assert error_code(futures[topic]) == KafkaError.INVALID_PARTITIONS
    assert topic_partition_counts(bootstrap)[topic] == 5


def test_create_partitions_unknown_topic(bootstrap):
    topic = unique_topic("adm-nope")
    futures = admin(bootstrap).create_partitions([NewPartitions(topic, 3)], request_timeout=20)
    assert error_code(futures[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART


# ---------------------------------------------------------------------------------
# Configs via librdkafka
# ---------------------------------------------------------------------------------

def test_describe_configs(bootstrap, weir):
    client = admin(bootstrap)
    topic = unique_topic("cfg-describe")
    create_topic(bootstrap, topic, partitions=1, config={"retention.ms": "86400000", "segment.bytes": "1048576"})
    entries = describe(client, topic)

    missing = [name for name in STANDARD_TOPIC_CONFIGS if name not in entries]
    assert not missing, f"describe_configs lacks {missing}; it returned {sorted(entries)}"
    for name in STANDARD_TOPIC_CONFIGS:
        assert entries[name].value not in (None, ""), f"{name} has no value"
        assert not entries[name].is_sensitive

    assert entries["retention.ms"].value == "86400000"
    assert entries["segment.bytes"].value == "1048576"
    for overridden in ("retention.ms", "segment.bytes"):
        assert entries[overridden].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, overridden
        assert not entries[overridden].is_default
    for defaulted in ("retention.bytes", "max.message.bytes", "cleanup.policy"):
        assert entries[defaulted].source in DEFAULT_SOURCES, (defaulted, entries[defaulted].source)
    assert entries["cleanup.policy"].value == "delete"
    assert entries["message.timestamp.type"].value == "CreateTime"
    int(entries["retention.bytes"].value)
    int(entries["segment.ms"].value)
    int(entries["max.message.bytes"].value)
    if not weir.is_external:
        assert entries["flush.policy"].value == "acks-all"


def test_describe_configs_unknown_topic(bootstrap):
    resource = ConfigResource(ResourceType.TOPIC, unique_topic("cfg-missing"))
    future = admin(bootstrap).describe_configs([resource], request_timeout=20)[resource]
    assert error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_incremental_alter_configs(bootstrap, weir):
    client = admin(bootstrap)
    topic = unique_topic("cfg-alter")
    create_topic(bootstrap, topic, partitions=1, config={"segment.bytes": "1048576"})

    assert error_code(incremental_alter(client, topic, ("retention.ms", "3600000", AlterConfigOpType.SET))) == 0
    entries = describe(client, topic)
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["segment.bytes"].value == "1048576", "an incremental alter must keep other overrides"

    ops = [
        ("retention.bytes", "10485760", AlterConfigOpType.SET),
        ("max.message.bytes", "2000000", AlterConfigOpType.SET),
    ]
    if not weir.is_external:
        ops.append(("flush.policy", "always", AlterConfigOpType.SET))
    assert error_code(incremental_alter(client, topic, *ops)) == 0
    after = values(describe(client, topic))
    assert after["retention.bytes"] == "10485760"
    assert after["max.message.bytes"] == "2000000"
    if not weir.is_external:
        assert after["flush.policy"] == "always"

    # DELETE returns a key to its default.
    default_retention = values(describe(client, unique_default_topic(bootstrap)))["retention.ms"]
    assert error_code(incremental_alter(client, topic, ("retention.ms", None, AlterConfigOpType.DELETE))) == 0
    entries = describe(client, topic)
    assert entries["retention.ms"].value == default_retention
    assert entries["retention.ms"].source in DEFAULT_SOURCES


def unique_default_topic(bootstrap: str) -> str:
    topic = unique_topic("cfg-defaults")
    create_topic(bootstrap, topic, partitions=1)
    return topic


def test_alter_configs_legacy_api(bootstrap):
    """AlterConfigs (not incremental) replaces the topic's whole set of overrides."""
    client = admin(bootstrap)
    topic = unique_topic("cfg-legacy")
    create_topic(bootstrap, topic, partitions=1, config={"segment.bytes": "1048576"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "7200000"})
    assert error_code(client.alter_configs([resource], request_timeout=20)[resource]) == 0
    entries = describe(client, topic)
    assert entries["retention.ms"].value == "7200000"
    assert entries["segment.bytes"].source in DEFAULT_SOURCES, "AlterConfigs resets keys it does not name"


@pytest.mark.parametrize(
    "name,value",
    [
        ("foo.bar", "1"),
        ("retention.ms", "not-a-number"),
        ("segment.bytes", "-5"),
    ],
)
def test_alter_configs_invalid_is_refused_and_changes_nothing(bootstrap, name, value):
    client = admin(bootstrap)
    topic = unique_topic("cfg-invalid")
    create_topic(bootstrap, topic, partitions=1, config={"retention.ms": "123456789"})
    before = values(describe(client, topic))

    # Together with a valid change: the whole alteration is refused.
    future = incremental_alter(
        client,
        topic,
        ("retention.bytes", "999999", AlterConfigOpType.SET),
        (name, value, AlterConfigOpType.SET),
    )
    assert error_code(future) == KafkaError.INVALID_CONFIG
    assert values(describe(client, topic)) == before


@pytest.mark.parametrize(
    "name,value",
    [
        ("cleanup.policy", "shred"),
        ("cleanup.policy", "compact,shred"),
        ("compression.type", "brotli"),
        ("message.timestamp.type", "LogTime"),
        ("remote.storage.enable", "true"),
        ("flush.policy", "sometimes"),
    ],
)
def test_unsupported_config_values_are_refused(bootstrap, weir_only, name, value):
    """Values Kafka does not have, and tiered storage (which Weir does not have yet), are
    refused instead of silently ignored."""
    client = admin(bootstrap)
    topic = unique_topic("cfg-unsupported")
    create_topic(bootstrap, topic, partitions=1)
    before = values(describe(client, topic))
    assert error_code(incremental_alter(client, topic, (name, value, AlterConfigOpType.SET))) == KafkaError.INVALID_CONFIG
    assert values(describe(client, topic)) == before

    # Creating a topic with it fails the same way, and creates nothing.
    other = unique_topic("cfg-unsupported-create")
    futures = client.create_topics([NewTopic(other, num_partitions=1, replication_factor=1, config={name: value})])
    assert error_code(futures[other]) == KafkaError.INVALID_CONFIG
    assert other not in topic_partition_counts(bootstrap)


HOSTILE_CONFIG_VALUES = (
    "", " ", "abc", "-1", "-2147483649", "9223372036854775808", "1e400", "NaN", "-0.5", "1.5", "0x10",
    "true", "compact,,delete", "\u00e9", "9" * 400,
)


def test_every_config_refuses_hostile_values_or_takes_them_and_the_broker_serves(bootstrap, weir_only):
    """Every topic config and every broker config changeable at runtime, set (incrementally) to
    values an attacker or a typo gives: each is refused (INVALID_CONFIG for a topic,
    INVALID_REQUEST for a broker, as Kafka answers) or taken, and
    whatever was taken is deleted again; the broker keeps serving throughout: a value that
    passes the check but not the parse where it is used would stop the process."""
    client = admin(bootstrap)
    topic = unique_topic("cfg-hostile")
    create_topic(bootstrap, topic, partitions=1)
    targets = [ConfigResource(ResourceType.TOPIC, topic)]
    # (Weir's own: it sets every dynamic broker config, which on another broker may include
    # its listeners.)
    broker = ConfigResource(ResourceType.BROKER, str(weir_only.node_id))
    dynamic = [name for name, entry in client.describe_configs([broker])[broker].result(timeout=30).items() if not entry.is_read_only]
    # (librdkafka cannot name the cluster-wide default, a broker resource with an empty name.)
    targets.append(broker)
    # As Kafka answers: a topic's bad value is INVALID_CONFIG, a broker's INVALID_REQUEST.
    refusal = {ResourceType.TOPIC: KafkaError.INVALID_CONFIG, ResourceType.BROKER: KafkaError.INVALID_REQUEST}
    taken, refused, other = 0, 0, {}
    for target in targets:
        names = list(describe(client, topic)) if target.restype == ResourceType.TOPIC else dynamic
        for name in names:
            for value in HOSTILE_CONFIG_VALUES:
                resource = ConfigResource(target.restype, target.name, incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
                code = error_code(client.incremental_alter_configs([resource], request_timeout=20)[resource])
                if code == 0:
                    taken += 1
                    undo = ConfigResource(target.restype, target.name, incremental_configs=[ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)])
                    assert error_code(client.incremental_alter_configs([undo], request_timeout=20)[undo]) == 0, (target, name)
                elif code == refusal[target.restype]:
                    refused += 1
                else:
                    other[(target.name, name, value)] = code
        assert_serving(bootstrap, topic)
    print(f"{taken} values taken (and deleted), {refused} refused, over {len(targets)} resources")
    assert not other, f"answered with another error: {other}"
    assert refused > taken > 0
    produce_confluent(bootstrap, topic, [Rec(key=None, value=b"after", partition=0)])
    assert read_confluent(bootstrap, topic, [0])[0][-1].value == b"after"


NOT_ENOUGH_REPLICAS = 19


def test_min_insync_replicas_refuses_acks_all(bootstrap):
    """As in Kafka, min.insync.replicas above the number of in-sync replicas is a valid
    setting; acks=all writes are then refused with NOT_ENOUGH_REPLICAS, acks=1 writes go in."""
    client = admin(bootstrap)
    topic = unique_topic("min-isr")
    create_topic(bootstrap, topic, partitions=1, config={"min.insync.replicas": "2"})
    assert values(describe(client, topic))["min.insync.replicas"] == "2"
    batch = wire.record_batch([(b"k", b"v")], base_timestamp=int(time.time() * 1000))
    for acks, expected in ((-1, NOT_ENOUGH_REPLICAS), (1, 0)):
        with wire.Connection(bootstrap) as conn:
            conn.send(wire.produce_request(9, 40, topic, 0, batch, acks=acks))
            parsed = wire.parse_produce_response(9, conn.recv_frame(timeout=30))
        assert parsed["error_code"] == expected, (acks, parsed)
    assert high_watermark(bootstrap, topic, 0) == 1


def test_create_topic_with_unknown_config_fails(bootstrap):
    client = admin(bootstrap)
    topic = unique_topic("cfg-create-unknown")
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1, config={"foo.bar": "1"})]
    )
    assert error_code(futures[topic]) == KafkaError.INVALID_CONFIG
    assert topic not in topic_partition_counts(bootstrap)


# ---------------------------------------------------------------------------------
# The same through kafka-python
# ---------------------------------------------------------------------------------

@pytest.fixture
def kp_admin(bootstrap):
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def test_kafka_python_create_describe_delete(bootstrap, kp_admin):
    topic = unique_topic("kp-topic")
    result = kp_admin.create_topics(
        {topic: {"num_partitions": 3, "replication_factor": 1, "configs": {"retention.ms": "5000000"}}}
    )
    [created] = result["topics"]
    assert (created["name"], created["error_code"]) == (topic, 0)
    wait_for_partitions(bootstrap, topic, 3)

    [described] = kp_admin.describe_topics([topic])
    assert described["name"] == topic and described["error_code"] == 0
    assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]
    assert topic in kp_admin.list_topics()

    # CreateTopics again: TopicAlreadyExists.
    from kafka.errors import TopicAlreadyExistsError

    with pytest.raises(TopicAlreadyExistsError):
        kp_admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})

    deleted = kp_admin.delete_topics([topic])
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(topic, 0)]
    wait_until(lambda: topic not in kp_admin.list_topics(), 30, what=f"{topic} to disappear")


def test_kafka_python_invalid_topic_name(kp_admin):
    from kafka.errors import InvalidTopicError

    with pytest.raises(InvalidTopicError):
        kp_admin.create_topics({"bad/name": {"num_partitions": 1, "replication_factor": 1}})


def test_kafka_python_describe_and_alter_configs(bootstrap, kp_admin, weir):
    from kafka.admin import ConfigResource as KConfigResource

    topic = unique_topic("kp-cfg")
    create_topic(bootstrap, topic, partitions=1, config={"retention.ms": "86400000"})

    def current(config_filter="all"):
        result = kp_admin.describe_configs([KConfigResource("TOPIC", topic)], config_filter=config_filter)
        return result["topic"][topic]

    configs = current()
    for name in STANDARD_TOPIC_CONFIGS:
        assert name in configs, f"kafka-python describe_configs lacks {name}"
    assert configs["retention.ms"]["value"] == "86400000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    # The 'modified' view (kafka-python's default) shows exactly the override.
    assert set(current("modified")) == {"retention.ms"}

    # Incremental alter (IncrementalAlterConfigs).
    result = kp_admin.alter_configs([KConfigResource("TOPIC", topic, configs={"retention.bytes": "1048576"})])
    assert result == {"topic": {topic: "OK"}}
    configs = current()
    assert configs["retention.bytes"]["value"] == "1048576"
    assert configs["retention.ms"]["value"] == "86400000"

    # Legacy alter (AlterConfigs); kafka-python carries the other overrides along.
    result = kp_admin.alter_configs(
        [KConfigResource("TOPIC", topic, configs={"retention.ms": "7200000"})], incremental=False
    )
    assert result == {"topic": {topic: "OK"}}
    configs = current()
    assert configs["retention.ms"]["value"] == "7200000"
    assert configs["retention.bytes"]["value"] == "1048576"

    # An unknown key is refused by the broker with INVALID_CONFIG and changes nothing.
    before = {k: v["value"] for k, v in current().items()}
    result = kp_admin.alter_configs(
        [KConfigResource("TOPIC", topic, configs={"foo.bar": "1", "retention.ms": "1"})], raise_on_unknown=False
    )
    assert "InvalidConfigurationError" in result["topic"][topic] or "[Error 40]" in result["topic"][topic], result
    assert {k: v["value"] for k, v in current().items()} == before

    if not weir.is_external:
        result = kp_admin.alter_configs([KConfigResource("TOPIC", topic, configs={"cleanup.policy": "shred"})])
        assert "[Error 40]" in result["topic"][topic], result
        assert current()["cleanup.policy"]["value"] == "delete"
