//! A group's committed offsets as `__consumer_offsets` holds them: the newest commit of each
//! partition, the newest tombstone of each, and the commits still on their way to the log.

use std::collections::HashMap;

use crate::records::OffsetValue;

/// A committed offset with the log offset of the record that holds it, so a commit that
/// completes late never overwrites a newer one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// What was committed.
    pub value: OffsetValue,
    /// Offset of its record in `__consumer_offsets`.
    pub record_offset: i64,
}

/// A group's committed offsets.
#[derive(Debug, Default)]
pub struct Offsets {
    /// Committed offsets by (topic, partition).
    pub committed: HashMap<(String, i32), CommittedOffset>,
    /// Log offset of the newest tombstone written for a (topic, partition): a commit whose
    /// record precedes it must not come back to memory (replay would delete it).
    deleted: HashMap<(String, i32), i64>,
    /// Writes of the group's offsets (commits, deletions) appended and not yet durable: the
    /// group is neither expired nor deleted meanwhile.
    pub pending_writes: usize,
}

impl Offsets {
    /// True when nothing is committed and no write is under way.
    pub fn is_empty(&self) -> bool {
        self.committed.is_empty() && self.pending_writes == 0
    }

    /// Applies a durable commit unless a newer commit or tombstone of the same partition is
    /// already in the log.
    pub fn apply_commit(&mut self, key: (String, i32), value: OffsetValue, record_offset: i64) {
        let newer_commit = self
            .committed
            .get(&key)
            .is_some_and(|c| c.record_offset >= record_offset);
        let newer_delete = self.deleted.get(&key).is_some_and(|&t| t >= record_offset);
        if !(newer_commit || newer_delete) {
            self.deleted.remove(&key);
            self.committed.insert(
                key,
                CommittedOffset {
                    value,
                    record_offset,
                },
            );
        }
    }

    /// Applies a durable tombstone at `record_offset`: the offset goes unless a newer commit
    /// of it is already in the log.
    pub fn apply_delete(&mut self, key: (String, i32), record_offset: i64) {
        if self
            .committed
            .get(&key)
            .is_some_and(|c| c.record_offset < record_offset)
        {
            self.committed.remove(&key);
        }
        let newest = self.deleted.entry(key).or_insert(record_offset);
        *newest = (*newest).max(record_offset);
    }
}
