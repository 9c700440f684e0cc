"""The HTTP gateway (`--http-listen`): every endpoint of the REST API with its error cases,
records crossing between HTTP and Kafka clients in both directions, consumer groups over
HTTP, /metrics read with Prometheus's own text-format parser, health checks, the console's
assets, and a property-based run of the OpenAPI document (schemathesis) with no 5xx.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from clients import (
    confluent_consumer,
    create_topic,
    group_consumer,
    java_partition,
    unique_group,
    unique_topic,
)
from harness import REPO_ROOT, WeirServer, wait_until, weir_binary
from weir_cluster import DevCluster, free_base_port

JSON = {"content-type": "application/json"}


@pytest.fixture
def http(weir_only) -> str:
    assert weir_only.http, "the server logged no http= address"
    return f"http://{weir_only.http}"


def call(method: str, url: str, **kw) -> requests.Response:
    if "json" in kw:
        kw["data"] = json.dumps(kw.pop("json"))
        kw.setdefault("headers", JSON)
    return requests.request(method, url, timeout=60, **kw)


def error_of(response: requests.Response, status: int, code: str | None = None) -> str:
    """Asserts an error answer: the status, a JSON body with a code (this one) and a message."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert error["message"], error
    if code is not None:
        assert error["code"] == code, error
    return error["code"]


def metrics(http: str) -> dict:
    """Every sample of /metrics, parsed by prometheus_client: {(name, labels…): value}."""
    response = requests.get(f"{http}/metrics", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def sample(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


# -- health, documents, routing ------------------------------------------------------------


def test_health_checks(http):
    live = requests.get(f"{http}/health/live", timeout=10)
    assert live.status_code == 200 and live.json() == {"status": "live"}
    ready = requests.get(f"{http}/health/ready", timeout=10)
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


def test_openapi_document_describes_the_routes(http):
    document = requests.get(f"{http}/openapi.json", timeout=10).json()
    assert document["openapi"].startswith("3.")
    paths = set(document["paths"])
    for path in ("/topics", "/topics/{topic}", "/topics/{topic}/configs", "/topics/{topic}/publish",
                 "/topics/{topic}/partitions/{partition}/records", "/groups", "/groups/{group}",
                 "/groups/{group}/consumers", "/groups/{group}/consumers/{instance}/records",
                 "/groups/{group}/consumers/{instance}/commit", "/cluster", "/metrics",
                 "/health/live", "/health/ready"):
        assert path in paths, path


def test_unknown_routes_and_methods_answer_json_errors(http):
    error_of(requests.get(f"{http}/nope", timeout=10), 404, "not_found")
    error_of(requests.put(f"{http}/topics", timeout=10), 405, "method_not_allowed")


# -- topics ----------------------------------------------------------------------------


def test_topic_lifecycle_and_its_errors(http):
    name = unique_topic("http-topic")
    created = call("POST", f"{http}/topics", json={"name": name, "partitions": 3, "configs": {"retention.ms": "3600000"}})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["name"] == name and len(body["partitions"]) == 3
    assert all(p["leader"] >= 0 and p["isr"] for p in body["partitions"])

    error_of(call("POST", f"{http}/topics", json={"name": name}), 409, "topic_already_exists")
    error_of(call("POST", f"{http}/topics", json={"name": "bad name!"}), 400, "invalid_topic_exception")
    error_of(call("POST", f"{http}/topics", json={"name": "x", "partitons": 3}), 400, "bad_json")
    error_of(call("POST", f"{http}/topics", json={"name": "x", "partitions": "3"}), 400, "bad_json")
    error_of(call("POST", f"{http}/topics", data="{not json", headers=JSON), 400, "bad_json")
    error_of(call("POST", f"{http}/topics", data=json.dumps({"name": "y"})), 415, "unsupported_media_type")
    error_of(call("POST", f"{http}/topics", json={"name": unique_topic("rf"), "replication_factor": 3}), 400, "invalid_replication_factor")
    error_of(call("POST", f"{http}/topics", json={"name": unique_topic("cfg"), "configs": {"no.such.config": "1"}}), 400, "invalid_config")

    listed = call("GET", f"{http}/topics").json()["topics"]
    assert {"name": name, "partitions": 3, "replication_factor": 1, "internal": False} in listed

    described = call("GET", f"{http}/topics/{name}").json()
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    error_of(call("GET", f"{http}/topics/{unique_topic('missing')}"), 404)

    configs = {c["name"]: c for c in call("GET", f"{http}/topics/{name}/configs").json()["configs"]}
    assert configs["retention.ms"]["value"] == "3600000" and configs["retention.ms"]["source"] == "TOPIC_CONFIG"
    changed = call("PATCH", f"{http}/topics/{name}/configs", json={"set": {"cleanup.policy": "compact"}, "delete": ["retention.ms"]})
    assert changed.status_code == 200, changed.text
    after = {c["name"]: c for c in changed.json()["configs"]}
    assert after["cleanup.policy"]["value"] == "compact" and after["retention.ms"]["source"] != "TOPIC_CONFIG"
    error_of(call("PATCH", f"{http}/topics/{name}/configs", json={}), 400, "invalid_request")
    error_of(call("PATCH", f"{http}/topics/{name}/configs", json={"set": {"retention.ms": "soon"}}), 400, "invalid_config")

    grown = call("POST", f"{http}/topics/{name}/partitions", json={"total": 5})
    assert grown.status_code == 200 and len(grown.json()["partitions"]) == 5, grown.text
    error_of(call("POST", f"{http}/topics/{name}/partitions", json={"total": 2}), 400, "invalid_partitions")

    assert call("DELETE", f"{http}/topics/{name}").status_code == 204
    wait_until(lambda: call("GET", f"{http}/topics/{name}").status_code == 404, 30, what="the topic to be gone")
    error_of(call("DELETE", f"{http}/topics/{name}"), 404)


# -- records ---------------------------------------------------------------------------


def test_published_records_are_read_by_a_kafka_client_where_the_answer_says(http, bootstrap):
    topic = unique_topic("http-to-kafka")
    create_topic(bootstrap, topic, partitions=4)
    records = [
        {"key": "alpha", "value": "first", "headers": [{"key": "h1", "value": "v1"}, {"key": "empty", "value": None}]},
        {"value": "no key"},
        {"key": base64.b64encode(b"\x00\xffkey").decode(), "value": base64.b64encode(bytes(range(256))).decode(), "encoding": "base64"},
        {"key": "pinned", "value": "to 3", "partition": 3, "timestamp": 1_700_000_000_000},
        {"key": None, "value": None},
    ]
    answer = call("POST", f"{http}/topics/{topic}/publish", json={"records": records})
    assert answer.status_code == 200, answer.text
    offsets = answer.json()["offsets"]
    assert len(offsets) == len(records) and all("error" not in o for o in offsets)
    assert offsets[3]["partition"] == 3
    # Keyed records go where murmur2 puts them, as a Java client's would.
    assert offsets[0]["partition"] == java_partition(b"alpha", 4)
    assert offsets[2]["partition"] == java_partition(b"\x00\xffkey", 4)

    consumer = confluent_consumer(bootstrap)
    try:
        seen = {}
        for (record, where) in zip(records, offsets):
            consumer.assign([TopicPartition(topic, where["partition"], where["offset"])])
            message = None
            deadline = time.monotonic() + 30
            while message is None and time.monotonic() < deadline:
                message = consumer.poll(1)
            assert message is not None and message.error() is None, message
            assert (message.partition(), message.offset()) == (where["partition"], where["offset"])
            seen[where["offset"], where["partition"]] = message
        first = seen[offsets[0]["offset"], offsets[0]["partition"]]
        assert (first.key(), first.value()) == (b"alpha", b"first")
        assert first.headers() == [("h1", b"v1"), ("empty", None)]
        binary = seen[offsets[2]["offset"], offsets[2]["partition"]]
        assert (binary.key(), binary.value()) == (b"\x00\xffkey", bytes(range(256)))
        pinned = seen[offsets[3]["offset"], 3]
        assert pinned.timestamp()[1] == 1_700_000_000_000
        null = seen[offsets[4]["offset"], offsets[4]["partition"]]
        assert (null.key(), null.value()) == (None, None)
    finally:
        consumer.close()


def test_kafka_records_are_read_over_http_at_their_offsets(http, bootstrap):
    topic = unique_topic("kafka-to-http")
    create_topic(bootstrap, topic, partitions=2)
    delivered = []
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    sent = [(b"k1", b"text value", [("trace", b"abc")]), (b"k2", b"\xff\xfe binary", []), (None, b'{"a": 1}', []),
            (b"k3", b"\x00\x01\x02", [])]
    for key, value, headers in sent:
        producer.produce(topic, key=key, value=value, headers=headers, on_delivery=lambda err, msg: delivered.append((err, msg.value(), msg.partition(), msg.offset())))
    assert producer.flush(30) == 0
    assert all(err is None for err, _, _, _ in delivered)
    where = {value: (partition, offset) for _, value, partition, offset in delivered}
    for key, value, headers in sent:
        partition, offset = where[value]
        got = call("GET", f"{http}/topics/{topic}/partitions/{partition}/records", params={"offset": offset, "max": 1})
        assert got.status_code == 200, got.text
        record = got.json()["records"][0]
        assert record["offset"] == offset
        if record["encoding"] == "text":
            assert record["value"] == value.decode()
            assert record["key"] == (key.decode() if key else None)
        else:
            assert base64.b64decode(record["value"]) == value
        assert [(h["key"], h["value"]) for h in record["headers"]] == [(k, v.decode()) for k, v in headers]
    # The binary values came back as base64 (control characters too, though valid UTF-8), and
    # every record can be asked for as base64.
    partition, offset = where[sent[3][1]]
    control = call("GET", f"{http}/topics/{topic}/partitions/{partition}/records", params={"offset": offset, "max": 1}).json()["records"][0]
    assert control["encoding"] == "base64" and base64.b64decode(control["value"]) == b"\x00\x01\x02"
    partition, offset = where[sent[1][1]]
    binary = call("GET", f"{http}/topics/{topic}/partitions/{partition}/records", params={"offset": offset, "max": 1}).json()["records"][0]
    assert binary["encoding"] == "base64" and base64.b64decode(binary["value"]) == b"\xff\xfe binary"
    partition, offset = where[sent[0][1]]
    forced = call("GET", f"{http}/topics/{topic}/partitions/{partition}/records", params={"offset": offset, "max": 1, "encoding": "base64"}).json()["records"][0]
    assert forced["encoding"] == "base64" and base64.b64decode(forced["value"]) == b"text value"


def test_acks_levels_and_publish_errors(http, bootstrap):
    topic = unique_topic("http-acks")
    create_topic(bootstrap, topic, partitions=1)
    for acks in ("all", "-1", "1"):
        answer = call("POST", f"{http}/topics/{topic}/publish", params={"acks": acks}, json={"value": acks})
        assert answer.status_code == 200 and "offset" in answer.json()["offsets"][0], answer.text
    fire_and_forget = call("POST", f"{http}/topics/{topic}/publish", params={"acks": "0"}, json={"value": "0"})
    assert fire_and_forget.status_code == 200 and "offset" not in fire_and_forget.json()["offsets"][0]
    error_of(call("POST", f"{http}/topics/{topic}/publish", params={"acks": "2"}, json={"value": "x"}), 400, "invalid_request")
    error_of(call("POST", f"{http}/topics/{topic}/publish", params={"ack": "1"}, json={"value": "x"}), 400, "invalid_request")
    error_of(call("POST", f"{http}/topics/{topic}/publish", json={"value": "x", "colour": "red"}), 400, "bad_json")
    error_of(call("POST", f"{http}/topics/{topic}/publish", json={"value": "%%%", "encoding": "base64"}), 400, "invalid_request")
    error_of(call("POST", f"{http}/topics/{topic}/publish", json={"records": []}), 400, "invalid_request")
    error_of(call("POST", f"{http}/topics/{topic}/publish", json={"records": [{"value": "x"}] * 10_001}), 400, "bad_json")
    error_of(call("POST", f"{http}/topics/{topic}/publish", json={"value": "x", "partition": 7}), 404)
    error_of(call("POST", f"{http}/topics/__consumer_offsets/publish", json={"value": "x"}), 400, "invalid_request")
    # A record over max.message.bytes (1 MiB by default) is refused by the broker.
    error_of(call("POST", f"{http}/topics/{topic}/publish", json={"value": "x" * (1_100_000)}), 413, "message_too_large")
    error_of(call("POST", f"{http}/topics/{topic}/publish", json={"value": "x", "timestamp": 2**63 - 1}), 400, "invalid_timestamp")
    # A refused record leaves the partition open to the next one, at once.
    started = time.monotonic()
    assert call("POST", f"{http}/topics/{topic}/publish", json={"value": "after"}).status_code == 200
    assert time.monotonic() - started < 10
    # A body over the gateway's limit is refused before it is read whole.
    error_of(call("POST", f"{http}/topics/{topic}/publish", data=b'{"value": "' + b"x" * (9 * 1024 * 1024) + b'"}', headers=JSON), 413, "payload_too_large")
    # Nothing refused reached the log.
    records = call("GET", f"{http}/topics/{topic}/partitions/0/records", params={"max": 100}).json()["records"]
    assert [r["value"] for r in records] == ["all", "-1", "1", "0", "after"]


def test_read_positions_long_poll_and_errors(http, bootstrap):
    topic = unique_topic("http-read")
    create_topic(bootstrap, topic, partitions=2)
    url = f"{http}/topics/{topic}/partitions/0/records"
    stamps = [1_700_000_000_000 + i * 1000 for i in range(10)]
    for i, stamp in enumerate(stamps):
        assert call("POST", f"{http}/topics/{topic}/publish", json={"value": f"r{i}", "partition": 0, "timestamp": stamp}).status_code == 200
    page = call("GET", url, params={"max": 4}).json()
    assert [r["value"] for r in page["records"]] == ["r0", "r1", "r2", "r3"]
    assert page["next_offset"] == 4 and page["high_watermark"] == 10
    rest = call("GET", url, params={"offset": page["next_offset"], "max": 100}).json()
    assert [r["offset"] for r in rest["records"]] == list(range(4, 10))
    by_time = call("GET", url, params={"timestamp": stamps[7], "max": 1}).json()
    assert [r["value"] for r in by_time["records"]] == ["r7"]
    at_end = call("GET", url, params={"offset": 10}).json()
    assert at_end["records"] == [] and at_end["next_offset"] == 10

    # A long poll at the end answers with the record published while it waits.
    answer = {}
    waiter = threading.Thread(target=lambda: answer.update(call("GET", url, params={"offset": 10, "wait_ms": 20000}).json()))
    waiter.start()
    time.sleep(0.5)
    assert call("POST", f"{http}/topics/{topic}/publish", json={"value": "late", "partition": 0}).status_code == 200
    waiter.join(30)
    assert [r["value"] for r in answer["records"]] == ["late"]

    error_of(call("GET", url, params={"offset": 1000}), 416, "offset_out_of_range")
    error_of(call("GET", f"{http}/topics/{topic}/partitions/9/records"), 404, "unknown_partition")
    error_of(call("GET", f"{http}/topics/{topic}/partitions/x/records"), 400, "invalid_request")
    error_of(call("GET", f"{http}/topics/{unique_topic('none')}/partitions/0/records"), 404)
    error_of(call("GET", url, params={"max": 0}), 400, "invalid_request")
    error_of(call("GET", url, params={"wait_ms": 30001}), 400, "invalid_request")
    error_of(call("GET", url, params={"offset": 1, "timestamp": 1}), 400, "invalid_request")
    error_of(call("GET", url, params={"encoding": "hex"}), 400, "invalid_request")
    error_of(call("GET", url, params={"ofset": 1}), 400, "invalid_request")


# -- consumer groups --------------------------------------------------------------------


def test_http_consumer_instances_share_a_group_and_commit_what_they_returned(http, bootstrap):
    topic = unique_topic("http-group")
    group = unique_group("http-group")
    create_topic(bootstrap, topic, partitions=2)
    values = [f"m{i}" for i in range(40)]
    assert call("POST", f"{http}/topics/{topic}/publish", json={"records": [{"key": f"k{i}", "value": v} for i, v in enumerate(values)]}).status_code == 200

    instances = []
    for _ in range(2):
        created = call("POST", f"{http}/groups/{group}/consumers", json={"topics": [topic], "auto_offset_reset": "earliest"})
        assert created.status_code == 201, created.text
        instances.append(created.json()["instance_id"])
    assert instances[0] != instances[1]

    seen: dict[str, list[str]] = {i: [] for i in instances}
    assignments = {}

    def drained():
        for instance in instances:
            polled = call("GET", f"{http}/groups/{group}/consumers/{instance}/records", params={"max": 7, "wait_ms": 200})
            assert polled.status_code == 200, polled.text
            body = polled.json()
            seen[instance] += [r["value"] for r in body["records"]]
            assignments[instance] = body["assignment"]
        return sum(len(v) for v in seen.values()) >= len(values)

    wait_until(drained, 60, interval=0, what="both instances to receive every record")
    everything = sorted(v for vs in seen.values() for v in vs)
    assert everything == sorted(values), "each record exactly once across the group"
    owned = [p for a in assignments.values() for t in a for p in t["partitions"]]
    assert sorted(owned) == [0, 1], assignments

    for instance in instances:
        committed = call("POST", f"{http}/groups/{group}/consumers/{instance}/commit")
        assert committed.status_code == 200, committed.text
    described = call("GET", f"{http}/groups/{group}").json()
    assert len(described["members"]) == 2 and described["state"] == "Stable"
    assert described["total_lag"] == 0
    assert {p["partition"]: p["lag"] for p in described["partitions"]} == {0: 0, 1: 0}
    assert group in [g["group_id"] for g in call("GET", f"{http}/groups").json()["groups"]]
    # The offsets topic exists now, and is never deleted.
    error_of(call("DELETE", f"{http}/topics/__consumer_offsets"), 403, "topic_deletion_disabled")

    # Explicit offsets, and the errors.
    rewound = call("POST", f"{http}/groups/{group}/consumers/{instances[0]}/commit", json={"offsets": [{"topic": topic, "partition": assignments[instances[0]][0]["partitions"][0], "offset": 0}]})
    assert rewound.status_code == 200, rewound.text
    error_of(call("POST", f"{http}/groups/{group}/consumers/{instances[0]}/commit", json={"offsets": [{"topic": topic, "partition": 0, "offset": -5}]}), 400)
    error_of(call("POST", f"{http}/groups/{group}/consumers", json={"topics": []}), 400)
    error_of(call("POST", f"{http}/groups/{group}/consumers", json={"topics": ["bad name"]}), 400)
    error_of(call("POST", f"{http}/groups/{group}/consumers", json={"topics": [topic], "auto_offset_reset": "middle"}), 400)
    error_of(call("GET", f"{http}/groups/{group}/consumers/nobody/records"), 404, "unknown_consumer")

    for instance in instances:
        assert call("DELETE", f"{http}/groups/{group}/consumers/{instance}").status_code == 204
    error_of(call("GET", f"{http}/groups/{group}/consumers/{instances[0]}/records"), 404, "unknown_consumer")
    wait_until(lambda: call("GET", f"{http}/groups/{group}").json()["members"] == [], 30, what="the instances to leave the group")
    error_of(call("GET", f"{http}/groups/{unique_group('none')}"), 404, "unknown_group")


# -- cluster and metrics ------------------------------------------------------------------


def test_cluster_status(http, weir_only):
    status = call("GET", f"{http}/cluster").json()
    assert status["health"] == "healthy"
    assert status["cluster_id"] == weir_only.cluster_id
    assert [b["node_id"] for b in status["brokers"]] == [weir_only.node_id]
    assert status["brokers"][0]["address"] == weir_only.bootstrap and not status["brokers"][0]["fenced"]
    assert status["controller"] == weir_only.node_id and status["under_replicated"] == []
    assert status["quorum"]["leader"] == weir_only.node_id


def test_metrics_parse_and_follow_the_broker(http, bootstrap):
    topic = unique_topic("http-metrics")
    create_topic(bootstrap, topic, partitions=2)
    assert call("POST", f"{http}/topics/{topic}/publish", json={"records": [{"value": "x" * 100, "partition": 1}] * 5}).status_code == 200
    call("GET", f"{http}/topics/{topic}/partitions/1/records")
    samples = metrics(http)
    assert sample(samples, "weir_partition_high_watermark", topic=topic, partition=1) == 5
    assert sample(samples, "weir_partition_log_end_offset", topic=topic, partition=1) == 5
    assert sample(samples, "weir_partition_high_watermark", topic=topic, partition=0) == 0
    assert sample(samples, "weir_partition_received_records_total", topic=topic, partition=1) == 5
    assert sample(samples, "weir_partition_received_bytes_total", topic=topic, partition=1) > 500
    assert sample(samples, "weir_partition_sent_bytes_total", topic=topic, partition=1) > 500
    assert sample(samples, "weir_partition_size_bytes", topic=topic, partition=1) > 500
    assert sample(samples, "weir_partition_under_replicated", topic=topic, partition=1) == 0
    assert sample(samples, "weir_partition_isr_size", topic=topic, partition=1) == 1
    assert sample(samples, "weir_requests_total", api="Produce") >= 1
    assert sample(samples, "weir_request_duration_seconds_count", api="Produce") == sample(samples, "weir_requests_total", api="Produce")
    buckets = sorted((float(dict(labels)["le"]), value) for (name, labels), value in samples.items()
                     if name == "weir_request_duration_seconds_bucket" and dict(labels)["api"] == "Fetch")
    assert buckets and all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), "cumulative buckets"
    assert buckets[-1][0] == float("inf")
    assert sample(samples, "weir_connections") >= 1
    assert sample(samples, "weir_received_bytes_total") > 0 and sample(samples, "weir_sent_bytes_total") > 0
    assert sample(samples, "weir_controller_active") == 1 and sample(samples, "weir_broker_ready") == 1
    assert sample(samples, "weir_raft_term") >= 1 and sample(samples, "weir_raft_commit_index") >= 1
    assert sample(samples, "weir_cluster_brokers", state="alive") == 1
    assert sample(samples, "weir_cluster_under_replicated_partitions") == 0


def test_group_lag_rises_when_its_consumer_stops(http, bootstrap):
    topic = unique_topic("http-lag")
    group = unique_group("http-lag")
    create_topic(bootstrap, topic, partitions=2)
    publish = lambda n: call("POST", f"{http}/topics/{topic}/publish", json={"records": [{"key": f"k{i}", "value": "v"} for i in range(n)]})
    assert publish(20).status_code == 200
    consumer = group_consumer(bootstrap, group, **{"enable.auto.commit": False})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < 20 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got += 1
    assert got == 20
    consumer.commit(asynchronous=False)
    wait_until(lambda: sample(metrics(http), "weir_group_lag_records_sum", group=group) == 0, 30, what="lag 0 while consuming")
    consumer.close()
    assert publish(30).status_code == 200
    def lag_reached():
        samples = metrics(http)
        return samples if sample(samples, "weir_group_lag_records_sum", group=group) == 30 else None

    samples = wait_until(lag_reached, 30, what="lag 30 once the consumer stopped")
    per_partition = [sample(samples, "weir_group_lag_records", group=group, topic=topic, partition=p) for p in (0, 1)]
    assert sum(per_partition) == 30
    assert sample(samples, "weir_group_members", group=group) == 0
    assert call("GET", f"{http}/groups/{group}").json()["total_lag"] == 30


# -- the console's assets ----------------------------------------------------------------


def test_console_is_served_from_the_binary_with_no_outside_resource(http):
    page = requests.get(f"{http}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset, kind in (("/console/app.js", "text/javascript"), ("/console/style.css", "text/css")):
        response = requests.get(f"{http}{asset}", timeout=10)
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        text = response.text.replace("http://www.w3.org/2000/svg", "")  # a name, never fetched
        assert "http://" not in text and "https://" not in text
    assert "http://" not in page.text and "https://" not in page.text


# -- property-based run of the OpenAPI document --------------------------------------------

SCHEMATHESIS_EXAMPLES = int(os.environ.get("WEIR_SCHEMATHESIS_EXAMPLES", "15"))


def test_openapi_property_based_run_has_no_server_error(tmp_path_factory):
    """schemathesis generates requests from /openapi.json (valid and invalid ones) against a
    server of its own, and checks every answer: no 5xx, statuses and bodies as documented,
    invalid input refused. Its `positive_data_acceptance` check is left out: schema-valid
    requests the cluster refuses for what the schema cannot say (a topic already there, fewer
    partitions than it has) are right to be 4xx."""
    work = tmp_path_factory.mktemp("schemathesis")
    server = WeirServer(binary=weir_binary(), data_dir=work / "data", log_path=work / "weir.log")
    server.start()
    try:
        binary = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin" / "schemathesis"
        if not binary.exists():
            binary = Path(shutil.which("schemathesis") or "schemathesis")
        run = subprocess.run(
            [str(binary), "run", f"http://{server.http}/openapi.json", "--checks", "all",
             "--exclude-checks", "positive_data_acceptance", "--max-examples", str(SCHEMATHESIS_EXAMPLES),
             "--workers", "1", "--request-timeout", "40", "--seed", "20261203", "--no-color"],
            capture_output=True, text=True, timeout=600, cwd=work,
        )
        output = run.stdout + run.stderr
        (work / "schemathesis.txt").write_text(output)
        assert run.returncode == 0, output[-6000:]
        assert "No issues found" in output or "passed" in output, output[-3000:]
        generated = [line for line in output.splitlines() if "generated" in line]
        print("schemathesis:", generated[-1].strip() if generated else "?")
    finally:
        code = server.close()
        assert code in (None, 0), server.log_tail()


# -- a cluster losing a broker --------------------------------------------------------------


def test_metrics_and_cluster_status_follow_a_broker_that_dies_and_returns(tmp_path):
    """In a three-node cluster: killing a follower of a replicated partition makes its leader
    report it under-replicated (metrics and /cluster) and the cluster degraded with the node
    fenced; once the node is back and caught up, all of it clears."""
    env = {"WEIR_REPLICA_LAG_TIME_MAX_MS": "3000", "WEIR_BROKER_SESSION_TIMEOUT_MS": "4000"}
    cluster = DevCluster(tmp_path / "cluster", free_base_port(), env=env)
    try:
        cluster.start()
        topic = unique_topic("http-urp")
        cluster.admin().create_topics([NewTopic(topic, num_partitions=1, replication_factor=3)])[topic].result(timeout=30)
        cluster.wait_in_sync(topic)
        leader = cluster.leader(topic, 0)
        controller = (cluster.quorum_leader() or (0, 0))[0]
        victim = next(n for n in cluster.node_ids() if n not in (leader, controller))
        at_leader = f"http://{cluster.http_address(leader)}"
        assert call("POST", f"{at_leader}/topics/{topic}/publish", json={"value": "before"}).status_code == 200

        def leader_says(under_replicated: int, isr: int):
            samples = metrics(at_leader)
            return (sample(samples, "weir_partition_under_replicated", topic=topic, partition=0) == under_replicated
                    and sample(samples, "weir_partition_isr_size", topic=topic, partition=0) == isr)

        assert leader_says(0, 3)
        cluster.kill_node(victim)
        wait_until(lambda: leader_says(1, 2), 60, what="the leader to report the partition under-replicated")

        def degraded():
            status = call("GET", f"{at_leader}/cluster").json()
            fenced = {b["node_id"] for b in status["brokers"] if b["fenced"]}
            listed = [(p["topic"], p["partition"]) for p in status["under_replicated"]]
            return status if status["health"] == "degraded" and fenced == {victim} and (topic, 0) in listed else None

        status = wait_until(degraded, 60, what="/cluster to show the node fenced and the partition under-replicated")
        assert status["controller"] == status["quorum"]["leader"] != victim
        samples = metrics(f"http://{cluster.http_address(status['controller'])}")
        assert sample(samples, "weir_cluster_brokers", state="fenced") == 1
        assert sample(samples, "weir_cluster_under_replicated_partitions") >= 1
        # Records still go in: acks=all waits for the ISR, which is the two left.
        assert call("POST", f"{at_leader}/topics/{topic}/publish", json={"value": "while down"}).status_code == 200

        cluster.restart_node(victim)
        assert cluster.wait_serving(victim, 60), cluster.logs()
        wait_until(lambda: leader_says(0, 3), 90, what="the partition to be fully replicated again")
        wait_until(lambda: call("GET", f"{at_leader}/cluster").json()["health"] == "healthy", 60,
                   what="/cluster healthy again")
        # Ready once it has joined (its followers may have caught up a little before that).
        wait_until(lambda: requests.get(f"http://{cluster.http_address(victim)}/health/ready", timeout=10).status_code == 200,
                   30, what="the restarted node to be ready")
    finally:
        cluster.kill()
