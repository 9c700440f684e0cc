"""A full disk, for real: the server's data directory on a small tmpfs.

Before, ENOSPC stopped the broker and producers saw only timeouts. Now a write that does not
fit is undone and refused with KAFKA_STORAGE_ERROR (which clients retry), reads go on, and
once space returns the producer's retries land: every record exactly once, in order.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import Producer

from clients import create_topic, read_confluent, unique_topic
from harness import wait_until

MIB = 1024 * 1024
RECORDS = 36_000
VALUE_BYTES = 1000


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs holding 16 MiB of ballast that the test can delete to free space."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], capture_output=True, text=True)
    assert mounted.returncode == 0, f"mounting a tmpfs needs root (the test command runs as root): {mounted.stderr}"
    try:
        (mount / "ballast").write_bytes(bytes(16 * MIB))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_refuses_writes_then_every_record_lands_once(make_weir, small_disk):
    weir = make_weir("diskfull", data_dir=small_disk / "data")
    bootstrap = weir.bootstrap
    topic = unique_topic("full")
    create_topic(bootstrap, topic, partitions=1)
    failures: list[str] = []
    delivered = []

    def on_delivery(err, msg):
        if err is None:
            delivered.append(int(msg.value()[:12]))
        else:
            failures.append(err.str())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 240_000,
            "retry.backoff.max.ms": 500,
        }
    )
    for i in range(RECORDS):
        value = b"%012d" % i + bytes(VALUE_BYTES - 12)
        while True:
            try:
                producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    wait_until(
        lambda: "writes refused until space returns" in weir.log_text(),
        timeout=120,
        what="the broker to report the disk full",
    )
    producer.poll(1)
    stored = read_confluent(bootstrap, topic, [0], timeout=60)[0]
    assert [int(r.value[:12]) for r in stored] == list(range(len(stored))), "reads go on, in order"
    assert 0 < len(stored) < RECORDS
    assert weir.is_running()

    (small_disk / "ballast").unlink()
    remaining = producer.flush(240)
    assert remaining == 0 and not failures, f"{remaining} undelivered, failures {set(failures)}"
    wait_until(lambda: "writes accepted again" in weir.log_text(), timeout=30, what="the broker to resume")
    log = read_confluent(bootstrap, topic, [0], timeout=120)[0]
    assert [int(r.value[:12]) for r in log] == list(range(RECORDS)), "every record once, in order"
    assert [r.offset for r in log] == list(range(RECORDS))
    assert sorted(delivered) == list(range(RECORDS))
    code = weir.stop()
    assert code == 0, f"SIGTERM on a nearly full disk: exit code {code}\n" + weir.log_tail()
    time.sleep(0.1)
