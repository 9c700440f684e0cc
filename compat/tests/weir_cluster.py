"""Local Weir clusters for tests, fault runs and benchmarks: the one copy of the code that picks
free ports, starts the nodes, waits until they serve, and kills, signals and restarts them one
by one. Used by ``test_cluster.py`` (and the tests that import its ``DevCluster``),
``compat/faults/jepsen.py`` and ``bench/failover.py``.

* ``free_base_port()``: a base port whose Kafka and controller ports are free.
* ``DevCluster``: ``weir dev-cluster --nodes N`` on 127.0.0.1 (Kafka on BASE + i - 1, controllers
  on BASE + 100 + i - 1, node i's data, ``server.log`` and ``pid`` in ``DATA_DIR/node-i``).
* ``NamespacedCluster``: the same N ``weir server`` nodes with the flags dev-cluster gives them,
  but each started directly in its own network namespace of a ``weir_netns.Network``, on its
  own address (Kafka on port 9092, controller on 9093), so links between nodes can be cut.
  Clients reach it from inside the network's hub namespace (``network.inside()``).

It imports nothing from the other test modules (``harness`` is another module under
``compat/faults``), so any script can put ``compat/tests`` on ``sys.path`` and import it.
Failures raise ``ClusterError``, an ``AssertionError``, so a test fails with its message.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NODES = 3
KAFKA_PORT = 9092  # a namespaced node's Kafka port, on its own address
CONTROLLER_PORT = 9093  # and its controller port
HTTP_PORT = 8080  # and its HTTP gateway


class ClusterError(AssertionError):
    """A cluster that did not start, serve or stop as it should."""


def weir_binary() -> Path:
    """The weir binary: ``$WEIR_BIN``, else ``$CARGO_TARGET_DIR`` (or ``target``)``/release/weir``."""
    explicit = os.environ.get("WEIR_BIN")
    if explicit:
        return Path(explicit).resolve()
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_ROOT / "target")
    if not target.is_absolute():
        target = REPO_ROOT / target
    return target / "release" / "weir"


class Deadline:
    """A point in time after which a bounded wait gives up."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end


def free_base_port(nodes: int = NODES, host: str = "127.0.0.1") -> int:
    """A base port whose Kafka (base..base+nodes-1), controller (base+100..) and HTTP
    (base+200..) ports are free, below the ephemeral range (32768 and up), so no client
    connection takes one while a node is down."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - 200 - nodes)
        ports = [base + offset + i for offset in (0, 100, 200) for i in range(nodes)]
        try:
            for port in ports:
                with socket.socket() as probe:
                    probe.bind((host, port))
        except OSError:
            continue
        return base
    raise ClusterError("no free port range for the cluster")


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of an internal topic that coordinates ``key`` (a group, a transactional
    id), as Kafka places it: ``abs(key.hashCode()) % partitions``, with Java's hash over UTF-16
    code units and Kafka's ``Utils.abs`` (the absolute value; 0 for the smallest int)."""
    data = key.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % max(partitions, 1)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


def command_of(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]


def describe_exit(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class DevCluster:
    """A ``weir dev-cluster`` of ``nodes`` nodes whose processes can be killed, signalled and
    restarted one by one. A restarted node runs as a process of this object (the command line
    dev-cluster gave it, same data directory and ports), appending to its ``server.log``;
    ``restarted`` holds those processes. ``env``: extra environment of every node (broker
    settings as ``WEIR_*`` variables)."""

    def __init__(
        self,
        data_dir: Path,
        base_port: int,
        nodes: int = NODES,
        binary: Path | None = None,
        output: Path | None = None,
        new_session: bool = False,
        env: dict[str, str] | None = None,
    ):
        self.data_dir = Path(data_dir)
        self.base_port = base_port
        self.nodes = nodes
        self.binary = Path(binary) if binary else weir_binary()
        self.bootstrap = ",".join(self.address(n) for n in self.node_ids())
        self.output = Path(output) if output else self.data_dir.parent / f"dev-cluster-{time.monotonic_ns()}.out"
        # dev-cluster in its own session: a Ctrl-C of the caller does not reach it (the caller
        # stops it itself).
        self.new_session = new_session
        # Extra environment of every node (broker settings as WEIR_* variables).
        self.env = {**os.environ, **env} if env else None
        self.process: subprocess.Popen | None = None
        self.output_file = None
        # Each node's command line, and the node processes started here.
        self.commands: dict[int, list] = {}
        self.restarted: dict[int, subprocess.Popen] = {}
        self.exit_codes: dict[int, int] = {}  # of processes started here that were killed
        self.every_pid: set[int] = set()
        self._admin = None

    # Where things are.

    def node_ids(self) -> range:
        return range(1, self.nodes + 1)

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.base_port + node - 1}"

    def controller_address(self, node: int) -> str:
        return f"127.0.0.1:{self.base_port + 100 + node - 1}"

    def node_at(self, address: str) -> int:
        """The node whose Kafka listener is ``address`` (``host:port``)."""
        return next(node for node in self.node_ids() if self.address(node) == address)

    def http_base_port(self) -> int:
        """HTTP port of node 1 (node i's is this + i - 1): clear of the Kafka and controller
        ports, and of the default 8080 another test's server may hold."""
        return self.base_port + 200

    def http_address(self, node: int) -> str:
        return f"127.0.0.1:{self.http_base_port() + node - 1}"

    def node_dir(self, node: int) -> Path:
        return self.data_dir / f"node-{node}"

    def pid(self, node: int) -> int:
        """The process now running ``node``: the one started here, or dev-cluster's."""
        if node in self.restarted:
            return self.restarted[node].pid
        return int((self.node_dir(node) / "pid").read_text())

    def clients(self):
        """Context manager around client work (sockets, subprocesses): where clients reach
        the nodes from."""
        return contextlib.nullcontext()

    # Starting and stopping.

    def start(self, timeout: float = 90) -> str:
        """Starts ``weir dev-cluster`` and waits until it is ready; returns its output."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.output_file is not None:
            self.output_file.close()
        self.output_file = open(self.output, "w")
        self.process = subprocess.Popen(
            [str(self.binary), "dev-cluster", "--nodes", str(self.nodes), "--data-dir", str(self.data_dir), "--base-port", str(self.base_port), "--http-base-port", str(self.http_base_port())],
            stdin=subprocess.DEVNULL,
            stdout=self.output_file,
            stderr=subprocess.STDOUT,
            start_new_session=self.new_session,
            env=self.env,
        )
        deadline = Deadline(timeout)
        while "ready:" not in self.text():
            self._note_pid_files()
            if self.process.poll() is not None:
                raise ClusterError(f"dev-cluster exited with {self.process.returncode}:\n{self.text()}\n{self.logs()}")
            if deadline.expired():
                raise ClusterError(f"dev-cluster not ready after {timeout:.0f} s:\n{self.text()}\n{self.logs()}")
            time.sleep(0.1)
        self._note_pid_files()
        for node in self.node_ids():
            pid = int((self.node_dir(node) / "pid").read_text())
            self.commands[node] = command_of(pid)
        return self.text()

    def _note_pid_files(self):
        for node in self.node_ids():
            try:
                self.every_pid.add(int((self.node_dir(node) / "pid").read_text()))
            except (FileNotFoundError, ValueError):
                pass

    def stop(self) -> int:
        """SIGTERM the nodes started here, Ctrl-C dev-cluster; dev-cluster's exit code."""
        for process in self.restarted.values():
            process.send_signal(signal.SIGTERM)
        for process in self.restarted.values():
            process.wait(timeout=30)
        self.restarted.clear()
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=60)
        finally:
            self.output_file.close()

    def kill(self):
        """SIGKILL every process of the cluster: dev-cluster, the nodes it started (their pid
        files) and every node started here; only processes whose command line names this
        cluster's data directory are signalled. Waits (bounded) until they are gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        self._note_pid_files()
        processes = list(self.restarted.values())
        pids = set(self.every_pid) | {p.pid for p in processes}
        marker = str(self.data_dir).encode()
        for process in processes:
            if process.poll() is None:
                process.kill()
        for pid in pids:
            try:
                if marker in cmdline(pid):
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for process in [*processes, *([self.process] if self.process else [])]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        deadline = Deadline(10)
        while any(process_alive(pid) and marker in cmdline(pid) for pid in pids) and not deadline.expired():
            time.sleep(0.05)
        if self.output_file is not None:
            self.output_file.close()
        self._admin = None  # it would go on trying to reach the dead nodes

    # One node.

    def running(self, node: int) -> bool:
        process = self.restarted.get(node)
        if process is not None:
            return process.poll() is None
        try:
            return process_alive(self.pid(node))
        except (FileNotFoundError, ValueError):
            return False

    def signal_node(self, node: int, sig: signal.Signals):
        """Sends ``sig`` to the process running ``node`` (ProcessLookupError if it is gone)."""
        process = self.restarted.get(node)
        if process is not None:
            if process.poll() is not None:
                raise ProcessLookupError(f"node {node} has exited ({describe_exit(process.returncode)})")
            process.send_signal(sig)
            return
        os.kill(self.pid(node), sig)

    def wait_exit(self, node: int, timeout: float) -> bool:
        """Whether ``node``'s process exited within ``timeout`` seconds."""
        process = self.restarted.get(node)
        if process is not None:
            try:
                process.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        pid = self.pid(node)
        deadline = Deadline(timeout)
        while process_alive(pid):
            if deadline.expired():
                return False
            time.sleep(0.02)
        return True

    def kill_node(self, node: int, how: signal.Signals = signal.SIGKILL, timeout: float = 60) -> None:
        """Send ``how`` to ``node`` and wait (60 s at most) until it has exited."""
        pid = self.pid(node)
        self.signal_node(node, how)
        if not self.wait_exit(node, timeout):
            raise ClusterError(f"node {node} (pid {pid}) did not exit after {how.name}")
        process = self.restarted.pop(node, None)
        if process is not None:
            self.exit_codes[node] = process.returncode

    def restart_node(self, node: int) -> subprocess.Popen:
        """Start ``node`` again with the command line it was first given, logging where it did."""
        if self.running(node):
            raise ClusterError(f"node {node} is already running")
        self.node_dir(node).mkdir(parents=True, exist_ok=True)
        with open(self.node_dir(node) / "server.log", "ab") as log:
            process = subprocess.Popen(self.commands[node], stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=self.env)
        self.restarted[node] = process
        self.every_pid.add(process.pid)
        return process

    def wait_serving(self, node: int, timeout: float) -> bool:
        """Whether ``node``'s Kafka port accepts a connection within ``timeout`` seconds (False
        as soon as its process has exited)."""
        host, port = self.address(node).rsplit(":", 1)
        deadline = Deadline(timeout)
        with self.clients():
            while self.running(node) and not deadline.expired():
                try:
                    with socket.create_connection((host, int(port)), timeout=1):
                        return True
                except OSError:
                    time.sleep(0.1)
        return False

    def exit_status(self, node: int) -> str:
        """How ``node``'s last process ended, as far as is known."""
        process = self.restarted.get(node)
        if process is not None:
            return describe_exit(process.poll())
        if node in self.exit_codes:
            return describe_exit(self.exit_codes[node])
        # dev-cluster reports the nodes it started: "node N exited (STATUS)" (it looks twice
        # a second).
        deadline = Deadline(1.5)
        while True:
            for line in reversed(self.text().splitlines()):
                if line.startswith(f"node {node} exited"):
                    return line
            if deadline.expired():
                return "unknown status"
            time.sleep(0.1)

    # What the cluster says.

    def admin(self):
        """A librdkafka admin client for the cluster, kept for the cluster's life (one that is
        garbage collected while a request is pending fails it with _DESTROY)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            with self.clients():
                self._admin = AdminClient(
                    {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 20000, "log.connection.close": False, "error_cb": lambda err: None}
                )
        return self._admin

    def describe(self, topic: str, timeout: float = 30):
        """librdkafka's description of ``topic`` (retried for 30 s while a node catches up)."""
        from confluent_kafka import TopicCollection

        client = self.admin()
        deadline = Deadline(timeout)
        while True:
            try:
                return client.describe_topics(TopicCollection([topic]))[topic].result(timeout=10)
            except Exception:
                if deadline.expired():
                    raise ClusterError(f"{topic} never described\n{self.logs()}")
                time.sleep(0.2)

    def leader(self, topic: str, partition: int) -> int:
        return self.describe(topic).partitions[partition].leader.id

    def wait_in_sync(self, topic: str, timeout: float = 60) -> None:
        """Wait until every partition of ``topic`` has all the nodes in its ISR and every running
        node describes it with a leader for each partition. A new topic's ISR is all its
        replicas at once, while a node that has not applied the topic yet answers Metadata with
        UNKNOWN_TOPIC_OR_PARTITION, which some clients (kcat) take as fatal."""
        deadline = Deadline(timeout)
        while True:
            lagging = [(p.id, [r.id for r in p.isr]) for p in self.describe(topic).partitions if len(p.isr) != self.nodes]
            unaware = [] if lagging else [node for node in self.node_ids() if self.running(node) and not self.describes(node, topic)]
            if not lagging and not unaware:
                return
            if deadline.expired():
                raise ClusterError(f"ISRs never filled: {lagging}; nodes not describing {topic}: {unaware}\n{self.logs()}")
            time.sleep(0.3)

    def wait_registered(self, timeout: float = 60) -> None:
        """Wait until the cluster's metadata lists every node as a broker: a node restarted
        after a kill answers on its port before its registration reaches the quorum, and a
        topic of replication factor ``nodes`` cannot be created until it has."""
        deadline = Deadline(timeout)
        while True:
            try:
                listed = set(self.admin().list_topics(timeout=5).brokers)
            except Exception:
                listed = set()
            if listed >= set(self.node_ids()):
                return
            if deadline.expired():
                raise ClusterError(f"brokers registered: {sorted(listed)}, of {list(self.node_ids())}\n{self.logs()}")
            time.sleep(0.3)

    def describes(self, node: int, topic: str) -> bool:
        """Whether ``node`` itself answers Metadata for ``topic`` with no error and a leader for
        every partition."""
        import wire

        try:
            with self.clients(), wire.Connection(self.address(node), timeout=5) as connection:
                connection.send(wire.metadata_request(1, topic))
                payload = connection.recv_frame(timeout=5)
        except OSError:
            return False
        described = payload and wire.parse_metadata_v1(payload)
        if not described:
            return False
        error, partitions = described
        return error == 0 and bool(partitions) and all(e == 0 and leader >= 0 for e, leader in partitions)

    def status(self, brokers: str | None = None, timeout: float = 5) -> str | None:
        """``weir cluster status`` through ``brokers`` (default: every node), or None."""
        with self.clients():
            try:
                done = subprocess.run(
                    [str(self.binary), "cluster", "status", "--brokers", brokers or self.bootstrap, "--timeout", str(int(timeout))],
                    capture_output=True,
                    text=True,
                    timeout=timeout * 3 + 10,
                )
            except subprocess.TimeoutExpired:
                return None
        return done.stdout if done.returncode == 0 else None

    def quorum_leader(self, brokers: str | None = None, timeout: float = 5) -> tuple[int, int] | None:
        """(leader, term) of the metadata quorum (the active controller), from DescribeQuorum
        through ``weir cluster status``; None when no node says."""
        found = re.search(r"^metadata quorum:\s+leader (\d+), term (\d+)", self.status(brokers, timeout) or "", re.M)
        return (int(found.group(1)), int(found.group(2))) if found else None

    def text(self) -> str:
        return self.output.read_text() if self.output.exists() else ""

    def logs(self, lines: int = 30) -> str:
        tails = []
        for node in self.node_ids():
            log = self.node_dir(node) / "server.log"
            if log.exists():
                tails.append(f"--- node {node}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(tails)


class NamespacedCluster(DevCluster):
    """``nodes`` ``weir server`` nodes, each in its own namespace of ``network`` (a
    ``weir_netns.Network`` already created), started directly with the flags ``weir
    dev-cluster`` passes: ``--node-id I --data-dir DATA_DIR/node-I --listen ADDR:9092
    --controller-listen ADDR:9093 --controller-quorum 1@ADDR1:9093,...``. Every node process is a
    process of this object (in ``restarted``); ``output`` gets the table dev-cluster prints.
    Clients must run in the network's hub (``clients()``, ``network.inside()``)."""

    def __init__(self, data_dir: Path, network, binary: Path | None = None, output: Path | None = None, env: dict[str, str] | None = None):
        self.network = network
        super().__init__(data_dir, KAFKA_PORT, nodes=network.nodes, binary=binary, output=output, new_session=True, env=env)
        self.quorum = ",".join(f"{n}@{self.controller_address(n)}" for n in self.node_ids())

    def address(self, node: int) -> str:
        return f"{self.network.address(node)}:{KAFKA_PORT}"

    def controller_address(self, node: int) -> str:
        return f"{self.network.address(node)}:{CONTROLLER_PORT}"

    def http_address(self, node: int) -> str:
        return f"{self.network.address(node)}:{HTTP_PORT}"

    def clients(self):
        return self.network.inside()

    def start(self, timeout: float = 90) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = ["NODE  PID      KAFKA              CONTROLLER         DATA"]
        for node in self.node_ids():
            directory = self.node_dir(node)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "pid").unlink(missing_ok=True)  # a pid file of an earlier start
            self.commands[node] = [
                *self.network.exec_prefix(node),
                str(self.binary),
                "server",
                "--node-id",
                str(node),
                "--data-dir",
                str(directory),
                "--listen",
                self.address(node),
                "--controller-listen",
                self.controller_address(node),
                "--controller-quorum",
                self.quorum,
                "--http-listen",
                self.http_address(node),
            ]
            process = self.restart_node(node)
            lines.append(f"{node:<4}  {process.pid:<7}  {self.address(node):<17}  {self.controller_address(node):<17}  {directory}")
        self.output.write_text("\n".join(lines) + "\n")
        deadline = Deadline(timeout)
        for node in self.node_ids():
            while True:
                status = self.status(self.address(node), timeout=2) or ""
                found = re.search(r"^brokers:\s+(\d+)", status, re.M)
                if found and int(found.group(1)) == self.nodes:
                    break
                if not self.running(node):
                    raise ClusterError(f"node {node} exited during startup ({self.exit_status(node)})\n{self.logs()}")
                if deadline.expired():
                    raise ClusterError(f"node {node} did not serve a cluster of {self.nodes} brokers on {self.address(node)} in {timeout:.0f} s\n{self.logs()}")
                time.sleep(0.2)
        with open(self.output, "a") as out:
            out.write(f"ready: --brokers {self.bootstrap}\n")
        return self.text()

    def restart_node(self, node: int) -> subprocess.Popen:
        process = super().restart_node(node)
        (self.node_dir(node) / "pid").write_text(f"{process.pid}\n")
        return process

    def stop(self) -> int:
        """SIGTERM every node and wait (30 s each, then SIGKILL); the first non-zero exit code,
        or 0."""
        code = 0
        for process in self.restarted.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for node, process in sorted(self.restarted.items()):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
            code = code or process.returncode
            self.exit_codes[node] = process.returncode
            (self.node_dir(node) / "pid").unlink(missing_ok=True)
        self.restarted.clear()
        return code

    def exit_status(self, node: int) -> str:
        process = self.restarted.get(node)
        if process is not None:
            return describe_exit(process.poll())
        return describe_exit(self.exit_codes.get(node))
