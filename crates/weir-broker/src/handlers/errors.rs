//! Kafka errors as the handlers answer them, mapped from internal errors at the handler
//! boundary.

use kafka_protocol::ResponseError;
use weir_coordinator::share_coordinator::ShareStateError;
use weir_coordinator::transaction::TxnError;
use weir_coordinator::GroupError;
use weir_log::{BatchError, LogError, RecordError};
use weir_metadata::ControllerError;

/// Kafka's standard message for INVALID_REQUEST, which it answers where a request names
/// something the protocol does not define (an unknown FindCoordinator key type, say).
pub const INVALID_REQUEST_MESSAGE: &str = "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.";

/// Kafka's message for CLUSTER_AUTHORIZATION_FAILED.
pub const CLUSTER_DENIED: &str = "Cluster authorization failed.";

/// A Kafka error code and the message a client sees (in versions that carry one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// The error code.
    pub error: ResponseError,
    /// What went wrong, for the client and the log.
    pub message: String,
    /// The records of a refused batch to blame, for Produce's `record_errors` (v8+).
    pub records: Vec<RecordError>,
}

impl ErrorReply {
    /// An error with a message.
    pub fn new(error: ResponseError, message: impl Into<String>) -> ErrorReply {
        ErrorReply {
            error,
            message: message.into(),
            records: Vec::new(),
        }
    }

    /// The wire code.
    pub fn code(&self) -> i16 {
        self.error.code()
    }
}

impl From<&LogError> for ErrorReply {
    fn from(error: &LogError) -> ErrorReply {
        let code = match error {
            LogError::Batch(BatchError::Corrupt(_)) => ResponseError::CorruptMessage,
            LogError::Batch(BatchError::Invalid(_)) | LogError::Unsupported(_) => {
                ResponseError::InvalidRecord
            }
            LogError::Batch(BatchError::Timestamp { .. }) => ResponseError::InvalidTimestamp,
            LogError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            LogError::RecordListTooLarge { .. } => ResponseError::RecordListTooLarge,
            LogError::OutOfOrderSequence => ResponseError::OutOfOrderSequenceNumber,
            LogError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
            LogError::NotInTransaction => ResponseError::InvalidTxnState,
            LogError::CoordinatorFenced { .. } => ResponseError::TransactionCoordinatorFenced,
            LogError::OffsetOutOfRange { .. } | LogError::NonContiguous { .. } => {
                ResponseError::OffsetOutOfRange
            }
            LogError::Deleted => ResponseError::UnknownTopicOrPartition,
            LogError::NotLeader => ResponseError::NotLeaderOrFollower,
            LogError::Corrupt { .. } | LogError::OutOfResources(_) | LogError::Io(_) => {
                ResponseError::KafkaStorageError
            }
        };
        let mut reply = ErrorReply::new(code, error.to_string());
        if let LogError::Batch(BatchError::Timestamp { records, .. }) = error {
            reply.records = records.clone();
        }
        reply
    }
}

impl From<&ControllerError> for ErrorReply {
    fn from(error: &ControllerError) -> ErrorReply {
        let code = match error {
            ControllerError::TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists,
            ControllerError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
            ControllerError::InvalidTopic(_) => ResponseError::InvalidTopicException,
            ControllerError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            ControllerError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            ControllerError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            ControllerError::InvalidConfig(_) => ResponseError::InvalidConfig,
            ControllerError::InvalidRequest(_) => ResponseError::InvalidRequest,
            ControllerError::NotAppliedInTime(_) => ResponseError::RequestTimedOut,
            ControllerError::ThrottlingQuotaExceeded(_) => ResponseError::ThrottlingQuotaExceeded,
            ControllerError::NotController(_) => ResponseError::NotController,
            ControllerError::StaleBrokerEpoch(_) => ResponseError::StaleBrokerEpoch,
            ControllerError::FencedLeaderEpoch(_) => ResponseError::FencedLeaderEpoch,
            ControllerError::InvalidUpdateVersion(_) => ResponseError::InvalidUpdateVersion,
            ControllerError::IneligibleReplica(_) => ResponseError::IneligibleReplica,
            ControllerError::Storage(_) | ControllerError::Fatal(_) => {
                ResponseError::KafkaStorageError
            }
        };
        ErrorReply::new(code, error.to_string())
    }
}

/// The Kafka error a group coordinator refusal is answered with.
pub fn group_error(error: GroupError) -> ResponseError {
    match error {
        GroupError::CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
        GroupError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        GroupError::NotCoordinator => ResponseError::NotCoordinator,
        GroupError::InvalidGroupId => ResponseError::InvalidGroupId,
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
        GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
        GroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
        GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
        GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
        GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
        GroupError::OffsetMetadataTooLarge => ResponseError::OffsetMetadataTooLarge,
        GroupError::InvalidCommitOffsetSize => ResponseError::InvalidCommitOffsetSize,
        GroupError::InvalidRequest => ResponseError::InvalidRequest,
        GroupError::UnsupportedVersion => ResponseError::UnsupportedVersion,
        GroupError::FencedMemberEpoch => ResponseError::FencedMemberEpoch,
        GroupError::StaleMemberEpoch => ResponseError::StaleMemberEpoch,
        GroupError::UnsupportedAssignor => ResponseError::UnsupportedAssignor,
        GroupError::UnreleasedInstanceId => ResponseError::UnreleasedInstanceId,
        GroupError::InvalidRegularExpression => ResponseError::InvalidRegularExpression,
        GroupError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch,
        GroupError::UnstableOffsetCommit => ResponseError::UnstableOffsetCommit,
        GroupError::NotInTransaction => ResponseError::InvalidTxnState,
        GroupError::TransactionCoordinatorFenced => ResponseError::TransactionCoordinatorFenced,
    }
}

/// The Kafka error for a transaction coordinator refusal.
pub fn txn_error(error: TxnError) -> ResponseError {
    match error {
        TxnError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        TxnError::NotCoordinator => ResponseError::NotCoordinator,
        TxnError::CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
        TxnError::InvalidRequest => ResponseError::InvalidRequest,
        TxnError::InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
        TxnError::ProducerFenced => ResponseError::ProducerFenced,
        TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
        TxnError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        TxnError::InvalidTxnState => ResponseError::InvalidTxnState,
        TxnError::TransactionAbortable => ResponseError::TransactionAbortable,
        TxnError::RecordTooLarge => ResponseError::RecordListTooLarge,
    }
}

/// The Kafka error of a share-state request that failed.
pub fn share_state_error(error: ShareStateError) -> ResponseError {
    match error {
        ShareStateError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        ShareStateError::NotCoordinator => ResponseError::NotCoordinator,
        ShareStateError::CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
        ShareStateError::FencedLeaderEpoch => ResponseError::FencedLeaderEpoch,
        ShareStateError::FencedStateEpoch => ResponseError::FencedStateEpoch,
        ShareStateError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        ShareStateError::InvalidRequest => ResponseError::InvalidRequest,
    }
}

/// The wire code of a group result (0 for success).
pub fn group_code(result: Result<(), GroupError>) -> i16 {
    result.map_or_else(|e| group_error(e).code(), |()| 0)
}
