//! ListOffsets (key 2), v1–8: earliest, latest, max timestamp, or the first offset at or after
//! a timestamp. Lookups by time read and decompress a stored batch: they run on a blocking
//! thread, within the broker's limit on concurrent decompression, with the partition's lock
//! held only to find where to look; the batch is walked as a stream, no record materialized.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;
use weir_log::records::{find_record, RecordTarget};
use weir_log::{BatchLookup, Log};

use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;

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
    Search(Box<Search>),
}

/// A search for one record by time.
struct Search {
    lookup: Option<BatchLookup>,
    target: RecordTarget,
    /// Offsets at or past this are not visible to the client (the high watermark, or the last
    /// stable offset).
    high_watermark: i64,
    epoch: i32,
    decompressed_bytes_max: u64,
}

/// Looks up offsets for every requested partition.
pub async fn handle(
    broker: &Arc<Broker>,
    request: ListOffsetsRequest,
    version: i16,
    access: &Access,
) -> ListOffsetsResponse {
    let denied: HashSet<String> = request
        .topics
        .iter()
        .map(|t| t.name.0.as_str())
        .filter(|name| !access.topic(AclOperation::Describe, name))
        .map(str::to_string)
        .collect();
    let searches = request
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .any(|p| p.timestamp >= 0 || p.timestamp == MAX_TIMESTAMP);
    // A search may decompress a batch: it takes its turn with produce validation.
    let _permit = match searches {
        true => broker.compressed_validations.acquire().await.ok(),
        false => None,
    };
    let broker = broker.clone();
    tokio::task::spawn_blocking(move || lookup_all(&broker, request, version, &denied))
        .await
        .unwrap_or_default()
}

/// Looks up every partition asked for; those of `denied` topics are refused.
fn lookup_all(
    broker: &Broker,
    request: ListOffsetsRequest,
    version: i16,
    denied: &HashSet<String>,
) -> ListOffsetsResponse {
    // A partition named twice is refused, as Kafka does (and no lookup runs twice).
    let mut seen = HashSet::new();
    let mut duplicates = HashSet::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            if !seen.insert((topic.name.0.as_str(), p.partition_index)) {
                duplicates.insert((topic.name.0.to_string(), p.partition_index));
            }
        }
    }
    let read_committed = request.isolation_level == 1;
    let mut response = ListOffsetsResponse::default();
    for topic in &request.topics {
        let mut topic_response = ListOffsetsTopicResponse::default();
        for wanted in &topic.partitions {
            let mut result = ListOffsetsPartitionResponse::default();
            result.partition_index = wanted.partition_index;
            result.timestamp = -1;
            result.offset = -1;
            result.leader_epoch = -1;
            let outcome = if denied.contains(topic.name.0.as_str()) {
                Err(ResponseError::TopicAuthorizationFailed.code())
            } else if duplicates.contains(&(topic.name.0.to_string(), wanted.partition_index)) {
                Err(ResponseError::InvalidRequest.code())
            } else if wanted.timestamp == MAX_TIMESTAMP && version < 7 {
                // The max-timestamp lookup (KIP-734) exists from v7.
                Err(ResponseError::UnsupportedVersion.code())
            } else {
                match super::led_partition(broker, topic.name.0.as_str(), wanted.partition_index) {
                    Err(error) => Err(error.code()),
                    Ok(partition) => {
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
                                // A read_committed client sees up to the last stable
                                // offset, as its fetches do.
                                let upper = if read_committed {
                                    log.last_stable_offset()
                                } else {
                                    log.high_watermark()
                                };
                                plan(
                                    &log,
                                    wanted.timestamp,
                                    upper,
                                    partition.settings().decompressed_bytes_max(),
                                )
                            }
                        };
                        planned.and_then(execute)
                    }
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
        topic_response.name = topic.name.clone();
        response.topics.push(topic_response);
    }
    response
}

/// What answers `timestamp` in `log`, for a client that may see offsets below `upper` (the
/// high watermark, or the last stable offset for read_committed).
fn plan(log: &Log, timestamp: i64, upper: i64, decompressed_bytes_max: u64) -> Result<Plan, i16> {
    let epoch = log.leader_epoch();
    let search = |lookup, target| {
        Plan::Search(Box::new(Search {
            lookup,
            target,
            high_watermark: upper,
            epoch,
            decompressed_bytes_max,
        }))
    };
    match timestamp {
        LATEST_TIMESTAMP => Ok(Plan::Answer(Some((upper, -1, epoch)))),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
            Ok(Plan::Answer(Some((log.log_start_offset(), -1, epoch))))
        }
        MAX_TIMESTAMP => Ok(search(log.lookup_max_timestamp(), RecordTarget::Latest)),
        target if target >= 0 => Ok(search(
            log.lookup_timestamp(target),
            RecordTarget::AtOrAfter(target),
        )),
        _ => Err(ResponseError::InvalidRequest.code()),
    }
}

fn execute(plan: Plan) -> Result<Found, i16> {
    match plan {
        Plan::Answer(found) => Ok(found),
        Plan::Search(search) => {
            let Search {
                lookup,
                target,
                high_watermark,
                epoch,
                decompressed_bytes_max,
            } = *search;
            let Some(lookup) = lookup else {
                return Ok(None);
            };
            let Some(batch) = lookup.find().map_err(|e| ErrorReply::from(&e).code())? else {
                return Ok(None);
            };
            let epoch =
                weir_log::BatchHeader::parse(&batch).map_or(epoch, |h| h.partition_leader_epoch);
            let found = find_record(&batch, target, decompressed_bytes_max)
                .map_err(|e| ErrorReply::from(&weir_log::LogError::from(e)).code())?;
            Ok(found
                .filter(|(offset, _)| {
                    matches!(target, RecordTarget::Latest) || *offset < high_watermark
                })
                .map(|(offset, timestamp)| (offset, timestamp, epoch)))
        }
    }
}
