//! One segment: a `.log` file of record batches plus its sparse `.index` and `.timeindex`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{validate_batch, BatchHeader, BATCH_HEADER_BYTES};
use crate::index::{OffsetEntry, OffsetIndex, TimeEntry, TimeIndex};
use crate::storage::{Storage, StorageFile};
use crate::LogError;

/// Largest segment file Weir writes: positions in the offset index are `u32`.
pub const SEGMENT_BYTES_LIMIT: u64 = i32::MAX as u64;

/// The three file names of the segment starting at `base_offset`.
pub(crate) fn segment_paths(dir: &Path, base_offset: i64) -> [PathBuf; 3] {
    let stem = format!("{base_offset:020}");
    [
        dir.join(format!("{stem}.log")),
        dir.join(format!("{stem}.index")),
        dir.join(format!("{stem}.timeindex")),
    ]
}

/// A batch found by a scan: its header and where it starts in the segment file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchLocation {
    pub header: BatchHeader,
    pub position: u64,
}

pub(crate) struct Segment {
    /// Offset of the first batch this segment may hold; also its file name.
    pub base_offset: i64,
    log: Arc<dyn StorageFile>,
    index: OffsetIndex,
    time_index: TimeIndex,
    /// Bytes in the `.log` file that belong to whole, valid batches.
    pub size_bytes: u64,
    /// One past the last offset stored here (`base_offset` when empty).
    pub next_offset: i64,
    /// Largest batch max-timestamp stored here, -1 when empty.
    pub max_timestamp: i64,
    /// Base offset of the batch that carried `max_timestamp`.
    pub max_timestamp_batch_offset: i64,
    bytes_since_index_entry: u64,
    /// Broker clock time when the segment was created or opened, for `segment.ms`.
    pub created_ms: i64,
}

impl Segment {
    /// Creates a new empty segment's files.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: i64,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let [log_path, index_path, time_path] = segment_paths(dir, base_offset);
        let log = storage.open(&log_path, true)?;
        log.truncate(0)?;
        Ok(Segment {
            base_offset,
            log,
            index: OffsetIndex::empty(storage.open(&index_path, true)?)?,
            time_index: TimeIndex::empty(storage.open(&time_path, true)?)?,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            max_timestamp_batch_offset: -1,
            bytes_since_index_entry: 0,
            created_ms: now_ms,
        })
    }

    /// Opens an existing segment whose content is trusted (before the recovery point). Indexes
    /// that fail their checks are rebuilt by a full scan.
    pub fn open_trusted(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: i64,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let [log_path, index_path, time_path] = segment_paths(dir, base_offset);
        let log = storage.open(&log_path, false)?;
        let size_bytes = log.len()?;
        let index_file = storage.open(&index_path, true)?;
        let time_file = storage.open(&time_path, true)?;
        let loaded = OffsetIndex::load(index_file.clone(), size_bytes.max(1))
            .zip(TimeIndex::load(time_file.clone()));
        let Some((index, time_index)) = loaded else {
            tracing::warn!(target: "weir::log", segment = %log_path.display(), "index damaged or missing, rebuilding");
            let mut segment = Segment::open_for_recovery(storage, dir, base_offset, now_ms)?;
            segment.recover(u64::MAX, &mut |_| {})?;
            return Ok(segment);
        };
        let mut segment = Segment {
            base_offset,
            log,
            index,
            time_index,
            size_bytes,
            next_offset: base_offset,
            max_timestamp: -1,
            max_timestamp_batch_offset: -1,
            bytes_since_index_entry: 0,
            created_ms: now_ms,
        };
        let tail_from = match segment.time_index.last() {
            Some(entry) => {
                segment.max_timestamp = entry.timestamp;
                segment
                    .index
                    .lookup(entry.relative_offset)
                    .map_or(0, |e| u64::from(e.position))
            }
            None => 0,
        };
        let mut position = tail_from;
        while position < size_bytes {
            let header = segment.header_at(position)?;
            segment.note_batch(&header);
            position += header.total_bytes() as u64;
        }
        Ok(segment)
    }

    /// Opens an existing segment with empty indexes, to be filled by [`Segment::recover`].
    pub fn open_for_recovery(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: i64,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let [log_path, index_path, time_path] = segment_paths(dir, base_offset);
        let log = storage.open(&log_path, false)?;
        let size_bytes = log.len()?;
        Ok(Segment {
            base_offset,
            log,
            index: OffsetIndex::empty(storage.open(&index_path, true)?)?,
            time_index: TimeIndex::empty(storage.open(&time_path, true)?)?,
            size_bytes,
            next_offset: base_offset,
            max_timestamp: -1,
            max_timestamp_batch_offset: -1,
            bytes_since_index_entry: 0,
            created_ms: now_ms,
        })
    }

    fn note_batch(&mut self, header: &BatchHeader) {
        self.next_offset = header.last_offset() + 1;
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.max_timestamp_batch_offset = header.base_offset;
        }
    }

    /// Validates every batch from the start, rebuilding both indexes, and truncates at the
    /// first torn or corrupt batch. Calls `on_batch` for every valid batch in order.
    /// Returns the number of bytes truncated.
    pub fn recover(
        &mut self,
        index_interval_bytes: u64,
        on_batch: &mut dyn FnMut(&BatchHeader),
    ) -> Result<u64, LogError> {
        let file_bytes = self.log.len()?;
        self.size_bytes = 0;
        self.next_offset = self.base_offset;
        let mut position = 0u64;
        let mut buf = Vec::new();
        while position < file_bytes {
            let Some(header) = self.valid_batch_at(position, file_bytes, &mut buf) else {
                break;
            };
            if header.base_offset < self.next_offset {
                break;
            }
            self.index_batch(&header, position, index_interval_bytes)?;
            self.note_batch(&header);
            on_batch(&header);
            position += header.total_bytes() as u64;
            self.size_bytes = position;
        }
        let truncated = file_bytes - position;
        if truncated > 0 {
            self.log.truncate(position)?;
        }
        Ok(truncated)
    }

    fn valid_batch_at(
        &self,
        position: u64,
        file_bytes: u64,
        buf: &mut Vec<u8>,
    ) -> Option<BatchHeader> {
        if file_bytes - position < BATCH_HEADER_BYTES as u64 {
            return None;
        }
        let header = self.header_at(position).ok()?;
        let total = header.total_bytes() as u64;
        if header.batch_length <= 0 || total > file_bytes - position {
            return None;
        }
        buf.resize(total as usize, 0);
        self.log.read_exact_at(buf, position).ok()?;
        validate_batch(buf).ok()
    }

    fn header_at(&self, position: u64) -> Result<BatchHeader, LogError> {
        let mut raw = [0u8; BATCH_HEADER_BYTES];
        self.log.read_exact_at(&mut raw, position)?;
        BatchHeader::parse(&raw).map_err(|_| LogError::Corrupt { position })
    }

    fn index_batch(
        &mut self,
        header: &BatchHeader,
        position: u64,
        index_interval_bytes: u64,
    ) -> Result<(), LogError> {
        if position > 0 && self.bytes_since_index_entry >= index_interval_bytes {
            let relative_offset = (header.base_offset - self.base_offset) as u32;
            self.index.append(OffsetEntry {
                relative_offset,
                position: position as u32,
            })?;
            let newest_indexed = self.time_index.last().map_or(-1, |e| e.timestamp);
            if self.max_timestamp > newest_indexed {
                self.time_index.append(TimeEntry {
                    timestamp: self.max_timestamp,
                    relative_offset,
                })?;
            }
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += header.total_bytes() as u64;
        Ok(())
    }

    /// Appends one validated, patched batch.
    pub fn append(
        &mut self,
        header: &BatchHeader,
        bytes: &[u8],
        index_interval_bytes: u64,
    ) -> Result<(), LogError> {
        assert!(
            header.base_offset >= self.next_offset,
            "offsets must strictly increase"
        );
        assert_eq!(bytes.len(), header.total_bytes());
        let position = self.size_bytes;
        self.log.append(bytes)?;
        self.index_batch(header, position, index_interval_bytes)?;
        self.note_batch(header);
        self.size_bytes += bytes.len() as u64;
        Ok(())
    }

    /// The first batch whose last offset is ≥ `offset`, scanning from the index.
    pub fn locate(&self, offset: i64) -> Result<Option<BatchLocation>, LogError> {
        let relative =
            (offset.max(self.base_offset) - self.base_offset).min(i64::from(u32::MAX)) as u32;
        let mut position = self
            .index
            .lookup(relative)
            .map_or(0, |e| u64::from(e.position));
        while position < self.size_bytes {
            let header = self.header_at(position)?;
            if header.last_offset() >= offset {
                return Ok(Some(BatchLocation { header, position }));
            }
            position += header.total_bytes() as u64;
        }
        Ok(None)
    }

    /// Reads whole batches starting at `position`: as many as fit in `max_bytes`, but always
    /// the first one, and none whose last offset is ≥ `upper_offset`.
    pub fn read_from(
        &self,
        position: u64,
        max_bytes: u64,
        upper_offset: i64,
    ) -> Result<Bytes, LogError> {
        let available = self.size_bytes.saturating_sub(position);
        if available == 0 {
            return Ok(Bytes::new());
        }
        // One read of up to `max_bytes` (but at least the first batch), then whole batches are
        // kept by walking their headers in memory: one syscall per fetch, not one per batch.
        let first = self.header_at(position)?;
        if first.last_offset() >= upper_offset {
            return Ok(Bytes::new());
        }
        let want = max_bytes.max(first.total_bytes() as u64).min(available);
        let mut buf = vec![0u8; want as usize];
        self.log.read_exact_at(&mut buf, position)?;
        let mut end = 0usize;
        while buf.len() - end >= BATCH_HEADER_BYTES {
            let header = BatchHeader::parse(&buf[end..]).map_err(|_| LogError::Corrupt {
                position: position + end as u64,
            })?;
            let batch_end = end + header.total_bytes();
            if header.last_offset() >= upper_offset
                || batch_end > buf.len()
                || header.batch_length <= 0
            {
                break;
            }
            end = batch_end;
        }
        buf.truncate(end);
        Ok(Bytes::from(buf))
    }

    /// Reads the one batch at `location`.
    pub fn read_batch(&self, location: &BatchLocation) -> Result<Bytes, LogError> {
        let mut buf = vec![0u8; location.header.total_bytes()];
        self.log.read_exact_at(&mut buf, location.position)?;
        Ok(Bytes::from(buf))
    }

    /// The first batch whose max timestamp is ≥ `timestamp`.
    pub fn find_timestamp(&self, timestamp: i64) -> Result<Option<BatchLocation>, LogError> {
        if self.max_timestamp < timestamp {
            return Ok(None);
        }
        let start = self
            .time_index
            .scan_start(timestamp)
            .map_or(self.base_offset, |rel| self.base_offset + i64::from(rel));
        let Some(mut location) = self.locate(start)? else {
            return Ok(None);
        };
        loop {
            if location.header.max_timestamp >= timestamp {
                return Ok(Some(location));
            }
            let next = location.position + location.header.total_bytes() as u64;
            if next >= self.size_bytes {
                return Ok(None);
            }
            location = BatchLocation {
                header: self.header_at(next)?,
                position: next,
            };
        }
    }

    /// Removes every batch with an offset ≥ `offset` (whole batches only).
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        let cut = match self.locate(offset)? {
            Some(loc) if loc.header.base_offset >= offset => loc.position,
            Some(loc) => loc.position + loc.header.total_bytes() as u64,
            None => return Ok(()),
        };
        self.log.truncate(cut)?;
        self.index.truncate_to_position(cut as u32)?;
        self.time_index
            .truncate_to_offset((offset - self.base_offset).max(0) as u32)?;
        self.size_bytes = cut;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        let mut position = 0;
        while position < cut {
            let header = self.header_at(position)?;
            self.note_batch(&header);
            position += header.total_bytes() as u64;
        }
        Ok(())
    }

    /// Every file handle with writes to make durable.
    pub fn sync_handles(&self) -> Vec<Arc<dyn StorageFile>> {
        vec![self.log.clone()]
    }

    /// The log and both index files, for syncing a rolled segment outside the lock.
    pub fn all_handles(&self) -> Vec<Arc<dyn StorageFile>> {
        vec![self.log.clone(), self.index.file(), self.time_index.file()]
    }

    /// Makes the segment's log and index files durable.
    pub fn sync_all(&self) -> Result<(), LogError> {
        self.log.sync()?;
        self.index.sync()?;
        self.time_index.sync()?;
        Ok(())
    }

    /// Deletes the segment's files.
    pub fn delete(self, storage: &dyn Storage, dir: &Path) -> Result<(), LogError> {
        for path in segment_paths(dir, self.base_offset) {
            storage.remove(&path)?;
        }
        Ok(())
    }
}
