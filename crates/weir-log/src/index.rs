//! Sparse per-segment indexes: offset → file position, and timestamp → offset.
//!
//! Both live in memory for lookups and are appended to their files as entries are added. On
//! load an index file is checked entry by entry; a file that is missing, torn or inconsistent
//! with its segment is reported as damaged so the segment rebuilds it from the log.

use std::sync::Arc;

use crate::storage::StorageFile;

/// Bytes per offset-index entry: relative offset (u32) and position (u32).
pub const OFFSET_ENTRY_BYTES: usize = 8;
/// Bytes per time-index entry: timestamp (i64) and relative offset (u32).
pub const TIME_ENTRY_BYTES: usize = 12;

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

/// The sparse offset index of one segment.
pub struct OffsetIndex {
    entries: Vec<OffsetEntry>,
    file: Arc<dyn StorageFile>,
}

/// The sparse time index of one segment.
pub struct TimeIndex {
    entries: Vec<TimeEntry>,
    file: Arc<dyn StorageFile>,
}

fn read_all(file: &dyn StorageFile, entry_bytes: usize) -> Option<Vec<u8>> {
    let len = file.len().ok()? as usize;
    if !len.is_multiple_of(entry_bytes) {
        return None;
    }
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0).ok()?;
    Some(buf)
}

fn be_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(word)
}

fn be_i64(bytes: &[u8]) -> i64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    i64::from_be_bytes(word)
}

impl OffsetIndex {
    /// An empty index over a (possibly non-empty) file that the caller will rebuild.
    pub fn empty(file: Arc<dyn StorageFile>) -> std::io::Result<OffsetIndex> {
        file.truncate(0)?;
        Ok(OffsetIndex {
            entries: Vec::new(),
            file,
        })
    }

    /// Loads the index from its file; `None` when the file is torn or its entries are not
    /// strictly increasing or point beyond `segment_bytes`.
    pub fn load(file: Arc<dyn StorageFile>, segment_bytes: u64) -> Option<OffsetIndex> {
        let raw = read_all(file.as_ref(), OFFSET_ENTRY_BYTES)?;
        let mut entries: Vec<OffsetEntry> = Vec::with_capacity(raw.len() / OFFSET_ENTRY_BYTES);
        for chunk in raw.chunks_exact(OFFSET_ENTRY_BYTES) {
            let entry = OffsetEntry {
                relative_offset: be_u32(&chunk[0..4]),
                position: be_u32(&chunk[4..8]),
            };
            if u64::from(entry.position) >= segment_bytes {
                return None;
            }
            if let Some(prev) = entries.last() {
                if entry.relative_offset <= prev.relative_offset || entry.position <= prev.position
                {
                    return None;
                }
            }
            entries.push(entry);
        }
        Some(OffsetIndex { entries, file })
    }

    /// Adds an entry; entries must arrive in increasing offset and position.
    pub fn append(&mut self, entry: OffsetEntry) -> std::io::Result<()> {
        if let Some(prev) = self.entries.last() {
            assert!(entry.relative_offset > prev.relative_offset && entry.position > prev.position);
        }
        let mut bytes = [0u8; OFFSET_ENTRY_BYTES];
        bytes[0..4].copy_from_slice(&entry.relative_offset.to_be_bytes());
        bytes[4..8].copy_from_slice(&entry.position.to_be_bytes());
        self.file.append(&bytes)?;
        self.entries.push(entry);
        Ok(())
    }

    /// The last entry at or before `relative_offset`: where a scan for it should start.
    pub fn lookup(&self, relative_offset: u32) -> Option<OffsetEntry> {
        let idx = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        idx.checked_sub(1).map(|i| self.entries[i])
    }

    /// Drops entries whose position is at or beyond `position` (after a log truncation).
    pub fn truncate_to_position(&mut self, position: u32) -> std::io::Result<()> {
        let keep = self.entries.partition_point(|e| e.position < position);
        self.entries.truncate(keep);
        self.file.truncate((keep * OFFSET_ENTRY_BYTES) as u64)
    }

    /// Makes the index file durable.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync()
    }

    /// The index file, for syncing outside the log's lock.
    pub fn file(&self) -> Arc<dyn StorageFile> {
        self.file.clone()
    }
}

impl TimeIndex {
    /// An empty index over a file that the caller will rebuild.
    pub fn empty(file: Arc<dyn StorageFile>) -> std::io::Result<TimeIndex> {
        file.truncate(0)?;
        Ok(TimeIndex {
            entries: Vec::new(),
            file,
        })
    }

    /// Loads the index; `None` when torn or when timestamps or offsets go backwards.
    pub fn load(file: Arc<dyn StorageFile>) -> Option<TimeIndex> {
        let raw = read_all(file.as_ref(), TIME_ENTRY_BYTES)?;
        let mut entries: Vec<TimeEntry> = Vec::with_capacity(raw.len() / TIME_ENTRY_BYTES);
        for chunk in raw.chunks_exact(TIME_ENTRY_BYTES) {
            let entry = TimeEntry {
                timestamp: be_i64(&chunk[0..8]),
                relative_offset: be_u32(&chunk[8..12]),
            };
            if let Some(prev) = entries.last() {
                if entry.timestamp <= prev.timestamp || entry.relative_offset < prev.relative_offset
                {
                    return None;
                }
            }
            entries.push(entry);
        }
        Some(TimeIndex { entries, file })
    }

    /// Adds an entry with a larger timestamp than any before it.
    pub fn append(&mut self, entry: TimeEntry) -> std::io::Result<()> {
        if let Some(prev) = self.entries.last() {
            assert!(
                entry.timestamp > prev.timestamp && entry.relative_offset >= prev.relative_offset
            );
        }
        let mut bytes = [0u8; TIME_ENTRY_BYTES];
        bytes[0..8].copy_from_slice(&entry.timestamp.to_be_bytes());
        bytes[8..12].copy_from_slice(&entry.relative_offset.to_be_bytes());
        self.file.append(&bytes)?;
        self.entries.push(entry);
        Ok(())
    }

    /// The relative offset from which a scan for the first timestamp ≥ `timestamp` may start:
    /// the offset of the last entry whose timestamp is below it.
    pub fn scan_start(&self, timestamp: i64) -> Option<u32> {
        let idx = self.entries.partition_point(|e| e.timestamp < timestamp);
        idx.checked_sub(1).map(|i| self.entries[i].relative_offset)
    }

    /// Drops entries for offsets at or beyond `relative_offset`.
    pub fn truncate_to_offset(&mut self, relative_offset: u32) -> std::io::Result<()> {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        self.entries.truncate(keep);
        self.file.truncate((keep * TIME_ENTRY_BYTES) as u64)
    }

    /// The newest entry, if any.
    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// Makes the index file durable.
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync()
    }

    /// The index file, for syncing outside the log's lock.
    pub fn file(&self) -> Arc<dyn StorageFile> {
        self.file.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{PowerLossStorage, Storage};
    use std::path::Path;

    #[test]
    fn offset_lookup_finds_floor_entry() {
        let disk = PowerLossStorage::new();
        let file = disk.open(Path::new("/i"), true).expect("open");
        let mut index = OffsetIndex::empty(file.clone()).expect("empty");
        for (rel, pos) in [(0, 0), (10, 100), (20, 250)] {
            index
                .append(OffsetEntry {
                    relative_offset: rel,
                    position: pos,
                })
                .expect("append");
        }
        let cases = [
            (0, Some(0)),
            (9, Some(0)),
            (10, Some(100)),
            (19, Some(100)),
            (99, Some(250)),
        ];
        for (target, want) in cases {
            assert_eq!(
                index.lookup(target).map(|e| e.position),
                want,
                "target {target}"
            );
        }
        let reloaded = OffsetIndex::load(file.clone(), 1000).expect("valid file");
        assert_eq!(reloaded.lookup(15).map(|e| e.position), Some(100));
        assert!(
            OffsetIndex::load(file.clone(), 200).is_none(),
            "entry past segment end"
        );
        file.append(&[1, 2, 3]).expect("append");
        assert!(OffsetIndex::load(file, 1000).is_none(), "torn entry");
    }

    #[test]
    fn time_scan_start_is_before_target() {
        let disk = PowerLossStorage::new();
        let file = disk.open(Path::new("/t"), true).expect("open");
        let mut index = TimeIndex::empty(file).expect("empty");
        index
            .append(TimeEntry {
                timestamp: 100,
                relative_offset: 0,
            })
            .expect("append");
        index
            .append(TimeEntry {
                timestamp: 200,
                relative_offset: 5,
            })
            .expect("append");
        assert_eq!(index.scan_start(50), None);
        assert_eq!(index.scan_start(150), Some(0));
        assert_eq!(index.scan_start(200), Some(0));
        assert_eq!(index.scan_start(201), Some(5));
    }
}
