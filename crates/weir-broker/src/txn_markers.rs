//! Transaction markers as the broker writes them ([`Marker`], [`AppendedMarker`]) and the
//! transactions whose markers are being written ([`MarkersInFlight`]); `marker_writer` writes
//! them.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::ResponseError;
use weir_coordinator::transaction::TxnMarkers;
use weir_log::batch::TxnResult;
use weir_log::AppendInfo;

use crate::partition::{Partition, ReplicationWait};

/// Longest a marker waits for the in-sync replicas of its partition.
const MARKER_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a WriteTxnMarkers to another broker may take: its wait for the in-sync replicas,
/// and the trip.
pub(crate) const REMOTE_MARKER_TIMEOUT: Duration = Duration::from_secs(35);

/// One marker: whose transaction, and how it ended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marker {
    /// The producer whose transaction it ends.
    pub(crate) producer_id: i64,
    /// The producer's epoch: a marker of an older epoch than the partition knows is refused.
    pub(crate) producer_epoch: i16,
    /// Commit or abort.
    pub(crate) result: TxnResult,
    /// The epoch of the coordinator that wrote it.
    pub(crate) coordinator_epoch: i32,
}

/// A marker in a partition's log, not yet as safe as an `acks=all` write.
pub(crate) struct AppendedMarker {
    /// The partition it was appended to.
    pub(crate) partition: Arc<Partition>,
    /// Where, and at which leader epoch, it was appended.
    pub(crate) appended: AppendInfo,
    /// Whether the topic's flush policy fsyncs before an `acks=all` answer.
    pub(crate) sync: bool,
    /// The partition's `min.insync.replicas` when it was appended.
    pub(crate) min_insync_replicas: usize,
}

impl AppendedMarker {
    /// Waits until the marker is fsynced (as the topic's flush policy says) and held by every
    /// in-sync replica.
    pub(crate) async fn acknowledged(self) -> Result<(), ResponseError> {
        let deadline = tokio::time::Instant::now() + MARKER_WRITE_TIMEOUT;
        match self
            .partition
            .wait_all_acked(
                &self.appended,
                self.sync,
                self.min_insync_replicas,
                deadline,
            )
            .await
        {
            ReplicationWait::Replicated => Ok(()),
            ReplicationWait::NotLeader => Err(ResponseError::NotLeaderOrFollower),
            ReplicationWait::TimedOut => Err(ResponseError::RequestTimedOut),
            ReplicationWait::BelowMinIsr { .. } => Err(ResponseError::NotEnoughReplicasAfterAppend),
        }
    }
}

/// The prepared transactions whose markers a task is writing now, so each has one writer.
#[derive(Default)]
pub(crate) struct MarkersInFlight {
    writing: std::sync::Mutex<HashSet<(String, i64, i16)>>,
}

impl MarkersInFlight {
    /// Claims `markers` for the caller: false when another task writes them already.
    pub(crate) fn claim(&self, markers: &TxnMarkers) -> bool {
        self.lock().insert(Self::key(markers))
    }

    /// The task writing `markers` ended.
    pub(crate) fn release(&self, markers: &TxnMarkers) {
        self.lock().remove(&Self::key(markers));
    }

    fn key(markers: &TxnMarkers) -> (String, i64, i16) {
        (
            markers.transactional_id.clone(),
            markers.producer_id,
            markers.producer_epoch,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, i64, i16)>> {
        self.writing.lock().unwrap_or_else(|e| e.into_inner())
    }
}
