//! What the coordinators' tests share: an internal topic in memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::runtime::{Appended, CoordinatorLog, RecordVisitor, RuntimeError, StoredRecord};

/// An internal topic in memory: records per partition, in append order.
pub(crate) struct MemoryLog {
    partitions: Mutex<HashMap<i32, Vec<StoredRecord>>>,
    /// Appends refused (COORDINATOR_NOT_AVAILABLE, nothing appended) before they work again.
    refusing: AtomicUsize,
    /// False while appends are not made durable ([`MemoryLog::hold`]).
    durable: tokio::sync::watch::Sender<bool>,
}

impl Default for MemoryLog {
    fn default() -> MemoryLog {
        MemoryLog {
            partitions: Mutex::default(),
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

    /// Every record of every partition, partition by partition.
    pub(crate) fn records(&self) -> Vec<StoredRecord> {
        let partitions = self.partitions.lock().expect("lock");
        let mut keys: Vec<&i32> = partitions.keys().collect();
        keys.sort();
        keys.into_iter()
            .flat_map(|p| partitions[p].iter().cloned())
            .collect()
    }
}

impl CoordinatorLog for MemoryLog {
    fn append(&self, partition: i32, records: Vec<StoredRecord>) -> Result<Appended, RuntimeError> {
        let refused = self
            .refusing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if refused.is_ok() {
            return Err(RuntimeError::NotAvailable);
        }
        let mut partitions = self.partitions.lock().expect("lock");
        let log = partitions.entry(partition).or_default();
        let base_offset = log.len() as i64;
        log.extend(records);
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

    fn load(&self, partition: i32, visit: &mut RecordVisitor<'_>) -> Result<(), String> {
        let partitions = self.partitions.lock().expect("lock");
        for (offset, (key, value)) in partitions.get(&partition).into_iter().flatten().enumerate() {
            visit(offset as i64, key, value.as_deref());
        }
        Ok(())
    }
}
