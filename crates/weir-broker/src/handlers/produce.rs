//! Produce (key 0), v3–11: validate and append each partition's batch, then answer once the
//! writes are as durable as `acks` and the topic's `flush.policy` require.

use std::sync::Arc;

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::ResponseError;
use weir_log::batch::BatchHeader;
use weir_log::LogError;

use crate::bad_input::warn_bad_input;
use crate::broker::Broker;
use crate::handlers::errors::log_error_code;
use crate::handlers::str_bytes;
use crate::partition::{storage_failure, Partition};

/// Appends done, answers pending: what [`append`] hands to the connection's response queue.
pub struct PendingProduce {
    acks: i16,
    response: ProduceResponse,
    /// Partitions that must be fsynced up to an offset before the answer.
    durable: Vec<(Arc<Partition>, i64)>,
}

impl PendingProduce {
    /// Waits for durability; `None` for `acks=0`, which gets no response.
    pub async fn finish(self) -> Option<ProduceResponse> {
        for (partition, end_offset) in &self.durable {
            partition.wait_durable(*end_offset).await;
        }
        (self.acks != 0).then_some(self.response)
    }
}

/// Validates and appends every partition's batch now, in request order.
pub fn append(broker: &Arc<Broker>, request: ProduceRequest, version: i16) -> PendingProduce {
    let acks = request.acks;
    let mut response = ProduceResponse::default();
    let mut durable = Vec::new();
    for topic in request.topic_data {
        let mut topic_response = TopicProduceResponse::default();
        for data in topic.partition_data {
            let mut result = PartitionProduceResponse::default();
            result.index = data.index;
            result.base_offset = -1;
            result.log_append_time_ms = -1;
            result.log_start_offset = -1;
            let outcome = append_partition(
                broker,
                topic.name.0.as_str(),
                data.index,
                acks,
                data.records,
            );
            match outcome {
                Ok((partition, info)) => {
                    result.base_offset = info.base_offset;
                    result.log_start_offset = info.log_start_offset;
                    if partition.settings().flush_policy.sync_before_ack(acks) {
                        durable.push((partition, info.last_offset + 1));
                    }
                }
                Err((code, message)) => {
                    result.error_code = code;
                    if version >= 8 {
                        result.error_message = Some(str_bytes(message));
                    }
                }
            }
            topic_response.partition_responses.push(result);
        }
        topic_response.name = topic.name;
        response.responses.push(topic_response);
    }
    PendingProduce {
        acks,
        response,
        durable,
    }
}

type AppendOutcome = (Arc<Partition>, weir_log::AppendInfo);

fn append_partition(
    broker: &Arc<Broker>,
    topic: &str,
    index: i32,
    acks: i16,
    records: Option<bytes::Bytes>,
) -> Result<AppendOutcome, (i16, String)> {
    if !matches!(acks, -1..=1) {
        return Err((
            ResponseError::InvalidRequiredAcks.code(),
            format!("acks must be -1, 0 or 1, got {acks}"),
        ));
    }
    let Some(partition) = broker.partitions.get(topic, index) else {
        return Err((
            ResponseError::UnknownTopicOrPartition.code(),
            format!("unknown topic-partition {topic}-{index}"),
        ));
    };
    let records = records.unwrap_or_default();
    let header = match BatchHeader::parse(&records) {
        Ok(header) => header,
        Err(_) => {
            return Err((
                ResponseError::CorruptMessage.code(),
                "record batch shorter than its header".into(),
            ))
        }
    };
    if header.total_bytes() < records.len() {
        return Err((
            ResponseError::InvalidRecord.code(),
            "a produce request must carry exactly one record batch per partition".into(),
        ));
    }
    let settings = partition.settings();
    if acks == -1 && settings.min_insync_replicas > 1 {
        return Err((
            ResponseError::NotEnoughReplicas.code(),
            format!(
                "min.insync.replicas is {} but only 1 replica is in sync",
                settings.min_insync_replicas
            ),
        ));
    }
    let mut batch = records.to_vec();
    match partition.append(&mut batch) {
        Ok(info) => Ok((partition, info)),
        Err(LogError::Io(error)) => storage_failure(&partition.dir, &error.to_string()),
        Err(error) => {
            if matches!(error, LogError::Batch(_)) {
                warn_bad_input(
                    topic,
                    &format!("refused batch for partition {index}: {error}"),
                );
            }
            Err((log_error_code(&error), error.to_string()))
        }
    }
}
