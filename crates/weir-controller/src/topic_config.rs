//! The topic configs Weir enforces, with Kafka's names, defaults and the broker-level key that
//! overrides each default. A key not listed here is refused with INVALID_CONFIG rather than
//! stored and silently ignored.

/// What values a config accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    /// A signed 64-bit integer within `[min, max]`.
    Long {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// One of a fixed set of words.
    Choice(&'static [&'static str]),
    /// A decimal number in `[0, 1]` (`min.cleanable.dirty.ratio`).
    Fraction,
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

const fn long(min: i64, max: i64) -> ConfigKind {
    ConfigKind::Long { min, max }
}

/// `flush.policy` value: fsync before answering an `acks=all` write (group commit).
pub const FLUSH_POLICY_ACKS_ALL: &str = "acks-all";
/// `flush.policy` value: fsync before every acknowledgement, `acks=1` included.
pub const FLUSH_POLICY_ALWAYS: &str = "always";
/// `flush.policy` value: never fsync before acknowledging (Kafka's behaviour).
pub const FLUSH_POLICY_NEVER: &str = "never";

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
    TopicConfigDef { name: "segment.bytes", broker_name: "log.segment.bytes", default: "1073741824", kind: long(SEGMENT_BYTES_MIN, i32::MAX as i64), doc: "Roll to a new segment file at this size (at least 1 MiB, as in Kafka 4)." },
    TopicConfigDef { name: "segment.ms", broker_name: "log.roll.ms", default: "604800000", kind: long(1, i64::MAX), doc: "Roll to a new segment file at this age." },
    TopicConfigDef { name: "max.message.bytes", broker_name: "message.max.bytes", default: "1048588", kind: long(0, i32::MAX as i64), doc: "Largest record batch accepted." },
    TopicConfigDef { name: "index.interval.bytes", broker_name: "log.index.interval.bytes", default: "4096", kind: long(0, i32::MAX as i64), doc: "Bytes between offset index entries." },
    TopicConfigDef { name: "cleanup.policy", broker_name: "log.cleanup.policy", default: "delete", kind: ConfigKind::Choice(&[CLEANUP_DELETE, CLEANUP_COMPACT, "compact,delete", "delete,compact"]), doc: "delete: retention deletes old segments; compact: the cleaner keeps the latest record per key (records need keys); both: both." },
    TopicConfigDef { name: "min.cleanable.dirty.ratio", broker_name: "log.cleaner.min.cleanable.ratio", default: "0.5", kind: ConfigKind::Fraction, doc: "Compacted topics: clean once this share of the inactive segments has not been cleaned yet." },
    TopicConfigDef { name: "min.compaction.lag.ms", broker_name: "log.cleaner.min.compaction.lag.ms", default: "0", kind: long(0, i64::MAX), doc: "Compacted topics: a record stays uncompacted at least this long." },
    TopicConfigDef { name: "max.compaction.lag.ms", broker_name: "log.cleaner.max.compaction.lag.ms", default: "9223372036854775807", kind: long(1, i64::MAX), doc: "Compacted topics: a record is compacted within this long of its segment's newest record, whatever the dirty ratio." },
    TopicConfigDef { name: "delete.retention.ms", broker_name: "log.cleaner.delete.retention.ms", default: "86400000", kind: long(0, i64::MAX), doc: "Compacted topics: tombstones stay readable this long after their segment's newest record." },
    TopicConfigDef { name: "compression.type", broker_name: "compression.type", default: "producer", kind: ConfigKind::Choice(&["producer"]), doc: "Batches are stored as the producer compressed them." },
    TopicConfigDef { name: "message.timestamp.type", broker_name: "log.message.timestamp.type", default: "CreateTime", kind: ConfigKind::Choice(&["CreateTime"]), doc: "Record timestamps are the producer's." },
    TopicConfigDef { name: "message.timestamp.before.max.ms", broker_name: "log.message.timestamp.before.max.ms", default: "9223372036854775807", kind: long(0, i64::MAX), doc: "A record timestamp further in the past than this is refused with INVALID_TIMESTAMP." },
    TopicConfigDef { name: "message.timestamp.after.max.ms", broker_name: "log.message.timestamp.after.max.ms", default: "3600000", kind: long(0, i64::MAX), doc: "A record timestamp further in the future than this is refused with INVALID_TIMESTAMP." },
    TopicConfigDef { name: "min.insync.replicas", broker_name: "min.insync.replicas", default: "1", kind: long(1, i32::MAX as i64), doc: "acks=all writes are refused with NOT_ENOUGH_REPLICAS when fewer replicas are in sync." },
    TopicConfigDef { name: "flush.policy", broker_name: "log.flush.policy", default: FLUSH_POLICY_ACKS_ALL, kind: ConfigKind::Choice(&[FLUSH_POLICY_ACKS_ALL, FLUSH_POLICY_ALWAYS, FLUSH_POLICY_NEVER]), doc: "acks-all: fsync (group commit) before answering acks=all; always: before every answer; never: leave it to the OS, as Kafka does." },
];

/// The definition of topic config `name`.
pub fn topic_config(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks a value against a definition.
pub fn check_value(def: &TopicConfigDef, value: &str) -> Result<(), String> {
    match def.kind {
        ConfigKind::Long { min, max } => match value.trim().parse::<i64>() {
            Ok(v) if (min..=max).contains(&v) => Ok(()),
            Ok(v) => Err(format!("{} = {v} is outside [{min}, {max}]", def.name)),
            Err(_) => Err(format!("{} must be an integer, got {value:?}", def.name)),
        },
        ConfigKind::Fraction => match value.trim().parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(()),
            _ => Err(format!(
                "{} must be a number in [0, 1], got {value:?}",
                def.name
            )),
        },
        ConfigKind::Choice(options) if options.contains(&value) => Ok(()),
        ConfigKind::Choice(options) => Err(format!(
            "{} must be one of {options:?}, got {value:?}",
            def.name
        )),
    }
}

/// Checks a topic-level config key and value.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), String> {
    match topic_config(name) {
        Some(def) => check_value(def, value),
        None => Err(format!("{name} is not a topic config Weir supports")),
    }
}
