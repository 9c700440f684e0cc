//! A group shard: the groups of one partition of `__consumer_offsets`, loaded by replaying
//! its records, and the work its timer does (sessions, rebalances, offset retention).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::consumer_group::{AssignmentJob, ComputedTarget};
use crate::group::{Group, Membership};
use crate::records::{GroupRecord, GroupValue};
use crate::runtime::{Shard, StoredRecord, TimerWrite};
use crate::GroupError;
use weir_clock::Now;

use super::{CoordinatorSettings, OFFSETS_TOPIC};

/// How often the member metadata a shard's groups hold is counted exactly.
const METADATA_RECOUNT: Duration = Duration::from_secs(1);

/// The groups of one partition of `__consumer_offsets`.
pub(crate) struct GroupShard {
    settings: CoordinatorSettings,
    /// Groups by id.
    pub(crate) groups: HashMap<String, Group>,
    /// Bytes of member metadata its groups hold, at most: what joins, syncs and subscriptions
    /// added since the timer last counted it exactly (members that left meanwhile count
    /// until that next count, at most [`METADATA_RECOUNT`] later).
    pub(crate) metadata_held: usize,
    next_recount: Instant,
    next_retention: Instant,
    /// The classic groups' metadata read while loading, the newest of each group, until
    /// [`Shard::finish_load`] builds the classic groups from them; `None` once the shard
    /// serves. (Committed offsets and consumer group records are applied as they are read.)
    loading: Option<HashMap<String, Option<GroupValue>>>,
    /// Groups each open transaction committed offsets of (TxnOffsetCommit), by producer id:
    /// its marker settles them ([`Shard::apply_marker`]).
    open_transactions: HashMap<i64, HashSet<String>>,
}

impl GroupShard {
    /// An empty shard, about to load.
    pub(crate) fn new(settings: CoordinatorSettings, now: Now) -> GroupShard {
        GroupShard {
            settings,
            groups: HashMap::new(),
            metadata_held: 0,
            next_recount: now.instant,
            next_retention: now.instant + retention_check_every(&settings),
            loading: Some(HashMap::new()),
            open_transactions: HashMap::new(),
        }
    }

    /// Counts the member metadata every group holds, replacing the estimate.
    pub(crate) fn recount_metadata(&mut self) {
        self.metadata_held = self.groups.values().map(Group::metadata_bytes).sum();
    }

    /// The group `group_id`; GROUP_ID_NOT_FOUND when there is none.
    pub(crate) fn group(&self, group_id: &str) -> Result<&Group, GroupError> {
        self.groups.get(group_id).ok_or(GroupError::GroupIdNotFound)
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

    /// The writes that delete (with tombstones) the committed offsets of groups without
    /// members that are older than `offsets.retention.minutes` — counted from when a group
    /// became empty, or from each commit for a group that never had members — and the groups
    /// left with nothing, as Kafka does. Applied once durable; a failed write leaves them for
    /// the next check.
    fn expired_offsets(&self, now_ms: i64) -> Vec<TimerWrite<GroupRecord>> {
        let retention = self.settings.offsets_retention_ms;
        let mut writes = Vec::new();
        for group in self.groups.values() {
            if !group.has_no_members() || group.offsets.pending_writes > 0 {
                continue;
            }
            let emptied_at = group.state_since_ms();
            // An offset an open transaction committed too waits for it, as in Kafka.
            let expired: Vec<&(String, i32)> = group
                .offsets
                .committed
                .iter()
                .filter(|(key, c)| {
                    let since = emptied_at.unwrap_or(c.value.commit_timestamp);
                    now_ms.saturating_sub(since) >= retention
                        && !group.offsets.has_transactional(key)
                })
                .map(|(k, _)| k)
                .collect();
            // Nothing left once these go (or nothing committed at all): the group goes too.
            let records = if expired.len() == group.offsets.committed.len()
                && group.offsets.transactional.is_empty()
            {
                group.deletion_records()
            } else if expired.is_empty() {
                continue;
            } else {
                expired
                    .iter()
                    .map(|(topic, p)| GroupRecord::offset_tombstone(&group.id, topic, *p))
                    .collect()
            };
            tracing::info!(target: "weir::groups", group = %group.id, offsets = expired.len(), "committed offsets expire (offsets.retention.minutes)");
            writes.push(TimerWrite {
                key: group.id.clone(),
                records,
                applied: false,
            });
        }
        writes
    }

    /// Builds the classic groups from the metadata loading read. Where the log holds a
    /// consumer group too (it should not), a classic group with members wins and the other's
    /// stored records go with the group's next write.
    fn restore_classic(&mut self, metadata: HashMap<String, Option<GroupValue>>, now: Now) {
        let limits = self.settings.limits;
        for (group_id, value) in metadata {
            let Some(value) = value else { continue };
            let group = self.group_or_new(&group_id);
            group.restore_classic(value, &limits, now.instant);
        }
    }

    /// Applies a membership record: while loading, a classic group's metadata is kept for
    /// [`Shard::finish_load`] (only the newest counts); consumer group records are applied
    /// as read; once serving, these are tombstones of a deleted group.
    fn apply_membership(&mut self, record: GroupRecord, now: Now) {
        match record {
            GroupRecord::Group { group, value } => match &mut self.loading {
                Some(loading) => {
                    loading.insert(group, value);
                }
                None => {
                    let deleted = value.is_none();
                    if let Some(group) = self.groups.get_mut(&group) {
                        if deleted && group.has_no_members() {
                            group.membership = Membership::Empty;
                        }
                    }
                }
            },
            GroupRecord::Consumer { group, key, value } => {
                if value.is_none() && !self.groups.contains_key(&group) {
                    return;
                }
                let settings = self.settings.consumer;
                self.group_or_new(&group).apply_consumer(
                    key,
                    value,
                    &settings,
                    now.instant,
                    now.wall_ms,
                );
            }
            GroupRecord::Offset { .. } => {}
        }
    }
}

impl Shard for GroupShard {
    const TOPIC: &'static str = OFFSETS_TOPIC;
    type Record = GroupRecord;
    /// Groups and committed offsets loaded.
    type Error = GroupError;
    /// A consumer group's target assignment to compute, by group id.
    type Work = (String, AssignmentJob);
    type Done = (String, ComputedTarget);

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<GroupRecord>, String> {
        GroupRecord::decode(key, value).map_err(|error| error.to_string())
    }

    fn encode(record: &GroupRecord) -> StoredRecord {
        record.encode()
    }

    fn apply(&mut self, offset: i64, record: GroupRecord, now: Now) {
        // A tombstone may leave a serving shard's group with nothing the log holds.
        let forget = record.is_tombstone() && self.loading.is_none();
        let group_id = forget.then(|| record.group().to_string());
        match record {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                value,
            } => {
                let offsets = &mut self.group_or_new(&group).offsets;
                match value {
                    Some(value) => offsets.apply_commit((topic, partition), value, offset),
                    None => offsets.apply_delete((topic, partition), offset),
                }
            }
            record => self.apply_membership(record, now),
        }
        if let Some(group_id) = group_id {
            self.forget_if_untraced(&group_id);
        }
    }

    fn apply_transactional(
        &mut self,
        offset: i64,
        producer_id: i64,
        record: GroupRecord,
        now: Now,
    ) {
        match record {
            GroupRecord::Offset {
                group,
                topic,
                partition,
                value: Some(value),
            } => {
                self.group_or_new(&group).offsets.apply_transactional(
                    producer_id,
                    (topic, partition),
                    value,
                    offset,
                );
                self.open_transactions
                    .entry(producer_id)
                    .or_default()
                    .insert(group);
            }
            // Only offset commits are written in transactions; anything else counts as written.
            record => self.apply(offset, record, now),
        }
    }

    fn apply_marker(&mut self, producer_id: i64, commit: bool) {
        let Some(groups) = self.open_transactions.remove(&producer_id) else {
            return;
        };
        for group_id in groups {
            if let Some(group) = self.groups.get_mut(&group_id) {
                group.offsets.end_transaction(producer_id, commit);
            }
            if self.loading.is_none() {
                self.forget_if_untraced(&group_id);
            }
        }
    }

    fn writing(&mut self, group_id: &str, records: &[GroupRecord]) {
        let group = self.group_or_new(group_id);
        group.offsets.pending_writes += 1;
        if records.iter().any(GroupRecord::deletes_membership) {
            group.deletions += 1;
        }
    }

    fn written(&mut self, group_id: &str, records: &[GroupRecord]) {
        if let Some(group) = self.groups.get_mut(group_id) {
            group.offsets.pending_writes = group.offsets.pending_writes.saturating_sub(1);
            if records.iter().any(GroupRecord::deletes_membership) {
                group.deletions = group.deletions.saturating_sub(1);
            }
        }
        self.forget_if_untraced(group_id);
    }

    fn unwritten(&mut self, group_id: &str, records: &[GroupRecord]) {
        if let Some(group) = self.groups.get_mut(group_id) {
            group.unwrite(records);
        }
    }

    fn size(record: &GroupRecord) -> usize {
        record.size()
    }

    fn finish_load(&mut self, now: Now) -> String {
        let Some(loading) = self.loading.take() else {
            return "nothing (loaded already)".to_string();
        };
        self.restore_classic(loading, now);
        // Groups whose records were all deleted go.
        self.groups.retain(|_, group| !group.leaves_no_trace());
        let groups = self
            .groups
            .values()
            .filter(|group| !matches!(group.membership, Membership::Empty))
            .count();
        let offsets = self
            .groups
            .values()
            .map(|group| group.offsets.committed.len())
            .sum::<usize>();
        let open = self.open_transactions.len();
        format!(
            "{groups} groups, {offsets} committed offsets, {open} open transactions with offsets"
        )
    }

    fn next_deadline(&self) -> Option<Instant> {
        let groups = self.groups.values().filter_map(Group::next_deadline).min();
        let own = self.next_recount.min(self.next_retention);
        Some(groups.map_or(own, |due| due.min(own)))
    }

    fn tick(
        &mut self,
        now: Now,
        writes: &mut Vec<TimerWrite<GroupRecord>>,
    ) -> Vec<(String, AssignmentJob)> {
        if now.instant >= self.next_recount {
            self.recount_metadata();
            self.next_recount = now.instant + METADATA_RECOUNT;
        }
        // Groups whose deletion this tick writes make no writes of their own (nor do those
        // whose deletion is under way, see `Group::deletions`).
        let mut deleting = HashSet::new();
        if now.instant >= self.next_retention {
            let expired = self.expired_offsets(now.wall_ms);
            for write in &expired {
                if write.records.iter().any(GroupRecord::deletes_membership) {
                    deleting.insert(write.key.clone());
                }
            }
            writes.extend(expired);
            self.next_retention = now.instant + retention_check_every(&self.settings);
        }
        let mut work = Vec::new();
        for group in self.groups.values_mut() {
            if group.next_deadline().is_none_or(|due| due > now.instant)
                || deleting.contains(&group.id)
            {
                continue;
            }
            let became_empty = group.tick(now.instant, now.wall_ms);
            let records = if let Some(consumer) = group.consumer_mut() {
                if let Some(job) = consumer.take_assignment_job(now.instant) {
                    work.push((group.id.clone(), job));
                }
                group.consumer_changes()
            } else if became_empty {
                // A classic group's stored members must go.
                group.classic_record().into_iter().collect()
            } else {
                continue;
            };
            if !records.is_empty() {
                writes.push(TimerWrite {
                    key: group.id.clone(),
                    records,
                    applied: true,
                });
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
        writes: &mut Vec<TimerWrite<GroupRecord>>,
    ) {
        let Some(group) = self
            .groups
            .get_mut(&group_id)
            .filter(|group| group.deletions == 0)
        else {
            return; // gone, or going: its target no longer matters
        };
        if let Some(consumer) = group.consumer_mut() {
            consumer.finish_assignment(computed, now.instant);
            writes.push(TimerWrite {
                key: group_id,
                records: group.consumer_changes(),
                applied: true,
            });
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
