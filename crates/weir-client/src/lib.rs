//! `weir-client` is an async Rust client for Weir and any Kafka broker: a batching,
//! compressing, idempotent [`Producer`]; a [`Consumer`] of assigned partitions with pipelined
//! fetches; a [`GroupConsumer`] in a consumer group (subscribe, auto or manual commit,
//! rebalance events, range and cooperative-sticky assignment); and an [`Admin`] client for topics, configs, offsets, consumer groups (with lag), transactions and cluster
//! status.
//!
//! It speaks only the public Kafka protocol (through `weir-proto`), so it never depends on
//! broker internals, and keyed records go where the Java client would put them (murmur2).

mod acls;
mod admin;
pub mod assignor;
mod cluster;
mod connection;
mod consumer;
mod error;
mod group_consumer;
mod groups;
mod hung;
pub mod partitioner;
mod producer;
mod quotas;
mod reassign;
mod records;
mod sasl;
mod security;
mod transactions;
mod users;

pub use admin::{
    Admin, ClusterStatus, ConfigEntry, PartitionHealth, QuorumInfo, QuorumVoter, TopicDescription,
};
pub use cluster::{BrokerInfo, ClientConfig, Cluster, PartitionInfo, TopicInfo};
pub use connection::Connection;
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, OffsetSpec};
pub use error::{ClientError, Result};
pub use group_consumer::{GroupConsumer, GroupConsumerConfig, RebalanceEvent, RebalanceListener};
pub use groups::{
    GroupDescription, GroupListing, GroupMember, OffsetChange, OffsetReset, PartitionLag,
};
pub use hung::{AbortedHung, HungTransaction, HungTransactions};
pub use kafka_protocol::records::Compression;
pub use producer::{
    Acks, DeliveryFuture, Producer, ProducerConfig, ProducerRecord, RecordMetadata,
};
pub use quotas::EntityQuotas;
pub use reassign::{Election, OngoingReassignment, PartitionResult};
pub use sasl::SaslLogin;
pub use security::Security;
pub use transactions::{Fenced, TransactionDescription, TransactionListing};
pub use users::ScramUser;
pub use weir_metadata::{acl, quota};
pub use weir_sasl::{Mechanism, ScramHash};
