"""Network namespaces for fault tests: one namespace per node on a private bridge, and links cut
and healed between any two hosts (a node, or the clients) while the processes keep running.

``Network(nodes).create()`` (root and iproute2's ``ip`` needed; ``unavailable()`` says why not;
``WEIR_NETNS=off`` in the environment turns namespaces off) makes, with ``ip`` only:

* a hub namespace ``weirnet-<pid>-h`` holding a Linux bridge ``br0`` with the clients' address
  ``10.213.0.1/24`` (host 0): clients reach the nodes from inside it (``inside()`` moves the
  calling thread there; threads and processes it starts afterwards are there too);
* one namespace per node, ``weirnet-<pid>-n<i>``, whose ``eth0`` (address ``10.213.0.<10+i>``,
  host i) is one end of a veth pair, the other end a port of the bridge. Commands run in a node's
  namespace through ``exec_prefix(i)`` (``ip netns exec NS``, which execs: the process id is the
  command's own).

Every interface, address and route lives in these namespaces, never in the namespace the
caller started in, and every ``Network`` has its own bridge, so two networks (two runs at once)
share nothing. ``destroy()`` kills what still runs in the node namespaces and deletes them all;
``create()`` first deletes the namespaces of earlier processes that died without doing so.

A cut link drops every packet between its two hosts, both ways, silently (as an iptables DROP
rule would: a connection attempt times out, an open connection stops hearing from the other
side and recovers on its own once healed): each end gets a permanent ARP entry for the other's
address pointing at a MAC address nobody has, so its frames go out and nobody takes them. This
needs neither iptables, nft nor tc actions (often missing); ``cut()`` sets the whole set of cut
links at once, reads the entries back to check, and ``heal()`` removes them all.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterable

PREFIX = "weirnet-"
SUBNET = "10.213.0"
PREFIX_LENGTH = 24
CLIENTS = 0  # host 0: the clients, in the hub namespace
# A locally administered unicast address no interface of the network has: frames sent to it
# are flooded by the bridge and dropped by every receiver (not their address).
NOWHERE_MAC = "02:57:45:49:52:00"
NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
COMMAND_TIMEOUT = 15.0

_unavailable: list[str | None] = []
_numbers = itertools.count(1)


class NetworkError(RuntimeError):
    pass


def ip(*args: str, check: bool = True, input: str | None = None) -> str:
    """Runs ``ip ARGS`` (bounded); its stdout, or NetworkError with its stderr."""
    try:
        done = subprocess.run(["ip", *args], input=input, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise NetworkError(f"ip {' '.join(args)}: no answer within {COMMAND_TIMEOUT:.0f} s") from exc
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit code {done.returncode}'}")
    return done.stdout


def _setns(fd: int):
    if hasattr(os, "setns"):
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextlib.contextmanager
def entered(namespace: str):
    """Moves the calling thread (only it) into network namespace ``namespace`` until the block
    ends. Threads it starts meanwhile, and processes it forks, stay in that namespace."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(NETNS_DIR / namespace, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


def unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None when they can (checked once: a
    namespace is created, entered and deleted)."""
    if _unavailable:
        return _unavailable[0]
    reason = None
    if os.environ.get("WEIR_NETNS", "").lower() in ("0", "off", "no"):
        reason = f"WEIR_NETNS={os.environ['WEIR_NETNS']}"
    elif not sys.platform.startswith("linux"):
        reason = "network namespaces need Linux"
    elif os.geteuid() != 0:
        reason = "creating network namespaces needs root"
    elif shutil.which("ip") is None:
        reason = "the `ip` command (iproute2) is not installed"
    else:
        probe = f"{PREFIX}{os.getpid()}-probe"
        try:
            ip("netns", "add", probe)
            try:
                ip("-n", probe, "link", "add", "br0", "type", "bridge")
                ip("-n", probe, "link", "add", "v1", "type", "veth", "peer", "name", "v2")
                with entered(probe):
                    pass
            finally:
                ip("netns", "del", probe, check=False)
        except (NetworkError, OSError) as exc:
            reason = f"network namespaces do not work here: {exc}"
    _unavailable.append(reason)
    return reason


def _process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill_inside(namespace: str) -> list[int]:
    """SIGKILLs every process left in ``namespace`` (one of ours: only processes this module's
    networks started run there), waits (bounded) until they are gone; their pids."""
    pids = [int(p) for p in ip("netns", "pids", namespace, check=False).split() if p.isdigit()]
    pids = [p for p in pids if p != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + 10
    while any(_process_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return pids


def clean_stale() -> list[str]:
    """Deletes the namespaces of networks whose process is gone (a run killed before its
    cleanup), killing what still runs in them; the names deleted."""
    removed = []
    if not NETNS_DIR.is_dir():
        return removed
    for entry in sorted(NETNS_DIR.iterdir()):
        name = entry.name
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and _process_alive(int(owner)):
            continue
        _kill_inside(name)
        ip("netns", "del", name, check=False)
        removed.append(name)
    return removed


def isolation(node: int, nodes: Iterable[int], clients: str = "all") -> set[frozenset[int]]:
    """The links to cut for a minority partition of ``node`` alone. ``clients``: ``all`` (the
    clients still reach every node), ``majority`` (they lose ``node`` too) or ``minority``
    (they reach only ``node``)."""
    others = [n for n in nodes if n != node]
    cuts = {frozenset((node, other)) for other in others}
    if clients == "majority":
        cuts.add(frozenset((CLIENTS, node)))
    elif clients == "minority":
        cuts |= {frozenset((CLIENTS, other)) for other in others}
    elif clients != "all":
        raise ValueError(f"clients must be all, majority or minority, not {clients!r}")
    return cuts


def bridge(middle: int, nodes: Iterable[int]) -> set[frozenset[int]]:
    """The links to cut so that ``middle`` sees every node but no two others see each other
    (with three nodes: A sees B and C, B and C do not see each other); clients see all."""
    others = sorted(n for n in nodes if n != middle)
    return {frozenset((a, b)) for i, a in enumerate(others) for b in others[i + 1 :]}


class Network:
    """Namespaces for ``nodes`` nodes and the clients, on one bridge; see the module."""

    def __init__(self, nodes: int = 3, name: str | None = None):
        if not 1 <= nodes <= 200:
            raise ValueError("1 to 200 nodes")
        self.nodes = nodes
        self.name = name or f"{PREFIX}{os.getpid()}-{next(_numbers)}"
        self.hub = f"{self.name}-h"
        self.created: list[str] = []
        self._cuts: frozenset[frozenset[int]] = frozenset()
        self._lock = threading.Lock()

    # Where things are.

    def hosts(self) -> list[int]:
        return list(range(0, self.nodes + 1))

    def namespace(self, host: int) -> str:
        return self.hub if host == CLIENTS else f"{self.name}-n{host}"

    def address(self, host: int) -> str:
        """The IPv4 address of ``host`` (0: the clients)."""
        return f"{SUBNET}.1" if host == CLIENTS else f"{SUBNET}.{10 + host}"

    def device(self, host: int) -> str:
        return "br0" if host == CLIENTS else "eth0"

    def exec_prefix(self, host: int) -> list[str]:
        """Prefix of a command line that runs the command in ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def inside(self):
        """Context manager: the calling thread in the hub (the clients' namespace)."""
        return entered(self.hub)

    # Life cycle.

    def create(self) -> "Network":
        reason = unavailable()
        if reason:
            raise NetworkError(reason)
        clean_stale()
        try:
            self._add(self.hub)
            ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            ip("-n", self.hub, "addr", "add", f"{self.address(CLIENTS)}/{PREFIX_LENGTH}", "dev", "br0")
            ip("-n", self.hub, "link", "set", "br0", "up")
            for node in range(1, self.nodes + 1):
                ns = self.namespace(node)
                self._add(ns)
                port = f"v{node}"
                ip("-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
                ip("-n", self.hub, "link", "set", port, "master", "br0", "up")
                ip("-n", ns, "addr", "add", f"{self.address(node)}/{PREFIX_LENGTH}", "dev", "eth0")
                ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def _add(self, namespace: str):
        ip("netns", "add", namespace)
        self.created.append(namespace)
        ip("-n", namespace, "link", "set", "lo", "up")

    def destroy(self):
        """Kills what still runs in the node namespaces and deletes every namespace made here
        (their interfaces and the bridge go with them)."""
        for namespace in reversed(self.created):
            if namespace != self.hub:
                try:
                    _kill_inside(namespace)
                except NetworkError:
                    pass
            ip("netns", "del", namespace, check=False)
        self.created.clear()
        self._cuts = frozenset()

    def __enter__(self) -> "Network":
        return self.create()

    def __exit__(self, *exc):
        self.destroy()

    # Links.

    @property
    def cuts(self) -> frozenset[frozenset[int]]:
        return self._cuts

    def cut(self, links: Iterable[Iterable[int]]):
        """Makes exactly ``links`` (pairs of hosts) cut, healing any other; checked."""
        wanted = frozenset(frozenset(link) for link in links)
        for link in wanted:
            if len(link) != 2 or not all(0 <= h <= self.nodes for h in link):
                raise ValueError(f"not a link between two hosts: {sorted(link)}")
        with self._lock:
            for host in self.hosts():
                peers = {h for link in wanted if host in link for h in link if h != host}
                self._set_unreachable(host, peers)
            self._cuts = wanted
            self._verify()

    def heal(self):
        """Every link restored."""
        self.cut(())

    def _set_unreachable(self, host: int, peers: set[int]):
        ns, dev = self.namespace(host), self.device(host)
        ip("-n", ns, "neigh", "flush", "dev", dev, "nud", "permanent")
        commands = [f"neigh replace {self.address(p)} lladdr {NOWHERE_MAC} nud permanent dev {dev}" for p in sorted(peers)]
        if commands:
            ip("-n", ns, "-batch", "-", input="\n".join(commands) + "\n")

    def _verify(self):
        for host in self.hosts():
            shown = ip("-n", self.namespace(host), "neigh", "show", "dev", self.device(host), "nud", "permanent")
            have = {line.split()[0] for line in shown.splitlines() if line.strip()}
            want = {self.address(h) for link in self._cuts if host in link for h in link if h != host}
            if have != want:
                raise NetworkError(f"host {host}: unreachable addresses {sorted(have)}, expected {sorted(want)}")

    def describe(self) -> str:
        if not self._cuts:
            return "all links up"
        return ", ".join(f"{'clients' if a == CLIENTS else a}-x-{b}" for a, b in sorted(tuple(sorted(link)) for link in self._cuts))
