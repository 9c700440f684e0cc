//! DeleteRecords (key 21, v0–2): each partition's leader moves its log start offset up to the
//! offset asked (-1: the high watermark), checkpointed before it counts; the records below are
//! no longer read, listed or replicated, followers follow the leader's start, and retention
//! deletes the segments wholly below it. Each partition is answered with its low watermark
//! (the smallest log start over the leader and its in-sync followers) once that reaches the
//! offset, or REQUEST_TIMED_OUT at the request's timeout.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::is_internal_topic;

use crate::broker::Broker;
use crate::handlers::errors::ErrorReply;
use crate::handlers::led_partition;

/// How often a partition's low watermark is looked at while the answer waits for it.
const LOW_WATERMARK_POLL: Duration = Duration::from_millis(10);
/// The longest a request may ask to wait for the followers.
const TIMEOUT_MAX: Duration = Duration::from_secs(300);

/// DeleteRecords: every partition at once; one answer when all are done or timed out.
pub async fn handle(
    broker: &Arc<Broker>,
    request: DeleteRecordsRequest,
    access: &Access,
) -> DeleteRecordsResponse {
    let timeout =
        Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0)).min(TIMEOUT_MAX);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut response = DeleteRecordsResponse::default();
    for topic in request.topics {
        let name = topic.name.as_str();
        let allowed = access.topic(AclOperation::Delete, name);
        let partitions = topic.partitions.iter().map(|asked| async move {
            let mut result = DeleteRecordsPartitionResult::default();
            result.partition_index = asked.partition_index;
            let deleted = match allowed {
                true => delete(broker, name, asked.partition_index, asked.offset, deadline).await,
                false => Err((ResponseError::TopicAuthorizationFailed, -1)),
            };
            match deleted {
                Ok(low_watermark) => result.low_watermark = low_watermark,
                Err((error, low_watermark)) => {
                    result.low_watermark = low_watermark;
                    result.error_code = error.code();
                }
            }
            result
        });
        let mut answered = DeleteRecordsTopicResult::default();
        answered.partitions = futures_util::future::join_all(partitions).await;
        answered.name = topic.name;
        response.topics.push(answered);
    }
    response
}

/// Deletes the records of `topic`-`index` below `offset` (-1: the high watermark) and waits
/// until the low watermark reaches it; the low watermark, or the error with the low watermark
/// known then (-1 when none).
async fn delete(
    broker: &Broker,
    topic: &str,
    index: i32,
    offset: i64,
    deadline: tokio::time::Instant,
) -> Result<i64, (ResponseError, i64)> {
    if is_internal_topic(topic) {
        return Err((ResponseError::InvalidTopicException, -1));
    }
    let partition = led_partition(broker, topic, index).map_err(|error| (error, -1))?;
    if !partition.settings().log.retention_deletes {
        // A compacted topic's records go by key only, as Kafka's policy says.
        return Err((ResponseError::PolicyViolation, -1));
    }
    let target = if offset == -1 {
        partition.log().high_watermark()
    } else {
        offset
    };
    let deleting = partition.clone();
    let deleted = tokio::task::spawn_blocking(move || deleting.delete_records_before(target))
        .await
        .map_err(|_| (ResponseError::UnknownServerError, -1))?;
    deleted.map_err(|error| (ErrorReply::from(&error).error, -1))?;
    loop {
        let low_watermark = partition.low_watermark();
        if low_watermark >= target {
            return Ok(low_watermark);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err((ResponseError::RequestTimedOut, low_watermark));
        }
        tokio::time::sleep(LOW_WATERMARK_POLL).await;
    }
}
