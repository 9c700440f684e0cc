"""Running the ``weir`` command-line client (``weir topic``, ``produce``, ``consume``,
``cluster``, ``bench``) as a subprocess and checking its outcome.

Every run has a deadline: a command that does not finish in time is killed and the
test fails with whatever it printed so far.  ``WEIR_BROKERS`` is removed from the
environment so that only an explicit ``--brokers`` (or the ``env`` argument) decides
where a command connects.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass

from harness import Deadline, weir_binary

DEFAULT_DEADLINE_S = 60.0

# `weir topic describe`: the header, one row per partition, then the configs.
DESCRIBE_HEADER_RE = re.compile(r"^topic (\S+)\s+id (\S+)\s+partitions (\d+)$")
DESCRIBE_COLUMNS = ["PARTITION", "LEADER", "REPLICAS", "ISR", "START", "HIGH-WATERMARK"]
DESCRIBE_ROW_RE = re.compile(r"^\s*(\d+)\s+(-?\d+)\s+(\S+)\s+(\S*)\s+(-?\d+)\s+(-?\d+)\s*$")
DESCRIBE_CONFIG_RE = re.compile(r"^  (\S+) = (.*?)  \(([A-Z_]+)\)$")


@dataclass
class CliResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    elapsed: float

    def describe(self) -> str:
        return (
            f"$ weir {' '.join(self.args)}\n"
            f"exit code {self.returncode} after {self.elapsed:.2f}s\n"
            f"--- stdout ({len(self.stdout)} chars) ---\n{self.stdout[-3000:]}\n"
            f"--- stderr ---\n{self.stderr[-3000:]}"
        )

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.lines]


def command(args: list[str], brokers: str | None) -> list[str]:
    cmd = [str(weir_binary()), *args]
    if brokers is not None:
        cmd += ["--brokers", brokers]
    return cmd


def environment(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "WEIR_BROKERS"}
    env.update(extra or {})
    return env


def run(
    args: list[str],
    brokers: str | None = None,
    stdin: bytes | str | None = None,
    deadline: float = DEFAULT_DEADLINE_S,
    env: dict | None = None,
) -> CliResult:
    """Run ``weir ARGS [--brokers B]`` to completion (bounded by ``deadline``)."""
    if isinstance(stdin, str):
        stdin = stdin.encode()
    cmd = command(args, brokers)
    shown = [*args, *(["--brokers", brokers] if brokers is not None else [])]
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=deadline,
            env=environment(env),
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode("utf-8", "replace")
        err = (exc.stderr or b"").decode("utf-8", "replace")
        raise AssertionError(
            f"`weir {' '.join(shown)}` did not finish within {deadline:.0f}s (killed)\n"
            f"--- stdout so far ---\n{out[-3000:]}\n--- stderr so far ---\n{err[-3000:]}"
        ) from None
    return CliResult(
        args=shown,
        returncode=proc.returncode,
        stdout=proc.stdout.decode("utf-8"),
        stderr=proc.stderr.decode("utf-8", "replace"),
        elapsed=time.monotonic() - start,
    )


def ok(args: list[str], brokers: str | None = None, **kw) -> CliResult:
    """Run a command that must succeed: exit 0 and nothing on stderr."""
    result = run(args, brokers, **kw)
    assert result.returncode == 0, "expected success\n" + result.describe()
    assert result.stderr == "", "a successful command printed on stderr\n" + result.describe()
    return result


def runtime_error(args: list[str], brokers: str | None = None, **kw) -> CliResult:
    """Run a command that must fail at run time: exit 1, one ``error: `` line on stderr."""
    result = run(args, brokers, **kw)
    assert result.returncode == 1, "expected exit code 1\n" + result.describe()
    assert result.stdout == "", "a failing command printed on stdout\n" + result.describe()
    assert result.stderr.startswith("error: ") and result.stderr.endswith("\n"), result.describe()
    assert result.stderr.count("\n") == 1, "the error is not one line\n" + result.describe()
    return result


def usage_error(args: list[str], brokers: str | None = None, **kw) -> CliResult:
    """Run a command that must be refused as a usage error: exit 2, ``error: `` first."""
    result = run(args, brokers, **kw)
    assert result.returncode == 2, "expected exit code 2 (usage error)\n" + result.describe()
    assert result.stdout == "", result.describe()
    assert result.stderr.startswith("error: "), result.describe()
    return result


# ---------------------------------------------------------------------------------
# Output parsers
# ---------------------------------------------------------------------------------

@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int
    high_watermark: int


@dataclass
class Description:
    name: str
    topic_id: str
    partitions: int
    rows: dict[int, PartitionRow]
    configs: dict[str, tuple[str, str]]  # key -> (value, source)


def _ids(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_describe(text: str) -> Description:
    lines = text.splitlines()
    assert lines, "empty describe output"
    header = DESCRIBE_HEADER_RE.match(lines[0])
    assert header, f"unexpected first line of describe: {lines[0]!r}"
    assert lines[1].split() == DESCRIBE_COLUMNS, f"unexpected column header: {lines[1]!r}"
    rows: dict[int, PartitionRow] = {}
    i = 2
    while i < len(lines) and lines[i] != "configs:":
        m = DESCRIBE_ROW_RE.match(lines[i])
        assert m, f"unexpected partition row: {lines[i]!r}"
        p = int(m.group(1))
        rows[p] = PartitionRow(p, int(m.group(2)), _ids(m.group(3)), _ids(m.group(4)), int(m.group(5)), int(m.group(6)))
        i += 1
    assert i < len(lines), f"no 'configs:' section in\n{text}"
    configs = {}
    for line in lines[i + 1 :]:
        m = DESCRIBE_CONFIG_RE.match(line)
        assert m, f"unexpected config line: {line!r}"
        configs[m.group(1)] = (m.group(2), m.group(3))
    return Description(header.group(1), header.group(2), int(header.group(3)), rows, configs)


VERBOSE_RE = re.compile(r"^partition (\d+) offset (-?\d+)$")


def parse_verbose(text: str) -> list[tuple[int, int]]:
    """``weir produce -v`` output: [(partition, offset)] in input order."""
    out = []
    for line in text.splitlines():
        m = VERBOSE_RE.match(line)
        assert m, f"unexpected produce -v line: {line!r}"
        out.append((int(m.group(1)), int(m.group(2))))
    return out


# ---------------------------------------------------------------------------------
# Long-running commands
# ---------------------------------------------------------------------------------

class Background:
    """A ``weir`` command running in the background, its stdout collected line by line."""

    def __init__(self, args: list[str], brokers: str | None = None, stdin=subprocess.DEVNULL):
        self.args = args
        self.proc = subprocess.Popen(
            command(args, brokers),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment(),
        )
        self.started = time.monotonic()
        self.out_lines: list[str] = []
        self.err = b""
        self._lock = threading.Lock()
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read_stdout(self):
        for raw in iter(self.proc.stdout.readline, b""):
            with self._lock:
                self.out_lines.append(raw.decode("utf-8").rstrip("\n"))
        self.proc.stdout.close()

    def _read_stderr(self):
        self.err = self.proc.stderr.read()
        self.proc.stderr.close()

    def lines(self) -> list[str]:
        with self._lock:
            return list(self.out_lines)

    def wait_for_lines(self, count: int, timeout: float) -> list[str]:
        deadline = Deadline(timeout)
        while len(self.lines()) < count:
            if deadline.expired() or self.proc.poll() is not None:
                time.sleep(0.2)  # let the readers catch up with a process that just exited
                break
            time.sleep(0.05)
        return self.lines()

    def wait(self, timeout: float) -> int | None:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        for t in self._readers:
            t.join(timeout=5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for t in self._readers:
            t.join(timeout=5)

    def describe(self) -> str:
        return (
            f"$ weir {' '.join(self.args)}\n"
            f"exit code {self.proc.poll()} after {time.monotonic() - self.started:.2f}s\n"
            f"--- stdout (last lines) ---\n" + "\n".join(self.lines()[-20:]) + "\n"
            f"--- stderr ---\n{self.err.decode('utf-8', 'replace')[-3000:]}"
        )
