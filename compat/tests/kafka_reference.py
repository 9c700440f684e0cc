"""Apache Kafka as the reference broker of the differential tests (test_differential.py).

:class:`KafkaReference` runs one Apache Kafka node (KRaft, combined broker and controller) on
127.0.0.1 through ``bench/kafka.sh``: every setting at Kafka's default but what one node needs
(``--bare``, so that DescribeConfigs reports defaults as defaults, as Weir's do), an empty data
directory (``--fresh``) and a 512 MiB heap, on a client port this module picks (the
controller takes the port after it). The tests then do the
same operations against it and against Weir and compare what the clients see.

The work directory (jars, config, data, logs) is ``$WEIR_KAFKA_REFERENCE_WORK``, by default
``<repo>/.cache/kafka-reference-<version>``. ``bench/kafka.sh fetch`` fills its ``libs/`` from
Maven Central beforehand; when the jars are missing, ``start`` fetches them (slow, once).

``stop()`` is idempotent and is also registered with :mod:`atexit`, so the JVM does not outlive
the test session when a test fails or the session is interrupted.
"""

from __future__ import annotations

import atexit
import os
import random
import signal
import socket
import subprocess
from pathlib import Path

from harness import REPO_ROOT

VERSION = "4.4.0"
KAFKA_SH = REPO_ROOT / "bench" / "kafka.sh"
HEAP = "512m"
# Client ports are picked below the kernel's ephemeral range, so that no outgoing connection
# takes one between the check and Kafka's bind; the controller listens on the next port.
PORT_RANGE = (20000, 32000)
START_ATTEMPTS = 3
# Generous: a start without jars fetches them from Maven Central first.
START_TIMEOUT_S = 1500
STOP_TIMEOUT_S = 120


def default_work_dir(version: str = VERSION) -> Path:
    """``$WEIR_KAFKA_REFERENCE_WORK``, or ``<repo>/.cache/kafka-reference-<version>``."""
    explicit = os.environ.get("WEIR_KAFKA_REFERENCE_WORK", "").strip()
    if explicit:
        return Path(explicit).resolve()
    return REPO_ROOT / ".cache" / f"kafka-reference-{version}"


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair() -> int:
    """A port P such that P and P + 1 are both free on 127.0.0.1."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(*PORT_RANGE)
        if _bindable(port) and _bindable(port + 1):
            return port
    raise RuntimeError(f"no two consecutive free ports found in {PORT_RANGE}")


class KafkaReference:
    """One Apache Kafka node started and stopped through ``bench/kafka.sh``."""

    def __init__(self, work_dir: Path | None = None, version: str = VERSION, heap: str = HEAP):
        self.version = version
        self.work_dir = Path(work_dir) if work_dir else default_work_dir(version)
        self.heap = heap
        self.port: int | None = None
        self.bootstrap: str | None = None
        self._atexit_registered = False

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> str:
        """Start an empty Kafka on a free port and wait until it serves; returns the bootstrap."""
        assert self.bootstrap is None, "the reference Kafka is already running"
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        failures = []
        for _ in range(START_ATTEMPTS):
            port = free_port_pair()
            self.port = port
            try:
                proc = self._script("start", "--fresh", "--bare", "--heap", self.heap, timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired as exc:
                self.stop()
                raise RuntimeError(
                    f"bench/kafka.sh start did not finish within {START_TIMEOUT_S}s\n"
                    + _text(exc.stderr)[-4000:] + "\n" + self.log_tail()
                ) from None
            if proc.returncode == 0 and "running pid" in proc.stdout:
                self.bootstrap = f"127.0.0.1:{port}"
                return self.bootstrap
            failures.append(f"port {port}: exit code {proc.returncode}\n{proc.stdout}{proc.stderr[-4000:]}")
            # The script stops what it started when it fails, but make sure.
            self._script("stop", timeout=STOP_TIMEOUT_S)
            if "in use" not in proc.stdout + proc.stderr:
                break  # not a port race: another attempt would fail the same way
        self.port = None
        raise RuntimeError(
            f"could not start Apache Kafka {self.version} with bench/kafka.sh (work dir {self.work_dir}):\n"
            + "\n".join(failures) + "\n" + self.log_tail()
        )

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after bench/kafka.sh's deadline); idempotent."""
        if self.port is None:
            return
        try:
            proc = self._script("stop", timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0:
            # Last resort: the JVM whose pid bench/kafka.sh recorded for this work directory.
            self._kill_recorded_pid()
        self.port = None
        self.bootstrap = None

    def __enter__(self) -> KafkaReference:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- diagnostics ---------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return self.work_dir / "logs" / "server.log"

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return f"(no Kafka log at {self.log_path})"
        return f"--- last {min(lines, len(text))} lines of {self.log_path} ---\n" + "\n".join(text[-lines:])

    # -- internals -----------------------------------------------------------------

    def _script(self, action: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
        port = self.port if self.port is not None else PORT_RANGE[0]
        cmd = [
            "bash", str(KAFKA_SH), action,
            "--version", self.version, "--port", str(port), "--work", str(self.work_dir), *args,
        ]
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)

    def _stop_leftover(self) -> None:
        """A server still running from this work directory (an earlier session that was killed)
        would make ``start --fresh`` refuse; stop it first."""
        status = self._script("status", timeout=30)
        if status.returncode == 0 and status.stdout.startswith("running"):
            self._script("stop", timeout=STOP_TIMEOUT_S)

    def _kill_recorded_pid(self) -> None:
        pidfile = self.work_dir / "kafka.pid"
        try:
            pid = int(pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError):
            return
        if b"kafka.Kafka" in cmdline and str(self.work_dir).encode() in cmdline:
            os.kill(pid, signal.SIGKILL)


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
