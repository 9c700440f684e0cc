//! `weir-coordinator` holds Kafka's coordinators on one runtime: the group coordinator for the
//! classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and for the consumer group
//! protocol of KIP-848 (ConsumerGroupHeartbeat with server-side assignors), committed
//! offsets, and the admin views of groups (list, describe, delete, delete offsets); and the
//! transaction coordinator ([`transaction`]: transactional producers' ids and epochs); and
//! share groups (KIP-932): their membership ([`share_group`], ShareGroupHeartbeat and
//! ShareGroupDescribe) and the share-partition state machine ([`share_partition`]), which a
//! partition's leader keeps per share group, and the share coordinator
//! ([`share_coordinator`]), which keeps that state durable in `__share_group_state`.
//!
//! It is a control plane beside the data path: produce and fetch never wait for it. Group
//! state lives in the internal topic `__consumer_offsets`, in Kafka's record formats
//! ([`records`]), transactions in `__transaction_state` ([`transaction::records`]); each is
//! read and written only through the [`CoordinatorLog`] trait — the
//! broker's partition API, as any client of the log would use it. A group belongs to
//! partition `abs(javaHash(group)) % partitions` of that topic; the coordinator loads a
//! partition into memory before serving its groups, answers from memory, and acknowledges a
//! commit only once its record is appended and as durable as the topic's policy makes it.
//!
//! It never touches partition data other than its own topic, never knows the wire format
//! (the broker's handlers translate requests into calls here), and never blocks on anything
//! but the log.

pub mod assignors;
pub mod consumer_group;
mod coordinator;
pub mod group;
pub mod limits;
pub mod records;
mod runtime;
pub mod share_coordinator;
pub mod share_group;
pub mod share_partition;
pub mod state;
mod subscription;
#[cfg(test)]
mod test_log;
pub mod transaction;

pub use consumer_group::{
    pattern_problem, ConsumerGroupDescription, ConsumerHeartbeat, ConsumerMemberDescription,
    HeartbeatReply, TopicCatalog,
};
pub use coordinator::{
    CommitEntry, CoordinatorSettings, FetchedOffset, GroupCoordinator, GroupListing, GroupSummary,
    TxnCommit, OFFSETS_TOPIC,
};
pub use group::{
    JoinOutcome, JoinRequest, JoinedMember, MemberDescription, SyncAssignment, SyncOutcome,
    SyncRequest,
};
pub use limits::{ConsumerGroupSettings, GroupLimits, MetadataBounds, ShareGroupSettings};
pub use runtime::{
    partition_for, Appended, CoordinatorLog, LogEntry, Pending, ProducerIdAndEpoch, RecordVisitor,
    RuntimeError, StoredRecord, TopicRuntime, TxnAppend,
};
pub use state::GroupState;

/// Why a group request failed; each maps to the Kafka error of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The partition holding the group is still being loaded.
    #[error("the coordinator is loading the group's partition")]
    CoordinatorLoadInProgress,
    /// Another broker leads the group's partition of the offsets topic: the client finds
    /// the coordinator again.
    #[error("this broker is not the group's coordinator")]
    NotCoordinator,
    /// The offsets topic is not there yet, or a write to it failed: try again.
    #[error("the group coordinator is not available")]
    CoordinatorNotAvailable,
    /// An empty or otherwise unusable group id.
    #[error("invalid group id")]
    InvalidGroupId,
    /// The member id is not (or no longer) in the group.
    #[error("unknown member id")]
    UnknownMemberId,
    /// The request names a generation other than the group's.
    #[error("illegal generation")]
    IllegalGeneration,
    /// The group is rebalancing: rejoin.
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    /// The session timeout is outside `group.min/max.session.timeout.ms`.
    #[error("session timeout outside the broker's allowed range")]
    InvalidSessionTimeout,
    /// No protocol the member shares with the group, or another protocol type.
    #[error("inconsistent group protocol")]
    InconsistentGroupProtocol,
    /// A new member must rejoin with the member id it was given (KIP-394).
    #[error("member id required")]
    MemberIdRequired,
    /// A static member's instance id is now held by a newer member id.
    #[error("fenced group instance id")]
    FencedInstanceId,
    /// The group already has `group.max.size` members.
    #[error("the group has reached its maximum size")]
    GroupMaxSizeReached,
    /// The group does not exist.
    #[error("group id not found")]
    GroupIdNotFound,
    /// The group still has members.
    #[error("the group is not empty")]
    NonEmptyGroup,
    /// The group's members subscribe to the topic whose offsets were to be deleted.
    #[error("the group is subscribed to the topic")]
    GroupSubscribedToTopic,
    /// Offset metadata longer than `offset.metadata.max.bytes`.
    #[error("offset metadata too large")]
    OffsetMetadataTooLarge,
    /// The commit does not fit in one batch of the offsets topic.
    #[error("offset commit too large")]
    InvalidCommitOffsetSize,
    /// A request the protocol does not allow (a join without its subscription, …).
    #[error("invalid request")]
    InvalidRequest,
    /// A consumer-protocol member must commit with OffsetCommit v9 or later.
    #[error("a consumer group protocol member must use OffsetCommit version 9 or later")]
    UnsupportedVersion,
    /// The member's epoch is not the group's idea of it: it must rejoin.
    #[error("the member epoch is fenced")]
    FencedMemberEpoch,
    /// The member's epoch is older than its current one: retry after a heartbeat.
    #[error("the member epoch is stale")]
    StaleMemberEpoch,
    /// A `ServerAssignor` the coordinator does not have.
    #[error("unsupported assignor")]
    UnsupportedAssignor,
    /// A static member's instance id is held by another member that has not left.
    #[error("the instance id is still used by another member")]
    UnreleasedInstanceId,
    /// A `SubscribedTopicRegex` that does not compile.
    #[error("invalid regular expression")]
    InvalidRegularExpression,
    /// A transactional offset commit of a producer epoch older than the one the offsets
    /// topic's partition knows: the producer was fenced.
    #[error("the producer's epoch is fenced")]
    InvalidProducerEpoch,
    /// Offsets of a transaction not yet committed or aborted (OffsetFetch with
    /// `require_stable`): try again once it ends.
    #[error("the partition has offsets of a transaction still open")]
    UnstableOffsetCommit,
    /// A transactional offset commit whose producer's transaction does not hold the group's
    /// partition of the offsets topic (it was never added, or the transaction ended).
    #[error("the group's offsets partition is not in the producer's transaction")]
    NotInTransaction,
    /// A transaction marker from an older transaction coordinator than the one that wrote
    /// the producer's last marker on the group's offsets partition.
    #[error("the marker's transaction coordinator is fenced")]
    TransactionCoordinatorFenced,
}

impl From<RuntimeError> for GroupError {
    fn from(error: RuntimeError) -> GroupError {
        match error {
            RuntimeError::NotAvailable => GroupError::CoordinatorNotAvailable,
            RuntimeError::NotCoordinator => GroupError::NotCoordinator,
            RuntimeError::LoadInProgress => GroupError::CoordinatorLoadInProgress,
            RuntimeError::TooLarge => GroupError::InvalidCommitOffsetSize,
            RuntimeError::ProducerFenced => GroupError::InvalidProducerEpoch,
            RuntimeError::NotInTransaction => GroupError::NotInTransaction,
            RuntimeError::CoordinatorFenced => GroupError::TransactionCoordinatorFenced,
        }
    }
}
