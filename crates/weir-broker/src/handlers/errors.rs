//! Mapping internal errors to Kafka error codes, at the handler boundary.

use kafka_protocol::ResponseError;
use weir_controller::ControllerError;
use weir_log::{BatchError, LogError};

/// The Kafka error code for a log error.
pub fn log_error_code(error: &LogError) -> i16 {
    match error {
        LogError::Batch(BatchError::CorruptCrc | BatchError::Malformed) => {
            ResponseError::CorruptMessage.code()
        }
        LogError::Batch(BatchError::UnsupportedMagic(_)) => {
            ResponseError::UnsupportedForMessageFormat.code()
        }
        LogError::Batch(BatchError::Invalid(_)) | LogError::Unsupported(_) => {
            ResponseError::InvalidRecord.code()
        }
        LogError::MessageTooLarge { .. } => ResponseError::MessageTooLarge.code(),
        LogError::OutOfOrderSequence => ResponseError::OutOfOrderSequenceNumber.code(),
        LogError::InvalidProducerEpoch => ResponseError::InvalidProducerEpoch.code(),
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange.code(),
        LogError::Corrupt { .. } | LogError::Io(_) => ResponseError::KafkaStorageError.code(),
    }
}

/// The Kafka error code for a refused metadata change.
pub fn controller_error_code(error: &ControllerError) -> i16 {
    match error {
        ControllerError::TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists.code(),
        ControllerError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition.code(),
        ControllerError::InvalidTopic(_) => ResponseError::InvalidTopicException.code(),
        ControllerError::InvalidPartitions(_) => ResponseError::InvalidPartitions.code(),
        ControllerError::InvalidReplicationFactor(_) => {
            ResponseError::InvalidReplicationFactor.code()
        }
        ControllerError::InvalidConfig(_) => ResponseError::InvalidConfig.code(),
        ControllerError::Io(_) => ResponseError::UnknownServerError.code(),
    }
}
