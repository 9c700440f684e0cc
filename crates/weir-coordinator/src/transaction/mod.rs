//! The transaction coordinator: each transactional id's producer and transaction, kept in
//! `__transaction_state` in Kafka's record format ([`records`]), one [`TransactionShard`] per
//! partition this broker leads, on the coordinator runtime. A transactional id belongs to
//! partition `abs(javaHash(id)) % partitions`, and its coordinator is that partition's leader.
//!
//! InitProducerId for a transactional id gives its producer an id and a new epoch, which
//! fences every older producer of the same id (KIP-98, aborting a transaction it left open),
//! and lets a producer that lost an answer or hit a fatal error bump its own epoch (KIP-360).
//! AddPartitionsToTxn begins a transaction and adds to it; EndTxn prepares its commit or abort,
//! after which the broker writes a marker on each of its partitions and completes it. Every
//! change is stored in `__transaction_state` before it is answered.

mod decide;
pub mod records;
mod shard;
pub mod state;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use weir_clock::{Clock, Now, SystemClock};

use crate::runtime::{CoordinatorLog, Runtime, RuntimeError, TopicRuntime};
use records::TxnPartitions;
use shard::{IdExpiry, TransactionShard};
use state::TxnState;

/// An epoch past which a producer id is not bumped: it is replaced by a new one (Kafka's
/// `Short.MaxValue - 1`).
const EPOCH_EXHAUSTED: i16 = i16::MAX - 1;

/// No producer epoch (a producer id just handed out has none yet).
const NO_EPOCH: i16 = -1;

/// Broker settings the transaction coordinator follows.
#[derive(Debug, Clone, Copy)]
pub struct TransactionSettings {
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer may ask
    /// for.
    pub max_timeout_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often open
    /// transactions are checked against their timeouts.
    pub abort_check_interval_ms: u64,
    /// `transactional.id.expiration.ms`: a transactional id without a transaction and
    /// unchanged this long is forgotten.
    pub id_expiration_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`: how often such ids are
    /// looked for.
    pub id_expiration_check_interval_ms: u64,
}

/// Why a transaction request failed; each maps to the Kafka error of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// `__transaction_state` is not there yet, or a write to it failed: try again.
    #[error("the transaction coordinator is not available")]
    CoordinatorNotAvailable,
    /// Another broker leads the transactional id's partition: find the coordinator again.
    #[error("this broker is not the transactional id's coordinator")]
    NotCoordinator,
    /// The transactional id's partition is still loading.
    #[error("the transaction coordinator is loading the transactional id's partition")]
    CoordinatorLoadInProgress,
    /// An empty transactional id.
    #[error("the transactional id is empty")]
    InvalidRequest,
    /// `transaction.timeout.ms` is not positive or above `transaction.max.timeout.ms`.
    #[error("the transaction timeout is above transaction.max.timeout.ms or not positive")]
    InvalidTransactionTimeout,
    /// A newer producer with the same transactional id exists.
    #[error("a newer producer with the same transactional id fenced this one")]
    ProducerFenced,
    /// Another request for the transactional id is under way, or its transaction is being
    /// completed: retry.
    #[error("another request for the transactional id is under way")]
    ConcurrentTransactions,
    /// The transactional id is unknown, or held by another producer id.
    #[error("the producer id is not the transactional id's")]
    InvalidProducerIdMapping,
    /// The request does not fit the transaction's state (ending one not begun, committing one
    /// being aborted).
    #[error("the transaction is not in a state that allows this request")]
    InvalidTxnState,
    /// The partition is not in the producer's open transaction (a verification refused): the
    /// producer aborts the transaction.
    #[error("the partition is not in the producer's transaction")]
    TransactionAbortable,
    /// The transaction's record is larger than `__transaction_state` takes.
    #[error("the transaction's record is larger than __transaction_state takes")]
    RecordTooLarge,
}

impl From<RuntimeError> for TxnError {
    fn from(error: RuntimeError) -> TxnError {
        match error {
            RuntimeError::NotAvailable => TxnError::CoordinatorNotAvailable,
            RuntimeError::NotCoordinator => TxnError::NotCoordinator,
            RuntimeError::LoadInProgress => TxnError::CoordinatorLoadInProgress,
            RuntimeError::TooLarge => TxnError::RecordTooLarge,
            RuntimeError::ProducerFenced => TxnError::ProducerFenced,
            RuntimeError::NotInTransaction => TxnError::TransactionAbortable,
            // Only markers are fenced so, and the transaction coordinator writes none to its log.
            RuntimeError::CoordinatorFenced => TxnError::NotCoordinator,
        }
    }
}

pub use crate::runtime::ProducerIdAndEpoch;

/// An InitProducerId of a transactional producer.
#[derive(Debug, Clone)]
pub struct InitProducerId {
    /// The transactional id.
    pub transactional_id: String,
    /// `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// The producer id and epoch the producer has, when it asks to bump its own epoch
    /// (KIP-360); `None` for a producer starting.
    pub current: Option<ProducerIdAndEpoch>,
}

/// What an InitProducerId comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// The producer's id and epoch, stored.
    Ready(ProducerIdAndEpoch),
    /// A producer id never used before is needed (a new transactional id, or an epoch
    /// exhausted): ask again with one.
    NeedsProducerId,
    /// The transactional id's open transaction is being aborted at the next epoch (fencing its
    /// producer): the broker writes these markers and completes it, and the producer retries
    /// (CONCURRENT_TRANSACTIONS).
    Aborting(TxnMarkers),
}

/// An EndTxn of a transactional producer.
#[derive(Debug, Clone)]
pub struct EndTxn {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer ending its transaction.
    pub producer: ProducerIdAndEpoch,
    /// Commit (true) or abort.
    pub commit: bool,
    /// Transaction protocol version 2 (EndTxn v5, KIP-890): the producer's epoch is bumped
    /// with every transaction it ends, and the answer names the producer's next id and epoch.
    pub bump_epoch: bool,
}

/// What an EndTxn comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// Stored (or a retry of an end already made): the markers the broker must write, then
    /// complete, if any; and the producer id and epoch its producer goes on with (the bumped
    /// ones under transaction protocol version 2, else its own).
    Ended {
        /// The prepared transaction's markers; `None` for a retry.
        markers: Option<TxnMarkers>,
        /// The producer's id and epoch from now on.
        producer: ProducerIdAndEpoch,
    },
    /// The producer's epoch is exhausted and the bump needs a producer id never used: ask
    /// again with one.
    NeedsProducerId,
}

/// A prepared transaction's markers: the broker writes one on each of its partitions, then
/// tells the coordinator ([`TransactionCoordinator::complete`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarkers {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer whose transaction it is.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// A commit marker (true) or an abort marker.
    pub commit: bool,
    /// The partitions to mark.
    pub partitions: TxnPartitions,
}

/// A transactional id as DescribeTransactions shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    /// Where its transaction is.
    pub state: TxnState,
    /// `transaction.timeout.ms`.
    pub timeout_ms: i32,
    /// When its transaction began, or -1.
    pub start_ms: i64,
    /// Its producer id.
    pub producer_id: i64,
    /// Its producer's epoch.
    pub producer_epoch: i16,
    /// The partitions of its open or prepared transaction.
    pub partitions: TxnPartitions,
}

/// A transactional id as ListTransactions lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnListing {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Where its transaction is.
    pub state: TxnState,
    /// When its transaction began, or -1.
    pub start_ms: i64,
}

/// Longest AddPartitionsToTxn waits for the producer's last transaction to complete (its
/// markers written) before it answers CONCURRENT_TRANSACTIONS. Markers take a few
/// milliseconds; a client told to retry waits 20 ms (librdkafka, the Java client) first, which
/// one transaction in ten met when it began right after its predecessor's commit.
const COMPLETION_WAIT: Duration = Duration::from_millis(50);

/// The transaction coordinator of this broker.
pub struct TransactionCoordinator {
    settings: TransactionSettings,
    runtime: Arc<Runtime<TransactionShard>>,
    /// Woken whenever a transaction is stored complete.
    completed: Notify,
}

impl TransactionCoordinator {
    /// A coordinator with no partitions yet: requests get COORDINATOR_NOT_AVAILABLE until its
    /// runtime is started.
    pub fn new(settings: TransactionSettings, log: Arc<dyn CoordinatorLog>) -> Self {
        TransactionCoordinator::with_clock(settings, log, Arc::new(SystemClock))
    }

    /// [`TransactionCoordinator::new`] reading the time from `clock`.
    pub fn with_clock(
        settings: TransactionSettings,
        log: Arc<dyn CoordinatorLog>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        TransactionCoordinator {
            settings,
            runtime: Arc::new(Runtime::new(log, clock, move |now: Now| {
                let interval = Duration::from_millis(settings.abort_check_interval_ms.max(1));
                let expiry = IdExpiry {
                    expiration_ms: settings.id_expiration_ms,
                    check_interval: Duration::from_millis(
                        settings.id_expiration_check_interval_ms.max(1),
                    ),
                };
                TransactionShard::new(interval, expiry, now)
            })),
            completed: Notify::new(),
        }
    }

    /// The runtime of `__transaction_state`, which the broker starts, loads and unloads as
    /// the topic's leadership moves.
    pub fn topic_runtime(&self) -> Arc<dyn TopicRuntime> {
        self.runtime.clone()
    }

    /// Checks that `transactional_id` can be served now (for FindCoordinator).
    pub fn check_served(&self, transactional_id: &str) -> Result<(), TxnError> {
        self.runtime.lock().served_partition(transactional_id)?;
        Ok(())
    }

    /// The coordinator epoch this broker serves `transactional_id` at: the leader epoch of
    /// its `__transaction_state` partition when this broker took it over. Every marker it
    /// writes carries it, so a partition refuses the markers of a coordinator that lost the
    /// partition (TRANSACTION_COORDINATOR_FENCED) once its successor has written one.
    pub fn coordinator_epoch(&self, transactional_id: &str) -> Result<i32, TxnError> {
        Ok(self.runtime.lock().served_epoch(transactional_id)?)
    }

    /// InitProducerId with a transactional id: a new id at epoch 0 for an id seen for the
    /// first time, else the next epoch of its producer id (a new producer id once the epoch
    /// is exhausted), stored before it is answered; every producer of an older epoch is fenced
    /// from then on. A producer naming its current id and epoch (KIP-360) gets the next epoch;
    /// one naming an older epoch is fenced (PRODUCER_FENCED), unless it retries a bump whose
    /// answer it lost. `fresh_id` is a producer id never used, for when one is needed
    /// ([`InitOutcome::NeedsProducerId`] otherwise). An open transaction of the older producer
    /// is aborted first ([`InitOutcome::Aborting`]).
    pub async fn init_producer_id(
        &self,
        request: &InitProducerId,
        fresh_id: Option<i64>,
    ) -> Result<InitOutcome, TxnError> {
        if request.transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        if request.timeout_ms <= 0 || request.timeout_ms > self.settings.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        let written = self
            .runtime
            .write(&request.transactional_id, |shard, now| {
                decide::init(shard, request, fresh_id, now)
            })
            .await?;
        written.stored?;
        Ok(written.answer)
    }

    /// AddPartitionsToTxn (versions 0–3, from the producer): `partitions` join the
    /// producer's transaction, stored before the answer; the first of them begins it. While
    /// its last transaction is being completed, the answer waits for that (at most
    /// [`COMPLETION_WAIT`]) rather than sending the client off to retry.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &TxnPartitions,
    ) -> Result<(), TxnError> {
        let deadline = tokio::time::Instant::now() + COMPLETION_WAIT;
        loop {
            // Listening before trying: a completion between the two is not missed.
            let completed = self.completed.notified();
            tokio::pin!(completed);
            completed.as_mut().enable();
            let written = self
                .runtime
                .write(transactional_id, |shard, now| {
                    decide::add_partitions(shard, transactional_id, producer, partitions, now)
                })
                .await;
            let result = written.and_then(|w| w.stored);
            if result != Err(TxnError::ConcurrentTransactions)
                || tokio::time::timeout_at(deadline, completed).await.is_err()
            {
                return result;
            }
        }
    }

    /// AddPartitionsToTxn with `verify_only` (versions 4+, from a partition's leader,
    /// KIP-890): for each of `partitions`, whether it is in the producer's open transaction;
    /// nothing changes. A producer that is not the id's current one is refused whole, as is a
    /// transaction being completed (CONCURRENT_TRANSACTIONS: the leader asks again).
    pub fn verify(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[(&str, i32)],
    ) -> Result<Vec<bool>, TxnError> {
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        let loaded = self.runtime.lock();
        let (_, shard) = loaded.served_ref(transactional_id)?;
        let value = &shard
            .ids
            .get(transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?
            .value;
        if value.producer_id != producer.producer_id {
            return Err(decide::other_producer(value, producer.producer_id));
        }
        if value.producer_epoch != producer.epoch {
            return Err(TxnError::ProducerFenced);
        }
        match value.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Ongoing => Ok(partitions
                .iter()
                .map(|(topic, index)| {
                    value
                        .partitions
                        .get(*topic)
                        .is_some_and(|held| held.contains(index))
                })
                .collect()),
            _ => Ok(vec![false; partitions.len()]),
        }
    }

    /// EndTxn: prepares the producer's open transaction to commit or abort (stored before the
    /// answer) and returns the markers the broker must write, then complete with
    /// [`TransactionCoordinator::complete`] (none for a retry of an end already done). Under
    /// transaction protocol version 2 the epoch is bumped: to a new producer id (`fresh_id`,
    /// asked for with [`EndOutcome::NeedsProducerId`]) once it is exhausted.
    pub async fn end(
        &self,
        request: &EndTxn,
        fresh_id: Option<i64>,
    ) -> Result<EndOutcome, TxnError> {
        let written = self
            .runtime
            .write(&request.transactional_id, |shard, now| {
                if request.bump_epoch {
                    decide::end_bumping(shard, request, fresh_id, now)
                } else {
                    decide::end(shard, request, now)
                }
            })
            .await?;
        written.stored?;
        Ok(written.answer)
    }

    /// Every marker of a prepared transaction is written: stores it complete, so its producer
    /// can go on. Returns false when the transactional id moved on meanwhile (nothing to do).
    pub async fn complete(&self, markers: &TxnMarkers) -> Result<bool, TxnError> {
        let written = self
            .runtime
            .write(&markers.transactional_id, |shard, now| {
                decide::complete(shard, markers, now)
            })
            .await?;
        written.stored?;
        if written.answer {
            self.completed.notify_waiters();
        }
        Ok(written.answer)
    }

    /// Every prepared transaction of the partitions loaded here, with the markers it still
    /// needs: EndTxn's, the aborts of fenced or timed-out transactions, and those a
    /// coordinator that took a partition over found. The broker writes them and completes each.
    pub fn prepared(&self) -> Vec<TxnMarkers> {
        let partitions = self.runtime.lock();
        partitions
            .shards()
            .flat_map(|shard| {
                shard.prepared.iter().filter_map(|transactional_id| {
                    let value = &shard.ids.get(transactional_id)?.value;
                    Some(TxnMarkers {
                        transactional_id: transactional_id.clone(),
                        producer_id: value.producer_id,
                        producer_epoch: value.producer_epoch,
                        commit: value.state == TxnState::PrepareCommit,
                        partitions: value.partitions.clone(),
                    })
                })
            })
            .collect()
    }

    /// `transactional_id` as DescribeTransactions shows it: `None` when this coordinator has
    /// no such id.
    pub fn describe(&self, transactional_id: &str) -> Result<Option<TxnDescription>, TxnError> {
        let partitions = self.runtime.lock();
        let (_, shard) = partitions.served_ref(transactional_id)?;
        Ok(shard.ids.get(transactional_id).map(|metadata| {
            let value = &metadata.value;
            TxnDescription {
                state: value.state,
                timeout_ms: value.timeout_ms,
                start_ms: value.start_ms,
                producer_id: value.producer_id,
                producer_epoch: value.producer_epoch,
                partitions: value.partitions.clone(),
            }
        }))
    }

    /// Every transactional id this broker coordinates, for ListTransactions (each broker lists
    /// its own), in id order.
    pub fn list(&self) -> Vec<TxnListing> {
        let partitions = self.runtime.lock();
        let mut listed: Vec<TxnListing> = partitions
            .shards()
            .flat_map(|shard| shard.ids.iter())
            .map(|(transactional_id, metadata)| TxnListing {
                transactional_id: transactional_id.clone(),
                producer_id: metadata.value.producer_id,
                state: metadata.value.state,
                start_ms: metadata.value.start_ms,
            })
            .collect();
        listed.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        listed
    }

    /// Aborts transactions open longer than their timeouts, until `stop` resolves.
    pub async fn run_timers(&self, stop: impl Future<Output = ()>) {
        self.runtime.clone().run_timers(stop).await;
    }
}
