//! The file layer under the log: real files, or an in-memory disk that can lose power.
//!
//! The log never touches `std::fs` directly; it goes through [`Storage`], so tests can replace
//! the disk with [`PowerLossStorage`], which forgets every write that was not fsynced when
//! [`PowerLossStorage::power_loss`] is called. That is how durability promises are proven.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// One open file: positional reads, appends at the end, fsync and truncation.
pub trait StorageFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `position`.
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()>;
    /// Appends `data` at the end of the file.
    fn append(&self, data: &[u8]) -> io::Result<()>;
    /// Current length in bytes, including unsynced writes.
    fn len(&self) -> io::Result<u64>;
    /// True when the file holds no bytes.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Makes every write so far durable.
    fn sync(&self) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&self, len: u64) -> io::Result<()>;
}

/// A directory tree of files: what the log needs from a file system.
pub trait Storage: Send + Sync + 'static {
    /// Opens a file for reading and appending, creating it (durably) when `create` is set.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Lists the file names directly inside `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Deletes a file; a missing file is not an error.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Deletes a directory and everything in it.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// True when a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Reads a whole small file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Replaces a small file's content atomically and durably (write, fsync, rename).
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

struct FsFile {
    file: File,
}

impl StorageFile for FsFile {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, position)
    }
    fn append(&self, data: &[u8]) -> io::Result<()> {
        (&self.file).write_all(data)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Storage for FsStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(create)
            .open(path)?;
        if !existed {
            if let Some(parent) = path.parent() {
                sync_dir(parent)?;
            }
        }
        Ok(Arc::new(FsFile { file }))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        }
        match path.parent() {
            Some(parent) => sync_dir(parent),
            None => Ok(()),
        }
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let tmp = path.with_extension("tmp");
        {
            let mut file = File::create(&tmp)?;
            file.write_all(data)?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }
}

/// An in-memory disk that models a power cut: unsynced bytes are lost.
///
/// Each file keeps its current bytes and the bytes it had at its last fsync. Directory
/// operations (create, remove, atomic replace) are durable at once, as [`FsStorage`] makes them.
#[derive(Clone, Default)]
pub struct PowerLossStorage {
    files: Arc<Mutex<BTreeMap<PathBuf, Arc<MemFile>>>>,
}

#[derive(Default)]
struct MemFile {
    state: Mutex<MemFileState>,
}

#[derive(Default)]
struct MemFileState {
    current: Vec<u8>,
    synced: Vec<u8>,
}

impl MemFile {
    fn state(&self) -> MutexGuard<'_, MemFileState> {
        // A poisoned lock means a test thread panicked; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StorageFile for MemFile {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        let state = self.state();
        let start = position as usize;
        let end = start + buf.len();
        if end > state.current.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.copy_from_slice(&state.current[start..end]);
        Ok(())
    }
    fn append(&self, data: &[u8]) -> io::Result<()> {
        self.state().current.extend_from_slice(data);
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.state().current.len() as u64)
    }
    fn sync(&self) -> io::Result<()> {
        let mut state = self.state();
        state.synced = state.current.clone();
        Ok(())
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.state().current.truncate(len as usize);
        Ok(())
    }
}

impl PowerLossStorage {
    /// A new empty disk.
    pub fn new() -> PowerLossStorage {
        PowerLossStorage::default()
    }

    fn files(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Arc<MemFile>>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts the power: every file falls back to what it held at its last fsync.
    pub fn power_loss(&self) {
        for file in self.files().values() {
            let mut state = file.state();
            state.current = state.synced.clone();
        }
    }

    /// Total bytes written but not yet fsynced, over all files.
    pub fn unsynced_bytes(&self) -> usize {
        self.files()
            .values()
            .map(|f| {
                let s = f.state();
                s.current.len().abs_diff(s.synced.len())
            })
            .sum()
    }
}

impl Storage for PowerLossStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut files = self.files();
        if let Some(file) = files.get(path) {
            return Ok(file.clone());
        }
        if !create {
            return Err(io::ErrorKind::NotFound.into());
        }
        let file = Arc::new(MemFile::default());
        files.insert(path.to_path_buf(), file.clone());
        Ok(file)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        Ok(self
            .files()
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.files().remove(path);
        Ok(())
    }
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.files().retain(|p, _| !p.starts_with(dir));
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        self.files().keys().any(|p| p.starts_with(path))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.files().get(path) {
            Some(file) => Ok(file.state().current.clone()),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let file = MemFile::default();
        {
            let mut state = file.state();
            state.current = data.to_vec();
            state.synced = data.to_vec();
        }
        self.files().insert(path.to_path_buf(), Arc::new(file));
        Ok(())
    }
}
