//! The metadata commands: every change to cluster metadata is one of these, fully determined
//! (ids chosen before appending) so replaying the log rebuilds the same image; and what they
//! carry (a config change, a broker's listeners, a partition's new leader, ISR and replicas).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;
use weir_sasl::{ScramCredential, ScramHash};

use crate::acl::AclBinding;
use crate::quota::QuotaAlteration;

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
        /// The replicas of each partition, preferred leader first. Empty in commands written
        /// before replicas were recorded (the controller reads those as its own node's).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
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
        /// The replicas of each new partition, preferred leader first (empty as in
        /// `CreateTopic`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        assignments: Vec<Vec<i32>>,
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
    /// A broker joins, or rejoins after a restart, with where clients reach it. Its broker
    /// epoch is the position of this command in the log with random bits of the incarnation
    /// id below it ([`crate::image::broker_epoch`]), so every start has a new, larger one.
    RegisterBroker {
        /// The broker's node id.
        node_id: i32,
        /// Random id of this start of the broker process.
        incarnation_id: Uuid,
        /// The listeners clients connect to.
        listeners: Vec<BrokerListener>,
        /// The broker's rack (`broker.rack`), if it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rack: Option<String>,
    },
    /// A broker's lease expired or it shut down: it is fenced, and the partitions it led or
    /// was in sync for get the leaders and ISRs in `changes`.
    FenceBroker {
        /// The broker's node id.
        node_id: i32,
        /// What fencing it changes.
        changes: Vec<PartitionChange>,
    },
    /// A fenced broker heartbeats again: it is unfenced, and leaderless partitions it can
    /// lead get it as leader (`changes`).
    UnfenceBroker {
        /// The broker's node id.
        node_id: i32,
        /// What its return changes.
        changes: Vec<PartitionChange>,
    },
    /// New leaders and ISRs (a leader's ISR change, or an election).
    ChangePartitions {
        /// The changes, each to one partition.
        changes: Vec<PartitionChange>,
    },
    /// Reserves producer ids `[first, first + count)` for the broker to hand out.
    AllocateProducerIds {
        /// First id of the block.
        first: i64,
        /// Block size.
        count: i64,
    },
    /// Sets and removes users' SCRAM credentials (AlterUserScramCredentials).
    AlterScramCredentials {
        /// Credentials set, each replacing the user's credential of its mechanism.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        upserts: Vec<ScramUpsert>,
        /// Credentials removed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deletions: Vec<ScramDeletion>,
    },
    /// Adds ACLs (CreateAcls).
    CreateAcls {
        /// The ACLs, none of them held yet.
        acls: Vec<AclBinding>,
    },
    /// Removes ACLs (DeleteAcls).
    DeleteAcls {
        /// The ACLs, each of them held.
        acls: Vec<AclBinding>,
    },
    /// Sets and removes client quotas (AlterClientQuotas).
    AlterClientQuotas {
        /// Each entity's changes, every one of them changing something.
        alterations: Vec<QuotaAlteration>,
    },
}

/// A user's SCRAM credential for one mechanism, set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramUpsert {
    /// The user name.
    pub user: String,
    /// The mechanism's hash.
    pub hash: ScramHash,
    /// Salt, iterations and keys (never the password).
    pub credential: ScramCredential,
}

/// A user's SCRAM credential for one mechanism, removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramDeletion {
    /// The user name.
    pub user: String,
    /// The mechanism's hash.
    pub hash: ScramHash,
}

/// One line naming the change, for logs.
impl std::fmt::Display for MetadataCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetadataCommand::CreateTopic {
                name, partitions, ..
            } => write!(f, "create topic {name} ({partitions} partitions)"),
            MetadataCommand::DeleteTopic { topic_id } => write!(f, "delete topic {topic_id}"),
            MetadataCommand::CreatePartitions {
                topic_id, total, ..
            } => {
                write!(f, "grow topic {topic_id} to {total} partitions")
            }
            MetadataCommand::AlterTopicConfig { topic_id, .. } => {
                write!(f, "alter configs of topic {topic_id}")
            }
            MetadataCommand::AlterBrokerConfig {
                node_id: Some(id), ..
            } => write!(f, "alter configs of broker {id}"),
            MetadataCommand::AlterBrokerConfig { node_id: None, .. } => {
                write!(f, "alter cluster-wide broker configs")
            }
            MetadataCommand::RegisterBroker { node_id, .. } => {
                write!(f, "register broker {node_id}")
            }
            MetadataCommand::FenceBroker { node_id, changes } => {
                write!(
                    f,
                    "fence broker {node_id} ({} partition changes)",
                    changes.len()
                )
            }
            MetadataCommand::UnfenceBroker { node_id, changes } => {
                write!(
                    f,
                    "unfence broker {node_id} ({} partition changes)",
                    changes.len()
                )
            }
            MetadataCommand::ChangePartitions { changes } => match changes.as_slice() {
                [one] => write!(
                    f,
                    "partition {}:{} leader {} isr {:?}",
                    one.topic_id, one.partition, one.leader, one.isr
                ),
                many => write!(f, "change {} partitions", many.len()),
            },
            MetadataCommand::AllocateProducerIds { first, count } => {
                write!(f, "reserve producer ids {first}..{}", first + count)
            }
            MetadataCommand::AlterScramCredentials { upserts, deletions } => write!(
                f,
                "set {} and remove {} SCRAM credentials",
                upserts.len(),
                deletions.len()
            ),
            MetadataCommand::CreateAcls { acls } => write!(f, "add {} ACLs", acls.len()),
            MetadataCommand::DeleteAcls { acls } => write!(f, "remove {} ACLs", acls.len()),
            MetadataCommand::AlterClientQuotas { alterations } => {
                write!(
                    f,
                    "alter the client quotas of {} entities",
                    alterations.len()
                )
            }
        }
    }
}

/// A change to one set of configs: a topic's overrides, or one level of dynamic broker
/// configs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChange {
    /// Configs to set.
    pub set: BTreeMap<String, String>,
    /// Configs to remove (back to the next level down).
    pub delete: Vec<String>,
    /// Drop every config not in `set` first (AlterConfigs' replace semantics).
    pub replace: bool,
}

impl ConfigChange {
    /// Sets `set`, leaving the other configs as they are.
    pub fn setting(set: BTreeMap<String, String>) -> ConfigChange {
        ConfigChange {
            set,
            ..ConfigChange::default()
        }
    }
}

/// A listener clients connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerListener {
    /// The listener's name (`PLAINTEXT`).
    pub name: String,
    /// Host clients are told to connect to.
    pub host: String,
    /// Port clients are told to connect to.
    pub port: u16,
}

/// A new leader and ISR for one partition, decided by the controller (an ISR change asked by
/// the leader, or an election after a broker was fenced or came back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionChange {
    /// The topic's id.
    pub topic_id: Uuid,
    /// The partition's index.
    pub partition: i32,
    /// The new leader, or [`crate::NO_LEADER`].
    pub leader: i32,
    /// The new in-sync replicas.
    pub isr: Vec<i32>,
    /// New replicas, when the change starts, completes or cancels a reassignment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<ReplicaAssignment>,
}

/// A partition's replicas while a reassignment moves it, or after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaAssignment {
    /// Every replica: the target ones first, then those being removed.
    pub replicas: Vec<i32>,
    /// Replicas being added (copying from the leader).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<i32>,
    /// Replicas removed once every target replica is in sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<i32>,
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
