"""Restarts under load: an idempotent acks=all producer keeps writing sequential
values while the server is killed (or stopped with SIGTERM) and started again
on the same data dir, twice.

Afterwards every acknowledged value is in the log exactly once, offsets are
contiguous and values strictly increase (no loss, no duplicates, no reordering),
and the log holds exactly the values the producer sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients import create_topic, read_confluent, unique_topic
from harness import Deadline, wait_until

PRODUCER = Path(__file__).resolve().with_name("crash_producer.py")
ACKS_BEFORE_KILL = 3000
ACKS_AFTER_RESTART = 3000
CYCLES = 2
# The long run: a million records, kill -9 after a fifth of them, restart 1.5 s later.
MILLION = int(os.environ.get("WEIR_CRASH_RECORDS", "1000000"))


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.endswith(b"\n"))
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("how", ["kill-9", "sigterm"])
def test_restarts_under_load_lose_nothing(restartable_weir, tmp_path, how):
    """Two stop/start cycles while the producer is busy: SIGKILL (a crash) or SIGTERM (clean, exit 0)."""
    weir = restartable_weir
    bootstrap = weir.bootstrap
    topic = unique_topic(f"crash-{how}")
    create_topic(bootstrap, topic, partitions=1)

    acked_path = tmp_path / "acked"
    errors_path = tmp_path / "errors"
    producer_log = tmp_path / "producer.log"
    with open(producer_log, "wb") as log:
        producer = subprocess.Popen(
            [sys.executable, str(PRODUCER), bootstrap, topic, str(tmp_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def producer_output() -> str:
        parts = [producer_log.read_text(errors="replace")[-4000:]]
        if errors_path.exists():
            parts.append("errors:\n" + errors_path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    def wait_for_acks(target: int, timeout: float, what: str) -> None:
        wait_until(
            lambda: count_lines(acked_path) >= target or producer.poll() is not None,
            timeout,
            interval=0.05,
            what=what,
        )
        assert producer.poll() is None, "producer stopped early:\n" + producer_output()

    acked_at_stop = []
    try:
        target = ACKS_BEFORE_KILL
        for cycle in range(CYCLES):
            wait_for_acks(target, 90, f"{target} acknowledged records (cycle {cycle})")
            errors_before = count_lines(errors_path)
            if how == "kill-9":
                weir.kill()
            else:
                code = weir.stop()
                assert code == 0, f"SIGTERM under load: exit code {code}"
            acked_at_stop.append(count_lines(acked_path))

            # Give the producer a moment to notice (bounded; it reports transport errors).
            deadline = Deadline(10)
            while not deadline.expired() and count_lines(errors_path) == errors_before:
                time.sleep(0.1)

            weir.start()
            target = acked_at_stop[-1] + ACKS_AFTER_RESTART
        wait_for_acks(target, 90, "the producer to make progress after the last restart")
        (tmp_path / "stop").touch()
        try:
            code = producer.wait(timeout=180)
        except subprocess.TimeoutExpired:
            raise AssertionError("producer did not finish within 180s:\n" + producer_output()) from None
        assert code == 0, f"producer exited {code}:\n" + producer_output()
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait(timeout=10)

    result = json.loads((tmp_path / "result").read_text())
    acked = [int(line) for line in acked_path.read_text().split()]
    assert acked_at_stop[0] >= ACKS_BEFORE_KILL
    assert len(acked) == result["delivered"] == result["produced"], result

    log = read_confluent(bootstrap, topic, [0], timeout=120)[0]
    offsets = [r.offset for r in log]
    values = [int(r.value) for r in log]
    assert offsets == list(range(len(log))), "offsets are not contiguous from 0"
    dupes_or_disorder = [(offsets[i], values[i], values[i + 1]) for i in range(len(values) - 1) if values[i] >= values[i + 1]]
    assert not dupes_or_disorder, f"values not strictly increasing (offset, value, next): {dupes_or_disorder[:10]}"
    missing = sorted(set(acked) - set(values))
    assert not missing, f"{len(missing)} acknowledged values lost, e.g. {missing[:10]}"
    assert values == list(range(result["produced"])), "the log must hold exactly the values produced, once each"


def test_a_million_records_through_kill_9_and_a_restart(restartable_weir, tmp_path):
    """An idempotent acks=all librdkafka producer sends a million records; the broker is killed
    after a fifth are acknowledged and restarted 1.5 s later. Every record is delivered, once,
    in order: none times out, none is duplicated."""
    weir = restartable_weir
    topic = unique_topic("million")
    create_topic(weir.bootstrap, topic, partitions=1)
    acked_path = tmp_path / "acked"
    with open(tmp_path / "producer.log", "wb") as log:
        producer = subprocess.Popen(
            [sys.executable, str(PRODUCER), weir.bootstrap, topic, str(tmp_path), str(MILLION)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(lambda: count_lines(acked_path) >= MILLION // 5 or producer.poll() is not None, 120, interval=0.05, what="a fifth acknowledged")
        weir.kill()
        time.sleep(1.5)
        weir.start()
        code = producer.wait(timeout=300)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait(timeout=10)
    result = json.loads((tmp_path / "result").read_text())
    errors = (tmp_path / "errors").read_text(errors="replace") if (tmp_path / "errors").exists() else ""
    assert code == 0 and result["failed"] == 0, f"{result}\n{errors[-3000:]}"
    assert result["produced"] == result["delivered"] == MILLION, result
    log = read_confluent(weir.bootstrap, topic, [0], timeout=240)[0]
    assert len(log) == MILLION, f"{len(log)} records stored"
    values = [int(r.value) for r in log]
    assert values == list(range(MILLION)), "every record once, in order"
