//! The broker settings that are not topic defaults, with Kafka's names, defaults and
//! accepted values, and which of them change at runtime (Kafka's dynamic broker configs). The
//! broker reads them at startup; the controller checks runtime changes against them.

use crate::topic_config::{
    canonical, check_kind, dynamic_broker_config, int, long, ConfigKind, BOOLEAN,
};

/// The values a broker-only setting accepts.
#[derive(Debug, Clone, Copy)]
pub enum SettingKind {
    /// A topic-config kind (integer range or fixed words).
    Plain(ConfigKind),
    /// `host:count,host:count` (`max.connections.per.ip.overrides`).
    HostCounts,
    /// Free text (`broker.rack`).
    Text,
}

impl SettingKind {
    /// Kafka's config type code.
    pub fn type_code(self) -> i8 {
        match self {
            SettingKind::Plain(kind) => kind.type_code(),
            SettingKind::HostCounts | SettingKind::Text => 2, // STRING
        }
    }
}

/// One broker-level setting that is not a topic default.
#[derive(Debug, Clone, Copy)]
pub struct BrokerSetting {
    /// Kafka's name.
    pub name: &'static str,
    /// The default when the broker sets none.
    pub default: &'static str,
    /// Accepted values.
    pub kind: SettingKind,
    /// One line for `--help` and DescribeConfigs.
    pub doc: &'static str,
    /// Whether it changes at runtime (a dynamic broker config, as in Kafka); the others are
    /// read at startup only.
    pub dynamic: bool,
}

impl BrokerSetting {
    /// The same setting, changeable at runtime.
    const fn at_runtime(self) -> BrokerSetting {
        BrokerSetting {
            dynamic: true,
            ..self
        }
    }

    /// Checks a value; the refusal is worded as Kafka's.
    pub fn check(&self, value: &str) -> Result<(), String> {
        match self.kind {
            SettingKind::Plain(kind) => check_kind(self.name, kind, value),
            SettingKind::HostCounts => parse_host_counts(self.name, value).map(|_| ()),
            SettingKind::Text => Ok(()),
        }
    }
}

/// A setting of `kind`, read at startup only.
const fn setting(
    name: &'static str,
    default: &'static str,
    kind: ConfigKind,
    doc: &'static str,
) -> BrokerSetting {
    BrokerSetting {
        name,
        default,
        kind: SettingKind::Plain(kind),
        doc,
        dynamic: false,
    }
}

/// A free-text setting read at startup (its value is checked where it is used).
const fn text(name: &'static str, default: &'static str, doc: &'static str) -> BrokerSetting {
    BrokerSetting {
        name,
        default,
        kind: SettingKind::Text,
        doc,
        dynamic: false,
    }
}

/// Broker-only settings, with Kafka's names and, where Kafka's default is unbounded, a bound.
pub const BROKER_SETTINGS: &[BrokerSetting] = &[
    setting(
        "auto.create.topics.enable",
        "true",
        BOOLEAN,
        "Create a topic when a Metadata request that allows it names an unknown one.",
    ),
    setting(
        "num.partitions",
        "1",
        int(1, 10_000),
        "Partitions of an auto-created topic or a CreateTopics with -1.",
    ),
    setting(
        "default.replication.factor",
        "1",
        int(1, 1),
        "Replication factor when CreateTopics asks for -1.",
    ),
    setting(
        "socket.request.max.bytes",
        "104857600",
        int(1024, i32::MAX as i64),
        "Largest request frame accepted; larger ones close the connection.",
    ),
    setting(
        "queued.max.request.bytes",
        "268435456",
        long(1024, i64::MAX),
        "Request bytes held in memory at once, over all connections (at least socket.request.max.bytes). When reached, sockets sending large requests are not read until memory frees (backpressure); requests up to 64 KiB always proceed.",
    ),
    setting(
        "max.incremental.fetch.session.cache.slots",
        "1000",
        int(0, 100_000),
        "Incremental fetch sessions (KIP-227) the broker keeps; when all are taken and none has been idle two minutes, fetches are served without one. 0 turns sessions off.",
    ),
    setting(
        "connections.max.idle.ms",
        "600000",
        long(1, i64::MAX),
        "Close a connection on which no byte was read or written for this long.",
    ),
    setting(
        "max.connections",
        "10000",
        int(1, i32::MAX as i64),
        "Most open client connections; a connection beyond it is closed at once. Also bounded by the open-file limit.",
    )
    .at_runtime(),
    setting(
        "max.connections.per.ip",
        "1000",
        int(1, i32::MAX as i64),
        "Most open connections from one IP address; a connection beyond it is closed at once.",
    )
    .at_runtime(),
    setting(
        "socket.listen.backlog.size",
        "4096",
        int(1, 65_535),
        "Connections the kernel queues for the Kafka and HTTP listeners before the broker accepts them (the kernel caps it at net.core.somaxconn). A large backlog lets a reconnect storm be refused at once instead of waiting in SYN retries. Read at start.",
    ),
    BrokerSetting {
        name: "max.connections.per.ip.overrides",
        default: "",
        kind: SettingKind::HostCounts,
        doc: "Per-address exceptions to max.connections.per.ip, as host:count,host:count (IP addresses, or names resolved when the setting takes effect).",
        dynamic: true,
    },
    setting(
        "broker.session.timeout.ms",
        "9000",
        int(500, 3_600_000),
        "A broker the active controller hears no heartbeat from for this long is fenced: it leaves every ISR and its leaderships move to in-sync replicas.",
    ),
    setting(
        "broker.heartbeat.interval.ms",
        "2000",
        int(50, 600_000),
        "How often a broker heartbeats to the active controller; keep it well under broker.session.timeout.ms.",
    ),
    BrokerSetting {
        name: "broker.rack",
        default: "",
        kind: SettingKind::Text,
        doc: "The rack (or availability zone) of this broker. New partitions' replicas are spread over racks, so losing one rack leaves every partition a copy on another. Empty: no rack.",
        dynamic: false,
    },
    setting(
        "auto.leader.rebalance.enable",
        "true",
        BOOLEAN,
        "The active controller moves each partition's leadership back to its preferred replica (the first) once that replica is live and in sync again, every leader.imbalance.check.interval.seconds.",
    ),
    setting(
        "leader.imbalance.check.interval.seconds",
        "300",
        long(1, 86_400),
        "How often the active controller looks for partitions led by another replica than their preferred one (with auto.leader.rebalance.enable).",
    ),
    setting(
        "replica.lag.time.max.ms",
        "30000",
        long(100, i64::MAX),
        "A follower that has not caught up with its leader's log end for this long leaves the ISR (the leader asks the controller); it rejoins once it catches up.",
    ),
    setting(
        "log.retention.check.interval.ms",
        "300000",
        long(1, i64::MAX),
        "How often retention and segment age are checked.",
    ),
    setting(
        "producer.id.expiration.ms",
        "86400000",
        int(1, i32::MAX as i64),
        "Idle time after which a partition forgets an idempotent producer.",
    )
    .at_runtime(),
    setting(
        "producer.id.max.per.partition",
        "5000",
        long(1, 10_000_000),
        "Most idempotent producers a partition remembers; beyond it the one idle longest is forgotten (its next batch starts a fresh sequence).",
    ),
    setting(
        "log.flush.offset.checkpoint.interval.ms",
        "60000",
        int(1, i32::MAX as i64),
        "How often recovery points are checkpointed (bounds recovery scans).",
    ),
    setting(
        "log.cleaner.enable",
        "true",
        BOOLEAN,
        "Run the log cleaner, which compacts topics with cleanup.policy=compact.",
    ),
    setting(
        "log.cleaner.threads",
        "1",
        int(1, 64),
        "Partitions cleaned at once.",
    )
    .at_runtime(),
    setting(
        "log.cleaner.dedupe.buffer.size",
        "134217728",
        long(1_048_576, i64::MAX),
        "Memory for the cleaner's key maps, over all cleaner threads (about 40 bytes per distinct key); a partition with more keys is cleaned in several passes.",
    )
    .at_runtime(),
    setting(
        "log.cleaner.io.max.bytes.per.second",
        "1.7976931348623157E308",
        ConfigKind::Decimal,
        "Bytes the cleaner reads and writes per second at most, over all its threads (a throttle that keeps cleaning from crowding out produce and fetch).",
    )
    .at_runtime(),
    setting(
        "log.cleaner.backoff.ms",
        "15000",
        long(1, i64::MAX),
        "How often compacted partitions are checked for enough dirty data to clean.",
    )
    .at_runtime(),
    setting(
        "offsets.topic.num.partitions",
        "50",
        int(1, 1_000),
        "Partitions of __consumer_offsets when it is created (on the first group request); a group lives on partition abs(hash(group)) % this.",
    ),
    setting(
        "offsets.topic.replication.factor",
        "3",
        int(1, i16::MAX as i64),
        "Replicas of each __consumer_offsets partition when it is created (fewer when fewer brokers are live), so committed offsets and groups survive a broker's loss.",
    ),
    setting(
        "offsets.topic.segment.bytes",
        "104857600",
        int(1_048_576, 1_073_741_824),
        "segment.bytes of __consumer_offsets (smaller segments make its cleaning cheaper).",
    ),
    setting(
        "transaction.state.log.num.partitions",
        "50",
        int(1, 1_000),
        "Partitions of __transaction_state when it is created (on the first FindCoordinator for a transactional id); a transactional id lives on partition abs(hash(id)) % this.",
    ),
    setting(
        "transaction.state.log.replication.factor",
        "3",
        int(1, i16::MAX as i64),
        "Replicas of each __transaction_state partition when it is created (fewer when fewer brokers are live), so transactions survive a broker's loss.",
    ),
    setting(
        "transaction.state.log.min.isr",
        "2",
        int(1, i16::MAX as i64),
        "min.insync.replicas of __transaction_state (at most its replicas): a transaction's state is acknowledged only once this many replicas hold it.",
    ),
    setting(
        "transaction.state.log.segment.bytes",
        "104857600",
        int(1_048_576, 1_073_741_824),
        "segment.bytes of __transaction_state (smaller segments make its cleaning cheaper).",
    ),
    setting(
        "share.coordinator.state.topic.num.partitions",
        "50",
        int(1, 1_000),
        "Partitions of __share_group_state when it is created (on a share group's first fetch); a share-partition's state lives on partition abs(hash(\"group:topicId:partition\")) % this.",
    ),
    setting(
        "share.coordinator.state.topic.replication.factor",
        "3",
        int(1, i16::MAX as i64),
        "Replicas of each __share_group_state partition when it is created (fewer when fewer brokers are live), so share groups' acknowledgements survive a broker's loss.",
    ),
    setting(
        "share.coordinator.state.topic.min.isr",
        "2",
        int(1, i16::MAX as i64),
        "min.insync.replicas of __share_group_state (at most its replicas): an acknowledgement is answered only once this many replicas hold it.",
    ),
    setting(
        "share.coordinator.state.topic.segment.bytes",
        "104857600",
        int(1_048_576, 1_073_741_824),
        "segment.bytes of __share_group_state (smaller segments make its cleaning cheaper).",
    ),
    setting(
        "transaction.version",
        "2",
        int(0, 2),
        "The transaction protocol version reported as finalized in ApiVersions (Kafka's transaction.version feature): at 2, Kafka 4 clients let the brokers add partitions to transactions and bump the producer epoch with every transaction (KIP-890); at 0 or 1 they stay on version 1.",
    ),
    setting(
        "transaction.partition.verification.enable",
        "true",
        BOOLEAN,
        "Before a transactional batch opens its transaction on a partition, ask the transaction coordinator whether the transaction holds that partition (KIP-890); refused otherwise. Off only to let old or broken producers leave transactions open.",
    ),
    setting(
        "transaction.max.timeout.ms",
        "900000",
        int(1, i32::MAX as i64),
        "Longest transaction.timeout.ms a transactional producer may ask for (INVALID_TRANSACTION_TIMEOUT beyond).",
    ),
    setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "10000",
        int(1, i32::MAX as i64),
        "How often open transactions are checked against their transaction.timeout.ms; one open longer is aborted (its producer fenced).",
    ),
    setting(
        "transactional.id.expiration.ms",
        "604800000",
        int(1, i32::MAX as i64),
        "A transactional id without a transaction open and unchanged this long is forgotten; its next producer gets a new producer id.",
    ),
    setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "3600000",
        int(1, i32::MAX as i64),
        "How often transactional ids past transactional.id.expiration.ms are looked for.",
    ),
    setting(
        "offset.metadata.max.bytes",
        "4096",
        int(0, 1_048_576),
        "Longest metadata string an offset commit may carry; longer ones get OFFSET_METADATA_TOO_LARGE.",
    ),
    setting(
        "offsets.retention.minutes",
        "10080",
        int(1, i32::MAX as i64),
        "Committed offsets of a group without members are deleted this many minutes after it became empty (or after the commit, for a group that never had members).",
    ),
    setting(
        "offsets.retention.check.interval.ms",
        "600000",
        long(1, i64::MAX),
        "How often expired committed offsets are looked for.",
    ),
    setting(
        "group.min.session.timeout.ms",
        "6000",
        int(1, i32::MAX as i64),
        "Shortest session timeout a group member may ask for.",
    ),
    setting(
        "group.max.session.timeout.ms",
        "1800000",
        int(1, i32::MAX as i64),
        "Longest session timeout a group member may ask for.",
    ),
    setting(
        "group.initial.rebalance.delay.ms",
        "3000",
        int(0, i32::MAX as i64),
        "How long the first rebalance of an empty group waits for more members to join, so a group starting up rebalances once.",
    ),
    setting(
        "group.max.size",
        "2147483647",
        int(1, i32::MAX as i64),
        "Most members one consumer group may have.",
    ),
    setting(
        "group.member.metadata.max.bytes",
        "1048576",
        int(1_024, i32::MAX as i64),
        "Most bytes of one group member's metadata: a JoinGroup's protocols (a consumer's subscription and user data), the assignment a leader gives one member, a consumer-protocol member's subscription. A larger one is refused with INVALID_REQUEST.",
    ),
    setting(
        "group.metadata.max.bytes",
        "33554432",
        int(1_024, i32::MAX as i64),
        "Most bytes of member metadata and assignments one group holds; a join that would go over it is refused with GROUP_MAX_SIZE_REACHED.",
    ),
    setting(
        "group.coordinator.metadata.max.bytes",
        "268435456",
        long(1_024, i64::MAX),
        "Most bytes of member metadata and assignments all the groups this broker coordinates hold together; past it group requests that would add some are answered COORDINATOR_NOT_AVAILABLE (clients retry) until members leave.",
    ),
    setting(
        "group.consumer.session.timeout.ms",
        "45000",
        int(1, i32::MAX as i64),
        "Consumer group protocol (group.protocol=consumer): a member that sends no heartbeat for this long is removed and its partitions reassigned.",
    ),
    setting(
        "group.consumer.heartbeat.interval.ms",
        "5000",
        int(1, i32::MAX as i64),
        "Consumer group protocol: how often members heartbeat, and so how soon they learn of a new assignment.",
    ),
    setting(
        "group.consumer.assignment.interval.ms",
        "1000",
        int(0, i32::MAX as i64),
        "Consumer group protocol: a group's target assignment is computed at most once per interval (KIP-1263); members that join, leave or change subscription within it wait for the next computation, so a storm of joins costs one computation per interval. 0 computes on every change.",
    ),
    setting(
        "group.consumer.max.size",
        "2147483647",
        int(1, i32::MAX as i64),
        "Most members one consumer group protocol group may have.",
    ),
    setting(
        "group.share.session.timeout.ms",
        "45000",
        int(1, i32::MAX as i64),
        "Share groups (KIP-932): a member that sends no ShareGroupHeartbeat for this long is removed and the group's partitions are assigned again among the others.",
    ),
    setting(
        "group.share.heartbeat.interval.ms",
        "5000",
        int(1, i32::MAX as i64),
        "Share groups: how often members heartbeat, and so how soon they learn of a new assignment.",
    ),
    setting(
        "group.share.record.lock.duration.ms",
        "30000",
        int(1_000, 3_600_000),
        "Share groups: how long a record delivered to a member stays acquired by it (its acquisition lock) before it is available to the group's other members again.",
    ),
    setting(
        "group.share.delivery.count.limit",
        "5",
        int(2, 10),
        "Share groups: how many times a record is delivered at most; released or timed out after that many deliveries, it is archived and not delivered again.",
    ),
    setting(
        "group.share.partition.max.record.locks",
        "2000",
        int(100, 10_000),
        "Share groups: how many records of one partition may be in flight (delivered and not yet acknowledged, or waiting for the records before them) for one group at a time.",
    ),
    setting(
        "group.share.max.share.sessions",
        "2000",
        int(1, 1_000_000),
        "Share groups: how many share sessions (one per member fetching from this broker) the broker keeps; a new one past it evicts one idle for 2 minutes, or is refused with SHARE_SESSION_LIMIT_REACHED.",
    ),
    setting(
        "group.share.max.size",
        "200",
        int(1, 1_000),
        "Most members one share group may have; a member joining past it is refused with GROUP_MAX_SIZE_REACHED.",
    ),
    text(
        "listeners",
        "PLAINTEXT://127.0.0.1:9092",
        "The listeners, NAME://HOST:PORT,… (an empty or wildcard host binds every interface; port 0 picks a free one). Each name's security protocol comes from listener.security.protocol.map. `--listen` sets it too.",
    ),
    text(
        "advertised.listeners",
        "",
        "What clients are told for each listener, NAME://HOST:PORT,…; a listener not named here advertises the address it bound. Required for a listener on a wildcard host. `--advertise` sets it too.",
    ),
    text(
        "listener.security.protocol.map",
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "The security protocol of each listener name, NAME:PROTOCOL,…: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
    ),
    text(
        "inter.broker.listener.name",
        "",
        "The listener brokers reach each other on (and the HTTP gateway the broker). On an SSL listener the broker checks the others' certificates against that listener's ssl.truststore.location and shows its own keystore; on a SASL one it logs in as the user of listener.name.<name>.<mechanism>.sasl.jaas.config (username=\"...\" password=\"...\"), a user super.users should name. Empty: the listener security.inter.broker.protocol names, else the first PLAINTEXT listener.",
    ),
    text(
        "security.inter.broker.protocol",
        "",
        "Kafka's other way to pick the inter-broker listener: the listener named as this protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). Set this or inter.broker.listener.name, not both.",
    ),
    text(
        "sasl.mechanism.inter.broker.protocol",
        "",
        "The SASL mechanism brokers log in to a SASL inter-broker listener with: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, one the listener enables. Empty: the first of its sasl.enabled.mechanisms.",
    ),
    text(
        "controller.listener.names",
        "",
        "Listeners (by name) of the metadata quorum rather than of Kafka clients: the first is where this node's controller listens (as --controller-listen). PLAINTEXT, or SSL with mutual TLS: each side shows its ssl.keystore.location and checks the other's against its ssl.truststore.location, so only a holder of a certificate that CA signed votes, appends metadata or forwards a change (give the quorum a CA of its own).",
    ),
    text(
        "sasl.enabled.mechanisms",
        "SCRAM-SHA-256,SCRAM-SHA-512",
        "The SASL mechanisms of SASL_PLAINTEXT and SASL_SSL listeners: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN (checked against the same SCRAM credentials; send it over TLS only). `listener.name.<name>.sasl.enabled.mechanisms` sets it for one listener.",
    ),
    setting(
        "authorizer.class.name",
        "",
        ConfigKind::Choice(&[
            "",
            "StandardAuthorizer",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ]),
        "StandardAuthorizer (or Kafka's full class name, org.apache.kafka.metadata.authorizer.StandardAuthorizer) checks every request against the ACLs in the cluster metadata; empty lets every client do everything and refuses CreateAcls, DescribeAcls and DeleteAcls (SECURITY_DISABLED).",
    ),
    text(
        "super.users",
        "",
        "Principals the authorizer lets do everything, whatever the ACLs say, separated by semicolons: User:admin;User:broker. List the brokers' own principal: the user of their inter-broker login on a SASL listener, the subject of their certificate on an SSL one with ssl.client.auth, else User:ANONYMOUS (a PLAINTEXT inter-broker listener).",
    ),
    setting(
        "allow.everyone.if.no.acl.found",
        "false",
        BOOLEAN,
        "With the authorizer on, whether a resource with no ACL at all is open to everyone (true) or to super users only (false).",
    ),
    setting(
        "sasl.server.max.receive.size",
        "524288",
        int(1024, i32::MAX as i64),
        "Largest request frame a client may send on a SASL listener before it has authenticated; a larger one closes the connection (counted in weir_bad_requests_total), so a client with no credentials cannot make the broker hold socket.request.max.bytes for it.",
    ),
    setting(
        "connection.failed.authentication.delay.ms",
        "100",
        int(0, 10_000),
        "A failed SASL login is answered after this delay, then its connection closed. Past 5 failures of one address within a minute the delay doubles per failure (from at least 100 ms) up to 5 s, and an address has at most 4 logins under way, a failed one until it is answered: guessing is slowed, a right password is let in at once.",
    ),
    text(
        "ssl.keystore.type",
        "PEM",
        "The keystore format of SSL listeners: PEM (the only one read).",
    ),
    text(
        "ssl.keystore.location",
        "",
        "A PEM file holding an SSL listener's unencrypted private key and its certificate chain, leaf first. Read again when it changes (checked every 10 s), so renewed certificates serve new connections without a restart. `listener.name.<name>.ssl.keystore.location` sets it for one listener.",
    ),
    text(
        "ssl.truststore.type",
        "PEM",
        "The truststore format: PEM (the only one read).",
    ),
    text(
        "ssl.truststore.location",
        "",
        "A PEM file of the CA certificates that vouch for client certificates (with ssl.client.auth) and, on the inter-broker listener, for the other brokers' certificates.",
    ),
    text(
        "ssl.client.auth",
        "none",
        "Whether SSL listeners ask clients for a certificate: none, requested (checked when given) or required (refused without one the truststore vouches for).",
    ),
    text(
        "ssl.enabled.protocols",
        "TLSv1.2,TLSv1.3",
        "The TLS versions SSL listeners speak: TLSv1.2, TLSv1.3 (nothing older exists here).",
    ),
];

/// The broker setting called `name`.
pub fn broker_setting(name: &str) -> Option<&'static BrokerSetting> {
    BROKER_SETTINGS.iter().find(|s| s.name == name)
}

/// Checks a runtime change of broker config `name` to `value`: `None` when `name` does not
/// change at runtime (a static setting, or no setting at all), else the value's check. The
/// broker keys of topic configs change at runtime, and so do the settings marked dynamic.
pub fn check_runtime_broker_config(name: &str, value: &str) -> Option<Result<(), String>> {
    if let Some(def) = dynamic_broker_config(name) {
        return Some(check_kind(name, def.kind, value));
    }
    broker_setting(name)
        .filter(|setting| setting.dynamic)
        .map(|setting| setting.check(value))
}

/// A runtime broker config's value, checked ([`check_runtime_broker_config`]), as Kafka
/// describes it once parsed ([`canonical`]); `None` when `name` does not change at runtime.
pub fn checked_runtime_broker_config(name: &str, value: &str) -> Option<Result<String, String>> {
    let kind = match dynamic_broker_config(name) {
        Some(def) => Some(def.kind),
        None => match broker_setting(name).filter(|setting| setting.dynamic)?.kind {
            SettingKind::Plain(kind) => Some(kind),
            SettingKind::HostCounts | SettingKind::Text => None,
        },
    };
    let checked = check_runtime_broker_config(name, value)?;
    Some(checked.map(|()| kind.map_or_else(|| value.to_string(), |kind| canonical(kind, value))))
}

/// Parses `host:count,host:count`; hosts may be IPv6 (the count follows the last colon).
pub fn parse_host_counts(name: &str, value: &str) -> Result<Vec<(String, u32)>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (host, count) = entry
                .rsplit_once(':')
                .filter(|(host, _)| !host.is_empty())
                .ok_or_else(|| format!("{name}: {entry:?} is not host:count"))?;
            let count = count
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("{name}: {count:?} in {entry:?} is not a count"))?;
            let host = host.trim().trim_start_matches('[').trim_end_matches(']');
            Ok((host.to_string(), count))
        })
        .collect()
}
