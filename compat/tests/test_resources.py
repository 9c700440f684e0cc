"""Resource attacks on a live server: memory (RSS measured from /proc), open files, and
connection floods. Each must leave the broker within its bounds and every other client served.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import select
import socket
import struct
import threading
import time

import pytest

import wire
from clients import Rec, admin, assert_serving, create_topic, group_consumer, produce_confluent, read_confluent, unique_topic
from harness import wait_until

MIB = 1024 * 1024


def test_a_client_that_never_reads_pins_no_memory(make_weir):
    """64 pipelined fetches of 64 MiB each on a socket never read: before, about 3 GiB stayed
    in memory; now the records stream from the files as the client reads, so nothing does."""
    weir = make_weir("noread")
    bootstrap = weir.bootstrap
    topic = unique_topic("big")
    create_topic(bootstrap, topic, partitions=1)
    value = b"v" * (100 * 1024)
    produce_confluent(bootstrap, topic, [Rec(key=None, value=value, partition=0) for _ in range(640)], **{"linger.ms": 20})
    health = unique_topic("health")
    create_topic(bootstrap, health, partitions=1)
    before = weir.rss_bytes()
    greedy = wire.Connection(bootstrap)
    try:
        greedy.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        frames = b"".join(wire.fetch_request(i, topic, 0, 0, 64 * MIB) for i in range(64))
        greedy.send(frames)
        time.sleep(3)
        grown = weir.rss_bytes() - before
        assert_serving(bootstrap, health)
        print(f"RSS before {before / MIB:.1f} MiB, grown {grown / MIB:.1f} MiB with 64 unread 64 MiB fetches")
        assert grown < 32 * MIB, f"broker RSS grew by {grown / MIB:.0f} MiB"
    finally:
        greedy.close()


INVALID_REQUEST = 42
GROUP_MAX_SIZE_REACHED = 81
COORDINATOR_NOT_AVAILABLE = 15


def join_answer(bootstrap: str, group: str, metadata: bytes, timeout: float = 30, retry: bool = False) -> int:
    """One JoinGroup v3 on its own connection; its error code (with ``retry``, tried again
    while the coordinator is still being set up)."""
    deadline = time.monotonic() + timeout
    while True:
        with wire.Connection(bootstrap, timeout=timeout) as conn:
            conn.send(wire.join_group_request(1, group, metadata))
            # A leader's answer carries every member's metadata.
            reply = conn.recv_frame(timeout=timeout, max_size=256 * MIB)
        assert reply is not None, f"JoinGroup to {group}: connection closed"
        code = wire.join_group_error(reply)
        if not retry or code not in (14, COORDINATOR_NOT_AVAILABLE) or time.monotonic() > deadline:
            return code
        time.sleep(0.2)


def join_and_hold(bootstrap: str, group: str, metadata: bytes) -> wire.Connection:
    """A JoinGroup v3 sent on its own connection, left waiting for the rebalance (its member,
    unless refused, held by the group for its 30 s session)."""
    conn = wire.Connection(bootstrap)
    conn.send(wire.join_group_request(1, group, metadata, session_timeout_ms=30000))
    return conn


def early_answers(conns: list[wire.Connection], seconds: float) -> list[int]:
    """The error codes of the joins answered within ``seconds`` (a refusal is answered at once;
    an admitted member waits for the rebalance)."""
    codes, waiting = [], {conn.sock: conn for conn in conns}
    deadline = time.monotonic() + seconds
    while waiting and time.monotonic() < deadline:
        ready, _, _ = select.select(list(waiting), [], [], max(0.0, deadline - time.monotonic()))
        for sock in ready:
            reply = waiting.pop(sock).recv_frame(timeout=10, max_size=256 * MIB)
            assert reply is not None, "a join's connection was closed"
            codes.append(wire.join_group_error(reply))
    return codes


def test_group_metadata_is_bounded_per_member_group_and_coordinator(make_weir):
    """Classic JoinGroup metadata was held without a bound: 8 groups x 95 MB of it took a node
    from 153 to 853 MB, kept for the session after the client left. Now one member's is at most
    group.member.metadata.max.bytes (INVALID_REQUEST), one group's group.metadata.max.bytes
    (GROUP_MAX_SIZE_REACHED) and all groups' group.coordinator.metadata.max.bytes
    (COORDINATOR_NOT_AVAILABLE, which clients retry); a consumer of another group is served
    throughout, and once the attacking members' sessions end new joins get in again."""
    weir = make_weir("groups", env={
        "WEIR_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "WEIR_GROUP_COORDINATOR_METADATA_MAX_BYTES": str(64 * MIB),
    })
    bootstrap = weir.bootstrap
    topic = unique_topic("grouped")
    create_topic(bootstrap, topic, partitions=1)
    consumer = group_consumer(bootstrap, "legit")
    consumer.subscribe([topic])

    def consumed(value: bytes) -> None:
        """The legitimate group's consumer gets ``value``, produced now."""
        produce_confluent(bootstrap, topic, [Rec(key=None, value=value, partition=0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.value() == value:
                return
        raise AssertionError(f"the legitimate group's consumer never got {value!r}")

    try:
        consumed(b"before")
        flood_group_metadata(weir, bootstrap, lambda: consumed(b"during"))
    finally:
        consumer.close()


def flood_group_metadata(weir, bootstrap: str, served) -> None:
    """The three floods, with ``served`` checked while the coordinator is full."""
    before = weir.rss_bytes()

    # One member's metadata: 8 groups x 95 MB, each refused at once.
    huge = b"m" * (95 * 1000 * 1000)
    codes = [join_answer(bootstrap, f"huge-{i}", huge) for i in range(8)]
    time.sleep(1)
    after_huge = weir.rss_bytes() - before

    # One group's: 33 members of 1 MiB (just within their bound) join at once; 32 fill the
    # group's 32 MiB, whichever comes last is refused.
    member = b"m" * (MIB - 100)
    held = [join_and_hold(bootstrap, "full", member) for _ in range(33)]
    over_group = early_answers(held, 10)
    # All groups': 32 more in a second group and one in a third reach 64 MiB together; the one
    # that would go over, whichever it is, is refused.
    second = [join_and_hold(bootstrap, "full-2", member) for _ in range(32)] + [join_and_hold(bootstrap, "third", member)]
    over_coordinator = early_answers(second, 10)
    held += second
    after_full = weir.rss_bytes() - before
    served()

    for conn in held:
        conn.close()
    # The members leave (their sessions end at the latest), the timer counts again: a big join
    # gets in.
    after_leave = COORDINATOR_NOT_AVAILABLE
    deadline = time.monotonic() + 90
    while after_leave == COORDINATOR_NOT_AVAILABLE and time.monotonic() < deadline:
        time.sleep(1)
        after_leave = join_answer(bootstrap, "third", member, timeout=15)
    print(f"RSS {before / MIB:.0f} MiB before; grown {after_huge / MIB:.0f} MiB after 8 joins of 95 MB "
          f"(answered {codes}), {after_full / MIB:.0f} MiB with 64 members of 1 MiB held; "
          f"answered at once: 33 joins of a group {over_group}, 33 more at the coordinator's bound {over_coordinator}; "
          f"after the members left: {after_leave}")
    assert codes == [INVALID_REQUEST] * 8, weir.log_tail(40)
    assert after_huge < 64 * MIB, f"8 refused 95 MB joins grew the broker by {after_huge / MIB:.0f} MiB"
    assert over_group.count(GROUP_MAX_SIZE_REACHED) == 1 and set(over_group) <= {0, GROUP_MAX_SIZE_REACHED}, over_group
    assert over_coordinator.count(COORDINATOR_NOT_AVAILABLE) == 1 and set(over_coordinator) <= {0, COORDINATOR_NOT_AVAILABLE}, over_coordinator
    assert after_full < 200 * MIB, f"64 MiB of held metadata grew the broker by {after_full / MIB:.0f} MiB"
    assert after_leave == 0, "a join was still refused after the members holding the metadata left"
    assert "over group.member.metadata.max.bytes" in weir.log_text()


def send_partial_frames(bootstrap: str, count: int, frame_bytes: int, sent_bytes: int, stop: threading.Event) -> list[socket.socket]:
    """`count` connections each announcing a `frame_bytes` frame and sending `sent_bytes` of it,
    as fast as the broker reads; returns the sockets (left open)."""
    host, port = bootstrap.rsplit(":", 1)
    sockets = []
    threads = []

    def pump(sock: socket.socket) -> None:
        chunk = bytes(1 * MIB)
        sock.settimeout(0.5)
        left = sent_bytes
        try:
            sock.sendall(struct.pack(">i", frame_bytes) + struct.pack(">hhi", 0, 9, 1))
            while left > 0 and not stop.is_set():
                try:
                    n = sock.send(chunk[: min(len(chunk), left)])
                    left -= n
                except socket.timeout:
                    continue
        except OSError:
            pass

    for _ in range(count):
        sock = socket.create_connection((host, int(port)))
        sockets.append(sock)
        thread = threading.Thread(target=pump, args=(sock,), daemon=True)
        thread.start()
        threads.append(thread)
    return sockets


def test_partial_large_frames_stay_within_queued_max_request_bytes(make_weir):
    """30 connections each sending 89 of a 90 MiB frame held 2.7 GiB; now request bytes in memory
    stop at queued.max.request.bytes (here 256 MiB, the default) and the rest wait unread, while
    small requests from other clients go on."""
    weir = make_weir("partial")
    bootstrap = weir.bootstrap
    health = unique_topic("health")
    create_topic(bootstrap, health, partitions=1)
    before = weir.rss_bytes()
    stop = threading.Event()
    sockets = send_partial_frames(bootstrap, 30, 90 * MIB, 89 * MIB, stop)
    try:
        peak = 0
        for _ in range(20):
            time.sleep(0.5)
            peak = max(peak, weir.rss_bytes() - before)
        assert_serving(bootstrap, health)
        print(f"RSS before {before / MIB:.1f} MiB, peak growth {peak / MIB:.1f} MiB with 30 x 89 MiB partial frames")
        assert peak < 256 * MIB + 64 * MIB, f"broker RSS grew by {peak / MIB:.0f} MiB"
        assert peak > 64 * MIB, "the attack must have made the broker read (the test would prove nothing)"
    finally:
        stop.set()
        for sock in sockets:
            sock.close()


def test_a_topic_rolling_a_segment_per_append_keeps_open_files_bounded(make_weir):
    """segment.ms=1 under load once exhausted the open-file limit (three files per segment) and
    the broker exited; now only the newest segment stays open and older ones are reopened
    through a bounded cache, so a broker with 512 files runs on."""
    weir = make_weir("fds", open_files=512)
    bootstrap = weir.bootstrap
    topic = unique_topic("rolling")
    create_topic(bootstrap, topic, partitions=1, config={"segment.ms": "1"})
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    total = 2000
    for i in range(total):
        producer.produce(topic, value=b"r%d" % i, partition=0)
        producer.flush(10)
        if i % 4 == 0:
            time.sleep(0.002)
    segments = len(list((weir.data_dir / "logs").glob(f"{topic}-0/*.log")))
    assert segments > 500, f"only {segments} segments: the test did not roll enough"
    fds = weir.open_fd_count()
    print(f"{segments} segments, {fds} open files (limit 512)")
    assert fds is not None and fds < 400, f"{fds} files open"
    log = read_confluent(bootstrap, topic, [0], timeout=120)[0]
    assert [r.value for r in log] == [b"r%d" % i for i in range(total)]
    assert weir.is_running()
    from confluent_kafka.admin import ConfigResource

    resource_ = ConfigResource("topic", topic, set_config={"segment.bytes": "1024"})
    with pytest.raises(Exception, match="segment.bytes"):
        admin(bootstrap).alter_configs([resource_])[resource_].result(30)


def raise_open_files(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, wanted) if hard != resource.RLIM_INFINITY else wanted
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def test_ten_thousand_idle_connections_from_one_address_lock_nobody_else_out(make_weir):
    """10,100 idle connections from one address once filled the broker and left every new client
    waiting in the accept queue; now the address is held to max.connections.per.ip (1000 by
    default), the rest are closed at once, and clients from other addresses are served."""
    weir = make_weir("flood")
    bootstrap = weir.bootstrap
    health = unique_topic("health")
    create_topic(bootstrap, health, partitions=1)
    flood_size = min(10_100, raise_open_files(12_000) - 500)
    host, port = bootstrap.rsplit(":", 1)
    flood = []
    flood_started = time.monotonic()
    try:
        for _ in range(flood_size):
            sock = socket.socket()
            sock.bind(("127.0.0.2", 0))
            sock.connect((host, int(port)))
            flood.append(sock)
        assert_serving(bootstrap, health)

        closed: set[int] = set()
        poller = select.poll()
        for sock in flood:
            poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)

        def count_closed() -> int:
            # A socket the broker closed is readable with nothing to read.
            for fd, _events in poller.poll(100):
                if fd not in closed:
                    closed.add(fd)
                    poller.unregister(fd)
            return len(closed)

        refused = wait_until(
            lambda: count_closed() >= flood_size - 1000 and len(closed),
            timeout=60,
            what=f"all but 1000 of {flood_size} connections closed",
        )
        time.sleep(1)
        refused = count_closed()
        assert refused == flood_size - 1000, f"{refused} closed, want {flood_size - 1000}"
        lines = weir.log_text().count("refused connection")
        print(f"{flood_size} connections from 127.0.0.2: {refused} closed at once, {lines} log lines")
        # The broker logs at most 5 lines a second about refusals, however many there are.
        seconds = time.monotonic() - flood_started
        bound = 5 * (int(seconds) + 2)
        assert 0 < lines <= bound, f"{lines} log lines about refused connections in {seconds:.0f} s"
    finally:
        for sock in flood:
            sock.close()


def test_a_reconnect_storm_beyond_the_per_address_limit_is_refused_at_once(make_weir):
    """1,500 connections opened at once from one address to a broker with
    max.connections.per.ip=300: with a small listen backlog the ones beyond it waited in SYN
    retries and took over 15 s to be refused; with socket.listen.backlog.size (4096 by
    default) every one is accepted at once and the 1,200 over the limit are closed within
    seconds, while a client from another address is served."""
    weir = make_weir("storm", env={"WEIR_MAX_CONNECTIONS_PER_IP": "300"})
    bootstrap = weir.bootstrap
    health = unique_topic("health")
    create_topic(bootstrap, health, partitions=1)
    raise_open_files(4_000)
    host, port = bootstrap.rsplit(":", 1)
    storm = []
    started = time.monotonic()
    try:
        for _ in range(1_500):
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind(("127.0.0.3", 0))
            sock.connect_ex((host, int(port)))
            storm.append(sock)
        poller = select.poll()
        by_fd = {sock.fileno(): sock for sock in storm}
        for sock in storm:
            poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        closed: set[int] = set()

        def count_closed() -> int:
            for fd, _events in poller.poll(100):
                if fd in closed:
                    continue
                try:
                    data = by_fd[fd].recv(1)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    closed.add(fd)
                    poller.unregister(fd)
            return len(closed)

        wait_until(lambda: count_closed() >= 1_200, timeout=30, what="1,200 of the 1,500 connections refused")
        refused_in = time.monotonic() - started
        time.sleep(1)
        assert count_closed() == 1_200, f"{len(closed)} refused, want 1200 (300 kept)"
        assert_serving(bootstrap, health)
        print(f"1500 connections at once from 127.0.0.3, max.connections.per.ip=300: 1200 refused in {refused_in:.2f} s")
        assert refused_in < 5, f"the storm took {refused_in:.1f} s to be refused"
    finally:
        for sock in storm:
            sock.close()


def http_get(address: str, path: str, source: str = "127.0.0.1", timeout: float = 3) -> tuple[int, bytes]:
    """GET ``path`` from the HTTP gateway at ``address`` from the local address ``source``."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout, source_address=(source, 0))
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_an_http_slowloris_leaves_health_checks_and_other_addresses_served(make_weir):
    """1,100 connections from one address, each sending a request head a byte a second, once
    held all 1,024 places of the HTTP gateway: /health/live and /metrics failed for the whole
    attack, so a liveness probe would have restarted a healthy broker. Now one address holds at
    most 256 and another address is served in full; when 1,100 more from five addresses fill
    the gateway, its probe lane still answers /health/live, /health/ready and /metrics, and
    anything else 503 gateway_full."""
    weir = make_weir("slowloris")
    raise_open_files(4_000)
    host, port = weir.http.rsplit(":", 1)
    head = b"GET /topics HTTP/1.1\r\nHost: weir\r\nX-Slow: " + b"a" * 64
    attack: list[tuple[socket.socket, int]] = []

    def open_from(sources: list[str], count: int):
        for i in range(count):
            sock = socket.socket()
            sock.bind((sources[i % len(sources)], 0))
            sock.connect((host, int(port)))
            sock.setblocking(False)
            attack.append((sock, 0))

    def trickle():
        for i, (sock, sent) in enumerate(attack):
            try:
                sock.send(head[sent:sent + 1])
                attack[i] = (sock, sent + 1)
            except OSError:
                pass

    def served(path: str, source: str = "127.0.0.1") -> int:
        started = time.monotonic()
        status, _ = http_get(weir.http, path, source)
        took = time.monotonic() - started
        assert took < 2.5, f"{path} took {took:.1f} s during the attack"
        return status

    try:
        open_from(["127.0.0.3"], 1_100)
        for _ in range(3):
            trickle()
            time.sleep(1)
        for path in ("/health/live", "/metrics", "/topics"):
            assert served(path) == 200, path
        print("slowloris of 1,100 connections from 127.0.0.3: /health/live, /metrics and /topics from 127.0.0.1 answered 200")
        open_from([f"127.0.0.{i}" for i in range(4, 9)], 1_100)
        for _ in range(3):
            trickle()
            time.sleep(1)
        for path in ("/health/live", "/health/ready", "/metrics"):
            assert served(path) == 200, path
        status, body = http_get(weir.http, "/topics")
        assert status == 503 and json.loads(body)["error"]["code"] == "gateway_full", (status, body)
        print("and 1,100 more from five addresses: the probe lane answered the health checks and /metrics 200, /topics 503 gateway_full")
    finally:
        for sock, _ in attack:
            sock.close()
    wait_until(lambda: http_get(weir.http, "/topics")[0] == 200, timeout=30, what="the gateway to serve again once the attack stops")


def test_idle_connections_are_closed_busy_ones_kept(make_weir):
    weir = make_weir("idle", env={"WEIR_CONNECTIONS_MAX_IDLE_MS": "1500"})
    bootstrap = weir.bootstrap
    with wire.Connection(bootstrap) as idle, wire.Connection(bootstrap) as busy:
        started = time.monotonic()
        while time.monotonic() - started < 4:
            busy.send(wire.api_versions_request(0, 5))
            assert busy.recv_frame(timeout=5) is not None, "a busy connection was closed"
            time.sleep(0.5)
        assert idle.wait_closed_or_reply(timeout=10) == "closed"


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_trips(bootstrap: str, topic: str, stop: threading.Event, took: list[float]) -> None:
    """Another client's produce (acks=1) and fetch of the record it wrote, again and again until
    ``stop``: each round trip's seconds go into ``took``."""
    with wire.Connection(bootstrap) as conn:
        correlation = 0
        while not stop.is_set():
            started = time.monotonic()
            correlation += 1
            batch = wire.record_batch([(None, b"ping")], base_timestamp=int(time.time() * 1000))
            conn.send(wire.produce_request(3, correlation, topic, 0, batch, acks=1))
            reply = conn.recv_frame(timeout=30)
            assert reply is not None, "produce: connection closed"
            produced = wire.parse_produce_response(3, reply)
            assert produced["error_code"] == 0, produced
            correlation += 1
            conn.send(wire.fetch_request(correlation, topic, 0, produced["base_offset"], 1 << 20))
            assert conn.recv_frame(timeout=30) is not None, "fetch: connection closed"
            took.append(time.monotonic() - started)
            time.sleep(0.01)


def test_a_storm_of_consumer_protocol_joins_costs_cpu_linear_in_the_joins(make_weir):
    """5,000 ConsumerGroupHeartbeat joins into one group took 35 s of broker CPU, and another
    client's produce-and-consume round trip rose from 1.5 ms to 300-1,450 ms meanwhile: every
    join compared and rewrote every member's records and computed the whole group's assignment
    again. Now a join writes only what it changed, and the target assignment is computed at
    most once per group.consumer.assignment.interval.ms (KIP-1263)."""
    weir = make_weir("joinstorm")
    bootstrap = weir.bootstrap
    topic, other = unique_topic("storm"), unique_topic("bystander")
    create_topic(bootstrap, topic, partitions=12)
    create_topic(bootstrap, other, partitions=1)
    group = unique_topic("storm-group")

    def join(conn: wire.Connection, index: int) -> int:
        conn.send(wire.consumer_group_heartbeat_request(index, group, f"storm-{index}", [topic]))
        reply = conn.recv_frame(timeout=60)
        assert reply is not None, "ConsumerGroupHeartbeat: connection closed"
        return wire.consumer_group_heartbeat_error(reply)

    def found(conn: wire.Connection) -> bool:
        conn.send(wire.find_coordinator_request(0, group))
        reply = conn.recv_frame(timeout=30)
        assert reply is not None, "FindCoordinator: connection closed"
        return wire.parse_find_coordinator(1, reply)[0] == 0

    with wire.Connection(bootstrap) as conn:  # as clients do first: creates the offsets topic
        wait_until(lambda: found(conn) and join(conn, 0) == 0, timeout=60, what="the coordinator serving the group")
    took: list[float] = []
    stop = threading.Event()
    bystander = threading.Thread(target=round_trips, args=(bootstrap, other, stop, took), daemon=True)
    bystander.start()
    wait_until(lambda: took, timeout=30, what="the bystander's first round trip")
    quiet = sorted(took)
    took.clear()

    joins, connections, per_connection = 5000, 50, 100
    cpu_before = cpu_seconds(weir.pid)
    started = time.monotonic()
    conns = [wire.Connection(bootstrap, timeout=60) for _ in range(connections)]
    try:
        for c, conn in enumerate(conns):
            first = 1 + c * per_connection
            conn.send(b"".join(
                wire.consumer_group_heartbeat_request(i, group, f"storm-{i}", [topic])
                for i in range(first, first + per_connection)
            ))
        codes = []
        for conn in conns:
            for _ in range(per_connection):
                reply = conn.recv_frame(timeout=120)
                assert reply is not None, "ConsumerGroupHeartbeat: connection closed"
                codes.append(wire.consumer_group_heartbeat_error(reply))
    finally:
        for conn in conns:
            conn.close()
    elapsed = time.monotonic() - started
    time.sleep(2.5)  # the target assignment the interval held back, computed and written
    cpu = cpu_seconds(weir.pid) - cpu_before
    stop.set()
    bystander.join(timeout=60)
    during = sorted(took)
    assert codes == [0] * joins, f"joins refused: {sorted(set(codes))}"
    median = during[len(during) // 2] * 1000 if during else float("inf")
    worst = during[-1] * 1000 if during else float("inf")
    print(
        f"{joins} joins in {elapsed:.2f} s, broker CPU {cpu:.2f} s (with the assignment after); bystander round trip "
        f"median {quiet[len(quiet) // 2] * 1000:.1f} ms before, median {median:.1f} ms and "
        f"worst {worst:.1f} ms over {len(during)} round trips during the storm"
    )
    assert cpu < 5, f"the storm took {cpu:.1f} s of broker CPU"
    assert median < 50, f"the bystander's round trip: median {median:.0f} ms during the storm"
    assert_serving(bootstrap, other)
