//! Space held back for the metadata log. When partition data fills the disk, the operator's
//! way out is a metadata change (delete a topic, lower its retention), and that change must be
//! written to the metadata log first. So the quorum keeps a file of [`RESERVE_BYTES`] beside
//! its log while space allows, and gives it up the moment the log needs the room: a proposal
//! that finds the disk full, or a log append that ran out of space.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use weir_storage::Storage;

/// The reserve's size: thousands of metadata commands.
pub(super) const RESERVE_BYTES: u64 = 8 * 1024 * 1024;
/// The reserve's file, in the quorum's directory.
const RESERVE_FILE: &str = "space-reserve";

/// The reserve file of one quorum directory.
pub(super) struct SpaceReserve {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    /// Held while the file is made or given up, so the two never interleave.
    changing: Mutex<()>,
}

impl SpaceReserve {
    /// The reserve of the quorum directory `dir` (made by [`SpaceReserve::keep`]).
    pub(super) fn new(storage: Arc<dyn Storage>, dir: &Path) -> SpaceReserve {
        SpaceReserve {
            storage,
            path: dir.join(RESERVE_FILE),
            changing: Mutex::new(()),
        }
    }

    /// Makes the reserve when it is missing and the disk has room for it twice over (so
    /// making it never fills the disk itself). Returns whether it is there now.
    pub(super) fn keep(&self) -> bool {
        let _changing = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        if self.storage.exists(&self.path) {
            return true;
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        match self.storage.available_bytes(dir) {
            Ok(free) if free >= 2 * RESERVE_BYTES => {}
            _ => return false,
        }
        let zeros = vec![0u8; RESERVE_BYTES as usize];
        match self.storage.write_atomic(&self.path, &zeros) {
            Ok(()) => {
                tracing::info!(target: "weir::controller", path = %self.path.display(), bytes = RESERVE_BYTES, "space for the metadata log reserved");
                true
            }
            Err(error) => {
                tracing::debug!(target: "weir::controller", %error, "cannot reserve space for the metadata log yet");
                false
            }
        }
    }

    /// Gives the reserve up so the metadata log can be written on a full disk. Returns
    /// whether it freed anything.
    pub(super) fn release(&self, why: &str) -> bool {
        let _changing = self.changing.lock().unwrap_or_else(|e| e.into_inner());
        if !self.storage.exists(&self.path) {
            return false;
        }
        match self.storage.remove(&self.path) {
            Ok(()) => {
                tracing::warn!(target: "weir::controller", bytes = RESERVE_BYTES, why, "the disk is full: the space reserved for the metadata log is released so metadata changes (delete a topic, lower its retention) can be written; it is reserved again once space returns");
                true
            }
            Err(error) => {
                tracing::warn!(target: "weir::controller", %error, "cannot release the space reserved for the metadata log");
                false
            }
        }
    }

    /// Runs `write`; when it fails for want of space and the reserve could be released, runs
    /// it once more.
    pub(super) fn retry_released<T>(
        &self,
        mut write: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        match write() {
            Err(error)
                if weir_storage::is_resource_exhausted(&error)
                    && self.release("a metadata log write ran out of space") =>
            {
                write()
            }
            outcome => outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_storage::MemoryStorage;

    #[test]
    fn the_reserve_is_made_with_room_and_given_up_for_a_write_that_did_not_fit() {
        let storage = Arc::new(MemoryStorage::new());
        storage.set_capacity(Some(3 * RESERVE_BYTES));
        let dir = Path::new("/meta");
        storage.create_dir_all(dir).expect("dir");
        let reserve = SpaceReserve::new(storage.clone(), dir);
        assert!(reserve.keep(), "room for it twice over");
        let filler = vec![1u8; 2 * RESERVE_BYTES as usize + 1];
        let log = dir.join("log");
        let outcome = reserve.retry_released(|| storage.write_atomic(&log, &filler));
        assert!(
            outcome.is_ok(),
            "written into the released reserve: {outcome:?}"
        );
        assert!(!storage.exists(&dir.join(RESERVE_FILE)));
        assert!(!reserve.keep(), "no room for it again yet");
        storage.remove(&log).expect("space returns");
        assert!(reserve.keep());
        let fail = reserve.retry_released(|| -> io::Result<()> {
            Err(io::Error::new(io::ErrorKind::StorageFull, "full"))
        });
        assert!(fail.is_err(), "a second failure stands");
    }
}
