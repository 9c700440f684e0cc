//! Share groups' data path (KIP-932): ShareFetch (key 78, v1) and ShareAcknowledge (79, v1).
//! A member's requests run in its share session (`share_state.rs`): the first opens it with
//! its partitions, each next one carries the session's next epoch and may add or forget
//! partitions, the last (epoch -1) closes it and releases what the member still holds. A
//! ShareFetch applies the acknowledgements it carries, then acquires records for the member
//! from every partition of its session this broker leads (`SharePartition::acquire` over the
//! batches read from `next_fetch_offset`), waiting up to `max_wait_ms` for records when there
//! are none; the answer carries the batches read and the ranges acquired, which are all the
//! member may process.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::select_all;
use kafka_protocol::messages::share_acknowledge_response::{
    PartitionData as AckPartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords as WireAcquired, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::{
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_codec::layout::{
    ATTRIBUTES_AT, ATTR_CONTROL, BASE_OFFSET_AT, BATCH_HEADER_BYTES, BATCH_LENGTH_AT,
    LAST_OFFSET_DELTA_AT, LOG_OVERHEAD_BYTES,
};
use weir_coordinator::share_partition::{
    AcknowledgeType, Acknowledgement, AcquiredRecords, ArchiveReason, ArchivedRecord, FetchedBatch,
    ShareError, SharePartition,
};
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;

use crate::broker::Broker;
use crate::handlers::errors::ErrorReply;
use crate::handlers::{led_partition, str_bytes};
use crate::partition::Partition;
use crate::share_persister::{restored, state_write};
use crate::share_state::{
    ConnectionShares, SessionError, ShareKey, FINAL_EPOCH, SHARE_PARTITIONS_MAX,
};

/// Longest a ShareFetch waits for records, whatever `max_wait_ms` asks.
const WAIT_MS_MAX: u64 = 30_000;
/// Most bytes one ShareFetch answer carries, whatever `max_bytes` asks.
const FETCH_BYTES_MAX: u64 = 64 << 20;
/// Most records one ShareFetch acquires, whatever `max_records` asks.
const FETCH_RECORDS_MAX: u32 = 10_000;
/// The first read of a partition for a ShareFetch, at most.
const FIRST_WINDOW_BYTES: u64 = 64 << 10;
/// The least a next read of a partition asks for.
const MIN_WINDOW_BYTES: u64 = 16 << 10;
/// Longest group id and member id a share request may carry, in bytes: each names a share
/// session and the group's share-partitions (kept in memory and in `__share_group_state`),
/// so their size is bounded. Kafka's share consumer sends 22-character member ids.
pub const SHARE_ID_MAX_BYTES: usize = 255;

/// What a request names, checked: the group, the member, and the acknowledgements by
/// partition.
struct Checked {
    group: String,
    member: String,
    acknowledgements: BTreeMap<(Uuid, i32), Vec<Acknowledgement>>,
}

/// [`check`] of a ShareFetch or ShareAcknowledge request (the same fields in two types).
macro_rules! checked {
    ($request:expr, $access:expr) => {{
        let batches = $request.topics.iter().flat_map(|t| {
            t.partitions.iter().flat_map(move |p| {
                p.acknowledgement_batches.iter().map(move |b| {
                    let types = b.acknowledge_types.as_slice();
                    (
                        (t.topic_id, p.partition_index),
                        (b.first_offset, b.last_offset, types),
                    )
                })
            })
        });
        check(
            $request.group_id.as_ref().map(|g| g.as_str()),
            $request.member_id.as_ref().map(|m| m.as_str()),
            batches,
            $access,
        )
    }};
}

/// Checks the ids and the rights on the group, and turns the acknowledgement batches into
/// ranges; the top-level error and message otherwise.
fn check<'a>(
    group: Option<&str>,
    member: Option<&str>,
    batches: impl Iterator<Item = ((Uuid, i32), (i64, i64, &'a [i8]))>,
    access: &Access,
) -> Result<Checked, (ResponseError, String)> {
    let invalid = |what: &str| (ResponseError::InvalidRequest, what.to_string());
    let group = group
        .filter(|g| !g.is_empty())
        .ok_or_else(|| invalid("GroupId must be set."))?;
    let member = member
        .filter(|m| !m.is_empty())
        .ok_or_else(|| invalid("MemberId must be set."))?;
    if group.len() > SHARE_ID_MAX_BYTES || member.len() > SHARE_ID_MAX_BYTES {
        return Err(invalid("GroupId and MemberId must be at most 255 bytes."));
    }
    if !access.group(AclOperation::Read, group) {
        return Err((
            ResponseError::GroupAuthorizationFailed,
            format!("Not authorized to access group: {group}"),
        ));
    }
    let mut acknowledgements: BTreeMap<(Uuid, i32), Vec<Acknowledgement>> = BTreeMap::new();
    for (key, (first, last, types)) in batches {
        let ranges = acknowledgement_ranges(first, last, types)
            .ok_or_else(|| invalid("Invalid acknowledgement batch."))?;
        acknowledgements.entry(key).or_default().extend(ranges);
    }
    Ok(Checked {
        group: group.to_string(),
        member: member.to_string(),
        acknowledgements,
    })
}

/// One acknowledgement batch as ranges of one type: its types are one for the whole batch or
/// one per offset (0 gap, 1 accept, 2 release, 3 reject). `None` when malformed.
fn acknowledgement_ranges(first: i64, last: i64, types: &[i8]) -> Option<Vec<Acknowledgement>> {
    let span = last.checked_sub(first)?.checked_add(1)?;
    if span <= 0 || (types.len() != 1 && i64::try_from(types.len()).ok()? != span) {
        return None;
    }
    let kind = |t: i8| match t {
        0 => Some(AcknowledgeType::Gap),
        1 => Some(AcknowledgeType::Accept),
        2 => Some(AcknowledgeType::Release),
        3 => Some(AcknowledgeType::Reject),
        _ => None,
    };
    if let [only] = types {
        return Some(vec![Acknowledgement {
            first_offset: first,
            last_offset: last,
            kind: kind(*only)?,
        }]);
    }
    let mut ranges: Vec<Acknowledgement> = Vec::new();
    for (offset, t) in (first..=last).zip(types) {
        let kind = kind(*t)?;
        match ranges.last_mut() {
            Some(run) if run.kind == kind => run.last_offset = offset,
            _ => ranges.push(Acknowledgement {
                first_offset: offset,
                last_offset: offset,
                kind,
            }),
        }
    }
    Some(ranges)
}

/// The partition a share request names, led here and readable by the client; its Kafka error
/// otherwise.
fn target(
    broker: &Broker,
    topic_id: Uuid,
    index: i32,
    access: &Access,
) -> Result<Arc<Partition>, i16> {
    let image = broker.image();
    let topic = image
        .topic_by_id(topic_id)
        .ok_or(ResponseError::UnknownTopicId.code())?;
    if !access.topic(AclOperation::Read, &topic.name) {
        return Err(ResponseError::TopicAuthorizationFailed.code());
    }
    led_partition(broker, &topic.name, index).map_err(|e| e.code())
}

/// Applies `member`'s acknowledgements to one partition and stores the share-partition's new
/// state; the error code (0 when applied and stored).
async fn acknowledge_partition(
    broker: &Arc<Broker>,
    checked: &Checked,
    (topic_id, index): (Uuid, i32),
    acknowledgements: &[Acknowledgement],
    access: &Access,
) -> i16 {
    let partition = match target(broker, topic_id, index, access) {
        Ok(partition) => partition,
        Err(code) => return code,
    };
    let leader_epoch = partition.log().leader_epoch();
    let key = share_key(&checked.group, topic_id, index);
    let now = Instant::now();
    let applied = broker
        .share_state
        .with_existing(&key, leader_epoch, |share| {
            share.acknowledge(&checked.member, acknowledgements, now)
        });
    match applied {
        Some(Ok(archived)) => {
            let counts = &broker.metrics.share.acknowledged;
            for ack in acknowledgements {
                let kind = match ack.kind {
                    AcknowledgeType::Accept => 0,
                    AcknowledgeType::Release => 1,
                    AcknowledgeType::Reject => 2,
                    AcknowledgeType::Gap | AcknowledgeType::Renew => 3,
                };
                let records = u64::try_from(ack.last_offset - ack.first_offset + 1).unwrap_or(0);
                counts[kind].fetch_add(records, Ordering::Relaxed);
            }
            archived_records(broker, &checked.group, (topic_id, index), &archived);
            match persist(broker, &key, leader_epoch).await {
                Ok(()) => 0,
                Err(error) => error.code(),
            }
        }
        Some(Err(ShareError::InvalidRange)) => ResponseError::InvalidRequest.code(),
        Some(Err(ShareError::InvalidRecordState)) | None => {
            ResponseError::InvalidRecordState.code()
        }
    }
}

fn share_key(group: &str, topic_id: Uuid, partition: i32) -> ShareKey {
    ShareKey {
        group: Arc::from(group),
        topic_id,
        partition,
    }
}

/// Stores the share-partition `key`'s state as the leader of `leader_epoch` holds it now, once
/// the write before it (if any) is done; nothing when it is not held at that epoch.
async fn persist(
    broker: &Arc<Broker>,
    key: &ShareKey,
    leader_epoch: i32,
) -> Result<(), ResponseError> {
    let Some((writer, state_epoch)) = broker.share_state.writer(key, leader_epoch) else {
        return Ok(());
    };
    let _turn = writer.lock().await;
    let Some(state) = broker
        .share_state
        .with_existing(key, leader_epoch, |share| share.state())
    else {
        return Ok(());
    };
    let write = state_write(&state, state_epoch, leader_epoch);
    let written = broker.write_share_state(&key.persisted(), &write).await;
    if let Err(error @ (ResponseError::FencedLeaderEpoch | ResponseError::FencedStateEpoch)) =
        written
    {
        // A newer leader, or a state started anew: what this one holds is stale.
        tracing::info!(target: "weir::share", group = %key.group, topic_id = %key.topic_id, partition = key.partition, leader_epoch, %error, "share-partition state moved on; it is read again at the next fetch");
        broker.share_state.forget(key, leader_epoch);
    }
    written
}

/// Makes the share-partition `key` of `partition` at its leader epoch unless it is made: from
/// the state its share coordinator keeps, or, when it has none, at the log end
/// (`share.auto.offset.reset` latest), stored as its start first. Its Kafka error otherwise.
async fn ensure_share_partition(
    broker: &Arc<Broker>,
    key: &ShareKey,
    partition: &Partition,
) -> Result<(), ResponseError> {
    let leader_epoch = partition.log().leader_epoch();
    if broker.share_state.is_current(key, leader_epoch) {
        return Ok(());
    }
    let _making = broker.share_state.making.lock().await;
    if broker.share_state.is_current(key, leader_epoch) {
        return Ok(());
    }
    let persisted_key = key.persisted();
    let mut persisted = broker
        .read_share_state(&persisted_key, leader_epoch)
        .await?;
    if persisted.start_offset < 0 {
        let start_offset = partition.log().high_watermark();
        broker
            .initialize_share_state(&persisted_key, start_offset)
            .await?;
        persisted.start_offset = start_offset;
        persisted.batches.clear();
    }
    let share = SharePartition::restore(&restored(&persisted), broker.share_state.settings());
    tracing::debug!(target: "weir::share", group = %key.group, topic_id = %key.topic_id, partition = key.partition, leader_epoch, start_offset = persisted.start_offset, batches = persisted.batches.len(), "share-partition made from its durable state");
    if broker
        .share_state
        .install(key, (leader_epoch, persisted.state_epoch), share)
    {
        Ok(())
    } else {
        tracing::warn!(target: "weir::share", limit = SHARE_PARTITIONS_MAX, "no room for another share-partition");
        Err(ResponseError::UnknownServerError)
    }
}

/// Releases what `member` holds in the partitions of its closed session, and stores what it
/// changed.
async fn release_session(
    broker: &Arc<Broker>,
    group: &str,
    member: &str,
    partitions: &[(Uuid, i32)],
) {
    for (topic_id, index) in partitions {
        let Some(partition) = broker
            .image()
            .topic_by_id(*topic_id)
            .and_then(|t| broker.partitions.get(&t.name, *index))
        else {
            continue;
        };
        let leader_epoch = partition.log().leader_epoch();
        let key = share_key(group, *topic_id, *index);
        let archived = broker
            .share_state
            .with_existing(&key, leader_epoch, |share| share.release_member(member));
        if let Some(archived) = archived {
            archived_records(broker, group, (*topic_id, *index), &archived);
            // A failure is logged; the records are released in memory all the same, and the
            // next write stores them.
            let _ = persist(broker, &key, leader_epoch).await;
        }
    }
}

/// Counts and logs records archived by a rejection or the delivery-count limit (the
/// dead-letter candidates).
fn archived_records(
    broker: &Broker,
    group: &str,
    (topic_id, partition): (Uuid, i32),
    archived: &[ArchivedRecord],
) {
    for record in archived {
        if record.reason == ArchiveReason::DeliveryLimit {
            broker
                .metrics
                .share
                .delivery_limit_archived
                .fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(target: "weir::share", group, %topic_id, partition, offset = record.offset, reason = ?record.reason, deliveries = record.delivery_count, "record archived");
    }
}

/// `connection` closed: the share sessions whose last request came on it close, and what
/// their members held is released for the others at once.
pub fn connection_closed(broker: &Arc<Broker>, connection: &ConnectionShares) {
    let closed = broker.share_state.close_connection(connection);
    if closed.is_empty() {
        return;
    }
    let broker = broker.clone();
    tokio::spawn(async move {
        for closed in closed {
            let (group, member) = (&closed.group, &closed.member);
            tracing::debug!(target: "weir::share", %group, %member, "share session closed with its connection");
            release_session(&broker, group, member, &closed.partitions).await;
        }
    });
}

fn session_error(error: SessionError) -> ResponseError {
    match error {
        SessionError::NotFound => ResponseError::ShareSessionNotFound,
        SessionError::InvalidEpoch => ResponseError::InvalidShareSessionEpoch,
        SessionError::LimitReached => ResponseError::ShareSessionLimitReached,
        SessionError::TooManyPartitions => ResponseError::InvalidRequest,
    }
}

/// ShareFetch: acknowledgements first, then records acquired for the member.
pub async fn fetch(
    broker: &Arc<Broker>,
    request: ShareFetchRequest,
    (access, connection): (&Access, &ConnectionShares),
) -> ShareFetchResponse {
    let mut response = ShareFetchResponse::default();
    response.acquisition_lock_timeout_ms = i32::try_from(
        broker
            .share_state
            .settings()
            .record_lock_duration
            .as_millis(),
    )
    .unwrap_or(i32::MAX);
    let checked = match checked!(request, access) {
        Ok(checked) => checked,
        Err((code, message)) => {
            response.error_code = code.code();
            response.error_message = Some(str_bytes(message));
            return response;
        }
    };
    let added: Vec<(Uuid, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.topic_id, p.partition_index))
        })
        .collect();
    let forgotten: Vec<(Uuid, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let epoch = request.share_session_epoch;
    let session = broker.share_state.session(
        (&checked.group, &checked.member),
        epoch,
        (&added, &forgotten),
        (connection, Instant::now()),
    );
    let partitions = match session {
        Ok(partitions) => partitions,
        Err(error) => {
            response.error_code = session_error(error).code();
            return response;
        }
    };
    let mut answers: BTreeMap<(Uuid, i32), PartitionData> = BTreeMap::new();
    for (key, acknowledgements) in &checked.acknowledgements {
        let code = acknowledge_partition(broker, &checked, *key, acknowledgements, access).await;
        let data = answers.entry(*key).or_insert_with(|| partition_data(key.1));
        data.acknowledge_error_code = code;
    }
    if epoch == FINAL_EPOCH {
        release_session(broker, &checked.group, &checked.member, &partitions).await;
        response.responses = by_topic(answers);
        return response;
    }
    let mut targets: Vec<((Uuid, i32), Led)> = Vec::with_capacity(partitions.len());
    for &(topic_id, index) in &partitions {
        let mut led = target(broker, topic_id, index, access);
        if let Ok(partition) = &led {
            let key = share_key(&checked.group, topic_id, index);
            if let Err(error) = ensure_share_partition(broker, &key, partition).await {
                led = Err(error.code());
            }
        }
        targets.push(((topic_id, index), led));
    }
    let partition_max_bytes: BTreeMap<(Uuid, i32), u64> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                let bytes = u64::try_from(p.partition_max_bytes).unwrap_or(0);
                ((t.topic_id, p.partition_index), bytes)
            })
        })
        .filter(|(_, bytes)| *bytes > 0)
        .collect();
    let plan = Plan {
        group: Arc::from(checked.group.as_str()),
        member: Arc::from(checked.member.as_str()),
        partitions: targets
            .iter()
            .filter_map(|(key, led)| led.as_ref().ok().map(|p| (*key, p.clone())))
            .collect(),
        partition_max_bytes,
        max_bytes: u64::try_from(request.max_bytes)
            .unwrap_or(0)
            .clamp(1, FETCH_BYTES_MAX),
        max_records: u32::try_from(request.max_records)
            .unwrap_or(0)
            .clamp(1, FETCH_RECORDS_MAX),
    };
    for (key, led) in &targets {
        if let Err(code) = led {
            let data = answers.entry(*key).or_insert_with(|| partition_data(key.1));
            data.error_code = *code;
        }
    }
    let wait = Duration::from_millis(
        u64::try_from(request.max_wait_ms)
            .unwrap_or(0)
            .min(WAIT_MS_MAX),
    );
    let deadline = Instant::now() + wait;
    let plan = Arc::new(plan);
    let mut shutdown = broker.shutdown.clone();
    loop {
        let pass = {
            let (broker, plan) = (broker.clone(), plan.clone());
            tokio::task::spawn_blocking(move || acquire_pass(&broker, &plan)).await
        };
        let (acquired, expired) = match pass {
            Ok(pass) => pass,
            Err(error) => {
                tracing::warn!(target: "weir::share", %error, "share fetch pass failed");
                (Vec::new(), Vec::new())
            }
        };
        for (key, leader_epoch) in &expired {
            // Expired locks made records available again (or archived them): stored so.
            let _ = persist(broker, key, *leader_epoch).await;
        }
        let any = !acquired.is_empty();
        for (key, outcome) in acquired {
            let data = answers.entry(key).or_insert_with(|| partition_data(key.1));
            match outcome {
                Ok((records, ranges)) => {
                    data.records = Some(records);
                    data.acquired_records = ranges
                        .into_iter()
                        .map(|r| {
                            let mut wire = WireAcquired::default();
                            wire.first_offset = r.first_offset;
                            wire.last_offset = r.last_offset;
                            wire.delivery_count =
                                i16::try_from(r.delivery_count).unwrap_or(i16::MAX);
                            wire
                        })
                        .collect();
                }
                Err(code) => data.error_code = code,
            }
        }
        let now = Instant::now();
        if any || now >= deadline || plan.partitions.is_empty() || *shutdown.borrow() {
            break;
        }
        // New records wake the wait; records released by other members wait for its end.
        let mut watches: Vec<_> = plan
            .partitions
            .iter()
            .map(|(_, p)| p.watch_high_watermark())
            .collect();
        let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
        tokio::select! {
            _ = tokio::time::sleep_until((deadline).into()) => {}
            _ = changed => {}
            _ = shutdown.changed() => {}
        }
    }
    response.responses = by_topic(answers);
    response
}

/// A partition of the session led here, or why not (a Kafka error code).
type Led = Result<Arc<Partition>, i16>;

/// What one acquisition pass reads: the member's partitions led here and its budgets.
struct Plan {
    group: Arc<str>,
    member: Arc<str>,
    partitions: Vec<((Uuid, i32), Arc<Partition>)>,
    partition_max_bytes: BTreeMap<(Uuid, i32), u64>,
    max_bytes: u64,
    max_records: u32,
}

/// One partition's outcome: the batches read and the ranges acquired, or a Kafka error.
type Acquired = Result<(Bytes, Vec<AcquiredRecords>), i16>;

/// Share-partitions (and the leader epoch they are held at) whose acquisition locks expired
/// in a pass, whose state is to be stored.
type Expired = Vec<(ShareKey, i32)>;

/// What one pass acquired from each partition, and the share-partitions whose locks expired.
type Pass = (Vec<((Uuid, i32), Acquired)>, Expired);

/// Acquires for the member from each partition in turn, within the budgets; only partitions
/// where something was acquired or that failed are returned, with the share-partitions whose
/// locks expired. Reads the logs: runs off the async workers.
fn acquire_pass(broker: &Broker, plan: &Plan) -> Pass {
    let mut out = Vec::new();
    let mut expired = Vec::new();
    let mut bytes_left = plan.max_bytes;
    let mut records_left = plan.max_records;
    for (key, partition) in &plan.partitions {
        if bytes_left == 0 || records_left == 0 {
            break;
        }
        let max_bytes = plan
            .partition_max_bytes
            .get(key)
            .map_or(bytes_left, |limit| (*limit).min(bytes_left));
        let share_key = ShareKey {
            group: plan.group.clone(),
            topic_id: key.0,
            partition: key.1,
        };
        match acquire_from(
            broker,
            &share_key,
            &plan.member,
            partition,
            (max_bytes, records_left),
            &mut expired,
        ) {
            Ok(None) => {}
            Ok(Some((records, ranges))) => {
                bytes_left = bytes_left.saturating_sub(records.len() as u64);
                let count: i64 = ranges
                    .iter()
                    .map(|r| r.last_offset - r.first_offset + 1)
                    .sum();
                records_left =
                    records_left.saturating_sub(u32::try_from(count).unwrap_or(u32::MAX));
                out.push((*key, Ok((records, ranges))));
            }
            Err(code) => out.push((*key, Err(code))),
        }
    }
    (out, expired)
}

/// Acquires up to `max_records` records of `partition` for `member`, reading at most
/// `max_bytes` (the first batch whole) from where the share-partition delivers next; adds the
/// share-partition to `expired` when locks of it expired.
fn acquire_from(
    broker: &Broker,
    key: &ShareKey,
    member: &str,
    partition: &Partition,
    (max_bytes, max_records): (u64, u32),
    expired: &mut Expired,
) -> Result<Option<(Bytes, Vec<AcquiredRecords>)>, i16> {
    let now = Instant::now();
    let (leader_epoch, high_watermark, log_start) = {
        let log = partition.log();
        (
            log.leader_epoch(),
            log.high_watermark(),
            log.log_start_offset(),
        )
    };
    let share = &broker.share_state;
    // Made before the pass; gone only if the leader epoch moved since (the next fetch makes it).
    let Some((expiry, next)) = share.with_existing(key, leader_epoch, |p| {
        p.advance_log_start(log_start);
        (p.expire_locks(now), p.next_fetch_offset())
    }) else {
        return Ok(None);
    };
    if expiry.expired > 0 {
        expired.push((key.clone(), leader_epoch));
        let expired = u64::try_from(expiry.expired).unwrap_or(u64::MAX);
        broker
            .metrics
            .share
            .lock_expiries
            .fetch_add(expired, Ordering::Relaxed);
        archived_records(
            broker,
            &key.group,
            (key.topic_id, key.partition),
            &expiry.archived,
        );
    }
    let Some(from) = next.filter(|from| *from < high_watermark) else {
        return Ok(None);
    };
    // Read in windows sized to what is still wanted (the first a guess, the next from the
    // bytes per record seen), not the whole byte budget at once: a consumer asking 2,000
    // records of a partition with 1 MiB allowed would otherwise have 1 MiB read (and
    // zeroed) for the 200 KiB it takes.
    let mut windows: Vec<(Bytes, Vec<Bounded>)> = Vec::new();
    let mut acquired: Vec<AcquiredRecords> = Vec::new();
    let (mut read_from, mut bytes_left) = (from, max_bytes);
    let mut window = FIRST_WINDOW_BYTES.min(max_bytes);
    let (mut bytes_seen, mut records_seen) = (0u64, 0u64);
    loop {
        let Some(bytes) = read_window(partition, (read_from, high_watermark), window)? else {
            break;
        };
        let batches = batch_bounds(&bytes);
        let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
            break;
        };
        let (first_offset, last_offset) = (first.1.first_offset, last.1.last_offset);
        let used = u64::try_from(last.0.end).unwrap_or(u64::MAX);
        let fetched: Vec<FetchedBatch> = batches.iter().map(|(_, batch)| *batch).collect();
        let wanted = max_records.saturating_sub(acquired_count(&acquired));
        let (got, end_offset) = share
            .with_existing(key, leader_epoch, |p| {
                (p.acquire(member, &fetched, wanted, now), p.end_offset())
            })
            .unwrap_or_default();
        for range in got {
            // A range continuing the last one (the window boundary fell inside it) joins it.
            match acquired.last_mut() {
                Some(previous)
                    if previous.last_offset + 1 == range.first_offset
                        && previous.delivery_count == range.delivery_count =>
                {
                    previous.last_offset = range.last_offset;
                }
                _ => acquired.push(range),
            }
        }
        windows.push((bytes, batches));
        bytes_seen += used;
        records_seen += u64::try_from(last_offset - first_offset + 1).unwrap_or(0);
        bytes_left = bytes_left.saturating_sub(used);
        read_from = last_offset + 1;
        // Done once enough is acquired, the budget or the log is spent, or the window was not
        // what held acquisition back (the share-partition did not take all of it in).
        let left = max_records.saturating_sub(acquired_count(&acquired));
        if left == 0 || bytes_left == 0 || read_from >= high_watermark || end_offset <= last_offset
        {
            break;
        }
        let per_record = bytes_seen / records_seen.max(1);
        window = (per_record.saturating_mul(u64::from(left)) * 9 / 8)
            .clamp(MIN_WINDOW_BYTES, bytes_left);
    }
    for range in &acquired {
        let records = u64::try_from(range.last_offset - range.first_offset + 1).unwrap_or(0);
        let share_metrics = &broker.metrics.share;
        share_metrics.acquired.fetch_add(records, Ordering::Relaxed);
        if range.delivery_count > 1 {
            share_metrics
                .redelivered
                .fetch_add(records, Ordering::Relaxed);
        }
    }
    let (Some(first), Some(last)) = (acquired.first(), acquired.last()) else {
        return Ok(None);
    };
    // Only the batches holding acquired records go back: from the first of them to the last,
    // across the windows read (which follow one another in the log).
    let (first_offset, last_offset) = (first.first_offset, last.last_offset);
    let holds = |b: &FetchedBatch| b.last_offset >= first_offset && b.first_offset <= last_offset;
    let mut parts: Vec<Bytes> = windows
        .iter()
        .filter_map(|(bytes, batches)| {
            let kept: Vec<&std::ops::Range<usize>> = batches
                .iter()
                .filter(|(_, b)| holds(b))
                .map(|(range, _)| range)
                .collect();
            Some(bytes.slice(kept.first()?.start..kept.last()?.end))
        })
        .collect();
    let records = match parts.len() {
        1 => parts.remove(0),
        _ => parts.concat().into(),
    };
    Ok(Some((records, acquired)))
}

/// Records a list of acquired ranges covers.
fn acquired_count(acquired: &[AcquiredRecords]) -> u32 {
    let count: i64 = acquired
        .iter()
        .map(|r| r.last_offset - r.first_offset + 1)
        .sum();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// Reads at most `max_bytes` (the first batch whole) of `partition` from `from`, below
/// `upper`; `None` when there is nothing.
fn read_window(
    partition: &Partition,
    (from, upper): (i64, i64),
    max_bytes: u64,
) -> Result<Option<Bytes>, i16> {
    let error = |e: weir_log::LogError| ErrorReply::from(&e).code();
    let view = partition.log().read_view(from, upper).map_err(error)?;
    let Some(slice) = view
        .map(|v| v.slice(max_bytes, true))
        .transpose()
        .map_err(error)?
        .flatten()
    else {
        return Ok(None);
    };
    slice.read().map(Some).map_err(error)
}

/// A batch read: where its bytes are in what was read, and its offsets.
type Bounded = (std::ops::Range<usize>, FetchedBatch);

/// The whole batches in `bytes` (a partial one at the end is left out): their byte ranges and
/// offsets, control batches marked undeliverable.
fn batch_bounds(bytes: &[u8]) -> Vec<Bounded> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while bytes.len() - at >= BATCH_HEADER_BYTES {
        let field = |pos: usize, len: usize| &bytes[at + pos..at + pos + len];
        let be_i32 = |pos: usize| i32::from_be_bytes(field(pos, 4).try_into().unwrap_or([0; 4]));
        let base = i64::from_be_bytes(field(BASE_OFFSET_AT, 8).try_into().unwrap_or([0; 8]));
        let length = usize::try_from(be_i32(BATCH_LENGTH_AT)).unwrap_or(0);
        let end = at + LOG_OVERHEAD_BYTES + length;
        if length == 0 || end > bytes.len() {
            break;
        }
        let attributes = i16::from_be_bytes(field(ATTRIBUTES_AT, 2).try_into().unwrap_or([0; 2]));
        let last = base + i64::from(be_i32(LAST_OFFSET_DELTA_AT).max(0));
        out.push((
            at..end,
            FetchedBatch {
                first_offset: base,
                last_offset: last,
                deliverable: attributes & ATTR_CONTROL == 0,
            },
        ));
        at = end;
    }
    out
}

fn partition_data(index: i32) -> PartitionData {
    let mut data = PartitionData::default();
    data.partition_index = index;
    data.current_leader.leader_id = -1;
    data.current_leader.leader_epoch = -1;
    data
}

fn by_topic(answers: BTreeMap<(Uuid, i32), PartitionData>) -> Vec<ShareFetchableTopicResponse> {
    let mut topics: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
    for ((topic_id, _), data) in answers {
        topics.entry(topic_id).or_default().push(data);
    }
    topics
        .into_iter()
        .map(|(topic_id, partitions)| {
            let mut topic = ShareFetchableTopicResponse::default();
            topic.topic_id = topic_id;
            topic.partitions = partitions;
            topic
        })
        .collect()
}

/// ShareAcknowledge: the member's acknowledgements, in its open session (the final epoch
/// closes it and releases what the member still holds).
pub async fn acknowledge(
    broker: &Arc<Broker>,
    request: ShareAcknowledgeRequest,
    (access, connection): (&Access, &ConnectionShares),
) -> ShareAcknowledgeResponse {
    let mut response = ShareAcknowledgeResponse::default();
    let checked = match checked!(request, access) {
        Ok(checked) => checked,
        Err((code, message)) => {
            response.error_code = code.code();
            response.error_message = Some(str_bytes(message));
            return response;
        }
    };
    let epoch = request.share_session_epoch;
    let session = match epoch {
        0 => Err(SessionError::InvalidEpoch),
        _ => broker.share_state.session(
            (&checked.group, &checked.member),
            epoch,
            (&[], &[]),
            (connection, Instant::now()),
        ),
    };
    let partitions = match session {
        Ok(partitions) => partitions,
        Err(error) => {
            response.error_code = session_error(error).code();
            return response;
        }
    };
    let mut topics: BTreeMap<Uuid, Vec<AckPartitionData>> = BTreeMap::new();
    for (key, acknowledgements) in &checked.acknowledgements {
        let mut data = AckPartitionData::default();
        data.partition_index = key.1;
        data.current_leader.leader_id = -1;
        data.current_leader.leader_epoch = -1;
        data.error_code =
            acknowledge_partition(broker, &checked, *key, acknowledgements, access).await;
        if data.error_code != 0 {
            data.error_message = ResponseError::try_from_code(data.error_code)
                .map(|e| StrBytes::from_string(e.to_string()));
        }
        topics.entry(key.0).or_default().push(data);
    }
    if epoch == FINAL_EPOCH {
        release_session(broker, &checked.group, &checked.member, &partitions).await;
    }
    response.responses = topics
        .into_iter()
        .map(|(topic_id, partitions)| {
            let mut topic = ShareAcknowledgeTopicResponse::default();
            topic.topic_id = topic_id;
            topic.partitions = partitions;
            topic
        })
        .collect();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgement_batches_become_ranges_of_one_type() {
        let one = acknowledgement_ranges(5, 7, &[1]).expect("valid");
        assert_eq!(one.len(), 1);
        assert_eq!(
            (one[0].first_offset, one[0].last_offset, one[0].kind),
            (5, 7, AcknowledgeType::Accept)
        );
        let mixed = acknowledgement_ranges(5, 8, &[1, 1, 3, 0]).expect("valid");
        let kinds: Vec<(i64, i64, AcknowledgeType)> = mixed
            .iter()
            .map(|a| (a.first_offset, a.last_offset, a.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                (5, 6, AcknowledgeType::Accept),
                (7, 7, AcknowledgeType::Reject),
                (8, 8, AcknowledgeType::Gap)
            ]
        );
        assert!(
            acknowledgement_ranges(5, 7, &[1, 1]).is_none(),
            "one type per offset or one"
        );
        assert!(acknowledgement_ranges(7, 5, &[1]).is_none());
        assert!(
            acknowledgement_ranges(5, 5, &[4]).is_none(),
            "renew is not in v1"
        );
        assert!(acknowledgement_ranges(0, i64::MAX, &[1, 1]).is_none());
    }
}
