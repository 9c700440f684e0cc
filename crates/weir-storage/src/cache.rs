//! A bounded cache of open files, so that files of inactive segments are opened on demand and
//! the number open at once has a limit no topic config can raise.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::{Storage, StorageFile};

/// Open files of inactive segments, least recently used evicted first.
///
/// Eviction only drops the cache's handle: a reader that still holds the file keeps it open
/// until it is done, so the bound is on idle open files, and in-flight reads add at most one
/// each.
pub struct FileCache {
    storage: Arc<dyn Storage>,
    open_max: usize,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    by_path: HashMap<Arc<Path>, Entry>,
    /// Paths by the tick of their last use, oldest first.
    by_use: BTreeMap<u64, Arc<Path>>,
    tick: u64,
    /// Counts `forget` calls: a file opened before one is not cached (it may be the file that
    /// was just deleted, or renamed away).
    forgets: u64,
}

struct Entry {
    file: Arc<dyn StorageFile>,
    used: u64,
}

impl CacheState {
    fn touch(&mut self, path: &Arc<Path>) -> Option<Arc<dyn StorageFile>> {
        self.tick += 1;
        let tick = self.tick;
        let entry = self.by_path.get_mut(path)?;
        self.by_use.remove(&entry.used);
        entry.used = tick;
        self.by_use.insert(tick, path.clone());
        Some(entry.file.clone())
    }

    fn remove(&mut self, path: &Path) {
        if let Some(entry) = self.by_path.remove(path) {
            self.by_use.remove(&entry.used);
        }
    }
}

impl FileCache {
    /// A cache over `storage` keeping at most `open_max` (at least one) files open.
    pub fn new(storage: Arc<dyn Storage>, open_max: usize) -> Arc<FileCache> {
        Arc::new(FileCache {
            storage,
            open_max: open_max.max(1),
            state: Mutex::new(CacheState::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, CacheState> {
        // The state is a map of handles, consistent after every statement: usable after a
        // panic elsewhere.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The storage the files live on.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The open file at `path`, opening it (never creating it) when it is not cached.
    pub fn get(&self, path: &Arc<Path>) -> io::Result<Arc<dyn StorageFile>> {
        let forgets = {
            let mut state = self.state();
            if let Some(file) = state.touch(path) {
                return Ok(file);
            }
            state.forgets
        };
        // Open without holding the lock: other readers need not wait for this syscall.
        let opened = self.storage.open(path, false)?;
        let mut state = self.state();
        if let Some(file) = state.touch(path) {
            return Ok(file);
        }
        if state.forgets != forgets {
            return Ok(opened);
        }
        while state.by_path.len() >= self.open_max {
            let Some((_, oldest)) = state.by_use.pop_first() else {
                break;
            };
            state.by_path.remove(&oldest);
        }
        state.tick += 1;
        let tick = state.tick;
        state.by_use.insert(tick, path.clone());
        state.by_path.insert(
            path.clone(),
            Entry {
                file: opened.clone(),
                used: tick,
            },
        );
        Ok(opened)
    }

    /// Drops the cached handle of `path`. Call it before and after the file is deleted or
    /// renamed: a handle opened meanwhile is then never cached.
    pub fn forget(&self, path: &Path) {
        let mut state = self.state();
        state.forgets += 1;
        state.remove(path);
    }

    /// Drops every cached handle under `dir` (before and after the directory goes).
    pub fn forget_dir(&self, dir: &Path) {
        let mut state = self.state();
        state.forgets += 1;
        let gone: Vec<Arc<Path>> = state
            .by_path
            .keys()
            .filter(|p| p.starts_with(dir))
            .cloned()
            .collect();
        for path in gone {
            state.remove(&path);
        }
    }

    /// Files the cache holds open now.
    pub fn open_count(&self) -> usize {
        self.state().by_path.len()
    }
}

/// A file that stays open while its owner holds it (the active segment) and is otherwise
/// reopened through the [`FileCache`]. Readers keep a `FileRef` rather than the open file, so a
/// pending read never pins a file descriptor.
#[derive(Clone)]
pub struct FileRef {
    path: Arc<Path>,
    open: Option<Weak<dyn StorageFile>>,
    cache: Arc<FileCache>,
    /// When set, the file must still be this one: a path reused by a new file (a topic
    /// deleted and created again) reads as missing, never as the new file's bytes.
    expect: Option<crate::FileIdentity>,
}

impl FileRef {
    /// A reference to `path`, using `open` while its owner keeps it alive.
    pub fn new(
        path: Arc<Path>,
        open: Option<Weak<dyn StorageFile>>,
        cache: Arc<FileCache>,
    ) -> FileRef {
        FileRef {
            path,
            open,
            cache,
            expect: None,
        }
    }

    /// A reference to `path` that must still be the file `identity` names (read when it was
    /// open): once the path holds another file (a cleaned copy swapped in, a topic created
    /// again), resolving it reads as missing.
    pub fn expecting(
        path: Arc<Path>,
        identity: crate::FileIdentity,
        cache: Arc<FileCache>,
    ) -> FileRef {
        FileRef {
            path,
            open: None,
            cache,
            expect: Some(identity),
        }
    }

    /// The open file: the owner's handle if it is still open, else one from the cache.
    /// `NotFound` when the file was deleted meanwhile (retention), or replaced by another.
    pub fn resolve(&self) -> io::Result<Arc<dyn StorageFile>> {
        let file = match self.open.as_ref().and_then(Weak::upgrade) {
            Some(file) => file,
            None => self.cache.get(&self.path)?,
        };
        if let Some(expected) = self.expect {
            if file.identity()? != expected {
                self.cache.forget(&self.path);
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "the file was replaced by another",
                ));
            }
        }
        Ok(file)
    }

    /// Resolves the file now and returns a reference bound to it: later resolves fail rather
    /// than open another file at the same path.
    pub fn pinned(&self) -> io::Result<(FileRef, Arc<dyn StorageFile>)> {
        let file = self.resolve()?;
        let pinned = FileRef {
            expect: Some(file.identity()?),
            ..self.clone()
        };
        Ok((pinned, file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStorage;

    #[test]
    fn evicts_least_recently_used_and_forgets() {
        let disk = MemoryStorage::new();
        let paths: Vec<Arc<Path>> = (0..4)
            .map(|i| Arc::from(Path::new(&format!("/s/{i}"))))
            .collect();
        for path in &paths {
            disk.write_atomic(path, b"x").expect("write");
        }
        let cache = FileCache::new(Arc::new(disk), 2);
        cache.get(&paths[0]).expect("open 0");
        cache.get(&paths[1]).expect("open 1");
        cache.get(&paths[0]).expect("touch 0");
        cache.get(&paths[2]).expect("open 2 evicts 1");
        assert_eq!(cache.open_count(), 2);
        let state = cache.state();
        assert!(state.by_path.contains_key(&paths[0]));
        assert!(!state.by_path.contains_key(&paths[1]));
        drop(state);
        cache.forget(&paths[0]);
        assert_eq!(cache.open_count(), 1);
        assert!(cache.get(&Arc::from(Path::new("/missing"))).is_err());
    }

    #[test]
    fn a_pinned_reference_never_opens_a_new_file_at_the_same_path() {
        let disk = MemoryStorage::new();
        let path: Arc<Path> = Arc::from(Path::new("/t-0/00000000000000000000.log"));
        disk.write_atomic(&path, b"old topic").expect("write");
        let cache = FileCache::new(Arc::new(disk.clone()), 4);
        let (pinned, _) = FileRef::new(path.clone(), None, cache.clone())
            .pinned()
            .expect("pinned");
        // The topic is deleted and created again under the same name.
        cache.forget(&path);
        disk.remove(&path).expect("remove");
        cache.forget(&path);
        disk.write_atomic(&path, b"new topic").expect("write");
        let error = pinned.resolve().err().expect("the old file is gone");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        let fresh = FileRef::new(path, None, cache)
            .resolve()
            .expect("the new file");
        let mut buf = [0u8; 9];
        fresh.read_exact_at(&mut buf, 0).expect("read");
        assert_eq!(&buf, b"new topic");
    }
}
