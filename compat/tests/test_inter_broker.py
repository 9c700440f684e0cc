"""The cluster's own doors: three nodes with no PLAINTEXT listener and no anonymous super user.
Clients log in on a SASL_PLAINTEXT listener (CLIENT); the brokers reach each other on a
SASL_SSL listener with mutual TLS (BROKER, ``inter.broker.listener.name``), checking each
other's certificates against its truststore and logging in as ``User:broker`` with the login of
``listener.name.broker.scram-sha-512.sasl.jaas.config``, the only principal besides the admin in
``super.users``; the controllers' Raft port (CONTROLLER, ``controller.listener.names``) speaks
TLS where both sides show a certificate of the quorum's own CA. Replication, a transaction's
markers across brokers and the HTTP gateway all go through the brokers' door; a user who is no
broker, logged in, cannot fetch as a replica; a process without a quorum certificate gets
nothing from the controller port; the broker's password reaches no log."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import wire
from harness import external_bootstrap
from test_tls import Authority
from weir_cluster import Deadline, free_base_port, weir_binary

NODES = (1, 2, 3)
ADMIN_PASSWORD = "admin-door-secret"
BROKER_PASSWORD = "broker-door-secret"
ALICE_PASSWORD = "alice-door-pw"


class Cluster:
    """Three `weir server` nodes, each a broker and a controller."""

    def __init__(self, root: Path, authority: Authority, keystore: Path, quorum: Authority, quorum_keystore: Path):
        self.root = root
        self.broker_ca = authority
        self.broker_keystore, self.quorum_ca, self.quorum_keystore = keystore, quorum, quorum_keystore
        self.base = free_base_port(2 * len(NODES))
        self.quorum = ",".join(f"{n}@127.0.0.1:{self.controller_port(n)}" for n in NODES)
        self.config = root / "weir.toml"
        self.config.write_text(
            'listener.security.protocol.map = "CLIENT:SASL_PLAINTEXT,BROKER:SASL_SSL,CONTROLLER:SSL"\n'
            '"controller.listener.names" = "CONTROLLER"\n'
            '"inter.broker.listener.name" = "BROKER"\n'
            '"sasl.mechanism.inter.broker.protocol" = "SCRAM-SHA-512"\n'
            '"sasl.enabled.mechanisms" = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"\n'
            '"authorizer.class.name" = "StandardAuthorizer"\n'
            '"super.users" = "User:admin;User:broker"\n'
            "[listener.name.broker]\n"
            f'"ssl.keystore.location" = "{keystore}"\n'
            f'"ssl.truststore.location" = "{authority.cert}"\n'
            '"ssl.client.auth" = "required"\n'
            '"scram-sha-512.sasl.jaas.config" = \'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="broker" password="{BROKER_PASSWORD}";\'\n'
            "[listener.name.controller]\n"
            f'"ssl.keystore.location" = "{quorum_keystore}"\n'
            f'"ssl.truststore.location" = "{quorum.cert}"\n'
        )
        self.processes: dict[int, subprocess.Popen] = {}

    def client_port(self, node: int) -> int:
        return self.base + node - 1

    def broker_port(self, node: int) -> int:
        return self.base + len(NODES) + node - 1

    def controller_port(self, node: int) -> int:
        return self.base + 100 + node - 1

    def http(self, node: int) -> str:
        return f"127.0.0.1:{self.base + 200 + node - 1}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.client_port(n)}" for n in NODES)

    def log(self, node: int) -> str:
        path = self.root / f"node-{node}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- node {n}\n{self.log(n)[-3000:]}" for n in NODES)

    def start(self) -> None:
        scram = [
            ("SCRAM-SHA-512", "broker", BROKER_PASSWORD),
            ("SCRAM-SHA-256", "admin", ADMIN_PASSWORD),
            ("SCRAM-SHA-256", "alice", ALICE_PASSWORD),
        ]
        for node in NODES:
            command = [
                str(weir_binary()), "server", "--node-id", str(node), "--data-dir", str(self.root / f"node-{node}"),
                "--controller-quorum", self.quorum, "--config", str(self.config),
                "--listen", f"CLIENT://127.0.0.1:{self.client_port(node)}",
                "--listen", f"BROKER://127.0.0.1:{self.broker_port(node)}",
                "--listen", f"CONTROLLER://127.0.0.1:{self.controller_port(node)}",
                "--http-listen", self.http(node),
            ]
            for mechanism, user, password in scram:
                command += ["--add-scram", f'{mechanism}=[name={user},password="{password}"]']
            with open(self.root / f"node-{node}.log", "ab") as log:
                self.processes[node] = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = Deadline(90)
        for node in NODES:
            while "weir ready" not in self.log(node):
                assert self.processes[node].poll() is None, self.logs()
                assert not deadline.expired(), f"node {node} never ready\n{self.logs()}"
                time.sleep(0.1)

    def stop(self) -> list[int | None]:
        codes = []
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                codes.append(process.wait(timeout=30))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(process.wait(timeout=30))
        return codes

    def client(self, user: str = "admin", password: str = ADMIN_PASSWORD, **extra) -> dict:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password} | extra


def keystore_of(directory: Path, ca: str, name: str) -> tuple[Authority, Path]:
    """A CA and a PEM keystore (key, then certificate) it signed for ``name``, good for both
    ends of a connection."""
    authority = Authority(directory, ca)
    cert, key = authority.issue(name, "serverAuth,clientAuth")
    keystore = directory / f"{name}-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    return authority, keystore


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if external_bootstrap():
        pytest.skip("starts its own cluster; the broker is external (COMPAT_BOOTSTRAP)")
    authority, keystore = keystore_of(tmp_path_factory.mktemp("door_tls"), "weir-door-ca", "broker")
    quorum, quorum_keystore = keystore_of(tmp_path_factory.mktemp("quorum_tls"), "weir-quorum-ca", "controller")
    cluster = Cluster(tmp_path_factory.mktemp("door"), authority, keystore, quorum, quorum_keystore)
    try:
        cluster.start()
        yield cluster
    finally:
        codes = cluster.stop()
    assert all(code in (0, None) for code in codes), f"exit codes {codes}\n{cluster.logs()}"
    for node in NODES:
        assert BROKER_PASSWORD not in cluster.log(node), f"the broker's password is in node {node}'s log"


def create_topic(cluster: Cluster, name: str, partitions: int = 3) -> None:
    admin = AdminClient(cluster.client())
    for future in admin.create_topics([NewTopic(name, partitions, 3)]).values():
        future.result(30)


def describe(cluster: Cluster, topic: str):
    admin = AdminClient(cluster.client())
    return admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=10)


def in_sync(cluster: Cluster, topic: str, timeout: float = 60) -> None:
    """Waits until every partition of ``topic`` has all three brokers in its ISR. After writes
    acknowledged with acks=all this proves every follower fetched them: a follower that cannot
    fetch is dropped from the ISR (replica.lag.time.max.ms) and comes back only once caught up."""
    deadline = Deadline(timeout)
    while True:
        described = describe(cluster, topic)
        lagging = [p.id for p in described.partitions if len(p.isr) != len(NODES)]
        if not lagging:
            return
        assert not deadline.expired(), f"partitions {lagging} never had all replicas in sync\n{cluster.logs()}"
        time.sleep(0.3)


def read_all(config: dict, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[bytes]:
    consumer = Consumer(config | {"group.id": f"reader-{topic}", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = Deadline(timeout)
    try:
        while len(values) < expected:
            assert not deadline.expired(), f"read {len(values)} of {expected}"
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error():
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(message.error())
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_replication_goes_through_the_brokers_login(cluster):
    topic = f"door-{time.monotonic_ns()}"
    create_topic(cluster, topic)
    producer = Producer(cluster.client(acks="all", **{"enable.idempotence": True}))
    sent = [f"record-{i}".encode() for i in range(300)]
    failures: list = []
    for i, value in enumerate(sent):
        producer.produce(topic, value, partition=i % 3, on_delivery=lambda err, _: err and failures.append(err))
    assert producer.flush(60) == 0
    assert not failures, failures
    in_sync(cluster, topic)
    assert sorted(read_all(cluster.client(), topic, 3, len(sent))) == sorted(sent)
    for node in NODES:
        assert "refused this broker's inter-broker login" not in cluster.log(node), cluster.log(node)[-3000:]


def test_transaction_markers_reach_the_other_brokers(cluster):
    topic = f"door-txn-{time.monotonic_ns()}"
    create_topic(cluster, topic)
    producer = Producer(cluster.client(**{"transactional.id": f"door-{time.monotonic_ns()}"}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(topic, f"committed-{partition}".encode(), partition=partition)
    producer.commit_transaction(30)
    committed = read_all(cluster.client(**{"isolation.level": "read_committed"}), topic, 3, 3)
    assert sorted(committed) == [f"committed-{p}".encode() for p in range(3)]


def test_the_http_gateway_reaches_its_broker_as_a_broker(cluster):
    topic = f"door-http-{time.monotonic_ns()}"
    create_topic(cluster, topic)
    token = base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()
    request = urllib.request.Request(f"http://{cluster.http(2)}/topics/{topic}",
                                     headers={"Authorization": f"Basic {token}"})
    deadline = Deadline(30)
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                described = json.load(answer)
                break
        except urllib.error.HTTPError as error:
            assert error.code == 404 and not deadline.expired(), f"{error.code} {error.read()!r}\n{cluster.logs()}"
            time.sleep(0.3)
    assert len(described["partitions"]) == 3, described


def test_a_user_who_is_no_broker_cannot_fetch_as_a_replica(cluster):
    topic = f"door-forged-{time.monotonic_ns()}"
    create_topic(cluster, topic, partitions=1)
    described = describe(cluster, topic)
    topic_id = base64.urlsafe_b64decode(str(described.topic_id) + "==")
    leader = described.partitions[0].leader.id
    follower = next(n for n in NODES if n != leader)
    with wire.Connection(f"127.0.0.1:{cluster.client_port(leader)}") as forger:
        assert wire.sasl_plain_login(forger, "alice", ALICE_PASSWORD) == (0, 0)
        # Posing as a follower, with every broker epoch a guess could hit first.
        for correlation_id, epoch in enumerate((0, 1, 2, 10, 100), start=10):
            forger.send(wire.replica_fetch_request(correlation_id, topic_id, 0, 0, follower, epoch))
            error, partition_error = wire.parse_fetch_v16_first_error(forger.recv_frame(10))
            assert (error, partition_error) == (0, 29), "a fetch posing as a replica was not refused TOPIC_AUTHORIZATION_FAILED"
    # The brokers' listener speaks TLS only: a plaintext request is answered with a TLS alert
    # (record type 21) or nothing, never by Kafka.
    with wire.Connection(f"127.0.0.1:{cluster.broker_port(leader)}") as stranger:
        stranger.send(wire.api_versions_request(0, 1))
        stranger.sock.settimeout(10)
        answer = stranger.sock.recv(64)
        assert answer[:1] in (b"", b"\x15"), f"a plaintext request on the TLS listener was answered {answer!r}"


def controller_port_answer(cluster: Cluster, node: int, context: ssl.SSLContext | None) -> bytes:
    """What the controller port of ``node`` sends back, within 10 s, to a forwarded request
    (DescribeQuorum, which any member may ask) sent in TLS with ``context`` (in plaintext
    without one): b"" when it closes or the handshake fails."""
    frame = json.dumps({"Control": {"DescribeQuorum": None}}).encode()
    raw = socket.create_connection(("127.0.0.1", cluster.controller_port(node)), timeout=10)
    try:
        stream = context.wrap_socket(raw, server_hostname="127.0.0.1") if context else raw
        stream.sendall(len(frame).to_bytes(4, "big") + frame)
        answer = stream.recv(4096)
        while len(answer) >= 4 and len(answer) < 4 + int.from_bytes(answer[:4], "big"):
            more = stream.recv(4096)
            if not more:
                break
            answer += more
        return answer
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        raw.close()


def test_the_controller_port_answers_only_quorum_certificates(cluster):
    # The quorum's metadata went through TLS: the other tests' topics exist on every node.
    create_topic(cluster, f"door-quorum-{time.monotonic_ns()}", partitions=1)
    without_certificate = ssl.create_default_context(cafile=str(cluster.quorum_ca.cert))
    brokers_certificate = ssl.create_default_context(cafile=str(cluster.quorum_ca.cert))
    brokers_certificate.load_cert_chain(str(cluster.broker_keystore))
    members_certificate = ssl.create_default_context(cafile=str(cluster.quorum_ca.cert))
    members_certificate.load_cert_chain(str(cluster.quorum_keystore))
    trusting_anything = ssl.create_default_context()
    trusting_anything.check_hostname = False
    trusting_anything.verify_mode = ssl.CERT_NONE
    for node in NODES:
        answer = controller_port_answer(cluster, node, members_certificate)
        # The leader describes the quorum; the others say they do not lead it.
        body = json.loads(answer[4:])
        assert "Ok" in body or "NotController" in body.get("Err", {}), f"node {node} did not answer a member: {answer!r}"
        for name, context in [("plaintext", None), ("no certificate", without_certificate),
                              ("a certificate of the brokers' CA", brokers_certificate),
                              ("no certificate, any server", trusting_anything)]:
            answer = controller_port_answer(cluster, node, context)
            assert answer[:1] in (b"", b"\x15"), f"node {node}'s controller port answered {name}: {answer!r}"
    for node in NODES:
        assert "controller connection refused: its TLS handshake failed" in cluster.log(node), cluster.log(node)[-3000:]


def test_renewed_certificates_are_used_between_the_nodes_without_a_restart(cluster):
    """Last in the module: it renews the brokers' and the quorum's keystores. Each node reloads
    them for its listeners and for the connections it makes to the other brokers and
    controllers, and the cluster goes on replicating and committing metadata."""
    for authority, keystore, name in [(cluster.broker_ca, cluster.broker_keystore, "broker-renewed"),
                                      (cluster.quorum_ca, cluster.quorum_keystore, "controller-renewed")]:
        cert, key = authority.issue(name, "serverAuth,clientAuth")
        keystore.write_text(key.read_text() + cert.read_text())
    deadline = Deadline(45)
    for node in NODES:
        while True:
            reloaded = [line for line in cluster.log(node).splitlines() if "TLS certificates reloaded" in line]
            if all(any(what in line for line in reloaded) for what in ("inter-broker (BROKER)", "controller peers")):
                break
            assert not deadline.expired(), f"node {node} did not reload its client certificates\n{reloaded}"
            time.sleep(0.5)
    topic = f"door-renewed-{time.monotonic_ns()}"
    create_topic(cluster, topic)
    producer = Producer(cluster.client(acks="all"))
    for i in range(30):
        producer.produce(topic, f"renewed-{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    in_sync(cluster, topic)
