//! A group shard: the groups of one partition of `__consumer_offsets`, loaded by replaying
//! its records, and the work its timer does (sessions, rebalances, offset retention).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::consumer_group::{AssignmentJob, ComputedTarget, ConsumerGroup};
use crate::group::{CommittedOffset, Group, RecordChange};
use crate::records::{ConsumerKey, GroupValue, OffsetValue, RecordKey};
use crate::runtime::{Pending, Shard, ShardLog, StoredRecord};
use weir_clock::Now;

use super::{offset_key, CoordinatorSettings};

/// Consumer group records appended in one batch at most, well inside the offsets topic's
/// `max.message.bytes`.
const CHANGES_BATCH_BYTES: usize = 256 * 1024;
/// How often the member metadata a shard's groups hold is counted exactly.
const METADATA_RECOUNT: Duration = Duration::from_secs(1);

/// The groups of one partition of `__consumer_offsets`.
pub(crate) struct GroupShard {
    partition: i32,
    settings: CoordinatorSettings,
    /// Groups by id.
    pub(crate) groups: HashMap<String, Group>,
    /// Bytes of member metadata its groups hold, at most: what joins, syncs and subscriptions
    /// added since the timer last counted it exactly (members that left meanwhile count
    /// until that next count, at most [`METADATA_RECOUNT`] later).
    pub(crate) metadata_held: usize,
    next_recount: Instant,
    next_retention: Instant,
    /// Records read while loading, last one per key, until [`Shard::finish_load`].
    replayed: Option<Box<Replayed>>,
}

/// What loading has read so far: the newest record of each key.
#[derive(Default)]
struct Replayed {
    offsets: HashMap<RecordKey, Option<(i64, OffsetValue)>>,
    metadata: HashMap<String, Option<GroupValue>>,
    consumer: HashMap<(String, ConsumerKey), Option<Vec<u8>>>,
    skipped: u64,
}

impl GroupShard {
    /// An empty shard of `partition`, about to load.
    pub(crate) fn new(partition: i32, settings: CoordinatorSettings, now: Now) -> GroupShard {
        GroupShard {
            partition,
            settings,
            groups: HashMap::new(),
            metadata_held: 0,
            next_recount: now.instant,
            next_retention: now.instant + retention_check_every(&settings),
            replayed: Some(Box::default()),
        }
    }

    /// Counts the member metadata every group holds, replacing the estimate.
    pub(crate) fn recount_metadata(&mut self) {
        self.metadata_held = self.groups.values().map(Group::metadata_bytes).sum();
    }

    /// The group `group_id`, made (empty) if it is not there.
    pub(crate) fn group_or_new(&mut self, group_id: &str) -> &mut Group {
        self.groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id.to_string()))
    }

    /// Forgets `group_id` if the log holds nothing of it (see [`Group::leaves_no_trace`]).
    pub(crate) fn forget_if_untraced(&mut self, group_id: &str) {
        if self
            .groups
            .get(group_id)
            .is_some_and(Group::leaves_no_trace)
        {
            self.groups.remove(group_id);
        }
    }

    /// Deletes (with tombstones) the committed offsets of groups without members that are
    /// older than `offsets.retention.minutes` — counted from when a group became empty, or from
    /// each commit for a group that never had members — and forgets groups left with
    /// nothing, as Kafka does. A failed append keeps them for the next check.
    pub(crate) fn expire_offsets(&mut self, now_ms: i64, log: &ShardLog<'_>) {
        let retention = self.settings.offsets_retention_ms;
        let mut forget = Vec::new();
        for group in self.groups.values_mut() {
            if !group.has_no_members() || group.offsets.pending_commits > 0 {
                continue;
            }
            let emptied_at = group.state_since_ms();
            let expired: Vec<(String, i32)> = group
                .offsets
                .committed
                .iter()
                .filter(|(_, c)| {
                    let since = emptied_at.unwrap_or(c.value.commit_timestamp);
                    now_ms.saturating_sub(since) >= retention
                })
                .map(|(k, _)| k.clone())
                .collect();
            // Nothing left once these go (or nothing committed at all): the group goes too.
            let emptying = expired.len() == group.offsets.committed.len();
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
            }
            // The membership goes with the group, unless the append fails.
            let membership = emptying.then(|| std::mem::take(&mut group.membership));
            let consumer_changes = if emptying {
                group.consumer_changes()
            } else {
                Vec::new()
            };
            records.extend(
                consumer_changes
                    .iter()
                    .cloned()
                    .map(RecordChange::into_record),
            );
            match log.append_detached(records, |_| {}) {
                Ok(base) => {
                    for (i, key) in expired.iter().enumerate() {
                        group.offsets.apply_delete(key.clone(), base + i as i64);
                    }
                    tracing::info!(target: "weir::groups", group = %group.id, offsets = expired.len(), "committed offsets expired (offsets.retention.minutes)");
                    if emptying {
                        forget.push(group.id.clone());
                    }
                }
                Err(error) => {
                    if let Some(membership) = membership {
                        group.membership = membership;
                    }
                    group.unwrite(consumer_changes);
                    tracing::warn!(target: "weir::groups", group = %group.id, %error, "expired offsets not deleted; trying again later");
                }
            }
        }
        for id in forget {
            self.groups.remove(&id);
        }
    }

    /// Builds the groups from what loading read.
    fn restore(&mut self, replayed: Replayed, now: Now) -> (usize, usize) {
        let Replayed {
            offsets,
            metadata,
            consumer,
            skipped,
        } = replayed;
        let partition = self.partition;
        if skipped > 0 {
            tracing::warn!(target: "weir::groups", partition, skipped, "records of __consumer_offsets that do not parse were skipped");
        }
        let mut loaded_groups = 0usize;
        let limits = self.settings.limits;
        for (group_id, value) in metadata {
            if let Some(value) = value {
                self.group_or_new(&group_id)
                    .restore(value, &limits, now.instant);
                loaded_groups += 1;
            }
        }
        let mut consumer_groups: HashMap<String, Vec<(ConsumerKey, Vec<u8>)>> = HashMap::new();
        for ((group, key), value) in consumer {
            if let Some(value) = value {
                consumer_groups.entry(group).or_default().push((key, value));
            }
        }
        let consumer_settings = self.settings.consumer;
        for (group_id, records) in consumer_groups {
            if !records.iter().any(|(k, _)| *k == ConsumerKey::Metadata) {
                continue; // the group was deleted: only stray member records are left
            }
            let group = self.group_or_new(&group_id);
            if !group.has_no_members() {
                continue; // classic members hold the group
            }
            match ConsumerGroup::restore(&records, &consumer_settings, now.instant) {
                Ok(mut restored) => {
                    restored.set_state_since(now.wall_ms);
                    group.restore_consumer(restored);
                    // What the log holds, strays included: the next write fixes any difference.
                    group.set_persisted(
                        records
                            .into_iter()
                            .map(|(key, value)| {
                                let key = RecordKey::Consumer {
                                    group: group_id.clone(),
                                    key,
                                };
                                (key.encode(), value)
                            })
                            .collect(),
                    );
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
            self.group_or_new(&group).offsets.committed.insert(
                (topic, partition),
                CommittedOffset {
                    value,
                    record_offset,
                },
            );
            loaded_offsets += 1;
        }
        (loaded_groups, loaded_offsets)
    }
}

impl Shard for GroupShard {
    /// Groups and committed offsets loaded.
    type Loaded = (usize, usize);
    /// A consumer group's target assignment to compute, by group id.
    type Work = (String, AssignmentJob);
    type Done = (String, ComputedTarget);

    fn replay(&mut self, offset: i64, key: &[u8], value: Option<&[u8]>) {
        let Some(replayed) = self.replayed.as_deref_mut() else {
            return;
        };
        let key = match RecordKey::decode(key) {
            Ok(Some(key)) => key,
            Ok(None) => return,
            Err(_) => {
                replayed.skipped += 1;
                return;
            }
        };
        match key {
            RecordKey::Offset { .. } => match value.map(OffsetValue::decode).transpose() {
                Ok(value) => {
                    replayed.offsets.insert(key, value.map(|v| (offset, v)));
                }
                Err(_) => replayed.skipped += 1,
            },
            RecordKey::Group { group } => match value.map(GroupValue::decode).transpose() {
                Ok(value) => {
                    replayed.metadata.insert(group, value);
                }
                Err(_) => replayed.skipped += 1,
            },
            RecordKey::Consumer { group, key } => {
                replayed
                    .consumer
                    .insert((group, key), value.map(<[u8]>::to_vec));
            }
        }
    }

    fn finish_load(&mut self, now: Now) -> (usize, usize) {
        match self.replayed.take() {
            Some(replayed) => self.restore(*replayed, now),
            None => (0, 0),
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let groups = self.groups.values().filter_map(Group::next_deadline).min();
        let own = self.next_recount.min(self.next_retention);
        Some(groups.map_or(own, |due| due.min(own)))
    }

    fn tick(&mut self, now: Now, log: &ShardLog<'_>) -> Vec<(String, AssignmentJob)> {
        if now.instant >= self.next_recount {
            self.recount_metadata();
            self.next_recount = now.instant + METADATA_RECOUNT;
        }
        if now.instant >= self.next_retention {
            self.expire_offsets(now.wall_ms, log);
            self.next_retention = now.instant + retention_check_every(&self.settings);
        }
        let mut work = Vec::new();
        for group in self.groups.values_mut() {
            if group.next_deadline().is_none_or(|due| due > now.instant) {
                continue;
            }
            let became_empty = group.tick(now.instant, now.wall_ms);
            if let Some(consumer) = group.consumer_mut() {
                if let Some(job) = consumer.take_assignment_job(now.instant) {
                    work.push((group.id.clone(), job));
                }
                persist_in_background(log, group);
            } else if became_empty {
                // A classic group's stored members must go.
                store_group(log, group);
            }
        }
        work
    }

    fn work((group_id, job): (String, AssignmentJob)) -> (String, ComputedTarget) {
        (group_id, job.run())
    }

    fn finish(
        &mut self,
        (group_id, computed): (String, ComputedTarget),
        now: Now,
        log: &ShardLog<'_>,
    ) {
        let Some(group) = self.groups.get_mut(&group_id) else {
            return;
        };
        if let Some(consumer) = group.consumer_mut() {
            consumer.finish_assignment(computed, now.instant);
            persist_in_background(log, group);
        }
    }

    fn len(&self) -> usize {
        self.groups.len()
    }
}

/// `offsets.retention.check.interval.ms`.
fn retention_check_every(settings: &CoordinatorSettings) -> Duration {
    Duration::from_millis(settings.offsets_retention_check_interval_ms.max(1))
}

/// Appends what changed in a group's consumer records (see [`Group::consumer_changes`]),
/// in batches of at most [`CHANGES_BATCH_BYTES`]; the returned future resolves once all
/// are durable. After a failed append the group counts as written only up to the batches
/// that were appended, so its next change writes the rest again.
pub(crate) fn persist_consumer_group(log: &ShardLog<'_>, group: &mut Group) -> Option<Pending> {
    let changes = group.consumer_changes();
    if changes.is_empty() {
        return None;
    }
    let mut durable = Vec::new();
    let mut pending = changes.into_iter().peekable();
    while pending.peek().is_some() {
        let mut batch = Vec::new();
        let mut batch_bytes = 0usize;
        while let Some(change) = pending.next_if(|_| batch_bytes < CHANGES_BATCH_BYTES) {
            batch_bytes += change.key.len() + change.value.as_ref().map_or(0, Vec::len);
            batch.push(change);
        }
        let records: Vec<StoredRecord> = batch
            .iter()
            .map(|change| change.clone().into_record())
            .collect();
        match log.append(records) {
            Ok(appended) => durable.push(appended.durable),
            Err(error) => {
                group.unwrite(batch.into_iter().chain(pending));
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
pub(crate) fn persist_in_background(log: &ShardLog<'_>, group: &mut Group) {
    if let Some(durable) = persist_consumer_group(log, group) {
        let group_id = group.id.clone();
        tokio::spawn(async move {
            if let Err(error) = durable.await {
                tracing::warn!(target: "weir::groups", group = %group_id, %error, "consumer group change not stored");
            }
        });
    }
}

/// Stores a group's metadata without waiting (after it became Empty: a restart must not
/// bring back members that left). A failure is logged; the next change stores it again.
pub(crate) fn store_group(log: &ShardLog<'_>, group: &Group) {
    let Some(classic) = group.classic() else {
        return;
    };
    let record = (
        RecordKey::Group {
            group: group.id.clone(),
        }
        .encode(),
        Some(classic.stored_value().encode()),
    );
    let group_id = group.id.clone();
    let stored = log.append_detached(vec![record], move |error| {
        tracing::warn!(target: "weir::groups", group = %group_id, %error, "group metadata not made durable");
    });
    if let Err(error) = stored {
        tracing::warn!(target: "weir::groups", group = %group.id, %error, "group metadata not stored");
    }
}
