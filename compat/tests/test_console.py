"""The web console end to end, in headless Chromium (Debian's `chromium`, driven through
playwright-core by compat/console/check.mjs): every page loads with no console error, a
topic created in the form exists, lag rises on a group's page when its consumer stops, a
flooded partition stands out on the hot-partition view, the record browser shows records as
text, JSON and hex, the overview lists client quotas and the throttling they caused. Also:
what the console shows (the REST API's answers) agrees with
`weir topic describe` and `weir group describe`.

Screenshots of every page are kept in compat/artifacts/console/ (or $WEIR_TEST_ARTIFACTS).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
from confluent_kafka import Producer

from clients import create_topic, group_consumer, unique_group, unique_topic
from harness import REPO_ROOT, wait_until
from weir_cli import ok, parse_describe
from test_cli_groups import describe_group
from test_quotas import fill

CHECK = REPO_ROOT / "compat" / "console" / "check.mjs"
ARTIFACTS = Path(os.environ.get("WEIR_TEST_ARTIFACTS", REPO_ROOT / "compat" / "artifacts")) / "console"


@pytest.fixture
def http(weir_only) -> str:
    assert weir_only.http, "the server logged no http= address"
    return f"http://{weir_only.http}"


class Check:
    """One run of check.mjs in the background: ``result()`` waits for its JSON verdict."""

    def __init__(self, http: str, scenario: str, arg: str | None = None):
        node = shutil.which("node")
        assert node, "node is not installed (scripts/test.sh installs it)"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CHROMIUM": os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"}
        args = [node, str(CHECK), http, scenario, str(ARTIFACTS)] + ([arg] if arg else [])
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT / "compat", env=env)

    def result(self, timeout: float = 180) -> dict:
        out, err = self.process.communicate(timeout=timeout)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert lines, f"check.mjs printed no verdict (exit {self.process.returncode}):\n{out}\n{err}"
        verdict = json.loads(lines[-1])
        assert verdict["ok"] and self.process.returncode == 0, json.dumps(verdict, indent=1) + "\n" + err[-3000:]
        for shot in verdict["screenshots"]:
            assert Path(shot).stat().st_size > 10_000, f"screenshot {shot} is nearly empty"
        return verdict


def publish(http: str, topic: str, records: list[dict]) -> list[dict]:
    answer = requests.post(f"{http}/topics/{topic}/publish", data=json.dumps({"records": records}),
                           headers={"content-type": "application/json"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["offsets"]


def consume_and_commit(consumer, want: int) -> None:
    got = 0
    deadline = time.monotonic() + 60
    while got < want:
        assert time.monotonic() < deadline, f"consumed {got} of {want}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.commit(asynchronous=False)


def test_every_page_loads_with_no_console_error(http, bootstrap):
    topic = unique_topic("console-pages")
    create_topic(bootstrap, topic, partitions=3)
    publish(http, topic, [{"key": f"k{i}", "value": json.dumps({"n": i})} for i in range(30)])
    group = unique_group("console-pages")
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic])
    try:
        consume_and_commit(consumer, 30)
        verdict = Check(http, "pages").result()
    finally:
        consumer.close()
    assert verdict["cluster_health"] == "healthy", verdict
    names = {Path(s).stem for s in verdict["screenshots"]}
    assert names >= {"cluster", "topics", "topic", "hot-partitions", "groups", "records"}, names
    # The console is small: HTML, script and style together, as the browser received them.
    assert 0 < verdict["page_weight_bytes"] < 150_000, verdict
    print(f"console: page weight {verdict['page_weight_bytes']} B, load event {verdict['load_event_ms']} ms, "
          f"first render {verdict['first_render_ms']} ms")


def test_a_topic_created_in_the_form_exists_with_its_config(http, bootstrap):
    topic = unique_topic("console-created")
    verdict = Check(http, "create-topic", topic).result()
    assert topic in verdict["message"], verdict
    described = parse_describe(ok(["topic", "describe", topic], bootstrap).stdout)
    assert described.partitions == 3
    assert described.configs["retention.ms"] == ("3600000", "TOPIC_CONFIG")


def test_lag_rises_on_the_group_page_when_its_consumer_stops(http, bootstrap):
    topic = unique_topic("console-lag")
    group = unique_group("console-lag")
    create_topic(bootstrap, topic, partitions=2)
    publish(http, topic, [{"key": f"k{i}", "value": "v"} for i in range(10)])
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic])
    consume_and_commit(consumer, 10)
    wait_until(lambda: requests.get(f"{http}/groups/{group}", timeout=10).json().get("total_lag") == 0, 30,
               what="lag 0 while the consumer reads")
    # The page is open with lag 0; then the consumer stops and 40 more records arrive.
    check = Check(http, "lag", f"{group}:40")
    time.sleep(8)
    consumer.close()
    publish(http, topic, [{"key": f"k{i}", "value": "v"} for i in range(40)])
    verdict = check.result()
    assert verdict["lag"] == 40, verdict
    assert verdict["chart_points"] >= 3, "the lag chart has its history"


def check_beside_a_flood(http: str, bootstrap: str, topic: str, scenario: str, flooded: int,
                         value: bytes, per_tick: int, tick: float) -> dict:
    """Runs ``scenario`` of check.mjs for partition ``flooded`` of ``topic`` (4 partitions)
    while a producer sends it ``per_tick`` records of ``value`` every ``tick`` seconds and
    the other partitions a record each in turn; the verdict."""
    create_topic(bootstrap, topic, partitions=4)
    calm = [p for p in range(4) if p != flooded]
    stop = threading.Event()

    def flood():
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.kbytes": 65536})
        sent = 0
        while not stop.is_set():
            for _ in range(per_tick):
                try:
                    producer.produce(topic, value, partition=flooded)
                except BufferError:
                    producer.poll(0.01)
            producer.produce(topic, b"calm", partition=calm[sent % len(calm)])
            sent += 1
            producer.poll(0)
            time.sleep(tick)
        producer.flush(30)

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    try:
        return Check(http, scenario, f"{topic}/{flooded}").result()
    finally:
        stop.set()
        flooder.join(60)


def test_a_flooded_partition_stands_out_on_the_hot_partition_view(http, bootstrap):
    # Partition 2 takes ~50 times what each other partition takes.
    topic = unique_topic("console-hot")
    verdict = check_beside_a_flood(http, bootstrap, topic, "hot", 2, b"flood" * 20, 50, 0.02)
    assert verdict["hot"] == [f"{topic}/2"], verdict
    assert f"{topic}/2" in verdict["summary"]


def test_the_hot_partition_view_shows_the_partition_its_broker_holds_back(http, bootstrap):
    # Partition 1 takes ~20 MB/s, far past a quarter of the broker's appends and 1 MiB/s; the
    # others a record now and then, so that it is not written alone.
    topic = unique_topic("console-held-back")
    verdict = check_beside_a_flood(http, bootstrap, topic, "held-back", 1, b"f" * 1000, 200, 0.01)
    assert verdict["held_back"] == [f"{topic}/1"], verdict
    assert f"{topic}/1" in verdict["summary"], verdict


def test_the_record_browser_shows_text_json_and_hex(http, bootstrap):
    topic = unique_topic("console-browse")
    create_topic(bootstrap, topic, partitions=1)
    publish(http, topic, [{"key": "order-1", "value": '{"id": 1, "item": "tea"}', "headers": [{"key": "source", "value": "console-test"}]}])
    verdict = Check(http, "browse", topic).result()
    assert verdict["rows"] == 1, verdict
    assert '"item": "tea"' in verdict["text"] or '"item":"tea"' in verdict["text"], verdict
    assert '"item"' in verdict["json"] and "tea" in verdict["json"], verdict
    assert "7b" in verdict["hex"].lower(), verdict  # '{' as hex


def test_the_overview_shows_client_quotas_and_their_throttling(http, bootstrap):
    ok(["quota", "set", "--client-id", "console-throttled", "producer_byte_rate=200000"], bootstrap)
    topic = unique_topic("console-quotas")
    create_topic(bootstrap, topic, partitions=1)
    # A window of the quota (2 MB) passes at once; the bytes after it are throttled.
    fill(bootstrap, topic, 2_400, client_id="console-throttled")
    cluster = requests.get(f"{http}/cluster", timeout=10).json()
    assert {"entity": "client-id=console-throttled", "quotas": {"producer_byte_rate": 200000.0}} in cluster["client_quotas"]
    produce = next(t for t in cluster["throttling"] if t["quota"] == "produce")
    assert produce["responses"] > 0 and produce["seconds"] > 0, cluster["throttling"]

    verdict = Check(http, "quotas", "client-id=console-throttled").result()
    assert verdict["quotas"] == ["client-id=console-throttled", "producer_byte_rate=200000"], verdict
    rows = {row[0]: row for row in verdict["throttling"]}
    assert set(rows) == {"producer_byte_rate", "consumer_byte_rate", "request_percentage",
                         "controller_mutation_rate"}, verdict
    assert rows["producer_byte_rate"][1] != "0", verdict
    assert rows["controller_mutation_rate"][1] == "0", "no topic change was throttled"


def test_what_the_console_shows_agrees_with_the_cli(http, bootstrap):
    topic = unique_topic("console-agree")
    group = unique_group("console-agree")
    create_topic(bootstrap, topic, partitions=3, config={"retention.ms": "7200000"})
    publish(http, topic, [{"key": f"k{i}", "value": "v"} for i in range(25)])
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic])
    consume_and_commit(consumer, 25)
    consumer.close()
    publish(http, topic, [{"key": f"k{i}", "value": "v"} for i in range(7)])

    shown = requests.get(f"{http}/topics/{topic}", timeout=10).json()
    described = parse_describe(ok(["topic", "describe", topic], bootstrap).stdout)
    assert shown["topic_id"] == described.topic_id
    assert len(shown["partitions"]) == described.partitions
    for p in shown["partitions"]:
        row = described.rows[p["partition"]]
        assert (p["leader"], p["replicas"], p["isr"], p["log_start_offset"], p["high_watermark"]) == \
            (row.leader, row.replicas, row.isr, row.start, row.high_watermark), (p, row)
    configs = {c["name"]: (c["value"], c["source"]) for c in requests.get(f"{http}/topics/{topic}/configs", timeout=10).json()["configs"]}
    for name, (value, source) in described.configs.items():
        assert configs[name] == (value, source), name

    group_shown = requests.get(f"{http}/groups/{group}", timeout=10).json()
    state, rows = describe_group(bootstrap, group)
    assert group_shown["state"].lower() in state.lower(), (group_shown["state"], state)
    for p in group_shown["partitions"]:
        assert rows[p["partition"]] == (p["committed_offset"], p["log_end_offset"], p["lag"]), (p, rows)
    assert group_shown["total_lag"] == 7 == sum(lag for _, _, lag in rows.values())
