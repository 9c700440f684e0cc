"""Client quotas: Kafka's ``kafka-configs`` and ``weir quota`` set, list and remove the
quotas of users, client ids, both, their defaults and IP addresses through AlterClientQuotas
and DescribeClientQuotas. Each tool sees what the other set; a bad key, value or entity is
refused with a clear error and changes nothing; quotas live in the metadata log, so a restart
keeps them. A producer above its ``producer_byte_rate`` is throttled to about it once its
first window has passed, while a producer beside it without a quota is not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import uuid

from confluent_kafka import Producer

from clients import create_topic
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
    weir_cli.ok(["quota", "set", "--ip", "127.0.0.1", "connection_creation_rate=20"], bootstrap)
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

    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 5,
        "queue.buffering.max.kbytes": 512, "statistics.interval.ms": 500, "stats_cb": stats,
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


def test_a_producer_above_its_quota_is_throttled_to_it(bootstrap):
    limit = 200_000
    weir_cli.ok(["quota", "set", "--client-id", "throttled", f"producer_byte_rate={limit}"], bootstrap)
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    throttled: dict = {}
    free: dict = {}
    threads = [
        threading.Thread(target=produce_flat_out, args=(bootstrap, topic, "throttled", 24, throttled)),
        threading.Thread(target=produce_flat_out, args=(bootstrap, topic, "free", 6, free)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert "deliveries" in throttled and "deliveries" in free, "both producers finished"

    # Kafka's window is 11 one-second samples, measured over at least 10: a new client may
    # burst that long, and is then paused in steps of up to a window, so its rate swings
    # around the quota from one second to the next. Measured from 12 s to 24 s, in value
    # bytes (the broker counts batches, about 1.5 % more): within a quarter of the quota.
    steady = sum(size for at, size in throttled["deliveries"] if 12 <= at < 24) / 12
    assert 0.75 * limit <= steady <= 1.25 * limit, f"{steady:.0f} bytes/s against a quota of {limit}"
    assert throttled["throttle_max"] > 0, "librdkafka saw throttle_time_ms in the responses"
    free_rate = sum(size for _, size in free["deliveries"]) / 6
    assert free_rate > 3 * limit, f"a client without a quota is not slowed: {free_rate:.0f} bytes/s"
    assert free["throttle_max"] == 0
