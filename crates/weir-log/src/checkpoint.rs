//! Small per-partition state files written atomically: the recovery checkpoint, the leader
//! epoch cache and the producer-state snapshot.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::producer_state::ProducerStateTable;
use crate::LogError;
use weir_storage::Storage;

/// File holding [`RecoveryCheckpoint`].
pub const RECOVERY_CHECKPOINT_FILE: &str = "recovery-checkpoint.json";
/// File holding the leader epoch cache.
pub const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint.json";
/// File holding [`ProducerSnapshot`].
pub const PRODUCER_SNAPSHOT_FILE: &str = "producer-state.json";
/// Present only after a clean close: the next open may skip the recovery scan.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";

/// Where recovery may start, and where the log starts after retention.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct RecoveryCheckpoint {
    /// Every batch below this offset was fsynced and validated.
    pub recovery_point: i64,
    /// The first offset still retained.
    pub log_start_offset: i64,
    /// Compacted logs: everything below this offset has been cleaned.
    #[serde(default)]
    pub first_dirty_offset: i64,
}

/// Producer states as of `offset` (they reflect every batch below it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProducerSnapshot {
    /// The log end offset when the snapshot was taken.
    pub offset: i64,
    /// The states.
    pub producers: ProducerStateTable,
}

/// One leader epoch and the first offset written under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: i32,
    /// First offset appended in that epoch.
    pub start_offset: i64,
}

/// Reads a JSON state file; `None` when it is missing or unreadable (then it is rebuilt).
pub fn read_json<T: DeserializeOwned>(storage: &dyn Storage, path: &Path) -> Option<T> {
    let bytes = storage.read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(target: "weir::log", path = %path.display(), %error, "ignoring unreadable state file");
            None
        }
    }
}

/// Writes a JSON state file atomically and durably.
pub fn write_json<T: Serialize>(
    storage: &dyn Storage,
    path: &Path,
    value: &T,
) -> Result<(), LogError> {
    let bytes = serde_json::to_vec(value).map_err(|e| LogError::Io(std::io::Error::other(e)))?;
    storage.write_atomic(path, &bytes)?;
    Ok(())
}
