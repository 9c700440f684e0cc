//! `weir-broker` is the data plane: it hosts partition logs, serves the Kafka protocol
//! (produce with acks and idempotence checks, fetch with long polls, offsets, admin requests
//! forwarded to the controller) and keeps logs in step with the metadata image.
//!
//! It never decides metadata itself (topics, configs and producer ids come from the
//! controller). Batches are validated record by record before they are appended and are
//! stored and served as the bytes the producer sent. Every per-connection and broker-wide
//! resource has a bound (see `server`), and disk reads and fsyncs run off the async workers,
//! outside the partition locks.

pub mod broker;
mod broker_links;
mod bulk_lane;
pub mod cleaner;
pub mod config;
mod config_error;
pub mod connections;
mod coordinator_log;
mod endpoints;
pub mod fetch_session;
mod handlers;
pub mod hot_partitions;
pub mod inter_broker;
mod internal_topics;
mod listener;
pub mod listeners;
mod marker_writer;
mod membership;
pub mod metrics;
pub mod partition;
mod quotas;
mod rate_limit;
pub mod registry;
mod replica_fetcher;
pub mod replication;
pub mod reply;
mod request_context;
mod request_quota;
mod sasl;
pub mod server;
mod share_persister;
pub mod share_state;
mod shutdown;
mod txn_markers;
mod txn_verification;

pub use broker::{Broker, BrokerIdentity};
pub use config::{BrokerConfig, ConfigError, DynamicConfigs, FlushPolicy, TopicSettings};
pub use connections::{connection_limits, ConnectionLimits};
pub use handlers::scram_credentials::add_missing as add_missing_scram_credentials;
pub use partition::EXIT_CODE_STORAGE_FAILURE;
pub use registry::PartitionRegistry;
pub use request_context::RequestContext;
pub use server::{serve, BoundListener};
