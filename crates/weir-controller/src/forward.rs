//! Changes asked of a controller that does not lead the quorum go to the one that does, as
//! Kafka's brokers forward to the active controller: the request travels whole (the leader
//! validates it against the newest image, so two brokers cannot both create one topic), and
//! the answer comes back with the `applied_count` of the image that holds the change.

use serde::{Deserialize, Serialize};
use weir_metadata::{
    AlterPartition, BrokerListener, BrokerRegistration, ConfigChange, ControllerError,
    ElectionType, NewTopic, PartitionImage, PartitionOutcome, QuorumStatus, Reassignment,
    TopicImage,
};

/// A change request, as any controller can decide it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ControlRequest {
    /// [`crate::Controller::create_topic`].
    CreateTopic {
        /// The topic.
        topic: NewTopic,
        /// Check only.
        validate_only: bool,
    },
    /// [`crate::Controller::delete_topic`].
    DeleteTopic {
        /// Its name.
        name: String,
    },
    /// [`crate::Controller::create_partitions`].
    CreatePartitions {
        /// The topic's name.
        name: String,
        /// The new partition count.
        total: i32,
        /// Replicas of the new partitions, if the client chose them.
        assignments: Option<Vec<Vec<i32>>>,
        /// Check only.
        validate_only: bool,
    },
    /// [`crate::Controller::alter_topic_config`].
    AlterTopicConfig {
        /// The topic's name.
        name: String,
        /// The change.
        change: ConfigChange,
        /// Check only.
        validate_only: bool,
    },
    /// [`crate::Controller::alter_broker_config`].
    AlterBrokerConfig {
        /// The broker, or `None` for the cluster-wide level.
        node_id: Option<i32>,
        /// The change.
        change: ConfigChange,
        /// Check only.
        validate_only: bool,
    },
    /// [`crate::Controller::register_broker`].
    RegisterBroker {
        /// The broker's node id.
        node_id: i32,
        /// Where clients reach it.
        listeners: Vec<BrokerListener>,
        /// Its rack.
        rack: Option<String>,
    },
    /// [`crate::Controller::allocate_producer_ids`].
    AllocateProducerIds,
    /// [`crate::Controller::heartbeat`].
    Heartbeat {
        /// The broker.
        node_id: i32,
        /// Its registration's epoch.
        broker_epoch: u64,
    },
    /// [`crate::Controller::alter_partition`].
    AlterPartition(AlterPartition),
    /// [`crate::Controller::controlled_shutdown`].
    ControlledShutdown {
        /// The broker.
        node_id: i32,
        /// Its registration's epoch.
        broker_epoch: u64,
    },
    /// The quorum as its leader sees it.
    QuorumStatus,
    /// [`crate::Controller::alter_partition_reassignments`].
    AlterPartitionReassignments {
        /// The partitions to move (or whose move to cancel).
        reassignments: Vec<Reassignment>,
        /// Whether a target may have another replica count.
        allow_replication_factor_change: bool,
    },
    /// A broker-only node asks to follow the quorum as an observer.
    AddObserver {
        /// Its node id.
        node_id: i32,
        /// Its controller listener, where the leader replicates the log to it.
        address: String,
    },
    /// [`crate::Controller::elect_leaders`].
    ElectLeaders {
        /// Preferred or unclean.
        election: ElectionType,
        /// The partitions, or `None` for all.
        partitions: Option<Vec<(String, i32)>>,
    },
}

/// What a change produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ControlValue {
    /// A created or deleted topic.
    Topic(TopicImage),
    /// A broker's registration.
    Broker(BrokerRegistration),
    /// A block of producer ids: first and count.
    ProducerIds(i64, i64),
    /// The quorum's state.
    Quorum(QuorumStatus),
    /// A heartbeat's answer: whether the broker is fenced.
    Heartbeat {
        /// Fenced: it leads nothing and is in no ISR.
        fenced: bool,
    },
    /// A partition after a change.
    Partition(PartitionImage),
    /// Each partition's outcome of a batch request.
    Outcomes(Vec<PartitionOutcome>),
    /// Nothing beyond success.
    Done,
}

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
            // The remote failure is not this node's: the change is refused here, not fatal.
            WireError::NotWritten(m) => ControllerError::Storage(std::io::Error::other(m)),
        }
    }
}
