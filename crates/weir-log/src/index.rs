//! Sparse per-segment indexes: offset → file position, and timestamp → offset.
//!
//! The active segment keeps both in memory for its appends and lookups and mirrors them to its
//! files; an inactive segment keeps nothing in memory and binary-searches its files with
//! positional reads (through the file cache), so memory does not grow with retained data. On
//! load an index file is checked entry by entry; one that is missing, torn or inconsistent with
//! its segment is reported as damaged so the segment rebuilds it from the log.

use std::sync::Arc;

use weir_storage::StorageFile;

/// Most entries one index may hold; the segment rolls when either index is full. Kafka's
/// `segment.index.bytes` default (10 MiB) in 8-byte offset entries: bounds the memory of the
/// active segment's index even with `index.interval.bytes=0` and tiny batches.
pub const INDEX_ENTRIES_MAX: usize = 10 * 1024 * 1024 / OffsetEntry::BYTES;

/// The largest [`IndexEntry::BYTES`] of any index.
pub const ENTRY_BYTES_MAX: usize = 64;

/// One fixed-size entry of an index file.
pub trait IndexEntry: Copy + std::fmt::Debug {
    /// Encoded size.
    const BYTES: usize;
    /// Writes the big-endian encoding into `out` (exactly [`IndexEntry::BYTES`] long).
    fn encode(&self, out: &mut [u8]);
    /// Reads an entry from exactly [`IndexEntry::BYTES`] bytes.
    fn decode(bytes: &[u8]) -> Self;
    /// True when `self` may follow `prev` in the index.
    fn follows(&self, prev: &Self) -> bool;
}

/// One offset-index entry: the batch starting at `relative_offset` begins at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    /// Offset minus the segment's base offset.
    pub relative_offset: u32,
    /// Byte position of the batch in the segment file.
    pub position: u32,
}

/// One time-index entry: batches up to `relative_offset` have timestamps up to `timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    /// Largest timestamp seen in the segment up to this entry's batch.
    pub timestamp: i64,
    /// Offset (relative to the segment base) of the batch that carried `timestamp`.
    pub relative_offset: u32,
}

fn be_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(word)
}

/// The big-endian `i64` at the start of `bytes`.
pub(crate) fn be_i64(bytes: &[u8]) -> i64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    i64::from_be_bytes(word)
}

impl IndexEntry for OffsetEntry {
    const BYTES: usize = 8;
    fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
    }
    fn decode(bytes: &[u8]) -> OffsetEntry {
        OffsetEntry {
            relative_offset: be_u32(&bytes[0..4]),
            position: be_u32(&bytes[4..8]),
        }
    }
    fn follows(&self, prev: &OffsetEntry) -> bool {
        self.relative_offset > prev.relative_offset && self.position > prev.position
    }
}

impl IndexEntry for TimeEntry {
    const BYTES: usize = 12;
    fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(bytes: &[u8]) -> TimeEntry {
        TimeEntry {
            timestamp: be_i64(&bytes[0..8]),
            relative_offset: be_u32(&bytes[8..12]),
        }
    }
    fn follows(&self, prev: &TimeEntry) -> bool {
        self.timestamp > prev.timestamp && self.relative_offset >= prev.relative_offset
    }
}

/// The index of the active segment: every entry in memory, appended to its file as it grows.
pub struct ActiveIndex<E> {
    entries: Vec<E>,
    /// `None` once a write to the file failed: the file keeps a valid prefix (an index is
    /// sparse, so a shorter one is still correct) and memory stays complete.
    file: Option<Arc<dyn StorageFile>>,
}

impl<E: IndexEntry> ActiveIndex<E> {
    /// An empty index over `file`, which is cut to zero length (it will be rebuilt).
    pub fn empty(file: Arc<dyn StorageFile>) -> std::io::Result<ActiveIndex<E>> {
        file.truncate(0)?;
        Ok(ActiveIndex {
            entries: Vec::new(),
            file: Some(file),
        })
    }

    /// Loads the index from its file; `None` when the file is torn, its entries are out of
    /// order, or `check` refuses one.
    pub fn load(
        file: Arc<dyn StorageFile>,
        mut check: impl FnMut(&E) -> bool,
    ) -> Option<ActiveIndex<E>> {
        let len = usize::try_from(file.len().ok()?).ok()?;
        if !len.is_multiple_of(E::BYTES) || len / E::BYTES > INDEX_ENTRIES_MAX {
            return None;
        }
        let mut raw = vec![0u8; len];
        file.read_exact_at(&mut raw, 0).ok()?;
        let mut entries: Vec<E> = Vec::with_capacity(len / E::BYTES);
        for chunk in raw.chunks_exact(E::BYTES) {
            let entry = E::decode(chunk);
            let ordered = entries.last().is_none_or(|prev| entry.follows(prev));
            if !ordered || !check(&entry) {
                return None;
            }
            entries.push(entry);
        }
        Some(ActiveIndex {
            entries,
            file: Some(file),
        })
    }

    /// Adds an entry; entries must arrive in order (one that does not is left out: a sparse
    /// index stays correct with fewer entries). A failed file write is logged and only stops
    /// the file from growing.
    pub fn append(&mut self, entry: E) {
        if self.entries.last().is_some_and(|prev| !entry.follows(prev)) {
            tracing::warn!(target: "weir::log", ?entry, "index entry out of order left out");
            return;
        }
        self.entries.push(entry);
        let Some(file) = &self.file else { return };
        let mut bytes = [0u8; 16];
        entry.encode(&mut bytes[..E::BYTES]);
        if let Err(error) = file.append(&[&bytes[..E::BYTES]]) {
            tracing::warn!(target: "weir::log", %error, "index file write failed; the index file stops growing and lookups scan further");
            let kept = ((self.entries.len() - 1) * E::BYTES) as u64;
            let _ = file.truncate(kept);
            self.file = None;
        }
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[E] {
        &self.entries
    }

    /// The newest entry.
    pub fn last(&self) -> Option<E> {
        self.entries.last().copied()
    }

    /// True when the segment must roll: the index holds [`INDEX_ENTRIES_MAX`] entries.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= INDEX_ENTRIES_MAX
    }

    /// The index file, for syncing outside the log's lock.
    pub fn file(&self) -> Option<Arc<dyn StorageFile>> {
        self.file.clone()
    }
}

/// The number of entries `pred` holds for, in an index sorted so that `pred` is true for a
/// prefix, read from the file by binary search; with the last such entry.
pub fn file_partition_point<E: IndexEntry>(
    file: &dyn StorageFile,
    pred: impl Fn(&E) -> bool,
) -> std::io::Result<(usize, Option<E>)> {
    let count = usize::try_from(file.len()?).unwrap_or(usize::MAX) / E::BYTES;
    let read = |i: usize| -> std::io::Result<E> {
        let mut bytes = [0u8; ENTRY_BYTES_MAX];
        file.read_exact_at(&mut bytes[..E::BYTES], (i * E::BYTES) as u64)?;
        Ok(E::decode(&bytes[..E::BYTES]))
    };
    let (mut low, mut high) = (0usize, count);
    while low < high {
        let mid = low + (high - low) / 2;
        if pred(&read(mid)?) {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    let last = match low.checked_sub(1) {
        Some(i) => Some(read(i)?),
        None => None,
    };
    Ok((low, last))
}

/// Cuts an index file to its first entries for which `keep` holds (entries are ordered, so
/// they are a prefix), dropping a torn last entry too: what truncating a segment keeps.
pub fn truncate_file<E: IndexEntry>(
    file: &dyn StorageFile,
    keep: impl Fn(&E) -> bool,
) -> std::io::Result<()> {
    let (kept, _) = file_partition_point::<E>(file, keep)?;
    let len = (kept * E::BYTES) as u64;
    if file.len()? > len {
        file.truncate(len)?;
    }
    Ok(())
}

/// The last entry of `entries` for which `pred` holds (entries sorted so it holds for a prefix).
pub fn memory_floor<E: IndexEntry>(entries: &[E], pred: impl Fn(&E) -> bool) -> Option<E> {
    let idx = entries.partition_point(pred);
    idx.checked_sub(1).map(|i| entries[i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use weir_storage::{MemoryStorage, Storage};

    #[test]
    fn offset_floor_in_memory_and_in_file_agree() {
        let disk = MemoryStorage::new();
        let file = disk.open(Path::new("/i"), true).expect("open");
        let mut index = ActiveIndex::<OffsetEntry>::empty(file.clone()).expect("empty");
        for (rel, pos) in [(0, 0), (10, 100), (20, 250)] {
            index.append(OffsetEntry {
                relative_offset: rel,
                position: pos,
            });
        }
        let cases = [
            (0, Some(0)),
            (9, Some(0)),
            (10, Some(100)),
            (19, Some(100)),
            (99, Some(250)),
        ];
        for (target, want) in cases {
            let pred = |e: &OffsetEntry| e.relative_offset <= target;
            assert_eq!(
                memory_floor(index.entries(), pred).map(|e| e.position),
                want,
                "memory {target}"
            );
            let (_, last) = file_partition_point(file.as_ref(), pred).expect("file");
            assert_eq!(last.map(|e| e.position), want, "file {target}");
        }
        let reloaded = ActiveIndex::<OffsetEntry>::load(file.clone(), |e| e.position < 1000)
            .expect("valid file");
        assert_eq!(reloaded.entries().len(), 3);
        assert!(
            ActiveIndex::<OffsetEntry>::load(file.clone(), |e| e.position < 200).is_none(),
            "entry past segment end"
        );
        file.append(&[&[1, 2, 3]]).expect("append");
        assert!(
            ActiveIndex::<OffsetEntry>::load(file, |_| true).is_none(),
            "torn entry"
        );
    }

    #[test]
    fn time_floor_is_before_target() {
        let disk = MemoryStorage::new();
        let file = disk.open(Path::new("/t"), true).expect("open");
        let mut index = ActiveIndex::<TimeEntry>::empty(file.clone()).expect("empty");
        index.append(TimeEntry {
            timestamp: 100,
            relative_offset: 0,
        });
        index.append(TimeEntry {
            timestamp: 200,
            relative_offset: 5,
        });
        for (target, want) in [(50, None), (150, Some(0)), (200, Some(0)), (201, Some(5))] {
            let pred = |e: &TimeEntry| e.timestamp < target;
            assert_eq!(
                memory_floor(index.entries(), pred).map(|e| e.relative_offset),
                want
            );
            let (_, last) = file_partition_point(file.as_ref(), pred).expect("file");
            assert_eq!(last.map(|e| e.relative_offset), want);
        }
    }

    #[test]
    fn truncating_a_file_keeps_the_entries_before_the_cut() {
        let disk = MemoryStorage::new();
        let file = disk.open(Path::new("/i"), true).expect("open");
        let mut index = ActiveIndex::<OffsetEntry>::empty(file.clone()).expect("empty");
        for (rel, pos) in [(1, 100), (10, 200), (20, 300)] {
            index.append(OffsetEntry {
                relative_offset: rel,
                position: pos,
            });
        }
        file.append(&[&[9, 9, 9]]).expect("a torn entry");
        truncate_file::<OffsetEntry>(file.as_ref(), |e| e.position < 1000).expect("truncate");
        assert_eq!(file.len().expect("len"), 24, "only the torn entry goes");
        truncate_file::<OffsetEntry>(file.as_ref(), |e| e.position < 300).expect("truncate");
        let kept = ActiveIndex::<OffsetEntry>::load(file.clone(), |_| true).expect("valid");
        assert_eq!(
            kept.entries()
                .iter()
                .map(|e| e.relative_offset)
                .collect::<Vec<_>>(),
            vec![1, 10]
        );
        truncate_file::<OffsetEntry>(file.as_ref(), |e| e.position < 100).expect("truncate");
        assert_eq!(file.len().expect("len"), 0);
    }

    #[test]
    fn a_failed_index_write_keeps_memory_and_a_valid_file_prefix() {
        let disk = MemoryStorage::new();
        let file = disk.open(Path::new("/i"), true).expect("open");
        let mut index = ActiveIndex::<OffsetEntry>::empty(file.clone()).expect("empty");
        index.append(OffsetEntry {
            relative_offset: 1,
            position: 10,
        });
        disk.set_capacity(Some(disk.used_bytes() + 3));
        index.append(OffsetEntry {
            relative_offset: 2,
            position: 20,
        });
        index.append(OffsetEntry {
            relative_offset: 3,
            position: 30,
        });
        assert_eq!(index.entries().len(), 3);
        assert_eq!(file.len().expect("len"), 8, "the torn entry was cut off");
    }
}
