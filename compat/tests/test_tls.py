"""Listeners with Kafka's names and TLS: one server with a PLAINTEXT listener, an SSL listener
and an SSL listener named MTLS that requires client certificates (its settings under
``listener.name.mtls.``), its certificates made here with openssl and given as Kafka's PEM
keystore (private key and chain in one file). librdkafka, kcat, kafka-python and the Java
client produce and consume over TLS; each listener's Metadata names the brokers' endpoints on
that listener; a plaintext client on a TLS port, a client that trusts another CA, a client
without a certificate on MTLS and TLS 1.1 are refused while the server goes on serving; a
renewed certificate is served to new connections without a restart; no key material reaches
the log.
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from clients import unique_topic
from harness import Deadline, WeirServer, external_bootstrap, wait_until, weir_binary
from test_java import JARS_DIR, JVM_FLAGS, compile_java
import weir_cli

LISTENERS_RE = re.compile(r"listeners=(\S+)")


def openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"openssl {' '.join(args)}:\n{proc.stderr}"


class Authority:
    """A CA made with openssl, issuing EC certificates."""

    def __init__(self, directory: Path, name: str):
        self.dir = directory
        self.name = name
        self.cert = directory / f"{name}.pem"
        openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", self.cert.name, "-days", "3650", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )

    def issue(self, name: str, usage: str) -> tuple[Path, Path]:
        """A certificate for ``name`` (localhost and 127.0.0.1 as its names): (cert, key)."""
        extensions = self.dir / f"{name}.ext"
        extensions.write_text(f"subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage={usage}\n")
        openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=self.dir,
        )
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", self.cert.name, "-CAkey", f"{self.name}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "3650", "-extfile", extensions.name,
            cwd=self.dir,
        )
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"


def broker_keystore(directory: Path, ca_name: str) -> tuple[Authority, Path, Path]:
    """A CA and a broker keystore it signed (key then certificate, Kafka's PEM keystore):
    (authority, keystore, key)."""
    authority = Authority(directory, ca_name)
    cert, key = authority.issue("broker", "serverAuth")
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(key.read_text() + cert.read_text())
    return authority, keystore, key


class Tls:
    """The server and the files its clients use."""

    def __init__(self, server: WeirServer, directory: Path, authority: Authority, keystore: Path):
        self.server = server
        self.dir = directory
        self.authority = authority
        self.keystore = keystore
        self.endpoints = dict(
            entry.split("://", 1) for entry in LISTENERS_RE.search(server.ready_line).group(1).split(",")
        )
        self.client_cert, self.client_key = authority.issue("client-1", "clientAuth")

    def rdkafka(self, listener: str, **extra) -> dict:
        config = {"bootstrap.servers": self.endpoints[listener], "security.protocol": "SSL",
                  "ssl.ca.location": str(self.authority.cert)}
        if listener == "MTLS":
            config |= {"ssl.certificate.location": str(self.client_cert), "ssl.key.location": str(self.client_key)}
        return config | extra


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    if external_bootstrap():
        pytest.skip("starts its own server with TLS listeners; the broker is external (COMPAT_BOOTSTRAP)")
    assert shutil.which("openssl"), "openssl is not on PATH"
    directory = tmp_path_factory.mktemp("tls")
    authority, keystore, key = broker_keystore(directory, "weir-test-ca")
    config = directory / "weir.toml"
    config.write_text(
        'listener.security.protocol.map = "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL"\n'
        f'"ssl.keystore.location" = "{keystore}"\n'
        '[listener.name.mtls]\n'
        '"ssl.client.auth" = "required"\n'
        f'"ssl.truststore.location" = "{authority.cert}"\n'
    )
    workdir = tmp_path_factory.mktemp("weir_tls")
    server = WeirServer(
        binary=weir_binary(), data_dir=workdir / "data", log_path=workdir / "weir.log",
        extra_args=("--listen", "SSL://127.0.0.1:0", "--listen", "MTLS://127.0.0.1:0", "--config", str(config)),
    )
    server.start()
    yield Tls(server, directory, authority, keystore)
    code = server.close()
    log = server.log_path.read_text()
    for secret in (key, authority.dir / "client-1.key"):
        for line in secret.read_text().splitlines()[1:-1]:
            assert line not in log, f"key material of {secret.name} in the server's log"
    assert code in (None, 0), f"exit code {code}\n{server.log_tail(60)}"


def roundtrip(producer_config: dict, consumer_config: dict, count: int = 200) -> None:
    topic = unique_topic("tls")
    producer = Producer(producer_config | {"acks": "all", "linger.ms": 5})
    values = [f"secret {i}".encode() for i in range(count)]
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0, "every record acknowledged"
    consumer = Consumer(consumer_config | {"group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                                           "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = Deadline(60)
    while len(got) < count and not deadline.expired():
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    assert got == values


def test_each_listener_names_the_brokers_on_itself(tls):
    assert set(tls.endpoints) == {"PLAINTEXT", "SSL", "MTLS"}
    assert tls.endpoints["PLAINTEXT"] == tls.server.bootstrap
    for listener in ("PLAINTEXT", "SSL", "MTLS"):
        config = tls.rdkafka(listener) if listener != "PLAINTEXT" else {"bootstrap.servers": tls.endpoints[listener]}
        metadata = AdminClient(config).list_topics(timeout=30)
        brokers = {f"{b.host}:{b.port}" for b in metadata.brokers.values()}
        assert brokers == {tls.endpoints[listener]}, f"{listener}: {brokers}"


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_librdkafka_produces_and_consumes_over_tls(tls, listener):
    roundtrip(tls.rdkafka(listener), tls.rdkafka(listener))


def test_kcat_over_tls(tls):
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not on PATH"
    topic = unique_topic("tls-kcat")
    settings = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={tls.authority.cert}"]
    lines = [f"k{i}:line {i}" for i in range(50)]
    produce = subprocess.run([kcat, "-P", "-b", tls.endpoints["SSL"], *settings, "-t", topic, "-K:"],
                             input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    assert produce.returncode == 0, produce.stderr
    consume = subprocess.run([kcat, "-C", "-b", tls.endpoints["SSL"], *settings, "-t", topic, "-o", "beginning",
                              "-e", "-q", "-f", "%k:%s\\n"], capture_output=True, text=True, timeout=60)
    assert consume.returncode == 0, consume.stderr
    assert consume.stdout.splitlines() == lines


def test_kafka_python_with_a_client_certificate(tls):
    from kafka import KafkaConsumer, KafkaProducer

    common = {"bootstrap_servers": tls.endpoints["MTLS"], "security_protocol": "SSL",
              "ssl_cafile": str(tls.authority.cert), "ssl_certfile": str(tls.client_cert),
              "ssl_keyfile": str(tls.client_key)}
    topic = unique_topic("tls-kafka-python")
    producer = KafkaProducer(acks="all", **common)
    for i in range(100):
        producer.send(topic, f"value {i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **common)
    values = [m.value for m in consumer][:100]
    consumer.close()
    assert values == [f"value {i}".encode() for i in range(100)]


def test_java_console_tools_over_tls_with_a_pem_truststore(tls, tmp_path):
    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    compile_java(tmp_path)  # checks the jars are there, as the Java tests do
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SSL\nssl.truststore.type=PEM\n"
        f"ssl.truststore.location={tls.authority.cert}\n"
    )
    topic = unique_topic("tls-java")
    lines = [f"java line {i}" for i in range(30)]
    bootstrap = ["--bootstrap-server", tls.endpoints["SSL"], "--topic", topic]
    produce = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.ConsoleProducer", *bootstrap,
         "--command-config", str(properties)],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120,
    )
    assert produce.returncode == 0, produce.stderr[-4000:]
    consume = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.consumer.ConsoleConsumer", *bootstrap,
         "--command-config", str(properties), "--from-beginning", "--max-messages", str(len(lines)),
         "--timeout-ms", "60000"],
        capture_output=True, text=True, timeout=120,
    )
    assert consume.returncode == 0, consume.stderr[-4000:]
    assert consume.stdout.splitlines() == lines


def refused(config: dict) -> bool:
    """Whether a librdkafka client with ``config`` gets no metadata."""
    try:
        AdminClient(config).list_topics(timeout=5)
    except KafkaException:
        return True
    return False


def tls_handshake_failures(tls) -> float:
    import requests

    text = requests.get(f"http://{tls.server.http}/metrics", timeout=10).text
    match = re.search(r"^weir_tls_handshakes_failed_total (\S+)$", text, re.MULTILINE)
    assert match, "weir_tls_handshakes_failed_total in /metrics"
    return float(match.group(1))


def test_wrong_clients_are_refused_and_the_server_goes_on(tls, tmp_path):
    before = tls_handshake_failures(tls)
    assert refused({"bootstrap.servers": tls.endpoints["SSL"], "security.protocol": "PLAINTEXT"})
    other = Authority(tmp_path, "another-ca")
    assert refused(tls.rdkafka("SSL", **{"ssl.ca.location": str(other.cert)})), "a server the client does not trust"
    no_certificate = tls.rdkafka("SSL") | {"bootstrap.servers": tls.endpoints["MTLS"]}
    assert refused(no_certificate), "MTLS requires a client certificate"
    cert, key = other.issue("stranger", "clientAuth")
    stranger = tls.rdkafka("MTLS", **{"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
    assert refused(stranger), "a certificate from a CA the truststore does not hold"

    host, port = tls.endpoints["SSL"].rsplit(":", 1)
    old = ssl.create_default_context(cafile=str(tls.authority.cert))
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            old.wrap_socket(raw, server_hostname="localhost")

    assert tls_handshake_failures(tls) >= before + 4
    roundtrip(tls.rdkafka("SSL"), tls.rdkafka("MTLS"), count=20)
    assert tls.server.proc.poll() is None


def served_certificate(tls) -> bytes:
    host, port = tls.endpoints["SSL"].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(tls.authority.cert))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as wrapped:
            return wrapped.getpeercert(binary_form=True)


def test_a_renewed_certificate_is_served_without_a_restart(tls):
    before = served_certificate(tls)
    cert, key = tls.authority.issue("broker-renewed", "serverAuth")
    # Written whole in one rename, as a certificate manager does.
    staged = tls.keystore.with_suffix(".new")
    staged.write_text(key.read_text() + cert.read_text())
    staged.replace(tls.keystore)
    renewed = wait_until(lambda: served_certificate(tls) != before, timeout=30, interval=1,
                         what="the renewed certificate to be served")
    assert renewed
    assert "TLS certificates reloaded" in tls.server.log_path.read_text()
    roundtrip(tls.rdkafka("SSL"), tls.rdkafka("SSL"), count=20)


def test_a_listener_whose_keystore_cannot_serve_stops_the_start(tmp_path):
    if external_bootstrap():
        pytest.skip("starts its own server")
    keystore = tmp_path / "empty.pem"
    keystore.write_text("")
    proc = subprocess.run(
        [str(weir_binary()), "server", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
         "--listen", "SSL://127.0.0.1:0", "--http-listen", "off"],
        env={"PATH": "/usr/bin:/bin", "WEIR_SSL_KEYSTORE_LOCATION": str(keystore)},
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    assert "listener SSL" in proc.stderr and "no private key" in proc.stderr, proc.stderr


def test_weir_commands_connect_over_tls_with_a_command_config(tls, tmp_path):
    """``--command-config`` with security.protocol=SSL: the brokers' CA from
    ssl.truststore.location, and a client certificate from ssl.keystore.location (key and
    chain in one PEM file) where the listener asks for one. A listener asking for a
    certificate the command has not got, or a CA that did not sign the broker's, is one clear
    error naming TLS."""
    trust = tmp_path / "ssl.properties"
    trust.write_text(f"security.protocol=SSL\nssl.truststore.location={tls.authority.cert}\n")
    topic = unique_topic("tls-cli")
    weir_cli.ok(["topic", "create", topic, "--command-config", str(trust)], tls.endpoints["SSL"])
    keystore = tmp_path / "client-keystore.pem"
    keystore.write_text(tls.client_key.read_text() + tls.client_cert.read_text())
    mutual = tmp_path / "mtls.properties"
    mutual.write_text(trust.read_text() + f"ssl.keystore.type=PEM\nssl.keystore.location={keystore}\n")
    lines = [f"line-{i}" for i in range(10)]
    weir_cli.ok(["produce", topic, "--command-config", str(mutual)], tls.endpoints["MTLS"], stdin="".join(f"{l}\n" for l in lines))
    consumed = weir_cli.ok(["consume", topic, "--format", "json", "--count", "10", "--command-config", str(trust)], tls.endpoints["SSL"])
    assert [row["value"] for row in consumed.json_lines()] == lines

    no_certificate = weir_cli.runtime_error(["topic", "list", "--command-config", str(trust)], tls.endpoints["MTLS"])
    assert "TLS with" in no_certificate.stderr, no_certificate.describe()
    (tmp_path / "other").mkdir()
    other = Authority(tmp_path / "other", "weir-other-ca")
    stranger = tmp_path / "stranger.properties"
    stranger.write_text(f"security.protocol=SSL\nssl.truststore.location={other.cert}\n")
    untrusted = weir_cli.runtime_error(["topic", "list", "--command-config", str(stranger)], tls.endpoints["SSL"])
    assert "TLS with" in untrusted.stderr and "handshake failed" in untrusted.stderr, untrusted.describe()
