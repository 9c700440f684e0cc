//! Broker settings (Kafka's broker property names), parsed once at startup into typed fields,
//! and per-topic settings resolved from topic overrides over broker defaults.

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_coordinator::share_partition::ShareSettings;
use weir_coordinator::transaction::TransactionSettings;
use weir_coordinator::{
    ConsumerGroupSettings, CoordinatorSettings, GroupLimits, MetadataBounds, ShareGroupSettings,
};
use weir_log::cleaner::KEY_MAP_BYTES_PER_ENTRY;
use weir_log::compress::Levels;
use weir_log::{CompactionConfig, LogConfig};
use weir_metadata::authorizer::AuthorizerSettings;
use weir_metadata::broker_config::{
    broker_setting, parse_host_counts, SettingKind, BROKER_SETTINGS,
};
use weir_metadata::topic_config::{
    compression_codec, dynamic_broker_config, parse_boolean, topic_config, ConfigKind,
    TopicConfigDef, CLEANUP_COMPACT, CLEANUP_DELETE, FLUSH_POLICY_ALWAYS, FLUSH_POLICY_NEVER,
    TIMESTAMP_LOG_APPEND_TIME, TOPIC_CONFIGS,
};
use weir_metadata::MetadataImage;

use crate::listeners::{is_per_listener_setting, Listeners};
use crate::rate_limit::LineLimit;

/// Where a config value came from, with Kafka's DescribeConfigs source codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// A topic-level override (`TOPIC_CONFIG`).
    Topic = 1,
    /// Set at runtime for this broker (`DYNAMIC_BROKER_CONFIG`).
    DynamicBroker = 2,
    /// Set at runtime for every broker (`DYNAMIC_DEFAULT_BROKER_CONFIG`).
    DynamicDefault = 3,
    /// Set in the broker's file, environment or flags (`STATIC_BROKER_CONFIG`).
    StaticBroker = 4,
    /// The built-in default (`DEFAULT_CONFIG`).
    Default = 5,
}

/// The log cleaner's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerSettings {
    /// `log.cleaner.enable`.
    pub enabled: bool,
    /// `log.cleaner.threads`.
    pub threads: usize,
    /// Distinct keys one cleaning may map (`log.cleaner.dedupe.buffer.size` per thread).
    pub key_map_entries: usize,
    /// `log.cleaner.io.max.bytes.per.second`, over all threads.
    pub io_bytes_per_second: u64,
    /// `log.cleaner.backoff.ms`.
    pub backoff_ms: u64,
}

impl CleanerSettings {
    /// The settings from a lookup of each `log.cleaner.*` value (already validated).
    fn from_values<'a>(value: impl Fn(&str) -> &'a str) -> CleanerSettings {
        let long = |name: &str| read::<i64>(name, value(name));
        let threads = long("log.cleaner.threads").max(1) as usize;
        let rate = "log.cleaner.io.max.bytes.per.second";
        CleanerSettings {
            enabled: read_boolean("log.cleaner.enable", value("log.cleaner.enable")),
            threads,
            key_map_entries: (long("log.cleaner.dedupe.buffer.size") as usize
                / threads
                / KEY_MAP_BYTES_PER_ENTRY)
                .max(1),
            // A rate as Kafka gives it, a decimal; above u64::MAX it is no limit.
            io_bytes_per_second: read::<f64>(rate, value(rate)) as u64,
            backoff_ms: long("log.cleaner.backoff.ms") as u64,
        }
    }
}

/// The broker-wide settings that change at runtime (dynamic broker configs), resolved from
/// every level at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// The log cleaner's (`log.cleaner.*`).
    pub cleaner: CleanerSettings,
    /// The connection limits.
    pub connections: ConnectionSettings,
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i64,
}

/// The connection limits that change at runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `max.connections`.
    pub max_connections: u32,
    /// `max.connections.per.ip`.
    pub max_connections_per_ip: u32,
    /// `max.connections.per.ip.overrides`, as given: (host, count).
    pub per_ip_overrides: Vec<(String, u32)>,
}

/// The built-in default of config `name`: a topic config (by its topic or broker name) or a
/// broker setting. Names are the constants of the tables, so an unknown one is a bug.
fn default_of(name: &str) -> &'static str {
    topic_config(name)
        .or_else(|| dynamic_broker_config(name))
        .map(|def| def.default)
        .or_else(|| broker_setting(name).map(|s| s.default))
        .unwrap_or_else(|| panic!("{name} is not a config"))
}

/// Lines about stored config values that do not read (each topic's settings are resolved
/// again when a dynamic level changes, so one bad value could repeat for every topic).
static UNREADABLE_WARNINGS: LineLimit = LineLimit::new();

/// Logs a stored value that does not read, and that its default stands in for.
fn unreadable(name: &str, text: &str) -> &'static str {
    let default = default_of(name);
    if let Some(suppressed) = UNREADABLE_WARNINGS.admit() {
        tracing::warn!(target: "weir::config", name, value = text, default, suppressed, "a config value set earlier does not read as its type; using the default");
    }
    default
}

/// Reads `text`, the value of config `name`, which was checked when it was set (at startup or
/// by the controller), once, where it is resolved. One that still does not read (a metadata
/// log written by a version that checked otherwise) is the config's default, with a warning,
/// rather than a broker that stops.
fn read<T: std::str::FromStr>(name: &str, text: &str) -> T {
    text.trim().parse().unwrap_or_else(|_| {
        let default = unreadable(name, text);
        default
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the default of {name}, {default:?}, reads"))
    })
}

/// Reads boolean `text` of config `name` as Kafka does ([`parse_boolean`]), as [`read`] reads
/// the others.
fn read_boolean(name: &str, text: &str) -> bool {
    parse_boolean(text).unwrap_or_else(|| parse_boolean(unreadable(name, text)) == Some(true))
}

pub use crate::config_error::ConfigError;

/// Broker-level settings, parsed and checked once.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The properties as given (file, environment, flags), for DescribeConfigs.
    given: BTreeMap<String, String>,
    /// The listeners (`listeners`, `advertised.listeners`, and the settings around them).
    pub listeners: Listeners,
    /// `auto.create.topics.enable`.
    pub auto_create_topics_enable: bool,
    /// `transaction.version`: the transaction protocol version reported as finalized.
    pub transaction_version: i16,
    /// `transaction.partition.verification.enable`: transactional writes are verified with
    /// their transaction coordinator.
    pub transaction_partition_verification_enable: bool,
    /// `num.partitions`.
    pub num_partitions: i32,
    /// `default.replication.factor`.
    pub default_replication_factor: i16,
    /// `socket.request.max.bytes`.
    pub socket_request_max_bytes: u32,
    /// `queued.max.request.bytes`.
    pub queued_max_request_bytes: u64,
    /// `connections.max.idle.ms`.
    pub connections_max_idle_ms: u64,
    /// `authorizer.class.name`, `super.users` and `allow.everyone.if.no.acl.found`.
    pub authorizer: Arc<AuthorizerSettings>,
    /// `sasl.server.max.receive.size`: the largest frame read on a SASL listener before the
    /// client authenticates.
    pub sasl_max_receive_bytes: u32,
    /// `connection.failed.authentication.delay.ms`: how long a failed SASL login waits for its
    /// answer.
    pub failed_authentication_delay_ms: u64,
    /// `max.connections` as started with (lowered to what the open-file limit allows): the
    /// most connections this process holds, whatever a runtime change asks.
    pub max_connections: u32,
    /// `socket.listen.backlog.size`: the listen backlog of the Kafka and HTTP listeners.
    pub socket_listen_backlog_size: u32,
    /// `log.retention.check.interval.ms`.
    pub retention_check_interval_ms: u64,
    /// `broker.session.timeout.ms`: the lease a controller grants a broker.
    pub broker_session_timeout_ms: u64,
    /// `broker.heartbeat.interval.ms`.
    pub broker_heartbeat_interval_ms: u64,
    /// `replica.lag.time.max.ms`: how long a follower may stay behind and in sync.
    pub replica_lag_time_max_ms: u64,
    /// `broker.rack`, when set: where this broker is, for rack-aware placement.
    pub broker_rack: Option<String>,
    /// `auto.leader.rebalance.enable`: the controller moves leaders back to preferred replicas.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_seconds: u64,
    /// `max.incremental.fetch.session.cache.slots`.
    pub fetch_session_cache_slots: usize,
    /// Share-partitions' settings (`group.share.record.lock.duration.ms`,
    /// `group.share.delivery.count.limit`, `group.share.partition.max.record.locks`).
    pub share_partitions: ShareSettings,
    /// `group.share.max.share.sessions`.
    pub share_sessions_max: usize,
    /// `log.flush.offset.checkpoint.interval.ms`.
    pub checkpoint_interval_ms: u64,
    /// `__consumer_offsets` as `offsets.topic.*` create it.
    pub(crate) offsets_topic: InternalTopicSpec,
    /// `__transaction_state` as `transaction.state.log.*` create it.
    pub(crate) transaction_topic: InternalTopicSpec,
    /// `__share_group_state` as `share.coordinator.state.topic.*` create it.
    pub(crate) share_state_topic: InternalTopicSpec,
    /// The transaction coordinator's limits (`transaction.max.timeout.ms`).
    pub transactions: TransactionSettings,
    /// The group coordinator's limits (`group.*`, `offset.metadata.max.bytes`).
    pub coordinator: CoordinatorSettings,
    /// Topic settings with no topic override: the broker-level names, else Kafka's defaults.
    topic_defaults: TopicSettings,
}

/// How an internal topic is created.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InternalTopicSpec {
    /// Partitions (`offsets.topic.num.partitions`, `transaction.state.log.num.partitions`,
    /// `share.coordinator.state.topic.num.partitions`).
    pub(crate) partitions: i32,
    /// Replicas, at most the live brokers when it is created.
    pub(crate) replication_factor: i16,
    /// Its `segment.bytes`.
    pub(crate) segment_bytes: i64,
    /// Its `min.insync.replicas`, at most its replicas; `None`: the broker's default.
    pub(crate) min_insync_replicas: Option<i16>,
}

/// A config key, its value and where the value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    /// Kafka's name.
    pub name: String,
    /// Current value; `None` for a broker key with no default of its own that is not set
    /// (`log.retention.ms`, which falls back to `log.retention.hours`).
    pub value: Option<String>,
    /// Its source.
    pub source: ConfigSource,
    /// One-line explanation.
    pub doc: &'static str,
    /// Where else the value could come from, most specific first, each with the value it has
    /// there (DescribeConfigs `include_synonyms`).
    pub synonyms: Vec<(String, String, ConfigSource)>,
    /// True when it cannot change at runtime (a static broker setting).
    pub read_only: bool,
    /// Kafka's config type code.
    pub config_type: i8,
}

/// An empty level of dynamic configs.
static NO_CONFIGS: BTreeMap<String, String> = BTreeMap::new();

/// The dynamic broker configs one broker sees (Kafka's broker names): its own, then the
/// cluster-wide defaults, both from the metadata image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynamicConfigs<'a> {
    /// Set for this broker (`DYNAMIC_BROKER_CONFIG`).
    pub node: &'a BTreeMap<String, String>,
    /// Set for every broker (`DYNAMIC_DEFAULT_BROKER_CONFIG`).
    pub cluster: &'a BTreeMap<String, String>,
}

impl<'a> DynamicConfigs<'a> {
    /// What broker `node_id` sees in `image`.
    pub fn of(image: &'a MetadataImage, node_id: i32) -> DynamicConfigs<'a> {
        DynamicConfigs {
            node: image.broker_configs(Some(node_id)),
            cluster: image.broker_configs(None),
        }
    }

    /// What a broker with no configs of its own sees in `image`: the cluster-wide ones.
    pub fn cluster(image: &'a MetadataImage) -> DynamicConfigs<'a> {
        DynamicConfigs {
            node: &NO_CONFIGS,
            cluster: image.broker_configs(None),
        }
    }

    /// No dynamic configs at all (a broker's static settings only).
    pub fn none() -> DynamicConfigs<'static> {
        DynamicConfigs {
            node: &NO_CONFIGS,
            cluster: &NO_CONFIGS,
        }
    }

    fn is_empty(&self) -> bool {
        self.node.is_empty() && self.cluster.is_empty()
    }
}

fn check_kind(name: &str, kind: ConfigKind, value: &str) -> Result<(), ConfigError> {
    weir_metadata::topic_config::check_kind(name, kind, value).map_err(ConfigError)
}

/// The value of broker property `name`: as given, else its default. Names are the constants
/// of the tables above, so a lookup of an unknown name is a bug.
fn value_of<'a>(given: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    if let Some(value) = given.get(name) {
        return value;
    }
    BROKER_SETTINGS
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.default)
        .or_else(|| dynamic_broker_config(name).map(|d| d.default))
        .unwrap_or_else(|| panic!("{name} is not a broker setting"))
}

fn long_of(given: &BTreeMap<String, String>, name: &str) -> i64 {
    read(name, value_of(given, name))
}

impl BrokerConfig {
    /// Builds the config from Kafka-named properties; unknown names and bad values are errors.
    pub fn from_properties(
        properties: &BTreeMap<String, String>,
    ) -> Result<BrokerConfig, ConfigError> {
        for (name, value) in properties {
            if let Some(def) = dynamic_broker_config(name) {
                check_kind(name, def.kind, value)?;
            } else if let Some(setting) = broker_setting(name) {
                setting.check(value).map_err(ConfigError)?;
            } else if !is_per_listener_setting(name) {
                return Err(ConfigError(format!("unknown broker setting {name:?}; see `weir server --help` for the supported ones")));
            }
        }
        let long = |name: &str| long_of(properties, name);
        let boolean = |name: &str| read_boolean(name, value_of(properties, name));
        let metadata_bounds = MetadataBounds {
            member_max_bytes: long("group.member.metadata.max.bytes") as usize,
            group_max_bytes: long("group.metadata.max.bytes") as usize,
            coordinator_max_bytes: long("group.coordinator.metadata.max.bytes") as usize,
        };
        let listeners = Listeners::resolve(&|name| {
            properties
                .get(name)
                .cloned()
                .or_else(|| broker_setting(name).map(|s| s.default.to_string()))
        })?;
        let config = BrokerConfig {
            given: properties.clone(),
            listeners,
            auto_create_topics_enable: boolean("auto.create.topics.enable"),
            transaction_version: long("transaction.version") as i16,
            transaction_partition_verification_enable: boolean(
                "transaction.partition.verification.enable",
            ),
            num_partitions: long("num.partitions") as i32,
            default_replication_factor: long("default.replication.factor") as i16,
            socket_request_max_bytes: long("socket.request.max.bytes") as u32,
            queued_max_request_bytes: long("queued.max.request.bytes") as u64,
            connections_max_idle_ms: long("connections.max.idle.ms") as u64,
            authorizer: Arc::new(
                AuthorizerSettings::resolve(
                    value_of(properties, "authorizer.class.name"),
                    value_of(properties, "super.users"),
                    boolean("allow.everyone.if.no.acl.found"),
                )
                .map_err(ConfigError)?,
            ),
            sasl_max_receive_bytes: long("sasl.server.max.receive.size") as u32,
            failed_authentication_delay_ms: long("connection.failed.authentication.delay.ms")
                as u64,
            max_connections: long("max.connections") as u32,
            socket_listen_backlog_size: long("socket.listen.backlog.size") as u32,
            retention_check_interval_ms: long("log.retention.check.interval.ms") as u64,
            broker_session_timeout_ms: long("broker.session.timeout.ms") as u64,
            broker_heartbeat_interval_ms: long("broker.heartbeat.interval.ms") as u64,
            replica_lag_time_max_ms: long("replica.lag.time.max.ms") as u64,
            broker_rack: Some(value_of(properties, "broker.rack").trim().to_string())
                .filter(|rack| !rack.is_empty()),
            auto_leader_rebalance_enable: boolean("auto.leader.rebalance.enable"),
            leader_imbalance_check_interval_seconds: long("leader.imbalance.check.interval.seconds")
                as u64,
            fetch_session_cache_slots: long("max.incremental.fetch.session.cache.slots") as usize,
            share_partitions: ShareSettings {
                record_lock_duration: std::time::Duration::from_millis(long(
                    "group.share.record.lock.duration.ms",
                ) as u64),
                delivery_count_limit: long("group.share.delivery.count.limit") as u16,
                max_record_locks: long("group.share.partition.max.record.locks") as u32,
            },
            share_sessions_max: long("group.share.max.share.sessions") as usize,
            checkpoint_interval_ms: long("log.flush.offset.checkpoint.interval.ms") as u64,
            offsets_topic: InternalTopicSpec {
                partitions: long("offsets.topic.num.partitions") as i32,
                replication_factor: long("offsets.topic.replication.factor") as i16,
                segment_bytes: long("offsets.topic.segment.bytes"),
                min_insync_replicas: None,
            },
            transaction_topic: InternalTopicSpec {
                partitions: long("transaction.state.log.num.partitions") as i32,
                replication_factor: long("transaction.state.log.replication.factor") as i16,
                segment_bytes: long("transaction.state.log.segment.bytes"),
                min_insync_replicas: Some(long("transaction.state.log.min.isr") as i16),
            },
            share_state_topic: InternalTopicSpec {
                partitions: long("share.coordinator.state.topic.num.partitions") as i32,
                replication_factor: long("share.coordinator.state.topic.replication.factor") as i16,
                segment_bytes: long("share.coordinator.state.topic.segment.bytes"),
                min_insync_replicas: Some(long("share.coordinator.state.topic.min.isr") as i16),
            },
            transactions: TransactionSettings {
                max_timeout_ms: long("transaction.max.timeout.ms") as i32,
                abort_check_interval_ms: long(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                ) as u64,
                id_expiration_ms: long("transactional.id.expiration.ms"),
                id_expiration_check_interval_ms: long(
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                ) as u64,
            },
            coordinator: CoordinatorSettings {
                limits: GroupLimits {
                    session_timeout_min_ms: long("group.min.session.timeout.ms") as i32,
                    session_timeout_max_ms: long("group.max.session.timeout.ms") as i32,
                    initial_rebalance_delay_ms: long("group.initial.rebalance.delay.ms") as i32,
                    max_size: long("group.max.size") as usize,
                    metadata: metadata_bounds,
                },
                offset_metadata_max_bytes: long("offset.metadata.max.bytes") as usize,
                offsets_retention_ms: long("offsets.retention.minutes").saturating_mul(60_000),
                offsets_retention_check_interval_ms: long("offsets.retention.check.interval.ms")
                    as u64,
                consumer: ConsumerGroupSettings {
                    session_timeout_ms: long("group.consumer.session.timeout.ms") as i32,
                    heartbeat_interval_ms: long("group.consumer.heartbeat.interval.ms") as i32,
                    max_size: long("group.consumer.max.size") as usize,
                    assignment_interval_ms: long("group.consumer.assignment.interval.ms") as i32,
                    metadata: metadata_bounds,
                },
                share: ShareGroupSettings {
                    session_timeout_ms: long("group.share.session.timeout.ms") as i32,
                    heartbeat_interval_ms: long("group.share.heartbeat.interval.ms") as i32,
                    max_size: long("group.share.max.size") as usize,
                },
            },
            topic_defaults: TopicSettings::resolve(
                |name| {
                    topic_config(name).map_or("", |def| match def.broker_key() {
                        Some(key) => value_of(properties, key),
                        None => def.default,
                    })
                },
                long("producer.id.max.per.partition") as usize,
            ),
        };
        if config.queued_max_request_bytes < u64::from(config.socket_request_max_bytes) {
            return Err(ConfigError(format!(
                "queued.max.request.bytes ({}) must be at least socket.request.max.bytes ({}), or the largest request could never be read",
                config.queued_max_request_bytes, config.socket_request_max_bytes
            )));
        }
        if config.broker_heartbeat_interval_ms >= config.broker_session_timeout_ms {
            return Err(ConfigError(format!(
                "broker.heartbeat.interval.ms ({}) must be less than broker.session.timeout.ms ({}), or every broker would be fenced between heartbeats",
                config.broker_heartbeat_interval_ms, config.broker_session_timeout_ms
            )));
        }
        let consumer = config.coordinator.consumer;
        if consumer.heartbeat_interval_ms >= consumer.session_timeout_ms {
            return Err(ConfigError(format!(
                "group.consumer.heartbeat.interval.ms ({}) must be less than group.consumer.session.timeout.ms ({}), or every member's session would expire between heartbeats",
                consumer.heartbeat_interval_ms, consumer.session_timeout_ms
            )));
        }
        let share = config.coordinator.share;
        if share.heartbeat_interval_ms >= share.session_timeout_ms {
            return Err(ConfigError(format!(
                "group.share.heartbeat.interval.ms ({}) must be less than group.share.session.timeout.ms ({}), or every member's session would expire between heartbeats",
                share.heartbeat_interval_ms, share.session_timeout_ms
            )));
        }
        Ok(config)
    }

    /// Every supported broker property name with its default and documentation.
    pub fn documented() -> Vec<(&'static str, &'static str, &'static str)> {
        let topic = TOPIC_CONFIGS
            .iter()
            .filter_map(|d| Some((d.broker_key()?, d.default, d.doc)));
        let broker = BROKER_SETTINGS.iter().map(|s| (s.name, s.default, s.doc));
        broker.chain(topic).collect()
    }

    /// The levels at which broker key `key` is set, most specific first: this broker's dynamic
    /// config, the cluster-wide one, the static one.
    fn levels<'a>(
        &'a self,
        dynamic: DynamicConfigs<'a>,
        key: &str,
    ) -> Vec<(&'a str, ConfigSource)> {
        [
            (dynamic.node.get(key), ConfigSource::DynamicBroker),
            (dynamic.cluster.get(key), ConfigSource::DynamicDefault),
            (self.given.get(key), ConfigSource::StaticBroker),
        ]
        .into_iter()
        .filter_map(|(value, source)| Some((value?.as_str(), source)))
        .collect()
    }

    /// The effective value of broker key `key` of topic config `def`: the most specific level
    /// that sets it, else the default.
    fn broker_value<'a>(&'a self, dynamic: DynamicConfigs<'a>, def: &TopicConfigDef) -> &'a str {
        let set = def.broker_key().and_then(|key| {
            [dynamic.node, dynamic.cluster, &self.given]
                .into_iter()
                .find_map(|level| level.get(key))
        });
        set.map_or(def.default, String::as_str)
    }

    /// The value of broker setting `name` under `dynamic`: the most specific level that sets
    /// it, else its default.
    fn setting<'a>(&'a self, dynamic: DynamicConfigs<'a>, name: &str) -> &'a str {
        self.levels(dynamic, name)
            .first()
            .map_or_else(|| value_of(&self.given, name), |(value, _)| value)
    }

    /// `unclean.leader.election.enable` as this process was started with (its static level),
    /// which the controller reads below the dynamic levels, as Kafka's does.
    pub fn static_unclean_leader_election_enable(&self) -> bool {
        let name = "unclean.leader.election.enable";
        read_boolean(name, value_of(&self.given, name))
    }

    /// The broker-wide settings that change at runtime, resolved under `dynamic` (once per
    /// change of a level: the broker holds the view in force).
    pub fn runtime_settings(&self, dynamic: DynamicConfigs<'_>) -> RuntimeSettings {
        let value = |name: &str| self.setting(dynamic, name);
        let long = |name: &str| read::<i64>(name, value(name));
        let overrides = "max.connections.per.ip.overrides";
        RuntimeSettings {
            cleaner: CleanerSettings::from_values(value),
            connections: ConnectionSettings {
                max_connections: long("max.connections") as u32,
                max_connections_per_ip: long("max.connections.per.ip") as u32,
                // A bad list cannot be stored (the controller checks it): read as none.
                per_ip_overrides: parse_host_counts(overrides, value(overrides))
                    .unwrap_or_default(),
            },
            producer_id_expiration_ms: long("producer.id.expiration.ms"),
        }
    }

    /// The synonyms Kafka lists for topic config `def`'s broker key: each level that sets it,
    /// then the default (for a key that falls back to a coarser one, that key's default, and
    /// only when some level sets the key).
    fn broker_synonyms(
        &self,
        dynamic: DynamicConfigs<'_>,
        def: &TopicConfigDef,
    ) -> Vec<(String, String, ConfigSource)> {
        let Some(key) = def.broker_key() else {
            return Vec::new();
        };
        let levels = self.levels(dynamic, key);
        let default = match def.broker_fallback() {
            Some(_) if levels.is_empty() => None,
            Some((fallback, value)) => Some((fallback, value)),
            None => Some((key, def.default)),
        };
        let set = levels
            .into_iter()
            .map(|(value, source)| (key.to_string(), value.to_string(), source));
        set.chain(
            default
                .map(|(name, value)| (name.to_string(), value.to_string(), ConfigSource::Default)),
        )
        .collect()
    }

    /// Every config of this broker, for DescribeConfigs on its broker resource: the static
    /// settings (read-only) and the broker keys of topic configs (changeable at runtime).
    pub fn describe(&self, dynamic: DynamicConfigs<'_>) -> Vec<DescribedConfig> {
        let fixed = BROKER_SETTINGS.iter().map(|s| {
            let levels = self.levels(dynamic, s.name);
            let (value, source) = levels
                .first()
                .copied()
                .unwrap_or((s.default, ConfigSource::Default));
            let set = levels
                .iter()
                .map(|(value, source)| (s.name.to_string(), value.to_string(), *source));
            // A free-text setting without a default (`broker.rack`) is null when unset, with
            // no default among its synonyms, as Kafka describes it.
            let null_default = matches!(s.kind, SettingKind::Text) && s.default.is_empty();
            let default = (!null_default).then(|| {
                let default = s.default.to_string();
                (s.name.to_string(), default, ConfigSource::Default)
            });
            DescribedConfig {
                name: s.name.to_string(),
                value: (!(null_default && levels.is_empty())).then(|| value.to_string()),
                source,
                doc: s.doc,
                synonyms: set.chain(default).collect(),
                read_only: !s.dynamic,
                config_type: s.kind.type_code(),
            }
        });
        let changeable = TOPIC_CONFIGS.iter().filter_map(|def| {
            let key = def.broker_key()?;
            let levels = self.levels(dynamic, key);
            let (value, source) = match levels.first() {
                Some((value, source)) => (Some(value.to_string()), *source),
                None if def.broker_fallback().is_some() => (None, ConfigSource::Default),
                None => (Some(def.default.to_string()), ConfigSource::Default),
            };
            Some(DescribedConfig {
                name: key.to_string(),
                value,
                source,
                doc: def.doc,
                synonyms: self.broker_synonyms(dynamic, def),
                read_only: false,
                config_type: def.kind.type_code(),
            })
        });
        fixed.chain(changeable).collect()
    }

    /// The cluster-wide dynamic configs that are set, for DescribeConfigs on the cluster's
    /// default broker resource (the empty name).
    pub fn describe_cluster_default(dynamic: DynamicConfigs<'_>) -> Vec<DescribedConfig> {
        dynamic
            .cluster
            .iter()
            .filter_map(|(key, value)| {
                let (doc, config_type) = match dynamic_broker_config(key) {
                    Some(def) => (def.doc, def.kind.type_code()),
                    None => broker_setting(key).map(|s| (s.doc, s.kind.type_code()))?,
                };
                Some(DescribedConfig {
                    name: key.clone(),
                    value: Some(value.clone()),
                    source: ConfigSource::DynamicDefault,
                    doc,
                    synonyms: vec![(key.clone(), value.clone(), ConfigSource::DynamicDefault)],
                    read_only: false,
                    config_type,
                })
            })
            .collect()
    }

    /// Every topic config for a topic with `overrides`, with value and source.
    pub fn describe_topic(
        &self,
        dynamic: DynamicConfigs<'_>,
        overrides: &BTreeMap<String, String>,
    ) -> Vec<DescribedConfig> {
        TOPIC_CONFIGS
            .iter()
            .map(|def| {
                let broker_level = || {
                    let levels = def.broker_key().map(|key| self.levels(dynamic, key));
                    levels
                        .and_then(|levels| levels.first().copied())
                        .unwrap_or((def.default, ConfigSource::Default))
                };
                let (value, source) = match overrides.get(def.name) {
                    Some(v) => (v.as_str(), ConfigSource::Topic),
                    None => broker_level(),
                };
                // As Kafka lists them: the override, then the broker's levels and default.
                let mut synonyms = Vec::new();
                if let Some(v) = overrides.get(def.name) {
                    synonyms.push((def.name.to_string(), v.clone(), ConfigSource::Topic));
                }
                synonyms.extend(self.broker_synonyms(dynamic, def));
                DescribedConfig {
                    name: def.name.to_string(),
                    value: Some(value.to_string()),
                    source,
                    doc: def.doc,
                    synonyms,
                    read_only: false,
                    config_type: def.kind.type_code(),
                }
            })
            .collect()
    }

    /// The effective settings of a topic with `overrides` (validated by the controller) under
    /// the broker's `dynamic` configs.
    pub fn topic_settings(
        &self,
        dynamic: DynamicConfigs<'_>,
        overrides: &BTreeMap<String, String>,
    ) -> TopicSettings {
        if overrides.is_empty() && dynamic.is_empty() {
            return self.topic_defaults;
        }
        TopicSettings::resolve(
            |name| match overrides.get(name) {
                Some(value) => value.as_str(),
                None => topic_config(name).map_or("", |def| self.broker_value(dynamic, def)),
            },
            self.topic_defaults.log.producer_ids_max,
        )
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
    /// `message.timestamp.before.max.ms`.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`.
    pub timestamp_after_max_ms: i64,
    /// `max.decompressed.message.bytes`.
    pub max_decompressed_message_bytes: u64,
    /// `message.timestamp.type=LogAppendTime`: batches are stamped with their append time.
    pub log_append_time: bool,
    /// The codec `compression.type` makes the broker store batches in; `None` keeps the
    /// producer's.
    pub compression: Option<i16>,
    /// `compression.gzip.level`, `compression.lz4.level`, `compression.zstd.level`.
    pub compression_levels: Levels,
}

/// A compressed batch may decompress to at most this many times `max.message.bytes`…
const DECOMPRESSION_RATIO_MAX: u64 = 64;
/// …and never less than this (real producers' batches decompress to a few MiB)…
const DECOMPRESSED_BATCH_BYTES_MIN: u64 = 64 * 1024 * 1024;
/// …nor more than this, whatever `max.message.bytes` a topic sets.
const DECOMPRESSED_BATCH_BYTES_MAX: u64 = 256 * 1024 * 1024;

impl TopicSettings {
    /// The decompressed size a batch of the topic may reach, wherever it is decompressed
    /// (produce, the cleaner, the offsets topic, ListOffsets by timestamp): the topic's
    /// `max.decompressed.message.bytes`, within Weir's own bound.
    pub fn decompressed_bytes_max(&self) -> u64 {
        self.log
            .max_message_bytes
            .saturating_mul(DECOMPRESSION_RATIO_MAX)
            .clamp(DECOMPRESSED_BATCH_BYTES_MIN, DECOMPRESSED_BATCH_BYTES_MAX)
            .min(self.max_decompressed_message_bytes)
    }

    /// Settings from a lookup of each topic config's value (already validated).
    fn resolve<'a>(value: impl Fn(&str) -> &'a str, producer_ids_max: usize) -> TopicSettings {
        let long = |name: &str| read::<i64>(name, value(name));
        let policy = value("cleanup.policy");
        let compaction = policy.contains(CLEANUP_COMPACT).then(|| CompactionConfig {
            min_cleanable_dirty_ratio_ppm: (read::<f64>(
                "min.cleanable.dirty.ratio",
                value("min.cleanable.dirty.ratio"),
            ) * 1_000_000.0) as u32,
            min_compaction_lag_ms: long("min.compaction.lag.ms"),
            max_compaction_lag_ms: long("max.compaction.lag.ms"),
            delete_retention_ms: long("delete.retention.ms"),
        });
        let flush_policy = match value("flush.policy") {
            FLUSH_POLICY_ALWAYS => FlushPolicy::Always,
            FLUSH_POLICY_NEVER => FlushPolicy::Never,
            _ => FlushPolicy::AcksAll,
        };
        TopicSettings {
            log: LogConfig {
                segment_bytes: long("segment.bytes") as u64,
                segment_ms: long("segment.ms"),
                retention_ms: long("retention.ms"),
                retention_bytes: long("retention.bytes"),
                max_message_bytes: long("max.message.bytes") as u64,
                index_interval_bytes: long("index.interval.bytes") as u64,
                producer_ids_max,
                retention_deletes: policy.contains(CLEANUP_DELETE),
                compaction,
            },
            flush_policy,
            min_insync_replicas: long("min.insync.replicas") as i32,
            timestamp_before_max_ms: long("message.timestamp.before.max.ms"),
            timestamp_after_max_ms: long("message.timestamp.after.max.ms"),
            max_decompressed_message_bytes: long("max.decompressed.message.bytes") as u64,
            log_append_time: value("message.timestamp.type") == TIMESTAMP_LOG_APPEND_TIME,
            compression: compression_codec(value("compression.type")),
            compression_levels: Levels {
                gzip: long("compression.gzip.level") as i32,
                lz4: long("compression.lz4.level") as i32,
                zstd: long("compression.zstd.level") as i32,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        BrokerConfig::from_properties(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn overrides_then_broker_then_default() {
        let broker = config(&[("log.retention.ms", "5000")]).expect("valid");
        let described = broker.describe_topic(
            DynamicConfigs::none(),
            &BTreeMap::from([("segment.bytes".into(), "2097152".into())]),
        );
        let find = |name: &str| {
            described
                .iter()
                .find(|d| d.name == name)
                .cloned()
                .expect("listed")
        };
        assert_eq!(
            (
                find("retention.ms").value.as_deref(),
                find("retention.ms").source
            ),
            (Some("5000"), ConfigSource::StaticBroker)
        );
        assert_eq!(
            (
                find("segment.bytes").value.as_deref(),
                find("segment.bytes").source
            ),
            (Some("2097152"), ConfigSource::Topic)
        );
        assert_eq!(find("retention.bytes").source, ConfigSource::Default);
        let settings = broker.topic_settings(
            DynamicConfigs::none(),
            &BTreeMap::from([("flush.policy".into(), "never".into())]),
        );
        assert_eq!(settings.log.retention_ms, 5000);
        assert_eq!(settings.flush_policy, FlushPolicy::Never);
        assert_eq!(settings.timestamp_after_max_ms, 3_600_000);
        assert_eq!(
            broker
                .topic_settings(DynamicConfigs::none(), &BTreeMap::new())
                .log
                .retention_ms,
            5000
        );
    }

    #[test]
    fn booleans_read_in_any_case_at_every_level() {
        let broker = config(&[
            ("auto.create.topics.enable", "FALSE"),
            ("auto.leader.rebalance.enable", " False "),
            ("unclean.leader.election.enable", "True"),
            ("log.cleaner.enable", "false"),
        ])
        .expect("Kafka reads these");
        assert!(!broker.auto_create_topics_enable);
        assert!(!broker.auto_leader_rebalance_enable);
        assert!(broker.static_unclean_leader_election_enable());
        assert!(!config(&[])
            .expect("defaults")
            .static_unclean_leader_election_enable());
        assert!(
            !broker
                .runtime_settings(DynamicConfigs::none())
                .cleaner
                .enabled
        );
        let cleaning = config(&[("log.cleaner.enable", " TRUE ")]).expect("Kafka reads it");
        assert!(
            cleaning
                .runtime_settings(DynamicConfigs::none())
                .cleaner
                .enabled
        );
    }

    #[test]
    fn a_stored_value_that_does_not_read_is_its_default_not_a_stop() {
        // As a metadata log written by a version that checked otherwise could hold them.
        let broker = config(&[("log.retention.ms", "5000")]).expect("valid");
        let cluster = BTreeMap::from([
            ("log.retention.ms".to_string(), "a week".to_string()),
            (
                "log.cleaner.min.cleanable.ratio".to_string(),
                "most".to_string(),
            ),
            ("log.cleaner.threads".to_string(), "several".to_string()),
            ("max.connections".to_string(), "many".to_string()),
            ("producer.id.expiration.ms".to_string(), "".to_string()),
        ]);
        let dynamic = DynamicConfigs {
            node: &NO_CONFIGS,
            cluster: &cluster,
        };
        let compacted = BTreeMap::from([
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("min.compaction.lag.ms".to_string(), "soon".to_string()),
        ]);
        let settings = broker.topic_settings(dynamic, &compacted);
        assert_eq!(settings.log.retention_ms, 604_800_000);
        let compaction = settings.log.compaction.expect("compacted");
        assert_eq!(compaction.min_cleanable_dirty_ratio_ppm, 500_000);
        assert_eq!(compaction.min_compaction_lag_ms, 0);
        let runtime = broker.runtime_settings(dynamic);
        assert_eq!(
            (runtime.cleaner.enabled, runtime.cleaner.threads),
            (true, 1)
        );
        assert_eq!(runtime.connections.max_connections, 10_000);
        assert_eq!(runtime.producer_id_expiration_ms, 86_400_000);
    }

    #[test]
    fn every_default_reads_as_its_type() {
        for def in TOPIC_CONFIGS {
            let text = def.default;
            let reads = match def.kind {
                ConfigKind::Long { .. } | ConfigKind::Int { .. } => text.parse::<i64>().is_ok(),
                ConfigKind::Fraction | ConfigKind::Decimal => text.parse::<f64>().is_ok(),
                ConfigKind::Choice(["true", "false"]) => parse_boolean(text).is_some(),
                _ => true,
            };
            assert!(reads, "{}={text}", def.name);
        }
        for setting in BROKER_SETTINGS {
            assert_eq!(setting.check(setting.default), Ok(()), "{}", setting.name);
        }
    }

    #[test]
    fn dynamic_levels_come_before_static_and_default() {
        let broker = config(&[("log.retention.ms", "5000")]).expect("valid");
        let node = BTreeMap::from([("message.max.bytes".to_string(), "2000".to_string())]);
        let cluster = BTreeMap::from([
            ("log.retention.ms".to_string(), "7000".to_string()),
            ("message.max.bytes".to_string(), "3000".to_string()),
        ]);
        let dynamic = DynamicConfigs {
            node: &node,
            cluster: &cluster,
        };
        let settings = broker.topic_settings(dynamic, &BTreeMap::new());
        assert_eq!(
            (settings.log.retention_ms, settings.log.max_message_bytes),
            (7000, 2000)
        );
        let topic = broker.describe_topic(dynamic, &BTreeMap::new());
        let retention = topic
            .iter()
            .find(|c| c.name == "retention.ms")
            .expect("listed");
        let synonym =
            |name: &str, value: &str, source| (name.to_string(), value.to_string(), source);
        assert_eq!(retention.source, ConfigSource::DynamicDefault);
        assert_eq!(
            retention.synonyms,
            vec![
                synonym("log.retention.ms", "7000", ConfigSource::DynamicDefault),
                synonym("log.retention.ms", "5000", ConfigSource::StaticBroker),
                synonym("log.retention.hours", "168", ConfigSource::Default),
            ]
        );
        let described = broker.describe(dynamic);
        let find = |name: &str| described.iter().find(|c| c.name == name).expect("listed");
        let max = find("message.max.bytes");
        assert_eq!(
            (max.value.as_deref(), max.source, max.read_only),
            (Some("2000"), ConfigSource::DynamicBroker, false)
        );
        let roll = find("log.roll.ms");
        assert_eq!(
            (roll.value.as_deref(), roll.synonyms.len()),
            (None, 0),
            "no default of its own"
        );
        assert!(find("num.partitions").read_only, "static");
        assert!(
            described.iter().all(|c| c.name != "remote.storage.enable"),
            "topic-only configs have no broker key"
        );
        let settings = BTreeMap::from([
            ("log.cleaner.threads".to_string(), "4".to_string()),
            (
                "log.cleaner.io.max.bytes.per.second".to_string(),
                "1000.5".to_string(),
            ),
            ("producer.id.expiration.ms".to_string(), "60000".to_string()),
            (
                "max.connections.per.ip.overrides".to_string(),
                "10.0.0.1:3".to_string(),
            ),
        ]);
        let at_runtime = DynamicConfigs {
            node: &settings,
            cluster: &cluster,
        };
        let runtime = broker.runtime_settings(at_runtime);
        let cleaner = runtime.cleaner;
        assert_eq!((cleaner.threads, cleaner.io_bytes_per_second), (4, 1000));
        assert_eq!(runtime.producer_id_expiration_ms, 60_000);
        let limits = runtime.connections;
        assert_eq!(limits.per_ip_overrides, vec![("10.0.0.1".to_string(), 3)]);
        assert_eq!(limits.max_connections, 10_000);
        let described = broker.describe(at_runtime);
        let threads = described
            .iter()
            .find(|c| c.name == "log.cleaner.threads")
            .expect("listed");
        assert_eq!(
            (threads.value.as_deref(), threads.source, threads.read_only),
            (Some("4"), ConfigSource::DynamicBroker, false)
        );
        let defaults = BrokerConfig::describe_cluster_default(dynamic);
        let names: Vec<&str> = defaults.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["log.retention.ms", "message.max.bytes"]);
        let cluster_settings = DynamicConfigs {
            node: &cluster,
            cluster: &settings,
        };
        let defaults = BrokerConfig::describe_cluster_default(cluster_settings);
        assert_eq!(
            defaults.len(),
            4,
            "broker settings set cluster-wide are listed too"
        );
    }

    #[test]
    fn typed_values_and_host_counts() {
        let broker = config(&[
            ("max.connections.per.ip", "7"),
            (
                "max.connections.per.ip.overrides",
                "127.0.0.2:3, [::1]:9 ,broker.example:10",
            ),
            ("auto.create.topics.enable", "false"),
        ])
        .expect("valid");
        let connections = broker.runtime_settings(DynamicConfigs::none()).connections;
        assert_eq!(connections.max_connections_per_ip, 7);
        assert!(!broker.auto_create_topics_enable);
        assert_eq!(
            connections.per_ip_overrides,
            vec![
                ("127.0.0.2".to_string(), 3),
                ("::1".to_string(), 9),
                ("broker.example".to_string(), 10)
            ]
        );
        assert_eq!(broker.connections_max_idle_ms, 600_000);
        assert_eq!(broker.queued_max_request_bytes, 256 << 20);
    }

    #[test]
    fn bad_properties_are_refused() {
        for (k, v) in [
            ("no.such.thing", "1"),
            ("num.partitions", "zero"),
            ("log.flush.policy", "sometimes"),
            ("default.replication.factor", "3"),
            ("log.segment.bytes", "1024"),
            ("max.connections.per.ip.overrides", "127.0.0.1"),
            ("max.connections.per.ip.overrides", "127.0.0.1:many"),
            ("queued.max.request.bytes", "4096"),
        ] {
            assert!(config(&[(k, v)]).is_err(), "{k}={v}");
        }
    }
}
