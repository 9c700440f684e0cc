//! How the broker reaches the controller: it asks for a change and is answered once the change
//! is committed, and it follows the committed images in order. The controller in the same
//! process implements this today; a Raft quorum will implement it without the broker changing.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::requests::{ControlCall, ControlRequest, EncodedAnswer};
use crate::{ControllerError, MetadataImage};

/// A topic creation request, already defaulted by the caller.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NewTopic {
    /// Topic name.
    pub name: String,
    /// Partition count (≥ 1).
    pub partitions: i32,
    /// Replication factor (≥ 1).
    pub replication_factor: i16,
    /// Config overrides.
    pub configs: BTreeMap<String, String>,
    /// The replicas of each partition as the client chose them (CreateTopics' manual
    /// assignment), preferred leader first; empty to let the controller place them.
    pub assignments: Vec<Vec<i32>>,
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

/// A leader's request to change a partition's ISR (Kafka's AlterPartition), made against the
/// state of the partition it last saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartition {
    /// The topic's id.
    pub topic_id: uuid::Uuid,
    /// The partition's index.
    pub partition: i32,
    /// The leader asking.
    pub leader: i32,
    /// Its registration's epoch.
    pub broker_epoch: u64,
    /// The leader epoch it leads at.
    pub leader_epoch: i32,
    /// The partition epoch of the state it changes.
    pub partition_epoch: i32,
    /// The ISR it wants.
    pub isr: Vec<i32>,
}

/// One partition's reassignment as a client asks it (AlterPartitionReassignments).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassignment {
    /// The topic's name.
    pub topic: String,
    /// The partition's index.
    pub partition: i32,
    /// The replicas the partition should end on, preferred leader first; `None` cancels the
    /// reassignment in progress.
    pub target: Option<Vec<i32>>,
}

/// Which leaders an ElectLeaders request elects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionType {
    /// The preferred replica (the first), when it is live and in sync.
    Preferred,
    /// Any live replica for a partition without a leader, in sync or not (may lose
    /// acknowledged writes).
    Unclean,
}

/// Why the controller left one partition of a batch request unchanged; each maps to one
/// Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionRefusal {
    /// The topic or partition does not exist.
    UnknownTopicOrPartition(String),
    /// A target replica list the cluster cannot honour.
    InvalidReplicaAssignment(String),
    /// A target that changes the replica count when the client did not allow it.
    InvalidReplicationFactor(String),
    /// A cancellation of a partition no reassignment is moving.
    NoReassignmentInProgress(String),
    /// The partition already has the leader the election would give it.
    ElectionNotNeeded(String),
    /// The preferred replica is not live or not in sync.
    PreferredLeaderNotAvailable(String),
    /// No live replica may lead.
    EligibleLeadersNotAvailable(String),
}

impl PartitionRefusal {
    /// The message, in Kafka's words where Kafka has them.
    pub fn message(&self) -> &str {
        match self {
            PartitionRefusal::UnknownTopicOrPartition(m)
            | PartitionRefusal::InvalidReplicaAssignment(m)
            | PartitionRefusal::InvalidReplicationFactor(m)
            | PartitionRefusal::NoReassignmentInProgress(m)
            | PartitionRefusal::ElectionNotNeeded(m)
            | PartitionRefusal::PreferredLeaderNotAvailable(m)
            | PartitionRefusal::EligibleLeadersNotAvailable(m) => m,
        }
    }
}

/// What a batch request did to one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionOutcome {
    /// The topic's name.
    pub topic: String,
    /// The partition's index.
    pub partition: i32,
    /// Why it was left unchanged; `None` when the change was made.
    pub refusal: Option<PartitionRefusal>,
}

/// The metadata quorum as its leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumStatus {
    /// The controller leading the quorum.
    pub leader: i32,
    /// The leader's Raft term.
    pub term: u64,
    /// Index of the last log entry a quorum holds (committed), if any.
    pub commit_index: Option<u64>,
    /// Every voter of the quorum.
    pub voters: Vec<VoterStatus>,
    /// The broker-only nodes following the quorum without a vote (Raft learners).
    #[serde(default)]
    pub observers: Vec<VoterStatus>,
}

/// One voter (or observer) of the metadata quorum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoterStatus {
    /// Its node id.
    pub node_id: i32,
    /// Its controller listener (`HOST:PORT`; `local` for a quorum of one).
    pub address: String,
    /// Index of the last log entry it is known to hold, if known.
    pub matched_index: Option<u64>,
    /// Milliseconds since the leader last heard from it (0 for the leader itself).
    pub last_contact_ms: Option<u64>,
}

/// A change the controller accepted: its outcome, and where it is in the metadata log.
#[derive(Debug, Clone)]
pub struct Committed<T> {
    /// What the change produced (the new topic, a block of producer ids, …).
    pub value: T,
    /// The `applied_count` of the first committed image that holds the change (for a
    /// validate-only request, of the image it was checked against).
    pub applied_count: u64,
}

/// The controller's answer to a change request, once it has decided.
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<Committed<T>, ControllerError>> + Send>>;

/// What the broker asks of the controller: metadata changes, each answered once it is
/// committed (or refused, changing nothing), and the stream of committed images.
pub trait MetadataControl: Send + Sync {
    /// Decides `request`, here or at the active controller; answered once it is committed
    /// with what it produced. Callers use [`ask`](#method.ask), which types the answer.
    fn decide(&self, request: ControlRequest) -> Pending<EncodedAnswer>;

    /// The committed images, newest first available: a receiver sees each change at least as
    /// its latest image (intermediate images may be skipped).
    fn images(&self) -> watch::Receiver<Arc<MetadataImage>>;
}

impl dyn MetadataControl {
    /// Asks the controller for `call`; answered once the change is committed with what it
    /// produced, as the request's own answer type.
    pub fn ask<C: ControlCall>(&self, call: C) -> Pending<C::Answer> {
        let pending = self.decide(call.into());
        Box::pin(async move {
            let Committed {
                value,
                applied_count,
            } = pending.await?;
            Ok(Committed {
                value: value.decode::<C::Answer>()?,
                applied_count,
            })
        })
    }
}
