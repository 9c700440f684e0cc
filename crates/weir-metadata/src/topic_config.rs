//! The topic configs Weir enforces, with Kafka's names, defaults and the broker-level key that
//! overrides each default. A key not listed here is refused with INVALID_CONFIG rather than
//! stored and silently ignored.

use std::collections::BTreeMap;

/// What values a config accepts, and so which Kafka config type it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    /// A signed 64-bit integer within `[min, max]` (Kafka's LONG).
    Long {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A signed 32-bit integer within `[min, max]` (Kafka's INT).
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// One of a fixed set of words (Kafka's STRING with a valid-string list).
    Choice(&'static [&'static str]),
    /// A comma-separated list of distinct words from a fixed set (Kafka's LIST).
    List(&'static [&'static str]),
    /// A decimal number in `[0, 1]` (`min.cleanable.dirty.ratio`, Kafka's DOUBLE).
    Fraction,
    /// A decimal number of at least 0 (a rate, Kafka's DOUBLE).
    Decimal,
    /// Empty, `*`, or a comma-separated list of `partition:broker` (Kafka's LIST of throttled
    /// replicas).
    ReplicaList,
}

impl ConfigKind {
    /// Kafka's config type code, as DescribeConfigs v3+ reports it.
    pub fn type_code(self) -> i8 {
        match self {
            ConfigKind::Choice(["true", "false"]) => 1,
            ConfigKind::Choice(_) => 2,
            ConfigKind::Int { .. } => 3,
            ConfigKind::Long { .. } => 5,
            ConfigKind::Fraction | ConfigKind::Decimal => 6,
            ConfigKind::List(_) | ConfigKind::ReplicaList => 7,
        }
    }
}

/// One supported topic config.
#[derive(Debug, Clone, Copy)]
pub struct TopicConfigDef {
    /// The topic-level name (`retention.ms`).
    pub name: &'static str,
    /// The broker-level name whose value is the default (`log.retention.ms`).
    pub broker_name: &'static str,
    /// Kafka's default, used when the broker sets none.
    pub default: &'static str,
    /// Accepted values.
    pub kind: ConfigKind,
    /// One line for `--help` and docs.
    pub doc: &'static str,
}

pub(crate) const fn long(min: i64, max: i64) -> ConfigKind {
    ConfigKind::Long { min, max }
}

pub(crate) const fn int(min: i64, max: i64) -> ConfigKind {
    ConfigKind::Int { min, max }
}

/// Kafka's BOOLEAN.
pub(crate) const BOOLEAN: ConfigKind = ConfigKind::Choice(&["true", "false"]);

/// Topic configs with no broker-level key: the broker lists none and a topic override is the
/// only level (Kafka's own broker keys for these are named differently or do not exist).
const TOPIC_ONLY: &[&str] = &[
    "errors.deadletterqueue.group.enable",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
];

/// Topic configs whose broker key has no default of its own but falls back to a coarser key
/// (`log.retention.ms` to `log.retention.hours`): (topic name, fallback key, its default). The
/// broker key is reported null until set, and the fallback is listed as a synonym only then,
/// as Kafka does.
const BROKER_FALLBACKS: &[(&str, &str, &str)] = &[
    ("retention.ms", "log.retention.hours", "168"),
    ("segment.ms", "log.roll.hours", "168"),
    ("segment.jitter.ms", "log.roll.jitter.hours", "0"),
    (
        "flush.ms",
        "log.flush.scheduler.interval.ms",
        "9223372036854775807",
    ),
];

impl TopicConfigDef {
    /// The broker-level key that sets this config's default, unless the config is topic-only.
    pub fn broker_key(&self) -> Option<&'static str> {
        (!TOPIC_ONLY.contains(&self.name)).then_some(self.broker_name)
    }

    /// The coarser broker key this config's broker key falls back to, with its default
    /// (`log.retention.hours`, `168`), for the few keys that have one.
    pub fn broker_fallback(&self) -> Option<(&'static str, &'static str)> {
        BROKER_FALLBACKS
            .iter()
            .find(|(name, _, _)| *name == self.name)
            .map(|(_, key, default)| (*key, *default))
    }
}

/// `flush.policy` value: fsync before answering an `acks=all` write (group commit).
pub const FLUSH_POLICY_ACKS_ALL: &str = "acks-all";
/// `flush.policy` value: fsync before every acknowledgement, `acks=1` included.
pub const FLUSH_POLICY_ALWAYS: &str = "always";
/// `flush.policy` value: never fsync before acknowledging (Kafka's behaviour).
pub const FLUSH_POLICY_NEVER: &str = "never";

/// `compression.type` value: batches are stored as the producer compressed them.
pub const COMPRESSION_PRODUCER: &str = "producer";

/// The batch codec a topic's `compression.type` asks the broker to store, or `None` for
/// `producer` (as sent).
pub fn compression_codec(compression_type: &str) -> Option<i16> {
    match compression_type {
        "uncompressed" => Some(0),
        "gzip" => Some(1),
        "snappy" => Some(2),
        "lz4" => Some(3),
        "zstd" => Some(4),
        _ => None,
    }
}

/// `message.timestamp.type` value: records keep the producer's timestamps.
pub const TIMESTAMP_CREATE_TIME: &str = "CreateTime";
/// `message.timestamp.type` value: the broker stamps each batch with its append time.
pub const TIMESTAMP_LOG_APPEND_TIME: &str = "LogAppendTime";

/// `cleanup.policy` word: retention deletes old segments.
pub const CLEANUP_DELETE: &str = "delete";
/// `cleanup.policy` word: the cleaner compacts by key.
pub const CLEANUP_COMPACT: &str = "compact";

/// Smallest `segment.bytes` accepted (Kafka 4's minimum): a smaller one would make every
/// append roll a segment.
pub const SEGMENT_BYTES_MIN: i64 = 1024 * 1024;

/// Every topic config Weir enforces.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef { name: "retention.ms", broker_name: "log.retention.ms", default: "604800000", kind: long(-1, i64::MAX), doc: "Delete a segment once its newest record is older than this; -1 keeps forever." },
    TopicConfigDef { name: "retention.bytes", broker_name: "log.retention.bytes", default: "-1", kind: long(-1, i64::MAX), doc: "Delete oldest segments while a partition is larger than this; -1 means no limit." },
    TopicConfigDef { name: "segment.bytes", broker_name: "log.segment.bytes", default: "1073741824", kind: int(SEGMENT_BYTES_MIN, i32::MAX as i64), doc: "Roll to a new segment file at this size (at least 1 MiB, as in Kafka 4)." },
    TopicConfigDef { name: "segment.ms", broker_name: "log.roll.ms", default: "604800000", kind: long(1, i64::MAX), doc: "Roll to a new segment file at this age." },
    TopicConfigDef { name: "max.message.bytes", broker_name: "message.max.bytes", default: "1048588", kind: int(0, i32::MAX as i64), doc: "Largest record batch accepted." },
    TopicConfigDef { name: "index.interval.bytes", broker_name: "log.index.interval.bytes", default: "4096", kind: int(0, i32::MAX as i64), doc: "Bytes between offset index entries." },
    TopicConfigDef { name: "cleanup.policy", broker_name: "log.cleanup.policy", default: "delete", kind: ConfigKind::List(&[CLEANUP_COMPACT, CLEANUP_DELETE]), doc: "delete: retention deletes old segments; compact: the cleaner keeps the latest record per key (records need keys); both: both; empty: neither (records stay until the topic is deleted)." },
    TopicConfigDef { name: "min.cleanable.dirty.ratio", broker_name: "log.cleaner.min.cleanable.ratio", default: "0.5", kind: ConfigKind::Fraction, doc: "Compacted topics: clean once this share of the inactive segments has not been cleaned yet." },
    TopicConfigDef { name: "min.compaction.lag.ms", broker_name: "log.cleaner.min.compaction.lag.ms", default: "0", kind: long(0, i64::MAX), doc: "Compacted topics: a record stays uncompacted at least this long." },
    TopicConfigDef { name: "max.compaction.lag.ms", broker_name: "log.cleaner.max.compaction.lag.ms", default: "9223372036854775807", kind: long(1, i64::MAX), doc: "Compacted topics: a record is compacted within this long of its segment's newest record, whatever the dirty ratio." },
    TopicConfigDef { name: "delete.retention.ms", broker_name: "log.cleaner.delete.retention.ms", default: "86400000", kind: long(0, i64::MAX), doc: "Compacted topics: tombstones stay readable this long after their segment's newest record." },
    TopicConfigDef { name: "compression.type", broker_name: "compression.type", default: "producer", kind: ConfigKind::Choice(&["uncompressed", "zstd", "lz4", "snappy", "gzip", COMPRESSION_PRODUCER]), doc: "producer: batches are stored as the producer compressed them; uncompressed, gzip, snappy, lz4 or zstd: the broker recompresses batches in another codec (at compression.gzip/lz4/zstd.level) before storing them." },
    TopicConfigDef { name: "message.timestamp.type", broker_name: "log.message.timestamp.type", default: "CreateTime", kind: ConfigKind::Choice(&[TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME]), doc: "CreateTime: a record's timestamp is the producer's (checked against message.timestamp.before/after.max.ms); LogAppendTime: the broker stamps each batch with the time it appends it, and Produce answers with that time." },
    TopicConfigDef { name: "message.timestamp.before.max.ms", broker_name: "log.message.timestamp.before.max.ms", default: "9223372036854775807", kind: long(0, i64::MAX), doc: "A record timestamp further in the past than this is refused with INVALID_TIMESTAMP." },
    TopicConfigDef { name: "message.timestamp.after.max.ms", broker_name: "log.message.timestamp.after.max.ms", default: "3600000", kind: long(0, i64::MAX), doc: "A record timestamp further in the future than this is refused with INVALID_TIMESTAMP." },
    TopicConfigDef { name: "min.insync.replicas", broker_name: "min.insync.replicas", default: "1", kind: int(1, i32::MAX as i64), doc: "acks=all writes are refused with NOT_ENOUGH_REPLICAS when fewer replicas are in sync." },
    TopicConfigDef { name: "flush.policy", broker_name: "log.flush.policy", default: FLUSH_POLICY_ACKS_ALL, kind: ConfigKind::Choice(&[FLUSH_POLICY_ACKS_ALL, FLUSH_POLICY_ALWAYS, FLUSH_POLICY_NEVER]), doc: "acks-all: fsync (group commit) before answering acks=all; always: before every answer; never: leave it to the OS, as Kafka does." },
    // Kafka's other topic configs. Weir stores and reports them so that clients and config
    // tools see Kafka's set; what each does here (often nothing yet) is in its doc line.
    TopicConfigDef { name: "compression.gzip.level", broker_name: "compression.gzip.level", default: "-1", kind: int(-1, 9), doc: "gzip level (1-9, -1 for zlib's default) of batches the broker recompresses (compression.type=gzip)." },
    TopicConfigDef { name: "compression.lz4.level", broker_name: "compression.lz4.level", default: "9", kind: int(1, 17), doc: "lz4 level of batches the broker recompresses (compression.type=lz4)." },
    TopicConfigDef { name: "compression.zstd.level", broker_name: "compression.zstd.level", default: "3", kind: int(-131_072, 22), doc: "zstd level of batches the broker recompresses (compression.type=zstd)." },
    TopicConfigDef { name: "errors.deadletterqueue.group.enable", broker_name: "errors.deadletterqueue.group.enable", default: "false", kind: BOOLEAN, doc: "Accepted for Kafka compatibility; Weir has no dead-letter queues yet." },
    TopicConfigDef { name: "file.delete.delay.ms", broker_name: "log.segment.delete.delay.ms", default: "60000", kind: long(0, i64::MAX), doc: "Accepted for Kafka compatibility; Weir removes a deleted segment's files once no read holds them." },
    TopicConfigDef { name: "flush.messages", broker_name: "log.flush.interval.messages", default: "9223372036854775807", kind: long(1, i64::MAX), doc: "Accepted for Kafka compatibility; Weir fsyncs as flush.policy says." },
    TopicConfigDef { name: "flush.ms", broker_name: "log.flush.interval.ms", default: "9223372036854775807", kind: long(0, i64::MAX), doc: "Accepted for Kafka compatibility; Weir fsyncs as flush.policy says." },
    TopicConfigDef { name: "follower.replication.throttled.replicas", broker_name: "follower.replication.throttled.replicas", default: "", kind: ConfigKind::ReplicaList, doc: "Replicas whose follower fetching is throttled (partition:broker pairs, or *); a single-node broker has no followers." },
    TopicConfigDef { name: "leader.replication.throttled.replicas", broker_name: "leader.replication.throttled.replicas", default: "", kind: ConfigKind::ReplicaList, doc: "Replicas whose leader-side replication is throttled (partition:broker pairs, or *); a single-node broker has no followers." },
    TopicConfigDef { name: "local.retention.bytes", broker_name: "log.local.retention.bytes", default: "-2", kind: long(-2, i64::MAX), doc: "Tiered storage: bytes kept on local disk; -2 means retention.bytes. Weir has no tiered storage yet." },
    TopicConfigDef { name: "local.retention.ms", broker_name: "log.local.retention.ms", default: "-2", kind: long(-2, i64::MAX), doc: "Tiered storage: time kept on local disk; -2 means retention.ms. Weir has no tiered storage yet." },
    TopicConfigDef { name: "max.decompressed.message.bytes", broker_name: "max.decompressed.message.bytes", default: "2147483639", kind: int(0, i32::MAX as i64), doc: "Largest size a compressed batch may decompress to; Weir also caps it at 64 times max.message.bytes (at least 64 MiB, at most 256 MiB)." },
    TopicConfigDef { name: "preallocate", broker_name: "log.preallocate", default: "false", kind: BOOLEAN, doc: "Accepted for Kafka compatibility; Weir grows segment files as it writes." },
    TopicConfigDef { name: "remote.copy.lag.bytes", broker_name: "log.remote.copy.lag.bytes", default: "-1", kind: long(-1, i64::MAX), doc: "Tiered storage: how far behind the copy to remote storage may be. Weir has no tiered storage yet." },
    TopicConfigDef { name: "remote.copy.lag.ms", broker_name: "log.remote.copy.lag.ms", default: "0", kind: long(0, i64::MAX), doc: "Tiered storage: how long a segment may wait to be copied to remote storage. Weir has no tiered storage yet." },
    TopicConfigDef { name: "remote.log.copy.disable", broker_name: "remote.log.copy.disable", default: "false", kind: BOOLEAN, doc: "Tiered storage: stop copying segments to remote storage. Weir has no tiered storage yet." },
    TopicConfigDef { name: "remote.log.delete.on.disable", broker_name: "remote.log.delete.on.disable", default: "false", kind: BOOLEAN, doc: "Tiered storage: delete remote segments when tiering is turned off. Weir has no tiered storage yet." },
    TopicConfigDef { name: "remote.storage.enable", broker_name: "remote.storage.enable", default: "false", kind: BOOLEAN, doc: "Tiered storage; true is refused, as by a Kafka broker without remote log storage." },
    TopicConfigDef { name: "segment.index.bytes", broker_name: "log.index.size.max.bytes", default: "10485760", kind: int(4, i32::MAX as i64), doc: "Accepted for Kafka compatibility; Weir's offset index grows with its segment." },
    TopicConfigDef { name: "segment.jitter.ms", broker_name: "log.roll.jitter.ms", default: "0", kind: long(0, i64::MAX), doc: "Accepted for Kafka compatibility; Weir rolls segments at exactly segment.ms." },
    TopicConfigDef { name: "unclean.leader.election.enable", broker_name: "unclean.leader.election.enable", default: "false", kind: BOOLEAN, doc: "Let an out-of-sync replica become leader; a single-node broker has no other replica." },
];

/// A boolean as Kafka reads one: `true` or `false` in any case, spaces around ignored.
pub fn parse_boolean(value: &str) -> Option<bool> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("true") {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// `value`, already checked against `kind`, as Kafka describes it once parsed: a boolean in
/// lower case, an integer without spaces or leading zeros, a list's items without spaces
/// around them. Other values stay as given.
pub fn canonical(kind: ConfigKind, value: &str) -> String {
    match kind {
        ConfigKind::Choice(["true", "false"]) => match parse_boolean(value) {
            Some(boolean) => boolean.to_string(),
            None => value.to_string(),
        },
        ConfigKind::Long { .. } | ConfigKind::Int { .. } => value
            .trim()
            .parse::<i64>()
            .map_or_else(|_| value.to_string(), |n| n.to_string()),
        ConfigKind::List(_) => value
            .split(',')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(","),
        _ => value.to_string(),
    }
}

/// A topic's config overrides, checked ([`validate_topic_config`]) and written as Kafka
/// describes them ([`canonical`]).
pub fn checked_topic_configs(
    configs: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    configs
        .iter()
        .map(|(name, value)| {
            validate_topic_config(name, value)?;
            let kind = topic_config(name).map(|def| def.kind);
            let value = kind.map_or_else(|| value.clone(), |kind| canonical(kind, value));
            Ok((name.clone(), value))
        })
        .collect()
}

/// The definition of topic config `name`.
pub fn topic_config(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks a value against a definition.
pub fn check_value(def: &TopicConfigDef, value: &str) -> Result<(), String> {
    check_kind(def.name, def.kind, value)
}

/// Checks `value` of config `name` against `kind`; the refusal is worded as Kafka's.
pub fn check_kind(name: &str, kind: ConfigKind, value: &str) -> Result<(), String> {
    let invalid = |why: String| {
        Err(format!(
            "Invalid value {value} for configuration {name}: {why}"
        ))
    };
    let in_range = |v: i64, min: i64, max: i64| {
        if v < min {
            invalid(format!("Value must be at least {min}"))
        } else if v > max {
            invalid(format!("Value must be no more than {max}"))
        } else {
            Ok(())
        }
    };
    match kind {
        ConfigKind::Long { min, max } => match value.trim().parse::<i64>() {
            Ok(v) => in_range(v, min, max),
            Err(_) => invalid("Not a number of type LONG".into()),
        },
        ConfigKind::Int { min, max } => match value.trim().parse::<i32>() {
            Ok(v) => in_range(i64::from(v), min, max),
            Err(_) => invalid("Not a number of type INT".into()),
        },
        ConfigKind::Fraction => match value.trim().parse::<f64>() {
            Ok(v) if v < 0.0 => invalid("Value must be at least 0".into()),
            Ok(v) if v > 1.0 => invalid("Value must be no more than 1".into()),
            Ok(_) => Ok(()),
            Err(_) => invalid("Not a number of type DOUBLE".into()),
        },
        ConfigKind::Decimal => match value.trim().parse::<f64>() {
            Ok(v) if v.is_nan() || v < 0.0 => invalid("Value must be at least 0.0".into()),
            Ok(_) => Ok(()),
            Err(_) => invalid("Not a number of type DOUBLE".into()),
        },
        ConfigKind::Choice(["true", "false"]) => match parse_boolean(value) {
            Some(_) => Ok(()),
            None => invalid("Expected value to be either true or false".into()),
        },
        ConfigKind::Choice(options) if options.contains(&value) => Ok(()),
        ConfigKind::Choice(options) => {
            invalid(format!("String must be one of: {}", options.join(", ")))
        }
        ConfigKind::ReplicaList => {
            let pair = |item: &str| {
                item.split_once(':').is_some_and(|(p, b)| {
                    p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
                })
            };
            if value.trim().is_empty() || value.trim() == "*" || value.split(',').all(pair) {
                Ok(())
            } else {
                invalid(
                    "Value must be a comma-separated list of partition:broker pairs, or *".into(),
                )
            }
        }
        // An empty list is allowed, as in Kafka 4 (cleanup.policy: neither delete nor compact).
        ConfigKind::List(_) if value.trim().is_empty() => Ok(()),
        ConfigKind::List(options) => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            let mut seen = Vec::new();
            for item in &items {
                // Worded as Kafka's, which does not name the value.
                if item.is_empty() {
                    return Err(format!("Configuration '{name}' values must not be empty."));
                }
                if !options.contains(item) {
                    return invalid(format!("String must be one of: {}", options.join(", ")));
                }
                if seen.contains(item) {
                    return invalid(format!(
                        "Configuration '{name}' values must not be duplicated."
                    ));
                }
                seen.push(item);
            }
            Ok(())
        }
    }
}

/// The topic config whose broker-level key is `name`: these are the broker configs that
/// change at runtime (cluster-wide or per broker), as in Kafka.
pub fn dynamic_broker_config(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.broker_key() == Some(name))
}

/// Checks a topic-level config key and value.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), String> {
    match topic_config(name) {
        Some(def) => {
            check_value(def, value)?;
            if name == "remote.storage.enable" && parse_boolean(value) == Some(true) {
                return Err("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.".into());
            }
            Ok(())
        }
        None => Err(format!("Unknown topic config name: {name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_read_as_kafka_reads_them() {
        for (text, value) in [
            ("true", Some(true)),
            ("TRUE", Some(true)),
            (" True ", Some(true)),
            ("false", Some(false)),
            ("FaLsE\t", Some(false)),
            ("", None),
            ("yes", None),
            ("1", None),
            ("truee", None),
        ] {
            assert_eq!(parse_boolean(text), value, "{text:?}");
            let def = topic_config("unclean.leader.election.enable").expect("defined");
            assert_eq!(check_value(def, text).is_ok(), value.is_some(), "{text:?}");
        }
    }

    #[test]
    fn values_are_kept_as_kafka_describes_them() {
        let given = BTreeMap::from([
            (
                "unclean.leader.election.enable".to_string(),
                " TRUE".to_string(),
            ),
            ("retention.ms".to_string(), " 0007200000 ".to_string()),
            ("cleanup.policy".to_string(), "compact , delete".to_string()),
            ("min.cleanable.dirty.ratio".to_string(), "0.50".to_string()),
            ("compression.type".to_string(), "zstd".to_string()),
        ]);
        let kept = checked_topic_configs(&given).expect("valid");
        let value = |name: &str| kept[name].as_str();
        assert_eq!(value("unclean.leader.election.enable"), "true");
        assert_eq!(value("retention.ms"), "7200000");
        assert_eq!(value("cleanup.policy"), "compact,delete");
        assert_eq!(value("min.cleanable.dirty.ratio"), "0.50");
        assert_eq!(value("compression.type"), "zstd");
        let bad = BTreeMap::from([("retention.ms".to_string(), "soon".to_string())]);
        assert!(checked_topic_configs(&bad).is_err());
    }

    #[test]
    fn tiered_storage_is_refused_however_true_is_spelled() {
        for text in ["true", "TRUE", " True"] {
            assert!(validate_topic_config("remote.storage.enable", text).is_err());
        }
        assert!(validate_topic_config("remote.storage.enable", "FALSE").is_ok());
    }

    #[test]
    fn every_default_passes_its_own_check() {
        for def in TOPIC_CONFIGS {
            assert_eq!(check_value(def, def.default), Ok(()), "{}", def.name);
        }
    }
}
