//! The real file system.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use crate::{FileIdentity, Storage, StorageFile};

/// The real file system, through `std::fs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

struct FsFile {
    file: File,
    /// Device and inode, read once: an open file's identity never changes, and pending reads
    /// check it on every fetch.
    identity: std::sync::OnceLock<FileIdentity>,
}

impl StorageFile for FsFile {
    fn read_exact_at(&self, buf: &mut [u8], position: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, position)
    }

    fn append(&self, parts: &[&[u8]]) -> io::Result<()> {
        // Empty parts are skipped: a write of nothing would read as a device that took nothing.
        let mut slices: Vec<IoSlice<'_>> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| IoSlice::new(p))
            .collect();
        let mut remaining: &mut [IoSlice<'_>] = &mut slices;
        // The file is opened with O_APPEND, so every write lands at the end.
        while !remaining.is_empty() {
            match (&self.file).write_vectored(remaining) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut remaining, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn identity(&self) -> io::Result<FileIdentity> {
        if let Some(identity) = self.identity.get() {
            return Ok(*identity);
        }
        let metadata = self.file.metadata()?;
        let identity = FileIdentity {
            device: metadata.dev(),
            inode: metadata.ino(),
        };
        Ok(*self.identity.get_or_init(|| identity))
    }

    fn modified_ms(&self) -> io::Result<i64> {
        let modified = self.file.metadata()?.modified()?;
        Ok(modified
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64))
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => File::open(parent)?.sync_all(),
        _ => Ok(()),
    }
}

impl Storage for FsStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(create)
            .open(path)?;
        Ok(Arc::new(FsFile {
            file,
            identity: std::sync::OnceLock::new(),
        }))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
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
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)?;
        sync_parent(to)?;
        if from.parent() != to.parent() {
            sync_parent(from)?;
        }
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        std::fs::create_dir_all(dir)?;
        sync_parent(dir)
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

    fn available_bytes(&self, path: &Path) -> io::Result<u64> {
        let stats = rustix::fs::statvfs(path)?;
        Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
    }

    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let tmp = path.with_extension("tmp");
        let written = (|| {
            let mut file = File::create(&tmp)?;
            file.write_all(data)?;
            file.sync_all()
        })();
        if let Err(error) = written {
            // Leave no half-written temporary file behind (it may hold the last free blocks).
            let _ = std::fs::remove_file(&tmp);
            return Err(error);
        }
        std::fs::rename(&tmp, path)?;
        sync_parent(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_append_and_atomic_replace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = FsStorage.open(&path, true).expect("open");
        file.append(&[b"ab", b"", b"cde"]).expect("append");
        file.append(&[b"f"]).expect("append");
        file.append(&[b""]).expect("appending nothing is no error");
        file.append(&[]).expect("appending nothing is no error");
        let mut buf = [0u8; 6];
        file.read_exact_at(&mut buf, 0).expect("read");
        assert_eq!(&buf, b"abcdef");
        assert!(file.read_exact_at(&mut buf, 1).is_err(), "past the end");
        FsStorage
            .write_atomic(&path.with_extension("json"), b"{}")
            .expect("write");
        assert_eq!(
            FsStorage.read(&path.with_extension("json")).expect("read"),
            b"{}"
        );
        assert!(!path.with_extension("tmp").exists());
    }
}
