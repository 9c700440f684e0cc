//! The changes a broker asks of the controller, each written once: a struct per request with
//! the type of its answer ([`ControlCall`]), one enum that carries any of them to the
//! controller that decides it ([`ControlRequest`], also what travels to the active
//! controller), and the answer on its way back ([`EncodedAnswer`]), which
//! [`MetadataControl::ask`](crate::MetadataControl) turns into the request's own answer type.
//! Adding a request is a struct, a line in [`control_requests!`] and the controller's decision.
//! The requests' parts and answers (a new topic, an ISR change, a reassignment, an election's
//! kind, each partition's outcome, the quorum's status) are here too.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::acl::{AclBinding, AclFilter};
use crate::command::{BrokerListener, ConfigChange, ScramDeletion, ScramUpsert};
use crate::image::{BrokerRegistration, PartitionImage, TopicImage};
use crate::quota::QuotaAlteration;
use crate::ControllerError;

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

/// A request of one kind, and what deciding it produces.
pub trait ControlCall: Into<ControlRequest> + Send + 'static {
    /// What the controller answers once the change is committed.
    type Answer: Serialize + DeserializeOwned + Send + 'static;
}

/// What a decided request produced, as it travels back to whoever asked: the request's
/// [`ControlCall::Answer`], encoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EncodedAnswer(serde_json::Value);

impl EncodedAnswer {
    /// Encodes what a request produced.
    pub fn encode<T: Serialize>(answer: &T) -> Result<EncodedAnswer, ControllerError> {
        serde_json::to_value(answer)
            .map(EncodedAnswer)
            .map_err(|error| unreadable("encoded", error))
    }

    /// The answer as the type `T` it was encoded from; an error when another controller (of
    /// another version) answered with something else.
    pub fn decode<T: DeserializeOwned>(self) -> Result<T, ControllerError> {
        serde_json::from_value(self.0).map_err(|error| unreadable("read", error))
    }
}

fn unreadable(done: &str, error: serde_json::Error) -> ControllerError {
    ControllerError::Storage(std::io::Error::other(format!(
        "the controller's answer could not be {done}: {error}"
    )))
}

/// Declares [`ControlRequest`] with one variant per request struct, and each struct's
/// [`ControlCall`].
macro_rules! control_requests {
    ($($(#[$doc:meta])* $request:ident => $answer:ty,)*) => {
        /// A change request, as any controller can decide it and as it travels to the one
        /// leading the quorum.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub enum ControlRequest {
            $($(#[$doc])* $request($request),)*
        }

        impl ControlRequest {
            /// The request's name, for logs.
            pub fn name(&self) -> &'static str {
                match self {
                    $(ControlRequest::$request(_) => stringify!($request),)*
                }
            }
        }

        $(
            impl ControlCall for $request {
                type Answer = $answer;
            }

            impl From<$request> for ControlRequest {
                fn from(request: $request) -> ControlRequest {
                    ControlRequest::$request(request)
                }
            }
        )*
    };
}

control_requests! {
    /// Creates a topic; answered with it.
    CreateTopic => Mutated<TopicImage>,
    /// Deletes a topic; answered with what it was.
    DeleteTopic => Mutated<TopicImage>,
    /// Adds partitions to a topic.
    CreatePartitions => Mutated<()>,
    /// Changes a topic's config overrides.
    AlterTopicConfig => (),
    /// Changes one level of dynamic broker configs.
    AlterBrokerConfig => (),
    /// Registers a broker (at every start); answered with its registration, whose epoch is
    /// new.
    RegisterBroker => BrokerRegistration,
    /// Renews a broker's lease; answered with whether it is fenced.
    Heartbeat => bool,
    /// Changes a partition's ISR as its leader asks; answered with the partition after it.
    AlterPartition => PartitionImage,
    /// Moves a broker's leaderships away and takes it out of every ISR before it stops.
    ControlledShutdown => (),
    /// Starts, replaces or cancels reassignments; answered with each partition's outcome.
    AlterPartitionReassignments => Vec<PartitionOutcome>,
    /// Elects leaders; answered with each partition's outcome.
    ElectLeaders => Vec<PartitionOutcome>,
    /// Reserves a block of producer ids never handed out before: `(first, count)`.
    AllocateProducerIds => (i64, i64),
    /// The metadata quorum as its leader reports it.
    DescribeQuorum => QuorumStatus,
    /// A broker-only node asks to follow the metadata quorum as an observer.
    AddObserver => (),
    /// Sets and removes SCRAM credentials; answered with the deletions that found no
    /// credential (the rest are committed).
    AlterScramCredentials => Vec<ScramDeletion>,
    /// Adds ACLs (those already held are left as they are).
    CreateAcls => (),
    /// Sets and removes client quotas (what would change nothing is left out).
    AlterClientQuotas => (),
    /// Removes the ACLs each filter selects; answered with them, per filter.
    DeleteAcls => Vec<Vec<AclBinding>>,
}

/// The `controller_mutation_rate` a client's topic creations, deletions and partition
/// additions are held to (KIP-599): the partitions each creates or deletes are taken from a
/// token bucket, kept by the controller leading the quorum for whose usage the quota counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MutationQuota {
    /// The user whose usage counts, when the quota is a user's (or the default user's).
    pub user: Option<String>,
    /// The client id whose usage counts, when the quota is a client id's (or the default's).
    pub client_id: Option<String>,
    /// Partitions per second.
    pub rate: f64,
    /// Refuse a change once the bucket is empty (THROTTLING_QUOTA_EXCEEDED), as Kafka does for
    /// CreateTopics v6+, DeleteTopics v5+ and CreatePartitions v3+; else make it and only
    /// throttle the client, as for older versions.
    pub strict: bool,
}

/// What a change held to a [`MutationQuota`] produced, and how long its client is to pause
/// for it (zero within its quota, or without one).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Mutated<T> {
    /// What the change produced.
    pub value: T,
    /// The pause the client's quota calls for, in milliseconds.
    pub throttle_ms: u64,
}

/// Creates a topic with a fresh id; with `validate_only` nothing changes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateTopic {
    /// The topic.
    pub topic: NewTopic,
    /// Check only.
    pub validate_only: bool,
    /// The client's quota for the partitions it creates.
    #[serde(default)]
    pub quota: Option<MutationQuota>,
}

/// Deletes the topic called `name`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeleteTopic {
    /// Its name.
    pub name: String,
    /// The client's quota for the partitions it deletes.
    #[serde(default)]
    pub quota: Option<MutationQuota>,
}

/// Raises topic `name`'s partition count to `total`, the new partitions on `assignments`
/// (one replica list each) or, without them, placed by the controller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatePartitions {
    /// The topic's name.
    pub name: String,
    /// The new partition count.
    pub total: i32,
    /// Replicas of the new partitions, if the client chose them.
    pub assignments: Option<Vec<Vec<i32>>>,
    /// Check only.
    pub validate_only: bool,
    /// The client's quota for the partitions it creates.
    #[serde(default)]
    pub quota: Option<MutationQuota>,
}

/// Changes topic `name`'s config overrides.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlterTopicConfig {
    /// The topic's name.
    pub name: String,
    /// The change.
    pub change: ConfigChange,
    /// Check only.
    pub validate_only: bool,
}

/// Changes dynamic broker configs, cluster-wide (`node_id` `None`) or of one broker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlterBrokerConfig {
    /// The broker, or `None` for the cluster-wide level.
    pub node_id: Option<i32>,
    /// The change.
    pub change: ConfigChange,
    /// Check only.
    pub validate_only: bool,
}

/// Registers broker `node_id` with where clients reach it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterBroker {
    /// The broker's node id.
    pub node_id: i32,
    /// Where clients reach it.
    pub listeners: Vec<BrokerListener>,
    /// Its rack.
    pub rack: Option<String>,
}

/// Renews broker `node_id`'s lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The broker.
    pub node_id: i32,
    /// Its registration's epoch.
    pub broker_epoch: u64,
}

/// Moves broker `node_id`'s leaderships to in-sync replicas before it stops.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlledShutdown {
    /// The broker.
    pub node_id: i32,
    /// Its registration's epoch.
    pub broker_epoch: u64,
}

/// Starts, replaces or cancels reassignments (AlterPartitionReassignments).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlterPartitionReassignments {
    /// The partitions to move (or whose move to cancel).
    pub reassignments: Vec<Reassignment>,
    /// Whether a target may have another replica count.
    pub allow_replication_factor_change: bool,
}

/// Elects leaders (ElectLeaders) for `partitions`, or for every partition with `None` (whose
/// outcomes then leave out those that needed no election).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ElectLeaders {
    /// Preferred or unclean.
    pub election: ElectionType,
    /// The partitions, or `None` for all.
    pub partitions: Option<Vec<(String, i32)>>,
}

/// Sets and removes users' SCRAM credentials (already checked: names, mechanisms,
/// iterations, one change per user).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlterScramCredentials {
    /// Credentials to set.
    pub upserts: Vec<ScramUpsert>,
    /// Credentials to remove.
    pub deletions: Vec<ScramDeletion>,
}

/// Sets and removes client quotas (already checked: entities, keys, values, each entity
/// once).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AlterClientQuotas {
    /// Each entity's changes.
    pub alterations: Vec<QuotaAlteration>,
}

/// Adds ACLs (already checked).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateAcls {
    /// The ACLs.
    pub acls: Vec<AclBinding>,
}

/// Removes every ACL that one of the filters selects.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeleteAcls {
    /// The filters.
    pub filters: Vec<AclFilter>,
}

/// Reserves a block of producer ids.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllocateProducerIds;

/// The metadata quorum as its leader reports it (asked of the leader wherever it is).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DescribeQuorum;

/// A broker-only node asks to follow the quorum as an observer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddObserver {
    /// Its node id.
    pub node_id: i32,
    /// Its controller listener, where the leader replicates the log to it.
    pub address: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_decodes_as_what_it_was_encoded_from() {
        let outcomes = vec![PartitionOutcome {
            topic: "t".into(),
            partition: 3,
            refusal: None,
        }];
        let encoded = EncodedAnswer::encode(&outcomes).expect("encodes");
        let decoded: Vec<PartitionOutcome> = encoded.decode().expect("decodes");
        assert_eq!(decoded, outcomes);
        let epoch = u64::MAX - 7; // broker epochs use all 64 bits
        let encoded = EncodedAnswer::encode(&epoch).expect("encodes");
        let decoded: u64 = encoded.decode().expect("decodes");
        assert_eq!(decoded, epoch);
    }

    #[test]
    fn an_answer_of_another_kind_is_refused_not_misread() {
        let encoded = EncodedAnswer::encode(&(1i64, 1000i64)).expect("encodes");
        let refused = encoded.decode::<TopicImage>();
        assert!(
            matches!(refused, Err(ControllerError::Storage(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn a_request_travels_as_itself() {
        let request = ControlRequest::from(Heartbeat {
            node_id: 2,
            broker_epoch: 77,
        });
        let wire = serde_json::to_string(&request).expect("serializes");
        assert_eq!(wire, r#"{"Heartbeat":{"node_id":2,"broker_epoch":77}}"#);
        let back: ControlRequest = serde_json::from_str(&wire).expect("parses");
        assert!(matches!(
            back,
            ControlRequest::Heartbeat(Heartbeat {
                node_id: 2,
                broker_epoch: 77
            })
        ));
        assert_eq!(back.name(), "Heartbeat");
    }
}
