//! Broker settings (Kafka's broker property names) and per-topic settings resolved from topic
//! overrides over broker defaults.

use std::collections::BTreeMap;

use weir_controller::topic_config::{
    check_value, topic_config, TopicConfigDef, FLUSH_POLICY_ALWAYS, FLUSH_POLICY_NEVER,
    TOPIC_CONFIGS,
};
use weir_log::LogConfig;

/// Where a config value came from, with Kafka's DescribeConfigs source codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// A topic-level override (`TOPIC_CONFIG`).
    Topic = 1,
    /// Set in the broker's file, environment or flags (`STATIC_BROKER_CONFIG`).
    StaticBroker = 4,
    /// The built-in default (`DEFAULT_CONFIG`).
    Default = 5,
}

/// One broker-level setting that is not a topic default.
struct BrokerSetting {
    name: &'static str,
    default: &'static str,
    kind: weir_controller::topic_config::ConfigKind,
    doc: &'static str,
}

const fn setting(
    name: &'static str,
    default: &'static str,
    min: i64,
    max: i64,
    doc: &'static str,
) -> BrokerSetting {
    BrokerSetting {
        name,
        default,
        kind: weir_controller::topic_config::ConfigKind::Long { min, max },
        doc,
    }
}

const BOOLEAN: weir_controller::topic_config::ConfigKind =
    weir_controller::topic_config::ConfigKind::Choice(&["true", "false"]);

/// Broker-only settings, with Kafka's names and defaults.
const BROKER_SETTINGS: &[BrokerSetting] = &[
    BrokerSetting {
        name: "auto.create.topics.enable",
        default: "true",
        kind: BOOLEAN,
        doc: "Create a topic when a Metadata request that allows it names an unknown one.",
    },
    setting(
        "num.partitions",
        "1",
        1,
        10_000,
        "Partitions of an auto-created topic or a CreateTopics with -1.",
    ),
    setting(
        "default.replication.factor",
        "1",
        1,
        1,
        "Replication factor when CreateTopics asks for -1.",
    ),
    setting(
        "socket.request.max.bytes",
        "104857600",
        1024,
        i32::MAX as i64,
        "Largest request frame accepted; larger ones close the connection.",
    ),
    setting(
        "log.retention.check.interval.ms",
        "300000",
        1,
        i64::MAX,
        "How often retention and segment age are checked.",
    ),
    setting(
        "producer.id.expiration.ms",
        "86400000",
        1,
        i64::MAX,
        "Idle time after which a partition forgets an idempotent producer.",
    ),
    setting(
        "log.flush.offset.checkpoint.interval.ms",
        "60000",
        1,
        i64::MAX,
        "How often recovery points are checkpointed (bounds recovery scans).",
    ),
];

/// A broker property that is unknown or has a bad value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Broker-level settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    values: BTreeMap<String, String>,
}

/// A config key, its value and where the value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    /// Kafka's name.
    pub name: String,
    /// Current value.
    pub value: String,
    /// Its source.
    pub source: ConfigSource,
    /// One-line explanation.
    pub doc: &'static str,
}

fn check_kind(
    name: &str,
    kind: weir_controller::topic_config::ConfigKind,
    value: &str,
) -> Result<(), ConfigError> {
    let def = TopicConfigDef {
        name: "",
        broker_name: "",
        default: "",
        kind,
        doc: "",
    };
    check_value(&def, value).map_err(|e| ConfigError(format!("{name}{e}")))
}

impl BrokerConfig {
    /// Builds the config from Kafka-named properties; unknown names and bad values are errors.
    pub fn from_properties(
        properties: &BTreeMap<String, String>,
    ) -> Result<BrokerConfig, ConfigError> {
        for (name, value) in properties {
            if let Some(def) = TOPIC_CONFIGS.iter().find(|d| d.broker_name == name) {
                check_kind(name, def.kind, value)?;
            } else if let Some(setting) = BROKER_SETTINGS.iter().find(|s| s.name == name) {
                check_kind(name, setting.kind, value)?;
            } else {
                return Err(ConfigError(format!("unknown broker setting {name:?}; see `weir server --help` for the supported ones")));
            }
        }
        Ok(BrokerConfig {
            values: properties.clone(),
        })
    }

    /// Every supported broker property name with its default and documentation.
    pub fn documented() -> Vec<(&'static str, &'static str, &'static str)> {
        let topic = TOPIC_CONFIGS
            .iter()
            .map(|d| (d.broker_name, d.default, d.doc));
        let broker = BROKER_SETTINGS.iter().map(|s| (s.name, s.default, s.doc));
        broker.chain(topic).collect()
    }

    fn raw(&self, name: &str) -> (&str, ConfigSource) {
        if let Some(value) = self.values.get(name) {
            return (value, ConfigSource::StaticBroker);
        }
        let default = BROKER_SETTINGS
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.default)
            .or_else(|| {
                TOPIC_CONFIGS
                    .iter()
                    .find(|d| d.broker_name == name)
                    .map(|d| d.default)
            })
            .unwrap_or("");
        (default, ConfigSource::Default)
    }

    fn long(&self, name: &str) -> i64 {
        // Values were validated in `from_properties` and defaults are well-formed constants.
        self.raw(name).0.parse().unwrap_or_default()
    }

    /// `auto.create.topics.enable`.
    pub fn auto_create_topics(&self) -> bool {
        self.raw("auto.create.topics.enable").0 == "true"
    }

    /// `num.partitions`.
    pub fn num_partitions(&self) -> i32 {
        self.long("num.partitions") as i32
    }

    /// `default.replication.factor`.
    pub fn default_replication_factor(&self) -> i16 {
        self.long("default.replication.factor") as i16
    }

    /// `socket.request.max.bytes`.
    pub fn socket_request_max_bytes(&self) -> u32 {
        self.long("socket.request.max.bytes") as u32
    }

    /// `log.retention.check.interval.ms`.
    pub fn retention_check_interval_ms(&self) -> u64 {
        self.long("log.retention.check.interval.ms") as u64
    }

    /// `producer.id.expiration.ms`.
    pub fn producer_id_expiration_ms(&self) -> i64 {
        self.long("producer.id.expiration.ms")
    }

    /// `log.flush.offset.checkpoint.interval.ms`.
    pub fn checkpoint_interval_ms(&self) -> u64 {
        self.long("log.flush.offset.checkpoint.interval.ms") as u64
    }

    /// Every broker property with value and source, for DescribeConfigs on the broker resource.
    pub fn describe(&self) -> Vec<DescribedConfig> {
        Self::documented()
            .into_iter()
            .map(|(name, _, doc)| {
                let (value, source) = self.raw(name);
                DescribedConfig {
                    name: name.to_string(),
                    value: value.to_string(),
                    source,
                    doc,
                }
            })
            .collect()
    }

    /// Every topic config for a topic with `overrides`, with value and source.
    pub fn describe_topic(&self, overrides: &BTreeMap<String, String>) -> Vec<DescribedConfig> {
        TOPIC_CONFIGS
            .iter()
            .map(|def| {
                let (value, source) = match overrides.get(def.name) {
                    Some(v) => (v.as_str(), ConfigSource::Topic),
                    None => self.raw(def.broker_name),
                };
                DescribedConfig {
                    name: def.name.to_string(),
                    value: value.to_string(),
                    source,
                    doc: def.doc,
                }
            })
            .collect()
    }

    /// The effective settings of a topic with `overrides`.
    pub fn topic_settings(&self, overrides: &BTreeMap<String, String>) -> TopicSettings {
        let value = |name: &str| -> String {
            match overrides.get(name) {
                Some(v) => v.clone(),
                None => topic_config(name)
                    .map_or_else(String::new, |d| self.raw(d.broker_name).0.to_string()),
            }
        };
        let long = |name: &str| value(name).parse::<i64>().unwrap_or_default();
        let flush_policy = match value("flush.policy").as_str() {
            FLUSH_POLICY_ALWAYS => FlushPolicy::Always,
            FLUSH_POLICY_NEVER => FlushPolicy::Never,
            _ => FlushPolicy::AcksAll,
        };
        TopicSettings {
            log: LogConfig {
                segment_bytes: long("segment.bytes").clamp(1024, i32::MAX as i64) as u64,
                segment_ms: long("segment.ms"),
                retention_ms: long("retention.ms"),
                retention_bytes: long("retention.bytes"),
                max_message_bytes: long("max.message.bytes").max(0) as u64,
                index_interval_bytes: long("index.interval.bytes").max(0) as u64,
            },
            flush_policy,
            min_insync_replicas: long("min.insync.replicas") as i32,
        }
    }
}

/// When the broker fsyncs before acknowledging a write (topic config `flush.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// `acks=all` writes are fsynced (group commit) before the answer; `acks=1` are not.
    AcksAll,
    /// Every acknowledged write is fsynced first.
    Always,
    /// No fsync before answering; the OS writes back (Kafka's behaviour).
    Never,
}

impl FlushPolicy {
    /// True when a write with these `acks` must be durable before it is answered.
    pub fn sync_before_ack(self, acks: i16) -> bool {
        match self {
            FlushPolicy::Always => acks != 0,
            FlushPolicy::AcksAll => acks == -1,
            FlushPolicy::Never => false,
        }
    }
}

/// The effective settings of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicSettings {
    /// Log settings.
    pub log: LogConfig,
    /// fsync policy.
    pub flush_policy: FlushPolicy,
    /// `min.insync.replicas`.
    pub min_insync_replicas: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_then_broker_then_default() {
        let broker = BrokerConfig::from_properties(&BTreeMap::from([(
            "log.retention.ms".into(),
            "5000".into(),
        )]))
        .expect("valid");
        let described =
            broker.describe_topic(&BTreeMap::from([("segment.bytes".into(), "4096".into())]));
        let find = |name: &str| {
            described
                .iter()
                .find(|d| d.name == name)
                .cloned()
                .expect("listed")
        };
        assert_eq!(
            (
                find("retention.ms").value.as_str(),
                find("retention.ms").source
            ),
            ("5000", ConfigSource::StaticBroker)
        );
        assert_eq!(
            (
                find("segment.bytes").value.as_str(),
                find("segment.bytes").source
            ),
            ("4096", ConfigSource::Topic)
        );
        assert_eq!(find("retention.bytes").source, ConfigSource::Default);
        let settings =
            broker.topic_settings(&BTreeMap::from([("flush.policy".into(), "never".into())]));
        assert_eq!(settings.log.retention_ms, 5000);
        assert_eq!(settings.flush_policy, FlushPolicy::Never);
    }

    #[test]
    fn bad_properties_are_refused() {
        for (k, v) in [
            ("no.such.thing", "1"),
            ("num.partitions", "zero"),
            ("log.flush.policy", "sometimes"),
            ("default.replication.factor", "3"),
        ] {
            assert!(
                BrokerConfig::from_properties(&BTreeMap::from([(k.to_string(), v.to_string())]))
                    .is_err(),
                "{k}={v}"
            );
        }
    }
}
