//! The metadata commands: every change to cluster metadata is one of these, fully determined
//! (ids chosen before appending) so replaying the log rebuilds the same image.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ConfigChange;

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
        /// The overrides' change (a removed one goes back to the broker default).
        #[serde(flatten)]
        change: ConfigChange,
    },
    /// Changes dynamic broker configs (Kafka's broker names, `log.retention.ms`): the
    /// cluster-wide defaults, or one broker's own.
    AlterBrokerConfig {
        /// The broker whose configs change; `None` for the cluster-wide defaults.
        node_id: Option<i32>,
        /// The level's change.
        #[serde(flatten)]
        change: ConfigChange,
    },
    /// Reserves producer ids `[first, first + count)` for the broker to hand out.
    AllocateProducerIds {
        /// First id of the block.
        first: i64,
        /// Block size.
        count: i64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_changes_keep_their_stored_form() {
        let stored = r#"{"type":"alter_topic_config","topic_id":"00000000-0000-0000-0000-000000000001","set":{"retention.ms":"1000"},"delete":["segment.ms"],"replace":false}"#;
        let command: MetadataCommand = serde_json::from_str(stored).expect("decodes");
        let expected = MetadataCommand::AlterTopicConfig {
            topic_id: Uuid::from_u128(1),
            change: ConfigChange {
                set: BTreeMap::from([("retention.ms".into(), "1000".into())]),
                delete: vec!["segment.ms".into()],
                replace: false,
            },
        };
        assert_eq!(command, expected);
        assert_eq!(serde_json::to_string(&expected).expect("encodes"), stored);
    }
}
