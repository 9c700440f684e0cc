//! The metadata log: where commands become durable before they are applied.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::command::MetadataCommand;

/// Longest encoded command accepted when replaying; a larger length is a torn or corrupt record.
const RECORD_BYTES_MAX: u32 = 16 * 1024 * 1024;

/// A durable, ordered log of metadata commands. The single-node server uses a local file; a
/// Raft quorum implements the same contract (append returns once the command is committed).
pub trait MetadataLog: Send + 'static {
    /// Makes `command` durable; commands are replayed in append order.
    fn append(&mut self, command: &MetadataCommand) -> std::io::Result<()>;
    /// Every command appended so far, oldest first.
    fn replay(&mut self) -> std::io::Result<Vec<MetadataCommand>>;
}

/// The metadata log in one file: records of `[u32 length][u32 crc32c][JSON]`, fsynced on append.
pub struct FileMetadataLog {
    path: PathBuf,
    file: File,
}

impl FileMetadataLog {
    /// Opens or creates the log file at `path`.
    pub fn open(path: &Path) -> std::io::Result<FileMetadataLog> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(FileMetadataLog {
            path: path.to_path_buf(),
            file,
        })
    }
}

impl MetadataLog for FileMetadataLog {
    fn append(&mut self, command: &MetadataCommand) -> std::io::Result<()> {
        let json = serde_json::to_vec(command).map_err(std::io::Error::other)?;
        let mut record = Vec::with_capacity(json.len() + 8);
        record.extend_from_slice(&(json.len() as u32).to_be_bytes());
        record.extend_from_slice(&crc32c::crc32c(&json).to_be_bytes());
        record.extend_from_slice(&json);
        self.file.write_all(&record)?;
        self.file.sync_data()
    }

    fn replay(&mut self) -> std::io::Result<Vec<MetadataCommand>> {
        let mut raw = Vec::new();
        File::open(&self.path)?.read_to_end(&mut raw)?;
        let mut commands = Vec::new();
        let mut position = 0usize;
        while raw.len() - position >= 8 {
            let length = u32::from_be_bytes([
                raw[position],
                raw[position + 1],
                raw[position + 2],
                raw[position + 3],
            ]);
            let crc = u32::from_be_bytes([
                raw[position + 4],
                raw[position + 5],
                raw[position + 6],
                raw[position + 7],
            ]);
            let start = position + 8;
            if length > RECORD_BYTES_MAX || raw.len() - start < length as usize {
                break;
            }
            let body = &raw[start..start + length as usize];
            if crc32c::crc32c(body) != crc {
                break;
            }
            match serde_json::from_slice(body) {
                Ok(command) => commands.push(command),
                Err(_) => break,
            }
            position = start + length as usize;
        }
        if position < raw.len() {
            tracing::warn!(target: "weir::controller", bytes = raw.len() - position, "truncating torn tail of the metadata log");
            self.file.set_len(position as u64)?;
            self.file.sync_all()?;
        }
        Ok(commands)
    }
}
