//! An append-only file of records, each fsynced before its append returns: the quorum's Raft
//! log, and the single-node metadata log of earlier versions (read once to migrate it).

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use weir_storage::{Storage, StorageFile};

/// Longest encoded record accepted when replaying; a larger length is a torn or corrupt record.
const RECORD_BYTES_MAX: u32 = 16 * 1024 * 1024;
/// Bytes before each record's JSON: length (u32) and CRC-32C (u32).
const RECORD_HEADER_BYTES: usize = 8;
/// How far past a bad record replay looks for an intact one before calling the rest a torn
/// tail: records are small, so the record after a damaged one starts well within this.
const RESYNC_SCAN_BYTES: usize = 64 * 1024;

/// Why a record file refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordFileError {
    /// The record was not appended: the write failed (a full disk) and was undone, so the file
    /// is exactly as before and later records follow the last good one.
    #[error("record not written: {0}")]
    NotAppended(std::io::Error),
    /// The file may no longer be what was acknowledged (an fsync failed, or a failed write
    /// could not be undone): the process must stop; the next start replays what is durable.
    #[error("record file failed: {0}")]
    Fatal(std::io::Error),
    /// Replay found a damaged record with intact records after it: not a torn tail but
    /// corruption, which is never silently dropped.
    #[error("record file is corrupt at byte {position}: {reason}; it is left untouched")]
    Corrupt {
        /// Byte position of the damaged record.
        position: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// Records of type `T` in one file: `[u32 length][u32 crc32c][JSON]` each, fsynced on
/// append, through the storage layer (so power-loss tests cover it).
pub struct RecordFile<T> {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    /// Bytes of whole, good records: where the next record starts.
    length: u64,
    records: PhantomData<fn(T) -> T>,
}

impl<T: Serialize + DeserializeOwned> RecordFile<T> {
    /// Opens or creates the file at `path`.
    pub fn open(storage: Arc<dyn Storage>, path: &Path) -> std::io::Result<RecordFile<T>> {
        let file = storage.open(path, true)?;
        if let Some(dir) = path.parent() {
            storage.sync_dir(dir)?;
        }
        let length = file.len()?;
        Ok(RecordFile {
            storage,
            path: path.to_path_buf(),
            file,
            length,
            records: PhantomData,
        })
    }

    /// Makes `record` durable; records are replayed in append order. A failed write is undone.
    pub fn append(&mut self, record: &T) -> Result<(), RecordFileError> {
        let framed = frame(record).map_err(RecordFileError::NotAppended)?;
        if let Err(error) = self.file.append(&[&framed]) {
            // Cut back to the last good record before anything else is appended.
            return match self.file.truncate(self.length) {
                Ok(()) => Err(RecordFileError::NotAppended(error)),
                Err(undo) => Err(RecordFileError::Fatal(undo)),
            };
        }
        // After a failed fsync nothing is known about what reached the disk.
        self.file.sync().map_err(RecordFileError::Fatal)?;
        self.length += framed.len() as u64;
        Ok(())
    }

    /// Replaces the whole file with `records`, atomically (a new file is written, synced and
    /// renamed over the old one): how a log sheds what it no longer needs.
    pub fn rewrite(&mut self, records: &[T]) -> Result<(), RecordFileError> {
        let mut bytes = Vec::new();
        for record in records {
            bytes.extend(frame(record).map_err(RecordFileError::NotAppended)?);
        }
        // On failure the old file is still in place and still open.
        self.storage
            .write_atomic(&self.path, &bytes)
            .map_err(RecordFileError::NotAppended)?;
        self.file = self
            .storage
            .open(&self.path, false)
            .map_err(RecordFileError::Fatal)?;
        self.length = bytes.len() as u64;
        Ok(())
    }

    /// Every record appended so far, oldest first; cuts a torn tail.
    pub fn replay(&mut self) -> Result<Vec<T>, RecordFileError> {
        let raw = self
            .storage
            .read(&self.path)
            .map_err(RecordFileError::Fatal)?;
        let mut records = Vec::new();
        let mut position = 0usize;
        while position < raw.len() {
            match parse_at::<T>(&raw, position) {
                Parsed::Record(record, next) => {
                    records.push(record);
                    position = next;
                }
                bad @ (Parsed::Torn | Parsed::Damaged(_)) => {
                    let reason = match bad {
                        Parsed::Damaged(reason) => reason,
                        _ => "its length runs past the end of the file".to_string(),
                    };
                    // A crash mid-append leaves a torn last record (possibly followed by the
                    // zeros of a preallocated block). An intact record after the bad one means
                    // corruption instead, which must not silently drop what follows.
                    let scan_end = raw.len().min(position + 1 + RESYNC_SCAN_BYTES);
                    if let Some(intact) = (position + 1..scan_end)
                        .find(|&at| matches!(parse_at::<T>(&raw, at), Parsed::Record(..)))
                    {
                        return Err(RecordFileError::Corrupt {
                            position: position as u64,
                            reason: format!(
                                "{reason}, and an intact record follows at byte {intact}"
                            ),
                        });
                    }
                    break;
                }
            }
        }
        if position < raw.len() {
            tracing::warn!(target: "weir::controller", path = %self.path.display(), bytes = raw.len() - position, "cutting a torn tail");
            self.file
                .truncate(position as u64)
                .and_then(|()| self.file.sync())
                .map_err(RecordFileError::Fatal)?;
        }
        self.length = position as u64;
        Ok(records)
    }
}

/// `record` with its length and CRC-32C in front.
fn frame<T: Serialize>(record: &T) -> std::io::Result<Vec<u8>> {
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let mut framed = Vec::with_capacity(RECORD_HEADER_BYTES + json.len());
    framed.extend_from_slice(&(json.len() as u32).to_be_bytes());
    framed.extend_from_slice(&crc32c::crc32c(&json).to_be_bytes());
    framed.extend_from_slice(&json);
    Ok(framed)
}

/// One record parsed at `position`, or why none could be.
enum Parsed<T> {
    Record(T, usize),
    /// The record runs past the end of the file.
    Torn,
    /// A complete record that fails its CRC or does not decode.
    Damaged(String),
}

fn parse_at<T: DeserializeOwned>(raw: &[u8], position: usize) -> Parsed<T> {
    let Some(header) = raw.get(position..position + RECORD_HEADER_BYTES) else {
        return Parsed::Torn;
    };
    let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if length > RECORD_BYTES_MAX {
        return Parsed::Damaged(format!("record length {length} is implausible"));
    }
    let start = position + RECORD_HEADER_BYTES;
    let Some(body) = raw.get(start..start + length as usize) else {
        return Parsed::Torn;
    };
    if crc32c::crc32c(body) != crc {
        return Parsed::Damaged("CRC-32C mismatch".into());
    }
    match serde_json::from_slice(body) {
        Ok(record) => Parsed::Record(record, start + length as usize),
        Err(error) => Parsed::Damaged(format!("undecodable record: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_metadata::MetadataCommand;
    use weir_storage::MemoryStorage;

    fn command(i: i64) -> MetadataCommand {
        MetadataCommand::AllocateProducerIds {
            first: i * 1000,
            count: 1000,
        }
    }

    fn open(disk: &MemoryStorage) -> RecordFile<MetadataCommand> {
        RecordFile::open(Arc::new(disk.clone()), Path::new("/meta/metadata.log")).expect("open")
    }

    #[test]
    fn a_failed_append_is_undone_and_later_commands_follow_the_last_good_one() {
        let disk = MemoryStorage::new();
        let mut log = open(&disk);
        log.append(&command(0)).expect("append");
        disk.set_capacity(Some(disk.used_bytes() + 10));
        assert!(matches!(
            log.append(&command(1)),
            Err(RecordFileError::NotAppended(_))
        ));
        disk.set_capacity(None);
        log.append(&command(2)).expect("append after space returns");
        disk.power_loss();
        let replayed = open(&disk).replay().expect("replay");
        assert_eq!(replayed, vec![command(0), command(2)]);
    }

    #[test]
    fn a_rewrite_replaces_the_records_atomically() {
        let disk = MemoryStorage::new();
        let mut log = open(&disk);
        for i in 0..5 {
            log.append(&command(i)).expect("append");
        }
        log.rewrite(&[command(3), command(4)]).expect("rewrite");
        log.append(&command(5)).expect("append after the rewrite");
        disk.power_loss();
        let replayed = open(&disk).replay().expect("replay");
        assert_eq!(replayed, vec![command(3), command(4), command(5)]);
        disk.set_capacity(Some(disk.used_bytes() + 10));
        assert!(
            log.rewrite(&vec![command(9); 20]).is_err(),
            "no space for the new file"
        );
        disk.set_capacity(None);
        assert_eq!(
            open(&disk).replay().expect("replay").len(),
            3,
            "the old file stands"
        );
    }

    #[test]
    fn a_torn_tail_is_cut_and_corruption_refuses_to_start() {
        let disk = MemoryStorage::new();
        let mut log = open(&disk);
        for i in 0..3 {
            log.append(&command(i)).expect("append");
        }
        let path = Path::new("/meta/metadata.log");
        let whole = disk.read(path).expect("read");
        disk.plant(path, &whole[..whole.len() - 5]);
        let mut reopened = open(&disk);
        assert_eq!(
            reopened.replay().expect("torn tail"),
            vec![command(0), command(1)]
        );
        reopened.append(&command(9)).expect("append after the cut");
        assert_eq!(open(&disk).replay().expect("replay").len(), 3);

        let intact = disk.read(path).expect("read");
        for (at, what) in [
            (12, "inside the first record's JSON"),
            (1, "the first record's length"),
        ] {
            let mut damaged = intact.clone();
            damaged[at] ^= 0xff;
            disk.plant(path, &damaged);
            assert!(
                matches!(
                    open(&disk).replay(),
                    Err(RecordFileError::Corrupt { position: 0, .. })
                ),
                "{what}"
            );
            assert_eq!(disk.read(path).expect("read"), damaged, "left untouched");
        }
    }
}
