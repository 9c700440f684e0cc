//! What each transaction request decides from a shard as it stands: the answer and the
//! records that make it so (Kafka's `TransactionCoordinator` and `TransactionMetadata`
//! transitions), applied by the runtime once durable.

use weir_clock::Now;

use super::records::{TxnPartitions, TxnValue};
use super::shard::{TransactionShard, TxnMetadata, TxnRecord};
use super::state::TxnState;
use super::{
    EndOutcome, EndTxn, InitOutcome, InitProducerId, ProducerIdAndEpoch, TxnError, TxnMarkers,
    EPOCH_EXHAUSTED, NO_EPOCH,
};
use crate::runtime::Decision;

/// What an InitProducerId decides from the shard as it stands: Kafka's
/// `prepareInitProducerIdTransit`.
pub(super) fn init(
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
            TxnMetadata {
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
        // The older producer left a transaction open: it is aborted at the next epoch, which
        // fences that producer on every partition the abort marker reaches; this producer is
        // told to retry, and its retry bumps the epoch again once the abort is complete.
        TxnState::Ongoing => {
            let fenced = value.producer_epoch.saturating_add(1);
            let record = TxnRecord {
                transactional_id: id.clone(),
                value: Some(TxnValue {
                    producer_epoch: fenced,
                    state: TxnState::PrepareAbort,
                    last_update_ms: now.wall_ms,
                    ..value.clone()
                }),
                last_producer_epoch: NO_EPOCH,
            };
            return Ok(Decision {
                answer: InitOutcome::Aborting(TxnMarkers {
                    transactional_id: id.clone(),
                    producer_id: value.producer_id,
                    producer_epoch: fenced,
                    commit: false,
                    partitions: value.partitions.clone(),
                }),
                records: vec![record],
            });
        }
        // Markers are being written: the client backs off and retries.
        TxnState::PrepareCommit
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

/// The transactional id's metadata, if `producer` is its current producer: Kafka's checks
/// for AddPartitionsToTxn and EndTxn (transaction protocol version 1: the epoch must be the
/// current one).
fn current_producer<'a>(
    shard: &'a TransactionShard,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
) -> Result<&'a TxnMetadata, TxnError> {
    if transactional_id.is_empty() {
        return Err(TxnError::InvalidRequest);
    }
    let metadata = shard
        .ids
        .get(transactional_id)
        .ok_or(TxnError::InvalidProducerIdMapping)?;
    if metadata.value.producer_id != producer.producer_id {
        return Err(other_producer(&metadata.value, producer.producer_id));
    }
    if metadata.value.producer_epoch != producer.epoch {
        return Err(TxnError::ProducerFenced);
    }
    if shard.is_pending(transactional_id) {
        return Err(TxnError::ConcurrentTransactions);
    }
    Ok(metadata)
}

/// The refusal of a request naming `producer_id` when `value`'s current producer is another:
/// CONCURRENT_TRANSACTIONS for the new id an exhausted epoch's EndTxn answered with, until its
/// markers are written and it is stored (its producer waits, as for any transaction being
/// completed), else INVALID_PRODUCER_ID_MAPPING.
pub(super) fn other_producer(value: &TxnValue, producer_id: i64) -> TxnError {
    let rotating = value.next_producer_id == producer_id
        && matches!(
            value.state,
            TxnState::PrepareCommit | TxnState::PrepareAbort
        );
    match rotating {
        true => TxnError::ConcurrentTransactions,
        false => TxnError::InvalidProducerIdMapping,
    }
}

/// A record of `metadata`'s transactional id moving to `state` with `partitions`.
fn transition(
    transactional_id: &str,
    metadata: &TxnMetadata,
    state: TxnState,
    partitions: TxnPartitions,
    start_ms: i64,
    now: Now,
) -> TxnRecord {
    TxnRecord {
        transactional_id: transactional_id.to_string(),
        value: Some(TxnValue {
            state,
            partitions,
            start_ms,
            last_update_ms: now.wall_ms,
            ..metadata.value.clone()
        }),
        last_producer_epoch: metadata.last_producer_epoch,
    }
}

/// AddPartitionsToTxn: the partitions join the producer's transaction, which begins with the
/// first of them; partitions already in it store nothing.
pub(super) fn add_partitions(
    shard: &TransactionShard,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &TxnPartitions,
    now: Now,
) -> Result<Decision<(), TxnRecord>, TxnError> {
    let metadata = current_producer(shard, transactional_id, producer)?;
    let value = &metadata.value;
    let start_ms = match value.state {
        TxnState::Ongoing => value.start_ms,
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => now.wall_ms,
        // Its last transaction is being completed: the client retries.
        TxnState::PrepareCommit
        | TxnState::PrepareAbort
        | TxnState::PrepareEpochFence
        | TxnState::Dead => return Err(TxnError::ConcurrentTransactions),
    };
    let known = value.state == TxnState::Ongoing
        && partitions.iter().all(|(topic, added)| {
            value
                .partitions
                .get(topic)
                .is_some_and(|held| added.is_subset(held))
        });
    if known {
        return Ok(Decision {
            answer: (),
            records: Vec::new(),
        });
    }
    let mut all = if value.state == TxnState::Ongoing {
        value.partitions.clone()
    } else {
        TxnPartitions::new()
    };
    for (topic, added) in partitions {
        all.entry(topic.clone())
            .or_default()
            .extend(added.iter().copied());
    }
    let record = transition(
        transactional_id,
        metadata,
        TxnState::Ongoing,
        all,
        start_ms,
        now,
    );
    Ok(Decision {
        answer: (),
        records: vec![record],
    })
}

/// EndTxn: an open transaction is prepared to commit or abort (stored before the answer),
/// and the markers to write are returned; a retry of an end already made is answered as it
/// was; ending what was not begun, or the other way than it is ending, is INVALID_TXN_STATE.
pub(super) fn end(
    shard: &TransactionShard,
    request: &EndTxn,
    now: Now,
) -> Result<Decision<EndOutcome, TxnRecord>, TxnError> {
    let metadata = current_producer(shard, &request.transactional_id, request.producer)?;
    let value = &metadata.value;
    let nothing = |markers| {
        Ok(Decision {
            answer: EndOutcome::Ended {
                markers,
                producer: request.producer,
            },
            records: Vec::new(),
        })
    };
    match (value.state, request.commit) {
        (TxnState::Ongoing, commit) => {
            let state = if commit {
                TxnState::PrepareCommit
            } else {
                TxnState::PrepareAbort
            };
            let record = transition(
                &request.transactional_id,
                metadata,
                state,
                value.partitions.clone(),
                value.start_ms,
                now,
            );
            Ok(Decision {
                answer: EndOutcome::Ended {
                    markers: Some(TxnMarkers {
                        transactional_id: request.transactional_id.clone(),
                        producer_id: value.producer_id,
                        producer_epoch: value.producer_epoch,
                        commit,
                        partitions: value.partitions.clone(),
                    }),
                    producer: request.producer,
                },
                records: vec![record],
            })
        }
        // A retry of an end that is done, or still being done (the client retries until done).
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => nothing(None),
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            Err(TxnError::ConcurrentTransactions)
        }
        (TxnState::PrepareEpochFence | TxnState::Dead, _) => Err(TxnError::ConcurrentTransactions),
        _ => Err(TxnError::InvalidTxnState),
    }
}

/// The transaction protocol version Kafka records for a transaction ended with an epoch bump.
const TRANSACTION_VERSION_2: i16 = 2;

/// EndTxn under transaction protocol version 2 (KIP-890, Kafka's table in
/// `TransactionCoordinator.endTransaction`): preparing bumps the producer's epoch (a new
/// producer id at epoch 0 once it is exhausted, taking effect on completion), so a late
/// EndTxn of an earlier transaction can never end a later one. A retry names the epoch before
/// the bump (or, after a new producer id, the exhausted epoch of the previous id) and is
/// answered as done once the transaction is complete (the bumped epoch waits while the
/// markers are written); an abort of no transaction (Empty, or
/// one already complete) prepares an abort of nothing, which bumps the epoch too.
pub(super) fn end_bumping(
    shard: &TransactionShard,
    request: &EndTxn,
    fresh_id: Option<i64>,
    now: Now,
) -> Result<Decision<EndOutcome, TxnRecord>, TxnError> {
    let id = &request.transactional_id;
    if id.is_empty() {
        return Err(TxnError::InvalidRequest);
    }
    let metadata = shard
        .ids
        .get(id)
        .ok_or(TxnError::InvalidProducerIdMapping)?;
    let value = &metadata.value;
    let asked = request.producer;
    let retry_after_new_id = value.previous_producer_id == asked.producer_id
        && asked.epoch == EPOCH_EXHAUSTED
        && value.producer_epoch == 0;
    let retry_after_bump = asked.epoch.checked_add(1) == Some(value.producer_epoch);
    let preparing = matches!(
        value.state,
        TxnState::PrepareCommit | TxnState::PrepareAbort
    );
    // The producer already holds the bumped epoch while the markers are written: it waits
    // (CONCURRENT_TRANSACTIONS), as Kafka 4.4 answers.
    if preparing && value.producer_id == asked.producer_id && asked.epoch == value.producer_epoch {
        return Err(TxnError::ConcurrentTransactions);
    }
    let valid_epoch = match value.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => retry_after_bump,
        TxnState::CompleteCommit | TxnState::CompleteAbort => {
            retry_after_bump || retry_after_new_id || asked.epoch == value.producer_epoch
        }
        _ => asked.epoch == value.producer_epoch,
    };
    if value.producer_id != asked.producer_id && !retry_after_new_id {
        return Err(TxnError::InvalidProducerIdMapping);
    }
    if !valid_epoch {
        return Err(TxnError::ProducerFenced);
    }
    if shard.is_pending(id) {
        return Err(TxnError::ConcurrentTransactions);
    }
    let is_retry = retry_after_bump || retry_after_new_id;
    let done = || {
        Ok(Decision {
            answer: EndOutcome::Ended {
                markers: None,
                producer: ProducerIdAndEpoch {
                    producer_id: value.producer_id,
                    epoch: value.producer_epoch,
                },
            },
            records: Vec::new(),
        })
    };
    let prepare = |commit: bool, nothing_added: bool| {
        bump_and_prepare(id, metadata, commit, nothing_added, fresh_id, now)
    };
    match (value.state, request.commit) {
        (TxnState::Ongoing, commit) => prepare(commit, false),
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if is_retry => done(),
        (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false)
            if !is_retry =>
        {
            prepare(false, true)
        }
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            Err(TxnError::ConcurrentTransactions)
        }
        (TxnState::PrepareEpochFence | TxnState::Dead, _) => Err(TxnError::ConcurrentTransactions),
        _ => Err(TxnError::InvalidTxnState),
    }
}

/// The record preparing `metadata`'s transaction to commit or abort at the next epoch (a new
/// producer id once the epoch is exhausted), with its markers and the producer's next id and
/// epoch; an abort with `nothing_added` ends a transaction that holds no partition.
fn bump_and_prepare(
    transactional_id: &str,
    metadata: &TxnMetadata,
    commit: bool,
    nothing_added: bool,
    fresh_id: Option<i64>,
    now: Now,
) -> Result<Decision<EndOutcome, TxnRecord>, TxnError> {
    let value = &metadata.value;
    let (next_producer_id, next) = if value.producer_epoch >= EPOCH_EXHAUSTED {
        let Some(fresh) = fresh_id else {
            return Ok(Decision {
                answer: EndOutcome::NeedsProducerId,
                records: Vec::new(),
            });
        };
        let next = ProducerIdAndEpoch {
            producer_id: fresh,
            epoch: 0,
        };
        (fresh, next)
    } else {
        let next = ProducerIdAndEpoch {
            producer_id: value.producer_id,
            epoch: value.producer_epoch + 1,
        };
        (-1, next)
    };
    let state = if commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    let (partitions, start_ms) = if nothing_added {
        (TxnPartitions::new(), now.wall_ms)
    } else {
        (value.partitions.clone(), value.start_ms)
    };
    let bumped = value.producer_epoch.saturating_add(1);
    let record = TxnRecord {
        transactional_id: transactional_id.to_string(),
        value: Some(TxnValue {
            state,
            producer_epoch: bumped,
            next_producer_id,
            partitions: partitions.clone(),
            start_ms,
            last_update_ms: now.wall_ms,
            client_transaction_version: TRANSACTION_VERSION_2,
            ..value.clone()
        }),
        last_producer_epoch: value.producer_epoch,
    };
    Ok(Decision {
        answer: EndOutcome::Ended {
            markers: Some(TxnMarkers {
                transactional_id: transactional_id.to_string(),
                producer_id: value.producer_id,
                producer_epoch: bumped,
                commit,
                partitions,
            }),
            producer: next,
        },
        records: vec![record],
    })
}

/// Every marker of a prepared transaction is written: it is complete. Nothing is stored when
/// the transactional id moved on meanwhile (a newer producer, or another coordinator).
pub(super) fn complete(
    shard: &TransactionShard,
    markers: &TxnMarkers,
    now: Now,
) -> Result<Decision<bool, TxnRecord>, TxnError> {
    let Some(metadata) = shard.ids.get(&markers.transactional_id) else {
        return Ok(Decision {
            answer: false,
            records: Vec::new(),
        });
    };
    let value = &metadata.value;
    let prepared = if markers.commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    if value.producer_id != markers.producer_id
        || value.producer_epoch != markers.producer_epoch
        || value.state != prepared
    {
        return Ok(Decision {
            answer: false,
            records: Vec::new(),
        });
    }
    if shard.is_pending(&markers.transactional_id) {
        return Err(TxnError::ConcurrentTransactions);
    }
    let state = if markers.commit {
        TxnState::CompleteCommit
    } else {
        TxnState::CompleteAbort
    };
    let mut record = transition(
        &markers.transactional_id,
        metadata,
        state,
        TxnPartitions::new(),
        value.start_ms,
        now,
    );
    // An exhausted epoch was bumped to a new producer id (transaction protocol version 2):
    // the producer goes on with it, at epoch 0.
    if let Some(completed) = record
        .value
        .as_mut()
        .filter(|_| value.next_producer_id != -1)
    {
        completed.previous_producer_id = value.producer_id;
        completed.producer_id = value.next_producer_id;
        completed.next_producer_id = -1;
        completed.producer_epoch = 0;
    }
    Ok(Decision {
        answer: true,
        records: vec![record],
    })
}
