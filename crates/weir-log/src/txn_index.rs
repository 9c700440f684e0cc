//! The aborted-transaction index of one segment (`N.txnindex`, in the format of Kafka's
//! `.txnindex`): one entry per transaction whose abort marker the segment holds, in marker
//! order. A read_committed fetch lists the aborted transactions of its range by reading the
//! indexes of the segments from the one holding its start onward, and stops at the first entry
//! whose last stable offset reaches the range's end: every transaction that began below it was
//! decided by then, so its entry came earlier. Memory holds a count per segment, no entries.
//!
//! The file is created with its first entry (most segments have none). It is derived from the
//! log: opening or truncating a log trims the indexes to the entries below the offset its
//! producer state is rebuilt from, and the rebuild appends the aborts it meets again, so an
//! index that a crash tore, or left with entries of batches the log lost, comes out exact.
//! Entries below a producer snapshot are durable before the snapshot is
//! ([`crate::LogCheckpoint::write`] syncs the active segment's index first).

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir_storage::{FileCache, FileRef, Storage, StorageFile};

use crate::index::{be_i64, file_partition_point, IndexEntry, ENTRY_BYTES_MAX};
use crate::LogError;

/// Version of the entry format (Kafka's `AbortedTxn.CURRENT_VERSION`).
const ENTRY_VERSION: i16 = 0;
/// Bytes read at once when scanning an index file.
const READ_CHUNK_ENTRIES: usize = 2048;

/// A transaction aborted on this partition: its records from `first_offset` up to its abort
/// marker at `last_offset` are skipped by read_committed consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    /// The producer whose transaction it was.
    pub producer_id: i64,
    /// Offset of its first record on this partition.
    pub first_offset: i64,
    /// Offset of its abort marker.
    pub last_offset: i64,
    /// The partition's last stable offset once the marker was written (the first offset of
    /// the oldest transaction still open, or one past the marker); -1 when unknown, which only
    /// makes a search read on.
    pub last_stable_offset: i64,
}

const _: () = assert!(AbortedTxn::BYTES <= ENTRY_BYTES_MAX);

impl IndexEntry for AbortedTxn {
    const BYTES: usize = 34;
    fn encode(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&ENTRY_VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
    }
    fn decode(bytes: &[u8]) -> AbortedTxn {
        AbortedTxn {
            producer_id: be_i64(&bytes[2..10]),
            first_offset: be_i64(&bytes[10..18]),
            last_offset: be_i64(&bytes[18..26]),
            last_stable_offset: be_i64(&bytes[26..34]),
        }
    }
    fn follows(&self, prev: &AbortedTxn) -> bool {
        self.last_offset > prev.last_offset
    }
}

/// Entry count of an index file of `len` bytes (a torn last entry does not count).
fn entries_in(len: u64) -> u64 {
    len / AbortedTxn::BYTES as u64
}

/// A segment's aborted-transaction index.
pub(crate) struct TxnIndex {
    path: Arc<Path>,
    /// Whole entries in the file.
    entries: u64,
    /// The file, kept open while its segment is active and the file exists.
    file: Option<Arc<dyn StorageFile>>,
}

impl TxnIndex {
    /// The index at `path` as the disk has it, its file kept open (a torn last entry is cut).
    pub fn open(storage: &dyn Storage, path: Arc<Path>) -> Result<TxnIndex, LogError> {
        if !storage.exists(&path) {
            return Ok(TxnIndex::empty(path));
        }
        let file = storage.open(&path, false)?;
        let len = file.len()?;
        let entries = entries_in(len);
        if entries * AbortedTxn::BYTES as u64 != len {
            file.truncate(entries * AbortedTxn::BYTES as u64)?;
        }
        Ok(TxnIndex {
            path,
            entries,
            file: Some(file),
        })
    }

    /// The index of a new segment: no file until its first entry.
    pub fn empty(path: Arc<Path>) -> TxnIndex {
        TxnIndex {
            path,
            entries: 0,
            file: None,
        }
    }

    /// Writes a new index of `entries` (in marker order) at `path`, synced; the file is
    /// created even with none, so that its presence says it was written (the cleaner's copy,
    /// whose swap renames it over the index it replaces). The file is not kept open.
    pub fn write_new(
        storage: &dyn Storage,
        path: Arc<Path>,
        entries: &[AbortedTxn],
    ) -> Result<TxnIndex, LogError> {
        let mut bytes = vec![0u8; entries.len() * AbortedTxn::BYTES];
        for (entry, out) in entries
            .iter()
            .zip(bytes.chunks_exact_mut(AbortedTxn::BYTES))
        {
            entry.encode(out);
        }
        let file = storage.open(&path, true)?;
        file.truncate(0)?;
        file.append(&[&bytes])?;
        file.sync()?;
        Ok(TxnIndex {
            path,
            entries: entries.len() as u64,
            file: None,
        })
    }

    /// True when the index has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Appends `txn` (its marker follows every entry's), creating the file first. `keep_open`
    /// (the active segment) keeps the file open and leaves its sync to the checkpoint;
    /// otherwise the entry is synced now. Returns whether the file was created (a directory
    /// entry to make durable). On failure the index is as it was.
    pub fn append(
        &mut self,
        storage: &dyn Storage,
        txn: &AbortedTxn,
        keep_open: bool,
    ) -> Result<bool, LogError> {
        let (file, created) = match &self.file {
            Some(file) => (file.clone(), false),
            None => {
                let created = !storage.exists(&self.path);
                (storage.open(&self.path, true)?, created)
            }
        };
        let mut bytes = [0u8; AbortedTxn::BYTES];
        txn.encode(&mut bytes);
        let at = self.entries * AbortedTxn::BYTES as u64;
        let written = file.append(&[&bytes]).and_then(|()| match keep_open {
            true => Ok(()),
            false => file.sync(),
        });
        if let Err(error) = written {
            file.truncate(at).map_err(LogError::Io)?;
            if created {
                storage.remove(&self.path)?;
            }
            return Err(error.into());
        }
        self.entries += 1;
        if keep_open {
            self.file = Some(file);
        }
        Ok(created)
    }

    /// Removes the last entry: the marker it was written for could not be appended.
    pub fn withdraw_last(&mut self) -> Result<(), LogError> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let entries = self.entries.saturating_sub(1);
        file.truncate(entries * AbortedTxn::BYTES as u64)
            .map_err(LogError::Io)?;
        self.entries = entries;
        Ok(())
    }

    /// Keeps only the entries whose marker is below `offset`, durably.
    pub fn retain_below(&mut self, storage: &dyn Storage, offset: i64) -> Result<(), LogError> {
        if self.entries == 0 {
            return Ok(());
        }
        let file = match &self.file {
            Some(file) => file.clone(),
            None => storage.open(&self.path, false)?,
        };
        let (kept, _) =
            file_partition_point::<AbortedTxn>(file.as_ref(), |e| e.last_offset < offset)?;
        let kept = kept as u64;
        if kept * AbortedTxn::BYTES as u64 != file.len()? {
            file.truncate(kept * AbortedTxn::BYTES as u64)?;
            file.sync()?;
        }
        self.entries = kept;
        Ok(())
    }

    /// Every entry, in marker order.
    pub fn entries(&self, storage: &dyn Storage) -> Result<Vec<AbortedTxn>, LogError> {
        if self.entries == 0 {
            return Ok(Vec::new());
        }
        let file = match &self.file {
            Some(file) => file.clone(),
            None => storage.open(&self.path, false)?,
        };
        let mut all = Vec::new();
        scan(file.as_ref(), &mut |txn| {
            all.push(txn);
            true
        })?;
        Ok(all)
    }

    /// Closes the file (its segment is no longer the active one) and returns it, to sync.
    pub fn deactivate(&mut self) -> Option<Arc<dyn StorageFile>> {
        self.file.take()
    }

    /// The open file, to sync outside the log's lock.
    pub fn file(&self) -> Option<Arc<dyn StorageFile>> {
        self.file.clone()
    }

    /// A reference to the file that does not keep it open.
    pub fn file_ref(&self, files: &Arc<FileCache>) -> FileRef {
        FileRef::new(
            self.path.clone(),
            self.file.as_ref().map(Arc::downgrade),
            files.clone(),
        )
    }
}

/// Hands every whole entry of `file` to `visit`, in order, until it returns false.
fn scan(file: &dyn StorageFile, visit: &mut dyn FnMut(AbortedTxn) -> bool) -> Result<(), LogError> {
    let total = entries_in(file.len()?);
    let mut buffer = Vec::new();
    let mut at = 0u64;
    while at < total {
        let count = (total - at).min(READ_CHUNK_ENTRIES as u64) as usize;
        buffer.resize(count * AbortedTxn::BYTES, 0);
        file.read_exact_at(&mut buffer, at * AbortedTxn::BYTES as u64)?;
        for entry in buffer.chunks_exact(AbortedTxn::BYTES) {
            if !visit(AbortedTxn::decode(entry)) {
                return Ok(());
            }
        }
        at += count as u64;
    }
    Ok(())
}

/// The aborted transactions whose records may lie in a range of offsets, to collect from the
/// segments' indexes outside the log's lock ([`crate::Log::aborted_lookup`]).
pub struct AbortedLookup {
    pub(crate) from: i64,
    pub(crate) upper: i64,
    /// The indexes with entries, from the segment holding `from` on.
    pub(crate) indexes: Vec<FileRef>,
}

impl AbortedLookup {
    /// The transactions aborted with a marker at or after `from` and a first record before
    /// `upper`, in marker order. An index deleted meanwhile (its segment went) has none.
    pub fn collect(&self) -> Result<Vec<AbortedTxn>, LogError> {
        let mut found = Vec::new();
        for index in &self.indexes {
            let file = match index.resolve() {
                Ok(file) => file,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error.into()),
            };
            let mut complete = false;
            scan(file.as_ref(), &mut |txn| {
                if txn.last_offset >= self.from && txn.first_offset < self.upper {
                    found.push(txn);
                }
                complete = txn.last_stable_offset >= self.upper;
                !complete
            })?;
            if complete {
                break;
            }
        }
        Ok(found)
    }
}
