"""Transactions: the transaction coordinator, its internal topic `__transaction_state`,
InitProducerId for transactional ids, and transactions committed and aborted, through
librdkafka, the Java client and raw requests.

A transactional id's coordinator is the leader of its partition of `__transaction_state`
(created on the first FindCoordinator for a transactional id). InitProducerId gives the id's
producer its producer id and the next epoch, stored before it is answered: a second producer
of the same id fences the first (aborting a transaction it left open), a producer may bump its
own epoch (KIP-360), and epochs go on after a restart. AddPartitionsToTxn and EndTxn run a
transaction; its end writes a marker (a control batch) on each of its partitions.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

import weir_cli
import wire
from clients import admin, create_topic, unique_topic, wait_for_partitions
from harness import Deadline
from test_franz_go import build_franz_go
from test_java import JARS_DIR, Java, compile_java
from weir_cluster import DevCluster, free_base_port

TRANSACTION_STATE = "__transaction_state"
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
COORDINATOR_NOT_READY = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
INVALID_PRODUCER_EPOCH = 47
INVALID_TRANSACTION_TIMEOUT = 50
PRODUCER_FENCED = 90

_correlation = itertools.count(1)


def unique_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def coordinator(bootstrap: str, transactional_id: str, timeout: float = 30,
                key_type: int = KEY_TYPE_TRANSACTION) -> str:
    """The coordinator of ``transactional_id`` (of a group with ``key_type`` 0), once one is
    named."""
    deadline = Deadline(timeout)
    while True:
        with wire.Connection(bootstrap.split(",")[0]) as conn:
            conn.send(wire.find_coordinator_v3_request(next(_correlation), transactional_id, key_type))
            error, address = wire.parse_find_coordinator(3, conn.recv_frame())
        if error == 0:
            return address
        assert error in COORDINATOR_NOT_READY, f"FindCoordinator (key type {key_type}): error {error}"
        assert not deadline.expired(), f"no transaction coordinator within {timeout}s (error {error})"
        time.sleep(0.2)


def init_producer_id(bootstrap: str, transactional_id: str, version: int = 4, timeout_ms: int = 60000,
                     current: tuple[int, int] = (-1, -1), timeout: float = 30) -> tuple[int, int, int]:
    """(error, producer id, epoch) of an InitProducerId at the id's coordinator, retried while the
    coordinator is not ready."""
    deadline = Deadline(timeout)
    while True:
        address = coordinator(bootstrap, transactional_id)
        with wire.Connection(address) as conn:
            conn.send(wire.init_producer_id_request(next(_correlation), version, transactional_id, timeout_ms, *current))
            answer = wire.parse_init_producer_id(version, conn.recv_frame())
        if answer[0] not in COORDINATOR_NOT_READY or deadline.expired():
            return answer
        time.sleep(0.2)


def test_init_transactions_fences_the_older_producer(bootstrap):
    """librdkafka's init_transactions works; a second producer of the same transactional id
    gets the same producer id at the next epoch, and the older epoch is fenced."""
    transactional_id = unique_id("txn-fence")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    error, producer_id, epoch = init_producer_id(bootstrap, transactional_id)
    assert (error, epoch) == (0, 1), "the second producer of the id gets the next epoch"
    assert producer_id >= 0
    # The current producer bumps its own epoch (KIP-360): same id, next epoch.
    assert init_producer_id(bootstrap, transactional_id, current=(producer_id, 1)) == (0, producer_id, 2)
    # An older producer cannot: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v4).
    assert init_producer_id(bootstrap, transactional_id, current=(producer_id, 0))[0] == PRODUCER_FENCED
    assert init_producer_id(bootstrap, transactional_id, version=3, current=(producer_id, 0))[0] == INVALID_PRODUCER_EPOCH
    # Another transactional id has its own producer id.
    other = init_producer_id(bootstrap, unique_id("txn-other"))
    assert other[0] == 0 and other[1] != producer_id and other[2] == 0


def test_a_bad_timeout_is_refused(bootstrap):
    """transaction.timeout.ms above transaction.max.timeout.ms (900000) or not positive is
    INVALID_TRANSACTION_TIMEOUT, and librdkafka reports it."""
    transactional_id = unique_id("txn-timeout")
    for timeout_ms in (900001, 0):
        assert init_producer_id(bootstrap, transactional_id, timeout_ms=timeout_ms)[0] == INVALID_TRANSACTION_TIMEOUT
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 900001})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(30)
    assert "timeout" in str(refused.value).lower()


def test_the_internal_topic_is_kept_from_clients(bootstrap):
    """`__transaction_state` is listed as internal; clients cannot produce to it, delete it
    or add partitions to it."""
    init_producer_id(bootstrap, unique_id("txn-topic"))
    client = admin(bootstrap)
    metadata = client.list_topics(TRANSACTION_STATE, timeout=20)
    assert metadata.topics[TRANSACTION_STATE].error is None
    assert len(metadata.topics[TRANSACTION_STATE].partitions) == 50
    with pytest.raises(KafkaException) as refused:
        client.delete_topics([TRANSACTION_STATE], request_timeout=20)[TRANSACTION_STATE].result(timeout=30)
    assert refused.value.args[0].name() == "TOPIC_DELETION_DISABLED"
    with pytest.raises(KafkaException) as refused:
        client.create_partitions([NewPartitions(TRANSACTION_STATE, 60)], request_timeout=20)[TRANSACTION_STATE].result(timeout=30)
    assert refused.value.args[0].name() == "INVALID_PARTITIONS"
    with wire.Connection(bootstrap) as conn:
        batch = wire.record_batch([(b"k", b"v")], 0)
        conn.send(wire.produce_request(9, next(_correlation), TRANSACTION_STATE, 0, batch))
        answer = wire.parse_produce_response(9, conn.recv_frame())
    assert answer["error_code"] == 17, answer  # INVALID_TOPIC_EXCEPTION


def test_epochs_go_on_after_a_restart(restartable_weir):
    """The producer id and epoch of a transactional id are in `__transaction_state`: after a
    restart the next producer gets the same id at the next epoch, and the fenced one stays
    fenced."""
    bootstrap = restartable_weir.bootstrap
    transactional_id = unique_id("txn-restart")
    error, producer_id, epoch = init_producer_id(bootstrap, transactional_id)
    assert (error, epoch) == (0, 0)
    assert init_producer_id(bootstrap, transactional_id) == (0, producer_id, 1)
    bootstrap = restartable_weir.restart()
    assert init_producer_id(bootstrap, transactional_id, timeout=60) == (0, producer_id, 2)
    assert init_producer_id(bootstrap, transactional_id, current=(producer_id, 1))[0] == PRODUCER_FENCED


def read_records(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted",
                 timeout: float = 60) -> list[tuple[bytes | None, bytes]]:
    """Every (key, value) of ``topic`` up to its end, as a librdkafka consumer of ``isolation``
    reads them (markers are skipped by the client)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_id("txn-reader"),
                         "enable.partition.eof": True, "isolation.level": isolation,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        records, at_end = [], set()
        deadline = Deadline(timeout)
        while len(at_end) < partitions:
            assert not deadline.expired(), f"read of {topic} incomplete after {timeout}s: {len(records)} records"
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                elif error is not None:
                    raise KafkaException(error)
                else:
                    records.append((msg.key(), msg.value()))
        return records
    finally:
        consumer.close()


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted",
                timeout: float = 60) -> list[str]:
    """The values of :func:`read_records`, decoded."""
    return [value.decode() for _, value in read_records(bootstrap, topic, partitions, isolation, timeout)]


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_id("txn-hw")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)[1]
    finally:
        consumer.close()


def test_librdkafka_commits_and_aborts(bootstrap):
    """librdkafka's transactional producer commits three transactions and aborts one whose
    records were sent: every record is in the log, each transaction's end is one marker on its
    partition; a read_uncommitted consumer reads the records and skips the markers, a
    read_committed one reads only the committed records."""
    topic = unique_topic("txn-rdk")
    create_topic(bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("txn-rdk")})
    producer.init_transactions(30)
    for t in range(3):
        producer.begin_transaction()
        for r in range(5):
            producer.produce(topic, key=f"k{r}".encode(), value=f"c{t}-{r}".encode())
        producer.commit_transaction(30)
    producer.begin_transaction()
    for r in range(5):
        producer.produce(topic, key=f"k{r}".encode(), value=f"a-{r}".encode())
    producer.flush(30)
    producer.abort_transaction(30)
    assert high_watermark(bootstrap, topic) == 4 * 5 + 4, "20 records and 4 markers"
    committed = [f"c{t}-{r}" for t in range(3) for r in range(5)]
    values = read_values(bootstrap, topic, 1)
    assert sorted(values) == sorted(committed + [f"a-{r}" for r in range(5)])
    assert sorted(read_values(bootstrap, topic, 1, "read_committed")) == sorted(committed)


def test_a_new_producer_aborts_the_transaction_of_the_one_it_fences(bootstrap):
    """A zombie with an open transaction is fenced by a new producer of its transactional id:
    its transaction is aborted (a marker at the next epoch), its commit fails with a fatal
    fenced error, and the new producer's transaction commits."""
    topic = unique_topic("txn-zombie")
    create_topic(bootstrap, topic, partitions=2)
    transactional_id = unique_id("txn-zombie")
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for p in range(2):
        zombie.produce(topic, value=b"zombie", partition=p)
    zombie.flush(30)
    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    successor.init_transactions(30)
    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(30)
    assert refused.value.args[0].fatal(), refused.value
    successor.begin_transaction()
    successor.produce(topic, value=b"good", partition=0)
    successor.commit_transaction(30)
    # Each partition: the zombie's record and the abort marker; on 0 also the successor's record and
    # its commit marker.
    assert [high_watermark(bootstrap, topic, p) for p in range(2)] == [4, 2]


@pytest.fixture(scope="module")
def java(weir, tmp_path_factory) -> Java:
    """The Java programs of compat/java, compiled once for this module."""
    classes = tmp_path_factory.mktemp("java_classes")
    return Java(compile_java(classes), classes, weir)


def java_commits_aborts_and_is_fenced(bootstrap: str, java, transactional_id: str | None = None) -> str:
    """Runs TransactionalProduce (three commits, two aborts, fenced with a transaction open)
    with ``transactional_id`` (a new one by default) and checks the log as librdkafka reads it;
    returns the producer epoch the transactional id ends at, as `kafka-transactions describe`
    shows it."""
    topic = unique_topic("txn-java")
    create_topic(bootstrap, topic, partitions=1)
    transactional_id = transactional_id or unique_id("txn-java")
    out = java.program("TransactionalProduce", bootstrap, topic, transactional_id, 3, 2, 4)
    assert (out["committed"], out["aborted"], out["fenced"]) == (3, 2, True)
    assert high_watermark(bootstrap, topic) == 6 * 4 + 6, "24 records and 6 markers"
    committed = [f"c{t}-{r}" for t in range(3) for r in range(4)]
    values = read_values(bootstrap, topic, 1)
    assert sorted(values) == sorted(
        committed + [f"a{t}-{r}" for t in range(2) for r in range(4)] + [f"z-{r}" for r in range(4)]
    )
    assert sorted(read_values(bootstrap, topic, 1, "read_committed")) == sorted(committed)
    header, row = kafka_transactions(java, bootstrap, "describe", "--transactional-id", transactional_id)
    return dict(zip(header, row))["ProducerEpoch"]


def test_a_producer_whose_epoch_runs_out_goes_on_under_a_new_producer_id(bootstrap, java):
    """A transactional id's producer epoch grows with every InitProducerId and, under transaction
    protocol version 2 (KIP-890), with every transaction's end; at 32766 it is exhausted and the
    coordinator moves the id to a new producer id at epoch 0. Brought to 32765 by
    InitProducerIds, the id is taken by the Java client: its init takes the last epoch, the
    EndTxn of its first commit moves it to a new producer id, and it goes on as any producer
    does (three commits, two aborts, fenced by a successor), read back exactly. The old
    producer id is fenced."""
    # A coordinator to ask (the first transactional client creates __transaction_state).
    Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("first")}).init_transactions(30)
    transactional_id = unique_id("txn-exhausted")
    with wire.Connection(bootstrap) as conn:
        for correlation in range(32766):
            conn.send(wire.init_producer_id_request(correlation, 4, transactional_id))
            error, producer_id, epoch = wire.parse_init_producer_id(4, conn.recv_frame())
            assert (error, epoch) == (0, correlation), "each InitProducerId bumps the epoch"
        exhausted_id = producer_id
        assert java_commits_aborts_and_is_fenced(bootstrap, java, transactional_id) == "6", (
            "epoch 0 of the new id: five transactions, the fence's abort and the successor's init")
        described = weir_cli.ok(["txn", "describe", transactional_id], bootstrap).stdout
        producer = next(line.split()[1] for line in described.splitlines() if line.startswith("producer "))
        assert int(producer) != exhausted_id, described
        conn.send(wire.init_producer_id_request(0, 4, transactional_id, producer_id=exhausted_id, producer_epoch=32765))
        assert wire.parse_init_producer_id(4, conn.recv_frame())[0] == 90, "PRODUCER_FENCED"


def test_java_transactions_commit_abort_and_fence(bootstrap, java):
    """The Java client's KafkaProducer commits three transactions, aborts two, then is fenced
    by a second producer of its transactional id while a transaction is open: its commit
    throws ProducerFencedException. Every record is in the log with one marker per
    transaction, read back by librdkafka; read_committed, only the committed ones. It runs
    transaction protocol version 2 (the broker reports `transaction.version` 2): each of the
    five transactions bumped the epoch (0 to 5), the fence's abort one more and the successor's
    init another (7)."""
    assert java_commits_aborts_and_is_fenced(bootstrap, java) == "7"


def test_java_transactions_on_protocol_version_1(make_weir, java):
    """With `transaction.version=1` the Java client stays on transaction protocol version 1
    (AddPartitionsToTxn, EndTxn v4): the same run, and the epoch moves only with the fence (1)
    and the successor's init (2)."""
    bootstrap = make_weir("txn-v1", env={"WEIR_TRANSACTION_VERSION": "1"}).bootstrap
    assert java_commits_aborts_and_is_fenced(bootstrap, java) == "2"


def test_read_committed_stops_at_the_oldest_open_transaction(bootstrap):
    """A transaction left open holds read_committed consumers at its first record (the last
    stable offset), even past records written after it without a transaction; read_uncommitted
    consumers read everything. Once it commits, read_committed consumers read on, and records
    of an aborted transaction before it stay hidden."""
    topic = unique_topic("txn-lso")
    create_topic(bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("txn-lso")})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"c", partition=0)
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"a", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"o", partition=0)
    producer.flush(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"n", partition=0)
    plain.flush(30)
    assert sorted(read_values(bootstrap, topic, 1)) == ["a", "c", "n", "o"]
    assert read_values(bootstrap, topic, 1, "read_committed") == ["c"], "held at the open transaction"
    producer.commit_transaction(30)
    assert read_values(bootstrap, topic, 1, "read_committed") == ["c", "o", "n"]


def test_a_transaction_past_its_timeout_is_aborted(make_weir):
    """A producer that leaves its transaction open past transaction.timeout.ms is aborted by the
    coordinator at the next epoch: read_committed consumers go on past its records, which they
    never see, and the producer's late commit fails as fenced."""
    server = make_weir("txn-timeout", env={"WEIR_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "200"})
    bootstrap = server.bootstrap
    topic = unique_topic("txn-timeout")
    create_topic(bootstrap, topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("txn-timeout"),
                         "transaction.timeout.ms": 1000, "message.timeout.ms": 1000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"late", partition=0)
    producer.flush(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(30)
    deadline = Deadline(30)
    while high_watermark(bootstrap, topic) < 3:
        assert not deadline.expired(), "the timed-out transaction's abort marker was never written"
        time.sleep(0.1)
    assert read_values(bootstrap, topic, 1, "read_committed") == ["after"]
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(30)
    assert refused.value.args[0].fatal(), refused.value


def kafka_transactions(java: Java, bootstrap: str, *args) -> list[list[str]]:
    """Kafka's kafka-transactions tool (TransactionsCommand) with ``args``: its output's rows,
    split on whitespace (the header first)."""
    proc = java._run(f"{JARS_DIR}/*", "org.apache.kafka.tools.TransactionsCommand",
                     ["--bootstrap-server", bootstrap, *args], None, 60)
    assert proc.returncode == 0, f"kafka-transactions {' '.join(args)}: {proc.stdout}\n{proc.stderr[-3000:]}"
    return [line.split() for line in proc.stdout.splitlines() if line.strip()]


def open_transaction(bootstrap: str, prefix: str) -> tuple[str, str, Producer]:
    """A new one-partition topic, and a transactional producer of a new id with a transaction
    open on it (one record, flushed): (topic, transactional id, producer)."""
    topic = unique_topic(prefix)
    create_topic(bootstrap, topic, partitions=1)
    transactional_id = unique_id(prefix)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    producer.flush(30)
    return topic, transactional_id, producer


def test_kafka_transactions_tool_lists_and_describes(bootstrap, java):
    """Kafka's kafka-transactions tool (TransactionsCommand) lists the transactional ids and
    describes one with an open transaction: its producer, epoch, state and partitions."""
    topic, transactional_id, producer = open_transaction(bootstrap, "txn-tool")

    listed = {row[0]: row for row in kafka_transactions(java, bootstrap, "list")[1:]}
    assert listed[transactional_id][3] == "Ongoing", listed
    header, row = kafka_transactions(java, bootstrap, "describe", "--transactional-id", transactional_id)
    described = dict(zip(header, row))
    assert described["TransactionState"] == "Ongoing"
    assert described["ProducerEpoch"] == "0"
    assert described["TopicPartitions"] == f"{topic}-0"
    producer.commit_transaction(30)
    header, row = kafka_transactions(java, bootstrap, "describe", "--transactional-id", transactional_id)
    assert dict(zip(header, row))["TransactionState"] == "CompleteCommit"


def hanging_batch() -> bytes:
    """A transactional batch of a producer id no coordinator gave out (4242, epoch 0)."""
    batch = wire.record_batch([(None, b"hanging")], int(time.time() * 1000))
    batch = wire.patch(batch, 21, struct.pack(">h", 0x10))  # transactional
    return wire.patch(batch, 43, struct.pack(">qhi", 4242, 0, 0))  # producer id, epoch, sequence


def test_a_transactional_write_outside_any_transaction_is_refused(bootstrap):
    """The leader verifies a transactional batch with the transaction coordinator before it
    opens a transaction on the partition (KIP-890): a made-up producer's is refused
    (INVALID_PRODUCER_ID_MAPPING, or TRANSACTIONAL_ID_AUTHORIZATION_FAILED without a
    transactional id), so nothing holds read_committed consumers back."""
    topic = unique_topic("txn-unverified")
    create_topic(bootstrap, topic, partitions=1)
    # A coordinator to ask (the first transactional client creates __transaction_state).
    Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("first")}).init_transactions(30)
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.produce_request(9, next(_correlation), topic, 0, hanging_batch()))
        assert wire.parse_produce_response(9, conn.recv_frame())["error_code"] == 53
        conn.send(wire.produce_request(9, next(_correlation), topic, 0, hanging_batch(), transactional_id=unique_id("made-up")))
        assert wire.parse_produce_response(9, conn.recv_frame())["error_code"] == 49
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(30)
    assert read_values(bootstrap, topic, 1, "read_committed") == ["after"]


def test_a_hanging_transaction_is_found_and_aborted_with_kafka_transactions(make_weir, java):
    """With verification off (`transaction.partition.verification.enable=false`), a
    transactional batch written outside any transaction (a raw producer with a made-up producer
    id) holds read_committed consumers back; `kafka-transactions find-hanging` finds it through
    DescribeProducers, and `abort` ends it with an abort marker (WriteTxnMarkers to the
    partition's leader), after which read_committed consumers read on without it."""
    bootstrap = make_weir("hanging", env={"WEIR_TRANSACTION_PARTITION_VERIFICATION_ENABLE": "false"}).bootstrap
    topic = unique_topic("txn-hanging")
    create_topic(bootstrap, topic, partitions=1)
    with wire.Connection(bootstrap) as conn:
        conn.send(wire.produce_request(9, next(_correlation), topic, 0, hanging_batch(), transactional_id="made-up"))
        assert wire.parse_produce_response(9, conn.recv_frame())["error_code"] == 0
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(30)
    assert read_values(bootstrap, topic, 1, "read_committed") == [], "held by the open transaction"

    hanging = [row for row in kafka_transactions(java, bootstrap, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0")[1:]
               if row[0] == topic]
    assert [(row[2], row[5]) for row in hanging] == [("4242", "0")], hanging
    kafka_transactions(java, bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert read_values(bootstrap, topic, 1, "read_committed") == ["after"]
    assert sorted(read_values(bootstrap, topic, 1)) == ["after", "hanging"]


def test_a_hung_transaction_shows_in_cluster_status_the_console_and_metrics(make_weir):
    """A transaction open at a partition whose producer has been idle there for longer than the
    broker's `transaction.max.timeout.ms` (3 s here) is hung: no coordinator will end it, and
    read_committed consumers stop at it. `weir cluster status`, GET /cluster (the console's
    overview, its health degraded) and /metrics' `weir_partition_hung_transactions` show it;
    none shows it before the limit, nor once `weir txn abort --topic --partition
    --start-offset` ends it with an abort marker (after which read_committed consumers read on;
    an offset where no transaction opened is a clear error)."""
    import requests
    from test_console import Check
    from test_http import metrics, sample

    server = make_weir("hung", env={"WEIR_TRANSACTION_PARTITION_VERIFICATION_ENABLE": "false",
                                    "WEIR_TRANSACTION_MAX_TIMEOUT_MS": "3000"})
    bootstrap, http = server.bootstrap, f"http://{server.http}"
    topic = unique_topic("txn-hung")
    create_topic(bootstrap, topic, partitions=2)

    def shown() -> tuple[list[str], dict, float | None]:
        status = weir_cli.ok(["cluster", "status"], bootstrap).stdout.splitlines()
        hung = status[next(i for i, line in enumerate(status) if line.startswith("hung transactions:")):]
        cluster = requests.get(f"{http}/cluster", timeout=10).json()
        return hung, cluster, sample(metrics(http), "weir_partition_hung_transactions", topic=topic, partition=1)

    with wire.Connection(bootstrap) as conn:
        conn.send(wire.produce_request(9, next(_correlation), topic, 1, hanging_batch(), transactional_id="made-up"))
        assert wire.parse_produce_response(9, conn.recv_frame())["error_code"] == 0
    written = time.monotonic()
    hung, cluster, metric = shown()
    assert time.monotonic() - written < 3, "looked only after the limit"
    assert (hung, cluster["hung_transactions"], cluster["health"], metric) == (
        ["hung transactions:        0"], [], "healthy", 0)

    time.sleep(max(0.0, written + 3.5 - time.monotonic()))
    hung, cluster, metric = shown()
    assert hung[0] == "hung transactions:        1", hung
    assert hung[1].split()[:10] == [f"{topic}-1", "leader", "1", "producer", "4242", "epoch", "0", "open", "from", "offset"], hung
    assert "transaction.max.timeout.ms 3000" in hung[1], hung
    assert f"abort --topic {topic} --partition 1 --start-offset 0" in hung[2], hung
    assert [(t["topic"], t["partition"], t["leader"], t["producer_id"], t["producer_epoch"], t["start_offset"],
             t["max_timeout_ms"]) for t in cluster["hung_transactions"]] == [(topic, 1, 1, 4242, 0, 0, 3000)]
    assert cluster["hung_transactions"][0]["idle_ms"] > 3000
    assert (cluster["health"], cluster["leaders_not_asked"], metric) == ("degraded", [], 1)
    console = Check(http, "hung", f"{topic}/1").result()
    assert (console["hung"], console["health"], console["row"][:6]) == (
        "1", "degraded", [topic, "1", "1", "4242", "0", "0"]), console

    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"after", partition=1)
    plain.flush(30)
    assert read_values(bootstrap, topic, 2, "read_committed") == [], "held by the hung transaction"
    error = weir_cli.runtime_error(["txn", "abort", "--topic", topic, "--partition", "1", "--start-offset", "1"],
                                   bootstrap).stderr
    assert f"no transaction is open at offset 1 of {topic}-1" in error, error
    aborted = weir_cli.ok(["txn", "abort", "--topic", topic, "--partition", "1", "--start-offset", "0"], bootstrap)
    assert aborted.stdout == f"{topic}-1: aborted the transaction open from offset 0; producer 4242 epoch 0\n"
    hung, cluster, metric = shown()
    assert (hung, cluster["hung_transactions"], cluster["health"], metric) == (
        ["hung transactions:        0"], [], "healthy", 0)
    assert read_values(bootstrap, topic, 2, "read_committed") == ["after"]


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int, stable: bool = True) -> list[int]:
    """The offsets ``group`` has committed on ``topic`` (-1001 where none), as a librdkafka
    consumer fetches them. ``stable`` (read_committed, librdkafka's default) requires stable
    offsets: it waits while a transaction with offsets of them is open or its markers are not
    yet written (EndTxn is answered before them, as in Kafka); otherwise (read_uncommitted) the
    offsets committed so far come back at once."""
    isolation = "read_committed" if stable else "read_uncommitted"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": isolation})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()


def committed_so_far(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """The sum of the offsets ``group`` has committed on ``topic`` so far (read_uncommitted),
    0 while its coordinator is not available yet (found, or loading its partition)."""
    transient = (KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                 KafkaError.NOT_COORDINATOR, KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
    try:
        return sum(max(offset, 0) for offset in committed_offsets(bootstrap, group, topic, partitions, stable=False))
    except KafkaException as error:
        if error.args[0].code() not in transient:
            raise
        return 0


def test_java_read_process_write_is_exactly_once(bootstrap, java):
    """The Java client's exactly-once loop (consume read_committed, produce, send the offsets to
    the transaction, commit) over two partitions, with every third transaction aborted and its
    records processed again from the group's committed offsets: the output holds each input
    record exactly once (read_committed), the aborted attempts only read_uncommitted, and the
    group's committed offsets are the input's end."""
    source, sink = unique_topic("rpw-in"), unique_topic("rpw-out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(200):
        producer.produce(source, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    producer.flush(30)
    group = unique_id("rpw")
    out = java.program("ReadProcessWrite", bootstrap, source, sink, group, unique_id("rpw"), 200, 3, timeout=150)
    assert out["processed"] == 200, out
    assert out["aborted"] >= 1, out
    assert sorted(read_values(bootstrap, sink, 2, "read_committed")) == sorted(f"out-v{i}" for i in range(200))
    assert len(read_values(bootstrap, sink, 2)) > 200, "the aborted attempts are in the log"
    assert committed_offsets(bootstrap, group, source, 2) == [100, 100]


def test_offsets_of_a_transaction_count_only_once_it_commits(bootstrap):
    """librdkafka's send_offsets_to_transaction: offsets sent in an aborted transaction are never
    committed; in a committed one they are, once it commits. While a transaction with offsets is
    open, a read_committed consumer's fetch of them (require_stable) waits for it, and other
    fetches see the offsets committed before."""
    topic = unique_topic("txn-offsets")
    create_topic(bootstrap, topic, partitions=1)
    group = unique_id("txn-offsets")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("txn-offsets")})
    producer.init_transactions(30)
    try:
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 9)], consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert committed_offsets(bootstrap, group, topic, 1) == [5], "aborted: not committed"

        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 12)], consumer.consumer_group_metadata(), 30)
        assert committed_offsets(bootstrap, group, topic, 1, stable=False) == [5], "not before the commit"
        stable = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "isolation.level": "read_committed"})
        try:
            with pytest.raises(KafkaException):
                # librdkafka retries UNSTABLE_OFFSET_COMMIT until its timeout.
                stable.committed([TopicPartition(topic, 0)], timeout=2)
        finally:
            stable.close()
        producer.commit_transaction(30)
        assert committed_offsets(bootstrap, group, topic, 1) == [12]
    finally:
        consumer.close()


def test_franz_go_group_transact_session_is_exactly_once(bootstrap, java):
    """franz-go's GroupTransactSession (read_committed, require stable offsets) consumes two
    partitions, produces each record transformed in a transaction with the group's offsets,
    and aborts every third transaction (its records are consumed again): the output holds each
    input record exactly once (read_committed) and the offsets are the input's end. franz-go
    runs transaction protocol version 2 (it sees `transaction.version` 2): every EndTxn bumped
    the epoch, so the id's epoch is the number of transactions ended."""
    source, sink = unique_topic("franz-rpw-in"), unique_topic("franz-rpw-out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(300):
        producer.produce(source, value=f"v{i}".encode(), partition=i % 2)
    producer.flush(30)
    group, transactional_id = unique_id("franz-rpw"), unique_id("franz-rpw-txn")
    proc = subprocess.run([str(build_franz_go()), "transact", bootstrap, source, sink, group, transactional_id, "300"],
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = json.loads(proc.stdout)
    assert out["processed"] == 300 and out["aborted"] >= 1, out
    assert sorted(read_values(bootstrap, sink, 2, "read_committed")) == sorted(f"out-v{i}" for i in range(300))
    assert committed_offsets(bootstrap, group, source, 2) == [150, 150]
    header, row = kafka_transactions(java, bootstrap, "describe", "--transactional-id", transactional_id)
    assert int(dict(zip(header, row))["ProducerEpoch"]) == out["committed_transactions"] + out["aborted"], out


def kafka_python_rows(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[list]:
    """(partition, offset, value) of every record a kafka-python consumer of ``isolation``
    reads from ``topic``, start to end (positions move past markers and aborted records)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             group_id=None, value_deserializer=bytes.decode)
    try:
        tps = [KafkaPythonPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        rows, deadline = [], Deadline(60)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert not deadline.expired(), f"kafka-python read incomplete: {len(rows)} records, ends {ends}"
            for tp, messages in consumer.poll(timeout_ms=200).items():
                rows.extend([tp.partition, m.offset, m.value] for m in messages)
        return sorted(rows)
    finally:
        consumer.close()


def librdkafka_rows(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[list]:
    """(partition, offset, value) of every record a librdkafka consumer of ``isolation`` reads."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_id("txn-rows"),
                         "enable.partition.eof": True, "isolation.level": isolation, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        rows, at_end, deadline = [], set(), Deadline(60)
        while len(at_end) < partitions:
            assert not deadline.expired(), f"librdkafka read incomplete: {len(rows)} records"
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                if msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                elif msg.error() is not None:
                    raise KafkaException(msg.error())
                else:
                    rows.append([msg.partition(), msg.offset(), msg.value().decode()])
        return sorted(rows)
    finally:
        consumer.close()


def commit_abort_commit(producer: Producer, topic: str, prefix: str, records: int) -> None:
    """Three transactions of ``producer`` (initialised), each of ``records`` values
    ``{prefix}{t}-{r}`` spread over three partitions: committed, aborted, committed."""
    for t, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        for r in range(records):
            producer.produce(topic, value=f"{prefix}{t}-{r}".encode(), partition=r % 3)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)


def test_four_clients_read_the_same_committed_records(bootstrap, java):
    """A three-partition topic holding plain records, the Java client's committed, aborted and
    fenced transactions and librdkafka's committed and aborted ones: librdkafka, the Java
    client, kafka-python and franz-go read it record for record alike (partition, offset,
    value), read_committed (the committed and plain records only) and read_uncommitted."""
    topic = unique_topic("txn-agree")
    create_topic(bootstrap, topic, partitions=3)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(6):
        plain.produce(topic, value=f"p{i}".encode(), partition=i % 3)
    plain.flush(30)
    java.program("TransactionalProduce", bootstrap, topic, unique_id("txn-agree-java"), 3, 2, 4)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_id("txn-agree-rdk")})
    producer.init_transactions(30)
    commit_abort_commit(producer, topic, "r", 6)
    for i in range(6, 9):
        plain.produce(topic, value=f"p{i}".encode(), partition=i % 3)
    plain.flush(30)

    franz = build_franz_go()
    for isolation in ("read_committed", "read_uncommitted"):
        by_librdkafka = librdkafka_rows(bootstrap, topic, 3, isolation)
        by_java = sorted(java.program("ReadTopic", bootstrap, topic, isolation)["records"])
        by_kafka_python = kafka_python_rows(bootstrap, topic, 3, isolation)
        proc = subprocess.run([str(franz), "consume", bootstrap, topic, isolation], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-4000:]
        by_franz_go = sorted([row[0], row[1], base64.b64decode(row[3]).decode()]
                             for row in json.loads(proc.stdout)["records"])
        assert by_java == by_librdkafka, isolation
        assert by_kafka_python == by_librdkafka, isolation
        assert by_franz_go == by_librdkafka, isolation
        values = sorted(value for _, _, value in by_librdkafka)
        committed = sorted([f"p{i}" for i in range(9)] + [f"c{t}-{r}" for t in range(3) for r in range(4)]
                           + [f"r{t}-{r}" for t in (0, 2) for r in range(6)])
        aborted = [f"a{t}-{r}" for t in range(2) for r in range(4)] + [f"z-{r}" for r in range(4)] + [
            f"r1-{r}" for r in range(6)]
        expected = committed if isolation == "read_committed" else sorted(committed + aborted)
        assert values == expected, isolation


def run_read_process_write(client: str, java, bootstrap: str, source: str, sink: str, group: str,
                           transactional_id: str, records: int) -> dict:
    """The exactly-once loop of ``client`` over ``records`` input records: the Java client's
    (a transaction every 5 records) or franz-go's GroupTransactSession (up to 20 records a
    transaction, every third aborted on purpose); its JSON report."""
    if client == "java":
        return java.program("ReadProcessWrite", bootstrap, source, sink, group, transactional_id, records, 5,
                            timeout=150)
    proc = subprocess.run([str(build_franz_go()), "transact", bootstrap, source, sink, group, transactional_id,
                           str(records)], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("victim", ["group coordinator", "transaction coordinator", "partition leader"])
@pytest.mark.parametrize("client", ["java", "franz-go"])
def test_read_process_write_survives_a_node_kill(tmp_path, java, client, victim):
    """The exactly-once loop of the Java client or of franz-go on a three-node cluster, its
    group coordinated by another node than its transactions (so the markers that settle its
    offsets travel between brokers), and
    one node killed with SIGKILL while it runs, then restarted: the group coordinator's (the
    next leader of the offsets partition loads the offsets of the open transaction from the
    replicated log and settles them with its markers), the transaction coordinator's (the next
    one loads the transaction's state and ends it), or the third, which leads only input and
    output partitions. Each input record is in the output exactly once (read_committed) and
    the group's offsets are the input's end."""
    cluster = DevCluster(tmp_path / "cluster", free_base_port())
    cluster.start()
    try:
        bootstrap = cluster.bootstrap
        source, sink = unique_topic("rpw-in"), unique_topic("rpw-out")
        futures = admin(bootstrap).create_topics(
            [NewTopic(name, num_partitions=3, replication_factor=3) for name in (source, sink)], request_timeout=30)
        for future in futures.values():
            future.result(timeout=40)
        for name in (source, sink):
            wait_for_partitions(bootstrap, name, 3)
        records = 3000
        # Idempotent: a batch retried after a timeout must not put input records in twice
        # (the loop would rightly process them twice).
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(records):
            producer.produce(source, value=f"v{i}".encode(), partition=i % 3)
        producer.flush(30)
        # A group and a transactional id whose coordinators are different nodes.
        transactional_id = unique_id("rpw-txn")
        txn_node = coordinator(bootstrap, transactional_id)
        group = next(g for g in (unique_id("rpw") for _ in range(100))
                     if coordinator(bootstrap, g, key_type=KEY_TYPE_GROUP) != txn_node)

        group_node = cluster.node_at(coordinator(bootstrap, group, key_type=KEY_TYPE_GROUP))
        victim_node = {"group coordinator": group_node, "transaction coordinator": cluster.node_at(txn_node),
                       "partition leader": ({1, 2, 3} - {group_node, cluster.node_at(txn_node)}).pop()}[victim]

        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(run_read_process_write, client, java, bootstrap, source, sink, group,
                              transactional_id, records)
            deadline = Deadline(60)
            while committed_so_far(bootstrap, group, source, 3) < records // 5:
                assert not run.done(), run.result()
                assert not deadline.expired(), "the loop committed nothing within 60 s"
                time.sleep(0.1)
            assert not run.done(), "killed while the loop runs"
            cluster.kill_node(victim_node)
            time.sleep(2)
            cluster.restart_node(victim_node)
            out = run.result(timeout=160)
        assert out["processed"] == records, out
        values = read_values(bootstrap, sink, 3, "read_committed")
        assert len(values) == records and set(values) == {f"out-v{i}" for i in range(records)}, (
            f"{len(values)} values, {len(set(values))} distinct")
        assert committed_offsets(bootstrap, group, source, 3) == [records // 3] * 3
    finally:
        cluster.kill()


def test_weir_txn_lists_describes_and_aborts(bootstrap):
    """`weir txn list` shows a transactional id with an open transaction, `describe` its
    producer, epoch, state and partitions, and `abort` fences its producer: the transaction is
    aborted (read_committed consumers never see its records, and read on past them), the
    producer's commit fails as fenced, and an id the coordinators do not know is a clear error."""
    topic, transactional_id, producer = open_transaction(bootstrap, "weir-txn")

    listed = weir_cli.ok(["txn", "list"], bootstrap).stdout.splitlines()
    assert listed[0].split() == ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"]
    row = next(line.split() for line in listed[1:] if line.split()[0] == transactional_id)
    assert row[2] == "Ongoing", listed
    described = dict(line.split(None, 1) if "  " not in line else [part.strip() for part in line.split("  ", 1)]
                     for line in weir_cli.ok(["txn", "describe", transactional_id], bootstrap).stdout.splitlines())
    assert described["state"] == "Ongoing", described
    assert described["producer"] == f"{row[1]} epoch 0", described
    assert described["partitions"] == f"{topic}-0", described

    aborted = weir_cli.ok(["txn", "abort", transactional_id], bootstrap).stdout
    # Epoch 1 aborts the open transaction (its markers fence the producer), epoch 2 is the fence's own.
    assert aborted == f"{transactional_id}: aborted its open transaction; producer {row[1]} fenced at epoch 2\n"
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(30)
    assert refused.value.args[0].fatal(), refused.value
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(30)
    assert read_values(bootstrap, topic, 1, "read_committed") == ["after"]
    error = weir_cli.runtime_error(["txn", "describe", unique_id("nobody")], bootstrap).stderr
    assert "transactional" in error.lower(), error


def test_metrics_show_open_transactions(weir_only, bootstrap):
    """/metrics shows a partition's open transactions and its last stable offset (below the
    high watermark while one is open: what a hung transaction looks like), and both move on
    once it commits."""
    from test_http import metrics, sample

    assert weir_only.http, "the server logged no http= address"
    http = f"http://{weir_only.http}"
    topic, _, producer = open_transaction(bootstrap, "txn-metrics")
    samples = metrics(http)
    assert sample(samples, "weir_partition_open_transactions", topic=topic, partition=0) == 1
    assert sample(samples, "weir_partition_last_stable_offset", topic=topic, partition=0) == 0
    assert sample(samples, "weir_partition_high_watermark", topic=topic, partition=0) == 1
    producer.commit_transaction(30)
    deadline = Deadline(30)
    while True:
        samples = metrics(http)
        if (sample(samples, "weir_partition_open_transactions", topic=topic, partition=0),
                sample(samples, "weir_partition_last_stable_offset", topic=topic, partition=0)) == (0, 2):
            break
        assert not deadline.expired(), "the committed transaction still shows in /metrics"
        time.sleep(0.1)
