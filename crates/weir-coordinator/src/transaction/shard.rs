//! A transaction shard: the transactional ids of one partition of `__transaction_state`, as
//! its records make them.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use weir_clock::Now;

use super::records::{decode_key, encode_key, TxnValue};
use super::state::TxnState;
use super::TxnError;
use crate::runtime::{Shard, StoredRecord, TimerWrite};
use weir_metadata::TRANSACTION_STATE_TOPIC;

/// One record of `__transaction_state`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnRecord {
    /// The transactional id.
    pub(crate) transactional_id: String,
    /// Its metadata; `None`: the id expired.
    pub(crate) value: Option<TxnValue>,
    /// The epoch the producer had before the one this record gives it, so a retried
    /// InitProducerId whose answer was lost gets the same answer. Kept in memory only, as
    /// Kafka keeps it: a record read from the log knows none (-1).
    pub(crate) last_producer_epoch: i16,
}

/// A transactional id as the coordinator holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnMetadata {
    /// What the log holds of it.
    pub(crate) value: TxnValue,
    /// See [`TxnRecord::last_producer_epoch`].
    pub(crate) last_producer_epoch: i16,
}

/// The transactional ids of one partition.
#[derive(Debug)]
pub(crate) struct TransactionShard {
    /// Each transactional id, as its last durable record left it.
    pub(crate) ids: HashMap<String, TxnMetadata>,
    /// Transactional ids with a write under way: requests for them are answered
    /// CONCURRENT_TRANSACTIONS (clients retry) until it ends, so no two decisions are made
    /// from the same state.
    pending: HashSet<String>,
    /// Transactional ids with a transaction open, which its timeout may abort.
    ongoing: HashSet<String>,
    /// Transactional ids with a transaction prepared, whose markers are still to be written.
    pub(crate) prepared: HashSet<String>,
    /// How often open transactions are checked against their timeouts.
    abort_check_interval: Duration,
    /// When they are checked next.
    next_abort_check: Instant,
    /// What expires idle transactional ids.
    expiry: IdExpiry,
    /// When idle transactional ids are looked for next.
    next_expiry_check: Instant,
}

/// `transactional.id.expiration.ms` and how often it is applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdExpiry {
    /// A transactional id without a transaction and unchanged this long is forgotten.
    pub(crate) expiration_ms: i64,
    /// How often such ids are looked for.
    pub(crate) check_interval: Duration,
}

impl TransactionShard {
    /// A shard with nothing loaded yet, checking timeouts every `abort_check_interval` and
    /// expiring idle ids as `expiry` says.
    pub(crate) fn new(abort_check_interval: Duration, expiry: IdExpiry, now: Now) -> Self {
        TransactionShard {
            ids: HashMap::new(),
            pending: HashSet::new(),
            ongoing: HashSet::new(),
            prepared: HashSet::new(),
            abort_check_interval,
            next_abort_check: now.instant + abort_check_interval,
            expiry,
            next_expiry_check: now.instant + expiry.check_interval,
        }
    }

    /// Forgets transactional ids without a transaction (Empty, or their last one complete)
    /// unchanged for `transactional.id.expiration.ms`: a tombstone each, as Kafka writes; a
    /// producer starting with one of them later gets a new producer id.
    fn expire_idle(&self, now: Now, writes: &mut Vec<TimerWrite<TxnRecord>>) {
        for (transactional_id, metadata) in &self.ids {
            let value = &metadata.value;
            let idle = matches!(
                value.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            );
            let expires = value
                .last_update_ms
                .saturating_add(self.expiry.expiration_ms);
            if !idle || now.wall_ms <= expires || self.is_pending(transactional_id) {
                continue;
            }
            writes.push(TimerWrite {
                key: transactional_id.clone(),
                records: vec![TxnRecord {
                    transactional_id: transactional_id.clone(),
                    value: None,
                    last_producer_epoch: -1,
                }],
                applied: false,
            });
        }
        if !writes.is_empty() {
            tracing::info!(target: "weir::transactions", expired = writes.len(), "forgetting transactional ids idle longer than transactional.id.expiration.ms");
        }
    }

    /// Whether a write for `transactional_id` is under way.
    pub(crate) fn is_pending(&self, transactional_id: &str) -> bool {
        self.pending.contains(transactional_id)
    }

    /// Keeps the open and prepared sets in step with `transactional_id`'s new state.
    fn track(&mut self, transactional_id: &str, state: Option<TxnState>) {
        let ongoing = state == Some(TxnState::Ongoing);
        let prepared = matches!(
            state,
            Some(TxnState::PrepareCommit | TxnState::PrepareAbort)
        );
        for (set, member) in [(&mut self.ongoing, ongoing), (&mut self.prepared, prepared)] {
            if member {
                set.insert(transactional_id.to_string());
            } else {
                set.remove(transactional_id);
            }
        }
    }

    /// Aborts every open transaction older than its timeout, as its producer's successor
    /// would: PrepareAbort at the next epoch, so the producer is fenced wherever the markers
    /// go (Kafka's abort of a timed-out transaction).
    fn abort_timed_out(&self, now: Now, writes: &mut Vec<TimerWrite<TxnRecord>>) {
        for transactional_id in &self.ongoing {
            let Some(metadata) = self.ids.get(transactional_id) else {
                continue;
            };
            let value = &metadata.value;
            let expires = value.start_ms.saturating_add(i64::from(value.timeout_ms));
            if now.wall_ms <= expires || self.is_pending(transactional_id) {
                continue;
            }
            tracing::info!(target: "weir::transactions", transactional_id, producer_id = value.producer_id, timeout_ms = value.timeout_ms, "aborting a transaction open longer than its timeout");
            writes.push(TimerWrite {
                key: transactional_id.clone(),
                records: vec![TxnRecord {
                    transactional_id: transactional_id.clone(),
                    value: Some(TxnValue {
                        producer_epoch: value.producer_epoch.saturating_add(1),
                        state: TxnState::PrepareAbort,
                        last_update_ms: now.wall_ms,
                        ..value.clone()
                    }),
                    last_producer_epoch: -1,
                }],
                applied: false,
            });
        }
    }
}

impl Shard for TransactionShard {
    const TOPIC: &'static str = TRANSACTION_STATE_TOPIC;
    type Record = TxnRecord;
    type Error = TxnError;
    type Work = ();
    type Done = ();

    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<TxnRecord>, String> {
        let transactional_id = decode_key(key).map_err(|error| error.to_string())?;
        let value = value
            .map(TxnValue::decode)
            .transpose()
            .map_err(|error| error.to_string())?;
        Ok(Some(TxnRecord {
            transactional_id,
            value,
            last_producer_epoch: -1,
        }))
    }

    fn encode(record: &TxnRecord) -> StoredRecord {
        (
            encode_key(&record.transactional_id),
            record.value.as_ref().map(TxnValue::encode),
        )
    }

    fn apply(&mut self, _offset: i64, record: TxnRecord, _now: Now) {
        let state = record.value.as_ref().map(|value| value.state);
        self.track(&record.transactional_id, state);
        match record.value {
            Some(value) => {
                let metadata = TxnMetadata {
                    value,
                    last_producer_epoch: record.last_producer_epoch,
                };
                self.ids.insert(record.transactional_id, metadata);
            }
            None => {
                self.ids.remove(&record.transactional_id);
            }
        }
    }

    fn writing(&mut self, key: &str, _records: &[TxnRecord]) {
        self.pending.insert(key.to_string());
    }

    fn written(&mut self, key: &str, _records: &[TxnRecord]) {
        self.pending.remove(key);
    }

    fn unwritten(&mut self, _key: &str, _records: &[TxnRecord]) {
        // Every write is applied once durable (`Runtime::write`): a failed one changed
        // nothing.
    }

    fn size(record: &TxnRecord) -> usize {
        let partitions: usize = record.value.as_ref().map_or(0, |value| {
            value
                .partitions
                .iter()
                .map(|(topic, partitions)| topic.len() + 4 * partitions.len() + 4)
                .sum()
        });
        record.transactional_id.len() + 64 + partitions
    }

    fn finish_load(&mut self, _now: Now) -> String {
        format!("{} transactional ids", self.ids.len())
    }

    fn next_deadline(&self) -> Option<Instant> {
        Some(self.next_abort_check.min(self.next_expiry_check))
    }

    fn tick(&mut self, now: Now, writes: &mut Vec<TimerWrite<TxnRecord>>) -> Vec<()> {
        if now.instant >= self.next_abort_check {
            self.abort_timed_out(now, writes);
            self.next_abort_check = now.instant + self.abort_check_interval;
        }
        if now.instant >= self.next_expiry_check {
            let mut expired = Vec::new();
            self.expire_idle(now, &mut expired);
            writes.extend(expired);
            self.next_expiry_check = now.instant + self.expiry.check_interval;
        }
        Vec::new()
    }

    fn work(_work: ()) {}

    fn finish(&mut self, _done: (), _now: Now, _writes: &mut Vec<TimerWrite<TxnRecord>>) {}

    fn len(&self) -> usize {
        self.ids.len()
    }
}
