//! A group's committed offsets as `__consumer_offsets` holds them: the newest commit of each
//! partition, the newest tombstone of each, the commits still on their way to the log, and
//! those of transactions still open (TxnOffsetCommit), which count once theirs commits.

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
    /// Offsets committed in transactions still open, by producer id: each counts once its
    /// transaction commits, and never if it aborts.
    pub transactional: HashMap<i64, HashMap<(String, i32), CommittedOffset>>,
}

impl Offsets {
    /// True when nothing is committed, no write is under way and no transaction holds any.
    pub fn is_empty(&self) -> bool {
        self.committed.is_empty() && self.pending_writes == 0 && self.transactional.is_empty()
    }

    /// Whether an open transaction committed an offset of `key` (OffsetFetch with
    /// `require_stable` answers UNSTABLE_OFFSET_COMMIT for it until the transaction ends).
    pub fn has_transactional(&self, key: &(String, i32)) -> bool {
        self.transactional
            .values()
            .any(|offsets| offsets.contains_key(key))
    }

    /// Applies a durable commit of `producer_id`'s open transaction: held until the
    /// transaction ends ([`Offsets::end_transaction`]).
    pub fn apply_transactional(
        &mut self,
        producer_id: i64,
        key: (String, i32),
        value: OffsetValue,
        record_offset: i64,
    ) {
        self.transactional.entry(producer_id).or_default().insert(
            key,
            CommittedOffset {
                value,
                record_offset,
            },
        );
    }

    /// `producer_id`'s transaction ended: on commit its offsets count as committed where no
    /// newer commit or tombstone of the same partition is in the log (Kafka keeps the newest
    /// record when transactional and plain commits mix); on abort they are dropped.
    pub fn end_transaction(&mut self, producer_id: i64, commit: bool) {
        let Some(offsets) = self.transactional.remove(&producer_id) else {
            return;
        };
        if commit {
            for (key, offset) in offsets {
                self.apply_commit(key, offset.value, offset.record_offset);
            }
        }
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
        // The tombstone deletes what open transactions committed of it too, as in Kafka.
        for offsets in self.transactional.values_mut() {
            offsets.remove(&key);
        }
        self.transactional.retain(|_, offsets| !offsets.is_empty());
        let newest = self.deleted.entry(key).or_insert(record_offset);
        *newest = (*newest).max(record_offset);
    }
}
