//! An in-memory disk that can lose power and fill up, for tests that prove what is durable and
//! what happens when space runs out.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{FileIdentity, Storage, StorageFile};

/// Numbers the files of every in-memory disk, for [`StorageFile::identity`].
static NEXT_FILE_NUMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// An in-memory disk that models a power cut and a full disk.
///
/// Each file keeps its current bytes and the bytes it had at its last fsync; a power cut drops
/// everything after the last fsync, and files whose creation was not made durable by
/// [`Storage::sync_dir`] disappear. Renames, removals, directory creation and atomic replaces
/// are durable at once, as [`crate::FsStorage`] makes them. With a capacity set, a write that
/// does not fit writes what fits and fails with `StorageFull`, as a real file system does.
#[derive(Clone, Default)]
pub struct MemoryStorage {
    disk: Arc<Mutex<Disk>>,
}

#[derive(Default)]
struct Disk {
    files: BTreeMap<PathBuf, Arc<MemFile>>,
    capacity_bytes: Option<u64>,
}

struct MemFile {
    disk: std::sync::Weak<Mutex<Disk>>,
    number: u64,
    state: Mutex<MemFileState>,
}

#[derive(Default)]
struct MemFileState {
    current: Vec<u8>,
    synced: Vec<u8>,
    /// The file's directory entry survives a power cut.
    entry_durable: bool,
    /// Wall-clock time of the last change, in milliseconds since the Unix epoch.
    modified_ms: i64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a test thread panicked; the bytes are still usable.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Disk {
    fn used_bytes(&self) -> u64 {
        self.files
            .values()
            .map(|f| lock(&f.state).current.len() as u64)
            .sum()
    }

    /// Bytes a write may still add, or `None` without a capacity.
    fn free_bytes(&self) -> Option<u64> {
        self.capacity_bytes
            .map(|capacity| capacity.saturating_sub(self.used_bytes()))
    }
}

fn disk_full() -> io::Error {
    io::Error::new(io::ErrorKind::StorageFull, "no space left on device")
}

impl MemFile {
    fn new(disk: &Arc<Mutex<Disk>>, content: Vec<u8>, entry_durable: bool) -> MemFile {
        MemFile {
            disk: Arc::downgrade(disk),
            number: NEXT_FILE_NUMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            state: Mutex::new(MemFileState {
                synced: content.clone(),
                current: content,
                entry_durable,
                modified_ms: now_ms(),
            }),
        }
    }
}

impl StorageFile for MemFile {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        let state = lock(&self.state);
        let start = usize::try_from(position).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .filter(|end| *end <= state.current.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(&state.current[start..end]);
        Ok(())
    }

    fn append(&self, parts: &[&[u8]]) -> io::Result<()> {
        let wanted: u64 = parts.iter().map(|p| p.len() as u64).sum();
        // Lock order: disk, then file (as `Disk::used_bytes` does).
        let free = match self.disk.upgrade() {
            Some(disk) => lock(&disk).free_bytes(),
            None => None,
        };
        let allowed = free.map_or(wanted, |free| free.min(wanted));
        let mut state = lock(&self.state);
        state.modified_ms = now_ms();
        let mut left = allowed as usize;
        for part in parts {
            let take = part.len().min(left);
            state.current.extend_from_slice(&part[..take]);
            left -= take;
        }
        if allowed < wanted {
            return Err(disk_full());
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.state).current.len() as u64)
    }

    fn identity(&self) -> io::Result<FileIdentity> {
        Ok(FileIdentity {
            device: 0,
            inode: self.number,
        })
    }

    fn modified_ms(&self) -> io::Result<i64> {
        Ok(lock(&self.state).modified_ms)
    }

    fn sync(&self) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.synced = state.current.clone();
        Ok(())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let mut state = lock(&self.state);
        let len = usize::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        if len > state.current.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "extending by truncate is not modelled",
            ));
        }
        state.current.truncate(len);
        Ok(())
    }
}

impl MemoryStorage {
    /// A new empty disk without a capacity limit.
    pub fn new() -> MemoryStorage {
        MemoryStorage::default()
    }

    fn disk(&self) -> MutexGuard<'_, Disk> {
        lock(&self.disk)
    }

    /// Limits the bytes all files together may hold (`None`: unlimited). Lowering it below
    /// what is stored makes every growing write fail until files shrink.
    pub fn set_capacity(&self, capacity_bytes: Option<u64>) {
        self.disk().capacity_bytes = capacity_bytes;
    }

    /// Bytes held by all files.
    pub fn used_bytes(&self) -> u64 {
        self.disk().used_bytes()
    }

    /// Cuts the power: every file falls back to what it held at its last fsync, and files whose
    /// creation was never made durable vanish.
    pub fn power_loss(&self) {
        let mut disk = self.disk();
        disk.files.retain(|_, file| lock(&file.state).entry_durable);
        for file in disk.files.values() {
            let mut state = lock(&file.state);
            state.current = state.synced.clone();
        }
    }

    /// Total bytes written but not yet fsynced, over all files.
    pub fn unsynced_bytes(&self) -> usize {
        self.disk()
            .files
            .values()
            .map(|f| {
                let s = lock(&f.state);
                s.current.len().abs_diff(s.synced.len())
            })
            .sum()
    }

    /// Overwrites the bytes of an existing file as if they had always been there (synced), to
    /// plant corrupt or hostile content for recovery tests.
    pub fn plant(&self, path: &Path, content: &[u8]) {
        let file = Arc::new(MemFile::new(&self.disk, content.to_vec(), true));
        self.disk().files.insert(path.to_path_buf(), file);
    }
}

impl Storage for MemoryStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut disk = self.disk();
        if let Some(file) = disk.files.get(path) {
            return Ok(file.clone());
        }
        if !create {
            return Err(io::ErrorKind::NotFound.into());
        }
        let file = Arc::new(MemFile::new(&self.disk, Vec::new(), false));
        disk.files.insert(path.to_path_buf(), file.clone());
        Ok(file)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        for (path, file) in &self.disk().files {
            if path.parent() == Some(dir) {
                lock(&file.state).entry_durable = true;
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = self.disk();
        let mut names: Vec<String> = disk
            .files
            .keys()
            .filter_map(|p| {
                // Direct children, and the first component of deeper paths (subdirectories).
                let rest = p.strip_prefix(dir).ok()?;
                let first = rest.components().next()?;
                Some(first.as_os_str().to_string_lossy().into_owned())
            })
            .collect();
        names.dedup();
        Ok(names)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.disk().files.remove(path);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk();
        let moved: Vec<PathBuf> = disk
            .files
            .keys()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        if moved.is_empty() {
            return Err(io::ErrorKind::NotFound.into());
        }
        for path in moved {
            if let Some(file) = disk.files.remove(&path) {
                let rest = path.strip_prefix(from).unwrap_or(Path::new(""));
                lock(&file.state).entry_durable = true;
                disk.files.insert(to.join(rest), file);
            }
        }
        Ok(())
    }

    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.disk().files.retain(|p, _| !p.starts_with(dir));
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        self.disk().files.keys().any(|p| p.starts_with(path))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.disk().files.get(path) {
            Some(file) => Ok(lock(&file.state).current.clone()),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn available_bytes(&self, _path: &Path) -> io::Result<u64> {
        Ok(self.disk().free_bytes().unwrap_or(u64::MAX))
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut disk = self.disk();
        let old = disk
            .files
            .get(path)
            .map_or(0, |f| lock(&f.state).current.len() as u64);
        // The new content is written beside the old one before the rename replaces it.
        if disk
            .free_bytes()
            .is_some_and(|free| free < data.len() as u64)
        {
            return Err(disk_full());
        }
        let _ = old;
        let file = Arc::new(MemFile::new(&self.disk, data.to_vec(), true));
        disk.files.insert(path.to_path_buf(), file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_loss_keeps_synced_bytes_and_durable_entries() {
        let disk = MemoryStorage::new();
        let dir = Path::new("/d");
        let kept = disk.open(&dir.join("kept"), true).expect("open");
        disk.sync_dir(dir).expect("sync dir");
        kept.append(&[b"synced"]).expect("append");
        kept.sync().expect("sync");
        kept.append(&[b"-lost"]).expect("append");
        let lost = disk.open(&dir.join("lost"), true).expect("open");
        lost.append(&[b"x"]).expect("append");
        lost.sync().expect("sync");
        disk.power_loss();
        assert_eq!(disk.read(&dir.join("kept")).expect("kept"), b"synced");
        assert!(
            !disk.exists(&dir.join("lost")),
            "creation was never made durable"
        );
    }

    #[test]
    fn a_full_disk_writes_what_fits_then_refuses() {
        let disk = MemoryStorage::new();
        disk.set_capacity(Some(10));
        let file = disk.open(Path::new("/f"), true).expect("open");
        file.append(&[b"12345678"]).expect("fits");
        let error = file.append(&[b"abc", b"def"]).expect_err("does not fit");
        assert!(crate::is_resource_exhausted(&error));
        assert_eq!(
            file.len().expect("len"),
            10,
            "a partial write stays until truncated"
        );
        file.truncate(8).expect("truncate");
        assert!(disk.write_atomic(Path::new("/g"), b"too long").is_err());
        disk.set_capacity(None);
        file.append(&[b"abc"]).expect("space returned");
    }

    #[test]
    fn list_names_children_and_rename_moves_trees() {
        let disk = MemoryStorage::new();
        disk.write_atomic(Path::new("/logs/t-0/a"), b"1")
            .expect("write");
        disk.write_atomic(Path::new("/logs/t-0/b"), b"2")
            .expect("write");
        disk.write_atomic(Path::new("/logs/u-0/a"), b"3")
            .expect("write");
        assert_eq!(disk.list(Path::new("/logs")).expect("list"), ["t-0", "u-0"]);
        disk.rename(Path::new("/logs/t-0"), Path::new("/logs/t-0.x-stray"))
            .expect("rename");
        assert_eq!(
            disk.list(Path::new("/logs")).expect("list"),
            ["t-0.x-stray", "u-0"]
        );
        assert_eq!(
            disk.read(Path::new("/logs/t-0.x-stray/b")).expect("moved"),
            b"2"
        );
    }
}
