"""Start, stop, restart and kill a Weir server process for the compatibility tests.

The server is started as ``weir server --data-dir DIR --listen 127.0.0.1:0``.
Its combined stdout/stderr is drained by a background thread into a log file
(so the pipe can never fill up); readiness is detected by the ``weir ready``
log line, from which the advertised bootstrap address is parsed.

Setting ``COMPAT_BOOTSTRAP=host:port`` runs the suite against an already
running broker instead (see :class:`ExternalBroker`); tests that need to stop,
restart or kill the broker skip themselves in that mode.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from weir_cluster import Deadline, weir_binary  # noqa: F401 (the one copy, re-exported for the tests)

REPO_ROOT = Path(__file__).resolve().parents[2]

READY_MARKER = "weir ready"
ADVERTISED_RE = re.compile(r"advertised=(\S+)")
HTTP_RE = re.compile(r" http=(\S+)")
CLUSTER_ID_RE = re.compile(r"cluster_id=(\S+)")
NODE_ID_RE = re.compile(r"node_id=(\d+)")
ANSI_ESCAPE_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


def external_bootstrap() -> str | None:
    """Bootstrap address of an externally managed broker, if one was given."""
    value = os.environ.get("COMPAT_BOOTSTRAP", "").strip()
    return value or None


def wait_until(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` passes.

    Returns the truthy value; raises AssertionError naming ``what`` on timeout.
    """
    deadline = Deadline(timeout)
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - reported below if we time out
            last_error = exc
        if deadline.expired():
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


class WeirServer:
    """One Weir server process bound to a data directory.

    ``start()`` may be called again after ``stop()`` or ``kill()``; the server
    then comes back on the same data directory and the same port, so clients
    that were already running can reconnect to the bootstrap address they had.
    """

    is_external = False
    can_restart = True

    def __init__(
        self,
        binary: Path,
        data_dir: Path,
        log_path: Path,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        open_files: int | None = None,
    ):
        self.binary = Path(binary)
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.extra_args = tuple(extra_args)
        # Broker settings as WEIR_* variables, and an open-file limit (soft and hard) to run under.
        self.env = dict(env or {})
        self.open_files = open_files
        self.proc: subprocess.Popen | None = None
        self.bootstrap: str | None = None
        self.cluster_id: str | None = None
        self.node_id: int | None = None
        self.ready_line: str | None = None
        self.starts = 0
        self._listen = "127.0.0.1:0"
        # The HTTP gateway's address (None when it runs without HTTP); a port of its own,
        # never the default 8080 another server may hold.
        self.http: str | None = None
        self._http_listen = "127.0.0.1:0"
        self._reader: threading.Thread | None = None
        self._log_lock = threading.Lock()
        self._ready = threading.Event()

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> str:
        """Start the server and wait (bounded) until it logs ``weir ready``."""
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        if not self.binary.exists():
            raise RuntimeError(
                f"weir binary not found at {self.binary}; build it first or set WEIR_BIN"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        cmd = [
            str(self.binary),
            "server",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            self._listen,
            *(() if "--http-listen" in self.extra_args else ("--http-listen", self._http_listen)),
            *self.extra_args,
        ]
        self._append_log(f"===== start #{self.starts}: {' '.join(cmd)}\n")
        self._ready.clear()
        self.ready_line = None
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_BACKTRACE": "1", **self.env},
            preexec_fn=self._limit_open_files if self.open_files else None,
        )
        self._reader = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._reader.start()

        deadline = Deadline(START_TIMEOUT_S)
        while not self._ready.wait(timeout=0.05):
            if self.proc.poll() is not None:
                self._reader.join(timeout=2)
                raise RuntimeError(
                    f"weir exited with code {self.proc.returncode} before it was ready\n"
                    + self.log_tail()
                )
            if deadline.expired():
                self._force_kill()
                raise RuntimeError(
                    f"weir did not log '{READY_MARKER}' within {START_TIMEOUT_S:.0f}s\n" + self.log_tail()
                )

        line = self.ready_line or ""
        match = ADVERTISED_RE.search(line)
        if not match:
            self._force_kill()
            raise RuntimeError(f"ready line has no advertised=HOST:PORT field: {line!r}")
        advertised = match.group(1).strip(",;\"'")
        if self.bootstrap is not None and advertised != self.bootstrap:
            self._force_kill()
            raise RuntimeError(
                f"restarted server advertises {advertised}, expected the same address {self.bootstrap}"
            )
        self.bootstrap = advertised
        # Later starts reuse the port so that clients keep their bootstrap address.
        self._listen = "127.0.0.1:" + advertised.rsplit(":", 1)[1]
        http = HTTP_RE.search(line)
        self.http = http.group(1).strip(",;\"'") if http and http.group(1) != "off" else None
        if self.http:
            self._http_listen = self.http
        cluster = CLUSTER_ID_RE.search(line)
        self.cluster_id = cluster.group(1).strip(",;\"'") if cluster else None
        node = NODE_ID_RE.search(line)
        self.node_id = int(node.group(1)) if node else None
        return self.bootstrap

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM the server and return its exit code.

        Raises AssertionError (after killing it) if it does not exit in time.
        """
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self._append_log("===== sending SIGTERM\n")
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._force_kill()
            raise AssertionError(
                f"weir did not exit within {timeout:.0f}s of SIGTERM\n" + self.log_tail()
            ) from None
        self._join_reader()
        self._append_log(f"===== exited with code {code}\n")
        return code

    def kill(self) -> None:
        """SIGKILL the server (a crash) and reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self._append_log("===== sending SIGKILL\n")
        self._force_kill()

    def restart(self) -> str:
        """Clean stop (asserting exit code 0), then start on the same data dir and port."""
        code = self.stop()
        assert code == 0, f"weir exited with code {code} after SIGTERM\n" + self.log_tail()
        return self.start()

    def close(self) -> int | None:
        """Stop the server if it is still running; returns the exit code of a SIGTERM stop."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        return self.stop()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _limit_open_files(self) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def open_fd_count(self) -> int | None:
        """File descriptors the server process holds open, from /proc."""
        pid = self.pid
        if pid is None:
            return None
        try:
            return len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return None

    def rss_bytes(self) -> int | None:
        """Resident set size of the server process, from /proc."""
        pid = self.pid
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    # -- logs ----------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 200) -> str:
        text = self.log_text().splitlines()
        tail = "\n".join(text[-lines:])
        return f"--- last {min(lines, len(text))} lines of {self.log_path} ---\n{tail}"

    # -- internals -----------------------------------------------------------------

    def _append_log(self, text: str) -> None:
        with self._log_lock:
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(text)

    def _drain(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        with open(self.log_path, "ab") as log:
            for raw in iter(proc.stdout.readline, b""):
                with self._log_lock:
                    log.write(raw)
                    log.flush()
                if not self._ready.is_set():
                    line = ANSI_ESCAPE_RE.sub("", raw.decode("utf-8", errors="replace"))
                    if READY_MARKER in line and ADVERTISED_RE.search(line):
                        self.ready_line = line
                        self._ready.set()
        proc.stdout.close()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5)

    def _force_kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._join_reader()


class ExternalBroker:
    """A broker that the suite does not manage (``COMPAT_BOOTSTRAP``)."""

    is_external = True
    can_restart = False
    cluster_id = None
    node_id = None
    log_path = None

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def _skip(self):
        pytest.skip("the broker is external (COMPAT_BOOTSTRAP); it cannot be stopped or restarted")

    start = stop = kill = restart = _skip

    def close(self):
        return None

    def is_running(self) -> bool:
        return True

    def rss_bytes(self):
        return None

    def log_text(self) -> str:
        return ""

    def log_tail(self, lines: int = 200) -> str:
        return f"(external broker at {self.bootstrap}; no server log)"
