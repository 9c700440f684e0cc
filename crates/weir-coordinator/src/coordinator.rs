//! The coordinator: groups in memory, loaded from and written to `__consumer_offsets` through
//! [`OffsetsLog`]; the async operations behind each group API; the timer that expires
//! sessions and completes rebalances.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use crate::consumer_group::{
    check_request, sent_subscription_bytes, ConsumerGroup, ConsumerGroupDescription,
    ConsumerGroupSettings, ConsumerHeartbeat, HeartbeatReply, TopicCatalog, JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
};
use crate::group::{
    CommittedOffset, Group, GroupLimits, GroupState, JoinOutcome, JoinRequest, MemberDescription,
    MetadataBounds, Step, SyncOutcome, SyncRequest,
};
use crate::records::{ConsumerKey, GroupValue, OffsetValue, RecordKey};
use crate::GroupError;

pub use weir_metadata::OFFSETS_TOPIC;

/// How long past its own timeouts a JoinGroup or SyncGroup waits at most: the group's timer
/// answers it before then, this bound only guards against a bug leaving it unanswered.
const WAIT_GRACE: Duration = Duration::from_secs(5);
/// Consumer group records appended in one batch at most, well inside the offsets topic's
/// `max.message.bytes`.
const CHANGES_BATCH_BYTES: usize = 256 * 1024;
/// The timer wakes at least this often, whatever the groups' deadlines.
const TIMER_IDLE: Duration = Duration::from_secs(1);
/// How often the member metadata all groups hold is counted exactly.
const METADATA_RECOUNT: Duration = Duration::from_secs(1);

/// One record of the offsets topic: key and value (`None`: a tombstone).
pub type StoredRecord = (Vec<u8>, Option<Vec<u8>>);

/// What [`OffsetsLog::load`] hands each record to: its offset, key and value.
pub type RecordVisitor<'a> = dyn FnMut(i64, &[u8], Option<&[u8]>) + 'a;

/// A future the coordinator awaits.
pub type Pending = Pin<Box<dyn Future<Output = Result<(), GroupError>> + Send>>;

/// An append to the offsets topic: where it landed, and when it is safe.
pub struct Appended {
    /// Offset of the batch's first record.
    pub base_offset: i64,
    /// Resolves once the records are as durable as the topic's policy makes a produce with
    /// `acks=all` (the commit is acknowledged only then).
    pub durable: Pending,
}

/// The coordinator's access to `__consumer_offsets`: the broker's partition API.
pub trait OffsetsLog: Send + Sync + 'static {
    /// Appends `records` as one batch to `partition`. Called under the coordinator's lock, so
    /// records land in the order the coordinator decided them; must not wait for the disk
    /// beyond a write to the page cache.
    fn append(&self, partition: i32, records: Vec<StoredRecord>) -> Result<Appended, GroupError>;

    /// Reads every record of `partition` in offset order, handing `visit` each record's
    /// offset, key and value. Blocking: called off the async workers.
    fn load(&self, partition: i32, visit: &mut RecordVisitor<'_>) -> Result<(), String>;
}

/// Broker settings the coordinator follows.
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorSettings {
    /// Session, delay and size limits for groups.
    pub limits: GroupLimits,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes` (in ms): how long the committed offsets of a group without members are
    /// kept (from when it became empty, or from the commit for a group that never had any).
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: u64,
    /// Settings of consumer group protocol groups.
    pub consumer: ConsumerGroupSettings,
}

/// One offset to commit.
#[derive(Debug, Clone)]
pub struct CommitEntry {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The next offset to read.
    pub offset: i64,
    /// Leader epoch of the last record read, or -1.
    pub leader_epoch: i32,
    /// Client metadata.
    pub metadata: String,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// Protocol type (empty for a group that only has offsets).
    pub protocol_type: String,
    /// State.
    pub state: GroupState,
    /// `consumer` for a consumer group protocol group, else `classic`.
    pub group_type: &'static str,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// State.
    pub state: GroupState,
    /// Protocol type.
    pub protocol_type: String,
    /// Chosen protocol, or empty.
    pub protocol: String,
    /// Members with their assignments.
    pub members: Vec<MemberDescription>,
}

/// Kafka's placement of a group on the offsets topic: `abs(group.hashCode()) % partitions`,
/// with Java's `String.hashCode` over UTF-16 code units and Kafka's `Utils.abs` (`& 0x7fffffff`).
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    let mut hash: i32 = 0;
    for unit in group_id.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    (hash & 0x7fff_ffff) % partitions.max(1)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Groups in memory and what is loaded.
struct Groups {
    /// Partitions of the offsets topic (0 until it exists).
    partitions: i32,
    /// Which partitions are loaded and served.
    loaded: Vec<bool>,
    /// Partitions another broker leads: their groups are told NOT_COORDINATOR.
    elsewhere: Vec<bool>,
    groups: HashMap<String, Group>,
    /// Bytes of member metadata all groups hold, at most: what joins, syncs and subscriptions
    /// added since the timer last counted it exactly (members that left meanwhile count
    /// until that next count, at most [`METADATA_RECOUNT`] later).
    metadata_held: usize,
}

impl Groups {
    /// Admits `more` bytes of member metadata under `group.coordinator.metadata.max.bytes`;
    /// past it the request is answered COORDINATOR_NOT_AVAILABLE, which clients retry, so a
    /// client that fills the coordinator keeps others out only while its members live.
    fn admit_metadata(
        &mut self,
        bounds: &MetadataBounds,
        group_id: &str,
        more: usize,
    ) -> Result<(), GroupError> {
        let held = self.metadata_held.saturating_add(more);
        if held > bounds.coordinator_max_bytes {
            tracing::warn!(target: "weir::groups", group = group_id, bytes = more, held = self.metadata_held, limit = bounds.coordinator_max_bytes, "group request refused (coordinator not available): the groups of this coordinator hold group.coordinator.metadata.max.bytes of member metadata");
            return Err(GroupError::CoordinatorNotAvailable);
        }
        self.metadata_held = held;
        Ok(())
    }

    /// Counts the member metadata every group holds, replacing the estimate.
    fn recount_metadata(&mut self) {
        self.metadata_held = self.groups.values().map(Group::metadata_bytes).sum();
    }
}

/// The group coordinator of this broker.
pub struct GroupCoordinator {
    settings: CoordinatorSettings,
    log: Arc<dyn OffsetsLog>,
    groups: Mutex<Groups>,
    /// Wakes the timer when a deadline may have moved earlier.
    timer: Notify,
}

impl GroupCoordinator {
    /// A coordinator with no partitions yet: group requests get COORDINATOR_NOT_AVAILABLE
    /// until [`GroupCoordinator::start`].
    pub fn new(settings: CoordinatorSettings, log: Arc<dyn OffsetsLog>) -> GroupCoordinator {
        GroupCoordinator {
            settings,
            log,
            groups: Mutex::new(Groups {
                partitions: 0,
                loaded: Vec::new(),
                elsewhere: Vec::new(),
                groups: HashMap::new(),
                metadata_held: 0,
            }),
            timer: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Groups> {
        // A panic here aborts the process (release builds); tests see the state as it was.
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The offsets topic exists with `partitions` partitions: each must be loaded
    /// ([`GroupCoordinator::load`]) before its groups are served.
    pub fn start(&self, partitions: i32) {
        let mut groups = self.lock();
        if groups.partitions == 0 {
            groups.partitions = partitions;
            groups.loaded = vec![false; usize::try_from(partitions).unwrap_or(0)];
            groups.elsewhere = vec![false; groups.loaded.len()];
        }
    }

    /// Partitions of the offsets topic, or 0 before [`GroupCoordinator::start`].
    pub fn partitions(&self) -> i32 {
        self.lock().partitions
    }

    /// Loads one partition of the offsets topic: replays its records into groups and offsets,
    /// then serves them. Returns how many groups and committed offsets it holds. Blocking. A
    /// record that does not parse is skipped with a warning.
    pub fn load(&self, partition: i32) -> Result<(usize, usize), String> {
        let started = Instant::now();
        let mut offsets: HashMap<RecordKey, Option<(i64, OffsetValue)>> = HashMap::new();
        let mut metadata: HashMap<String, Option<GroupValue>> = HashMap::new();
        let mut consumer: HashMap<(String, ConsumerKey), Option<Vec<u8>>> = HashMap::new();
        let mut skipped = 0u64;
        self.log.load(partition, &mut |offset, key, value| {
            let key = match RecordKey::decode(key) {
                Ok(Some(key)) => key,
                Ok(None) => return,
                Err(_) => {
                    skipped += 1;
                    return;
                }
            };
            match key {
                RecordKey::Offset { .. } => {
                    let parsed = value.map(OffsetValue::decode).transpose();
                    match parsed {
                        Ok(value) => {
                            offsets.insert(key, value.map(|v| (offset, v)));
                        }
                        Err(_) => skipped += 1,
                    }
                }
                RecordKey::Group { group } => match value.map(GroupValue::decode).transpose() {
                    Ok(value) => {
                        metadata.insert(group, value);
                    }
                    Err(_) => skipped += 1,
                },
                RecordKey::Consumer { group, key } => {
                    consumer.insert((group, key), value.map(<[u8]>::to_vec));
                }
            }
        })?;
        if skipped > 0 {
            tracing::warn!(target: "weir::groups", partition, skipped, "records of __consumer_offsets that do not parse were skipped");
        }
        let now = Instant::now();
        let time = now_ms();
        let mut groups = self.lock();
        let limits = self.settings.limits;
        let mut loaded_groups = 0usize;
        for (group_id, value) in metadata {
            if let Some(value) = value {
                let group = groups
                    .groups
                    .entry(group_id.clone())
                    .or_insert_with(|| Group::new(group_id, &limits, time));
                group.restore(value, now);
                loaded_groups += 1;
            }
        }
        let mut consumer_groups: HashMap<String, Vec<(ConsumerKey, Vec<u8>)>> = HashMap::new();
        for ((group, key), value) in consumer {
            if let Some(value) = value {
                consumer_groups.entry(group).or_default().push((key, value));
            }
        }
        for (group_id, records) in consumer_groups {
            if !records.iter().any(|(k, _)| *k == ConsumerKey::Metadata) {
                continue; // the group was deleted: only stray member records are left
            }
            let group = groups
                .groups
                .entry(group_id.clone())
                .or_insert_with(|| Group::new(group_id.clone(), &limits, time));
            if !group.has_no_members() {
                continue; // classic members hold the group
            }
            match ConsumerGroup::restore(&records, &self.settings.consumer, now) {
                Ok(restored) => {
                    group.consumer = None;
                    group.as_consumer_group(time).ok();
                    group.consumer = Some(restored);
                    // What the log holds, strays included: the next write fixes any difference.
                    group.persisted = records
                        .into_iter()
                        .map(|(key, value)| {
                            let key = RecordKey::Consumer {
                                group: group_id.clone(),
                                key,
                            };
                            (key.encode(), value)
                        })
                        .collect();
                    loaded_groups += 1;
                }
                Err(error) => {
                    tracing::warn!(target: "weir::groups", group = %group_id, %error, "consumer group records do not parse; the group starts empty");
                }
            }
        }
        let mut loaded_offsets = 0usize;
        for (key, value) in offsets {
            let (
                Some((record_offset, value)),
                RecordKey::Offset {
                    group,
                    topic,
                    partition,
                },
            ) = (value, key)
            else {
                continue;
            };
            let entry = groups
                .groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(group, &limits, time));
            entry.offsets.insert(
                (topic, partition),
                CommittedOffset {
                    value,
                    record_offset,
                },
            );
            loaded_offsets += 1;
        }
        if let Some(index) = usize::try_from(partition)
            .ok()
            .filter(|p| *p < groups.loaded.len())
        {
            groups.loaded[index] = true;
            groups.elsewhere[index] = false;
        }
        drop(groups);
        self.timer.notify_one();
        tracing::debug!(target: "weir::groups", partition, groups = loaded_groups, offsets = loaded_offsets, elapsed_ms = started.elapsed().as_millis() as u64, "loaded __consumer_offsets partition");
        Ok((loaded_groups, loaded_offsets))
    }

    /// The offsets partition of `group_id`, if it is loaded.
    fn served_partition(groups: &Groups, group_id: &str) -> Result<i32, GroupError> {
        if groups.partitions == 0 {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let partition = partition_for(group_id, groups.partitions);
        if groups.elsewhere[partition as usize] {
            return Err(GroupError::NotCoordinator);
        }
        if !groups.loaded[partition as usize] {
            return Err(GroupError::CoordinatorLoadInProgress);
        }
        Ok(partition)
    }

    /// Another broker leads `partition` of the offsets topic now (or this one stopped
    /// leading it): its groups leave memory here and their requests get NOT_COORDINATOR,
    /// so clients find the new coordinator, which loads them from the replicated log.
    pub fn unload(&self, partition: i32) {
        let mut groups = self.lock();
        let Some(index) = usize::try_from(partition)
            .ok()
            .filter(|p| *p < groups.loaded.len())
        else {
            return;
        };
        if groups.elsewhere[index] {
            return;
        }
        let was_loaded = std::mem::replace(&mut groups.loaded[index], false);
        groups.elsewhere[index] = true;
        let count = groups.partitions;
        let before = groups.groups.len();
        groups
            .groups
            .retain(|id, _| partition_for(id, count) != partition);
        let dropped = before - groups.groups.len();
        drop(groups);
        if !was_loaded {
            return;
        }
        tracing::info!(target: "weir::groups", partition, groups = dropped, "no longer coordinating the groups of this __consumer_offsets partition");
    }

    /// Whether `partition` of the offsets topic is loaded and served here.
    pub fn is_loaded(&self, partition: i32) -> bool {
        let groups = self.lock();
        usize::try_from(partition)
            .ok()
            .and_then(|p| groups.loaded.get(p).copied())
            .unwrap_or(false)
    }

    /// Membership requests need a group id; offset commits and fetches, descriptions and
    /// deletions accept the empty one, as Kafka does for old clients.
    fn member_partition(groups: &Groups, group_id: &str) -> Result<i32, GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        Self::served_partition(groups, group_id)
    }

    /// The group a membership request (SyncGroup, Heartbeat, LeaveGroup) names, with its
    /// partition; UNKNOWN_MEMBER_ID when there is no such group.
    fn member_group<'a>(
        groups: &'a mut Groups,
        group_id: &str,
    ) -> Result<(i32, &'a mut Group), GroupError> {
        let partition = Self::member_partition(groups, group_id)?;
        let group = groups
            .groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        Ok((partition, group))
    }

    /// The offsets topic was deleted: every group is forgotten, and group requests get
    /// COORDINATOR_NOT_AVAILABLE until it is created and loaded again.
    pub fn reset(&self) {
        let mut groups = self.lock();
        groups.partitions = 0;
        groups.loaded.clear();
        groups.elsewhere.clear();
        groups.groups.clear();
    }

    /// Checks that `group_id` can be served now (for FindCoordinator and OffsetFetch).
    pub fn check_served(&self, group_id: &str) -> Result<(), GroupError> {
        Self::served_partition(&self.lock(), group_id).map(|_| ())
    }

    /// JoinGroup: waits until the rebalance completes (or fails) for this member.
    pub async fn join_group(&self, group_id: &str, request: JoinRequest) -> JoinOutcome {
        let wait = Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64).max(
            Duration::from_millis(self.settings.limits.initial_rebalance_delay_ms.max(0) as u64),
        ) + WAIT_GRACE;
        let member_id = request.member_id.clone();
        let step = {
            let mut groups = self.lock();
            match Self::member_partition(&groups, group_id) {
                Err(error) => return JoinOutcome::failed(error, &member_id),
                Ok(_) => {
                    let limits = self.settings.limits;
                    // A join the group's own bounds refuse is refused there and adds nothing.
                    let adds = match groups.groups.get(group_id) {
                        Some(group) => group.join_adds_bytes(&request, &limits),
                        None => Group::new(group_id.to_string(), &limits, 0)
                            .join_adds_bytes(&request, &limits),
                    };
                    if let Some(more) = adds {
                        if let Err(error) = groups.admit_metadata(&limits.metadata, group_id, more)
                        {
                            return JoinOutcome::failed(error, &member_id);
                        }
                    }
                    let created = !groups.groups.contains_key(group_id);
                    let group = groups
                        .groups
                        .entry(group_id.to_string())
                        .or_insert_with(|| Group::new(group_id.to_string(), &limits, now_ms()));
                    let step = group.join(request, &limits, Instant::now(), now_ms());
                    // A join refused before it could create the group (a session timeout out
                    // of range, a member id the group never gave, metadata over its bounds)
                    // leaves no group behind, as in Kafka; other refusals of a new member keep
                    // the group it made.
                    let refused_early = matches!(
                        &step,
                        Step::Done(JoinOutcome {
                            error: Some(
                                GroupError::InvalidSessionTimeout
                                    | GroupError::UnknownMemberId
                                    | GroupError::InvalidRequest
                                    | GroupError::GroupMaxSizeReached
                            ),
                            ..
                        })
                    );
                    if created && refused_early && group.has_no_members() {
                        groups.groups.remove(group_id);
                        return match step {
                            Step::Done(outcome) => outcome,
                            _ => JoinOutcome::failed(GroupError::UnknownMemberId, &member_id),
                        };
                    }
                    // An empty consumer group that became classic: its records go.
                    let partition = partition_for(group_id, groups.partitions);
                    if let Some(group) = groups.groups.get_mut(group_id) {
                        self.persist_in_background(partition, group);
                    }
                    step
                }
            }
        };
        self.timer.notify_one();
        match step {
            Step::Done(outcome) => outcome,
            Step::Wait(rx) | Step::Store(_, rx) => match tokio::time::timeout(wait, rx).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(_)) => JoinOutcome::failed(GroupError::UnknownMemberId, &member_id),
                Err(_) => JoinOutcome::failed(GroupError::RebalanceInProgress, &member_id),
            },
        }
    }

    /// SyncGroup: the leader's assignment is stored, then every member gets its part.
    pub async fn sync_group(&self, group_id: &str, request: SyncRequest<'_>) -> SyncOutcome {
        let (rx, store, wait) = {
            let mut groups = self.lock();
            // Assignments the group's bounds refuse are refused there and add nothing.
            let limits = self.settings.limits;
            let assigned = groups
                .groups
                .get(group_id)
                .and_then(|g| g.assignment_bytes(&request.assignments, &limits));
            if let Some(more) = assigned.filter(|more| *more > 0) {
                groups.admit_metadata(&limits.metadata, group_id, more)?;
            }
            let (partition, group) = Self::member_group(&mut groups, group_id)?;
            let wait = group.rebalance_timeout() + WAIT_GRACE;
            match group.sync(request, &limits, Instant::now()) {
                Step::Done(outcome) => return outcome,
                Step::Wait(rx) => (rx, None, wait),
                Step::Store(value, rx) => {
                    let record = (
                        RecordKey::Group {
                            group: group_id.to_string(),
                        }
                        .encode(),
                        Some(value.encode()),
                    );
                    let appended = self.log.append(partition, vec![record]);
                    (rx, Some((value, appended)), wait)
                }
            }
        };
        if let Some((value, appended)) = store {
            let result = match appended {
                Ok(appended) => appended.durable.await,
                Err(error) => Err(error),
            };
            if let Err(error) = &result {
                tracing::warn!(target: "weir::groups", group = group_id, %error, "group assignment not stored; the group rebalances");
            }
            let mut groups = self.lock();
            if let Some(group) = groups.groups.get_mut(group_id) {
                group.finish_sync(
                    value.generation,
                    result.as_ref().map(|_| &value).map_err(|e| *e),
                    Instant::now(),
                    now_ms(),
                );
            }
            drop(groups);
            self.timer.notify_one();
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(GroupError::UnknownMemberId),
            Err(_) => Err(GroupError::RebalanceInProgress),
        }
    }

    /// Heartbeat.
    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), GroupError> {
        let mut groups = self.lock();
        Self::member_group(&mut groups, group_id)?.1.heartbeat(
            member_id,
            instance_id,
            generation,
            Instant::now(),
        )
    }

    /// LeaveGroup for each `(member id, instance id)`: one result per member.
    pub fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let results = {
            let mut groups = self.lock();
            let (partition, group) = Self::member_group(&mut groups, group_id)?;
            let mut became_empty = false;
            let results = members
                .iter()
                .map(|(member_id, instance_id)| {
                    group
                        .leave(member_id, instance_id.as_deref(), Instant::now(), now_ms())
                        .map(|empty| became_empty |= empty)
                })
                .collect();
            if became_empty {
                self.store_group(partition, group);
            }
            results
        };
        self.timer.notify_one();
        Ok(results)
    }

    /// OffsetCommit: one result per entry, after the records are appended and durable.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        entries: &[CommitEntry],
        version: i16,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let commit_timestamp = now_ms();
        let mut results: Vec<Result<(), GroupError>> = Vec::with_capacity(entries.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        let appended = {
            let mut groups = self.lock();
            let partition = Self::served_partition(&groups, group_id)?;
            let limits = self.settings.limits;
            match groups.groups.get(group_id) {
                Some(group) => group.check_commit(generation, member_id, instance_id, version)?,
                None if generation < 0 => {}
                // The handler answers ILLEGAL_GENERATION instead below OffsetCommit v9.
                None => return Err(GroupError::GroupIdNotFound),
            }
            for (index, entry) in entries.iter().enumerate() {
                if entry.metadata.len() > self.settings.offset_metadata_max_bytes {
                    results.push(Err(GroupError::OffsetMetadataTooLarge));
                    continue;
                }
                results.push(Ok(()));
                let value = OffsetValue {
                    offset: entry.offset,
                    leader_epoch: entry.leader_epoch,
                    metadata: entry.metadata.clone(),
                    commit_timestamp,
                };
                records.push((
                    RecordKey::Offset {
                        group: group_id.to_string(),
                        topic: entry.topic.clone(),
                        partition: entry.partition,
                    }
                    .encode(),
                    Some(value.encode()),
                ));
                accepted.push((index, value));
            }
            if records.is_empty() {
                return Ok(results);
            }
            let group = groups
                .groups
                .entry(group_id.to_string())
                .or_insert_with(|| Group::new(group_id.to_string(), &limits, commit_timestamp));
            let appended = self.log.append(partition, records);
            if appended.is_ok() {
                group.pending_commits += 1;
            }
            appended
        };
        let stored = match appended {
            Ok(appended) => {
                let durable = appended.durable.await.map(|()| appended.base_offset);
                let mut groups = self.lock();
                if let Some(group) = groups.groups.get_mut(group_id) {
                    group.pending_commits = group.pending_commits.saturating_sub(1);
                    if let Ok(base_offset) = durable {
                        for (position, (index, value)) in accepted.iter().enumerate() {
                            let entry = &entries[*index];
                            let key = (entry.topic.clone(), entry.partition);
                            group.apply_commit(key, value.clone(), base_offset + position as i64);
                        }
                    }
                }
                durable
            }
            Err(error) => Err(error),
        };
        match stored {
            Ok(_) => {}
            Err(error) => {
                for (index, _) in accepted {
                    results[index] = Err(error);
                }
            }
        }
        Ok(results)
    }

    /// OffsetFetch: the committed offset of each requested partition (`None`: nothing
    /// committed), or of every partition with one when `topics` is `None`.
    /// A fetch that names a member (`member`: id and epoch, OffsetFetch v9) of a
    /// consumer-protocol group is checked against its membership.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
        member: Option<(&str, i32)>,
    ) -> Result<Vec<(String, i32, Option<OffsetValue>)>, GroupError> {
        let groups = self.lock();
        Self::served_partition(&groups, group_id)?;
        let group = groups.groups.get(group_id);
        if let (Some(consumer), Some((member_id, epoch))) =
            (group.and_then(|g| g.consumer.as_ref()), member)
        {
            consumer.check_fetch(member_id, epoch)?;
        }
        let committed = |topic: &str, partition: i32| {
            group.and_then(|g| {
                g.offsets
                    .get(&(topic.to_string(), partition))
                    .map(|c| c.value.clone())
            })
        };
        Ok(match topics {
            Some(topics) => topics
                .iter()
                .flat_map(|(topic, partitions)| {
                    partitions
                        .iter()
                        .map(|&p| (topic.clone(), p, committed(topic, p)))
                })
                .collect(),
            None => {
                let mut all: Vec<_> = group
                    .map(|g| {
                        g.offsets
                            .iter()
                            .map(|((topic, p), c)| (topic.clone(), *p, Some(c.value.clone())))
                            .collect()
                    })
                    .unwrap_or_default();
                all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                all
            }
        })
    }

    /// ListGroups: every group in a loaded partition.
    pub fn list_groups(&self) -> Vec<GroupListing> {
        let groups = self.lock();
        let mut listing: Vec<GroupListing> = groups
            .groups
            .values()
            .map(|g| GroupListing {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type().unwrap_or_default().to_string(),
                state: g.state(),
                group_type: if g.consumer.is_some() {
                    "consumer"
                } else {
                    "classic"
                },
            })
            .collect();
        listing.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listing
    }

    /// ConsumerGroupHeartbeat: joins, heartbeats or leaves a consumer group protocol group
    /// (the group is created by a join). `version` 0 hands a joining member without an id a
    /// new one; from version 1 the client chooses it.
    /// What changed is appended to the offsets topic and durable before the answer.
    pub async fn consumer_heartbeat(
        &self,
        group_id: &str,
        mut request: ConsumerHeartbeat,
        version: i16,
        catalog: &dyn TopicCatalog,
    ) -> Result<HeartbeatReply, GroupError> {
        if group_id.is_empty() || group_id.len() > i16::MAX as usize {
            return Err(GroupError::InvalidRequest);
        }
        check_request(&request, &self.settings.consumer.metadata)?;
        if request.member_id.trim().is_empty() {
            match (version, request.member_epoch) {
                (0, JOIN_EPOCH) => request.member_id = uuid::Uuid::new_v4().to_string(),
                (0, STATIC_LEAVE_EPOCH) => {}
                _ => return Err(GroupError::InvalidRequest),
            }
        }
        let (reply, appended) = {
            let mut groups = self.lock();
            let partition = Self::served_partition(&groups, group_id)?;
            let joining = request.member_epoch == JOIN_EPOCH;
            let time = now_ms();
            let limits = self.settings.limits;
            let created = !groups.groups.contains_key(group_id);
            if created && !joining {
                return Err(GroupError::GroupIdNotFound);
            }
            // (check_request refused a subscription over the member bound.) One the group's
            // bound refuses is refused there and adds nothing.
            let bounds = self.settings.consumer.metadata;
            let adds = match groups
                .groups
                .get(group_id)
                .and_then(|g| g.consumer.as_ref())
            {
                Some(consumer) => consumer.subscription_adds_bytes(&request, &bounds),
                None => Some(sent_subscription_bytes(&request)),
            };
            if let Some(more) = adds.filter(|more| *more > 0) {
                groups.admit_metadata(&bounds, group_id, more)?;
            }
            let group = groups
                .groups
                .entry(group_id.to_string())
                .or_insert_with(|| Group::new(group_id.to_string(), &limits, time));
            let was_empty = group.has_no_members();
            let was_classic = group
                .consumer
                .is_none()
                .then(|| group.protocol_type().map(str::to_string));
            let consumer = group.as_consumer_group(time)?;
            let reply = consumer.heartbeat(
                group_id,
                request,
                catalog,
                &self.settings.consumer,
                Instant::now(),
            );
            // A refused join changes nothing: no group made, none converted.
            if reply.is_err() && created {
                groups.groups.remove(group_id);
                return reply;
            }
            if let (Err(_), Some(protocol_type)) = (&reply, was_classic) {
                group.undo_consumer_group(protocol_type);
                return reply;
            }
            if group.has_no_members() != was_empty {
                group.touch_state(time);
            }
            (reply, self.persist_consumer_group(partition, group))
        };
        self.timer.notify_one();
        if let Some(appended) = appended {
            if let Err(error) = appended.await {
                tracing::warn!(target: "weir::groups", group = group_id, %error, "consumer group change not stored");
                return Err(GroupError::CoordinatorNotAvailable);
            }
        }
        reply
    }

    /// Appends what changed in a group's consumer records (see [`Group::consumer_changes`]),
    /// in batches of at most [`CHANGES_BATCH_BYTES`]; the returned future resolves once all
    /// are durable. After a failed append the group counts as written only up to the batches
    /// that were appended, so its next change writes the rest again.
    fn persist_consumer_group(&self, partition: i32, group: &mut Group) -> Option<Pending> {
        let before = group.persisted.clone();
        let changes = group.consumer_changes();
        if changes.is_empty() {
            return None;
        }
        let mut durable = Vec::new();
        let mut batch: Vec<StoredRecord> = Vec::new();
        let mut batch_bytes = 0usize;
        let mut written = before;
        let mut pending = changes.into_iter().peekable();
        while let Some((key, value)) = pending.next() {
            batch_bytes += key.len() + value.as_ref().map_or(0, Vec::len);
            batch.push((key, value));
            if batch_bytes < CHANGES_BATCH_BYTES && pending.peek().is_some() {
                continue;
            }
            let records = std::mem::take(&mut batch);
            batch_bytes = 0;
            match self.log.append(partition, records.clone()) {
                Ok(appended) => {
                    durable.push(appended.durable);
                    for (key, value) in records {
                        match value {
                            Some(value) => written.insert(key, value),
                            None => written.remove(&key),
                        };
                    }
                }
                Err(error) => {
                    group.persisted = written;
                    return Some(Box::pin(std::future::ready(Err(error))));
                }
            }
        }
        Some(Box::pin(async move {
            for wait in durable {
                wait.await?;
            }
            Ok(())
        }))
    }

    /// Persists consumer group changes nobody waits for (sessions that expired, a group
    /// turned classic), logging a failure.
    fn persist_in_background(&self, partition: i32, group: &mut Group) {
        if let Some(durable) = self.persist_consumer_group(partition, group) {
            let group_id = group.id.clone();
            tokio::spawn(async move {
                if let Err(error) = durable.await {
                    tracing::warn!(target: "weir::groups", group = %group_id, %error, "consumer group change not stored");
                }
            });
        }
    }

    /// ConsumerGroupDescribe for one group: `Ok(None)` when it does not exist,
    /// GROUP_ID_NOT_FOUND for a classic group.
    pub fn describe_consumer_group(
        &self,
        group_id: &str,
    ) -> Result<Option<ConsumerGroupDescription>, GroupError> {
        let groups = self.lock();
        Self::member_partition(&groups, group_id)?;
        match groups.groups.get(group_id) {
            None => Ok(None),
            Some(group) => group
                .consumer
                .as_ref()
                .map(|c| Some(c.describe()))
                .ok_or(GroupError::GroupIdNotFound),
        }
    }

    /// DescribeGroups for one group; `Ok(None)` when it does not exist or is not a classic
    /// group (Kafka describes a consumer-protocol group there as Dead).
    pub fn describe_group(&self, group_id: &str) -> Result<Option<GroupSummary>, GroupError> {
        let groups = self.lock();
        Self::served_partition(&groups, group_id)?;
        let classic = groups.groups.get(group_id).filter(|g| g.consumer.is_none());
        Ok(classic.map(|g| GroupSummary {
            state: g.state(),
            protocol_type: g.protocol_type().unwrap_or_default().to_string(),
            protocol: g.protocol().unwrap_or_default().to_string(),
            members: g.describe_members(),
        }))
    }

    /// DeleteGroups for one group: only an Empty group; its metadata and offsets are
    /// tombstoned before it is forgotten.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), GroupError> {
        let appended = {
            let groups = self.lock();
            let partition = Self::served_partition(&groups, group_id)?;
            let group = groups
                .groups
                .get(group_id)
                .ok_or(GroupError::GroupIdNotFound)?;
            if !group.has_no_members() || group.pending_commits > 0 {
                return Err(GroupError::NonEmptyGroup);
            }
            let keys: Vec<(String, i32)> = group.offsets.keys().cloned().collect();
            let mut records: Vec<StoredRecord> = keys
                .iter()
                .map(|(topic, p)| (offset_key(group_id, topic, *p), None))
                .collect();
            records.push((
                RecordKey::Group {
                    group: group_id.to_string(),
                }
                .encode(),
                None,
            ));
            // A consumer group's records go with it.
            records.extend(group.persisted.keys().map(|key| (key.clone(), None)));
            (keys, self.log.append(partition, records)?)
        };
        let (keys, appended) = appended;
        appended.durable.await?;
        let mut groups = self.lock();
        if let Some(group) = groups.groups.get_mut(group_id) {
            if group.has_no_members() {
                group.consumer = None;
                group.persisted.clear();
            }
            for (i, key) in keys.into_iter().enumerate() {
                group.apply_delete(key, appended.base_offset + i as i64);
            }
            if group.has_no_members() && group.offsets.is_empty() && group.pending_commits == 0 {
                groups.groups.remove(group_id);
            }
        }
        Ok(())
    }

    /// OffsetDelete: removes the committed offsets of `partitions` unless the group's members
    /// subscribe to the topic (GROUP_SUBSCRIBED_TO_TOPIC for those). One result per entry.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let (results, tombstoned, appended) = {
            let groups = self.lock();
            let partition = Self::served_partition(&groups, group_id)?;
            let group = groups
                .groups
                .get(group_id)
                .ok_or(GroupError::GroupIdNotFound)?;
            let subscribed = if group.state() == GroupState::Empty {
                Vec::new()
            } else {
                group.subscribed_topics()
            };
            let mut records = Vec::new();
            let mut tombstoned = Vec::new();
            let results: Vec<Result<(), GroupError>> = partitions
                .iter()
                .map(|(topic, p)| {
                    if subscribed.contains(topic) {
                        return Err(GroupError::GroupSubscribedToTopic);
                    }
                    if group.offsets.contains_key(&(topic.clone(), *p)) {
                        records.push((offset_key(group_id, topic, *p), None));
                        tombstoned.push((topic.clone(), *p));
                    }
                    Ok(())
                })
                .collect();
            if records.is_empty() {
                return Ok(results);
            }
            (results, tombstoned, self.log.append(partition, records)?)
        };
        appended.durable.await?;
        let mut groups = self.lock();
        if let Some(group) = groups.groups.get_mut(group_id) {
            for (i, key) in tombstoned.into_iter().enumerate() {
                group.apply_delete(key, appended.base_offset + i as i64);
            }
        }
        Ok(results)
    }

    /// Stores a group's metadata without waiting (after it became Empty: a restart must not
    /// bring back members that left). A failure is logged; the next change stores it again.
    fn store_group(&self, partition: i32, group: &Group) {
        let record = (
            RecordKey::Group {
                group: group.id.clone(),
            }
            .encode(),
            Some(group.stored_value().encode()),
        );
        match self.log.append(partition, vec![record]) {
            Ok(appended) => {
                let group_id = group.id.clone();
                tokio::spawn(async move {
                    if let Err(error) = appended.durable.await {
                        tracing::warn!(target: "weir::groups", group = %group_id, %error, "group metadata not made durable");
                    }
                });
            }
            Err(error) => {
                tracing::warn!(target: "weir::groups", group = %group.id, %error, "group metadata not stored");
            }
        }
    }

    /// Expires sessions and pending member ids and completes rebalances whose time is up,
    /// until `stop` resolves.
    pub async fn run_timers(self: Arc<Self>, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let retention_every =
            Duration::from_millis(self.settings.offsets_retention_check_interval_ms.max(1));
        let mut next_retention = Instant::now() + retention_every;
        let mut next_recount = Instant::now();
        loop {
            if Instant::now() >= next_retention {
                self.expire_offsets(now_ms());
                next_retention = Instant::now() + retention_every;
            }
            if Instant::now() >= next_recount {
                self.lock().recount_metadata();
                next_recount = Instant::now() + METADATA_RECOUNT;
            }
            let next = {
                let groups = self.lock();
                groups
                    .groups
                    .values()
                    .filter_map(Group::next_deadline)
                    .min()
            };
            let wake = next
                .unwrap_or_else(|| Instant::now() + TIMER_IDLE)
                .min(Instant::now() + TIMER_IDLE)
                .min(next_retention)
                .min(next_recount);
            tokio::select! {
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = self.timer.notified() => {}
                _ = &mut stop => return,
            }
            self.tick();
        }
    }

    /// Deletes (with tombstones) the committed offsets of groups without members that are
    /// older than `offsets.retention.minutes` — counted from when a group became empty, or from
    /// each commit for a group that never had members — and forgets groups left with
    /// nothing, as Kafka does. A failed append keeps them for the next check.
    pub fn expire_offsets(&self, now_ms: i64) {
        let retention = self.settings.offsets_retention_ms;
        let mut groups = self.lock();
        let partitions = groups.partitions;
        if partitions == 0 {
            return;
        }
        let mut forget = Vec::new();
        for group in groups.groups.values_mut() {
            if !group.has_no_members() || group.pending_commits > 0 {
                continue;
            }
            let emptied_at = group.protocol_type().map(|_| group.state_since_ms());
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|(_, c)| {
                    let since = emptied_at.unwrap_or(c.value.commit_timestamp);
                    now_ms.saturating_sub(since) >= retention
                })
                .map(|(k, _)| k.clone())
                .collect();
            // Nothing left once these go (or nothing committed at all): the group goes too.
            let emptying = expired.len() == group.offsets.len();
            if !emptying && expired.is_empty() {
                continue;
            }
            let mut records: Vec<StoredRecord> = expired
                .iter()
                .map(|(topic, p)| (offset_key(&group.id, topic, *p), None))
                .collect();
            if emptying {
                records.push((
                    RecordKey::Group {
                        group: group.id.clone(),
                    }
                    .encode(),
                    None,
                ));
                group.consumer = None;
                records.extend(group.consumer_changes());
            }
            let partition = partition_for(&group.id, partitions);
            match self.log.append(partition, records) {
                Ok(appended) => {
                    let base = appended.base_offset;
                    tokio::spawn(async move {
                        let _ = appended.durable.await;
                    });
                    for (i, key) in expired.iter().enumerate() {
                        group.apply_delete(key.clone(), base + i as i64);
                    }
                    tracing::info!(target: "weir::groups", group = %group.id, offsets = expired.len(), "committed offsets expired (offsets.retention.minutes)");
                    if emptying {
                        forget.push(group.id.clone());
                    }
                }
                Err(error) => {
                    tracing::warn!(target: "weir::groups", group = %group.id, %error, "expired offsets not deleted; trying again later");
                }
            }
        }
        for id in forget {
            groups.groups.remove(&id);
        }
    }

    fn tick(&self) {
        let now = Instant::now();
        let time = now_ms();
        let mut groups = self.lock();
        let partitions = groups.partitions;
        let mut emptied = Vec::new();
        for group in groups.groups.values_mut() {
            if group.next_deadline().is_none_or(|d| d > now) {
                continue;
            }
            let became_empty = group.tick(now, time);
            let partition = partition_for(&group.id, partitions);
            if group.consumer.is_some() {
                self.persist_in_background(partition, group);
            } else if became_empty {
                // A classic group's stored members must go.
                emptied.push(group.id.clone());
            }
        }
        for group_id in emptied {
            if let Some(group) = groups.groups.get(&group_id) {
                self.store_group(partition_for(&group_id, partitions), group);
            }
        }
    }
}

fn offset_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
    RecordKey::Offset {
        group: group.to_string(),
        topic: topic.to_string(),
        partition,
    }
    .encode()
}

#[cfg(test)]
mod tests_support {
    use super::*;

    /// An offsets topic in memory: records per partition, in append order.
    #[derive(Default)]
    pub(super) struct MemoryLog {
        partitions: Mutex<HashMap<i32, Vec<StoredRecord>>>,
    }

    impl MemoryLog {
        /// Every record of every partition, partition by partition.
        pub(super) fn records(&self) -> Vec<StoredRecord> {
            let partitions = self.partitions.lock().expect("lock");
            let mut keys: Vec<&i32> = partitions.keys().collect();
            keys.sort();
            keys.into_iter()
                .flat_map(|p| partitions[p].iter().cloned())
                .collect()
        }
    }

    impl OffsetsLog for MemoryLog {
        fn append(
            &self,
            partition: i32,
            records: Vec<StoredRecord>,
        ) -> Result<Appended, GroupError> {
            let mut partitions = self.partitions.lock().expect("lock");
            let log = partitions.entry(partition).or_default();
            let base_offset = log.len() as i64;
            log.extend(records);
            Ok(Appended {
                base_offset,
                durable: Box::pin(std::future::ready(Ok(()))),
            })
        }

        fn load(&self, partition: i32, visit: &mut RecordVisitor<'_>) -> Result<(), String> {
            let partitions = self.partitions.lock().expect("lock");
            for (offset, (key, value)) in
                partitions.get(&partition).into_iter().flatten().enumerate()
            {
                visit(offset as i64, key, value.as_deref());
            }
            Ok(())
        }
    }

    pub(super) const PARTITIONS: i32 = 4;

    pub(super) const METADATA_BOUNDS: MetadataBounds = MetadataBounds {
        member_max_bytes: 1 << 20,
        group_max_bytes: 32 << 20,
        coordinator_max_bytes: 256 << 20,
    };

    pub(super) const CONSUMER_SETTINGS: ConsumerGroupSettings = ConsumerGroupSettings {
        session_timeout_ms: 1_000,
        heartbeat_interval_ms: 100,
        max_size: 3,
        metadata: METADATA_BOUNDS,
    };

    pub(super) fn coordinator(log: Arc<MemoryLog>) -> GroupCoordinator {
        coordinator_bounded(log, METADATA_BOUNDS)
    }

    /// [`coordinator`] holding at most `bounds` of member metadata.
    pub(super) fn coordinator_bounded(
        log: Arc<MemoryLog>,
        bounds: MetadataBounds,
    ) -> GroupCoordinator {
        let settings = CoordinatorSettings {
            limits: GroupLimits {
                session_timeout_min_ms: 1_000,
                session_timeout_max_ms: 100_000,
                initial_rebalance_delay_ms: 0,
                max_size: 10,
                metadata: bounds,
            },
            offset_metadata_max_bytes: 8,
            offsets_retention_ms: 1_000,
            offsets_retention_check_interval_ms: 1_000,
            consumer: ConsumerGroupSettings {
                metadata: bounds,
                ..CONSUMER_SETTINGS
            },
        };
        let coordinator = GroupCoordinator::new(settings, log);
        coordinator.start(PARTITIONS);
        for p in 0..PARTITIONS {
            coordinator.load(p).expect("load");
        }
        coordinator
    }

    pub(super) fn entry(topic: &str, partition: i32, offset: i64, metadata: &str) -> CommitEntry {
        CommitEntry {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 0,
            metadata: metadata.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::group::JoinRequest;

    use super::tests_support::*;

    #[test]
    fn groups_land_where_kafka_puts_them() {
        // Values from Java: "my-group".hashCode() is -1906497762 (masked, not negated, as
        // Kafka's Utils.abs does); the last one hashes UTF-16 code units, surrogates included.
        assert_eq!(partition_for("my-group", 50), 36);
        assert_eq!(partition_for("zzzzzzzzzzzz", 50), 42);
        assert_eq!(partition_for("grüße-😀", 50), 27);
    }

    #[tokio::test]
    async fn committed_offsets_and_groups_survive_a_reload_and_deletes_are_tombstoned() {
        let log = Arc::new(MemoryLog::default());
        let first = coordinator(log.clone());
        let results = first
            .commit_offsets(
                "g",
                -1,
                "",
                None,
                &[
                    entry("t", 0, 10, "m"),
                    entry("t", 1, 20, "too long metadata"),
                ],
                9,
            )
            .await
            .expect("commit");
        assert_eq!(
            results,
            vec![Ok(()), Err(GroupError::OffsetMetadataTooLarge)]
        );
        first
            .commit_offsets("g", -1, "", None, &[entry("t", 0, 11, "")], 9)
            .await
            .expect("commit");
        let join = JoinRequest {
            member_id: String::new(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
            require_known_member_id: false,
        };
        let joined = first.join_group("h", join).await;
        assert_eq!(joined.error, None);
        let synced = first
            .sync_group(
                "h",
                SyncRequest {
                    member_id: &joined.member_id,
                    instance_id: None,
                    generation: 1,
                    protocol_type: None,
                    protocol_name: None,
                    assignments: vec![(joined.member_id.clone(), Bytes::from_static(b"asg"))],
                },
            )
            .await
            .expect("synced");
        assert_eq!(synced.assignment, Bytes::from_static(b"asg"));

        let second = coordinator(log.clone());
        let fetched = second.fetch_offsets("g", None, None).expect("fetch");
        assert_eq!(fetched.len(), 1);
        assert_eq!(
            (fetched[0].1, fetched[0].2.as_ref().map(|v| v.offset)),
            (0, Some(11))
        );
        let h = second.describe_group("h").expect("served").expect("exists");
        assert_eq!(h.state, GroupState::Stable);
        assert_eq!(h.members[0].assignment, Bytes::from_static(b"asg"));
        assert_eq!(
            second.delete_group("h").await,
            Err(GroupError::NonEmptyGroup)
        );
        assert_eq!(
            second.delete_group("nope").await,
            Err(GroupError::GroupIdNotFound)
        );
        second.delete_group("g").await.expect("deleted");

        let third = coordinator(log);
        assert_eq!(
            third.fetch_offsets("g", None, None).expect("fetch"),
            Vec::new()
        );
        assert!(third.list_groups().iter().all(|g| g.group_id != "g"));
        assert_eq!(
            third
                .commit_offsets("h", 5, "stranger", None, &[entry("t", 0, 1, "")], 9)
                .await,
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(
            third
                .commit_offsets("fresh", 3, "m", None, &[entry("t", 0, 1, "")], 9)
                .await,
            Err(GroupError::GroupIdNotFound)
        );
    }

    #[test]
    fn groups_of_an_unloaded_partition_wait_for_the_load() {
        let coordinator = GroupCoordinator::new(
            CoordinatorSettings {
                limits: GroupLimits {
                    session_timeout_min_ms: 1,
                    session_timeout_max_ms: 10,
                    initial_rebalance_delay_ms: 0,
                    max_size: 1,
                    metadata: METADATA_BOUNDS,
                },
                offset_metadata_max_bytes: 1,
                offsets_retention_ms: 1,
                offsets_retention_check_interval_ms: 1,
                consumer: CONSUMER_SETTINGS,
            },
            Arc::new(MemoryLog::default()),
        );
        assert_eq!(
            coordinator.check_served("g"),
            Err(GroupError::CoordinatorNotAvailable)
        );
        coordinator.start(1);
        assert_eq!(
            coordinator.check_served("g"),
            Err(GroupError::CoordinatorLoadInProgress)
        );
        coordinator.load(0).expect("load");
        assert_eq!(coordinator.check_served("g"), Ok(()));
        // Leadership of the partition moved away: the group is served elsewhere, until this
        // broker leads (and loads) it again.
        coordinator.unload(0);
        assert!(!coordinator.is_loaded(0));
        assert_eq!(
            coordinator.check_served("g"),
            Err(GroupError::NotCoordinator)
        );
        coordinator.load(0).expect("load again");
        assert_eq!(coordinator.check_served("g"), Ok(()));
        assert_eq!(
            coordinator.check_served(""),
            Ok(()),
            "old clients commit with no group id"
        );
        assert_eq!(
            coordinator.heartbeat("", "m", None, 1),
            Err(GroupError::InvalidGroupId)
        );
        coordinator.reset();
        assert_eq!(
            coordinator.check_served("g"),
            Err(GroupError::CoordinatorNotAvailable)
        );
    }

    #[tokio::test]
    async fn offsets_of_groups_without_members_expire_and_the_group_goes() {
        let log = Arc::new(MemoryLog::default());
        let first = coordinator(log.clone());
        first
            .commit_offsets(
                "simple",
                -1,
                "",
                None,
                &[entry("t", 0, 10, ""), entry("t", 1, 20, "")],
                9,
            )
            .await
            .expect("commit");
        let committed_at = first.fetch_offsets("simple", None, None).expect("fetch")[0]
            .2
            .as_ref()
            .expect("committed")
            .commit_timestamp;
        first.expire_offsets(committed_at + 999);
        assert_eq!(
            first
                .fetch_offsets("simple", None, None)
                .expect("fetch")
                .len(),
            2,
            "not yet"
        );
        first.expire_offsets(committed_at + 1_000);
        assert!(first
            .fetch_offsets("simple", None, None)
            .expect("fetch")
            .is_empty());
        assert!(first.list_groups().is_empty(), "the group is forgotten");
        let reloaded = coordinator(log);
        assert!(
            reloaded
                .fetch_offsets("simple", None, None)
                .expect("fetch")
                .is_empty(),
            "tombstoned"
        );
        assert!(reloaded.list_groups().is_empty());
    }
}

#[cfg(test)]
mod consumer_protocol_tests {
    use std::collections::{BTreeMap, BTreeSet};

    use uuid::Uuid;

    use super::tests_support::*;
    use super::*;
    use crate::assignors::TopicPartitions;

    struct OneTopic(Uuid);

    impl TopicCatalog for OneTopic {
        fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
            (name == "t").then_some((self.0, 4))
        }
        fn topic_name(&self, id: Uuid) -> Option<String> {
            (id == self.0).then(|| "t".to_string())
        }
        fn topic_names(&self) -> Vec<String> {
            vec!["t".to_string()]
        }
        fn version(&self) -> u64 {
            0
        }
    }

    fn heartbeat(member: &str, epoch: i32, owned: Option<TopicPartitions>) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
            topic_names: (epoch == 0).then(|| vec!["t".to_string()]),
            owned: owned.or_else(|| (epoch == 0).then(BTreeMap::new)),
            ..ConsumerHeartbeat::default()
        }
    }

    /// Member `member` joins group `g`.
    async fn join(
        coordinator: &GroupCoordinator,
        catalog: &OneTopic,
        member: &str,
    ) -> HeartbeatReply {
        coordinator
            .consumer_heartbeat("g", heartbeat(member, 0, None), 1, catalog)
            .await
            .expect("join")
    }

    #[tokio::test]
    async fn a_member_leaving_a_restored_group_moves_only_its_partitions() {
        let log = Arc::new(MemoryLog::default());
        let catalog = OneTopic(Uuid::new_v4());
        let first = coordinator(log.clone());
        let a = join(&first, &catalog, "a").await;
        join(&first, &catalog, "b").await;
        let all = a.assignment.expect("a has everything");
        let revoking = first
            .consumer_heartbeat("g", heartbeat("a", 1, Some(all)), 1, &catalog)
            .await
            .expect("a");
        let a_kept = revoking.assignment.expect("a keeps two");
        let acked = first
            .consumer_heartbeat("g", heartbeat("a", 1, Some(a_kept.clone())), 1, &catalog)
            .await
            .expect("ack");
        assert_eq!(acked.member_epoch, 2);
        let second = coordinator(log);
        // b leaves before anyone heartbeats the new coordinator: a keeps what it had.
        second
            .consumer_heartbeat("g", heartbeat("b", -1, None), 1, &catalog)
            .await
            .expect("leave");
        let a = second
            .consumer_heartbeat("g", heartbeat("a", 2, Some(a_kept.clone())), 1, &catalog)
            .await
            .expect("a");
        let now_owned = a.assignment.expect("a gains b's partitions");
        assert_eq!(now_owned.values().map(BTreeSet::len).sum::<usize>(), 4);
        for (topic, ps) in &a_kept {
            assert!(ps.is_subset(&now_owned[topic]), "nothing revoked from a");
        }
    }

    /// Groups that fill `group.coordinator.metadata.max.bytes` keep new joins out with
    /// COORDINATOR_NOT_AVAILABLE (whichever protocol) until members leave and the timer's count
    /// sees it; members already in may rejoin with what they hold.
    #[tokio::test]
    async fn the_groups_of_a_coordinator_hold_a_bounded_amount_of_metadata() {
        let bounds = MetadataBounds {
            member_max_bytes: 1_000,
            group_max_bytes: 2_000,
            coordinator_max_bytes: 3_000,
        };
        let coordinator = coordinator_bounded(Arc::new(MemoryLog::default()), bounds);
        let catalog = OneTopic(Uuid::new_v4());
        let classic = |group: &str, member_id: &str| JoinRequest {
            member_id: member_id.to_string(),
            group_instance_id: None,
            client_id: format!("{group}-client"),
            client_host: "/h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), bytes::Bytes::from(vec![0u8; 895]))],
            require_known_member_id: false,
        };
        let mut members = Vec::new();
        for group in ["a", "b", "c"] {
            let joined = coordinator.join_group(group, classic(group, "")).await;
            assert_eq!(joined.error, None, "{group}");
            members.push(joined.member_id);
        }
        let refused = coordinator.join_group("d", classic("d", "")).await;
        assert_eq!(refused.error, Some(GroupError::CoordinatorNotAvailable));
        let mut too_large = classic("a", "");
        too_large.protocols[0].1 = bytes::Bytes::from(vec![0u8; 1_000]);
        let refused = coordinator.join_group("a", too_large).await;
        assert_eq!(refused.error, Some(GroupError::InvalidRequest));
        assert_eq!(
            coordinator.lock().metadata_held,
            3 * 900,
            "refused joins add nothing"
        );
        let mut subscription = heartbeat("x", 0, None);
        subscription.topic_names = Some(vec!["t".repeat(400)]);
        assert_eq!(
            coordinator
                .consumer_heartbeat("e", subscription.clone(), 1, &catalog)
                .await
                .err(),
            Some(GroupError::CoordinatorNotAvailable)
        );
        let rejoined = coordinator.join_group("a", classic("a", &members[0])).await;
        assert_eq!(rejoined.error, None, "a member holding its bytes rejoins");

        coordinator
            .leave_group("b", &[(members[1].clone(), None)])
            .expect("left");
        coordinator.lock().recount_metadata();
        assert_eq!(
            coordinator.join_group("d", classic("d", "")).await.error,
            None
        );
        assert_eq!(coordinator.lock().metadata_held, 3 * 900);
        assert_eq!(
            coordinator
                .consumer_heartbeat("e", subscription, 1, &catalog)
                .await
                .err(),
            Some(GroupError::CoordinatorNotAvailable)
        );
    }

    #[tokio::test]
    async fn a_refused_join_creates_no_group() {
        let log = Arc::new(MemoryLog::default());
        let catalog = OneTopic(Uuid::new_v4());
        let coordinator = coordinator(log.clone());
        let mut bad = heartbeat("a", 0, None);
        bad.topic_names = None;
        bad.topic_regex = Some("a)|(b".into());
        assert_eq!(
            coordinator
                .consumer_heartbeat("new", bad, 1, &catalog)
                .await,
            Err(GroupError::InvalidRegularExpression)
        );
        assert!(coordinator.list_groups().is_empty());
        assert!(log.records().is_empty(), "nothing written");
    }

    #[tokio::test]
    async fn consumer_groups_survive_a_reload_and_their_deletion_is_stored() {
        let log = Arc::new(MemoryLog::default());
        let catalog = OneTopic(Uuid::new_v4());
        let first = coordinator(log.clone());
        let a = join(&first, &catalog, "a").await;
        let b = join(&first, &catalog, "b").await;
        assert_eq!((a.member_epoch, b.member_epoch), (1, 2));
        // a must give up two partitions: it is mid-revocation when the coordinator goes.
        let revoking = first
            .consumer_heartbeat("g", heartbeat("a", 1, None), 1, &catalog)
            .await
            .expect("heartbeat");
        let kept = revoking.assignment.expect("revocation");
        assert_eq!(kept.values().map(BTreeSet::len).sum::<usize>(), 2);
        let before = first
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");

        let second = coordinator(log.clone());
        let after = second
            .describe_consumer_group("g")
            .expect("served")
            .expect("restored");
        assert_eq!(
            after, before,
            "epochs, members, assignments and targets come back"
        );
        // a acknowledges to the new coordinator and advances; b then gets the freed partitions.
        let acked = second
            .consumer_heartbeat("g", heartbeat("a", 1, Some(kept.clone())), 1, &catalog)
            .await
            .expect("ack");
        assert_eq!(acked.member_epoch, 2);
        let b = second
            .consumer_heartbeat("g", heartbeat("b", 2, Some(BTreeMap::new())), 1, &catalog)
            .await
            .expect("b");
        assert_eq!(
            b.assignment
                .expect("freed")
                .values()
                .map(BTreeSet::len)
                .sum::<usize>(),
            2
        );
        assert_eq!(
            second
                .describe_consumer_group("g")
                .expect("served")
                .expect("g")
                .state,
            GroupState::Stable
        );

        for member in ["a", "b"] {
            second
                .consumer_heartbeat("g", heartbeat(member, -1, None), 1, &catalog)
                .await
                .expect("leave");
        }
        // Kafka replays a member's tombstones only in this order: current assignment, target,
        // subscription.
        let records = log.records();
        for member in ["a", "b"] {
            let position = |record_type: i16| {
                records.iter().position(|(key, value)| {
                    value.is_none()
                        && matches!(RecordKey::decode(key), Ok(Some(RecordKey::Consumer { key: k, .. }))
                            if k.record_type() == record_type && k.member() == Some(member))
                })
            };
            let (current, target, subscription) = (position(8), position(7), position(5));
            assert!(
                current.is_some() && current < target && target < subscription,
                "{member}"
            );
        }
        let third = coordinator(log.clone());
        let empty = third
            .describe_consumer_group("g")
            .expect("served")
            .expect("still a group");
        assert_eq!((empty.state, empty.members.len()), (GroupState::Empty, 0));
        assert_eq!(empty.epoch, 4);
        third.delete_group("g").await.expect("deleted");
        let fourth = coordinator(log);
        assert_eq!(fourth.describe_consumer_group("g"), Ok(None));
    }
}
