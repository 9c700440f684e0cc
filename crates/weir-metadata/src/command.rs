//! The metadata commands: every change to cluster metadata is one of these, fully determined
//! (ids chosen before appending) so replaying the log rebuilds the same image.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One metadata change, as stored in the metadata log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MetadataCommand {
    /// A new topic.
    CreateTopic {
        /// Topic name.
        name: String,
        /// Random id chosen at creation; a recreated topic gets a new one.
        topic_id: Uuid,
        /// Number of partitions.
        partitions: i32,
        /// Replication factor.
        replication_factor: i16,
        /// Topic-level config overrides.
        configs: BTreeMap<String, String>,
    },
    /// Removes a topic.
    DeleteTopic {
        /// The topic's id.
        topic_id: Uuid,
    },
    /// Raises a topic's partition count to `total`.
    CreatePartitions {
        /// The topic's id.
        topic_id: Uuid,
        /// New total partition count.
        total: i32,
    },
    /// Changes a topic's config overrides.
    AlterTopicConfig {
        /// The topic's id.
        topic_id: Uuid,
        /// Overrides to set.
        set: BTreeMap<String, String>,
        /// Overrides to remove (back to the broker default).
        delete: Vec<String>,
        /// Drop every override not in `set` first (AlterConfigs' replace semantics).
        replace: bool,
    },
    /// Changes dynamic broker configs (Kafka's broker names, `log.retention.ms`): the
    /// cluster-wide defaults, or one broker's own.
    AlterBrokerConfig {
        /// The broker whose configs change; `None` for the cluster-wide defaults.
        node_id: Option<i32>,
        /// Configs to set.
        set: BTreeMap<String, String>,
        /// Configs to remove (back to the next level down).
        delete: Vec<String>,
        /// Drop every config of this level not in `set` first (AlterConfigs' replace semantics).
        replace: bool,
    },
    /// Reserves producer ids `[first, first + count)` for the broker to hand out.
    AllocateProducerIds {
        /// First id of the block.
        first: i64,
        /// Block size.
        count: i64,
    },
}
