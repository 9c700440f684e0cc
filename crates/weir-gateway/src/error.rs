//! Errors as the API answers them: an HTTP status and a JSON body
//! `{"error": {"code": "...", "message": "..."}}` whose code is stable (Kafka's error name in
//! snake case for errors the cluster reported, or one of the gateway's own).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kafka_protocol::ResponseError;
use serde::Serialize;
use weir_client::ClientError;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code.
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code: code.to_string(),
            message: message.into(),
        }
    }

    /// 400: the request itself is wrong (a bad parameter, field or value).
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 404: no such resource.
    pub fn not_found(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 503: the node cannot serve this now (not ready, shutting down, no leader).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

/// The JSON of an error: a stable code and a message.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    /// A stable, machine-readable code.
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
}

#[derive(Serialize)]
struct ErrorAnswer {
    error: ErrorBody,
}

impl ApiError {
    /// The error's JSON, without the status.
    pub fn body(self) -> ErrorBody {
        ErrorBody {
            code: self.code,
            message: self.message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        (status, Json(ErrorAnswer { error: self.body() })).into_response()
    }
}

impl From<ClientError> for ApiError {
    fn from(error: ClientError) -> ApiError {
        let message = error.to_string();
        match error {
            ClientError::UnknownTopic(_) => ApiError::not_found("unknown_topic", message),
            ClientError::UnknownPartition { .. } => {
                ApiError::not_found("unknown_partition", message)
            }
            ClientError::InvalidArgument(_) => ApiError::invalid(message),
            ClientError::Timeout(_) => {
                ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", message)
            }
            ClientError::Broker { code, .. } => from_kafka_code(code, message),
            ClientError::BufferFull => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "buffer_full",
                "too many records waiting to be sent; retry later",
            ),
            ClientError::Unreachable(_) | ClientError::Connection { .. } | ClientError::Closed => {
                ApiError::unavailable(message)
            }
            ClientError::Unsupported(_) | ClientError::Protocol(_) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "protocol_error", message)
            }
            // The gateway's own login to the cluster, not the caller's.
            ClientError::Authentication { .. } | ClientError::Tls { .. } => {
                ApiError::new(StatusCode::BAD_GATEWAY, "cluster_login_failed", message)
            }
        }
    }
}

/// The answer for a Kafka error code: its name in snake case, with the status that fits.
fn from_kafka_code(code: i16, message: String) -> ApiError {
    let error = ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code));
    use ResponseError as E;
    let status = match error {
        E::UnknownTopicOrPartition | E::UnknownTopicId | E::GroupIdNotFound => {
            StatusCode::NOT_FOUND
        }
        E::TopicAlreadyExists
        | E::NonEmptyGroup
        | E::RebalanceInProgress
        | E::IllegalGeneration => StatusCode::CONFLICT,
        E::MessageTooLarge | E::RecordListTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        E::OffsetOutOfRange => StatusCode::RANGE_NOT_SATISFIABLE,
        E::InvalidTopicException
        | E::InvalidPartitions
        | E::InvalidReplicationFactor
        | E::InvalidReplicaAssignment
        | E::InvalidConfig
        | E::InvalidRequest
        | E::InvalidRecord
        | E::InvalidTimestamp
        | E::PolicyViolation
        | E::CorruptMessage
        | E::InvalidRequiredAcks
        | E::InvalidGroupId
        | E::UnsupportedForMessageFormat => StatusCode::BAD_REQUEST,
        E::TopicAuthorizationFailed | E::ClusterAuthorizationFailed | E::TopicDeletionDisabled => {
            StatusCode::FORBIDDEN
        }
        E::RequestTimedOut => StatusCode::GATEWAY_TIMEOUT,
        E::ThrottlingQuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
        E::KafkaStorageError => StatusCode::INSUFFICIENT_STORAGE,
        _ if error.is_retriable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_GATEWAY,
    };
    ApiError {
        status,
        code: snake_case(&format!("{error:?}")),
        message,
    }
}

/// `TopicAlreadyExists` → `topic_already_exists`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_errors_keep_their_name_and_get_a_fitting_status() {
        let exists = from_kafka_code(ResponseError::TopicAlreadyExists.code(), "x".into());
        assert_eq!(exists.status, StatusCode::CONFLICT);
        assert_eq!(exists.code, "topic_already_exists");
        let invalid = from_kafka_code(ResponseError::InvalidReplicationFactor.code(), "x".into());
        assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
        assert_eq!(invalid.code, "invalid_replication_factor");
        let retriable = from_kafka_code(ResponseError::NotEnoughReplicas.code(), "x".into());
        assert_eq!(retriable.status, StatusCode::SERVICE_UNAVAILABLE);
        let throttled = from_kafka_code(ResponseError::ThrottlingQuotaExceeded.code(), "x".into());
        assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(throttled.code, "throttling_quota_exceeded");
    }
}
