//! ListOffsets (key 2), v1–8: earliest, latest, max timestamp, or the first offset at or after
//! a timestamp.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::records::RecordBatchDecoder;
use kafka_protocol::ResponseError;
use weir_log::Log;

use crate::broker::Broker;
use crate::handlers::errors::log_error_code;

/// `timestamp` asking for the next offset to be written.
const LATEST_TIMESTAMP: i64 = -1;
/// `timestamp` asking for the first retained offset.
const EARLIEST_TIMESTAMP: i64 = -2;
/// `timestamp` asking for the record with the largest timestamp (v7+).
const MAX_TIMESTAMP: i64 = -3;
/// `timestamp` asking for the first offset stored locally (v8+; all of it, without tiering).
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

/// Looks up offsets for every requested partition.
pub fn handle(
    broker: &Arc<Broker>,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let mut response = ListOffsetsResponse::default();
    for topic in request.topics {
        let mut topic_response = ListOffsetsTopicResponse::default();
        for wanted in topic.partitions {
            let mut result = ListOffsetsPartitionResponse::default();
            result.partition_index = wanted.partition_index;
            result.timestamp = -1;
            result.offset = -1;
            result.leader_epoch = -1;
            match broker
                .partitions
                .get(topic.name.0.as_str(), wanted.partition_index)
            {
                None => result.error_code = ResponseError::UnknownTopicOrPartition.code(),
                Some(partition) => {
                    let log = partition.log();
                    let current_epoch = log.leader_epoch();
                    if wanted.current_leader_epoch > current_epoch {
                        result.error_code = ResponseError::UnknownLeaderEpoch.code();
                    } else if wanted.current_leader_epoch >= 0
                        && wanted.current_leader_epoch < current_epoch
                    {
                        result.error_code = ResponseError::FencedLeaderEpoch.code();
                    } else {
                        match lookup(&log, wanted.timestamp) {
                            Ok(Some((offset, timestamp, epoch))) => {
                                result.offset = offset;
                                result.timestamp = timestamp;
                                if version >= 4 {
                                    result.leader_epoch = epoch;
                                }
                            }
                            Ok(None) => {}
                            Err(code) => result.error_code = code,
                        }
                    }
                }
            }
            topic_response.partitions.push(result);
        }
        topic_response.name = topic.name;
        response.topics.push(topic_response);
    }
    response
}

/// (offset, timestamp, leader epoch) for one query; `None` when no record matches.
fn lookup(log: &Log, timestamp: i64) -> Result<Option<(i64, i64, i32)>, i16> {
    let epoch = log.leader_epoch();
    match timestamp {
        LATEST_TIMESTAMP => Ok(Some((log.high_watermark(), -1, epoch))),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
            Ok(Some((log.log_start_offset(), -1, epoch)))
        }
        MAX_TIMESTAMP => {
            let batch = log
                .batch_with_max_timestamp()
                .map_err(|e| log_error_code(&e))?;
            Ok(batch.and_then(|b| {
                find_record(b, |records| {
                    records
                        .iter()
                        .max_by_key(|r| (r.timestamp, -r.offset))
                        .map(|r| (r.offset, r.timestamp))
                })
            }))
        }
        target if target >= 0 => {
            let batch = log
                .batch_for_timestamp(target)
                .map_err(|e| log_error_code(&e))?;
            let high_watermark = log.high_watermark();
            Ok(batch
                .and_then(|b| {
                    find_record(b, |records| {
                        records
                            .iter()
                            .find(|r| r.timestamp >= target)
                            .map(|r| (r.offset, r.timestamp))
                    })
                })
                .filter(|(offset, _, _)| *offset < high_watermark))
        }
        _ => Err(ResponseError::InvalidRequest.code()),
    }
}

/// Decodes one stored batch (decompressing it) and picks a record with `pick`.
fn find_record(
    mut batch: Bytes,
    pick: impl Fn(&[kafka_protocol::records::Record]) -> Option<(i64, i64)>,
) -> Option<(i64, i64, i32)> {
    let record_set = RecordBatchDecoder::decode(&mut batch).ok()?;
    let epoch = record_set
        .records
        .first()
        .map_or(-1, |r| r.partition_leader_epoch);
    pick(&record_set.records).map(|(offset, timestamp)| (offset, timestamp, epoch))
}
