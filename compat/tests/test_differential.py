"""The differential suite: the same operations against Apache Kafka 4.4.0 and against Weir,
results normalised and compared.

The reference is one Apache Kafka node (KRaft, Kafka's default settings, empty) started by
kafka_reference.py through bench/kafka.sh; the broker under test is the module's Weir server.
Every test does the same thing to both, with the same names (unique per test: a random suffix
that the comparison replaces by ``<run>``), through a real client:

- librdkafka's AdminClient (confluent-kafka): CreateTopics refusals, DescribeConfigs of a new
  topic, and ListGroups/DescribeGroups of a group that committed an offset;
- librdkafka's transactional producer writing committed, aborted and fenced transactions, and
  librdkafka's and kafka-python's consumers reading them back both ways;
- kafka-python's KafkaAdminClient: DescribeConfigs, CreateTopics with validate_only, ListGroups;
- Kafka's own kafka-configs tool (ConfigCommand of kafka-tools): ``--describe --all`` of a
  topic and of the broker, and ``--alter --entity-default`` of a broker default;
- weir-diff (crates/weir-diff), last: raw request frames at exact API versions, answers
  compared field by field; it passes when every difference it finds is one that
  docs/kafka-differences.md lists, and leaves its report in target/differential-report.txt.

The operations run once per broker (in module-scoped fixtures where several tests look at
the same result); each test compares one aspect, and a failure shows a compact per-key diff,
kafka vs weir. A difference known today is left out of the comparison by name, with the
reason in docs/kafka-differences.md, and shown as it is by its own test (so that when it goes
away, that test fails and the list is corrected).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, OffsetSpec, ResourceType

from clients import Rec, admin, committed, create_topic, describe_group, drop_admin_client, produce_confluent
from clients import wait_for_partitions
from harness import REPO_ROOT, Deadline, wait_until, weir_binary
from kafka_reference import KafkaReference
from test_java import JARS_DIR, JVM_FLAGS
from test_transactions import commit_abort_commit, kafka_python_rows, librdkafka_rows

DIFF_TIMEOUT_S = 600
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"
COORDINATOR_NOT_READY = {
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


# Listed in docs/kafka-differences.md, as weir-diff treats them: flush.policy is Weir's own
# topic config (deliberate), and Kafka 4 reports min.insync.replicas as a dynamic cluster
# default (pending: Kafka writes it for eligible leader replicas, which Weir does not have). Whole-list comparisons leave the first
# out of the names and the second out of the sources; test_listed_topic_config_differences
# shows both.
WEIR_OWN_CONFIG = "flush.policy"
KAFKA_DYNAMIC_DEFAULT = "min.insync.replicas"


def compared(configs: dict[str, dict], *left_out: str) -> dict[str, dict]:
    """`configs` without flush.policy and the other names given."""
    return {name: entry for name, entry in configs.items() if name not in (WEIR_OWN_CONFIG, *left_out)}


# ---------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka_reference():
    """Apache Kafka 4.4.0, empty, with default settings, for the whole module."""
    assert shutil.which("java"), "java is not on PATH (scripts/test.sh installs a JDK)"
    reference = KafkaReference()
    reference.start()
    try:
        yield reference
    finally:
        drop_admin_client(reference.bootstrap)
        reference.stop()


@pytest.fixture(scope="module")
def brokers(kafka_reference, weir) -> dict[str, str]:
    """Bootstrap address per broker: {"kafka": ..., "weir": ...}."""
    assert weir.is_running(), "the module's Weir server is not running"
    return {"kafka": kafka_reference.bootstrap, "weir": weir.bootstrap}


class Run:
    """Names for one test, the same on both brokers; ``norm`` hides their random suffix."""

    def __init__(self):
        self.suffix = uuid.uuid4().hex[:10]

    def name(self, what: str) -> str:
        return f"diff-{what}-{self.suffix}"

    def norm(self, value):
        if isinstance(value, str):
            return value.replace(self.suffix, "<run>")
        if isinstance(value, dict):
            return {self.norm(k): self.norm(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.norm(v) for v in value)
        return value


# ---------------------------------------------------------------------------------
# Comparing: compact per-key diffs, kafka vs weir
# ---------------------------------------------------------------------------------

def key_diff(kafka: dict, weir: dict) -> list[str]:
    """The names only one broker lists."""
    lines = []
    missing, extra = sorted(set(kafka) - set(weir)), sorted(set(weir) - set(kafka))
    if missing:
        lines.append(f"only kafka lists ({len(missing)}): {', '.join(missing)}")
    if extra:
        lines.append(f"only weir lists ({len(extra)}): {', '.join(extra)}")
    return lines


def field_diff(kafka: dict[str, dict], weir: dict[str, dict], fields) -> list[str]:
    """For every name both list: the fields whose values differ."""
    lines = []
    for name in sorted(set(kafka) & set(weir)):
        for field in fields:
            k, w = kafka[name].get(field), weir[name].get(field)
            if k != w:
                lines.append(f"{name}: {field}: kafka {k!r}, weir {w!r}")
    return lines


def flat_diff(kafka: dict, weir: dict) -> list[str]:
    """The keys of two flat results whose values differ."""
    return [f"{k}: kafka {kafka.get(k)!r}, weir {weir.get(k)!r}"
            for k in sorted(set(kafka) | set(weir)) if kafka.get(k) != weir.get(k)]


def assert_same(lines: list[str], what: str) -> None:
    assert not lines, f"{what}: Kafka and Weir differ ({len(lines)}):\n  " + "\n  ".join(lines)


def commit_simple(bootstrap: str, topic: str, group: str, offset: int) -> None:
    """Commit ``offset`` of partition 0 for ``group`` from a consumer that assigned the
    partition and never joined the group (a simple group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = Deadline(30)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
                return
            except KafkaException as exc:
                # A Kafka that just created __consumer_offsets (its first FindCoordinator) may
                # not be the loaded coordinator yet for a moment.
                if exc.args[0].code() not in COORDINATOR_NOT_READY or deadline.expired():
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------
# librdkafka: CreateTopics refusals
# ---------------------------------------------------------------------------------

def refusals(run: Run) -> dict[str, NewTopic]:
    return {
        "zero-partitions": NewTopic(run.name("zero"), num_partitions=0, replication_factor=1),
        "replication-factor-2": NewTopic(run.name("rf2"), num_partitions=1, replication_factor=2),
        "invalid-name": NewTopic("bad name", num_partitions=1, replication_factor=1),
        "unknown-config": NewTopic(run.name("cfg"), num_partitions=1, replication_factor=1,
                                   config={"no.such.config": "1"}),
        "existing-topic": NewTopic(run.name("exists"), num_partitions=1, replication_factor=1),
    }


def create_outcome(bootstrap: str, topic: NewTopic) -> dict:
    """{"code": error code name, "message": error string} of one CreateTopics, one topic."""
    try:
        future = admin(bootstrap).create_topics([topic], request_timeout=20)[topic.topic]
    except KafkaException as exc:  # refused by librdkafka before anything was sent
        err = exc.args[0]
        return {"code": f"client-side {err.name()}", "message": err.str()}
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        err = exc.args[0]
        return {"code": err.name(), "message": err.str()}
    return {"code": "NO_ERROR", "message": ""}


@pytest.fixture(scope="module")
def rdk_refusals(brokers) -> dict[str, dict[str, dict]]:
    """Per broker, per refusal case: the error librdkafka reports."""
    run = Run()
    out = {}
    for broker, bootstrap in brokers.items():
        create_topic(bootstrap, run.name("exists"))
        out[broker] = {case: run.norm(create_outcome(bootstrap, topic)) for case, topic in refusals(run).items()}
    return out


def test_librdkafka_create_topics_refusal_codes(rdk_refusals):
    """Every refusal carries the same error code on both brokers."""
    assert_same(key_diff(rdk_refusals["kafka"], rdk_refusals["weir"])
                + field_diff(rdk_refusals["kafka"], rdk_refusals["weir"], ["code"]), "CreateTopics error codes")


@pytest.mark.parametrize("case", [
    "zero-partitions", "replication-factor-2", "invalid-name", "unknown-config", "existing-topic",
])
def test_librdkafka_create_topics_refusal_messages(rdk_refusals, case):
    """The error code and the error string of each refusal."""
    kafka, weir = rdk_refusals["kafka"][case], rdk_refusals["weir"][case]
    assert_same(flat_diff(kafka, weir), f"CreateTopics {case}")


# ---------------------------------------------------------------------------------
# librdkafka: DescribeConfigs of a new topic with one config set
# ---------------------------------------------------------------------------------

RDK_CONFIG_FLAGS = ("source", "is_read_only", "is_default", "is_sensitive")


@pytest.fixture(scope="module")
def rdk_topic_configs(brokers) -> dict[str, dict[str, dict]]:
    """Per broker: {config name: {value, source, is_read_only, is_default, is_sensitive}} of a
    topic created with retention.ms=3600000."""
    run = Run()
    topic = run.name("rdk-configs")
    out = {}
    for broker, bootstrap in brokers.items():
        create_topic(bootstrap, topic, config={"retention.ms": "3600000"})
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = admin(bootstrap).describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
        out[broker] = {
            name: {
                "value": e.value, "source": ConfigSource(e.source).name, "is_read_only": e.is_read_only,
                "is_default": e.is_default, "is_sensitive": e.is_sensitive,
            }
            for name, e in entries.items()
        }
    return out


@pytest.mark.parametrize("aspect", ["names", "values", "flags"])
def test_librdkafka_describe_configs(rdk_topic_configs, aspect):
    """The config names, the values of the names both list, and their source and flags."""
    kafka, weir = compared(rdk_topic_configs["kafka"]), compared(rdk_topic_configs["weir"])
    lines = {
        "names": lambda: key_diff(kafka, weir),
        "values": lambda: field_diff(kafka, weir, ["value"]),
        "flags": lambda: field_diff(compared(kafka, KAFKA_DYNAMIC_DEFAULT), weir, RDK_CONFIG_FLAGS),
    }[aspect]()
    assert_same(lines, f"DescribeConfigs (librdkafka) of a topic: {aspect}")


# ---------------------------------------------------------------------------------
# librdkafka: a simple group (one explicit commit) listed and described
# ---------------------------------------------------------------------------------

def test_librdkafka_lists_and_describes_a_simple_group(brokers):
    """A group whose only trace is an offset committed by an assign-only consumer: its listing,
    its description and the committed offset."""
    run = Run()
    topic, group = run.name("rdk-group"), run.name("rdk-g")
    seen = {}
    for broker, bootstrap in brokers.items():
        create_topic(bootstrap, topic)
        produce_confluent(bootstrap, topic, [Rec(key=b"k", value=b"v%d" % i, partition=0) for i in range(5)])
        commit_simple(bootstrap, topic, group, 3)
        listing = admin(bootstrap).list_consumer_groups(request_timeout=20).result(timeout=30)
        assert not listing.errors, f"{broker}: ListGroups errors {listing.errors}"
        listed = {g.group_id: g for g in listing.valid}.get(group)
        desc = describe_group(bootstrap, group)
        seen[broker] = {
            "listed": listed is not None,
            "list.state": listed and listed.state.name,
            "list.type": listed and listed.type.name,
            "list.is_simple_consumer_group": listed and listed.is_simple_consumer_group,
            "describe.state": desc.state.name,
            "describe.type": desc.type.name,
            "describe.is_simple_consumer_group": desc.is_simple_consumer_group,
            "describe.partition_assignor": desc.partition_assignor,
            "describe.members": len(desc.members),
            "describe.coordinator.id": desc.coordinator.id,
            "committed": committed(bootstrap, group, topic, [0]),
        }
    assert_same(flat_diff(seen["kafka"], seen["weir"]), "a simple group through librdkafka's admin client")


# ---------------------------------------------------------------------------------
# librdkafka and kafka-python: a topic holding transactions, read both ways
# ---------------------------------------------------------------------------------

def wait_transactions_complete(bootstrap: str, topic: str, partitions: int) -> None:
    """Waits (30 s at most) until no transaction is open on ``topic``: the last stable offset
    of every partition is its high watermark (ListOffsets read_committed and read_uncommitted)."""
    def latest(isolation: IsolationLevel) -> dict[int, int]:
        specs = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
        answers = admin(bootstrap).list_offsets(specs, isolation_level=isolation, request_timeout=20)
        return {tp.partition: future.result(timeout=30).offset for tp, future in answers.items()}

    wait_until(lambda: latest(IsolationLevel.READ_COMMITTED) == latest(IsolationLevel.READ_UNCOMMITTED), 30, 0.05,
               f"{topic}: transactions complete")


def write_transactions(bootstrap: str, topic: str, transactional_id: str) -> None:
    """On a three-partition ``topic``: plain records, then a librdkafka transactional producer's
    committed, aborted, committed transactions over every partition, a second producer of the
    same id fencing the first with a transaction open (the fence aborts it), then plain records."""
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        plain.produce(topic, value=f"p{i}".encode(), partition=i % 3)
    plain.flush(30)
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    first.init_transactions(60)
    commit_abort_commit(first, topic, "t", 4)
    first.begin_transaction()
    first.produce(topic, value=b"fenced", partition=0)
    first.flush(30)
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    second.init_transactions(60)
    second.begin_transaction()
    second.produce(topic, value=b"successor", partition=1)
    second.commit_transaction(30)
    # Both brokers write a commit's markers after answering it: the plain records go after them.
    wait_transactions_complete(bootstrap, topic, 3)
    for i in range(3, 6):
        plain.produce(topic, value=f"p{i}".encode(), partition=i % 3)
    plain.flush(30)


def test_transactions_read_the_same(brokers):
    """librdkafka writes plain records and committed, aborted and fenced transactions to both
    brokers; librdkafka and kafka-python consumers then read the same records at the same
    offsets from each, read_committed and read_uncommitted (the markers take the same offsets)."""
    run = Run()
    topic = run.name("txn-read")
    seen = {}
    for broker, bootstrap in brokers.items():
        create_topic(bootstrap, topic, partitions=3)
        write_transactions(bootstrap, topic, run.name("txn-writer"))
        seen[broker] = {
            (client, isolation): read(bootstrap, topic, 3, isolation)
            for client, read in (("librdkafka", librdkafka_rows), ("kafka-python", kafka_python_rows))
            for isolation in ("read_committed", "read_uncommitted")
        }
    for key in seen["kafka"]:
        assert seen["weir"][key] == seen["kafka"][key], f"{key}: kafka {seen['kafka'][key]}, weir {seen['weir'][key]}"
    committed = sorted(v for _, _, v in seen["kafka"][("librdkafka", "read_committed")])
    assert committed == sorted([f"p{i}" for i in range(6)] + [f"t{t}-{r}" for t in (0, 2) for r in range(4)]
                               + ["successor"])


# ---------------------------------------------------------------------------------
# kafka-python
# ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kp_admins(brokers):
    """A kafka-python KafkaAdminClient per broker."""
    from kafka.admin import KafkaAdminClient

    clients = {broker: KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
               for broker, bootstrap in brokers.items()}
    yield clients
    for client in clients.values():
        client.close()


KP_CONFIG_ATTRIBUTES = ("config_source", "read_only", "is_sensitive", "config_type", "documentation")


@pytest.fixture(scope="module")
def kp_topic_configs(brokers, kp_admins) -> dict[str, dict[str, dict]]:
    """Per broker: kafka-python's describe_configs (every config) of a topic created with
    cleanup.policy=compact by kafka-python."""
    from kafka.admin import ConfigResource as KConfigResource

    run = Run()
    topic = run.name("kp-configs")
    out = {}
    for broker, client in kp_admins.items():
        spec = {"num_partitions": 1, "replication_factor": 1, "configs": {"cleanup.policy": "compact"}}
        [created] = client.create_topics({topic: spec})["topics"]
        assert created["error_code"] == 0, f"{broker}: {created}"
        wait_for_partitions(brokers[broker], topic, 1)
        described = client.describe_configs([KConfigResource("TOPIC", topic)], config_filter="all")
        out[broker] = {name: {k: entry.get(k) for k in ("value", *KP_CONFIG_ATTRIBUTES)}
                       for name, entry in described["topic"][topic].items()}
    return out


@pytest.mark.parametrize("aspect", ["names", "values", "attributes"])
def test_kafka_python_describe_configs(kp_topic_configs, aspect):
    """The config names, the values of the names both list, and their other attributes."""
    kafka, weir = compared(kp_topic_configs["kafka"]), compared(kp_topic_configs["weir"])
    lines = {
        "names": lambda: key_diff(kafka, weir),
        "values": lambda: field_diff(kafka, weir, ["value"]),
        "attributes": lambda: field_diff(compared(kafka, KAFKA_DYNAMIC_DEFAULT), weir, KP_CONFIG_ATTRIBUTES),
    }[aspect]()
    assert_same(lines, f"describe_configs (kafka-python) of a topic: {aspect}")


@pytest.fixture(scope="module")
def kp_validate_only(kp_admins) -> dict[str, dict[str, dict]]:
    """Per broker, per case: what CreateTopics with validate_only answers, and whether the
    topic exists afterwards."""
    run = Run()
    cases = {
        "replication-factor-3": {"num_partitions": 1, "replication_factor": 3},
        "valid": {"num_partitions": 2, "replication_factor": 1},
    }
    out = {}
    for broker, client in kp_admins.items():
        out[broker] = {}
        for case, spec in cases.items():
            name = run.name(f"kp-{case}")
            [result] = client.create_topics({name: spec}, validate_only=True, raise_errors=False)["topics"]
            out[broker][case] = run.norm({
                "error_code": result["error_code"],
                "error_message": result["error_message"],
                "num_partitions": result["num_partitions"],
                "replication_factor": result["replication_factor"],
                "exists afterwards": name in client.list_topics(),
            })
    return out


@pytest.mark.parametrize("aspect", ["codes", "messages"])
def test_kafka_python_create_topics_validate_only(kp_validate_only, aspect):
    """validate_only refuses a replication factor of 3 on one broker and accepts a valid topic,
    creating neither."""
    fields = {"codes": ["error_code", "num_partitions", "replication_factor", "exists afterwards"],
              "messages": ["error_message"]}[aspect]
    kafka, weir = kp_validate_only["kafka"], kp_validate_only["weir"]
    assert_same(key_diff(kafka, weir) + field_diff(kafka, weir, fields), f"CreateTopics validate_only: {aspect}")


def test_kafka_python_lists_a_simple_group(brokers, kp_admins):
    """kafka-python's list_groups (its list_consumer_groups) shows a simple group the same way."""
    run = Run()
    topic, group = run.name("kp-group"), run.name("kp-g")
    seen = {}
    for broker, client in kp_admins.items():
        create_topic(brokers[broker], topic)
        commit_simple(brokers[broker], topic, group, 2)
        listed = [g for g in client.list_groups() if g["group_id"] == group]
        seen[broker] = {"listed": len(listed)}
        if listed:
            seen[broker].update({k: v for k, v in listed[0].items() if k != "group_id"})
    assert_same(flat_diff(seen["kafka"], seen["weir"]), "list_groups (kafka-python)")


# ---------------------------------------------------------------------------------
# Kafka's kafka-configs tool
# ---------------------------------------------------------------------------------

CONFIG_ENTRY_RE = re.compile(
    r"^  (?P<name>[^=\s]+)=(?P<value>.*) sensitive=(?P<sensitive>true|false) synonyms=\{(?P<synonyms>.*)\}$"
)
CONFIG_SYNONYM_RE = re.compile(r"([A-Z_]+):([^=]+)=.*?(?=, [A-Z_]+:|$)")


def parse_config_command(text: str) -> dict[str, dict]:
    """``kafka-configs --describe --all`` output, one entry per config:

        All configs for topic T are:
          retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}

    as {name: {"value", "sensitive", "synonyms": ["SOURCE:name", ...]}} (synonym values left
    out: they repeat the broker's own settings, such as its listener port)."""
    lines = text.splitlines()
    assert lines and lines[0].startswith("All configs for "), f"unexpected kafka-configs output:\n{text[:2000]}"
    out, unparsed = {}, []
    for line in lines[1:]:
        m = CONFIG_ENTRY_RE.match(line)
        if not m:
            unparsed.append(line)
            continue
        out[m["name"]] = {
            "value": m["value"],
            "sensitive": m["sensitive"] == "true",
            "synonyms": [f"{src}:{name}" for src, name in CONFIG_SYNONYM_RE.findall(m["synonyms"])],
        }
    assert not unparsed, "kafka-configs lines not understood:\n" + "\n".join(unparsed[:20])
    return out


def config_command(bootstrap: str, *args: str) -> str:
    """Run Kafka's ConfigCommand (kafka-tools, from .cache/kafka-jars); its output."""
    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    argv = ["--bootstrap-server", bootstrap, *args]
    proc = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", CONFIG_COMMAND, *argv],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, (
        f"kafka-configs {' '.join(argv)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def kafka_configs(bootstrap: str, *args: str) -> dict[str, dict]:
    """kafka-configs --describe's listing, parsed."""
    return parse_config_command(config_command(bootstrap, *args))


@pytest.fixture(scope="module")
def tool_topic_configs(brokers) -> dict[str, dict[str, dict]]:
    """Per broker: kafka-configs --describe --all of a topic created with retention.ms=3600000."""
    run = Run()
    topic = run.name("tool-configs")
    out = {}
    for broker, bootstrap in brokers.items():
        create_topic(bootstrap, topic, config={"retention.ms": "3600000"})
        out[broker] = run.norm(kafka_configs(bootstrap, "--describe", "--all", "--entity-type", "topics",
                                             "--entity-name", topic))
    return out


@pytest.mark.parametrize("aspect", ["keys", "values", "sources"])
def test_kafka_configs_describe_topic(tool_topic_configs, aspect):
    """The keys, the values (and sensitive flags) of the keys both list, and their sources (the
    synonyms the tool prints: source and name)."""
    kafka, weir = compared(tool_topic_configs["kafka"]), compared(tool_topic_configs["weir"])
    lines = {
        "keys": lambda: key_diff(kafka, weir),
        "values": lambda: field_diff(kafka, weir, ["value", "sensitive"]),
        "sources": lambda: field_diff(compared(kafka, KAFKA_DYNAMIC_DEFAULT), weir, ["synonyms"]),
    }[aspect]()
    assert_same(lines, f"kafka-configs --describe --all of a topic: {aspect}")


def test_listed_topic_config_differences(tool_topic_configs):
    """The two topic-config differences the comparisons above leave out, as listed: Weir's own
    flush.policy, and Kafka 4's min.insync.replicas as a dynamic cluster default."""
    kafka, weir = tool_topic_configs["kafka"], tool_topic_configs["weir"]
    assert WEIR_OWN_CONFIG in weir and WEIR_OWN_CONFIG not in kafka
    assert kafka[KAFKA_DYNAMIC_DEFAULT]["synonyms"][0].startswith("DYNAMIC_DEFAULT_BROKER_CONFIG:")
    assert weir[KAFKA_DYNAMIC_DEFAULT]["synonyms"] == [f"DEFAULT_CONFIG:{KAFKA_DYNAMIC_DEFAULT}"]


# Listed in docs/kafka-differences.md: Weir's own broker settings (Kafka has none of these
# names), and the broker defaults Weir bounds where Kafka leaves them unbounded.
WEIR_OWN_BROKER_CONFIGS = {
    "log.flush.policy", "producer.id.max.per.partition",
    "group.member.metadata.max.bytes", "group.metadata.max.bytes", "group.coordinator.metadata.max.bytes",
    # Kafka finalizes transaction.version as a cluster feature (kafka-features); Weir sets it per broker.
    "transaction.version",
    # The authorizer's settings: Kafka's StandardAuthorizer reads them from the broker's
    # properties, but kafka-configs does not list them; Weir does.
    "super.users", "allow.everyone.if.no.acl.found",
}
WEIR_BOUNDED_DEFAULTS = {"max.connections", "max.connections.per.ip", "queued.max.request.bytes"}
# Kafka's listen backlog is 50; Weir's absorbs a reconnect storm.
WEIR_LISTEN_BACKLOG = "socket.listen.backlog.size"
# The single-node reference must set these to 1 (at Kafka's defaults of 3 and 2 it could never
# create __consumer_offsets, __transaction_state or __share_group_state); Weir keeps Kafka's
# defaults and creates the topics with at most the live brokers.
REFERENCE_SINGLE_NODE = {
    "offsets.topic.replication.factor", "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr",
}
# Each broker's own endpoints: the reference runs a controller listener beside its broker one.
LISTENER_SETTINGS = {
    "listeners", "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
    "controller.listener.names",
}
# Defaults Weir chooses otherwise, as listed: SCRAM rather than GSSAPI (which Weir does not
# offer), PEM stores, the only kind it reads, and no default for the two ways of choosing how
# brokers reach each other (unset, the first PLAINTEXT listener and the listener's first
# mechanism).
WEIR_OWN_DEFAULTS = {
    "sasl.enabled.mechanisms": ("GSSAPI", "SCRAM-SHA-256,SCRAM-SHA-512"),
    "security.inter.broker.protocol": ("PLAINTEXT", "null"),
    "sasl.mechanism.inter.broker.protocol": ("GSSAPI", "null"),
    "ssl.keystore.type": ("JKS", "PEM"),
    "ssl.truststore.type": ("JKS", "PEM"),
}


@pytest.fixture(scope="module")
def tool_broker_configs(brokers) -> dict[str, dict[str, dict]]:
    """Per broker: kafka-configs --describe --all of broker 1."""
    return {broker: kafka_configs(bootstrap, "--describe", "--all", "--entity-type", "brokers", "--entity-name", "1")
            for broker, bootstrap in brokers.items()}


def test_kafka_configs_describe_broker_lists_only_kafkas_keys(tool_broker_configs):
    """Every broker config Weir lists is one Kafka lists under the same name (Weir lists the
    configs it has, not all of Kafka's, as listed; its own are named there)."""
    kafka, weir = tool_broker_configs["kafka"], tool_broker_configs["weir"]
    extra = sorted(set(weir) - set(kafka) - WEIR_OWN_BROKER_CONFIGS)
    assert not extra, f"kafka-configs lists broker configs on Weir that Kafka does not have: {', '.join(extra)}"
    assert WEIR_OWN_BROKER_CONFIGS <= set(weir)
    assert len(weir) >= 50, f"only {len(weir)} broker configs listed on Weir"


@pytest.mark.parametrize("aspect", ["values", "sources"])
def test_kafka_configs_describe_broker(tool_broker_configs, aspect):
    """For the broker configs both list: the values (and sensitive flags) and the synonyms,
    but for the defaults Weir bounds (listed) and the cluster's min.insync.replicas (pending)."""
    kafka, weir = tool_broker_configs["kafka"], tool_broker_configs["weir"]
    left_out = (WEIR_BOUNDED_DEFAULTS | REFERENCE_SINGLE_NODE | LISTENER_SETTINGS | set(WEIR_OWN_DEFAULTS)
                | {KAFKA_DYNAMIC_DEFAULT, WEIR_LISTEN_BACKLOG})
    kafka = {name: entry for name, entry in kafka.items() if name not in left_out}
    fields = {"values": ["value", "sensitive"], "sources": ["synonyms"]}[aspect]
    assert_same(field_diff(kafka, weir, fields), f"kafka-configs --describe --all of broker 1: {aspect}")


def test_listed_broker_config_differences(tool_broker_configs):
    """The broker-config differences the comparisons above leave out, as listed: the defaults
    Weir bounds or chooses otherwise, the listen backlog, the cluster's min.insync.replicas, and
    each broker's listeners (named the same on both)."""
    kafka, weir = tool_broker_configs["kafka"], tool_broker_configs["weir"]
    for name in sorted(WEIR_BOUNDED_DEFAULTS):
        assert kafka[name]["value"] in ("2147483647", "-1"), f"{name}: Kafka's is {kafka[name]['value']}"
        assert weir[name]["value"] not in ("2147483647", "-1"), f"{name}: Weir's is unbounded"
    assert kafka[KAFKA_DYNAMIC_DEFAULT]["synonyms"][0].startswith("DYNAMIC_DEFAULT_BROKER_CONFIG:")
    assert weir[KAFKA_DYNAMIC_DEFAULT]["synonyms"] == [f"DEFAULT_CONFIG:{KAFKA_DYNAMIC_DEFAULT}"]
    kafkas_defaults = {"transaction.state.log.min.isr": "2", "share.coordinator.state.topic.min.isr": "2"}
    for name in sorted(REFERENCE_SINGLE_NODE):
        assert (kafka[name]["value"], weir[name]["value"]) == ("1", kafkas_defaults.get(name, "3")), name
    assert (kafka[WEIR_LISTEN_BACKLOG]["value"], weir[WEIR_LISTEN_BACKLOG]["value"]) == ("50", "4096")
    for name, values in WEIR_OWN_DEFAULTS.items():
        assert (kafka[name]["value"], weir[name]["value"]) == values, name
    for name in LISTENER_SETTINGS:
        assert name in kafka and name in weir, name
    assert weir["listeners"]["value"].startswith("PLAINTEXT://127.0.0.1:")


def test_kafka_configs_alter_the_cluster_default(brokers):
    """kafka-configs --alter --entity-default on the broker: a topic without an override then
    shows the cluster-wide value and its source on both brokers, and after --delete-config the
    default again."""
    run = Run()
    topic = run.name("broker-default")
    default = ["--entity-type", "brokers", "--entity-default"]
    seen = {}
    for broker, bootstrap in brokers.items():
        create_topic(bootstrap, topic)
        describe = ["--describe", "--all", "--entity-type", "topics", "--entity-name", topic]
        def retention_is(value: str):
            entry = kafka_configs(bootstrap, *describe)["retention.ms"]
            return entry if entry["value"] == value else None

        config_command(bootstrap, "--alter", *default, "--add-config", "log.retention.ms=7200000")
        during = wait_until(lambda: retention_is("7200000"), 20, 0.2, f"{broker}: retention.ms after --alter")
        config_command(bootstrap, "--alter", *default, "--delete-config", "log.retention.ms")
        after = wait_until(lambda: retention_is("604800000"), 20, 0.2, f"{broker}: retention.ms after --delete")
        seen[broker] = (during, after)
    assert seen["weir"] == seen["kafka"]
    assert seen["weir"][0]["synonyms"][0] == "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms"


# ---------------------------------------------------------------------------------
# weir-diff: the raw scenarios (last: it takes longest)
# ---------------------------------------------------------------------------------

@pytest.mark.timeout(DIFF_TIMEOUT_S + 60)
def test_raw_scenarios_match_kafka(brokers, tmp_path):
    """weir-diff sends the same raw requests to both brokers and exits 0 when every difference
    it finds is one docs/kafka-differences.md lists (and every listed one still differs)."""
    binary = weir_binary().parent / "weir-diff"
    assert binary.is_file(), f"{binary} is missing: cargo build --release --workspace builds it"
    report = tmp_path / "differential-report.txt"
    kept = REPO_ROOT / "target" / "differential-report.txt"
    cmd = [str(binary), "--kafka", brokers["kafka"], "--weir", brokers["weir"], "--report", str(report)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DIFF_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"weir-diff did not finish within {DIFF_TIMEOUT_S}s\n$ {' '.join(cmd)}\n{_text(exc.stdout)}"
                    f"\n{_text(exc.stderr)[-4000:]}", pytrace=False)
    if report.is_file():
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(report, kept)
    code = proc.returncode
    assert code == 0, (
        f"weir-diff exited {code} (full report: {kept if report.is_file() else 'none written'})\n"
        f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    )


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
