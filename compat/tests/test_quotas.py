"""Client quotas: Kafka's ``kafka-configs`` and ``weir quota`` set, list and remove the
quotas of users, client ids, both, their defaults and IP addresses through AlterClientQuotas
and DescribeClientQuotas. Each tool sees what the other set; a bad key, value or entity is
refused with a clear error and changes nothing; quotas live in the metadata log, so a restart
keeps them. A producer above its ``producer_byte_rate`` is throttled to it within 10 % over
each whole period of Kafka's window, a consumer above its ``consumer_byte_rate`` to within
10 % once its first window has passed, while a
client beside it without a quota is not; Kafka's Java consumer, whose fetch sessions meet the
empty answers of a throttled fetch, reads everything at its quota. A client above its
``controller_mutation_rate`` has topic creations refused with THROTTLING_QUOTA_EXCEEDED until
its quota allows them (Kafka's ``kafka-topics`` reports it), an older client's are made and
throttled.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
import shutil
import subprocess
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients import create_topic
from test_http import metrics, sample
from test_java import JARS_DIR, JVM_FLAGS
import weir_cli


def kafka_configs(bootstrap: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    """Runs Kafka's ConfigCommand (``kafka-configs.sh``) against ``bootstrap``."""
    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    done = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.ConfigCommand",
         "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=120,
    )
    if ok:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def listed(bootstrap: str, *filter_args: str) -> dict[str, str]:
    """``weir quota list``: each entity's quotas, as printed."""
    result = weir_cli.ok(["quota", "list", *filter_args], bootstrap)
    header, *rows = result.lines
    assert header.split() == ["ENTITY", "QUOTAS"], result.describe()
    return {entity: quotas.strip() for entity, quotas in (row.split(None, 1) for row in rows)}


def test_kafka_configs_and_weir_quota_see_each_others_quotas(restartable_weir):
    bootstrap = restartable_weir.bootstrap
    kafka_configs(bootstrap, "--alter", "--entity-type", "users", "--entity-name", "alice",
                  "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    described = kafka_configs(bootstrap, "--describe", "--entity-type", "users",
                              "--entity-name", "alice").stdout
    assert "producer_byte_rate=1048576" in described, described
    assert "consumer_byte_rate=2097152" in described, described
    assert listed(bootstrap) == {"user=alice": "consumer_byte_rate=2097152, producer_byte_rate=1048576"}

    weir_cli.ok(["quota", "set", "--user-default", "--client-id", "app", "request_percentage=12.5"],
                bootstrap)
    # Kafka's name for the brokers flag is taken too.
    weir_cli.ok(["quota", "set", "--ip", "127.0.0.1", "connection_creation_rate=20",
                 "--bootstrap-server", bootstrap], None)
    described = kafka_configs(bootstrap, "--describe", "--entity-type", "users", "--entity-default",
                              "--entity-type", "clients", "--entity-name", "app").stdout
    assert "request_percentage=12.5" in described, described
    described = kafka_configs(bootstrap, "--describe", "--entity-type", "ips",
                              "--entity-name", "127.0.0.1").stdout
    assert "connection_creation_rate=20" in described, described

    kafka_configs(bootstrap, "--alter", "--entity-type", "users", "--entity-name", "alice",
                  "--delete-config", "producer_byte_rate")
    assert listed(bootstrap, "--user", "alice") == {"user=alice": "consumer_byte_rate=2097152"}
    assert listed(bootstrap, "--user-default", "--client-id", "app") == {
        "user=<default>,client-id=app": "request_percentage=12.5"}
    before = listed(bootstrap)
    assert set(before) == {"user=alice", "user=<default>,client-id=app", "ip=127.0.0.1"}, before

    restartable_weir.restart()
    bootstrap = restartable_weir.bootstrap
    assert listed(bootstrap) == before, "quotas are metadata: a restart keeps them"

    weir_cli.ok(["quota", "remove", "--ip", "127.0.0.1", "connection_creation_rate"], bootstrap)
    assert "ip=127.0.0.1" not in listed(bootstrap), "an entity without quotas is gone"


def test_bad_quotas_are_refused_and_change_nothing(bootstrap):
    weir_cli.ok(["quota", "set", "--client-id", "steady", "producer_byte_rate=4096"], bootstrap)
    before = listed(bootstrap)
    for args, why in [
        (["--client-id", "steady", "producer_byte_rate=1.5"], "must be a Long value"),
        (["--client-id", "steady", "consumer_byte_rate=-1"], "at least 0"),
        (["--client-id", "steady", "retention.ms=1000"], "Invalid configuration key retention.ms"),
        (["--ip", "127.0.0.1", "producer_byte_rate=1"], "Invalid configuration key producer_byte_rate"),
        (["--ip", "not-an-address", "connection_creation_rate=1"], "not-an-address is not a valid IP address"),
        (["--ip", "127.0.0.1", "--user", "a", "connection_creation_rate=1"], "cannot be combined"),
    ]:
        refused = weir_cli.runtime_error(["quota", "set", *args], bootstrap)
        assert why in refused.stderr, refused.describe()
    weir_cli.usage_error(["quota", "set", "--client-id", "steady", "producer_byte_rate=lots"], bootstrap)
    weir_cli.runtime_error(["quota", "set", "producer_byte_rate=1"], bootstrap)

    # Kafka's tool, whatever it checks itself, gets no bad quota past the broker.
    refused = kafka_configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", "steady",
                            "--add-config", "producer_byte_rate=4096,bogus_rate=5", ok=False)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert listed(bootstrap) == before, "nothing changed"


def produce_flat_out(bootstrap: str, topic: str, client_id: str, seconds: float, out: dict) -> None:
    """Produces 1000-byte records as fast as the broker takes them for ``seconds``; ``out``
    gets each delivery's time (from the start) and size, and the most throttling librdkafka
    saw reported."""
    deliveries: list[tuple[float, int]] = []
    throttle_max = [0]
    start = time.monotonic()

    def delivered(err, msg):
        assert err is None, err
        deliveries.append((time.monotonic() - start, len(msg.value())))

    def stats(text: str):
        for broker in json.loads(text).get("brokers", {}).values():
            throttle_max[0] = max(throttle_max[0], broker.get("throttle", {}).get("max", 0))

    # A small buffer, so that deliveries come in steps of a third of a second of quota.
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 5,
        "queue.buffering.max.kbytes": 64, "statistics.interval.ms": 500, "stats_cb": stats,
    })
    value = b"q" * 1000
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, value, callback=delivered)
        except BufferError:
            producer.poll(0.02)
            continue
        producer.poll(0)
    assert producer.flush(60) == 0, "every record delivered"
    out.update(deliveries=deliveries, throttle_max=throttle_max[0])


def quota_and_topic(bootstrap: str, client_id: str, quota: str, records: int = 0) -> str:
    """Sets ``quota`` (``KEY=VALUE``) for ``client_id``; a new topic of ``records`` records of
    1000 bytes."""
    weir_cli.ok(["quota", "set", "--client-id", client_id, quota], bootstrap)
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    if records:
        fill(bootstrap, topic, records)
    return topic


def side_by_side(client, bootstrap: str, topic: str, *runs: tuple[str, float]) -> list[dict]:
    """Runs ``client`` once per (client id, seconds) of ``runs`` at the same time; what each
    reported."""
    outs: list[dict] = [{} for _ in runs]
    threads = [threading.Thread(target=client, args=(bootstrap, topic, client_id, seconds, out))
               for (client_id, seconds), out in zip(runs, outs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return outs


def quota_periods(deliveries: list[tuple[float, int]], limit: int) -> list[tuple[float, float, float]]:
    """The whole periods of a client throttled at ``limit`` bytes/s, as (start, end, bytes/s).

    Kafka measures a rate over 11 one-second samples, so a client flat out at its quota moves
    in periods of about a window: once the second holding a burst falls out of the window, the
    rate measured drops below the quota and the client may send the difference at once, then
    is paused until that burst ages out in turn. Each period starts with a burst (a second
    carrying three seconds of quota or more); from one burst to the next the client sent its
    quota's worth."""
    times = [at for at, _ in deliveries]
    sent = list(itertools.accumulate((size for _, size in deliveries), initial=0))

    def sent_between(start: float, end: float) -> int:
        return sent[bisect.bisect_left(times, end)] - sent[bisect.bisect_left(times, start)]

    bursts: list[float] = []
    for at in times:
        if (not bursts or at - bursts[-1] >= 5) and sent_between(at, at + 1) >= 3 * limit:
            bursts.append(at)
    return [(start, end, sent_between(start, end) / (end - start))
            for start, end in zip(bursts, bursts[1:])]


def test_a_producer_above_its_quota_is_throttled_to_it(bootstrap):
    limit = 200_000
    topic = quota_and_topic(bootstrap, "throttled", f"producer_byte_rate={limit}")
    throttled, free = side_by_side(produce_flat_out, bootstrap, topic, ("throttled", 17), ("free", 6))
    assert "deliveries" in throttled and "deliveries" in free, "both producers finished"

    # From one burst to the next (see quota_periods) the client sent its quota's worth: in
    # value bytes, which the broker counts with the batches' framing, about 1.5 % more.
    periods = quota_periods(throttled["deliveries"], limit)
    assert periods, "a whole period of about the 11 s window in 17 s"
    for start, end, rate in periods:
        assert 10 <= end - start <= 15, f"a period is about the 11 s window: {start:.1f}-{end:.1f} s"
        assert 0.9 * limit <= rate <= 1.1 * limit, \
            f"{rate:.0f} bytes/s from {start:.1f} to {end:.1f} s against a quota of {limit}"
    assert throttled["throttle_max"] > 0, "librdkafka saw throttle_time_ms in the responses"
    free_rate = sum(size for _, size in free["deliveries"]) / 6
    assert free_rate > 3 * limit, f"a client without a quota is not slowed: {free_rate:.0f} bytes/s"
    assert free["throttle_max"] == 0


def fill(bootstrap: str, topic: str, records: int, client_id: str = "rdkafka") -> None:
    """Appends ``records`` records of 1000 bytes to ``topic`` as ``client_id``."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 20,
                         "batch.size": 16384})
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, b"c" * 1000)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0, "every record delivered"


def consume_flat_out(bootstrap: str, topic: str, client_id: str, seconds: float, out: dict) -> None:
    """Reads ``topic``'s one partition from the start as fast as the broker sends it for
    ``seconds``; ``out`` gets each record's time (from the start) and size, and the most
    throttling librdkafka saw reported. The consumer's queue is kept small, so records are
    read about when they are fetched."""
    received: list[tuple[float, int]] = []
    throttle_max = [0]

    def stats(text: str):
        for broker in json.loads(text).get("brokers", {}).values():
            throttle_max[0] = max(throttle_max[0], broker.get("throttle", {}).get("max", 0))

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"quota-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "queued.max.messages.kbytes": 256, "fetch.queue.backoff.ms": 10,
        "fetch.message.max.bytes": 65536,
        "statistics.interval.ms": 500, "stats_cb": stats,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        message = consumer.poll(0.1)
        if message is not None and not message.error():
            received.append((time.monotonic() - start, len(message.value())))
    consumer.poll(0.6)  # one more statistics report
    consumer.close()
    out.update(received=received, throttle_max=throttle_max[0])


def test_a_consumer_above_its_quota_is_throttled_to_it(weir_only, bootstrap):
    limit = 200_000
    topic = quota_and_topic(bootstrap, "slow-reader", f"consumer_byte_rate={limit}", records=12_000)
    throttled, free = side_by_side(consume_flat_out, bootstrap, topic, ("slow-reader", 24), ("fast-reader", 6))
    assert "received" in throttled and "received" in free, "both consumers finished"

    # As for producers: a burst of up to a window's worth at first, then about the quota,
    # in steps of the consumer's fetches (64 KiB here).
    steady = sum(size for at, size in throttled["received"] if 12 <= at < 24) / 12
    print(f"consumer at a quota of {limit}: {steady:.0f} bytes/s from 12 s to 24 s")
    assert 0.9 * limit <= steady <= 1.1 * limit, f"{steady:.0f} bytes/s against a quota of {limit}"
    assert throttled["throttle_max"] > 0, "librdkafka saw throttle_time_ms in the responses"
    assert len(free["received"]) == 12_000, "a consumer without a quota read everything"
    assert free["throttle_max"] == 0
    samples = metrics(f"http://{weir_only.http}")
    assert sample(samples, "weir_throttled_responses_total", quota="fetch") > 0
    assert sample(samples, "weir_throttle_seconds_total", quota="fetch") > 0


def test_the_java_consumer_reads_everything_at_its_quota(bootstrap, tmp_path):
    topic = quota_and_topic(bootstrap, "java-reader", "consumer_byte_rate=100000", records=2_000)
    config = tmp_path / "consumer.properties"
    config.write_text("client.id=java-reader\nauto.offset.reset=earliest\n")
    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    start = time.monotonic()
    done = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.ConsumerPerformance",
         "--bootstrap-server", bootstrap, "--topic", topic, "--messages", "2000",
         "--group", f"quota-{uuid.uuid4().hex[:8]}", "--consumer.config", str(config),
         "--timeout", "30000", "--print-metrics"],
        capture_output=True, text=True, timeout=120,
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "WARNING: Exiting before consuming" not in done.stdout, done.stdout[-2000:]
    # 2 MB at 100,000 bytes/s: about a window (1 MB) at once, then the rest at the quota.
    assert elapsed >= 6, f"read 2 MB in {elapsed:.1f} s: not throttled"
    throttle = re.search(r"fetch-throttle-time-max:\{client-id=java-reader\}\s*:\s*([0-9.]+)", done.stdout)
    assert throttle and float(throttle.group(1)) > 0, "the Java client saw throttle_time_ms: " + done.stdout[-3000:]


def fetch_flat_out(bootstrap: str, topic: str, client_id: str, seconds: float, out: dict) -> None:
    """Polls the empty end of ``topic``'s one partition with fetches that do not wait, for
    ``seconds``; ``out`` gets how many fetches librdkafka sent and the most throttling it saw
    reported."""
    report: dict = {"fetches": 0, "throttle_max": 0}

    def stats(text: str):
        for broker in json.loads(text).get("brokers", {}).values():
            if broker.get("nodeid", -1) < 0:
                continue
            report["fetches"] = max(report["fetches"], broker.get("req", {}).get("Fetch", 0))
            report["throttle_max"] = max(report["throttle_max"], broker.get("throttle", {}).get("max", 0))

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"quota-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "fetch.wait.max.ms": 0, "statistics.interval.ms": 500, "stats_cb": stats,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        consumer.poll(0.1)
    consumer.poll(0.6)  # one more statistics report
    consumer.close()
    out.update(report)


def test_a_client_above_its_request_quota_is_throttled(weir_only, bootstrap):
    topic = quota_and_topic(bootstrap, "busy", "request_percentage=0.5")
    throttled, free = side_by_side(fetch_flat_out, bootstrap, topic, ("busy", 12), ("idle", 12))
    print(f"fetches in 12 s: {throttled['fetches']} at a request quota of 0.5 %, {free['fetches']} without")
    assert throttled["throttle_max"] > 0, "librdkafka saw throttle_time_ms in the responses"
    assert free["throttle_max"] == 0
    assert throttled["fetches"] * 2 < free["fetches"], (throttled, free)
    samples = metrics(f"http://{weir_only.http}")
    assert sample(samples, "weir_throttled_responses_total", quota="request") > 0


def kafka_topics(bootstrap: str, client_id: str, *args: str) -> subprocess.CompletedProcess:
    """Runs Kafka's TopicCommand (``kafka-topics.sh``) against ``bootstrap`` as ``client_id``."""
    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    return subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.TopicCommand",
         "--bootstrap-server", bootstrap, "--command-config", "/dev/stdin", *args],
        input=f"client.id={client_id}\n", capture_output=True, text=True, timeout=120,
    )


def test_clients_above_their_controller_mutation_rate_are_throttled_or_refused(weir, bootstrap):
    # 4 partitions a second: a full bucket holds 44 (11 s of quota), and a change may take it
    # below zero once. librdkafka sends CreateTopics v4, whose changes are made and throttled;
    # Kafka's Java admin sends v7, refused with THROTTLING_QUOTA_EXCEEDED until the bucket is
    # back to zero.
    for client_id in ("rdkafka-mutator", "java-mutator"):
        kafka_configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name",
                      client_id, "--add-config", "controller_mutation_rate=4")
    client = AdminClient({"bootstrap.servers": bootstrap, "client.id": "rdkafka-mutator"})
    prefix = f"mutation-{uuid.uuid4().hex[:6]}"

    def create(name: str, partitions: int) -> float:
        started = time.monotonic()
        future = client.create_topics([NewTopic(name, num_partitions=partitions,
                                                replication_factor=1)])[name]
        future.result(30)
        return time.monotonic() - started

    assert create(f"{prefix}-a", 40) < 3
    assert create(f"{prefix}-b", 28) < 3, "made: the bucket was not below zero before it"
    # 24 partitions in debt: the client is throttled for 6 s.
    waited = create(f"{prefix}-c", 1)
    assert waited >= 5, f"the next change went through after {waited:.1f} s"

    # kafka-topics does not retry a refusal (it asks its admin client not to): it reports it.
    same_client_id = AdminClient({"bootstrap.servers": bootstrap, "client.id": "java-mutator"})
    same_client_id.create_topics([NewTopic(f"{prefix}-d", num_partitions=68,
                                           replication_factor=1)])[f"{prefix}-d"].result(30)
    refused = kafka_topics(bootstrap, "java-mutator", "--create", "--topic", f"{prefix}-e",
                           "--partitions", "1", "--replication-factor", "1")
    assert refused.returncode != 0
    assert "The throttling quota has been exceeded." in refused.stdout + refused.stderr, \
        refused.stdout[-2000:] + refused.stderr[-4000:]
    topics = client.list_topics(timeout=10).topics
    assert all(f"{prefix}-{t}" in topics for t in "abcd"), sorted(topics)
    assert f"{prefix}-e" not in topics

    # A client without a quota is not held back.
    free = AdminClient({"bootstrap.servers": bootstrap, "client.id": "unlimited"})
    free.create_topics([NewTopic(f"{prefix}-f", num_partitions=100, replication_factor=1)])[
        f"{prefix}-f"].result(30)
    if not weir.is_external:
        samples = metrics(f"http://{weir.http}")
        assert sample(samples, "weir_throttled_responses_total", quota="controller_mutation") >= 2
