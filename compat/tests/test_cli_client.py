"""``weir produce`` keeps going across a broker restart: it retries until the broker
is back and, being idempotent with ``--acks all``, writes every input line exactly
once and in input order within each partition.

The input is fed to the producer's stdin slowly from a thread so that the restart
(SIGTERM, then a start on the same data directory and port) happens while records
are still being sent.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from clients import java_partition, unique_topic
from harness import wait_until
from weir_cli import Background, ok, parse_describe

TOTAL_LINES = 200_000
CHUNK_LINES = 2_000
CHUNK_PAUSE_S = 0.05  # ~5 s of input in all


class SlowFeeder:
    """Writes lines to a process's stdin in chunks with pauses, then closes it."""

    def __init__(self, proc: subprocess.Popen, lines: list[str]):
        self.proc = proc
        self.lines = lines
        self.written = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for start in range(0, len(self.lines), CHUNK_LINES):
                chunk = self.lines[start : start + CHUNK_LINES]
                self.proc.stdin.write("".join(f"{l}\n" for l in chunk).encode())
                self.proc.stdin.flush()
                self.written = start + len(chunk)
                time.sleep(CHUNK_PAUSE_S)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    d = parse_describe(ok(["topic", "describe", topic], bootstrap, deadline=30).stdout)
    return {p: r.high_watermark for p, r in d.rows.items()}


def first_difference(got: list[str], want: list[str]) -> str:
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"first difference at index {i}: got {g!r}, want {w!r}"
    return f"lengths differ: got {len(got)}, want {len(want)}"


def check_exactly_once_in_order(got: list[str], want: list[str], where: str):
    if got == want:
        return
    seen = {}
    for line in got:
        seen[line] = seen.get(line, 0) + 1
    duplicated = [l for l, n in seen.items() if n > 1]
    missing = [l for l in want if l not in seen]
    raise AssertionError(
        f"{where}: read {len(got)} records, expected {len(want)}; "
        f"{len(duplicated)} duplicated (e.g. {duplicated[:5]}), {len(missing)} missing (e.g. {missing[:5]}); "
        + first_difference(got, want)
    )


@pytest.mark.parametrize("layout", ["one-partition", "keyed"])
def test_produce_retries_across_restart_without_duplicates(restartable_weir, bootstrap, layout):
    weir = restartable_weir
    topic = unique_topic(f"cli-restart-{layout}")
    partitions = 1 if layout == "one-partition" else 3
    ok(["topic", "create", topic, "-p", str(partitions)], bootstrap)

    if layout == "one-partition":
        lines = [f"line-{i:06d}" for i in range(1, TOTAL_LINES + 1)]
        flags = ["-p", "0"]
    else:
        lines = [f"key-{i % 50}:line-{i:06d}" for i in range(1, TOTAL_LINES + 1)]
        flags = ["--key-separator", ":"]

    producer = Background(
        ["produce", topic, "--acks", "all", "--timeout", "60", *flags], bootstrap, stdin=subprocess.PIPE
    )
    feeder = SlowFeeder(producer.proc, lines)
    try:
        # Restart once a good part of the input has been sent, but not all of it.
        wait_until(
            lambda: feeder.written >= TOTAL_LINES // 4 and sum(high_watermarks(bootstrap, topic).values()) > 0,
            30,
            interval=0.05,
            what="the producer to get going",
        )
        assert producer.proc.poll() is None, "the producer finished before the restart\n" + producer.describe()
        code = weir.stop()
        written_at_stop = feeder.written
        assert code == 0, f"weir exited with code {code} on SIGTERM\n" + weir.log_tail()
        time.sleep(1.0)  # the producer meets a closed port for a while
        weir.start()
        assert written_at_stop < TOTAL_LINES, "the whole input was fed before the restart; nothing was tested"

        feeder.thread.join(timeout=90)
        assert not feeder.thread.is_alive(), "stdin was not consumed within 90 s\n" + producer.describe()
        code = producer.wait(90)
        assert code is not None, "weir produce did not finish within 90 s of its input\n" + producer.describe()
        assert feeder.error is None or producer.proc.returncode != 0, feeder.error
        assert code == 0, "weir produce failed across the restart\n" + producer.describe()
        assert producer.err == b"", producer.describe()
    finally:
        producer.stop()

    hw = high_watermarks(bootstrap, topic)
    if layout == "one-partition":
        got = ok(["consume", topic, "-p", "0"], bootstrap, deadline=60).lines
        check_exactly_once_in_order(got, lines, "partition 0")
        assert hw == {0: TOTAL_LINES}
    else:
        for p in range(partitions):
            want = [l.split(":", 1)[1] for l in lines if java_partition(l.split(":", 1)[0].encode(), partitions) == p]
            got = ok(["consume", topic, "-p", str(p)], bootstrap, deadline=60).lines
            check_exactly_once_in_order(got, want, f"partition {p}")
            assert hw[p] == len(want), f"partition {p}: high watermark {hw[p]}, expected {len(want)}"
