//! The client's errors.

use kafka_protocol::ResponseError;

/// Everything a client call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// No broker answered at any of the addresses given.
    #[error("cannot reach any broker at {0}")]
    Unreachable(String),
    /// A connection failed or closed mid-request.
    #[error("connection to {broker} failed: {reason}")]
    Connection {
        /// The broker's address.
        broker: String,
        /// What went wrong.
        reason: String,
    },
    /// TLS with the broker failed: its certificate is not trusted or does not name the host,
    /// or it refused this client's.
    #[error("TLS with {broker} failed: {reason}")]
    Tls {
        /// The broker's address.
        broker: String,
        /// What went wrong.
        reason: String,
    },
    /// The broker refused the SASL login.
    #[error("authentication of {user} failed: {reason}")]
    Authentication {
        /// The user the client logged in as.
        user: String,
        /// The broker's reason.
        reason: String,
    },
    /// No answer within the configured time.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// The broker answered with a Kafka error code.
    #[error("broker error {code} ({name}){}", message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        /// The Kafka error code.
        code: i16,
        /// Its name, as Kafka spells it.
        name: String,
        /// The broker's message, when it sent one.
        message: Option<String>,
    },
    /// The topic does not exist (and was not auto-created).
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    /// The partition does not exist.
    #[error("unknown partition {partition} of topic {topic}")]
    UnknownPartition {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
    },
    /// The broker does not support an API or version this call needs.
    #[error("the broker does not support {0}")]
    Unsupported(String),
    /// A malformed message on the wire, or a record that cannot be encoded.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The producer's buffer is full and it is configured not to wait.
    #[error("producer buffer full")]
    BufferFull,
    /// The producer or consumer was closed.
    #[error("client closed")]
    Closed,
    /// A bad argument (invalid topic name, negative partition count…).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ClientError {
    /// The error for a Kafka error code, or `None` for code 0.
    pub fn from_code(code: i16, message: Option<String>) -> Option<ClientError> {
        if code == 0 {
            return None;
        }
        let name = format!(
            "{:?}",
            ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code))
        );
        Some(ClientError::Broker {
            code,
            name,
            message,
        })
    }

    /// True when retrying the same call may succeed (leadership moved, broker restarting).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Connection { .. }
            | ClientError::Timeout(_)
            | ClientError::Unreachable(_) => true,
            ClientError::Broker { code, .. } => {
                ResponseError::try_from_code(*code).is_some_and(|e| e.is_retriable())
            }
            _ => false,
        }
    }

    /// True when a group member's request failed because its group moved on (a rebalance,
    /// a newer generation, an expired or fenced membership): the member rejoins and carries
    /// on; a commit refused this way is not an error of the application's.
    pub fn is_rebalance(&self) -> bool {
        matches!(
            self.code().and_then(ResponseError::try_from_code),
            Some(
                ResponseError::RebalanceInProgress
                    | ResponseError::IllegalGeneration
                    | ResponseError::UnknownMemberId
                    | ResponseError::FencedInstanceId
            )
        )
    }

    /// The Kafka error code, when the broker sent one.
    pub fn code(&self) -> Option<i16> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Shorthand for results of client calls.
pub type Result<T> = std::result::Result<T, ClientError>;
