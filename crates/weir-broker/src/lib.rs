//! `weir-broker` is the data plane: it hosts partition logs, serves the Kafka protocol
//! (produce with acks and idempotence checks, fetch with long polls, offsets, admin requests
//! forwarded to the controller) and keeps logs in step with the metadata image.
//!
//! It never decides metadata itself (topics, configs and producer ids come from the
//! controller) and never decodes individual records on the produce or fetch path: batches are
//! stored and served as the bytes the producer sent.

mod bad_input;
pub mod broker;
pub mod config;
mod handlers;
pub mod partition;
pub mod registry;
pub mod server;

pub use broker::{Broker, BrokerIdentity};
pub use config::{BrokerConfig, ConfigError, FlushPolicy, TopicSettings};
pub use partition::EXIT_CODE_STORAGE_FAILURE;
pub use registry::PartitionRegistry;
pub use server::serve;
