//! What of a consumer-protocol group the log holds, and what a write must change: the
//! records last written by key, the members changed since, and the order Kafka replays a
//! batch of them in.

use std::collections::{HashMap, HashSet};

use crate::records::{ConsumerKey, GroupRecord};

use super::{Group, Membership};

/// The keys of a member's consumer group records: subscription, target and assignment.
fn member_record_keys(member_id: &str) -> [ConsumerKey; 3] {
    [
        ConsumerKey::Member(member_id.to_string()),
        ConsumerKey::TargetMember(member_id.to_string()),
        ConsumerKey::Assignment(member_id.to_string()),
    ]
}

/// What `persisted` holds for a record whose write failed: the log may hold anything under
/// its key, so the next write stores the record again, or its tombstone. (No record's value
/// is empty.)
const UNKNOWN: Vec<u8> = Vec::new();

impl Group {
    /// The consumer group records to append so the log holds this group's state: changed
    /// ones, and tombstones for those it no longer has (all of them once it is not a
    /// consumer group). Marks them written. Looks only at the members changed since the last
    /// call, unless the log may differ elsewhere (after a load or a failed append).
    pub fn consumer_changes(&mut self) -> Vec<GroupRecord> {
        let rewrite_all = std::mem::take(&mut self.rewrite_all);
        let (current, maybe_gone): (Vec<(ConsumerKey, Vec<u8>)>, Vec<ConsumerKey>) =
            match &mut self.membership {
                Membership::Empty | Membership::Classic(_) => {
                    (Vec::new(), self.persisted.keys().cloned().collect())
                }
                Membership::Consumer(consumer) => {
                    let changed = consumer.take_changed();
                    if rewrite_all {
                        (consumer.records(), self.persisted.keys().cloned().collect())
                    } else {
                        let maybe_gone = changed
                            .iter()
                            .flat_map(|id| member_record_keys(id))
                            .collect();
                        (consumer.records_of(&changed), maybe_gone)
                    }
                }
            };
        let current_keys: HashSet<&ConsumerKey> = current.iter().map(|(key, _)| key).collect();
        let gone: Vec<ConsumerKey> = maybe_gone
            .into_iter()
            .filter(|key| !current_keys.contains(key))
            .collect();
        let mut changes = Vec::new();
        for (key, value) in current {
            if self.persisted.get(&key) != Some(&value) {
                self.persisted.insert(key.clone(), value.clone());
                changes.push(self.consumer_record(key, Some(value)));
            }
        }
        for key in gone {
            if self.persisted.remove(&key).is_some() {
                changes.push(self.consumer_record(key, None));
            }
        }
        if std::mem::take(&mut self.tombstone_classic) {
            changes.push(GroupRecord::Group {
                group: self.id.clone(),
                value: None,
            });
        }
        // The order Kafka replays them in: a member's tombstones (current assignment, target,
        // subscription) before its records go, values before epochs that name them, and the
        // group's own tombstones (target epoch, then group epoch) last.
        changes.sort_by_cached_key(|record| match record {
            GroupRecord::Consumer { key, value, .. } => (
                replay_rank(key.record_type(), value.is_some()),
                Some(key.clone()),
            ),
            _ => (replay_rank(2, false), None),
        });
        changes
    }

    /// `records` (from [`Group::consumer_changes`]) were not stored: the log may hold
    /// anything under their keys, and the next write compares every record again.
    pub fn unwrite(&mut self, records: &[GroupRecord]) {
        for record in records {
            match record {
                GroupRecord::Consumer { key, .. } => {
                    self.persisted.insert(key.clone(), UNKNOWN);
                }
                GroupRecord::Group { value: None, .. } => self.tombstone_classic = true,
                _ => {}
            }
        }
        self.rewrite_all = true;
    }

    /// What the log holds of this group's consumer group records (read on load), which may
    /// include strays: the next write compares every record against it.
    pub fn set_persisted(&mut self, persisted: HashMap<ConsumerKey, Vec<u8>>) {
        self.persisted = persisted;
        self.rewrite_all = true;
    }

    fn consumer_record(&self, key: ConsumerKey, value: Option<Vec<u8>>) -> GroupRecord {
        GroupRecord::Consumer {
            group: self.id.clone(),
            key,
            value,
        }
    }
}

/// Where a record of `record_type` (a value, or a tombstone) goes in a batch so that Kafka
/// can replay it (see [`Group::consumer_changes`]).
fn replay_rank(record_type: i16, is_value: bool) -> u8 {
    match (is_value, record_type) {
        (false, 2) => 0,
        (false, 8) => 1,
        (false, 7) => 2,
        (false, 5) => 3,
        (true, 5) => 4,
        (true, 3) => 5,
        (true, 7) => 6,
        (true, 6) => 7,
        (true, 8) => 8,
        (false, 6) => 9,
        _ => 10,
    }
}
