"""ACLs: one server with the authorizer on (``authorizer.class.name=StandardAuthorizer``), a
SASL_PLAINTEXT listener for SCRAM users and a PLAINTEXT one whose anonymous clients are super
users beside ``User:admin``. A user with no ACL can produce, consume, join a group, create or
describe a topic none of; each ACL added (by Kafka's ``kafka-acls``, librdkafka's admin client
or ``weir acl``) enables exactly its operation, at once, and deleting it takes it away at the
next request; a user cannot grant itself anything.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from harness import WeirServer, external_bootstrap, weir_binary
from test_java import JARS_DIR, JVM_FLAGS
from test_tls import LISTENERS_RE, broker_keystore
import weir_cli

ADMIN_PASSWORD = "admin-acl-secret"
USERS = {"alice": "alice-acl-pw", "bob": "bob-acl-pw"}


class Secured:
    def __init__(self, server: WeirServer, authority):
        self.server = server
        self.authority = authority
        self.endpoints = dict(
            entry.split("://", 1) for entry in LISTENERS_RE.search(server.ready_line).group(1).split(",")
        )

    def client(self, user: str, **extra) -> dict:
        password = ADMIN_PASSWORD if user == "admin" else USERS[user]
        return {"bootstrap.servers": self.endpoints["SASL_PLAINTEXT"], "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password} | extra

    def admin(self, user: str = "admin") -> AdminClient:
        return AdminClient(self.client(user))

    def topic(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = self.admin()  # kept alive until the futures are done
        for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
            future.result(30)
        return name


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    if external_bootstrap():
        pytest.skip("starts its own server with the authorizer on; the broker is external (COMPAT_BOOTSTRAP)")
    workdir = tmp_path_factory.mktemp("weir_acl")
    authority, keystore, _ = broker_keystore(tmp_path_factory.mktemp("acl_tls"), "weir-acl-ca")
    config = workdir / "weir.toml"
    config.write_text(
        'listener.security.protocol.map = "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,MTLS:SSL"\n'
        '"authorizer.class.name" = "StandardAuthorizer"\n'
        '"super.users" = "User:admin;User:ANONYMOUS"\n'
        f'"ssl.keystore.location" = "{keystore}"\n'
        '[listener.name.mtls]\n'
        '"ssl.client.auth" = "required"\n'
        f'"ssl.truststore.location" = "{authority.cert}"\n'
    )
    scram = [f'SCRAM-SHA-256=[name=admin,password="{ADMIN_PASSWORD}"]'] + [
        f'SCRAM-SHA-256=[name={user},password="{password}"]' for user, password in USERS.items()]
    server = WeirServer(
        binary=weir_binary(), data_dir=workdir / "data", log_path=workdir / "weir.log",
        extra_args=("--listen", "SASL_PLAINTEXT://127.0.0.1:0", "--listen", "MTLS://127.0.0.1:0", "--config", str(config),
                    *[arg for entry in scram for arg in ("--add-scram", entry)]),
    )
    server.start()
    yield Secured(server, authority)
    code = server.close()
    assert code in (None, 0), f"exit code {code}\n{server.log_tail(60)}"


def produce_error(config: dict, topic: str) -> str:
    """The error producing one record reports ("" when it is written)."""
    outcome = []
    producer = Producer(config | {"message.timeout.ms": 10_000})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return "" if outcome[0] is None else outcome[0].str()


def consume_error(config: dict, topic: str, group: str) -> str:
    """The first error a group consumer of ``topic`` meets ("" once it has a record)."""
    consumer = Consumer(config | {"group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                return message.error().str()
            return ""
        return "nothing within 20 s"
    finally:
        consumer.close()


def allow(principal: str, resource: ResourceType, name: str, operation: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def test_a_user_without_acls_can_do_nothing(secured):
    topic = secured.topic("acl-none")
    assert produce_error(secured.client("admin"), topic) == ""
    alice = secured.client("alice")
    assert "authoriz" in produce_error(alice, topic).lower()
    assert "authoriz" in consume_error(alice, topic, "alice-group").lower()
    alice_admin = secured.admin("alice")
    assert topic not in alice_admin.list_topics(timeout=10).topics, "not even described"
    with pytest.raises(KafkaException, match="(?i)authoriz"):
        for future in alice_admin.create_topics([NewTopic(f"{topic}-mine", 1, 1)]).values():
            future.result(30)
    with pytest.raises(KafkaException, match="(?i)authoriz"):
        binding = allow("User:alice", ResourceType.TOPIC, "*", AclOperation.ALL)
        for future in alice_admin.create_acls([binding]).values():
            future.result(30)


def test_each_acl_enables_exactly_its_operation_and_deleting_it_takes_it_away(secured):
    topic = secured.topic("acl-grant")
    admin = secured.admin()
    bob = secured.client("bob")
    write = allow("User:bob", ResourceType.TOPIC, topic, AclOperation.WRITE)
    for future in admin.create_acls([write]).values():
        future.result(30)
    assert produce_error(bob, topic) == "", "WRITE lets bob produce"
    assert "authoriz" in consume_error(bob, topic, f"{topic}-g").lower(), "but not consume"

    read = [allow("User:bob", ResourceType.TOPIC, topic, AclOperation.READ),
            allow("User:bob", ResourceType.GROUP, f"{topic}-", AclOperation.READ, ResourcePatternType.PREFIXED)]
    for future in admin.create_acls(read).values():
        future.result(30)
    assert consume_error(bob, topic, f"{topic}-g") == "", "READ on the topic and the group lets bob consume"

    described = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
        AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert sorted((b.restype, b.operation) for b in described) == sorted(
        [(ResourceType.TOPIC, AclOperation.WRITE), (ResourceType.TOPIC, AclOperation.READ),
         (ResourceType.GROUP, AclOperation.READ)])

    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW)])
    assert [len(future.result(30)) for future in deleted.values()] == [1]
    assert "authoriz" in produce_error(bob, topic).lower(), "taken away at once"
    assert consume_error(bob, topic, f"{topic}-g2") == "", "READ is still there"


def kafka_acls(secured, *args: str) -> str:
    java = shutil.which("java")
    assert java, "java is not on PATH (scripts/test.sh installs a JDK)"
    done = subprocess.run(
        [java, *JVM_FLAGS, "-cp", f"{JARS_DIR}/*", "org.apache.kafka.tools.AclCommand",
         "--bootstrap-server", secured.server.bootstrap, *args],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def test_kafkas_kafka_acls_adds_lists_and_removes(secured):
    topic = secured.topic("acl-tool")
    alice = secured.client("alice")
    kafka_acls(secured, "--add", "--allow-principal", "User:alice", "--producer", "--topic", topic)
    assert produce_error(alice, topic) == ""
    listed = kafka_acls(secured, "--list", "--topic", topic)
    assert "User:alice" in listed and "WRITE" in listed and "CREATE" in listed, listed
    kafka_acls(secured, "--add", "--deny-principal", "User:alice", "--operation", "Write", "--topic", topic)
    assert "authoriz" in produce_error(alice, topic).lower(), "a deny wins over the allow"
    kafka_acls(secured, "--remove", "--force", "--topic", topic)
    assert "authoriz" in produce_error(alice, topic).lower(), "nothing allows it any more"
    assert "User:alice" not in kafka_acls(secured, "--list", "--topic", topic)


def test_weir_acl_adds_lists_and_removes(secured):
    topic = secured.topic("acl-cli")
    bob = secured.client("bob")
    plaintext = secured.server.bootstrap
    added = weir_cli.ok(["acl", "add", "--principal", "User:bob", "--operation", "write,describe",
                         "--topic", topic], plaintext)
    assert added.lines[0] == "added 2 ACL(s)"
    assert produce_error(bob, topic) == ""
    listed = weir_cli.ok(["acl", "list", "--topic", topic], plaintext).lines
    assert listed[0].split()[:3] == ["RESOURCE", "PATTERN", "NAME"]
    assert sorted(line.split()[5] for line in listed[1:]) == ["DESCRIBE", "WRITE"]
    removed = weir_cli.ok(["acl", "remove", "--principal", "User:bob", "--operation", "write",
                           "--topic", topic], plaintext)
    assert removed.lines[0] == "removed 1 ACL(s)"
    assert "authoriz" in produce_error(bob, topic).lower()
    missing = weir_cli.run(["acl", "remove", "--principal", "User:bob", "--operation", "write",
                            "--topic", topic], plaintext)
    assert missing.returncode == 1 and "no such ACL" in missing.stderr, missing.describe()
    bad = weir_cli.run(["acl", "add", "--principal", "bob", "--operation", "read", "--topic", topic], plaintext)
    assert bad.returncode == 1 and "no colon" in bad.stderr, bad.describe()
    none = weir_cli.run(["acl", "add", "--principal", "User:bob", "--operation", "read"], plaintext)
    assert none.returncode == 1 and "--topic" in none.stderr, none.describe()


def openapi_routes(base: str, auth) -> list[tuple[str, str]]:
    """Every (method, path) the OpenAPI document lists, with its path parameters filled."""
    import requests

    document = requests.get(f"{base}/openapi.json", auth=auth, timeout=10).json()
    filled = {"{topic}": "acl-http-topic", "{partition}": "0", "{group}": "acl-http-group", "{instance}": "x"}
    routes = []
    for path, methods in document["paths"].items():
        for name, value in filled.items():
            path = path.replace(name, value)
        routes += [(method.upper(), path) for method in methods if method in ("get", "post", "patch", "delete")]
    return routes


def test_http_needs_a_user_and_the_same_acls(secured):
    import requests

    base = f"http://{secured.server.http}"
    admin, alice = ("admin", ADMIN_PASSWORD), ("alice", USERS["alice"])
    open_paths = {"/health/live", "/health/ready", "/metrics"}
    routes = openapi_routes(base, admin)
    assert len(routes) >= 15, routes
    bodies = {"/topics": {"name": "acl-http-new"}, "/topics/acl-http-topic/configs": {"set": {"retention.ms": "1000"}},
              "/topics/acl-http-topic/partitions": {"total": 2}, "/topics/acl-http-topic/publish": {"value": "v"},
              "/groups/acl-http-group/consumers": {"topics": ["acl-http-topic"]}}
    for i, (method, path) in enumerate(routes):
        body = bodies.get(path) if method in ("POST", "PATCH") else None
        anonymous = requests.request(method, base + path, json=body, timeout=10)
        # Each wrong password from an address of its own: one address's failures are answered
        # ever later (test_http_password_guessing_is_slowed_per_address).
        wrong = from_address(f"127.0.0.{10 + i}", method, base + path, body, ("alice", "not-her-password"))
        refused = requests.request(method, base + path, json=body, auth=alice, timeout=30)
        if path in open_paths:
            assert anonymous.status_code == 200, (method, path, anonymous.text)
            continue
        for answer in (anonymous, wrong):
            assert answer.status_code == 401, (method, path, answer.status_code, answer.text)
            assert answer.headers["WWW-Authenticate"].startswith("Basic"), (method, path)
            assert answer.json()["error"]["code"] == "unauthorized"
        if (method, path) in {("GET", "/topics"), ("GET", "/groups")}:
            assert refused.status_code == 200, (method, path, refused.text)
            assert list(refused.json().values()) == [[]], "lists hold only what alice may describe"
        else:
            assert refused.status_code == 403, (method, path, refused.status_code, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "forbidden" and "User:alice may not" in error["message"], error
    assert "acl-http-new" not in secured.admin().list_topics(timeout=10).topics, "nothing was created"

    # Each ACL lets exactly its route through; the admin (a super user) may do everything.
    topic = secured.topic("acl-http")
    assert requests.get(f"{base}/topics/{topic}", auth=admin, timeout=10).status_code == 200
    publish = f"{base}/topics/{topic}/publish"
    assert requests.post(publish, json={"value": "v"}, auth=alice, timeout=10).status_code == 403
    admin_client = secured.admin()
    grant = [allow("User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE)]
    for future in admin_client.create_acls(grant).values():
        future.result(30)
    assert requests.post(publish, json={"value": "v"}, auth=alice, timeout=30).status_code == 200
    read = f"{base}/topics/{topic}/partitions/0/records"
    assert requests.get(read, auth=alice, timeout=10).status_code == 403, "WRITE does not let her read"
    listed = requests.get(f"{base}/topics", auth=alice, timeout=10).json()["topics"]
    assert [t["name"] for t in listed] == [topic], "WRITE implies DESCRIBE"


class Answer:
    """What ``from_address`` got: the status, headers and JSON body, as requests gives them."""

    def __init__(self, response):
        self.status_code = response.status
        self.headers = response.headers
        self.text = response.data.decode(errors="replace")

    def json(self):
        return json.loads(self.text)


def from_address(source: str, method: str, url: str, body, auth: tuple[str, str]) -> Answer:
    """``method url`` with HTTP Basic ``auth`` from the loopback address ``source``."""
    import urllib3

    headers = urllib3.make_headers(basic_auth=f"{auth[0]}:{auth[1]}")
    if body is not None:
        headers["Content-Type"] = "application/json"
    pool = urllib3.PoolManager(source_address=(source, 0), retries=False, timeout=30)
    try:
        return Answer(pool.request(method, url, body=None if body is None else json.dumps(body), headers=headers))
    finally:
        pool.clear()


def test_http_password_guessing_is_slowed_per_address(secured):
    """HTTP Basic logins are limited per address as SASL logins are: the first few wrong
    passwords are answered after the failure delay, each further one after twice as long as
    the one before; another address is not slowed, and the right password still gets in."""
    base = f"http://{secured.server.http}/topics"
    guesser, neighbour = "127.0.0.201", "127.0.0.202"
    waits = []
    for attempt in range(8):
        began = time.monotonic()
        answer = from_address(guesser, "GET", base, None, ("alice", f"guess-{attempt}"))
        waits.append(time.monotonic() - began)
        assert answer.status_code == 401, (attempt, answer.status_code, answer.text)
    # Failures 1-5 wait the delay (0.1 s), failure n > 5 at least 0.1 s * 2^(n-5).
    assert all(wait >= 0.1 for wait in waits), waits
    assert waits[5] >= 0.2 and waits[6] >= 0.4 and waits[7] >= 0.8, waits
    began = time.monotonic()
    assert from_address(neighbour, "GET", base, None, ("alice", "wrong")).status_code == 401
    assert time.monotonic() - began < waits[7], "another address's first failure waits the delay only"
    assert from_address(neighbour, "GET", base, None, ("alice", USERS["alice"])).status_code == 200
    right = from_address(guesser, "GET", base, None, ("alice", USERS["alice"]))
    assert right.status_code == 200, (right.status_code, right.text)
    assert "guess-" not in secured.server.log_path.read_text(errors="replace"), "a password reached the log"


def test_a_client_certificate_names_the_principal(secured):
    """On an SSL listener a client is User: and its certificate's subject, as in Kafka."""
    cert, key = secured.authority.issue("carol", "clientAuth")
    carol = {"bootstrap.servers": secured.endpoints["MTLS"], "security.protocol": "SSL",
             "ssl.ca.location": str(secured.authority.cert), "ssl.certificate.location": str(cert),
             "ssl.key.location": str(key)}
    topic = secured.topic("acl-mtls")
    assert "authoriz" in produce_error(carol, topic).lower()
    admin = secured.admin()
    for future in admin.create_acls([allow("User:CN=carol", ResourceType.TOPIC, topic, AclOperation.WRITE)]).values():
        future.result(30)
    assert produce_error(carol, topic) == ""
