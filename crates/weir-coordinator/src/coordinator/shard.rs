//! A group shard: the groups of one partition of `__consumer_offsets`, loaded by replaying
//! its records, and the work its timer does (sessions, rebalances, offset retention).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::consumer_group::{AssignmentJob, ComputedTarget, ConsumerGroup};
use crate::group::{Group, Membership};
use crate::records::{ConsumerKey, GroupRecord, GroupValue};
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
    /// The group records read while loading, until [`Shard::finish_load`] builds the
    /// groups from them; `None` once the shard serves.
    loading: Option<Box<Loading>>,
}

/// The membership records loading has read so far: the newest of each key. (Committed
/// offsets are applied as they are read.)
#[derive(Default)]
struct Loading {
    metadata: HashMap<String, Option<GroupValue>>,
    consumer: HashMap<(String, ConsumerKey), Option<Vec<u8>>>,
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
            loading: Some(Box::default()),
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
            let expired: Vec<&(String, i32)> = group
                .offsets
                .committed
                .iter()
                .filter(|(_, c)| {
                    let since = emptied_at.unwrap_or(c.value.commit_timestamp);
                    now_ms.saturating_sub(since) >= retention
                })
                .map(|(k, _)| k)
                .collect();
            // Nothing left once these go (or nothing committed at all): the group goes too.
            let records = if expired.len() == group.offsets.committed.len() {
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

    /// Builds the groups' memberships from what loading read. Returns how many groups have
    /// one.
    fn restore(&mut self, loading: Loading, now: Now) -> usize {
        let Loading { metadata, consumer } = loading;
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
                    group.set_persisted(records.into_iter().collect());
                    loaded_groups += 1;
                }
                Err(error) => {
                    tracing::warn!(target: "weir::groups", group = %group_id, %error, "consumer group records do not parse; the group starts empty");
                }
            }
        }
        loaded_groups
    }

    /// Applies a membership record written while the shard serves: tombstones of a group
    /// without members (DeleteGroups) take its membership and stored consumer records away.
    /// Values change nothing here: a group's membership is what its operations made it, and
    /// they mark what they store themselves ([`Group::consumer_changes`]).
    fn apply_membership(&mut self, record: GroupRecord) {
        let Some(group) = self.groups.get_mut(record.group()) else {
            return;
        };
        if !group.has_no_members() {
            return;
        }
        match record {
            GroupRecord::Group { value: None, .. } => group.membership = Membership::Empty,
            GroupRecord::Consumer {
                key, value: None, ..
            } => {
                group.persisted.remove(&key);
            }
            _ => {}
        }
    }
}

impl Shard for GroupShard {
    const TOPIC: &'static str = OFFSETS_TOPIC;
    type Record = GroupRecord;
    /// Groups and committed offsets loaded.
    type Loaded = (usize, usize);
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

    fn apply(&mut self, offset: i64, record: GroupRecord) {
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
            record => match self.loading.as_deref_mut() {
                Some(loading) => match record {
                    GroupRecord::Group { group, value } => {
                        loading.metadata.insert(group, value);
                    }
                    GroupRecord::Consumer { group, key, value } => {
                        loading.consumer.insert((group, key), value);
                    }
                    GroupRecord::Offset { .. } => {}
                },
                None => self.apply_membership(record),
            },
        }
    }

    fn writing(&mut self, group_id: &str) {
        self.group_or_new(group_id).offsets.pending_writes += 1;
    }

    fn written(&mut self, group_id: &str) {
        if let Some(group) = self.groups.get_mut(group_id) {
            group.offsets.pending_writes = group.offsets.pending_writes.saturating_sub(1);
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

    fn finish_load(&mut self, now: Now) -> (usize, usize) {
        let Some(loading) = self.loading.take() else {
            return (0, 0);
        };
        // So far only offset records made groups: those whose offsets were all deleted go.
        self.groups
            .retain(|_, group| !group.offsets.committed.is_empty());
        let groups = self.restore(*loading, now);
        let offsets = self
            .groups
            .values()
            .map(|group| group.offsets.committed.len())
            .sum();
        (groups, offsets)
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
        if now.instant >= self.next_retention {
            writes.extend(self.expired_offsets(now.wall_ms));
            self.next_retention = now.instant + retention_check_every(&self.settings);
        }
        let mut work = Vec::new();
        for group in self.groups.values_mut() {
            if group.next_deadline().is_none_or(|due| due > now.instant) {
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
        let Some(group) = self.groups.get_mut(&group_id) else {
            return;
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
