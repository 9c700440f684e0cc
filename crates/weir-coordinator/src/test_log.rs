//! What the coordinators' tests share: an internal topic in memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::runtime::{
    Appended, CoordinatorLog, LogEntry, ProducerIdAndEpoch, RecordVisitor, RuntimeError,
    StoredRecord, TxnAppend,
};

/// One entry of a partition in memory.
#[derive(Clone)]
enum Entry {
    /// A record, with the producer whose transaction wrote it.
    Record(StoredRecord, Option<i64>),
    /// A transaction marker.
    Marker { producer_id: i64, commit: bool },
}

/// An internal topic in memory: records per partition, in append order. Like a partition, it
/// refuses a transactional write or marker of an epoch older than it has seen of the producer.
pub(crate) struct MemoryLog {
    partitions: Mutex<HashMap<i32, Vec<Entry>>>,
    /// The newest epoch of each producer seen, by partition and producer id.
    epochs: Mutex<HashMap<(i32, i64), i16>>,
    /// Appends refused (COORDINATOR_NOT_AVAILABLE, nothing appended) before they work again.
    refusing: AtomicUsize,
    /// False while appends are not made durable ([`MemoryLog::hold`]).
    durable: tokio::sync::watch::Sender<bool>,
}

impl Default for MemoryLog {
    fn default() -> MemoryLog {
        MemoryLog {
            partitions: Mutex::default(),
            epochs: Mutex::default(),
            refusing: AtomicUsize::new(0),
            durable: tokio::sync::watch::Sender::new(true),
        }
    }
}

impl MemoryLog {
    /// The next `appends` appends are refused.
    pub(crate) fn refuse(&self, appends: usize) {
        self.refusing.store(appends, Ordering::SeqCst);
    }

    /// Appends from now on are not durable until [`MemoryLog::release`].
    pub(crate) fn hold(&self) {
        self.durable.send_replace(false);
    }

    /// Every append so far is durable, and appends are durable at once again.
    pub(crate) fn release(&self) {
        self.durable.send_replace(true);
    }

    /// Every record of every partition, partition by partition (markers left out).
    pub(crate) fn records(&self) -> Vec<StoredRecord> {
        let partitions = self.partitions.lock().expect("lock");
        let mut keys: Vec<&i32> = partitions.keys().collect();
        keys.sort();
        keys.into_iter()
            .flat_map(|p| partitions[p].iter())
            .filter_map(|entry| match entry {
                Entry::Record(record, _) => Some(record.clone()),
                Entry::Marker { .. } => None,
            })
            .collect()
    }

    /// Appends `entries` to `partition` unless refused: a refusal asked for, or an epoch of
    /// `producer` older than the partition has seen.
    fn push(
        &self,
        partition: i32,
        entries: Vec<Entry>,
        producer: Option<ProducerIdAndEpoch>,
    ) -> Result<Appended, RuntimeError> {
        let refused = self
            .refusing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if refused.is_ok() {
            return Err(RuntimeError::NotAvailable);
        }
        if let Some(producer) = producer {
            let mut epochs = self.epochs.lock().expect("lock");
            let newest = epochs
                .entry((partition, producer.producer_id))
                .or_insert(producer.epoch);
            if producer.epoch < *newest {
                return Err(RuntimeError::ProducerFenced);
            }
            *newest = producer.epoch;
        }
        let mut partitions = self.partitions.lock().expect("lock");
        let log = partitions.entry(partition).or_default();
        let base_offset = log.len() as i64;
        log.extend(entries);
        let mut durable = self.durable.subscribe();
        Ok(Appended {
            base_offset,
            durable: Box::pin(async move {
                // (A dropped log makes nothing durable.)
                durable
                    .wait_for(|durable| *durable)
                    .await
                    .map(|_| ())
                    .map_err(|_| RuntimeError::NotAvailable)
            }),
        })
    }
}

impl CoordinatorLog for MemoryLog {
    fn append(
        &self,
        partition: i32,
        records: Vec<StoredRecord>,
        transactional: Option<TxnAppend>,
    ) -> Result<Appended, RuntimeError> {
        let transactional = transactional.map(|t| t.producer);
        let producer_id = transactional.map(|p| p.producer_id);
        let entries = records
            .into_iter()
            .map(|record| Entry::Record(record, producer_id))
            .collect();
        self.push(partition, entries, transactional)
    }

    fn append_marker(
        &self,
        partition: i32,
        producer: ProducerIdAndEpoch,
        commit: bool,
        _coordinator_epoch: i32,
    ) -> Result<Appended, RuntimeError> {
        let marker = Entry::Marker {
            producer_id: producer.producer_id,
            commit,
        };
        self.push(partition, vec![marker], Some(producer))
    }

    fn load(&self, partition: i32, visit: &mut RecordVisitor<'_>) -> Result<(), String> {
        let partitions = self.partitions.lock().expect("lock");
        for (offset, entry) in partitions.get(&partition).into_iter().flatten().enumerate() {
            visit(match entry {
                Entry::Record((key, value), transactional) => LogEntry::Record {
                    offset: offset as i64,
                    transactional: *transactional,
                    key,
                    value: value.as_deref(),
                },
                Entry::Marker {
                    producer_id,
                    commit,
                } => LogEntry::Marker {
                    producer_id: *producer_id,
                    commit: *commit,
                },
            });
        }
        Ok(())
    }
}
