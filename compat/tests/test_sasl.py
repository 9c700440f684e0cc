"""SASL: one server with a SASL_SSL listener (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) and a
SASL_PLAINTEXT one (SCRAM-SHA-512 only, under ``listener.name.sasl_plaintext.``), its first
credentials from ``--add-scram``. librdkafka, kcat, kafka-python, franz-go and the Java client log in
and produce and consume; users are created, described and deleted through Kafka's
AlterUserScramCredentials and DescribeUserScramCredentials (librdkafka's admin client) with
Kafka's errors, by Kafka's kafka-configs and by ``weir user``; wrong passwords, unknown users, unoffered mechanisms and requests before
authentication are refused while the server goes on; an address failing too often has its
failures answered ever later, right passwords still let in at once; no password reaches the
log.
"""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from harness import WeirServer, external_bootstrap, weir_binary
from test_java import JARS_DIR, JVM_FLAGS, compile_java
from test_tls import LISTENERS_RE, broker_keystore, roundtrip
from clients import unique_topic
import weir_cli
import wire

ADMIN_PASSWORD = "admin-Secret,with=odd]chars"


class Sasl:
    def __init__(self, server: WeirServer, ca):
        self.server = server
        self.ca = ca
        self.endpoints = dict(
            entry.split("://", 1) for entry in LISTENERS_RE.search(server.ready_line).group(1).split(",")
        )

    def client(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256", listener: str = "SASL_SSL", **extra) -> dict:
        config = {"bootstrap.servers": self.endpoints[listener], "security.protocol": listener,
                  "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
        if listener == "SASL_SSL":
            config["ssl.ca.location"] = str(self.ca.cert)
        return config | extra

    def admin(self, mechanism: str = "SCRAM-SHA-256") -> AdminClient:
        return AdminClient(self.client("admin", ADMIN_PASSWORD, mechanism))


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    if external_bootstrap():
        pytest.skip("starts its own server with SASL listeners; the broker is external (COMPAT_BOOTSTRAP)")
    ca, keystore, _ = broker_keystore(tmp_path_factory.mktemp("sasl"), "weir-sasl-ca")
    config = keystore.parent / "weir.toml"
    config.write_text(
        f'"ssl.keystore.location" = "{keystore}"\n'
        '"sasl.enabled.mechanisms" = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"\n'
        '"listener.name.sasl_plaintext.sasl.enabled.mechanisms" = "SCRAM-SHA-512"\n'
    )
    workdir = tmp_path_factory.mktemp("weir_sasl")
    server = WeirServer(
        binary=weir_binary(), data_dir=workdir / "data", log_path=workdir / "weir.log",
        extra_args=(
            "--listen", "SASL_SSL://127.0.0.1:0", "--listen", "SASL_PLAINTEXT://127.0.0.1:0",
            "--config", str(config),
            "--add-scram", f'SCRAM-SHA-256=[name=admin,password="{ADMIN_PASSWORD}"]',
            "--add-scram", f'SCRAM-SHA-512=[name=admin,password="{ADMIN_PASSWORD}",iterations=4096]',
        ),
    )
    server.start()
    yield Sasl(server, ca)
    code = server.close()
    log = server.log_path.read_text()
    # The harness's own "===== start" line holds the command line; the server's lines must not.
    server_lines = "\n".join(line for line in log.splitlines() if not line.startswith("====="))
    for secret in (ADMIN_PASSWORD, "alice-pass-1", "dave-pass-1", "erin-pass-1", "wrong-password"):
        assert secret not in server_lines, f"a password in the server's log: {secret!r}"
    assert code in (None, 0), f"exit code {code}\n{server.log_tail(60)}"


@pytest.mark.parametrize("mechanism,listener", [
    ("SCRAM-SHA-256", "SASL_SSL"), ("SCRAM-SHA-512", "SASL_SSL"), ("PLAIN", "SASL_SSL"),
    ("SCRAM-SHA-512", "SASL_PLAINTEXT"),
])
def test_librdkafka_logs_in_and_produces_and_consumes(sasl, mechanism, listener):
    config = sasl.client("admin", ADMIN_PASSWORD, mechanism, listener)
    roundtrip(config, config, count=100)


def refusal(config: dict, timeout: float = 15) -> str:
    """The first error a librdkafka client with ``config`` reports ("" once it has metadata).
    It stops at the first error: librdkafka tries again every second, and each try would
    count as another failed login."""
    errors = []
    client = AdminClient(config | {"error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        client.poll(0.05)
        try:
            client.list_topics(timeout=0.2)
            return ""
        except KafkaException:
            pass
    assert errors, f"neither metadata nor an error within {timeout} s"
    return errors[0]


def failed_logins(sasl) -> float:
    import requests

    text = requests.get(f"http://{sasl.server.http}/metrics", timeout=10).text
    return float(re.search(r"^weir_sasl_authentications_failed_total (\S+)$", text, re.MULTILINE).group(1))


def test_users_are_managed_through_kafkas_admin_api(sasl):
    admin = sasl.admin()
    described = admin.describe_user_scram_credentials(["admin"])["admin"].result()
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]

    create = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-pass-1")]
    for future in admin.alter_user_scram_credentials(create).values():
        future.result()
    alice = sasl.client("alice", "alice-pass-1", "SCRAM-SHA-512")
    roundtrip(alice, alice, count=10)
    assert refusal(sasl.client("alice", "alice-pass-1", "PLAIN")) == "", "PLAIN checks the SCRAM credential"
    assert "Authentication failed" in refusal(sasl.client("alice", "alice-pass-1", "SCRAM-SHA-256")), \
        "alice has no SCRAM-SHA-256 credential"

    bad = [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"x")]
    with pytest.raises(KafkaException, match="(?i)iterations"):
        admin.alter_user_scram_credentials(bad)["bob"].result()
    with pytest.raises(KafkaException, match="(?i)does not exist"):
        admin.alter_user_scram_credentials([UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)])["nobody"].result()
    with pytest.raises(KafkaException, match="(?i)does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result()

    for future in admin.alter_user_scram_credentials([UserScramCredentialDeletion("alice", ScramMechanism.SCRAM_SHA_512)]).values():
        future.result()
    assert "Authentication failed" in refusal(alice), "a deleted credential logs in no more"
    everyone = admin.describe_user_scram_credentials().result()
    assert "alice" not in everyone and "admin" in everyone


def test_weir_user_creates_lists_and_deletes_users(sasl, tmp_path):
    plaintext = sasl.server.bootstrap
    password_file = tmp_path / "dave.pw"
    password_file.write_text("dave-pass-1\n")
    created = weir_cli.ok(["user", "create", "dave", "--password-file", str(password_file),
                           "--mechanism", "SCRAM-SHA-512"], plaintext)
    assert created.lines == ["user dave: password set for SCRAM-SHA-512"]
    assert refusal(sasl.client("dave", "dave-pass-1", "SCRAM-SHA-512")) == ""
    weir_cli.ok(["user", "create", "erin", "--iterations", "4096"], plaintext,
                env={"WEIR_USER_PASSWORD": "erin-pass-1"})
    listed = weir_cli.ok(["user", "list"], plaintext).lines
    assert listed[0].split() == ["USER", "MECHANISMS"]
    rows = {line.split()[0]: line for line in listed[1:]}
    assert "SCRAM-SHA-512 (8192 iterations)" in rows["dave"] and "SCRAM-SHA-256" not in rows["dave"]
    assert "SCRAM-SHA-256 (4096 iterations), SCRAM-SHA-512 (4096 iterations)" in rows["erin"]
    assert refusal(sasl.client("erin", "erin-pass-1", "SCRAM-SHA-256")) == ""

    weir_cli.ok(["user", "delete", "dave"], plaintext)
    assert "dave" not in weir_cli.ok(["user", "list"], plaintext).stdout
    assert "Authentication failed" in refusal(sasl.client("dave", "dave-pass-1", "SCRAM-SHA-512"))
    missing = weir_cli.run(["user", "delete", "nobody"], plaintext)
    assert missing.returncode == 1 and "does not exist" in missing.stderr, missing.describe()
    weak = weir_cli.run(["user", "create", "frank", "--iterations", "100"], plaintext,
                        env={"WEIR_USER_PASSWORD": "x"})
    assert weak.returncode == 1 and "Iterations 100" in weak.stderr, weak.describe()
    no_password = weir_cli.run(["user", "create", "frank"], plaintext)
    assert no_password.returncode == 1 and "WEIR_USER_PASSWORD" in no_password.stderr


def test_weir_commands_log_in_with_a_command_config(sasl, tmp_path):
    """``--command-config FILE`` takes Kafka client properties as Kafka's tools do: a SCRAM
    login from Java's sasl.jaas.config or librdkafka's sasl.username and sasl.password, over
    SASL_PLAINTEXT and SASL_SSL; a wrong password, an unoffered mechanism or a missing setting
    is one clear error."""
    endpoint = sasl.endpoints["SASL_PLAINTEXT"]
    java = tmp_path / "java.properties"
    java.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="admin" password="{ADMIN_PASSWORD}";\n'
    )
    librdkafka = tmp_path / "librdkafka.properties"
    librdkafka.write_text(
        f"security.protocol=sasl_plaintext\nsasl.mechanisms=SCRAM-SHA-512\nsasl.username=admin\nsasl.password={ADMIN_PASSWORD}\n"
    )
    topic = unique_topic("sasl-cli")
    weir_cli.ok(["topic", "create", topic, "--command-config", str(java)], endpoint)
    lines = [f"line-{i}" for i in range(20)]
    weir_cli.ok(["produce", topic, "--command-config", str(librdkafka)], endpoint, stdin="".join(f"{l}\n" for l in lines))
    consumed = weir_cli.ok(["--command-config", str(java), "consume", topic, "--format", "json", "--count", "20"], endpoint)
    assert [row["value"] for row in consumed.json_lines()] == lines

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(librdkafka.read_text().replace(ADMIN_PASSWORD, "wrong-password"))
    refused = weir_cli.runtime_error(["topic", "list", "--command-config", str(wrong)], endpoint)
    assert "authentication of admin failed" in refused.stderr and "wrong-password" not in refused.stderr, refused.describe()
    plain = tmp_path / "plain.properties"
    plain.write_text(librdkafka.read_text().replace("SCRAM-SHA-512", "PLAIN"))
    unoffered = weir_cli.runtime_error(["topic", "list", "--command-config", str(plain)], endpoint)
    assert "does not offer PLAIN (it offers: SCRAM-SHA-512)" in unoffered.stderr, unoffered.describe()
    sasl_ssl = tmp_path / "sasl_ssl.properties"
    sasl_ssl.write_text(
        f"security.protocol=SASL_SSL\nssl.truststore.location={sasl.ca.cert}\n"
        f"sasl.mechanism=SCRAM-SHA-256\nsasl.username=admin\nsasl.password={ADMIN_PASSWORD}\n"
    )
    listed = weir_cli.ok(["topic", "list", "--command-config", str(sasl_ssl)], sasl.endpoints["SASL_SSL"])
    assert topic in listed.stdout, listed.describe()
    no_ca = tmp_path / "no_ca.properties"
    no_ca.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    assert "ssl.truststore.location" in weir_cli.usage_error(["topic", "list", "--command-config", str(no_ca)], endpoint).stderr
    missing = weir_cli.usage_error(["topic", "list", "--command-config", str(tmp_path / "none")], endpoint)
    assert "cannot read" in missing.stderr, missing.describe()


def test_wrong_credentials_and_mechanisms_are_refused_and_the_server_goes_on(sasl):
    before = failed_logins(sasl)
    for config in (sasl.client("admin", "wrong-password"), sasl.client("mallory", "wrong-password"),
                   sasl.client("admin", "wrong-password", "PLAIN")):
        assert "Authentication failed" in refusal(config), config["sasl.username"]
    unoffered = refusal(sasl.client("admin", ADMIN_PASSWORD, "SCRAM-SHA-256", "SASL_PLAINTEXT"))
    assert "SCRAM-SHA-256" in unoffered and "SCRAM-SHA-512" in unoffered, unoffered
    assert failed_logins(sasl) >= before + 3
    ok = sasl.client("admin", ADMIN_PASSWORD)
    roundtrip(ok, ok, count=10)


def test_nothing_but_sasl_is_served_before_authentication(sasl):
    host, port = sasl.endpoints["SASL_PLAINTEXT"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(wire.metadata_request(7, "any-topic"))
        conn.settimeout(10)
        assert conn.recv(1024) == b"", "closed without an answer"
    # A frame over sasl.server.max.receive.size (512 KiB) before a login closes the connection
    # at its length, before its body is read.
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(struct.pack(">i", 600_000) + b"\0" * 1024)
        conn.settimeout(10)
        assert conn.recv(1024) == b"", "closed at the length"
    # Logged in, a client may send frames up to socket.request.max.bytes.
    big = sasl.client("admin", ADMIN_PASSWORD, "SCRAM-SHA-512", "SASL_PLAINTEXT")
    topic = unique_topic("sasl-big")
    producer = Producer(big | {"message.max.bytes": 2_000_000})
    outcome = []
    producer.produce(topic, b"x" * 700_000, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert outcome == [None], outcome
    # A SaslHandshake on a listener without SASL is answered ILLEGAL_SASL_STATE (34).
    host, port = sasl.server.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(wire.request(17, 1, 9, wire.string("PLAIN"), flexible=False))
        conn.settimeout(10)
        length = struct.unpack(">i", conn.recv(4))[0]
        body = b""
        while len(body) < length:
            body += conn.recv(length - len(body))
        correlation_id, error_code = struct.unpack(">ih", body[:6])
        assert (correlation_id, error_code) == (9, 34)


def test_kafka_python_kcat_and_java_log_in(sasl, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer

    common = {"bootstrap_servers": sasl.endpoints["SASL_SSL"], "security_protocol": "SASL_SSL",
              "ssl_cafile": str(sasl.ca.cert), "sasl_mechanism": "SCRAM-SHA-512",
              "sasl_plain_username": "admin", "sasl_plain_password": ADMIN_PASSWORD}
    topic = unique_topic("sasl-python")
    producer = KafkaProducer(acks="all", **common)
    for i in range(20):
        producer.send(topic, f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **common)
    assert [m.value for m in consumer][:20] == [f"v{i}".encode() for i in range(20)]
    consumer.close()

    kcat = shutil.which("kcat")
    assert kcat, "kcat is not on PATH"
    settings = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={sasl.ca.cert}",
                "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=admin",
                "-X", f"sasl.password={ADMIN_PASSWORD}"]
    out = subprocess.run([kcat, "-C", "-b", sasl.endpoints["SASL_SSL"], *settings, "-t", topic, "-o", "beginning",
                          "-e", "-q", "-c", "20"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"v{i}" for i in range(20)]

    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    compile_java(tmp_path)
    properties = tmp_path / "client.properties"
    escaped = ADMIN_PASSWORD.replace("\\", "\\\\").replace('"', '\\"')
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={sasl.ca.cert}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{escaped}";\n'
    )
    consume = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.consumer.ConsoleConsumer",
         "--bootstrap-server", sasl.endpoints["SASL_SSL"], "--topic", topic, "--command-config", str(properties),
         "--from-beginning", "--max-messages", "20", "--timeout-ms", "60000"],
        capture_output=True, text=True, timeout=120,
    )
    assert consume.returncode == 0, consume.stderr[-4000:]
    assert consume.stdout.splitlines() == [f"v{i}" for i in range(20)]

    # Kafka's kafka-configs creates a user through AlterUserScramCredentials.
    configs = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.ConfigCommand",
         "--bootstrap-server", sasl.endpoints["SASL_SSL"], "--command-config", str(properties),
         "--alter", "--entity-type", "users", "--entity-name", "carol",
         "--add-config", "SCRAM-SHA-512=[iterations=8192,password=carol-pw]"],
        capture_output=True, text=True, timeout=120,
    )
    assert configs.returncode == 0, configs.stderr[-4000:]
    assert refusal(sasl.client("carol", "carol-pw", "SCRAM-SHA-512")) == ""


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_franz_go_logs_in_over_sasl_ssl(sasl, mechanism):
    import base64
    import json
    import os

    from test_franz_go import build_franz_go

    franz = build_franz_go()
    env = os.environ | {"WEIR_FRANZ_CA": str(sasl.ca.cert), "WEIR_FRANZ_SASL": f"{mechanism}:admin:{ADMIN_PASSWORD}"}
    topic = unique_topic("sasl-franz")
    admin = sasl.admin()  # franz-go does not create topics
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    records = {"records": [{"key": None, "value": base64.b64encode(f"v{i}".encode()).decode(), "headers": []}
                           for i in range(20)]}
    endpoint = sasl.endpoints["SASL_SSL"]
    produced = subprocess.run([str(franz), "produce", endpoint, topic, "zstd"], input=json.dumps(records),
                              capture_output=True, text=True, timeout=120, env=env)
    assert produced.returncode == 0, produced.stderr[-4000:]
    assert len(json.loads(produced.stdout)["delivered"]) == 20
    consumed = subprocess.run([str(franz), "consume", endpoint, topic], capture_output=True, text=True,
                              timeout=120, env=env)
    assert consumed.returncode == 0, consumed.stderr[-4000:]
    values = [base64.b64decode(row[3]) for row in json.loads(consumed.stdout)["records"]]
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(20))
    wrong = env | {"WEIR_FRANZ_SASL": f"{mechanism}:admin:wrong-password"}
    refused = subprocess.run([str(franz), "consume", endpoint, topic], capture_output=True, text=True,
                             timeout=120, env=wrong)
    assert refused.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in refused.stderr, refused.stderr[-2000:]


def test_zz_an_address_failing_too_often_is_slowed_not_locked_out(sasl):
    """Last in the module: it leaves 127.0.0.1's failures slowed for a minute."""
    waits = []
    for _ in range(8):
        started = time.monotonic()
        assert "Authentication failed" in refusal(sasl.client("admin", "wrong-password"))
        waits.append(time.monotonic() - started)
    # Past 5 failures in a minute (the module's earlier tests made some) each failure is
    # answered later: 200 ms, 400, 800, … up to 5 s.
    assert max(waits) > 1.5, waits
    # Once the failed logins still under way are answered (each within 5 s), a right password
    # is let in without waiting.
    time.sleep(5.5)
    started = time.monotonic()
    assert refusal(sasl.client("admin", ADMIN_PASSWORD)) == "", "the right password still gets in"
    assert time.monotonic() - started < 3, "and at once"
    assert sasl.server.proc.poll() is None
