//! What of a consumer-protocol group the log holds, and what a write must change: the
//! records last written by key, the members changed since, and the order Kafka replays a
//! batch of them in.

use std::collections::{HashMap, HashSet};

use crate::records::{ConsumerKey, RecordKey};

use super::{Group, Membership};

/// A record's key and value, encoded.
type EncodedRecord = (Vec<u8>, Vec<u8>);

/// One record a consumer group write appends, with what the log held under its key before
/// (to undo the bookkeeping when the append fails).
#[derive(Debug, Clone)]
pub struct RecordChange {
    /// The record's key.
    pub key: Vec<u8>,
    /// Its value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    previous: Option<Vec<u8>>,
}

impl RecordChange {
    /// The record to append.
    pub fn into_record(self) -> (Vec<u8>, Option<Vec<u8>>) {
        (self.key, self.value)
    }
}

/// The keys of a member's consumer group records: subscription, target and assignment.
fn member_record_keys(group_id: &str, member_id: &str) -> [Vec<u8>; 3] {
    [
        ConsumerKey::Member(member_id.to_string()),
        ConsumerKey::TargetMember(member_id.to_string()),
        ConsumerKey::Assignment(member_id.to_string()),
    ]
    .map(|key| {
        RecordKey::Consumer {
            group: group_id.to_string(),
            key,
        }
        .encode()
    })
}

impl Group {
    /// The consumer group records to append so the log holds this group's state: changed
    /// ones, and tombstones for those it no longer has (all of them once it is not a
    /// consumer group). Marks them written. Looks only at the members changed since the last
    /// call, unless the log may differ elsewhere (after a load or a failed append).
    pub fn consumer_changes(&mut self) -> Vec<RecordChange> {
        let rewrite_all = std::mem::take(&mut self.rewrite_all);
        let (current, maybe_gone): (Vec<EncodedRecord>, Vec<Vec<u8>>) = match &mut self.membership {
            Membership::Empty | Membership::Classic(_) => {
                (Vec::new(), self.persisted.keys().cloned().collect())
            }
            Membership::Consumer(consumer) => {
                let changed = consumer.take_changed();
                let records = if rewrite_all {
                    consumer.records(&self.id)
                } else {
                    consumer.records_of(&self.id, &changed)
                };
                let current: Vec<EncodedRecord> = records
                    .into_iter()
                    .map(|(key, value)| (key.encode(), value))
                    .collect();
                let maybe_gone = if rewrite_all {
                    self.persisted.keys().cloned().collect()
                } else {
                    changed
                        .iter()
                        .flat_map(|id| member_record_keys(&self.id, id))
                        .collect()
                };
                (current, maybe_gone)
            }
        };
        let current_keys: HashSet<&[u8]> = current.iter().map(|(key, _)| key.as_slice()).collect();
        let gone: Vec<Vec<u8>> = maybe_gone
            .into_iter()
            .filter(|key| !current_keys.contains(key.as_slice()))
            .collect();
        let mut changes = Vec::new();
        for (key, value) in current {
            if self.persisted.get(&key) != Some(&value) {
                let previous = self.persisted.insert(key.clone(), value.clone());
                changes.push(RecordChange {
                    key,
                    value: Some(value),
                    previous,
                });
            }
        }
        for key in gone {
            if let Some(previous) = self.persisted.remove(&key) {
                changes.push(RecordChange {
                    key,
                    value: None,
                    previous: Some(previous),
                });
            }
        }
        if std::mem::take(&mut self.tombstone_classic) {
            changes.push(RecordChange {
                key: self.classic_key(),
                value: None,
                previous: None,
            });
        }
        // The order Kafka replays them in: a member's tombstones (current assignment, target,
        // subscription) before its records go, values before epochs that name them, and the
        // group's own tombstones (target epoch, then group epoch) last.
        changes.sort_by(|a, b| {
            (replay_rank(&a.key, a.value.is_some()), &a.key)
                .cmp(&(replay_rank(&b.key, b.value.is_some()), &b.key))
        });
        changes
    }

    /// `changes` (from [`Group::consumer_changes`]) were not appended: the log does not hold
    /// them, and the next write compares every record again.
    pub fn unwrite(&mut self, changes: impl IntoIterator<Item = RecordChange>) {
        let classic_key = self.classic_key();
        for change in changes {
            if change.key == classic_key {
                self.tombstone_classic = true;
                continue;
            }
            match change.previous {
                Some(previous) => self.persisted.insert(change.key, previous),
                None => self.persisted.remove(&change.key),
            };
        }
        self.rewrite_all = true;
    }

    /// What the log holds of this group's consumer group records (read on load), which may
    /// include strays: the next write compares every record against it.
    pub fn set_persisted(&mut self, persisted: HashMap<Vec<u8>, Vec<u8>>) {
        self.persisted = persisted;
        self.rewrite_all = true;
    }

    /// The key of the group's classic metadata record.
    fn classic_key(&self) -> Vec<u8> {
        RecordKey::Group {
            group: self.id.clone(),
        }
        .encode()
    }
}

/// Where a consumer group record goes in a batch so that Kafka can replay it (see
/// [`Group::consumer_changes`]).
fn replay_rank(key: &[u8], is_value: bool) -> u8 {
    let record_type = key.get(..2).map_or(0, |t| i16::from_be_bytes([t[0], t[1]]));
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
