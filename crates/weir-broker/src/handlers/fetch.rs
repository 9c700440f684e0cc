//! Fetch (key 1), v4–16: stored batches served as they are, long-polling on `max_wait_ms`
//! until `min_bytes` are available, within a fetch session (KIP-227, [`crate::fetch_session`])
//! when the client opens one.
//!
//! Each attempt runs on a blocking thread: under each partition's lock it only takes a
//! [`weir_log::ReadView`] (memory), then finds the bytes to send with the lock released. Small
//! responses are read into memory there; larger ones carry their records as file slices that
//! the connection's writer streams in chunks, so a pending fetch response holds no record
//! bytes whatever its size (as Kafka's zero-copy fetch).
//!
//! A consumer with a `consumer_byte_rate` quota ([`QuotaClient`]) is sent at most a window's
//! worth of its quota at once; an answer that would put it above its rate is, as in Kafka,
//! replaced by an empty one carrying `throttle_time_ms` (the bytes are not counted), and its
//! connection is read no further for that time.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::select_all;
use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProducerId, ResponseKind, TopicName,
};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;
use weir_codec::varint::put_uvarint;
use weir_log::{AbortedLookup, ReadSlice, ReadView};
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;

use crate::broker::Broker;
use crate::fetch_session::{PartitionKey, Reported};
use crate::handlers::encode;
use crate::handlers::errors::ErrorReply;
use crate::partition::Partition;
use crate::replication::{check_replica, divergence};
use crate::reply::{FramePart, Reply, ResponseFrame};
use crate::request_quota::{QuotaClient, RequestMeter};

/// Longest long poll served, whatever `max_wait_ms` asks: bounds how long a request holds a
/// slot in its connection's pipeline.
pub const FETCH_WAIT_MS_MAX: u64 = 30_000;
/// Most bytes one fetch response carries, whatever `max_bytes` asks (Kafka's broker-side
/// `fetch.max.bytes` default). A first batch larger than this is still returned whole.
pub const FETCH_BYTES_MAX: u64 = 57_671_680;
/// A response whose records total at most this is read into memory before it is queued; a
/// larger one is streamed from the segment files as it is written.
const INLINE_RECORDS_BYTES_MAX: u64 = 64 * 1024;
/// Reads that lie entirely in the last this-many bytes appended to a partition (a consumer
/// keeping up with producers) are served on the connection's task: those pages were written
/// moments ago and are in the page cache. Older data is read on a blocking thread.
const TAIL_READ_BYTES: u64 = 1024 * 1024;
/// Version from which Fetch is a flexible message (compact records length).
const FIRST_FLEXIBLE_VERSION: i16 = 12;
/// Bytes of a records placeholder: a per-process secret then the partition's position.
const MARKER_BYTES: usize = 16;

struct Target {
    key: PartitionKey,
    name: TopicName,
    topic_id: Uuid,
    partition: Result<Arc<Partition>, ResponseError>,
    request: FetchPartition,
    /// A follower's fetch: it reads up to the log end, not the high watermark.
    from_replica: bool,
}

/// One partition's answer: the response entry and, when records are to be streamed, the slice.
struct PartitionRead {
    data: PartitionData,
    slice: Option<ReadSlice>,
}

/// One partition before reading: the response entry so far and what may be read.
struct PartitionPlan {
    data: PartitionData,
    view: Option<ReadView>,
    /// For a read_committed consumer: the aborted transactions of the range, to list.
    aborted: Option<AbortedLookup>,
    partition_max_bytes: u64,
}

/// What one attempt at reading found.
struct Attempt {
    reads: Vec<PartitionRead>,
    bytes: u64,
    any_error: bool,
}

/// Serves a fetch, waiting for data when there is less than `min_bytes`.
pub async fn handle(
    broker: &Arc<Broker>,
    request: FetchRequest,
    (version, correlation_id): (i16, i32),
    (peer, access): (std::net::IpAddr, &Access),
    (client, meter): (Option<QuotaClient>, Option<Arc<RequestMeter>>),
) -> Reply {
    let image = broker.image();
    let by_id = version >= 13;
    // A follower names itself (Kafka's replica fetch) and, from v15, proves it with its broker
    // epoch; consumers send -1. A follower needs CLUSTER_ACTION (a fetch without it is
    // answered TOPIC_AUTHORIZATION_FAILED for every partition, as Kafka answers it); an
    // allowed fetch posing as a replica is answered by closing the connection, so each guess
    // at an epoch costs a connection. A consumer needs READ on each topic.
    let (replica, replica_epoch) = match version {
        15.. => (
            request.replica_state.replica_id.0,
            Some(request.replica_state.replica_epoch),
        ),
        _ => (request.replica_id.0, None),
    };
    let replica_allowed = replica >= 0 && access.cluster(AclOperation::ClusterAction);
    if replica_allowed {
        if let Err(refusal) = check_replica(&image, replica, replica_epoch) {
            crate::rate_limit::warn_bad_input(
                &peer.to_string(),
                &format!(
                    "fetch posing as replica {replica} refused, closing the connection: {refusal}"
                ),
            );
            return Reply::Close;
        }
    }
    // Followers are not held to client quotas (replication has throttles of its own).
    let client = client.filter(|_| replica < 0);
    if replica >= 0 {
        if let Some(meter) = &meter {
            meter.exempt();
        }
    }
    let allowed = |topic: &str| match replica >= 0 {
        true => replica_allowed,
        false => access.topic(AclOperation::Read, topic),
    };
    let key = |name: &TopicName, topic_id: Uuid, partition: i32| PartitionKey {
        name: if by_id {
            TopicName::default()
        } else {
            name.clone()
        },
        topic_id: if by_id { topic_id } else { Uuid::nil() },
        partition,
    };
    // A partition named twice is read once, with the last request's position, as Kafka does.
    let mut wanted: Vec<(PartitionKey, FetchPartition)> = Vec::new();
    let mut positions: HashMap<PartitionKey, usize> = HashMap::new();
    for topic in request.topics {
        for partition in topic.partitions {
            let key = key(&topic.topic, topic.topic_id, partition.partition);
            match positions.get(&key) {
                Some(&at) => wanted[at].1 = partition,
                None => {
                    positions.insert(key.clone(), wanted.len());
                    wanted.push((key, partition));
                }
            }
        }
    }
    let forgotten: Vec<PartitionKey> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| key(&t.topic, t.topic_id, *p)))
        .collect();
    let session = match broker.fetch_sessions.begin(
        request.session_id,
        request.session_epoch,
        wanted,
        forgotten,
    ) {
        Ok(session) => session,
        Err(error) => {
            return empty_answer(error.code(), (0, Duration::ZERO), version, correlation_id)
        }
    };
    let targets: Vec<Target> = session
        .partitions
        .into_iter()
        .map(|(key, partition)| {
            let resolved = if by_id {
                image.topic_by_id(key.topic_id)
            } else {
                image.topic(key.name.0.as_str())
            };
            let (name, topic_id) = match resolved {
                Some(t) => (TopicName(super::str_bytes(t.name.clone())), t.topic_id),
                None => (key.name.clone(), key.topic_id),
            };
            let led = match resolved {
                Some(t) if !allowed(&t.name) => Err(ResponseError::TopicAuthorizationFailed),
                Some(t) => super::led_partition(broker, &t.name, partition.partition),
                None if !by_id && !allowed(key.name.0.as_str()) => {
                    Err(ResponseError::TopicAuthorizationFailed)
                }
                None => Err(ResponseError::UnknownTopicOrPartition),
            };
            let led = match led {
                Ok(led) if replica >= 0 => follower_fetched(broker, led, replica, &partition),
                other => other,
            };
            Target {
                key,
                name,
                topic_id,
                partition: led,
                request: partition,
                from_replica: replica >= 0,
            }
        })
        .collect();
    let session = Answered {
        id: session.session_id,
        incremental: session.incremental,
    };
    let wait_ms = u64::try_from(request.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_WAIT_MS_MAX);
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    // More than a window of its quota at once would throttle a consumer whatever it read
    // before, so it is never sent more (as Kafka bounds it).
    let quota_bytes = client.as_ref().and_then(|client| {
        broker
            .fetch_quotas
            .window_bytes(image.client_quotas(), client.who())
    });
    let max_bytes = u64::try_from(request.max_bytes)
        .unwrap_or(0)
        .min(FETCH_BYTES_MAX)
        .min(quota_bytes.unwrap_or(u64::MAX));
    let min_bytes = u64::try_from(request.min_bytes).unwrap_or(0).min(max_bytes);
    let read_committed = request.isolation_level == 1;
    let mut shutdown = broker.shutdown.clone();
    loop {
        let mut watches: Vec<watch::Receiver<i64>> = targets
            .iter()
            .filter_map(|t| {
                let partition = t.partition.as_ref().ok()?;
                Some(match t.from_replica {
                    true => partition.watch_log_end(),
                    false => partition.watch_high_watermark(),
                })
            })
            .collect();
        let stopping = *shutdown.borrow_and_update();
        let last_chance = stopping || watches.is_empty() || Instant::now() >= deadline;
        let plans: Vec<PartitionPlan> = targets
            .iter()
            .map(|t| plan_partition(t, version, read_committed))
            .collect();
        // Only reading older data can wait on the disk: a consumer at the end of the log, or
        // reading what was just written, costs no trip to a blocking thread.
        let tail_only = plans.iter().all(|p| {
            p.view
                .as_ref()
                .is_none_or(|v| v.within_last(TAIL_READ_BYTES))
        });
        let attempt = if !tail_only {
            match tokio::task::spawn_blocking(move || {
                read_once(plans, max_bytes, min_bytes, last_chance)
            })
            .await
            {
                Ok(attempt) => attempt,
                Err(_) => return Reply::Close,
            }
        } else {
            read_once(plans, max_bytes, min_bytes, last_chance)
        };
        let satisfied = attempt.bytes >= min_bytes && (attempt.bytes > 0 || min_bytes == 0);
        if satisfied || attempt.any_error || last_chance {
            if let Some(client) = &client {
                // As Kafka: the answer's bytes and the request's time are recorded; if either
                // calls for a pause the answer is empty, and its bytes are taken back.
                let quotas = image.client_quotas();
                let bytes = attempt.bytes as f64;
                let bytes_pause = broker.fetch_quotas.record(quotas, client.who(), bytes);
                let request_pause = meter.as_ref().map_or(Duration::ZERO, |m| m.finish());
                if !bytes_pause.is_zero() || !request_pause.is_zero() {
                    broker.fetch_quotas.refund(quotas, client.who(), bytes);
                    if !bytes_pause.is_zero() {
                        broker.metrics.fetch_throttling.count(bytes_pause);
                    }
                    let pause = bytes_pause.max(request_pause);
                    return throttled(broker, client, session, pause, (version, correlation_id));
                }
            }
            return respond(broker, &targets, attempt, session, version, correlation_id);
        }
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        tokio::select! {
            _ = changed => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Records a follower's fetch with the partition it leads: the follower's position may move
/// the high watermark, and a follower back in step is proposed for the ISR. A broker that is
/// no replica of the partition is refused.
fn follower_fetched(
    broker: &Arc<Broker>,
    partition: Arc<Partition>,
    replica: i32,
    request: &FetchPartition,
) -> Result<Arc<Partition>, ResponseError> {
    // A divergent follower's log end says nothing of what it shares with the leader: it is
    // not counted until it has truncated.
    let diverged = divergence(
        &partition.log(),
        request.last_fetched_epoch,
        request.fetch_offset,
    );
    if diverged.is_some() {
        return Ok(partition);
    }
    let fetched = (request.fetch_offset, request.log_start_offset);
    match partition.replica_fetched(replica, fetched, std::time::Instant::now()) {
        Ok(Some(expansion)) => {
            broker.ask_isr_change(partition.clone(), expansion);
            Ok(partition)
        }
        Ok(None) => Ok(partition),
        Err(_) => Err(ResponseError::NotLeaderOrFollower),
    }
}

/// Reads what the plans allow, in order, without holding any lock: each partition gets what
/// is left of `max_bytes`. When the answer will be sent as it is (`min_bytes` met, or no more
/// waiting) and is small, the records are read into memory here. Reads batch headers and
/// records: run off the async workers unless every view reads only the newest bytes.
fn read_once(
    plans: Vec<PartitionPlan>,
    max_bytes: u64,
    min_bytes: u64,
    last_chance: bool,
) -> Attempt {
    let mut reads = Vec::with_capacity(plans.len());
    let mut bytes = 0u64;
    let mut any_error = false;
    for plan in plans {
        let read = read_partition(plan, max_bytes.saturating_sub(bytes), bytes == 0);
        bytes += read.slice.as_ref().map_or(0, ReadSlice::len);
        any_error |= read.data.error_code != 0;
        reads.push(read);
    }
    let final_answer = last_chance || any_error || (bytes >= min_bytes && bytes > 0);
    if final_answer && bytes <= INLINE_RECORDS_BYTES_MAX {
        for read in &mut reads {
            let Some(slice) = read.slice.take() else {
                continue;
            };
            match slice.read() {
                Ok(records) => read.data.records = Some(records),
                Err(error) => read.data.error_code = ErrorReply::from(&error).code(),
            }
        }
    }
    Attempt {
        reads,
        bytes,
        any_error,
    }
}

/// The response entry of one partition and, when there is something below the high watermark
/// (for a read_committed consumer, the last stable offset) to read, a view of it. Memory
/// only: the partition's lock is held for this and nothing else. Aborted transactions whose
/// records the range may hold are listed only to a read_committed consumer, as in Kafka (read
/// from the segments' indexes with the records).
fn plan_partition(target: &Target, version: i16, read_committed: bool) -> PartitionPlan {
    let mut data = PartitionData::default();
    data.partition_index = target.request.partition;
    data.high_watermark = -1;
    data.last_stable_offset = -1;
    data.log_start_offset = -1;
    data.preferred_read_replica = BrokerId(-1);
    data.aborted_transactions = read_committed.then(Vec::new);
    data.records = Some(Bytes::new());
    let partition_max_bytes = u64::try_from(target.request.partition_max_bytes).unwrap_or(0);
    let mut aborted = None;
    let plan = |mut data: PartitionData, view, aborted| {
        if data.error_code != 0 {
            // A refused partition says nothing of its log, as in Kafka.
            data.high_watermark = -1;
            data.last_stable_offset = -1;
            data.log_start_offset = -1;
        }
        PartitionPlan {
            data,
            view,
            aborted,
            partition_max_bytes,
        }
    };
    let partition = match &target.partition {
        Ok(partition) => partition,
        Err(ResponseError::UnknownTopicOrPartition) => {
            // Kafka lists an (empty) set of aborted transactions for a partition it lacks.
            data.aborted_transactions = Some(Vec::new());
            data.error_code = if version >= 13 {
                ResponseError::UnknownTopicId.code()
            } else {
                ResponseError::UnknownTopicOrPartition.code()
            };
            return plan(data, None, None);
        }
        Err(error) => {
            data.error_code = error.code();
            return plan(data, None, None);
        }
    };
    let log = partition.log();
    let high_watermark = log.high_watermark();
    data.high_watermark = high_watermark;
    let last_stable_offset = log.last_stable_offset();
    data.last_stable_offset = last_stable_offset;
    data.log_start_offset = log.log_start_offset();
    let current_epoch = log.leader_epoch();
    let requested_epoch = target.request.current_leader_epoch;
    if requested_epoch > current_epoch {
        data.error_code = ResponseError::UnknownLeaderEpoch.code();
        return plan(data, None, None);
    }
    if requested_epoch >= 0 && requested_epoch < current_epoch {
        data.error_code = ResponseError::FencedLeaderEpoch.code();
        return plan(data, None, None);
    }
    let upper = if target.from_replica {
        // A follower whose last batch's epoch ends earlier here diverged: it is told where
        // (KIP-320) and truncates before it fetches on.
        let request = &target.request;
        if let Some((epoch, end)) =
            divergence(&log, request.last_fetched_epoch, request.fetch_offset)
        {
            data.diverging_epoch.epoch = epoch;
            data.diverging_epoch.end_offset = end;
            return plan(data, None, None);
        }
        log.log_end_offset()
    } else if read_committed {
        aborted = Some(log.aborted_lookup(target.request.fetch_offset, last_stable_offset));
        last_stable_offset
    } else {
        high_watermark
    };
    match log.read_view(target.request.fetch_offset, upper) {
        Ok(view) => plan(data, view, aborted),
        Err(error) => {
            data.error_code = ErrorReply::from(&error).code();
            plan(data, None, None)
        }
    }
}

fn read_partition(plan: PartitionPlan, budget: u64, first: bool) -> PartitionRead {
    let PartitionPlan {
        mut data,
        view,
        aborted,
        partition_max_bytes,
    } = plan;
    let Some(view) = view else {
        return PartitionRead { data, slice: None };
    };
    if let Some(lookup) = aborted {
        match lookup.collect() {
            Ok(found) => {
                data.aborted_transactions = Some(
                    found
                        .into_iter()
                        .map(|txn| {
                            let mut aborted = AbortedTransaction::default();
                            aborted.producer_id = ProducerId(txn.producer_id);
                            aborted.first_offset = txn.first_offset;
                            aborted
                        })
                        .collect(),
                );
            }
            Err(error) => {
                data.error_code = ErrorReply::from(&error).code();
                return PartitionRead { data, slice: None };
            }
        }
    }
    let limit = partition_max_bytes.min(budget);
    if limit == 0 && !first {
        return PartitionRead { data, slice: None };
    }
    // The first batch of the response is returned whole even beyond the limits, so a consumer
    // always makes progress; later partitions only get what fits.
    match view.slice(limit, first) {
        Ok(slice) => PartitionRead {
            data,
            slice: slice.filter(|s| !s.is_empty()),
        },
        Err(error) => {
            data.error_code = ErrorReply::from(&error).code();
            PartitionRead { data, slice: None }
        }
    }
}

/// This process's secret for records placeholders: random, and with bytes no topic name can
/// hold, so the encoder's output cannot contain a placeholder by accident or by design.
fn marker_secret() -> &'static [u8; 12] {
    static SECRET: OnceLock<[u8; 12]> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut secret = [0u8; 12];
        secret.copy_from_slice(&Uuid::new_v4().as_bytes()[..12]);
        secret[0] = 0xff;
        secret
    })
}

fn marker(index: u32) -> [u8; MARKER_BYTES] {
    let mut marker = [0u8; MARKER_BYTES];
    marker[..12].copy_from_slice(marker_secret());
    marker[12..].copy_from_slice(&index.to_be_bytes());
    marker
}

/// Encodes the response. Streamed partitions carry a placeholder in their records field; the
/// encoded frame is then cut around each placeholder and its length prefix, and the slice put
/// in its place with the real length, so the frame is exactly what encoding the bytes would
/// have produced.
fn respond(
    broker: &Broker,
    targets: &[Target],
    attempt: Attempt,
    session: Answered,
    version: i16,
    correlation_id: i32,
) -> Reply {
    let mut response = FetchResponse::default();
    response.session_id = session.id;
    // Only a session remembers what its client was told; a sessionless fetch lists all.
    let listed = if session.id == 0 {
        vec![true; targets.len()]
    } else {
        let reported: Vec<(PartitionKey, Reported, bool)> = targets
            .iter()
            .zip(&attempt.reads)
            .map(|(target, read)| {
                let data = &read.data;
                let has_records =
                    read.slice.is_some() || data.records.as_ref().is_some_and(|r| !r.is_empty());
                let offsets = Reported {
                    high_watermark: data.high_watermark,
                    last_stable_offset: data.last_stable_offset,
                    log_start_offset: data.log_start_offset,
                };
                (
                    target.key.clone(),
                    offsets,
                    has_records || data.error_code != 0,
                )
            })
            .collect();
        broker.fetch_sessions.report(session.id, &reported)
    };
    let mut slices: Vec<ReadSlice> = Vec::new();
    for ((target, read), listed) in targets.iter().zip(attempt.reads).zip(listed) {
        if session.incremental && !listed {
            continue;
        }
        let PartitionRead { mut data, slice } = read;
        if let (Ok(partition), false) = (&target.partition, target.from_replica) {
            let sent = slice.as_ref().map_or_else(
                || data.records.as_ref().map_or(0, |r| r.len() as u64),
                ReadSlice::len,
            );
            partition
                .counters
                .bytes_out
                .fetch_add(sent, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(slice) = slice {
            data.records = Some(Bytes::copy_from_slice(&marker(slices.len() as u32)));
            slices.push(slice);
        }
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
    let frame = match encode(
        ApiKey::Fetch,
        version,
        correlation_id,
        &ResponseKind::Fetch(response),
    ) {
        Ok(frame) => frame,
        Err(reply) => return reply,
    };
    if slices.is_empty() {
        return Reply::Frame(ResponseFrame::bytes(frame));
    }
    match splice(&frame, slices, version >= FIRST_FLEXIBLE_VERSION) {
        Some(frame) => Reply::Frame(frame),
        None => {
            tracing::error!(target: "weir::server", "fetch response placeholders not found where encoded; closing the connection");
            Reply::Close
        }
    }
}

/// The fetch session an answer belongs to.
#[derive(Clone, Copy)]
struct Answered {
    /// Its id (0: none).
    id: i32,
    /// The answer lists only partitions with something new.
    incremental: bool,
}

/// The answer to a consumer above its quota, as Kafka gives it: no partitions and how long
/// to pause, for which its connection is not read. A full fetch's answer opens no session
/// (the client's next fetch is a full one again); an incremental one's keeps it, and what the
/// client was told of each partition stands.
fn throttled(
    broker: &Broker,
    client: &QuotaClient,
    session: Answered,
    pause: Duration,
    (version, correlation_id): (i16, i32),
) -> Reply {
    client.mute.extend(pause);
    let session_id = match session.incremental {
        true => session.id,
        false => {
            broker.fetch_sessions.close(session.id);
            0
        }
    };
    empty_answer(0, (session_id, pause), version, correlation_id)
}

/// An answer without partitions: an error for the whole fetch (a refused session), or a
/// throttled consumer's answer (error code 0), with its session id and pause.
fn empty_answer(
    error_code: i16,
    (session_id, pause): (i32, Duration),
    version: i16,
    correlation_id: i32,
) -> Reply {
    let mut response = FetchResponse::default();
    response.error_code = error_code;
    response.session_id = session_id;
    response.throttle_time_ms = i32::try_from(pause.as_millis()).unwrap_or(i32::MAX);
    match encode(
        ApiKey::Fetch,
        version,
        correlation_id,
        &ResponseKind::Fetch(response),
    ) {
        Ok(frame) => Reply::Frame(ResponseFrame::bytes(frame)),
        Err(reply) => reply,
    }
}

/// Replaces each placeholder (and its encoded length) in `frame` by its slice; `None` when a
/// placeholder is not where the encoder must have put it (a bug).
fn splice(frame: &Bytes, slices: Vec<ReadSlice>, flexible: bool) -> Option<ResponseFrame> {
    // The placeholder's encoded length: an int32, or a compact unsigned varint of length + 1.
    let old_prefix: Vec<u8> = if flexible {
        vec![MARKER_BYTES as u8 + 1]
    } else {
        (MARKER_BYTES as i32).to_be_bytes().to_vec()
    };
    let mut parts = Vec::with_capacity(slices.len() * 3 + 2);
    let mut body_len = frame.len().checked_sub(4)? as u64;
    let mut cursor = 4usize;
    for (index, slice) in slices.into_iter().enumerate() {
        let marker = marker(index as u32);
        let found = frame[cursor..]
            .windows(MARKER_BYTES)
            .position(|w| w == marker)?
            + cursor;
        let prefix_start = found.checked_sub(old_prefix.len())?;
        if prefix_start < cursor || frame[prefix_start..found] != old_prefix[..] {
            return None;
        }
        let mut new_prefix = Vec::with_capacity(5);
        if flexible {
            put_uvarint(&mut new_prefix, u32::try_from(slice.len() + 1).ok()?);
        } else {
            new_prefix.extend_from_slice(&i32::try_from(slice.len()).ok()?.to_be_bytes());
        }
        body_len = body_len - (old_prefix.len() + MARKER_BYTES) as u64
            + new_prefix.len() as u64
            + slice.len();
        parts.push(FramePart::Bytes(frame.slice(cursor..prefix_start)));
        parts.push(FramePart::Bytes(Bytes::from(new_prefix)));
        parts.push(FramePart::Slice(slice));
        cursor = found + MARKER_BYTES;
    }
    parts.push(FramePart::Bytes(frame.slice(cursor..)));
    let length = i32::try_from(body_len).ok()?;
    parts.insert(
        0,
        FramePart::Bytes(Bytes::copy_from_slice(&length.to_be_bytes())),
    );
    Some(ResponseFrame::from_parts(parts))
}
