"""KafkaJS: admin.createTopics and producer.send (uncompressed and gzip), read
back and compared with librdkafka and kafka-python.

KafkaJS consumes only through consumer groups, so its records are read by the
Python clients instead.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path


from clients import Stored, assert_same_log, java_partition, read_back, unique_topic

COMPAT_DIR = Path(__file__).resolve().parents[1]
SCRIPT = COMPAT_DIR / "kafkajs" / "produce.js"


def run_kafkajs(bootstrap: str, topic: str, count: int) -> dict:
    node = shutil.which("node")
    # A missing tool is a failure, not a skip: scripts/test.sh installs both.
    assert node is not None, "node is not on PATH (scripts/test.sh installs Node.js)"
    assert (COMPAT_DIR / "node_modules" / "kafkajs").is_dir(), "kafkajs is not installed: run `npm ci --prefix compat`"
    proc = subprocess.run(
        [node, str(SCRIPT), bootstrap, topic, str(count)],
        cwd=COMPAT_DIR,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
    )
    assert proc.returncode == 0, f"produce.js failed ({proc.returncode}):\n{proc.stderr[-5000:]}"
    return json.loads(proc.stdout)


def test_kafkajs_produce_read_back(bootstrap):
    topic = unique_topic("kafkajs")
    count = 1500
    sent = run_kafkajs(bootstrap, topic, count)
    assert sent["created"] is True, "admin.createTopics reported that the topic already existed"
    partitions = sent["partitions"]

    expected: dict[int, list[Stored]] = {p: [] for p in range(partitions)}
    total = 0
    for send in sent["sends"]:
        first_offset = {}
        for rec in send["records"]:
            key = base64.b64decode(rec["key"])
            p = java_partition(key, partitions)
            first_offset.setdefault(p, len(expected[p]))
            expected[p].append(
                Stored(
                    partition=p,
                    offset=len(expected[p]),
                    key=key,
                    value=base64.b64decode(rec["value"]),
                    headers=tuple((name, base64.b64decode(v)) for name, v in rec["headers"]),
                    timestamp=rec["timestamp"],
                )
            )
            total += 1
        # Each send's acknowledgement names the offset of its first record in each partition.
        acked = {int(r["partition"]): int(r["baseOffset"]) for r in send["results"]}
        for r in send["results"]:
            assert r["errorCode"] == 0, r
        assert acked == first_offset, f"{send['compression']} send: base offsets {acked}, expected {first_offset}"
    assert total == count
    assert all(expected[p] for p in range(partitions)), "every partition should get records"

    for reader in ("librdkafka", "kafka-python"):
        assert_same_log(read_back(reader, bootstrap, topic, range(partitions)), expected, context=f"read by {reader}")
