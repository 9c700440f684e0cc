//! The broker settings that are not topic defaults, with Kafka's names, defaults and
//! accepted values, and which of them change at runtime (Kafka's dynamic broker configs). The
//! broker reads them at startup; the controller checks runtime changes against them.

use crate::topic_config::{check_kind, dynamic_broker_config, ConfigKind};

/// The values a broker-only setting accepts.
#[derive(Debug, Clone, Copy)]
pub enum SettingKind {
    /// A topic-config kind (integer range or fixed words).
    Plain(ConfigKind),
    /// `host:count,host:count` (`max.connections.per.ip.overrides`).
    HostCounts,
}

impl SettingKind {
    /// Kafka's config type code.
    pub fn type_code(self) -> i8 {
        match self {
            SettingKind::Plain(kind) => kind.type_code(),
            SettingKind::HostCounts => 2, // STRING
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
        }
    }
}

const fn long_setting(
    name: &'static str,
    default: &'static str,
    min: i64,
    max: i64,
    doc: &'static str,
) -> BrokerSetting {
    BrokerSetting {
        name,
        default,
        kind: SettingKind::Plain(ConfigKind::Long { min, max }),
        doc,
        dynamic: false,
    }
}

const fn int_setting(
    name: &'static str,
    default: &'static str,
    min: i64,
    max: i64,
    doc: &'static str,
) -> BrokerSetting {
    BrokerSetting {
        name,
        default,
        kind: SettingKind::Plain(ConfigKind::Int { min, max }),
        doc,
        dynamic: false,
    }
}

/// Broker-only settings, with Kafka's names and, where Kafka's default is unbounded, a bound.
pub const BROKER_SETTINGS: &[BrokerSetting] = &[
    BrokerSetting {
        name: "auto.create.topics.enable",
        default: "true",
        kind: SettingKind::Plain(ConfigKind::Choice(&["true", "false"])),
        doc: "Create a topic when a Metadata request that allows it names an unknown one.",
        dynamic: false,
    },
    int_setting(
        "num.partitions",
        "1",
        1,
        10_000,
        "Partitions of an auto-created topic or a CreateTopics with -1.",
    ),
    int_setting(
        "default.replication.factor",
        "1",
        1,
        1,
        "Replication factor when CreateTopics asks for -1.",
    ),
    int_setting(
        "socket.request.max.bytes",
        "104857600",
        1024,
        i32::MAX as i64,
        "Largest request frame accepted; larger ones close the connection.",
    ),
    long_setting(
        "queued.max.request.bytes",
        "268435456",
        1024,
        i64::MAX,
        "Request bytes held in memory at once, over all connections (at least socket.request.max.bytes). When reached, sockets sending large requests are not read until memory frees (backpressure); requests up to 64 KiB always proceed.",
    ),
    int_setting(
        "max.incremental.fetch.session.cache.slots",
        "1000",
        0,
        100_000,
        "Incremental fetch sessions (KIP-227) the broker keeps; when all are taken and none has been idle two minutes, fetches are served without one. 0 turns sessions off.",
    ),
    long_setting(
        "connections.max.idle.ms",
        "600000",
        1,
        i64::MAX,
        "Close a connection on which no byte was read or written for this long.",
    ),
    int_setting(
        "max.connections",
        "10000",
        1,
        i32::MAX as i64,
        "Most open client connections; a connection beyond it is closed at once. Also bounded by the open-file limit.",
    )
    .at_runtime(),
    int_setting(
        "max.connections.per.ip",
        "1000",
        1,
        i32::MAX as i64,
        "Most open connections from one IP address; a connection beyond it is closed at once.",
    )
    .at_runtime(),
    BrokerSetting {
        name: "max.connections.per.ip.overrides",
        default: "",
        kind: SettingKind::HostCounts,
        doc: "Per-address exceptions to max.connections.per.ip, as host:count,host:count (IP addresses, or names resolved when the setting takes effect).",
        dynamic: true,
    },
    long_setting(
        "log.retention.check.interval.ms",
        "300000",
        1,
        i64::MAX,
        "How often retention and segment age are checked.",
    ),
    int_setting(
        "producer.id.expiration.ms",
        "86400000",
        1,
        i32::MAX as i64,
        "Idle time after which a partition forgets an idempotent producer.",
    )
    .at_runtime(),
    long_setting(
        "producer.id.max.per.partition",
        "5000",
        1,
        10_000_000,
        "Most idempotent producers a partition remembers; beyond it the one idle longest is forgotten (its next batch starts a fresh sequence).",
    ),
    int_setting(
        "log.flush.offset.checkpoint.interval.ms",
        "60000",
        1,
        i32::MAX as i64,
        "How often recovery points are checkpointed (bounds recovery scans).",
    ),
    BrokerSetting {
        name: "log.cleaner.enable",
        default: "true",
        kind: SettingKind::Plain(ConfigKind::Choice(&["true", "false"])),
        doc: "Run the log cleaner, which compacts topics with cleanup.policy=compact.",
        dynamic: false,
    },
    int_setting(
        "log.cleaner.threads",
        "1",
        1,
        64,
        "Partitions cleaned at once.",
    )
    .at_runtime(),
    long_setting(
        "log.cleaner.dedupe.buffer.size",
        "134217728",
        1_048_576,
        i64::MAX,
        "Memory for the cleaner's key maps, over all cleaner threads (about 40 bytes per distinct key); a partition with more keys is cleaned in several passes.",
    )
    .at_runtime(),
    BrokerSetting {
        name: "log.cleaner.io.max.bytes.per.second",
        default: "1.7976931348623157E308",
        kind: SettingKind::Plain(ConfigKind::Decimal),
        doc: "Bytes the cleaner reads and writes per second at most, over all its threads (a throttle that keeps cleaning from crowding out produce and fetch).",
        dynamic: true,
    },
    long_setting(
        "log.cleaner.backoff.ms",
        "15000",
        1,
        i64::MAX,
        "How often compacted partitions are checked for enough dirty data to clean.",
    )
    .at_runtime(),
    int_setting(
        "offsets.topic.num.partitions",
        "50",
        1,
        1_000,
        "Partitions of __consumer_offsets when it is created (on the first group request); a group lives on partition abs(hash(group)) % this.",
    ),
    int_setting(
        "offsets.topic.segment.bytes",
        "104857600",
        1_048_576,
        1_073_741_824,
        "segment.bytes of __consumer_offsets (smaller segments make its cleaning cheaper).",
    ),
    int_setting(
        "offset.metadata.max.bytes",
        "4096",
        0,
        1_048_576,
        "Longest metadata string an offset commit may carry; longer ones get OFFSET_METADATA_TOO_LARGE.",
    ),
    int_setting(
        "offsets.retention.minutes",
        "10080",
        1,
        i32::MAX as i64,
        "Committed offsets of a group without members are deleted this many minutes after it became empty (or after the commit, for a group that never had members).",
    ),
    long_setting(
        "offsets.retention.check.interval.ms",
        "600000",
        1,
        i64::MAX,
        "How often expired committed offsets are looked for.",
    ),
    int_setting(
        "group.min.session.timeout.ms",
        "6000",
        1,
        i32::MAX as i64,
        "Shortest session timeout a group member may ask for.",
    ),
    int_setting(
        "group.max.session.timeout.ms",
        "1800000",
        1,
        i32::MAX as i64,
        "Longest session timeout a group member may ask for.",
    ),
    int_setting(
        "group.initial.rebalance.delay.ms",
        "3000",
        0,
        i32::MAX as i64,
        "How long the first rebalance of an empty group waits for more members to join, so a group starting up rebalances once.",
    ),
    int_setting(
        "group.max.size",
        "2147483647",
        1,
        i32::MAX as i64,
        "Most members one consumer group may have.",
    ),
    int_setting(
        "group.consumer.session.timeout.ms",
        "45000",
        1,
        i32::MAX as i64,
        "Consumer group protocol (group.protocol=consumer): a member that sends no heartbeat for this long is removed and its partitions reassigned.",
    ),
    int_setting(
        "group.consumer.heartbeat.interval.ms",
        "5000",
        1,
        i32::MAX as i64,
        "Consumer group protocol: how often members heartbeat, and so how soon they learn of a new assignment.",
    ),
    int_setting(
        "group.consumer.max.size",
        "2147483647",
        1,
        i32::MAX as i64,
        "Most members one consumer group protocol group may have.",
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
