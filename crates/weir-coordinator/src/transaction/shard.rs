//! A transaction shard: the transactional ids of one partition of `__transaction_state`, as
//! its records make them.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use weir_clock::Now;

use super::records::{decode_key, encode_key, TxnValue};
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
#[derive(Debug, Default)]
pub(crate) struct TransactionShard {
    /// Each transactional id, as its last durable record left it.
    pub(crate) ids: HashMap<String, TxnMetadata>,
    /// Transactional ids with a write under way: requests for them are answered
    /// CONCURRENT_TRANSACTIONS (clients retry) until it ends, so no two decisions are made
    /// from the same state.
    pending: HashSet<String>,
}

impl TransactionShard {
    /// Whether a write for `transactional_id` is under way.
    pub(crate) fn is_pending(&self, transactional_id: &str) -> bool {
        self.pending.contains(transactional_id)
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
        None
    }

    fn tick(&mut self, _now: Now, _writes: &mut Vec<TimerWrite<TxnRecord>>) -> Vec<()> {
        Vec::new()
    }

    fn work(_work: ()) {}

    fn finish(&mut self, _done: (), _now: Now, _writes: &mut Vec<TimerWrite<TxnRecord>>) {}

    fn len(&self) -> usize {
        self.ids.len()
    }
}
