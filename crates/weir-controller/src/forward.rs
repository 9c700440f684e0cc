//! Changes asked of a controller that does not lead the quorum go to the one that does, as
//! Kafka's brokers forward to the active controller: the request travels whole (the leader
//! validates it against the newest image, so two brokers cannot both create one topic), and
//! the answer comes back with the `applied_count` of the image that holds the change. The
//! request is `weir_metadata::requests::ControlRequest`; a refusal travels as a [`WireError`].

use serde::{Deserialize, Serialize};
use weir_metadata::ControllerError;

/// A refusal as it travels between controllers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireError {
    /// [`ControllerError::TopicAlreadyExists`].
    TopicAlreadyExists(String),
    /// [`ControllerError::UnknownTopic`].
    UnknownTopic(String),
    /// [`ControllerError::InvalidTopic`].
    InvalidTopic(String),
    /// [`ControllerError::InvalidPartitions`].
    InvalidPartitions(String),
    /// [`ControllerError::InvalidReplicationFactor`].
    InvalidReplicationFactor(String),
    /// [`ControllerError::InvalidReplicaAssignment`].
    InvalidReplicaAssignment(String),
    /// [`ControllerError::InvalidConfig`].
    InvalidConfig(String),
    /// [`ControllerError::InvalidRequest`].
    InvalidRequest(String),
    /// [`ControllerError::NotController`].
    NotController(String),
    /// [`ControllerError::StaleBrokerEpoch`].
    StaleBrokerEpoch(String),
    /// [`ControllerError::FencedLeaderEpoch`].
    FencedLeaderEpoch(String),
    /// [`ControllerError::InvalidUpdateVersion`].
    InvalidUpdateVersion(String),
    /// [`ControllerError::IneligibleReplica`].
    IneligibleReplica(String),
    /// [`ControllerError::ThrottlingQuotaExceeded`].
    ThrottlingQuotaExceeded(u64),
    /// The leader could not write or apply the change (its storage, or it stopped): here,
    /// the change did not happen.
    NotWritten(String),
}

impl From<ControllerError> for WireError {
    fn from(error: ControllerError) -> WireError {
        match error {
            ControllerError::TopicAlreadyExists(m) => WireError::TopicAlreadyExists(m),
            ControllerError::UnknownTopic(m) => WireError::UnknownTopic(m),
            ControllerError::InvalidTopic(m) => WireError::InvalidTopic(m),
            ControllerError::InvalidPartitions(m) => WireError::InvalidPartitions(m),
            ControllerError::InvalidReplicationFactor(m) => WireError::InvalidReplicationFactor(m),
            ControllerError::InvalidReplicaAssignment(m) => WireError::InvalidReplicaAssignment(m),
            ControllerError::InvalidConfig(m) => WireError::InvalidConfig(m),
            ControllerError::InvalidRequest(m) => WireError::InvalidRequest(m),
            ControllerError::NotController(m) => WireError::NotController(m),
            ControllerError::StaleBrokerEpoch(m) => WireError::StaleBrokerEpoch(m),
            ControllerError::FencedLeaderEpoch(m) => WireError::FencedLeaderEpoch(m),
            ControllerError::InvalidUpdateVersion(m) => WireError::InvalidUpdateVersion(m),
            ControllerError::IneligibleReplica(m) => WireError::IneligibleReplica(m),
            ControllerError::ThrottlingQuotaExceeded(ms) => WireError::ThrottlingQuotaExceeded(ms),
            other @ (ControllerError::NotAppliedInTime(_)
            | ControllerError::Storage(_)
            | ControllerError::Fatal(_)) => WireError::NotWritten(other.to_string()),
        }
    }
}

impl From<WireError> for ControllerError {
    fn from(error: WireError) -> ControllerError {
        match error {
            WireError::TopicAlreadyExists(m) => ControllerError::TopicAlreadyExists(m),
            WireError::UnknownTopic(m) => ControllerError::UnknownTopic(m),
            WireError::InvalidTopic(m) => ControllerError::InvalidTopic(m),
            WireError::InvalidPartitions(m) => ControllerError::InvalidPartitions(m),
            WireError::InvalidReplicationFactor(m) => ControllerError::InvalidReplicationFactor(m),
            WireError::InvalidReplicaAssignment(m) => ControllerError::InvalidReplicaAssignment(m),
            WireError::InvalidConfig(m) => ControllerError::InvalidConfig(m),
            WireError::InvalidRequest(m) => ControllerError::InvalidRequest(m),
            WireError::NotController(m) => ControllerError::NotController(m),
            WireError::StaleBrokerEpoch(m) => ControllerError::StaleBrokerEpoch(m),
            WireError::FencedLeaderEpoch(m) => ControllerError::FencedLeaderEpoch(m),
            WireError::InvalidUpdateVersion(m) => ControllerError::InvalidUpdateVersion(m),
            WireError::IneligibleReplica(m) => ControllerError::IneligibleReplica(m),
            WireError::ThrottlingQuotaExceeded(ms) => ControllerError::ThrottlingQuotaExceeded(ms),
            // The remote failure is not this node's: the change is refused here, not fatal.
            WireError::NotWritten(m) => ControllerError::Storage(std::io::Error::other(m)),
        }
    }
}
