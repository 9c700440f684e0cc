//! Fetch (key 1), v4–16: reads stored batches as they are, long-polling on `max_wait_ms` until
//! `min_bytes` are available.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::select_all;
use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use crate::broker::Broker;
use crate::handlers::errors::log_error_code;
use crate::partition::Partition;

/// Longest long poll served, whatever `max_wait_ms` asks: bounds how long a request holds a
/// slot in its connection's pipeline.
pub const FETCH_WAIT_MS_MAX: u64 = 30_000;
/// Most bytes one fetch response carries, whatever `max_bytes` asks (Kafka's broker-side
/// `fetch.max.bytes` default): a client cannot make the broker read a whole segment into
/// memory. A first batch larger than this is still returned whole.
pub const FETCH_BYTES_MAX: usize = 57_671_680;

struct Target {
    name: TopicName,
    topic_id: Uuid,
    partition: Option<Arc<Partition>>,
    request: FetchPartition,
}

/// Serves a fetch, waiting for data when there is less than `min_bytes`.
pub async fn handle(broker: &Arc<Broker>, request: FetchRequest, version: i16) -> FetchResponse {
    let image = broker.image();
    let mut targets = Vec::new();
    for topic in request.topics {
        let resolved = if version >= 13 {
            image.topic_by_id(topic.topic_id)
        } else {
            image.topic(topic.topic.0.as_str())
        };
        let (name, topic_id) = match resolved {
            Some(t) => (TopicName(super::str_bytes(t.name.clone())), t.topic_id),
            None => (topic.topic.clone(), topic.topic_id),
        };
        for partition in topic.partitions {
            let hosted = resolved.and_then(|t| broker.partitions.get(&t.name, partition.partition));
            targets.push(Target {
                name: name.clone(),
                topic_id,
                partition: hosted,
                request: partition,
            });
        }
    }
    let wait_ms = u64::try_from(request.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_WAIT_MS_MAX);
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let max_bytes = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .min(FETCH_BYTES_MAX);
    let mut shutdown = broker.shutdown.clone();
    loop {
        let mut watches: Vec<watch::Receiver<i64>> = targets
            .iter()
            .filter_map(|t| t.partition.as_ref().map(|p| p.watch_high_watermark()))
            .collect();
        let (response, bytes, any_error) = read_once(&targets, version, max_bytes);
        let stopping = *shutdown.borrow_and_update();
        let satisfied = bytes >= min_bytes && (bytes > 0 || min_bytes == 0);
        if satisfied || any_error || stopping || watches.is_empty() || Instant::now() >= deadline {
            return response;
        }
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutdown.changed() => {}
        }
    }
}

fn read_once(targets: &[Target], version: i16, max_bytes: usize) -> (FetchResponse, usize, bool) {
    let mut response = FetchResponse::default();
    let mut total = 0usize;
    let mut any_error = false;
    for target in targets {
        let data = read_partition(target, version, max_bytes.saturating_sub(total), total == 0);
        total += data.records.as_ref().map_or(0, Bytes::len);
        any_error |= data.error_code != 0;
        let same_topic = response
            .responses
            .last()
            .is_some_and(|t: &FetchableTopicResponse| {
                t.topic == target.name && t.topic_id == target.topic_id
            });
        if !same_topic {
            let mut topic = FetchableTopicResponse::default();
            topic.topic = target.name.clone();
            topic.topic_id = target.topic_id;
            response.responses.push(topic);
        }
        if let Some(topic) = response.responses.last_mut() {
            topic.partitions.push(data);
        }
    }
    (response, total, any_error)
}

fn read_partition(target: &Target, version: i16, budget: usize, first: bool) -> PartitionData {
    let mut data = PartitionData::default();
    data.partition_index = target.request.partition;
    data.high_watermark = -1;
    data.last_stable_offset = -1;
    data.log_start_offset = -1;
    data.preferred_read_replica = BrokerId(-1);
    data.aborted_transactions = Some(Vec::new());
    data.records = Some(Bytes::new());
    let Some(partition) = &target.partition else {
        data.error_code = if version >= 13 {
            ResponseError::UnknownTopicId.code()
        } else {
            ResponseError::UnknownTopicOrPartition.code()
        };
        return data;
    };
    let log = partition.log();
    let high_watermark = log.high_watermark();
    data.high_watermark = high_watermark;
    // Without transactions every record below the high watermark is committed.
    data.last_stable_offset = high_watermark;
    data.log_start_offset = log.log_start_offset();
    let current_epoch = log.leader_epoch();
    let requested_epoch = target.request.current_leader_epoch;
    if requested_epoch > current_epoch {
        data.error_code = ResponseError::UnknownLeaderEpoch.code();
        return data;
    }
    if requested_epoch >= 0 && requested_epoch < current_epoch {
        data.error_code = ResponseError::FencedLeaderEpoch.code();
        return data;
    }
    let limit = usize::try_from(target.request.partition_max_bytes)
        .unwrap_or(0)
        .min(budget);
    if limit == 0 && !first {
        return data;
    }
    match log.read(target.request.fetch_offset, limit as u64, high_watermark) {
        // The first batch of the response is returned whole even beyond the limits, so a
        // consumer always makes progress; later ones must fit.
        Ok(bytes) if bytes.len() > limit && !first => {}
        Ok(bytes) => data.records = Some(bytes),
        Err(error) => data.error_code = log_error_code(&error),
    }
    data
}
