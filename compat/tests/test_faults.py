"""A short fault run (compat/faults/jepsen.py): ~25 s of kill -9, SIGTERM and SIGSTOP of the
nodes and leaders of a three-node cluster under idempotent acks=all producers and a consumer
group, then the checker finds no lost, duplicated or reordered record, no disagreeing read, no
consumer moving backwards and no lost commit. Where network namespaces can be made (root, iproute2),
the nodes run in them and the first fault cuts the leader of a partition off from the other two
nodes for 12 s, past its broker lease, while the clients still reach it (a stale leader that
must not acknowledge what it cannot replicate). Longer runs: scripts/faults.sh.

A short run of the transactional workload (``--workload txn``, compat/faults/txn.py) through
process faults, the first a kill -9 of a transaction coordinator's node, finds no anomaly either.

Besides: the cut and heal of links between namespaces, checked with plain TCP connections (skipped,
saying why, where namespaces cannot be made), and the checker reporting each kind of anomaly,
of both workloads.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import weir_netns
from harness import external_bootstrap, weir_binary

FAULTS = Path(__file__).resolve().parents[1] / "faults" / "jepsen.py"
# The partition of the short run: the leader of a partition cut off from the other nodes, the
# clients still reaching it, for longer than the 9 s broker lease.
FIRST_PARTITION = "partition-leader:12"


def load_faults():
    # Loaded by path under its own name: compat/tests/harness.py already owns `harness`.
    name = "weir_faults_jepsen"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FAULTS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(400)
def test_a_short_fault_run_has_no_anomalies(tmp_path):
    if external_bootstrap():
        pytest.skip("starts its own cluster; the broker is external (COMPAT_BOOTSTRAP)")
    faults = load_faults()
    reason = weir_netns.unavailable()
    network = None if reason else weir_netns.Network(faults.NODES).create()
    try:
        if network is None:
            print(f"nodes on loopback, no partition: {reason}")
            result = faults.run_once(0, 20240601, 25.0, tmp_path / "run-0", weir_binary())
        else:
            result = faults.run_once(
                0, 20240601, 25.0, tmp_path / "run-0", weir_binary(), network=network, faults="process", first_fault=FIRST_PARTITION
            )
    finally:
        if network is not None:
            network.destroy()
    line = faults.summary(result)
    print(line)
    assert result["nemesis"], line
    if network is not None:
        first = result["nemesis"][0]
        assert first["action"] == "partition-leader" and first["clients"] == "all", first
    assert result["acked"] > 0 and result["read"] > 0, line
    assert not result["anomalies"], f"{line}\nhistory and server logs in {tmp_path / 'run-0'}"


@pytest.mark.timeout(400)
def test_a_short_transactional_fault_run_has_no_anomalies(tmp_path):
    """``--workload txn``: transactional writers, a read-process-write processor and a
    read_committed group consumer through ~20 s of process faults, the first a kill -9 of the
    node coordinating one of their transactional ids; the checker finds no aborted or
    uncommitted read, torn transaction, lost committed write or offsets without their records."""
    if external_bootstrap():
        pytest.skip("starts its own cluster; the broker is external (COMPAT_BOOTSTRAP)")
    faults = load_faults()
    result = faults.run_once(
        0, 20261206, 20.0, tmp_path / "run-0", weir_binary(), faults="process", first_fault="kill-txn-coordinator", workload="txn"
    )
    line = faults.summary(result)
    print(line, result.get("transactions"), result.get("processed_batches"))
    first = result["nemesis"][0] if result["nemesis"] else {}
    assert first.get("action") == "kill-txn-coordinator" and "coordinator_unknown" not in first, first
    assert result["transactions"].get("committed", 0) > 0 and result["transactions"].get("aborted", 0) > 0, result["transactions"]
    for writer, outcomes in result["transactions_by_writer"].items():  # librdkafka's and franz-go's
        assert outcomes.get("committed", 0) > 0 and outcomes.get("aborted", 0) > 0, (writer, outcomes)
    assert result["processed_batches"]["committed"] > 0, result["processed_batches"]
    assert not result["anomalies"], f"{line}\nhistory and server logs in {tmp_path / 'run-0'}"


def test_the_hostile_runs_find_a_live_broker_fenced():
    """The check of ``--hostile`` runs: a fence explained by a fault of that node (from two
    seconds before the fault is recorded, the signal going first, until a lease and a margin
    after it ended) or by any cut link passes; a fence of a node nothing touched is reported."""
    load_faults()
    import hostile

    def line(at: str, node: int) -> str:
        return f'{at}  WARN weir::controller: broker fenced node_id={node} partitions=3 why="lease expired"'

    logs = {1: "\n".join([
        line("2026-01-02T03:04:09.000000Z", 2),  # node 2 paused from :05 to :17
        line("2026-01-02T03:04:04.000000Z", 2),  # just before the pause was recorded
        line("2026-01-02T03:04:30.000000Z", 2),  # 13 s after the pause ended: the lease ran out
        line("2026-01-02T03:04:10.000000Z", 3),  # node 3 was never touched
        line("2026-01-02T03:05:10.000000Z", 1),  # during a cut link
    ])}
    faults = [
        [5.0, 17.0, {"at": "2026-01-02T03:04:05.000000Z", "action": "pause-node", "node": 2}],
        [65.0, 70.0, {"at": "2026-01-02T03:05:05.000000Z", "action": "partition-node", "node": 3}],
    ]
    unexplained = hostile.fenced_while_alive(logs, faults, ("partition-node",))
    assert [(u["node"], u["at"]) for u in unexplained] == [(3, "2026-01-02T03:04:10.000000Z")], unexplained


class Echo:
    """A TCP echo server listening in one namespace (its socket is made there)."""

    def __init__(self, namespace: str, address: str):
        with weir_netns.entered(namespace):
            self.sock = socket.create_server((address, 7000))
        self.address = address
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn):
        with conn:
            while True:
                try:
                    data = conn.recv(100)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)


def connects(namespace: str, address: str, timeout: float = 0.3) -> bool:
    with weir_netns.entered(namespace):
        sock = socket.socket()
    sock.settimeout(timeout)
    try:
        sock.connect((address, 7000))
        sock.sendall(b"x")
        return sock.recv(1) == b"x"
    except OSError:
        return False
    finally:
        sock.close()


@pytest.mark.timeout(120)
def test_links_are_cut_silently_and_healed():
    reason = weir_netns.unavailable()
    if reason:
        pytest.skip(f"no network partitions here: {reason}")
    network = weir_netns.Network(3).create()
    names = list(network.created)
    try:
        servers = {host: Echo(network.namespace(host), network.address(host)) for host in network.hosts()}
        hosts = network.hosts()

        pairs = [(a, b) for a in hosts for b in hosts if a != b]

        def reachable():
            with ThreadPoolExecutor(len(pairs)) as pool:
                up = pool.map(lambda pair: connects(network.namespace(pair[0]), servers[pair[1]].address), pairs)
                return {pair for pair, ok in zip(pairs, up) if ok}

        every = set(pairs)
        assert reachable() == every

        # An open connection between the nodes 1 and 2, across the cut.
        with weir_netns.entered(network.namespace(1)):
            open_conn = socket.create_connection((network.address(2), 7000), timeout=2)
        open_conn.settimeout(0.5)

        # Node 1 cut off from the other nodes; the clients (host 0) still reach every node.
        network.cut(weir_netns.isolation(1, [1, 2, 3], "all"))
        assert reachable() == every - {(1, 2), (2, 1), (1, 3), (3, 1)}
        open_conn.sendall(b"y")
        with pytest.raises(TimeoutError):
            open_conn.recv(1)  # dropped, not refused: the connection just hears nothing

        # The clients with the majority: node 1 reaches nobody.
        network.cut(weir_netns.isolation(1, [1, 2, 3], "majority"))
        assert reachable() == every - {(1, 2), (2, 1), (1, 3), (3, 1), (0, 1), (1, 0)}

        # The clients with the minority: they reach node 1 only.
        network.cut(weir_netns.isolation(1, [1, 2, 3], "minority"))
        assert reachable() == every - {(1, 2), (2, 1), (1, 3), (3, 1), (0, 2), (2, 0), (0, 3), (3, 0)}

        # A bridge: node 1 sees 2 and 3, which do not see each other.
        network.cut(weir_netns.bridge(1, [1, 2, 3]))
        assert reachable() == every - {(2, 3), (3, 2)}

        # Healed: everything again, and the open connection gets its answer.
        network.heal()
        assert reachable() == every
        open_conn.settimeout(30)
        assert open_conn.recv(1) == b"y"
        open_conn.close()
        for server in servers.values():
            server.sock.close()
    finally:
        network.destroy()
    listed = weir_netns.ip("netns", "list")
    assert not [name for name in names if name in listed], listed


def test_the_checker_reports_each_kind_of_anomaly():
    faults = load_faults()
    acked = [(0, 0, b"p0-0"), (0, 1, b"p0-3"), (1, 0, b"p0-1"), (1, 1, b"p1-0")]
    final = {
        0: {0: b"p0-0", 1: b"p0-6", 2: b"p0-3", 3: b"p0-9"},  # p0-3 acknowledged at 1, found at 2
        1: {0: b"p0-1", 1: b"p1-0", 3: b"p0-0"},  # offset 2 missing, p0-0 twice
        2: {0: b"p1-5", 1: b"p1-2"},  # p1 out of order
    }
    marks = {0: (0, 4), 1: (0, 4), 2: (0, 2)}
    group_reads = [(0, 0, b"p0-0"), (0, 1, b"p0-3"), (1, 0, b"p0-1")]
    anomalies = faults.check(
        acked, group_reads, final, marks, backwards=[{"partition": 1, "offset": 0, "previous": 0}],
        acked_commit={0: 2, 1: 1}, final_committed={0: 2, 1: 0}, max_next={0: 2, 1: 1},
    )
    assert anomalies["lost-acknowledged-write"] == [{"partition": 0, "offset": 1, "value": "p0-3", "found": "p0-6", "value_at": (0, 2)}]
    assert anomalies["duplicate"] == [{"value": "p0-0", "at": [(0, 0), (1, 3)]}]
    # p0-3 after p0-6, p0-0 after p0-1, p1-2 after p1-5.
    assert [a["value"] for a in anomalies["reordered"]] == ["p0-3", "p0-0", "p1-2"]
    assert anomalies["offset-gap"][0]["first"] == [2]
    assert anomalies["read-disagreement"] == [{"partition": 0, "offset": 1, "group_read": "p0-3", "final_read": "p0-6"}]
    assert anomalies["consumer-went-backwards"]
    assert anomalies["lost-commit"] == [{"partition": 1, "acknowledged": 1, "final_committed": 0}]
    # A clean history has none.
    clean = {0: {0: b"p0-0"}}
    assert faults.check([(0, 0, b"p0-0")], [(0, 0, b"p0-0")], clean, {0: (0, 1)}, [], {0: 1}, {0: 1}, {0: 1}) == {}


def test_the_transactional_checker_reports_each_kind_of_anomaly():
    load_faults()
    import txn

    def transaction(writer, number, partitions, outcome, delivered=None):
        t = txn.Transaction(writer, number, partitions)
        t.outcome = outcome
        t.delivered = delivered or {}
        return t

    committed = transaction(0, 0, [0, 1], "committed", {b"t0-0-0": (0, 0), b"t0-0-1": (1, 0)})
    aborted = transaction(0, 1, [0], "aborted")
    torn = transaction(0, 2, [0, 2], "unknown")
    lost = transaction(1, 0, [1, 2], "committed", {b"t1-0-0": (1, 1), b"t1-0-1": (2, 5)})
    later = transaction(1, 1, [2], "committed", {b"t1-1-0": (2, 0)})
    never = transaction(1, 2, [2], "unknown")
    final_in = {
        0: {0: b"t0-0-0", 2: b"t0-1-0", 4: b"t0-2-0"},  # aborted t0-1-0 visible; t0-2 torn
        1: {0: b"t0-0-1", 1: b"t1-0-0", 3: b"t0-0-1"},  # t0-0-1 twice
        2: {0: b"t1-1-0", 1: b"t1-0-1", 2: b"x"},  # t1-0-1 not where delivered; t1-1 before t1-0
    }
    final_out = {
        0: {0: b"t0-0-0", 1: b"t0-0-0"},  # twice
        1: {0: b"t1-0-0", 1: b"t9-9-9"},  # not an input record
        2: {0: b"t0-0-1"},  # input partition 1
    }
    reads = [(0, 2, b"t0-1-0"), (2, 3, b"t1-2-0")]
    anomalies = txn.check([committed, aborted, torn, lost, later, never], final_in, final_out, reads, {0: 3, 1: 1, 2: 0})
    assert [a["value"] for a in anomalies["lost-committed-write"]] == ["t1-0-1"]
    assert anomalies["torn-transaction"][0]["visible"] == ["t0-2-0"]
    assert sorted((a["reader"], a["value"]) for a in anomalies["aborted-read"]) == [("final", "t0-1-0"), ("group", "t0-1-0")]
    assert anomalies["uncommitted-read"] == [{"value": "t1-2-0", "at": (2, 3), "outcome": "unknown"}]
    assert sorted((a["topic"], a["value"]) for a in anomalies["duplicate"]) == [("input", "t0-0-1"), ("output", "t0-0-0")]
    assert [a["value"] for a in anomalies["reordered"]] == ["t1-0-1"]
    assert [a["value"] for a in anomalies["unknown-value"]] == ["x", "t9-9-9"]
    assert {a["value"] for a in anomalies["output-missing"]} == {"t0-1-0", "t0-2-0", "t1-1-0", "t1-0-1", "x"}
    assert [a["value"] for a in anomalies["output-wrong-partition"]] == ["t0-0-1"]
    assert [a["value"] for a in anomalies["output-not-in-input"]] == ["t9-9-9"]
    # The processor's offsets cover partition 0 below 3 and partition 1 below 1: t0-1-0 (0, 2)
    # is covered with no output, t1-0-0 (1, 1) has output and is not covered.
    assert [a["value"] for a in anomalies["offsets-without-records"]] == ["t0-1-0"]
    assert [a["value"] for a in anomalies["records-without-offsets"]] == ["t1-0-0"]
    # Offsets that could not be read are not checked.
    unread = txn.check([committed, aborted, torn, lost, later, never], final_in, final_out, reads, None)
    assert "offsets-without-records" not in unread and "records-without-offsets" not in unread
    # A clean history has none.
    clean = transaction(0, 0, [0], "committed", {b"t0-0-0": (0, 0)})
    gone = transaction(0, 1, [0, 1], "aborted")
    final = {0: {0: b"t0-0-0"}, 1: {}}
    assert txn.check([clean, gone], final, final, [(0, 0, b"t0-0-0")], {0: 1}) == {}
