//! `weir-storage` is the file layer under Weir's partition logs and metadata log. Everything
//! Weir keeps on disk goes through [`Storage`] and [`StorageFile`], so tests can swap the real
//! file system ([`FsStorage`]) for [`MemoryStorage`], an in-memory disk that forgets unsynced
//! writes on [`MemoryStorage::power_loss`] and can be given a capacity to fill up. That is how
//! durability and disk-full behaviour are proven.
//!
//! [`FileCache`] bounds how many files of inactive segments are open at once, so no topic
//! config can exhaust the process's file descriptors.
//!
//! It knows nothing of record batches, offsets or Kafka: only files, bytes and fsync.

mod cache;
mod fs;
mod memory;

use std::io;
use std::path::Path;
use std::sync::Arc;

pub use cache::{FileCache, FileRef};
pub use fs::FsStorage;
pub use memory::MemoryStorage;

/// One open file: positional reads, appends at the end, fsync and truncation.
pub trait StorageFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `position`; `UnexpectedEof` when the file is shorter.
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()>;
    /// Appends the concatenation of `parts` at the end of the file. On error some prefix may
    /// have been written; the caller truncates back if it must.
    fn append(&self, parts: &[&[u8]]) -> io::Result<()>;
    /// Current length in bytes, including unsynced writes.
    fn len(&self) -> io::Result<u64>;
    /// True when the file holds no bytes.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// What identifies this file (not its path) while it exists: device and inode on a real
    /// file system. A path reused by a new file gives a different identity.
    fn identity(&self) -> io::Result<FileIdentity>;
    /// When the file was last written, in milliseconds since the Unix epoch.
    fn modified_ms(&self) -> io::Result<i64>;
    /// Makes every write so far durable.
    fn sync(&self) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&self, len: u64) -> io::Result<()>;
}

/// The identity of an open file, see [`StorageFile::identity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    /// Device (or storage instance).
    pub device: u64,
    /// Inode (or file number).
    pub inode: u64,
}

/// A directory tree of files: what the log and the metadata log need from a file system.
pub trait Storage: Send + Sync + 'static {
    /// Opens a file for reading and appending, creating it when `create` is set. A created
    /// file's directory entry is durable only after [`Storage::sync_dir`] on its parent.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Makes the entries of `dir` (files created, removed or renamed in it) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Lists the names directly inside `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Deletes a file; a missing file is not an error.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames a file or directory, durably (the parent directories are synced).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Creates a directory and its parents, durably.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Deletes a directory and everything in it; a missing directory is not an error.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// True when a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Reads a whole small file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Replaces a small file's content atomically and durably (write, fsync, rename, sync the
    /// directory). On failure the old content is still in place.
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// Bytes that may still be written on the file system holding `path` (`u64::MAX` when
    /// unlimited): lets a writer that must not fail half-way refuse while there is no room.
    fn available_bytes(&self, path: &Path) -> io::Result<u64>;
}

/// Linux `ENFILE` and `EMFILE`: the system or the process is out of file descriptors.
const OUT_OF_FILE_DESCRIPTORS: [i32; 2] = [23, 24];

/// True for the errors that mean a resource ran out — no space (ENOSPC, EDQUOT) or no file
/// descriptors (EMFILE, ENFILE): operating conditions the log survives by undoing the write
/// and refusing writes until the resource returns, unlike an I/O failure.
pub fn is_resource_exhausted(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    ) || error
        .raw_os_error()
        .is_some_and(|code| OUT_OF_FILE_DESCRIPTORS.contains(&code))
}
