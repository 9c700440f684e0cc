//! The metadata log: where commands become durable before they are applied.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir_storage::{Storage, StorageFile};

use weir_metadata::MetadataCommand;

/// Longest encoded command accepted when replaying; a larger length is a torn or corrupt record.
const RECORD_BYTES_MAX: u32 = 16 * 1024 * 1024;
/// Bytes before each record's JSON: length (u32) and CRC-32C (u32).
const RECORD_HEADER_BYTES: usize = 8;
/// How far past a bad record replay looks for an intact one before calling the rest a torn
/// tail: commands are small, so the record after a damaged one starts well within this.
const RESYNC_SCAN_BYTES: usize = 64 * 1024;

/// Why the metadata log refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum MetadataLogError {
    /// The command was not appended: the write failed (a full disk) and was undone, so the log
    /// is exactly as before and later commands follow the last good record.
    #[error("metadata command not written: {0}")]
    NotAppended(std::io::Error),
    /// The log may no longer be what was acknowledged (an fsync failed, or a failed write could
    /// not be undone): the process must stop; the next start replays what is durable.
    #[error("metadata log failed: {0}")]
    Fatal(std::io::Error),
    /// Replay found a damaged record with intact records after it: not a torn tail but
    /// corruption, which is never silently dropped.
    #[error("metadata log is corrupt at byte {position}: {reason}; it is left untouched")]
    Corrupt {
        /// Byte position of the damaged record.
        position: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// A durable, ordered log of metadata commands. The single-node server uses a local file; a
/// Raft quorum implements the same contract (append returns once the command is committed).
pub trait MetadataLog: Send + 'static {
    /// Makes `command` durable; commands are replayed in append order.
    fn append(&mut self, command: &MetadataCommand) -> Result<(), MetadataLogError>;
    /// Every command appended so far, oldest first; cuts a torn tail.
    fn replay(&mut self) -> Result<Vec<MetadataCommand>, MetadataLogError>;
}

/// The metadata log in one file: records of `[u32 length][u32 crc32c][JSON]`, fsynced on
/// append, through the storage layer (so power-loss tests cover it).
pub struct FileMetadataLog {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    /// Bytes of whole, good records: where the next record starts.
    length: u64,
}

impl FileMetadataLog {
    /// Opens or creates the log file at `path`.
    pub fn open(storage: Arc<dyn Storage>, path: &Path) -> std::io::Result<FileMetadataLog> {
        let file = storage.open(path, true)?;
        if let Some(dir) = path.parent() {
            storage.sync_dir(dir)?;
        }
        let length = file.len()?;
        Ok(FileMetadataLog {
            storage,
            path: path.to_path_buf(),
            file,
            length,
        })
    }
}

/// One record parsed at `position`, or why none could be.
enum Parsed {
    Record(MetadataCommand, usize),
    /// The record runs past the end of the file.
    Torn,
    /// A complete record that fails its CRC or does not decode.
    Damaged(String),
}

fn parse_at(raw: &[u8], position: usize) -> Parsed {
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
        Ok(command) => Parsed::Record(command, start + length as usize),
        Err(error) => Parsed::Damaged(format!("undecodable command: {error}")),
    }
}

impl MetadataLog for FileMetadataLog {
    fn append(&mut self, command: &MetadataCommand) -> Result<(), MetadataLogError> {
        let json = serde_json::to_vec(command)
            .map_err(|e| MetadataLogError::NotAppended(std::io::Error::other(e)))?;
        let mut header = [0u8; RECORD_HEADER_BYTES];
        header[..4].copy_from_slice(&(json.len() as u32).to_be_bytes());
        header[4..].copy_from_slice(&crc32c::crc32c(&json).to_be_bytes());
        if let Err(error) = self.file.append(&[&header, &json]) {
            // Cut back to the last good record before anything else is appended.
            return match self.file.truncate(self.length) {
                Ok(()) => Err(MetadataLogError::NotAppended(error)),
                Err(undo) => Err(MetadataLogError::Fatal(undo)),
            };
        }
        // After a failed fsync nothing is known about what reached the disk.
        self.file.sync().map_err(MetadataLogError::Fatal)?;
        self.length += (RECORD_HEADER_BYTES + json.len()) as u64;
        Ok(())
    }

    fn replay(&mut self) -> Result<Vec<MetadataCommand>, MetadataLogError> {
        let raw = self
            .storage
            .read(&self.path)
            .map_err(MetadataLogError::Fatal)?;
        let mut commands = Vec::new();
        let mut position = 0usize;
        while position < raw.len() {
            match parse_at(&raw, position) {
                Parsed::Record(command, next) => {
                    commands.push(command);
                    position = next;
                }
                bad @ (Parsed::Torn | Parsed::Damaged(_)) => {
                    let reason = match bad {
                        Parsed::Damaged(reason) => reason,
                        _ => "its length runs past the end of the log".to_string(),
                    };
                    // A crash mid-append leaves a torn last record (possibly followed by the
                    // zeros of a preallocated block). An intact record after the bad one means
                    // corruption instead, which must not silently drop what follows.
                    let scan_end = raw.len().min(position + 1 + RESYNC_SCAN_BYTES);
                    if let Some(intact) = (position + 1..scan_end)
                        .find(|&at| matches!(parse_at(&raw, at), Parsed::Record(..)))
                    {
                        return Err(MetadataLogError::Corrupt {
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
            tracing::warn!(target: "weir::controller", bytes = raw.len() - position, "cutting the torn tail of the metadata log");
            self.file
                .truncate(position as u64)
                .and_then(|()| self.file.sync())
                .map_err(MetadataLogError::Fatal)?;
        }
        self.length = position as u64;
        Ok(commands)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_storage::MemoryStorage;

    fn command(i: i64) -> MetadataCommand {
        MetadataCommand::AllocateProducerIds {
            first: i * 1000,
            count: 1000,
        }
    }

    fn open(disk: &MemoryStorage) -> FileMetadataLog {
        FileMetadataLog::open(Arc::new(disk.clone()), Path::new("/meta/metadata.log"))
            .expect("open")
    }

    #[test]
    fn a_failed_append_is_undone_and_later_commands_follow_the_last_good_one() {
        let disk = MemoryStorage::new();
        let mut log = open(&disk);
        log.append(&command(0)).expect("append");
        disk.set_capacity(Some(disk.used_bytes() + 10));
        assert!(matches!(
            log.append(&command(1)),
            Err(MetadataLogError::NotAppended(_))
        ));
        disk.set_capacity(None);
        log.append(&command(2)).expect("append after space returns");
        disk.power_loss();
        let replayed = open(&disk).replay().expect("replay");
        assert_eq!(replayed, vec![command(0), command(2)]);
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
                    Err(MetadataLogError::Corrupt { position: 0, .. })
                ),
                "{what}"
            );
            assert_eq!(disk.read(path).expect("read"), damaged, "left untouched");
        }
    }
}
