//! One segment: a `.log` file of record batches plus its sparse `.index` and `.timeindex`,
//! and a `.txnindex` of the transactions it aborted ([`crate::txn_index`]).
//!
//! Only the active (last) segment keeps its files open and its indexes in memory; the others
//! are reopened through the [`FileCache`] when read, so neither open files nor memory grow with
//! the number of segments.

use std::path::Path;
use std::sync::Arc;

use weir_storage::{FileCache, FileIdentity, FileRef, Storage, StorageFile};

use crate::batch::{
    check_stored_header_fields, BatchHeader, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES,
};
use crate::index::{
    file_partition_point, memory_floor, truncate_file, ActiveIndex, OffsetEntry, TimeEntry,
};
use crate::txn_index::TxnIndex;
use crate::LogError;

/// Largest segment file Weir writes: positions in the offset index are `u32`, and a batch
/// starts below this position.
pub const SEGMENT_BYTES_LIMIT: u64 = i32::MAX as u64;
/// Largest offset relative to the segment base that a segment holds; the log rolls before an
/// append would pass it (Kafka rolls at `Int.MaxValue` too).
pub const RELATIVE_OFFSET_MAX: i64 = i32::MAX as i64;
/// Bytes read at once when walking batch headers or checking a stored batch's CRC.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// The files of the segment starting at `base_offset`.
#[derive(Debug, Clone)]
pub(crate) struct SegmentPaths {
    pub log: Arc<Path>,
    pub index: Arc<Path>,
    pub time_index: Arc<Path>,
    /// The aborted-transaction index, present once the segment holds an abort marker (the
    /// cleaner's copy always has one, written whole, with the entries of the markers it kept).
    pub txn_index: Arc<Path>,
}

impl SegmentPaths {
    pub fn new(dir: &Path, base_offset: i64) -> SegmentPaths {
        SegmentPaths::with_suffix(dir, base_offset, "")
    }

    /// The paths with `.suffix` appended (the cleaner's `N.log.cleaned`); none when empty.
    pub fn with_suffix(dir: &Path, base_offset: i64, suffix: &str) -> SegmentPaths {
        let stem = format!("{base_offset:020}");
        let tail = if suffix.is_empty() {
            String::new()
        } else {
            format!(".{suffix}")
        };
        let path = |ext: &str| -> Arc<Path> { Arc::from(dir.join(format!("{stem}.{ext}{tail}"))) };
        SegmentPaths {
            log: path("log"),
            index: path("index"),
            time_index: path("timeindex"),
            txn_index: path("txnindex"),
        }
    }

    /// The log, offset index and time index paths.
    pub fn all(&self) -> [&Arc<Path>; 3] {
        [&self.log, &self.index, &self.time_index]
    }

    /// Every file's path: the log, offset index, time index and aborted-transaction index.
    pub fn with_txn_index(&self) -> [&Arc<Path>; 4] {
        [&self.log, &self.index, &self.time_index, &self.txn_index]
    }

    /// Deletes the segment's files, dropping their cached handles before and after.
    pub fn remove(&self, files: &FileCache) -> std::io::Result<()> {
        for path in self.with_txn_index() {
            files.forget(path);
            files.storage().remove(path)?;
            files.forget(path);
        }
        Ok(())
    }
}

/// What the active segment keeps open.
struct ActiveFiles {
    log: Arc<dyn StorageFile>,
    index: ActiveIndex<OffsetEntry>,
    time_index: ActiveIndex<TimeEntry>,
}

/// A segment's files, opened.
struct SegmentFiles {
    log: Arc<dyn StorageFile>,
    index: Arc<dyn StorageFile>,
    time_index: Arc<dyn StorageFile>,
    txn_index: TxnIndex,
}

impl SegmentFiles {
    /// Opens the existing log file at `paths` and its indexes (created when missing, but the
    /// aborted-transaction index, created with its first entry).
    fn open(storage: &dyn Storage, paths: &SegmentPaths) -> Result<SegmentFiles, LogError> {
        Ok(SegmentFiles {
            log: storage.open(&paths.log, false)?,
            index: storage.open(&paths.index, true)?,
            time_index: storage.open(&paths.time_index, true)?,
            txn_index: TxnIndex::open(storage, paths.txn_index.clone())?,
        })
    }
}

/// A planned cut of one segment ([`Segment::plan_cut`]): its files, already opened, and where
/// its first batch to remove starts. Planning reads only, so a truncation that cannot open or
/// read the files is refused before anything changed.
pub(crate) struct SegmentCut {
    files: SegmentFiles,
    /// Byte position and offset relative to the segment base of the first batch removed;
    /// `None` when every batch stays.
    at: Option<(u64, u32)>,
}

pub(crate) struct Segment {
    /// Offset of the first batch this segment may hold; also its file name.
    pub base_offset: i64,
    pub paths: SegmentPaths,
    /// `Some` for the active segment.
    active: Option<ActiveFiles>,
    /// Bytes in the `.log` file that belong to whole, valid batches.
    pub size_bytes: u64,
    /// One past the last offset stored here (`base_offset` when empty).
    pub next_offset: i64,
    /// Largest record timestamp stored here, -1 when empty.
    pub max_timestamp: i64,
    bytes_since_index_entry: u64,
    /// Broker clock time when the segment was created or opened, for `segment.ms`.
    pub created_ms: i64,
    /// When the segment was last written: what retention goes by when no record has a
    /// timestamp (`max_timestamp` -1), as Kafka uses the file's modification time.
    pub last_write_ms: i64,
    /// Inactive segments: the identities of the log, offset index and time index files, so a
    /// reader planned on them never reads files swapped in at the same paths (the cleaner's).
    identities: [Option<FileIdentity>; 3],
    /// The transactions aborted by markers in this segment.
    pub txn_index: TxnIndex,
}

/// Where a scan for an offset may start: known from memory, or to be found by searching an
/// inactive segment's index file (outside the log's lock).
#[derive(Clone)]
pub enum PositionHint {
    /// A byte position at or before the batch sought.
    Known(u64),
    /// Search the offset index file for the last entry at or before `relative_offset`.
    OffsetIndex {
        /// The index file.
        index: FileRef,
        /// Target offset relative to the segment base.
        relative_offset: u32,
    },
    /// Search the time index for the last entry before `timestamp`, then the offset index.
    TimeIndex {
        /// The time index file.
        time_index: FileRef,
        /// The offset index file.
        index: FileRef,
        /// Target timestamp.
        timestamp: i64,
    },
}

impl PositionHint {
    /// The position a forward scan should start from. Reads index files for inactive segments.
    pub fn resolve(&self) -> Result<u64, LogError> {
        let offset_position = |index: &FileRef, relative_offset: u32| -> Result<u64, LogError> {
            let file = index.resolve()?;
            let (_, entry) = file_partition_point::<OffsetEntry>(file.as_ref(), |e| {
                e.relative_offset <= relative_offset
            })?;
            Ok(entry.map_or(0, |e| u64::from(e.position)))
        };
        match self {
            PositionHint::Known(position) => Ok(*position),
            PositionHint::OffsetIndex {
                index,
                relative_offset,
            } => offset_position(index, *relative_offset),
            PositionHint::TimeIndex {
                time_index,
                index,
                timestamp,
            } => {
                let file = time_index.resolve()?;
                let (_, entry) =
                    file_partition_point::<TimeEntry>(file.as_ref(), |e| e.timestamp < *timestamp)?;
                match entry {
                    Some(e) => offset_position(index, e.relative_offset),
                    None => Ok(0),
                }
            }
        }
    }
}

fn corrupt(position: u64) -> LogError {
    LogError::Corrupt { position }
}

/// Walks batch headers forward from a position up to an end, reading in chunks.
pub(crate) struct HeaderWalker<'a> {
    file: &'a dyn StorageFile,
    position: u64,
    end: u64,
    buffer: Vec<u8>,
    buffer_start: u64,
}

impl<'a> HeaderWalker<'a> {
    pub fn new(file: &'a dyn StorageFile, from: u64, end: u64) -> HeaderWalker<'a> {
        HeaderWalker {
            file,
            position: from,
            end,
            buffer: Vec::new(),
            buffer_start: 0,
        }
    }

    /// The next batch header and its position; `None` at the end. A header that does not parse,
    /// or a batch that would run past the end, is corruption.
    pub fn next_batch(&mut self) -> Result<Option<(BatchHeader, u64)>, LogError> {
        if self.position >= self.end {
            return Ok(None);
        }
        let position = self.position;
        if self.end - position < BATCH_HEADER_BYTES as u64 {
            return Err(corrupt(position));
        }
        let buffered_end = self.buffer_start + self.buffer.len() as u64;
        if position < self.buffer_start || position + BATCH_HEADER_BYTES as u64 > buffered_end {
            let want = (self.end - position).min(READ_CHUNK_BYTES as u64) as usize;
            self.buffer.resize(want, 0);
            self.file.read_exact_at(&mut self.buffer, position)?;
            self.buffer_start = position;
        }
        let at = (position - self.buffer_start) as usize;
        let header = BatchHeader::parse(&self.buffer[at..]).ok_or_else(|| corrupt(position))?;
        let total = header.total_bytes();
        if header.batch_length < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32
            || total > self.end - position
        {
            return Err(corrupt(position));
        }
        self.position = position + total;
        Ok(Some((header, position)))
    }

    /// Where the next batch starts.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The file's bytes `[position, position + length)` if the walk already read them.
    pub fn buffered(&self, position: u64, length: u64) -> Option<&[u8]> {
        let start = position.checked_sub(self.buffer_start)? as usize;
        let end = start.checked_add(length as usize)?;
        self.buffer.get(start..end)
    }
}

/// True when the stored batch at `position` (whose header is `header`) carries a correct
/// CRC-32C; computed in chunks so a damaged length cannot force a large allocation.
fn stored_crc_matches(
    file: &dyn StorageFile,
    position: u64,
    header: &BatchHeader,
    buffer: &mut Vec<u8>,
) -> Result<bool, LogError> {
    let mut at = position + weir_codec::layout::ATTRIBUTES_AT as u64;
    let end = position + header.total_bytes();
    let mut crc = 0u32;
    while at < end {
        let n = (end - at).min(READ_CHUNK_BYTES as u64) as usize;
        buffer.resize(n, 0);
        file.read_exact_at(buffer, at)?;
        crc = crc32c::crc32c_append(crc, buffer);
        at += n as u64;
    }
    Ok(crc == header.crc)
}

impl Segment {
    fn with_files(
        base_offset: i64,
        paths: SegmentPaths,
        files: ActiveFiles,
        txn_index: TxnIndex,
        now_ms: i64,
    ) -> Segment {
        Segment {
            base_offset,
            paths,
            active: Some(files),
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            bytes_since_index_entry: 0,
            created_ms: now_ms,
            last_write_ms: now_ms,
            identities: [None; 3],
            txn_index,
        }
    }

    /// Creates a new empty segment's files. Their directory entries become durable with the
    /// log's next flush. On failure nothing is left behind.
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: i64,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        Segment::create_at(
            storage,
            SegmentPaths::new(dir, base_offset),
            base_offset,
            now_ms,
        )
    }

    /// Creates a new empty segment's files at `paths` (the cleaner writes its copies under
    /// other names first). On failure nothing is left behind.
    pub fn create_at(
        storage: &dyn Storage,
        paths: SegmentPaths,
        base_offset: i64,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let opened = (|| -> std::io::Result<ActiveFiles> {
            // A new segment aborted nothing yet, whatever a file left at its path says.
            storage.remove(&paths.txn_index)?;
            let log = storage.open(&paths.log, true)?;
            log.truncate(0)?;
            Ok(ActiveFiles {
                log,
                index: ActiveIndex::empty(storage.open(&paths.index, true)?)?,
                time_index: ActiveIndex::empty(storage.open(&paths.time_index, true)?)?,
            })
        })();
        match opened {
            Ok(files) => {
                let txn_index = TxnIndex::empty(paths.txn_index.clone());
                Ok(Segment::with_files(
                    base_offset,
                    paths,
                    files,
                    txn_index,
                    now_ms,
                ))
            }
            Err(error) => {
                for path in paths.all() {
                    let _ = storage.remove(path);
                }
                Err(error.into())
            }
        }
    }

    /// Opens an existing segment at startup. A `trusted` segment (below the recovery point)
    /// keeps its indexes when they pass their checks; otherwise, or when its content turns out
    /// inconsistent, every batch is validated, both indexes are rebuilt and a torn or corrupt
    /// tail is cut off. Returns the segment (active: files open) and the bytes cut.
    pub fn open(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: i64,
        now_ms: i64,
        trusted: bool,
        index_interval_bytes: u64,
    ) -> Result<(Segment, u64), LogError> {
        let paths = SegmentPaths::new(dir, base_offset);
        let files = SegmentFiles::open(storage, &paths)?;
        Segment::load(
            base_offset,
            paths,
            files,
            now_ms,
            trusted,
            index_interval_bytes,
        )
    }

    /// [`Segment::open`] over files already opened.
    fn load(
        base_offset: i64,
        paths: SegmentPaths,
        files: SegmentFiles,
        now_ms: i64,
        trusted: bool,
        index_interval_bytes: u64,
    ) -> Result<(Segment, u64), LogError> {
        let SegmentFiles {
            log,
            index: index_file,
            time_index: time_file,
            txn_index,
        } = files;
        let mut txn_index = Some(txn_index);
        let size_bytes = log.len()?;
        let last_write_ms = log.modified_ms().unwrap_or(now_ms);
        if trusted {
            let in_segment = |e: &OffsetEntry| u64::from(e.position) < size_bytes.max(1);
            let loaded = ActiveIndex::load(index_file.clone(), in_segment)
                .zip(ActiveIndex::load(time_file.clone(), |_| true));
            if let Some((index, time_index)) = loaded {
                let files = ActiveFiles {
                    log: log.clone(),
                    index,
                    time_index,
                };
                let mut segment = Segment::with_files(
                    base_offset,
                    paths.clone(),
                    files,
                    txn_index.take().expect("taken once"),
                    now_ms,
                );
                segment.size_bytes = size_bytes;
                segment.last_write_ms = last_write_ms;
                if segment.scan_tail().is_ok() {
                    return Ok((segment, 0));
                }
                txn_index = Some(std::mem::replace(
                    &mut segment.txn_index,
                    TxnIndex::empty(paths.txn_index.clone()),
                ));
                tracing::error!(target: "weir::log", segment = %paths.log.display(), "segment below the recovery point is inconsistent; validating it");
            } else {
                tracing::warn!(target: "weir::log", segment = %paths.log.display(), "index damaged or missing, rebuilding");
            }
        }
        let files = ActiveFiles {
            log,
            index: ActiveIndex::empty(index_file)?,
            time_index: ActiveIndex::empty(time_file)?,
        };
        let txn_index = txn_index.unwrap_or_else(|| TxnIndex::empty(paths.txn_index.clone()));
        let mut segment = Segment::with_files(base_offset, paths, files, txn_index, now_ms);
        segment.last_write_ms = last_write_ms;
        let cut = segment.recover(index_interval_bytes)?;
        Ok((segment, cut))
    }

    /// Plans cutting the segment before its first batch holding an offset at or above `offset`
    /// (a batch that straddles `offset` goes whole): opens its files and finds that batch.
    /// Changes nothing.
    pub fn plan_cut(
        &self,
        storage: &dyn Storage,
        cache: &Arc<FileCache>,
        offset: i64,
    ) -> Result<SegmentCut, LogError> {
        let files = SegmentFiles::open(storage, &self.paths)?;
        let start = self.offset_hint(offset, cache).resolve()?;
        let mut walker = HeaderWalker::new(files.log.as_ref(), start, self.size_bytes);
        let mut at = None;
        while let Some((header, position)) = walker.next_batch()? {
            if header.last_offset() >= offset {
                at = Some((position, self.relative(header.base_offset)));
                break;
            }
        }
        Ok(SegmentCut { files, at })
    }

    /// Applies a cut planned on this segment: the log file is cut at the first removed batch
    /// and both index files to their entries for the batches before it. Returns the segment
    /// reopened as the active one, as after a clean restart (kept index entries are trusted;
    /// anything inconsistent is validated and rebuilt as recovery does), with the bytes such a
    /// recovery cut beyond. Nothing is fsynced; `self` is stale afterwards and is to be
    /// replaced.
    pub fn truncated(
        &self,
        cut: SegmentCut,
        now_ms: i64,
        index_interval_bytes: u64,
    ) -> Result<(Segment, u64), LogError> {
        let SegmentCut { files, at } = cut;
        if let Some((position, relative)) = at {
            files.log.truncate(position)?;
            truncate_file::<OffsetEntry>(files.index.as_ref(), |e| {
                u64::from(e.position) < position
            })?;
            truncate_file::<TimeEntry>(files.time_index.as_ref(), |e| {
                e.relative_offset < relative
            })?;
        }
        Segment::load(
            self.base_offset,
            self.paths.clone(),
            files,
            now_ms,
            true,
            index_interval_bytes,
        )
    }

    /// Fills `next_offset` and `max_timestamp` of a trusted segment from its time index and the
    /// batch headers after the last entry.
    fn scan_tail(&mut self) -> Result<(), LogError> {
        let files = self.active.as_ref().ok_or_else(|| corrupt(0))?;
        let (tail_from, max_timestamp) = match files.time_index.last() {
            Some(entry) => {
                let position = memory_floor(files.index.entries(), |e| {
                    e.relative_offset <= entry.relative_offset
                })
                .map_or(0, |e| u64::from(e.position));
                (position, entry.timestamp)
            }
            None => (0, -1),
        };
        let log = files.log.clone();
        self.max_timestamp = max_timestamp;
        let mut walker = HeaderWalker::new(log.as_ref(), tail_from, self.size_bytes);
        let mut previous_end = self.base_offset;
        let mut last_base = self.base_offset;
        while let Some((header, _)) = walker.next_batch()? {
            if header.base_offset < previous_end
                || header.last_offset() - self.base_offset > RELATIVE_OFFSET_MAX
            {
                return Err(corrupt(walker.position()));
            }
            previous_end = header.last_offset().saturating_add(1);
            last_base = header.base_offset;
            self.note_batch(&header);
        }
        // The indexes must point inside what the log holds, or a later append would find
        // entries out of order.
        let last_relative = (last_base - self.base_offset) as u32;
        let files = self.active.as_ref().ok_or_else(|| corrupt(0))?;
        let index_ok = files
            .index
            .last()
            .is_none_or(|e| e.relative_offset <= last_relative);
        let time_ok = files.time_index.last().is_none_or(|e| {
            e.relative_offset <= last_relative && e.timestamp <= self.max_timestamp
        });
        if !(index_ok && time_ok) {
            return Err(corrupt(0));
        }
        Ok(())
    }

    fn note_batch(&mut self, header: &BatchHeader) {
        self.next_offset = header.last_offset().saturating_add(1);
        self.max_timestamp = self.max_timestamp.max(header.max_timestamp);
    }

    /// Validates every batch from the start (length, magic, CRC, increasing offsets that fit the
    /// segment), rebuilding both indexes, and truncates at the first torn or corrupt batch.
    /// Returns the number of bytes truncated.
    fn recover(&mut self, index_interval_bytes: u64) -> Result<u64, LogError> {
        let Some(files) = &self.active else {
            return Ok(0);
        };
        let log = files.log.clone();
        let file_bytes = log.len()?;
        self.size_bytes = 0;
        self.next_offset = self.base_offset;
        let mut buffer = Vec::new();
        let mut walker = HeaderWalker::new(log.as_ref(), 0, file_bytes);
        let mut valid_end = 0u64;
        loop {
            let (header, position) = match walker.next_batch() {
                Ok(Some(found)) => found,
                // The end, or a torn or corrupt batch: what follows is cut off.
                Ok(None) | Err(LogError::Corrupt { .. }) => break,
                // A read that failed is not corruption: never cut data for it.
                Err(error) => return Err(error),
            };
            let fits = header.base_offset >= self.next_offset
                && header.last_offset() - self.base_offset <= RELATIVE_OFFSET_MAX
                && position < SEGMENT_BYTES_LIMIT;
            if !fits
                || check_stored_header_fields(&header).is_err()
                || !stored_crc_matches(log.as_ref(), position, &header, &mut buffer)?
            {
                break;
            }
            self.index_batch(&header, position, index_interval_bytes);
            self.note_batch(&header);
            valid_end = walker.position();
            self.size_bytes = valid_end;
        }
        let truncated = file_bytes - valid_end;
        if truncated > 0 {
            log.truncate(valid_end)?;
        }
        Ok(truncated)
    }

    fn index_batch(&mut self, header: &BatchHeader, position: u64, index_interval_bytes: u64) {
        let Some(files) = self.active.as_mut() else {
            return;
        };
        if position > 0 && self.bytes_since_index_entry >= index_interval_bytes {
            // Both fit: the log rolls before a relative offset or a position would overflow.
            let relative_offset = (header.base_offset - self.base_offset) as u32;
            files.index.append(OffsetEntry {
                relative_offset,
                position: position as u32,
            });
            let newest_indexed = files.time_index.last().map_or(-1, |e| e.timestamp);
            if self.max_timestamp > newest_indexed {
                files.time_index.append(TimeEntry {
                    timestamp: self.max_timestamp,
                    relative_offset,
                });
            }
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += header.total_bytes();
    }

    /// Appends one validated batch: its patched head then the rest, unchanged. When the write
    /// fails the file is cut back to the last whole batch, so a full disk leaves the log as it
    /// was; `header` is the batch as stored (assigned base offset, true max timestamp).
    pub fn append(
        &mut self,
        header: &BatchHeader,
        parts: &[&[u8]],
        index_interval_bytes: u64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        assert!(
            header.base_offset >= self.next_offset,
            "offsets must strictly increase"
        );
        let files = self
            .active
            .as_ref()
            .expect("appends go to the active segment, which has its files open");
        let position = self.size_bytes;
        if let Err(error) = files.log.append(parts) {
            // Undo a partial write; if even that fails the log cannot be trusted (fatal Io).
            files.log.truncate(position).map_err(LogError::Io)?;
            return Err(error.into());
        }
        self.index_batch(header, position, index_interval_bytes);
        self.note_batch(header);
        self.size_bytes += header.total_bytes();
        self.last_write_ms = now_ms;
        Ok(())
    }

    /// The time retention measures this segment's age from: its largest record timestamp, or,
    /// when no record has one, when it was last written.
    pub fn retention_time_ms(&self) -> i64 {
        if self.max_timestamp >= 0 {
            self.max_timestamp
        } else {
            self.last_write_ms
        }
    }

    /// True when either in-memory index is full and the segment must roll.
    pub fn indexes_full(&self) -> bool {
        self.active
            .as_ref()
            .is_some_and(|f| f.index.is_full() || f.time_index.is_full())
    }

    /// A reference to the `.log` file that does not keep it open.
    pub fn log_ref(&self, files: &Arc<FileCache>) -> FileRef {
        match (&self.active, self.identities[0]) {
            (None, Some(identity)) => {
                FileRef::expecting(self.paths.log.clone(), identity, files.clone())
            }
            (active, _) => FileRef::new(
                self.paths.log.clone(),
                active.as_ref().map(|f| Arc::downgrade(&f.log)),
                files.clone(),
            ),
        }
    }

    /// A reference to one of an inactive segment's files (0 log, 1 offset index, 2 time
    /// index), bound to the file it was when the segment was closed.
    fn inactive_ref(&self, which: usize, files: &Arc<FileCache>) -> FileRef {
        let path = self.paths.all()[which].clone();
        match self.identities[which] {
            Some(identity) => FileRef::expecting(path, identity, files.clone()),
            None => FileRef::new(path, None, files.clone()),
        }
    }

    fn relative(&self, offset: i64) -> u32 {
        (offset.max(self.base_offset) - self.base_offset).min(i64::from(u32::MAX)) as u32
    }

    /// Where a scan for the batch holding `offset` may start.
    pub fn offset_hint(&self, offset: i64, files: &Arc<FileCache>) -> PositionHint {
        let relative_offset = self.relative(offset);
        match &self.active {
            Some(active) => PositionHint::Known(
                memory_floor(active.index.entries(), |e| {
                    e.relative_offset <= relative_offset
                })
                .map_or(0, |e| u64::from(e.position)),
            ),
            None => PositionHint::OffsetIndex {
                index: self.inactive_ref(1, files),
                relative_offset,
            },
        }
    }

    /// Where a scan for the first batch with a timestamp ≥ `timestamp` may start.
    pub fn timestamp_hint(&self, timestamp: i64, files: &Arc<FileCache>) -> PositionHint {
        match &self.active {
            Some(active) => {
                let relative =
                    memory_floor(active.time_index.entries(), |e| e.timestamp < timestamp)
                        .map(|e| e.relative_offset);
                match relative {
                    Some(relative_offset) => PositionHint::Known(
                        memory_floor(active.index.entries(), |e| {
                            e.relative_offset <= relative_offset
                        })
                        .map_or(0, |e| u64::from(e.position)),
                    ),
                    None => PositionHint::Known(0),
                }
            }
            None => PositionHint::TimeIndex {
                time_index: self.inactive_ref(2, files),
                index: self.inactive_ref(1, files),
                timestamp,
            },
        }
    }

    /// The active segment's log file, to sync what was appended.
    pub fn log_handle(&self) -> Option<Arc<dyn StorageFile>> {
        self.active.as_ref().map(|f| f.log.clone())
    }

    /// Closes the segment's files (it is no longer the active one) and returns them, so the
    /// caller can fsync them outside the lock.
    pub fn deactivate(&mut self) -> Vec<Arc<dyn StorageFile>> {
        let Some(files) = self.active.take() else {
            return Vec::new();
        };
        let identity = |file: Option<&Arc<dyn StorageFile>>| file.and_then(|f| f.identity().ok());
        self.identities = [
            identity(Some(&files.log)),
            identity(files.index.file().as_ref()),
            identity(files.time_index.file().as_ref()),
        ];
        let mut handles = vec![files.log];
        handles.extend(files.index.file());
        handles.extend(files.time_index.file());
        handles.extend(self.txn_index.deactivate());
        handles
    }

    /// True for the active segment, whose files stay open.
    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// Makes the active segment's files durable (inactive ones were synced when they rolled).
    pub fn sync_all(&self) -> Result<(), LogError> {
        if let Some(files) = &self.active {
            files.log.sync()?;
            for file in files
                .index
                .file()
                .into_iter()
                .chain(files.time_index.file())
                .chain(self.txn_index.file())
            {
                file.sync()?;
            }
        }
        Ok(())
    }
}
