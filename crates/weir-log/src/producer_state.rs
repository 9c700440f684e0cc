//! Idempotent-producer state of one partition: per producer id, its epoch and the last
//! [`BATCHES_REMEMBERED`] batches, so a retried batch is recognised and not appended twice.
//!
//! Producer ids are chosen by clients, so the table has a bound: past it, the producer that
//! has been idle longest is forgotten first (its next batch is then accepted as from a new
//! producer, as after `producer.id.expiration.ms`).

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::batch::BatchHeader;

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

    /// Rebuilds the eviction order after loading a snapshot, and trims the table to
    /// `producers_max`; returns how many were evicted.
    pub fn restored(&mut self, producers_max: usize) -> usize {
        self.by_age = self
            .producers
            .iter()
            .map(|(id, e)| (e.last_append_ms, *id))
            .collect();
        self.evict_down_to(producers_max)
    }

    fn evict_down_to(&mut self, producers_max: usize) -> usize {
        let mut evicted = 0;
        while self.producers.len() > producers_max {
            let Some((_, id)) = self.by_age.pop_first() else {
                break;
            };
            self.producers.remove(&id);
            evicted += 1;
        }
        evicted
    }

    /// Records an appended (or recovered) batch. `header` carries its assigned offsets. A new
    /// producer beyond `producers_max` evicts the one idle longest; returns how many were
    /// evicted.
    pub fn record(&mut self, header: &BatchHeader, now_ms: i64, producers_max: usize) -> usize {
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
            });
        self.by_age
            .remove(&(entry.last_append_ms, header.producer_id));
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
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
        entry.last_append_ms = entry.last_append_ms.max(now_ms);
        self.by_age
            .insert((entry.last_append_ms, header.producer_id));
        evicted
    }

    /// Forgets producers idle for longer than `expiration_ms`; returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let mut expired = 0;
        while let Some(&(last_append_ms, id)) = self.by_age.first() {
            if now_ms.saturating_sub(last_append_ms) <= expiration_ms {
                break;
            }
            self.by_age.pop_first();
            self.producers.remove(&id);
            expired += 1;
        }
        expired
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
        table.record(&first, 0, 10);
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
        table.record(&header(7, 1, 0, 1, 3), 0, 10);
        assert_eq!(
            table.check(&header(7, 0, 3, 1, 4)),
            SequenceCheck::StaleEpoch
        );
    }

    #[test]
    fn remembers_five_and_expires() {
        let mut table = ProducerStateTable::default();
        for i in 0..6 {
            table.record(&header(1, 0, i, 1, i64::from(i)), 100, 10);
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
            assert_eq!(table.record(&header(id, 0, 0, 1, id), 100 + id, 3), 0);
        }
        // Producer 0 writes again: producer 1 is now the one idle longest.
        table.record(&header(0, 0, 1, 1, 3), 200, 3);
        assert_eq!(table.record(&header(9, 0, 0, 1, 4), 300, 3), 1);
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
