//! Idempotent-producer state of one partition: per producer id, its epoch and the last
//! [`BATCHES_REMEMBERED`] batches, so a retried batch is recognised and not appended twice.
//!
//! Producer ids are chosen by clients, so the table has a bound: past it, the producer that
//! has been idle longest is forgotten first (its next batch is then accepted as from a new
//! producer, as after `producer.id.expiration.ms`) — never one with a transaction open here.
//!
//! Transactions: each producer's open transaction on this partition (its first offset), so
//! the first offset of the oldest open one bounds what read_committed consumers may read (the
//! last stable offset), and what an abort marker ends ([`ProducerStateTable::aborted_by`]):
//! the entry of the segment's aborted-transaction index ([`crate::txn_index`]) that tells
//! such consumers what to skip.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::batch::{BatchHeader, TxnMarker, TxnResult};
use crate::txn_index::AbortedTxn;

/// Batches remembered per producer: Kafka clients keep at most five in flight per partition,
/// so any retry is among the last five.
pub const BATCHES_REMEMBERED: usize = 5;

/// A batch a producer already wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMetadata {
    /// Sequence of the first record.
    pub first_sequence: i32,
    /// Sequence of the last record.
    pub last_sequence: i32,
    /// Offset assigned to the first record.
    pub base_offset: i64,
    /// Offset assigned to the last record.
    pub last_offset: i64,
}

/// What the log knows of one producer id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProducerEntry {
    /// The producer's current epoch.
    pub epoch: i16,
    /// Newest batches last.
    pub batches: VecDeque<BatchMetadata>,
    /// Broker clock time of the last append, for `producer.id.expiration.ms`.
    pub last_append_ms: i64,
    /// The largest timestamp of its last batch or marker, as stored (Kafka's `lastTimestamp`,
    /// which DescribeProducers reports), or -1.
    #[serde(default = "no_timestamp")]
    pub last_timestamp: i64,
    /// The first offset of its transaction open on this partition.
    #[serde(default)]
    pub ongoing_first_offset: Option<i64>,
    /// The epoch of the transaction coordinator that wrote its last marker here, or -1: a
    /// marker of an older coordinator (a zombie that lost its partition of
    /// `__transaction_state`) is refused.
    #[serde(default = "no_coordinator_epoch")]
    pub coordinator_epoch: i32,
}

/// The coordinator epoch of a producer no marker was written for.
fn no_coordinator_epoch() -> i32 {
    -1
}

/// The last timestamp of a producer loaded from a snapshot that did not keep it.
fn no_timestamp() -> i64 {
    -1
}

/// A producer as the partition knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    /// Its id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// The sequence of its last record here, or -1.
    pub last_sequence: i32,
    /// The largest timestamp of its last batch or marker here, or -1.
    pub last_timestamp: i64,
    /// The first offset of its transaction open here.
    pub ongoing_first_offset: Option<i64>,
    /// The epoch of the coordinator that wrote its last marker here, or -1.
    pub coordinator_epoch: i32,
}

/// An aborted transaction as snapshots of earlier versions listed them (the segments' indexes
/// hold them now): read once, to write them to the indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyAbortedTxn {
    /// The producer whose transaction it was.
    pub producer_id: i64,
    /// Offset of its first record on this partition.
    pub first_offset: i64,
    /// Offset of its abort marker.
    pub last_offset: i64,
}

/// Verifications in flight per partition: past it the oldest is withdrawn (its batch is then
/// refused as not in the transaction, and its producer aborts and tries again).
pub const VERIFICATIONS_MAX: usize = 10_000;

/// Proof that the transaction coordinator was asked whether a producer's transaction holds
/// this partition: taken with [`ProducerStateTable::start_verification`], handed back with the
/// batch ([`crate::ValidBatch::verified`]), valid until a marker of the producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard(u64);

impl VerificationGuard {
    /// The guard as a number, to carry through layers that do not know this type.
    pub fn value(self) -> u64 {
        self.0
    }

    /// The guard [`VerificationGuard::value`] gave.
    pub fn from_value(value: u64) -> VerificationGuard {
        VerificationGuard(value)
    }
}

/// Source of guard values, unique in the process.
static NEXT_GUARD: AtomicU64 = AtomicU64::new(1);

/// A verification in flight: the producer's epoch and its guard.
#[derive(Debug, Clone, Copy)]
struct Verifying {
    epoch: i16,
    guard: VerificationGuard,
}

/// How an idempotent batch relates to what the partition already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Not idempotent, or the next batch in sequence: append it.
    Append,
    /// Already written: answer with this metadata and do not append.
    Duplicate(BatchMetadata),
    /// A gap or a sequence from the past that is not a known duplicate.
    OutOfOrder,
    /// An epoch older than the producer's current one.
    StaleEpoch,
}

/// Producer states of one partition.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
    /// `(last_append_ms, producer_id)` of every entry, oldest first: the eviction order.
    #[serde(skip)]
    by_age: BTreeSet<(i64, i64)>,
    /// `(first_offset, producer_id)` of every open transaction, oldest first.
    #[serde(skip)]
    ongoing: BTreeSet<(i64, i64)>,
    /// Transactions aborted here, as a snapshot of an earlier version listed them.
    #[serde(default, rename = "aborted", skip_serializing)]
    legacy_aborted: Vec<LegacyAbortedTxn>,
    /// Verifications in flight, by producer id.
    #[serde(skip)]
    verifying: HashMap<i64, Verifying>,
    /// The same, by guard (oldest first): the withdrawal order past [`VERIFICATIONS_MAX`].
    #[serde(skip)]
    verifying_by_guard: BTreeMap<u64, i64>,
}

fn in_sequence(last_sequence: i32, next_first: i32) -> bool {
    next_first == last_sequence.wrapping_add(1) || (last_sequence == i32::MAX && next_first == 0)
}

impl ProducerStateTable {
    /// Decides whether `header` may be appended.
    pub fn check(&self, header: &BatchHeader) -> SequenceCheck {
        if !header.has_producer_id() {
            return SequenceCheck::Append;
        }
        let Some(entry) = self.producers.get(&header.producer_id) else {
            // Unknown producer (new, or its state expired): any sequence starts it, as in Kafka.
            return SequenceCheck::Append;
        };
        if header.producer_epoch < entry.epoch {
            return SequenceCheck::StaleEpoch;
        }
        if header.is_control() {
            // A transaction marker has no sequence: only its epoch counts.
            return SequenceCheck::Append;
        }
        if header.producer_epoch > entry.epoch {
            return if header.base_sequence == 0 {
                SequenceCheck::Append
            } else {
                SequenceCheck::OutOfOrder
            };
        }
        let last_sequence = header.last_sequence();
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == header.base_sequence && b.last_sequence == last_sequence)
        {
            return SequenceCheck::Duplicate(*dup);
        }
        match entry.batches.back() {
            Some(last) if !in_sequence(last.last_sequence, header.base_sequence) => {
                SequenceCheck::OutOfOrder
            }
            _ => SequenceCheck::Append,
        }
    }

    /// Decides whether a coordinator's batch ([`crate::ValidBatch::from_coordinator`]) may be
    /// appended: only its epoch counts.
    pub fn check_epoch(&self, header: &BatchHeader) -> SequenceCheck {
        match self.producers.get(&header.producer_id) {
            Some(entry) if header.has_producer_id() && header.producer_epoch < entry.epoch => {
                SequenceCheck::StaleEpoch
            }
            _ => SequenceCheck::Append,
        }
    }

    /// The coordinator epoch of `producer_id`'s last marker here when a marker written by
    /// the coordinator of `coordinator_epoch` comes from an older one: a coordinator that lost
    /// its partition of `__transaction_state` must not end a later transaction.
    pub fn fenced_coordinator(&self, producer_id: i64, coordinator_epoch: i32) -> Option<i32> {
        self.producers
            .get(&producer_id)
            .map(|entry| entry.coordinator_epoch)
            .filter(|current| coordinator_epoch < *current)
    }

    /// Whether `producer_id` at `epoch` has a transaction open here (its next transactional
    /// batch needs no verification).
    pub fn in_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|e| e.epoch == epoch && e.ongoing_first_offset.is_some())
    }

    /// The guard a transactional batch of `producer_id` at `epoch` needs once its partition
    /// is verified: `None` when its transaction is open here already. A verification in
    /// flight for the same producer and epoch shares its guard.
    pub fn start_verification(
        &mut self,
        producer_id: i64,
        epoch: i16,
    ) -> Option<VerificationGuard> {
        if self.in_transaction(producer_id, epoch) {
            return None;
        }
        if let Some(v) = self.verifying.get(&producer_id) {
            if v.epoch == epoch {
                return Some(v.guard);
            }
        }
        self.withdraw_verification(producer_id);
        while self.verifying.len() >= VERIFICATIONS_MAX {
            let Some((_, oldest)) = self.verifying_by_guard.pop_first() else {
                break;
            };
            self.verifying.remove(&oldest);
        }
        let guard = VerificationGuard(NEXT_GUARD.fetch_add(1, Ordering::Relaxed));
        self.verifying
            .insert(producer_id, Verifying { epoch, guard });
        self.verifying_by_guard.insert(guard.0, producer_id);
        Some(guard)
    }

    /// Whether a transactional (non-control) batch may be appended: its transaction is open
    /// here, or `guard` is the producer's verification in flight at the batch's epoch.
    pub fn check_verified(&self, header: &BatchHeader, guard: Option<VerificationGuard>) -> bool {
        if !header.is_transactional() || header.is_control() {
            return true;
        }
        if self.in_transaction(header.producer_id, header.producer_epoch) {
            return true;
        }
        self.verifying
            .get(&header.producer_id)
            .is_some_and(|v| v.epoch == header.producer_epoch && Some(v.guard) == guard)
    }

    /// Drops `producer_id`'s verification in flight, if any.
    fn withdraw_verification(&mut self, producer_id: i64) {
        if let Some(v) = self.verifying.remove(&producer_id) {
            self.verifying_by_guard.remove(&v.guard.0);
        }
    }

    /// Rebuilds the eviction order after loading a snapshot, and trims the table to
    /// `producers_max`; returns how many were evicted.
    pub fn restored(&mut self, producers_max: usize) -> usize {
        self.by_age = self
            .producers
            .iter()
            .map(|(id, e)| (e.last_append_ms, *id))
            .collect();
        self.ongoing = self
            .producers
            .iter()
            .filter_map(|(id, e)| e.ongoing_first_offset.map(|first| (first, *id)))
            .collect();
        self.evict_down_to(producers_max)
    }

    /// Forgets the producers idle longest until at most `producers_max` are left, passing over
    /// those with a transaction open (forgetting one would let read_committed consumers past
    /// it).
    fn evict_down_to(&mut self, producers_max: usize) -> usize {
        let excess = self.producers.len().saturating_sub(producers_max);
        let victims: Vec<(i64, i64)> = self
            .by_age
            .iter()
            .filter(|(_, id)| {
                self.producers
                    .get(id)
                    .is_some_and(|e| e.ongoing_first_offset.is_none())
            })
            .take(excess)
            .copied()
            .collect();
        for victim in &victims {
            self.by_age.remove(victim);
            self.producers.remove(&victim.1);
        }
        victims.len()
    }

    /// The transaction the control batch `header` (its offsets assigned) ends as an abort,
    /// when `marker` says abort and its producer has a transaction open here: what the
    /// aborted-transaction index is to hold once the marker is appended.
    pub fn aborted_by(
        &self,
        header: &BatchHeader,
        marker: Option<TxnMarker>,
    ) -> Option<AbortedTxn> {
        if !header.is_control() || marker.is_none_or(|m| m.result != TxnResult::Abort) {
            return None;
        }
        let first_offset = self
            .producers
            .get(&header.producer_id)?
            .ongoing_first_offset?;
        let last_stable_offset = self
            .ongoing
            .iter()
            .find(|(_, id)| *id != header.producer_id)
            .map_or(header.base_offset + 1, |(first, _)| *first);
        Some(AbortedTxn {
            producer_id: header.producer_id,
            first_offset,
            last_offset: header.base_offset,
            last_stable_offset,
        })
    }

    /// Takes the aborted transactions a snapshot of an earlier version listed.
    pub fn take_legacy_aborted(&mut self) -> Vec<LegacyAbortedTxn> {
        std::mem::take(&mut self.legacy_aborted)
    }

    /// Records an appended (or recovered) batch. `header` carries its assigned offsets. A new
    /// producer beyond `producers_max` evicts the one idle longest; returns how many were
    /// evicted.
    ///
    /// A transactional batch opens its producer's transaction here if none is open; a marker
    /// (`marker`: what a control batch says) closes it and its coordinator's epoch is kept.
    pub fn record(
        &mut self,
        header: &BatchHeader,
        marker: Option<TxnMarker>,
        now_ms: i64,
        producers_max: usize,
    ) -> usize {
        if !header.has_producer_id() {
            return 0;
        }
        let mut evicted = 0;
        if !self.producers.contains_key(&header.producer_id) {
            evicted = self.evict_down_to(producers_max.saturating_sub(1));
        }
        let entry = self
            .producers
            .entry(header.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: header.producer_epoch,
                batches: VecDeque::with_capacity(BATCHES_REMEMBERED),
                last_append_ms: now_ms,
                last_timestamp: no_timestamp(),
                ongoing_first_offset: None,
                coordinator_epoch: no_coordinator_epoch(),
            });
        self.by_age
            .remove(&(entry.last_append_ms, header.producer_id));
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if header.is_control() || header.is_transactional() {
            // A marker ends what was verified; a batch that opens the transaction used it.
            if let Some(v) = self.verifying.remove(&header.producer_id) {
                self.verifying_by_guard.remove(&v.guard.0);
            }
        }
        if header.is_control() {
            if let Some(marker) = marker {
                entry.coordinator_epoch = entry.coordinator_epoch.max(marker.coordinator_epoch);
            }
            if let Some(first_offset) = entry.ongoing_first_offset.take() {
                self.ongoing.remove(&(first_offset, header.producer_id));
            }
        } else if header.is_transactional() && entry.ongoing_first_offset.is_none() {
            entry.ongoing_first_offset = Some(header.base_offset);
            self.ongoing
                .insert((header.base_offset, header.producer_id));
        }
        // A transaction marker moves the epoch only: the producer's sequences go on after it.
        if !header.is_control() {
            if entry.batches.len() == BATCHES_REMEMBERED {
                entry.batches.pop_front();
            }
            entry.batches.push_back(BatchMetadata {
                first_sequence: header.base_sequence,
                last_sequence: header.last_sequence(),
                base_offset: header.base_offset,
                last_offset: header.last_offset(),
            });
        }
        entry.last_timestamp = header.max_timestamp;
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        self.by_age
            .insert((entry.last_append_ms, header.producer_id));
        evicted
    }

    /// Forgets producers idle for longer than `expiration_ms`, but those with a transaction
    /// open (its timeout ends it); returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let expired: Vec<(i64, i64)> = self
            .by_age
            .iter()
            .take_while(|(last_append_ms, _)| {
                now_ms.saturating_sub(*last_append_ms) > expiration_ms
            })
            .filter(|(_, id)| {
                self.producers
                    .get(id)
                    .is_some_and(|e| e.ongoing_first_offset.is_none())
            })
            .copied()
            .collect();
        for entry in &expired {
            self.by_age.remove(entry);
            self.producers.remove(&entry.1);
        }
        expired.len()
    }

    /// Every producer tracked, as DescribeProducers shows them, by producer id.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut active: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(id, entry)| ActiveProducer {
                producer_id: *id,
                epoch: entry.epoch,
                last_sequence: entry.batches.back().map_or(-1, |b| b.last_sequence),
                last_timestamp: entry.last_timestamp,
                ongoing_first_offset: entry.ongoing_first_offset,
                coordinator_epoch: entry.coordinator_epoch,
            })
            .collect();
        active.sort_by_key(|producer| producer.producer_id);
        active
    }

    /// How many transactions are open here.
    pub fn open_transactions(&self) -> usize {
        self.ongoing.len()
    }

    /// How many transactions open here have a producer that has not appended here for longer
    /// than `idle_ms` (as of `now_ms`): past the broker's `transaction.max.timeout.ms`, hung.
    pub fn open_transactions_idle_longer_than(&self, now_ms: i64, idle_ms: i64) -> usize {
        self.ongoing
            .iter()
            .filter(|(_, id)| {
                self.producers
                    .get(id)
                    .is_some_and(|e| now_ms.saturating_sub(e.last_append_ms) > idle_ms)
            })
            .count()
    }

    /// The first offset of the oldest transaction open here, if any.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|(first_offset, _)| *first_offset)
    }

    /// Number of producers tracked.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// True when no producer is tracked.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{build_batch, ProducerFields};

    fn header(
        producer_id: i64,
        epoch: i16,
        seq: i32,
        records: usize,
        base_offset: i64,
    ) -> BatchHeader {
        let values: Vec<&[u8]> = vec![b"v"; records];
        let fields = ProducerFields {
            producer_id,
            producer_epoch: epoch,
            base_sequence: seq,
        };
        let mut h = BatchHeader::parse(&build_batch(&values, 0, fields)).expect("parse");
        h.base_offset = base_offset;
        h
    }

    #[test]
    fn sequence_rules() {
        let mut table = ProducerStateTable::default();
        let first = header(7, 0, 0, 3, 0);
        assert_eq!(table.check(&first), SequenceCheck::Append);
        table.record(&first, None, 0, 10);
        let cases = [
            (header(7, 0, 3, 2, 3), SequenceCheck::Append),
            (
                header(7, 0, 0, 3, 3),
                SequenceCheck::Duplicate(BatchMetadata {
                    first_sequence: 0,
                    last_sequence: 2,
                    base_offset: 0,
                    last_offset: 2,
                }),
            ),
            (header(7, 0, 5, 1, 3), SequenceCheck::OutOfOrder),
            (header(7, 1, 0, 1, 3), SequenceCheck::Append),
            (header(7, 1, 4, 1, 3), SequenceCheck::OutOfOrder),
            (header(8, 0, 42, 1, 3), SequenceCheck::Append),
        ];
        for (i, (h, want)) in cases.iter().enumerate() {
            assert_eq!(table.check(h), *want, "case {i}");
        }
        table.record(&header(7, 1, 0, 1, 3), None, 0, 10);
        assert_eq!(
            table.check(&header(7, 0, 3, 1, 4)),
            SequenceCheck::StaleEpoch
        );
    }

    #[test]
    fn last_timestamp_is_the_batch_time_and_expiry_the_broker_clock() {
        let mut table = ProducerStateTable::default();
        let mut first = header(3, 0, 0, 1, 0);
        first.max_timestamp = 1_000;
        table.record(&first, None, 50_000, 10);
        let [producer] = table.active()[..] else {
            panic!("one producer")
        };
        assert_eq!(
            (producer.last_timestamp, producer.last_sequence),
            (1_000, 0)
        );
        // A batch stamped long ago does not expire it: the broker's clock does.
        assert_eq!(table.expire(50_005, 10), 0);
        let mut later = header(3, 0, 1, 1, 1);
        later.max_timestamp = 900;
        table.record(&later, None, 50_010, 10);
        assert_eq!(table.active()[0].last_timestamp, 900);
        assert_eq!(table.expire(50_021, 10), 1);
    }

    #[test]
    fn remembers_five_and_expires() {
        let mut table = ProducerStateTable::default();
        for i in 0..6 {
            table.record(&header(1, 0, i, 1, i64::from(i)), None, 100, 10);
        }
        assert_eq!(
            table.check(&header(1, 0, 0, 1, 9)),
            SequenceCheck::OutOfOrder,
            "oldest forgotten"
        );
        assert!(matches!(
            table.check(&header(1, 0, 1, 1, 9)),
            SequenceCheck::Duplicate(_)
        ));
        assert_eq!(table.expire(200, 50), 1);
        assert!(table.is_empty());
    }

    #[test]
    fn the_longest_idle_producer_is_evicted_first() {
        let mut table = ProducerStateTable::default();
        for id in 0..3 {
            assert_eq!(table.record(&header(id, 0, 0, 1, id), None, 100 + id, 3), 0);
        }
        // Producer 0 writes again: producer 1 is now the one idle longest.
        table.record(&header(0, 0, 1, 1, 3), None, 200, 3);
        assert_eq!(table.record(&header(9, 0, 0, 1, 4), None, 300, 3), 1);
        assert_eq!(table.len(), 3);
        assert_eq!(
            table.check(&header(1, 0, 5, 1, 5)),
            SequenceCheck::Append,
            "1 was forgotten"
        );
        assert_eq!(
            table.check(&header(0, 0, 5, 1, 5)),
            SequenceCheck::OutOfOrder,
            "0 is kept"
        );
        let mut restored: ProducerStateTable =
            serde_json::from_str(&serde_json::to_string(&table).expect("json")).expect("parse");
        assert_eq!(
            restored.restored(2),
            1,
            "a smaller bound trims the snapshot"
        );
        assert_eq!(
            restored.check(&header(2, 0, 5, 1, 5)),
            SequenceCheck::Append,
            "2 was oldest"
        );
    }
}
