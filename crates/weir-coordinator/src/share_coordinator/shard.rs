//! A share-state shard: the share-partitions of one partition of `__share_group_state`, as
//! their records make them, and how a write merges into what is stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use weir_clock::Now;
use weir_metadata::SHARE_GROUP_STATE_TOPIC;

use super::records::{PersistedBatch, SharePartitionKey, ShareRecord, ShareSnapshot, ShareValue};
use super::ShareStateError;
use crate::runtime::{Shard, StoredRecord, TimerWrite};

/// The share-partitions of one partition.
#[derive(Debug, Default)]
pub(crate) struct ShareStateShard {
    /// Each share-partition's state, as its last durable records left it.
    pub(crate) states: HashMap<SharePartitionKey, ShareSnapshot>,
    /// Coordinator keys with a write under way: another write for them is refused until it
    /// ends (the leader retries), so no two writes merge into the same state.
    pending: HashSet<String>,
}

impl ShareStateShard {
    /// Whether a write for `coordinator_key` is under way.
    pub(crate) fn is_pending(&self, coordinator_key: &str) -> bool {
        self.pending.contains(coordinator_key)
    }
}

/// `update`'s batches laid over `batches` (a newer batch wins where they overlap), without
/// what lies before `start_offset`.
pub(crate) fn overlay(
    batches: &[PersistedBatch],
    update: &[PersistedBatch],
    start_offset: i64,
) -> Vec<PersistedBatch> {
    let mut by_first: BTreeMap<i64, PersistedBatch> = batches
        .iter()
        .map(|batch| (batch.first_offset, *batch))
        .collect();
    for newer in update {
        let overlapping: Vec<PersistedBatch> = by_first
            .range(..=newer.last_offset)
            .rev()
            .take_while(|(_, batch)| batch.last_offset >= newer.first_offset)
            .map(|(_, batch)| *batch)
            .collect();
        for older in overlapping {
            by_first.remove(&older.first_offset);
            if older.first_offset < newer.first_offset {
                let left = PersistedBatch {
                    last_offset: newer.first_offset - 1,
                    ..older
                };
                by_first.insert(left.first_offset, left);
            }
            if older.last_offset > newer.last_offset {
                let right = PersistedBatch {
                    first_offset: newer.last_offset + 1,
                    ..older
                };
                by_first.insert(right.first_offset, right);
            }
        }
        by_first.insert(newer.first_offset, *newer);
    }
    by_first
        .into_values()
        .filter(|batch| batch.last_offset >= start_offset)
        .map(|batch| PersistedBatch {
            first_offset: batch.first_offset.max(start_offset),
            ..batch
        })
        .collect()
}

impl Shard for ShareStateShard {
    const TOPIC: &'static str = SHARE_GROUP_STATE_TOPIC;
    type Record = ShareRecord;
    type Error = ShareStateError;
    type Work = ();
    type Done = ();

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<ShareRecord>, String> {
        ShareRecord::decode(key, value).map_err(|error| error.to_string())
    }

    fn encode(record: &ShareRecord) -> StoredRecord {
        (record.encode_key(), record.encode_value())
    }

    fn apply(&mut self, _offset: i64, record: ShareRecord, _now: Now) {
        match record.value {
            Some(ShareValue::Snapshot(snapshot)) => {
                self.states.insert(record.key, snapshot);
            }
            // A topic Kafka wrote: its updates follow their snapshot.
            Some(ShareValue::Update(update)) => {
                if let Some(state) = self.states.get_mut(&record.key) {
                    if update.start_offset != -1 {
                        state.start_offset = update.start_offset;
                    }
                    if update.leader_epoch != -1 {
                        state.leader_epoch = update.leader_epoch;
                    }
                    state.delivery_complete_count = update.delivery_complete_count;
                    state.batches = overlay(&state.batches, &update.batches, state.start_offset);
                }
            }
            None => {
                if record.snapshot_key {
                    self.states.remove(&record.key);
                }
            }
        }
    }

    fn writing(&mut self, key: &str, _records: &[ShareRecord]) {
        self.pending.insert(key.to_string());
    }

    fn written(&mut self, key: &str, _records: &[ShareRecord]) {
        self.pending.remove(key);
    }

    fn unwritten(&mut self, _key: &str, _records: &[ShareRecord]) {
        // Every write is applied once durable (`Runtime::write`): a failed one changed
        // nothing.
    }

    fn size(record: &ShareRecord) -> usize {
        let batches = match &record.value {
            Some(ShareValue::Snapshot(snapshot)) => snapshot.batches.len(),
            Some(ShareValue::Update(update)) => update.batches.len(),
            None => 0,
        };
        record.key.group.len() + 64 + batches * 20
    }

    fn finish_load(&mut self, _now: Now) -> String {
        format!("{} share-partitions", self.states.len())
    }

    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    fn tick(&mut self, _now: Now, _writes: &mut Vec<TimerWrite<ShareRecord>>) -> Vec<()> {
        Vec::new()
    }

    fn work(_work: ()) {}

    fn finish(&mut self, _done: (), _now: Now, _writes: &mut Vec<TimerWrite<ShareRecord>>) {}

    fn len(&self) -> usize {
        self.states.len()
    }
}
