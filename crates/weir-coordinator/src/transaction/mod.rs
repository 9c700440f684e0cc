//! The transaction coordinator: each transactional id's producer and transaction, kept in
//! `__transaction_state` in Kafka's record format ([`records`]), one [`TransactionShard`] per
//! partition this broker leads, on the coordinator runtime. A transactional id belongs to
//! partition `abs(javaHash(id)) % partitions`, and its coordinator is that partition's leader.
//!
//! InitProducerId for a transactional id gives its producer an id and a new epoch, which
//! fences every older producer of the same id (KIP-98), and lets a producer that lost an
//! answer or hit a fatal error bump its own epoch (KIP-360).

pub mod records;
mod shard;
pub mod state;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use weir_clock::{Clock, Now, SystemClock};

use crate::runtime::{CoordinatorLog, Decision, Runtime, RuntimeError, TopicRuntime};
use records::{TxnPartitions, TxnValue};
use shard::{TransactionShard, TxnRecord};
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
        }
    }
}

/// A producer id with an epoch of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// The producer's id and epoch, stored.
    Ready(ProducerIdAndEpoch),
    /// A producer id never used before is needed (a new transactional id, or an epoch
    /// exhausted): ask again with one.
    NeedsProducerId,
}

/// The transaction coordinator of this broker.
pub struct TransactionCoordinator {
    settings: TransactionSettings,
    runtime: Arc<Runtime<TransactionShard>>,
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
            runtime: Arc::new(Runtime::new(log, clock, |_: Now| {
                TransactionShard::default()
            })),
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

    /// InitProducerId with a transactional id: a new id at epoch 0 for an id seen for the
    /// first time, else the next epoch of its producer id (a new producer id once the epoch
    /// is exhausted), stored before it is answered; every producer of an older epoch is fenced
    /// from then on. A producer naming its current id and epoch (KIP-360) gets the next epoch;
    /// one naming an older epoch is fenced (PRODUCER_FENCED), unless it retries a bump whose
    /// answer it lost. `fresh_id` is a producer id never used, for when one is needed
    /// ([`InitOutcome::NeedsProducerId`] otherwise).
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
                init_decision(shard, request, fresh_id, now)
            })
            .await?;
        written.stored?;
        Ok(written.answer)
    }
}

/// What an InitProducerId decides from the shard as it stands: Kafka's
/// `prepareInitProducerIdTransit`.
fn init_decision(
    shard: &TransactionShard,
    request: &InitProducerId,
    fresh_id: Option<i64>,
    now: Now,
) -> Result<Decision<InitOutcome, TxnRecord>, TxnError> {
    let id = &request.transactional_id;
    if shard.is_pending(id) {
        return Err(TxnError::ConcurrentTransactions);
    }
    let needs_id = Decision {
        answer: InitOutcome::NeedsProducerId,
        records: Vec::new(),
    };
    let current = match shard.ids.get(id) {
        Some(metadata) => metadata.clone(),
        None => {
            // A new transactional id: a producer id with no epoch yet, bumped to 0 below.
            let Some(producer_id) = fresh_id else {
                return Ok(needs_id);
            };
            shard::TxnMetadata {
                value: TxnValue {
                    producer_id,
                    previous_producer_id: -1,
                    next_producer_id: -1,
                    producer_epoch: NO_EPOCH,
                    timeout_ms: request.timeout_ms,
                    state: TxnState::Empty,
                    partitions: TxnPartitions::new(),
                    last_update_ms: now.wall_ms,
                    start_ms: -1,
                    client_transaction_version: 0,
                },
                last_producer_epoch: NO_EPOCH,
            }
        }
    };
    let value = &current.value;
    if let Some(asked) = request.current {
        // The producer names its id and epoch: it must be the current producer, or one
        // retrying the bump that replaced an exhausted producer id.
        let valid = value.producer_epoch == NO_EPOCH
            || asked.producer_id == value.producer_id
            || (asked.producer_id == value.previous_producer_id && asked.epoch >= EPOCH_EXHAUSTED);
        if !valid {
            return Err(TxnError::ProducerFenced);
        }
    }
    match value.state {
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {}
        // Markers are being written, or (until transactions can be opened) a state this
        // coordinator never enters: the client backs off and retries.
        TxnState::Ongoing
        | TxnState::PrepareCommit
        | TxnState::PrepareAbort
        | TxnState::PrepareEpochFence
        | TxnState::Dead => return Err(TxnError::ConcurrentTransactions),
    }
    let asked_epoch = request.current.map(|asked| asked.epoch);
    let (producer_id, previous_producer_id, epoch, last_epoch) = if value.producer_epoch
        >= EPOCH_EXHAUSTED
        && asked_epoch.is_none_or(|asked| asked == value.producer_epoch)
    {
        // The epoch is exhausted: a new producer id, at epoch 0.
        let Some(producer_id) = fresh_id else {
            return Ok(needs_id);
        };
        let last_epoch = if asked_epoch.is_some() {
            value.producer_epoch
        } else {
            NO_EPOCH
        };
        (producer_id, value.producer_id, 0, last_epoch)
    } else if value.producer_epoch >= EPOCH_EXHAUSTED {
        return Err(TxnError::ProducerFenced);
    } else {
        let bumped = value.producer_epoch + 1;
        match asked_epoch {
            None => (
                value.producer_id,
                value.previous_producer_id,
                bumped,
                NO_EPOCH,
            ),
            Some(asked) if value.producer_epoch == NO_EPOCH || asked == value.producer_epoch => (
                value.producer_id,
                value.previous_producer_id,
                bumped,
                value.producer_epoch,
            ),
            // A retry of a bump whose answer was lost: the same answer again.
            Some(asked) if asked == current.last_producer_epoch => {
                return Ok(Decision {
                    answer: InitOutcome::Ready(ProducerIdAndEpoch {
                        producer_id: value.producer_id,
                        epoch: value.producer_epoch,
                    }),
                    records: Vec::new(),
                });
            }
            Some(_) => return Err(TxnError::ProducerFenced),
        }
    };
    let record = TxnRecord {
        transactional_id: id.clone(),
        value: Some(TxnValue {
            producer_id,
            previous_producer_id,
            next_producer_id: -1,
            producer_epoch: epoch,
            timeout_ms: request.timeout_ms,
            state: TxnState::Empty,
            partitions: TxnPartitions::new(),
            last_update_ms: now.wall_ms,
            start_ms: -1,
            client_transaction_version: value.client_transaction_version,
        }),
        last_producer_epoch: last_epoch,
    };
    Ok(Decision {
        answer: InitOutcome::Ready(ProducerIdAndEpoch { producer_id, epoch }),
        records: vec![record],
    })
}
