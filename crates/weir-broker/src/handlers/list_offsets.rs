//! ListOffsets (key 2), v1–8: earliest, latest, max timestamp, or the first offset at or after
//! a timestamp. Lookups by time read segments: they run on a blocking thread, with the
//! partition's lock held only to find where to look.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::records::RecordBatchDecoder;
use kafka_protocol::ResponseError;
use weir_log::{BatchLookup, Log};

use crate::broker::Broker;
use crate::handlers::errors::ErrorReply;

/// `timestamp` asking for the next offset to be written.
const LATEST_TIMESTAMP: i64 = -1;
/// `timestamp` asking for the first retained offset.
const EARLIEST_TIMESTAMP: i64 = -2;
/// `timestamp` asking for the record with the largest timestamp (v7+).
const MAX_TIMESTAMP: i64 = -3;
/// `timestamp` asking for the first offset stored locally (v8+; all of it, without tiering).
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

/// (offset, timestamp, leader epoch) answering one query; `None` when no record matches.
type Found = Option<(i64, i64, i32)>;

/// What one query needs, decided under the partition's lock.
enum Plan {
    /// Answered from memory.
    Answer(Found),
    /// Read a batch (outside the lock) and pick a record in it.
    Search {
        lookup: Option<BatchLookup>,
        /// The timestamp sought; `None` for the largest.
        target: Option<i64>,
        high_watermark: i64,
    },
}

/// Looks up offsets for every requested partition.
pub async fn handle(
    broker: &Arc<Broker>,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let broker = broker.clone();
    tokio::task::spawn_blocking(move || lookup_all(&broker, request, version))
        .await
        .unwrap_or_default()
}

fn lookup_all(broker: &Broker, request: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let mut response = ListOffsetsResponse::default();
    for topic in request.topics {
        let mut topic_response = ListOffsetsTopicResponse::default();
        for wanted in topic.partitions {
            let mut result = ListOffsetsPartitionResponse::default();
            result.partition_index = wanted.partition_index;
            result.timestamp = -1;
            result.offset = -1;
            result.leader_epoch = -1;
            let partition = broker
                .partitions
                .get(topic.name.0.as_str(), wanted.partition_index);
            let outcome = match partition {
                None => Err(ResponseError::UnknownTopicOrPartition.code()),
                Some(partition) => {
                    // The lock is held for the plan only; the search reads without it.
                    let planned = {
                        let log = partition.log();
                        let current_epoch = log.leader_epoch();
                        if wanted.current_leader_epoch > current_epoch {
                            Err(ResponseError::UnknownLeaderEpoch.code())
                        } else if wanted.current_leader_epoch >= 0
                            && wanted.current_leader_epoch < current_epoch
                        {
                            Err(ResponseError::FencedLeaderEpoch.code())
                        } else {
                            plan(&log, wanted.timestamp)
                        }
                    };
                    planned.and_then(execute)
                }
            };
            match outcome {
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
            topic_response.partitions.push(result);
        }
        topic_response.name = topic.name;
        response.topics.push(topic_response);
    }
    response
}

fn plan(log: &Log, timestamp: i64) -> Result<Plan, i16> {
    let epoch = log.leader_epoch();
    match timestamp {
        LATEST_TIMESTAMP => Ok(Plan::Answer(Some((log.high_watermark(), -1, epoch)))),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
            Ok(Plan::Answer(Some((log.log_start_offset(), -1, epoch))))
        }
        MAX_TIMESTAMP => Ok(Plan::Search {
            lookup: log.lookup_max_timestamp(),
            target: None,
            high_watermark: log.high_watermark(),
        }),
        target if target >= 0 => Ok(Plan::Search {
            lookup: log.lookup_timestamp(target),
            target: Some(target),
            high_watermark: log.high_watermark(),
        }),
        _ => Err(ResponseError::InvalidRequest.code()),
    }
}

fn execute(plan: Plan) -> Result<Found, i16> {
    let (lookup, target, high_watermark) = match plan {
        Plan::Answer(found) => return Ok(found),
        Plan::Search {
            lookup,
            target,
            high_watermark,
        } => (lookup, target, high_watermark),
    };
    let Some(lookup) = lookup else {
        return Ok(None);
    };
    let batch = lookup.find().map_err(|e| ErrorReply::from(&e).code())?;
    Ok(batch
        .and_then(|b| {
            find_record(b, |records| match target {
                Some(target) => records
                    .iter()
                    .find(|r| r.timestamp >= target)
                    .map(|r| (r.offset, r.timestamp)),
                None => records
                    .iter()
                    .max_by_key(|r| (r.timestamp, -r.offset))
                    .map(|r| (r.offset, r.timestamp)),
            })
        })
        .filter(|(offset, _, _)| target.is_none() || *offset < high_watermark))
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
