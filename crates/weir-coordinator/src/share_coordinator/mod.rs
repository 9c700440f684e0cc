//! The share coordinator (KIP-932): the durable state of every share-partition (a share
//! group's view of one partition: its start offset and the delivery state and count of the
//! records in flight), kept in `__share_group_state` in Kafka's record formats ([`records`]),
//! one [`ShareStateShard`](shard::ShareStateShard) per partition this broker leads, on the
//! coordinator runtime. A share-partition belongs to partition
//! `abs(javaHash("group:topicId:partition")) % partitions`, and its coordinator is that
//! partition's leader.
//!
//! The partition leaders holding share-partitions in memory are its clients, through Kafka's
//! share-group state APIs: InitializeShareGroupState, ReadShareGroupState (which fences the
//! leaders of older leader epochs), WriteShareGroupState, DeleteShareGroupState and
//! ReadShareGroupStateSummary. Every write is stored before it is answered. Kafka writes a
//! write's changed batches as a `ShareUpdate` record and prunes the topic with DeleteRecords;
//! here each write stores the merged state as a `ShareSnapshot` (a share-partition's in-flight
//! window is small), so the topic is compacted like the other coordinators' and a restart
//! loads one record per share-partition. A topic Kafka wrote loads too: its updates are merged
//! over their snapshots.

pub mod records;
mod shard;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use weir_clock::{Clock, Now, SystemClock};

use crate::runtime::{CoordinatorLog, Decision, Runtime, RuntimeError, TopicRuntime};
use crate::share_partition::RecordState;
use records::{PersistedBatch, SharePartitionKey, ShareRecord, ShareSnapshot, ShareValue};
use shard::{overlay, ShareStateShard};

/// State batches one share-partition's state holds at most: about 20 bytes each, so a record
/// stays far below `__share_group_state`'s largest. A leader's in-flight window
/// (`group.share.partition.max.record.locks`, at most 10,000 records) never needs more.
pub const STATE_BATCHES_MAX: usize = 20_000;

/// No leader epoch (a read or write that does not fence).
const NO_EPOCH: i32 = -1;

/// Why a share-state request failed; each maps to the Kafka error of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShareStateError {
    /// `__share_group_state` is not there yet, or a write to it failed: try again.
    #[error("the share coordinator is not available")]
    CoordinatorNotAvailable,
    /// Another broker leads the share-partition's partition: find the coordinator again.
    #[error("this broker is not the share-partition's coordinator")]
    NotCoordinator,
    /// The share-partition's partition is still loading, or another write for it is under way.
    #[error("the share coordinator is loading the share-partition's partition")]
    CoordinatorLoadInProgress,
    /// The state was read or written by the leader of a newer leader epoch.
    #[error("the share-partition's state belongs to a newer leader epoch")]
    FencedLeaderEpoch,
    /// The state was initialized again at a newer state epoch.
    #[error("the share-partition's state has a newer state epoch")]
    FencedStateEpoch,
    /// A write to a share-partition whose state was never initialized.
    #[error("the share-partition's state is not initialized")]
    UnknownTopicOrPartition,
    /// A batch whose last offset is before its first, a negative offset, or more state than a
    /// share-partition holds.
    #[error("invalid share-partition state")]
    InvalidRequest,
}

impl From<RuntimeError> for ShareStateError {
    fn from(error: RuntimeError) -> ShareStateError {
        match error {
            RuntimeError::NotAvailable => ShareStateError::CoordinatorNotAvailable,
            RuntimeError::NotCoordinator | RuntimeError::CoordinatorFenced => {
                ShareStateError::NotCoordinator
            }
            RuntimeError::LoadInProgress => ShareStateError::CoordinatorLoadInProgress,
            RuntimeError::TooLarge => ShareStateError::InvalidRequest,
            // Share state is never written in a transaction.
            RuntimeError::ProducerFenced | RuntimeError::NotInTransaction => {
                ShareStateError::CoordinatorNotAvailable
            }
        }
    }
}

/// A share-partition's state as ReadShareGroupState answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistedState {
    /// The state epoch (0 for a share-partition never initialized).
    pub state_epoch: i32,
    /// The start offset, or -1: never initialized (the leader starts it at
    /// `share.auto.offset.reset`).
    pub start_offset: i64,
    /// The records in flight, in offset order.
    pub batches: Vec<PersistedBatch>,
}

/// A share-partition's state as ReadShareGroupStateSummary answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSummary {
    /// The state epoch (0 when never initialized).
    pub state_epoch: i32,
    /// The leader epoch of its last reader or writer (-1 when none).
    pub leader_epoch: i32,
    /// The start offset, or -1 when never initialized.
    pub start_offset: i64,
    /// Offsets from the start whose delivery is complete, or -1.
    pub delivery_complete_count: i32,
}

/// A WriteShareGroupState for one share-partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    /// The writer's state epoch: older than the stored one is fenced.
    pub state_epoch: i32,
    /// The writer's leader epoch, or -1: older than the stored one is fenced.
    pub leader_epoch: i32,
    /// The new start offset, or -1 (unchanged).
    pub start_offset: i64,
    /// The batches that changed (laid over the stored ones; the coordinator counts the
    /// delivery-complete offsets of the result).
    pub batches: Vec<PersistedBatch>,
}

/// The share coordinator of this broker.
pub struct ShareCoordinator {
    runtime: Arc<Runtime<ShareStateShard>>,
}

impl ShareCoordinator {
    /// A coordinator with no partitions yet: requests get COORDINATOR_NOT_AVAILABLE until its
    /// runtime is started.
    pub fn new(log: Arc<dyn CoordinatorLog>) -> Self {
        ShareCoordinator::with_clock(log, Arc::new(SystemClock))
    }

    /// [`ShareCoordinator::new`] reading the time from `clock`.
    pub fn with_clock(log: Arc<dyn CoordinatorLog>, clock: Arc<dyn Clock>) -> Self {
        ShareCoordinator {
            runtime: Arc::new(Runtime::new(log, clock, |_: Now| {
                ShareStateShard::default()
            })),
        }
    }

    /// The runtime of `__share_group_state`, which the broker starts, loads and unloads as
    /// the topic's leadership moves.
    pub fn topic_runtime(&self) -> Arc<dyn TopicRuntime> {
        self.runtime.clone()
    }

    /// Checks that the share-partition of `coordinator_key` can be served now (for
    /// FindCoordinator).
    pub fn check_served(&self, coordinator_key: &str) -> Result<(), ShareStateError> {
        self.runtime.lock().served_partition(coordinator_key)?;
        Ok(())
    }

    /// InitializeShareGroupState: the share-partition's state starts anew at `start_offset`
    /// with `state_epoch`, nothing in flight; refused FENCED_STATE_EPOCH when the stored
    /// state has a newer state epoch.
    pub async fn initialize(
        &self,
        key: &SharePartitionKey,
        state_epoch: i32,
        start_offset: i64,
    ) -> Result<(), ShareStateError> {
        if start_offset < 0 {
            return Err(ShareStateError::InvalidRequest);
        }
        let written = self
            .runtime
            .write(&key.coordinator_key(), |shard, now| {
                let stored = settled(shard, key)?;
                if stored.is_some_and(|state| state.state_epoch > state_epoch) {
                    return Err(ShareStateError::FencedStateEpoch);
                }
                let snapshot = ShareSnapshot {
                    snapshot_epoch: stored.map_or(0, |state| state.snapshot_epoch + 1),
                    state_epoch,
                    leader_epoch: NO_EPOCH,
                    start_offset,
                    delivery_complete_count: 0,
                    create_ms: now.wall_ms,
                    write_ms: now.wall_ms,
                    batches: Vec::new(),
                };
                Ok(store(key, snapshot, ()))
            })
            .await?;
        written.stored
    }

    /// ReadShareGroupState: the share-partition's state for the leader of `leader_epoch` (-1:
    /// any reader), which from then on fences the leaders of older epochs (the epoch is
    /// stored before the answer); an uninitialized share-partition reads start offset -1.
    pub async fn read(
        &self,
        key: &SharePartitionKey,
        leader_epoch: i32,
    ) -> Result<PersistedState, ShareStateError> {
        let written = self
            .runtime
            .write(&key.coordinator_key(), |shard, now| {
                let Some(stored) = settled(shard, key)? else {
                    let answer = PersistedState {
                        state_epoch: 0,
                        start_offset: -1,
                        batches: Vec::new(),
                    };
                    return Ok(Decision {
                        answer,
                        records: Vec::new(),
                    });
                };
                if leader_epoch != NO_EPOCH && leader_epoch < stored.leader_epoch {
                    return Err(ShareStateError::FencedLeaderEpoch);
                }
                let answer = PersistedState {
                    state_epoch: stored.state_epoch,
                    start_offset: stored.start_offset,
                    batches: stored.batches.clone(),
                };
                if leader_epoch <= stored.leader_epoch {
                    return Ok(Decision {
                        answer,
                        records: Vec::new(),
                    });
                }
                let snapshot = ShareSnapshot {
                    snapshot_epoch: stored.snapshot_epoch + 1,
                    leader_epoch,
                    write_ms: now.wall_ms,
                    ..stored.clone()
                };
                Ok(store(key, snapshot, answer))
            })
            .await?;
        written.stored?;
        Ok(written.answer)
    }

    /// WriteShareGroupState: `write`'s batches laid over the stored ones (what precedes the
    /// start offset dropped), stored before the answer. Refused FENCED_LEADER_EPOCH or
    /// FENCED_STATE_EPOCH for a writer older than the stored state, UNKNOWN_TOPIC_OR_PARTITION
    /// for a share-partition never initialized.
    pub async fn write(
        &self,
        key: &SharePartitionKey,
        write: &StateWrite,
    ) -> Result<(), ShareStateError> {
        let invalid = write.start_offset < -1
            || write.batches.len() > STATE_BATCHES_MAX
            || write
                .batches
                .iter()
                .any(|batch| batch.first_offset < 0 || batch.last_offset < batch.first_offset);
        if invalid {
            return Err(ShareStateError::InvalidRequest);
        }
        let written = self
            .runtime
            .write(&key.coordinator_key(), |shard, now| {
                let stored =
                    settled(shard, key)?.ok_or(ShareStateError::UnknownTopicOrPartition)?;
                if write.leader_epoch != NO_EPOCH && write.leader_epoch < stored.leader_epoch {
                    return Err(ShareStateError::FencedLeaderEpoch);
                }
                if write.state_epoch < stored.state_epoch {
                    return Err(ShareStateError::FencedStateEpoch);
                }
                let start_offset = match write.start_offset {
                    -1 => stored.start_offset,
                    start => start,
                };
                let batches = overlay(&stored.batches, &write.batches, start_offset);
                if batches.len() > STATE_BATCHES_MAX {
                    return Err(ShareStateError::InvalidRequest);
                }
                let snapshot = ShareSnapshot {
                    snapshot_epoch: stored.snapshot_epoch + 1,
                    state_epoch: stored.state_epoch,
                    leader_epoch: match write.leader_epoch {
                        NO_EPOCH => stored.leader_epoch,
                        epoch => epoch,
                    },
                    start_offset,
                    delivery_complete_count: complete_count(&batches),
                    create_ms: stored.create_ms,
                    write_ms: now.wall_ms,
                    batches,
                };
                Ok(store(key, snapshot, ()))
            })
            .await?;
        written.stored
    }

    /// DeleteShareGroupState: the share-partition's state is forgotten (tombstones of both
    /// its keys, so compaction removes every record of it); nothing to delete is fine.
    pub async fn delete(&self, key: &SharePartitionKey) -> Result<(), ShareStateError> {
        let written = self
            .runtime
            .write(&key.coordinator_key(), |shard, _now| {
                if settled(shard, key)?.is_none() {
                    return Ok(Decision {
                        answer: (),
                        records: Vec::new(),
                    });
                }
                let tombstone = |snapshot_key| ShareRecord {
                    key: key.clone(),
                    snapshot_key,
                    value: None,
                };
                Ok(Decision {
                    answer: (),
                    records: vec![tombstone(false), tombstone(true)],
                })
            })
            .await?;
        written.stored
    }

    /// ReadShareGroupStateSummary: the share-partition's epochs and start offset, without its
    /// batches; fences nothing.
    pub fn read_summary(&self, key: &SharePartitionKey) -> Result<StateSummary, ShareStateError> {
        let partitions = self.runtime.lock();
        let (_, shard) = partitions.served_ref(&key.coordinator_key())?;
        Ok(match shard.states.get(key) {
            Some(state) => StateSummary {
                state_epoch: state.state_epoch,
                leader_epoch: state.leader_epoch,
                start_offset: state.start_offset,
                delivery_complete_count: state.delivery_complete_count,
            },
            None => StateSummary {
                state_epoch: 0,
                leader_epoch: NO_EPOCH,
                start_offset: -1,
                delivery_complete_count: -1,
            },
        })
    }
}

/// Offsets whose delivery is complete (acknowledged or archived) in `batches`, which hold
/// nothing before the start offset: what the share-partition's lag leaves out.
fn complete_count(batches: &[PersistedBatch]) -> i32 {
    let complete: i64 = batches
        .iter()
        .filter(|b| RecordState::from_code(b.delivery_state).is_some_and(RecordState::is_terminal))
        .map(|b| b.last_offset - b.first_offset + 1)
        .sum();
    i32::try_from(complete).unwrap_or(i32::MAX)
}

/// The stored state of `key`, unless a write for it is under way (refused: the writer
/// retries, so no two writes merge into one state).
fn settled<'a>(
    shard: &'a ShareStateShard,
    key: &SharePartitionKey,
) -> Result<Option<&'a ShareSnapshot>, ShareStateError> {
    if shard.is_pending(&key.coordinator_key()) {
        return Err(ShareStateError::CoordinatorLoadInProgress);
    }
    Ok(shard.states.get(key))
}

/// The decision storing `snapshot` as `key`'s state, answered `answer` once durable.
fn store<R>(
    key: &SharePartitionKey,
    snapshot: ShareSnapshot,
    answer: R,
) -> Decision<R, ShareRecord> {
    Decision {
        answer,
        records: vec![ShareRecord {
            key: key.clone(),
            snapshot_key: true,
            value: Some(ShareValue::Snapshot(snapshot)),
        }],
    }
}
