//! A group's consumer group records: those its consumer-protocol membership wrote, those a
//! failed write may have left wrong in the log, and the same records read back, applied by
//! the function the membership's operations apply them with.

use std::time::Instant;

use crate::consumer_group::ConsumerGroup;
use crate::limits::ConsumerGroupSettings;
use crate::records::{ConsumerKey, ConsumerValue, GroupRecord};

use super::{Group, Membership};

impl Group {
    /// The records to append for what the group's operations changed since the last call:
    /// a replaced classic group's tombstone, the consumer group's records in the order they
    /// were made, then what the group holds now under each key a failed write may have left
    /// wrong (its value, or a tombstone).
    pub fn consumer_changes(&mut self) -> Vec<GroupRecord> {
        let mut changes = Vec::new();
        if std::mem::take(&mut self.tombstone_classic) {
            changes.push(GroupRecord::Group {
                group: self.id.clone(),
                value: None,
            });
        }
        if let Membership::Consumer(consumer) = &mut self.membership {
            for (key, value) in consumer.take_records() {
                self.stale_keys.remove(&key);
                changes.push(self.consumer_record(key, value));
            }
        }
        let stale = std::mem::take(&mut self.stale_keys);
        let consumer = self.consumer();
        let repairs = stale.into_iter().map(|key| {
            let value = consumer.and_then(|c| c.value_of(&key));
            (key, value)
        });
        changes.extend(self.in_replay_order(repairs.collect()));
        changes
    }

    /// The tombstones of every consumer group record the log may hold of the group (those
    /// of its consumer-protocol membership, and stale ones), in the order Kafka replays them.
    pub(super) fn consumer_tombstones(&self) -> Vec<GroupRecord> {
        let mut keys = self.consumer().map(ConsumerGroup::keys).unwrap_or_default();
        keys.extend(
            self.stale_keys
                .iter()
                .filter(|key| !keys.contains(key))
                .cloned()
                .collect::<Vec<_>>(),
        );
        self.in_replay_order(keys.into_iter().map(|key| (key, None)).collect())
    }

    /// Records of the group, in the order Kafka replays them: a member's tombstones
    /// (current assignment, target, subscription) before its records go, values before
    /// epochs that name them, and the group's own tombstones (target epoch, then group
    /// epoch) last.
    fn in_replay_order(
        &self,
        mut records: Vec<(ConsumerKey, Option<ConsumerValue>)>,
    ) -> Vec<GroupRecord> {
        records.sort_by_cached_key(|(key, value)| {
            (
                replay_rank(key.record_type(), value.is_some()),
                key.member().map(str::to_string),
            )
        });
        records
            .into_iter()
            .map(|(key, value)| self.consumer_record(key, value))
            .collect()
    }

    /// `records` (from [`Group::consumer_changes`]) were not stored: the log may hold
    /// anything under their keys, so the next write stores what the group holds there.
    pub fn unwrite(&mut self, records: &[GroupRecord]) {
        for record in records {
            match record {
                GroupRecord::Consumer { key, .. } => {
                    self.stale_keys.insert(key.clone());
                }
                GroupRecord::Group { value: None, .. } => self.tombstone_classic = true,
                _ => {}
            }
        }
    }

    /// Applies a consumer group record read from the log, or stored by a decision (a
    /// deletion): a value makes the group a consumer group if it is not one; the group
    /// epoch's tombstone deletes the membership; the rest goes to
    /// [`ConsumerGroup::apply`], the function the membership's operations use.
    pub fn apply_consumer(
        &mut self,
        key: ConsumerKey,
        value: Option<ConsumerValue>,
        settings: &ConsumerGroupSettings,
        now: Instant,
        now_ms: i64,
    ) {
        self.stale_keys.remove(&key);
        match (&mut self.membership, &key, value) {
            (Membership::Consumer(_), ConsumerKey::Metadata, None) => {
                self.membership = Membership::Empty;
            }
            (Membership::Consumer(consumer), _, value) => consumer.apply(&key, value.as_ref(), now),
            (_, _, None) => {}
            (_, _, Some(value)) => {
                let mut consumer = Box::new(ConsumerGroup::loaded(settings, now_ms));
                consumer.apply(&key, Some(&value), now);
                self.install_consumer(consumer);
            }
        }
    }

    fn consumer_record(&self, key: ConsumerKey, value: Option<ConsumerValue>) -> GroupRecord {
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
