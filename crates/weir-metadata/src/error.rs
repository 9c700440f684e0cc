//! Why a metadata change was refused.

/// Why a metadata change was refused; each maps to one Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// CreateTopics for a name in use.
    #[error("Topic '{0}' already exists.")]
    TopicAlreadyExists(String),
    /// The topic does not exist.
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    /// Illegal topic name (the message says why, in Kafka's words).
    #[error("{0}")]
    InvalidTopic(String),
    /// Bad partition count (the message says why, in Kafka's words).
    #[error("{0}")]
    InvalidPartitions(String),
    /// Bad replication factor (the message says why, in Kafka's words).
    #[error("{0}")]
    InvalidReplicationFactor(String),
    /// A manual replica assignment the cluster cannot honour (the message says why, in
    /// Kafka's words).
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    /// Unsupported config key or bad value (the message says why, in Kafka's words).
    #[error("{0}")]
    InvalidConfig(String),
    /// A request Kafka refuses as a whole, such as a static broker config set at runtime (the
    /// message says why, in Kafka's words).
    #[error("{0}")]
    InvalidRequest(String),
    /// This controller cannot commit changes now: another controller leads the quorum, or
    /// none does yet (the client retries, as after Kafka's NOT_CONTROLLER).
    #[error("{0}")]
    NotController(String),
    /// A broker spoke for a registration that is no longer its current one (it restarted):
    /// it must register again.
    #[error("{0}")]
    StaleBrokerEpoch(String),
    /// An ISR change from a leader whose leadership the controller has since moved on from.
    #[error("{0}")]
    FencedLeaderEpoch(String),
    /// An ISR change made against an older state of the partition (the leader re-reads it).
    #[error("{0}")]
    InvalidUpdateVersion(String),
    /// An ISR change adding a replica that may not be in sync (fenced, or not a replica).
    #[error("{0}")]
    IneligibleReplica(String),
    /// The client's `controller_mutation_rate` is used up: the change was not made, and the
    /// client is to wait this many milliseconds before its quota allows it.
    #[error("The throttling quota has been exceeded.")]
    ThrottlingQuotaExceeded(u64),
    /// The change was committed but the broker did not apply it within the wait (it is
    /// applied later; the client may retry and find it done).
    #[error("the change was committed but not yet applied here after {0} ms")]
    NotAppliedInTime(u64),
    /// The metadata log could not be written (a full disk): the change did not happen.
    #[error("metadata change not written: {0}")]
    Storage(std::io::Error),
    /// The metadata log failed in a way that leaves its durable state unknown: the process must
    /// stop (the broker exits with its storage-failure code).
    #[error("metadata log failed: {0}")]
    Fatal(std::io::Error),
}
