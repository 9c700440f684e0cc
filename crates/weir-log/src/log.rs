//! The partition log: an ordered set of segments with append, read, retention and recovery.
//!
//! Everything here runs under the partition's lock and touches only memory, except appends
//! (the write itself) and segment creation. Disk reads and fsyncs are handed out as values —
//! [`ReadView`], [`BatchLookup`], [`FlushTicket`], [`LogCheckpoint`], [`SegmentRemoval`] — that
//! the caller runs after releasing the lock, off the async workers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use weir_storage::{FileCache, FileRef, Storage, StorageFile};

use crate::batch::{patched_head, ValidBatch, PATCHED_HEAD_BYTES};
use crate::checkpoint::{
    read_json, write_json, EpochEntry, ProducerSnapshot, RecoveryCheckpoint, CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_FILE, PRODUCER_SNAPSHOT_FILE, RECOVERY_CHECKPOINT_FILE,
};
use crate::cleaner::{recover_swaps, CleanedLog, CleaningPlan, CompactionConfig, SourceSegment};
use crate::clock::Clock;
use crate::producer_state::{BatchMetadata, ProducerStateTable, SequenceCheck};
use crate::segment::{
    HeaderWalker, PositionHint, Segment, SegmentPaths, RELATIVE_OFFSET_MAX, SEGMENT_BYTES_LIMIT,
};
use crate::LogError;

/// Rolled segments whose files may wait for their fsync at once. The broker flushes soon after
/// every roll, so this is only reached when rolls outpace fsyncs (`segment.ms=1` under load);
/// then the roll syncs the oldest one itself, which slows appends instead of holding more open
/// files.
const ROLLED_UNSYNCED_MAX: usize = 4;

/// Per-partition settings, in Kafka's units; the broker fills them from topic configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll a non-empty active segment this old.
    pub segment_ms: i64,
    /// `retention.ms`: delete segments whose largest timestamp is older; -1 keeps forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest segments while the log is larger; -1 means no limit.
    pub retention_bytes: i64,
    /// `max.message.bytes`: largest batch accepted.
    pub max_message_bytes: u64,
    /// `index.interval.bytes`: bytes between offset-index entries.
    pub index_interval_bytes: u64,
    /// Most idempotent producers remembered; the one idle longest is forgotten first.
    pub producer_ids_max: usize,
    /// `cleanup.policy` includes `delete`: retention deletes old segments.
    pub retention_deletes: bool,
    /// `cleanup.policy` includes `compact`: the cleaner keeps the latest record per key.
    pub compaction: Option<CompactionConfig>,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1_048_588,
            index_interval_bytes: 4096,
            producer_ids_max: 5000,
            retention_deletes: true,
            compaction: None,
        }
    }
}

/// The result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the batch's first record.
    pub base_offset: i64,
    /// Offset of the batch's last record.
    pub last_offset: i64,
    /// True when this batch was a retry of one already written; nothing was appended.
    pub duplicate: bool,
    /// The log start offset after the append (Produce answers with it).
    pub log_start_offset: i64,
    /// The time the batch was stamped with, for a LogAppendTime topic; otherwise -1.
    pub log_append_time_ms: i64,
}

/// What recovery found and did when the log was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The previous close was clean, so no scan was needed.
    pub clean: bool,
    /// Bytes cut from a torn or corrupt tail.
    pub truncated_bytes: u64,
    /// Segments validated batch by batch.
    pub segments_scanned: usize,
}

/// Unsynced files and the offset they make durable; synced outside the log's lock.
pub struct FlushTicket {
    done: FlushDone,
    files: Vec<Arc<dyn StorageFile>>,
    dir: Option<(Arc<dyn Storage>, PathBuf)>,
}

/// What a synced [`FlushTicket`] made durable, for [`Log::flush_done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushDone {
    /// Every offset below this is durable.
    pub end_offset: i64,
    /// Directory changes (segment files created) covered.
    dir_changes: u64,
}

impl FlushTicket {
    /// Every offset below this is durable once the ticket is synced.
    pub fn end_offset(&self) -> i64 {
        self.done.end_offset
    }

    /// Fsyncs the files and, when segments were created, their directory. Slow: call without
    /// holding the log's lock, off the async workers.
    pub fn sync(&self) -> std::io::Result<FlushDone> {
        for file in &self.files {
            file.sync()?;
        }
        if let Some((storage, dir)) = &self.dir {
            storage.sync_dir(dir)?;
        }
        Ok(self.done)
    }
}

/// A recovery checkpoint and producer snapshot taken under the lock, written outside it.
pub struct LogCheckpoint {
    skip: bool,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    snapshot: ProducerSnapshot,
    checkpoint: RecoveryCheckpoint,
}

impl LogCheckpoint {
    /// Writes both files atomically. A full disk is `LogError::DiskFull`: the previous files
    /// stay, and the next start scans a little more.
    pub fn write(&self) -> Result<(), LogError> {
        if self.skip {
            return Ok(());
        }
        write_json(
            self.storage.as_ref(),
            &self.dir.join(PRODUCER_SNAPSHOT_FILE),
            &self.snapshot,
        )?;
        write_json(
            self.storage.as_ref(),
            &self.dir.join(RECOVERY_CHECKPOINT_FILE),
            &self.checkpoint,
        )
    }
}

/// Segment files retention took out of the log, deleted after the lock is released.
pub struct SegmentRemoval {
    paths: SegmentPaths,
    files: Arc<FileCache>,
}

impl SegmentRemoval {
    /// Deletes the files. A reader that already opened one finishes its read.
    pub fn remove(self) -> std::io::Result<()> {
        self.paths.remove(&self.files)
    }
}

/// The file work of a finished cleaning, run outside the log's lock: the replaced segments'
/// files are deleted, the directory synced, and only then the manifests removed (so a crash
/// before that finishes the deletions at the next open). Discarded copies are deleted too.
pub struct CleaningCommit {
    storage: Arc<dyn Storage>,
    files: Arc<FileCache>,
    dir: PathBuf,
    removals: Vec<SegmentRemoval>,
    manifests: Vec<PathBuf>,
    discarded: Vec<SegmentPaths>,
}

impl CleaningCommit {
    /// Deletes what the swap replaced. Blocking.
    pub fn complete(self) -> Result<(), LogError> {
        // Discarded copies lost their manifests under the lock; that is durable before they go.
        if !self.discarded.is_empty() {
            self.storage.sync_dir(&self.dir)?;
        }
        for paths in &self.discarded {
            paths.remove(&self.files)?;
        }
        for removal in self.removals {
            removal.remove()?;
        }
        self.storage.sync_dir(&self.dir)?;
        for manifest in &self.manifests {
            self.storage.remove(manifest)?;
        }
        Ok(())
    }
}

/// What a fetch may read from one partition, taken under the log's lock; [`ReadView::slice`]
/// does the reading outside it.
pub struct ReadView {
    log: FileRef,
    start: PositionHint,
    offset: i64,
    end_position: u64,
    /// The batch starting at this offset is the first a reader may not see (the high
    /// watermark), when it lies inside this segment.
    upper: Option<(i64, PositionHint)>,
}

/// A byte range of one segment file: what a fetch response carries for one partition. It
/// starts at a batch boundary and ends at one, or at the size limit mid-batch as Kafka's fetch
/// does (clients drop a trailing partial batch and fetch it again).
#[derive(Clone)]
pub struct ReadSlice {
    file: FileRef,
    position: u64,
    length: u64,
    /// The slice's bytes when finding it already read them (a consumer at the tail: its
    /// records lie in the chunk the header walk read), so [`ReadSlice::read`] needs no I/O.
    prefetched: Option<Bytes>,
}

impl ReadSlice {
    /// Bytes in the slice.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// True when the slice holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Reads the whole slice.
    pub fn read(&self) -> Result<Bytes, LogError> {
        if let Some(bytes) = &self.prefetched {
            return Ok(bytes.clone());
        }
        let mut buffer = vec![0u8; self.length as usize];
        self.read_at(0, &mut buffer)?;
        Ok(Bytes::from(buffer))
    }

    /// Reads `buffer.len()` bytes starting `offset` bytes into the slice.
    pub fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), LogError> {
        let end = offset.saturating_add(buffer.len() as u64);
        if end > self.length {
            return Err(LogError::Corrupt {
                position: self.position + offset,
            });
        }
        let file = self.file.resolve()?;
        Ok(file.read_exact_at(buffer, self.position + offset)?)
    }
}

impl ReadView {
    /// True when everything this view may read lies in the last `bytes` appended to the active
    /// segment: what a consumer keeping up with producers asks for, pages written moments ago
    /// and still in the page cache.
    pub fn within_last(&self, bytes: u64) -> bool {
        let recent = |hint: &PositionHint| matches!(hint, PositionHint::Known(p) if self.end_position.saturating_sub(*p) <= bytes);
        recent(&self.start) && self.upper.as_ref().is_none_or(|(_, hint)| recent(hint))
    }

    /// The bytes to return: from the batch holding the view's offset, at most `max_bytes`
    /// (but the whole first batch when `min_one_batch` is set, so a consumer always makes
    /// progress), ending before the upper bound. Reads batch headers: call off the async
    /// workers, without the log's lock. `None` when nothing is readable (the segment was
    /// deleted by retention meanwhile, or its first batch does not fit).
    pub fn slice(
        &self,
        max_bytes: u64,
        min_one_batch: bool,
    ) -> Result<Option<ReadSlice>, LogError> {
        // Bound to this file: if its path is reused before the slice is written, the writer
        // finds it missing rather than streaming another file's bytes.
        let (pinned, file) = match self.log.pinned() {
            Ok(resolved) => resolved,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LogError::Io(e)),
        };
        // An index swapped since the view was planned reads as missing: nothing to read here.
        let from = match self.start.resolve() {
            Err(LogError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            resolved => resolved?,
        };
        let mut walker = HeaderWalker::new(file.as_ref(), from, self.end_position);
        let (first, position) = loop {
            match walker.next_batch()? {
                Some((header, position)) if header.last_offset() >= self.offset => {
                    break (header, position)
                }
                Some(_) => {}
                None => return Ok(None),
            }
        };
        let end = match &self.upper {
            None => self.end_position,
            Some((upper, _)) if first.base_offset >= *upper => return Ok(None),
            Some((upper, hint)) => {
                let from = hint.resolve()?.max(position);
                let mut walker = HeaderWalker::new(file.as_ref(), from, self.end_position);
                let mut end = self.end_position;
                while let Some((header, at)) = walker.next_batch()? {
                    if header.base_offset >= *upper {
                        end = at;
                        break;
                    }
                }
                end
            }
        };
        let first_bytes = first.total_bytes();
        let limit = match first_bytes > max_bytes {
            true if min_one_batch => first_bytes,
            true => return Ok(None),
            false => max_bytes,
        };
        let length = (end - position).min(limit);
        let prefetched = walker
            .buffered(position, length)
            .map(Bytes::copy_from_slice);
        Ok(Some(ReadSlice {
            file: pinned,
            position,
            length,
            prefetched,
        }))
    }
}

/// What ListOffsets looks for in a segment.
#[derive(Debug, Clone, Copy)]
enum LookupTarget {
    /// The first batch whose largest timestamp is ≥ this.
    Timestamp(i64),
}

/// A search for one stored batch, taken under the lock; [`BatchLookup::find`] reads outside it.
pub struct BatchLookup {
    log: FileRef,
    start: PositionHint,
    end_position: u64,
    target: LookupTarget,
    log_start_offset: i64,
}

impl BatchLookup {
    /// The bytes of the batch sought, if it is still there. Reads the segment.
    pub fn find(&self) -> Result<Option<Bytes>, LogError> {
        let file = match self.log.resolve() {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LogError::Io(e)),
        };
        // An index swapped since the view was planned reads as missing: nothing to read here.
        let from = match self.start.resolve() {
            Err(LogError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            resolved => resolved?,
        };
        let mut walker = HeaderWalker::new(file.as_ref(), from, self.end_position);
        while let Some((header, position)) = walker.next_batch()? {
            let LookupTarget::Timestamp(ts) = self.target;
            let found = header.max_timestamp >= ts && header.last_offset() >= self.log_start_offset;
            if found {
                let mut batch = vec![0u8; header.total_bytes() as usize];
                file.read_exact_at(&mut batch, position)
                    .map_err(LogError::Io)?;
                return Ok(Some(Bytes::from(batch)));
            }
        }
        Ok(None)
    }
}

/// One partition's log.
pub struct Log {
    dir: PathBuf,
    files: Arc<FileCache>,
    clock: Arc<dyn Clock>,
    config: LogConfig,
    segments: BTreeMap<i64, Segment>,
    /// Files of rolled segments not yet fsynced, with the log end offset at their roll.
    rolled_unsynced: Vec<(i64, Vec<Arc<dyn StorageFile>>)>,
    /// Segments created (directory entries to make durable), counted.
    dir_changes: u64,
    /// `dir_changes` covered by the last directory fsync.
    dir_changes_synced: u64,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    recovery_point: i64,
    leader_epoch: i32,
    epoch_cache: Vec<EpochEntry>,
    producers: ProducerStateTable,
    producers_evicted: u64,
    /// Set when the partition is deleted: its files are going away, nothing is written again.
    /// Shared with a running cleaning, which then writes nothing more.
    deleted: Arc<AtomicBool>,
    /// Compacted logs: everything below this offset has been cleaned.
    first_dirty_offset: i64,
}

fn segment_base_offsets(names: &[String]) -> Vec<i64> {
    let mut bases: Vec<i64> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".log"))
        .filter(|stem| stem.len() == 20)
        .filter_map(|stem| stem.parse().ok())
        .filter(|base| *base >= 0)
        .collect();
    bases.sort_unstable();
    bases
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering from an unclean shutdown: batches after
    /// the recovery point are validated, a torn tail is truncated, damaged indexes are rebuilt
    /// and producer state is restored from its snapshot plus the log.
    pub fn open(
        dir: &Path,
        files: Arc<FileCache>,
        clock: Arc<dyn Clock>,
        config: LogConfig,
    ) -> Result<(Log, RecoveryReport), LogError> {
        assert!(config.segment_bytes > 0 && config.segment_bytes <= SEGMENT_BYTES_LIMIT);
        let storage = files.storage().clone();
        storage.create_dir_all(dir)?;
        let now_ms = clock.now_ms();
        recover_swaps(storage.as_ref(), &files, dir)?;
        let names = storage.list(dir)?;
        let clean_marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = storage.exists(&clean_marker);
        // Remove the marker before anything is appended, so a crash from here on is unclean.
        storage.remove(&clean_marker)?;
        let checkpoint: RecoveryCheckpoint =
            read_json(storage.as_ref(), &dir.join(RECOVERY_CHECKPOINT_FILE)).unwrap_or_default();
        let bases = segment_base_offsets(&names);
        let mut report = RecoveryReport {
            clean: clean || bases.is_empty(),
            ..RecoveryReport::default()
        };
        let mut segments: BTreeMap<i64, Segment> = BTreeMap::new();
        let mut truncated = false;
        for (i, &base) in bases.iter().enumerate() {
            if truncated {
                tracing::warn!(target: "weir::log", dir = %dir.display(), base, "deleting segment after a truncated one");
                SegmentPaths::new(dir, base).remove(&files)?;
                continue;
            }
            let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            let trusted = clean || next_base <= checkpoint.recovery_point;
            let (segment, cut) = Segment::open(
                storage.as_ref(),
                dir,
                base,
                now_ms,
                trusted,
                config.index_interval_bytes,
            )?;
            if !trusted {
                report.segments_scanned += 1;
            }
            if cut > 0 {
                tracing::warn!(target: "weir::log", dir = %dir.display(), base, bytes = cut, "truncated torn or corrupt tail");
                report.truncated_bytes += cut;
                truncated = true;
            }
            // Only the last segment stays open: thousands of segments must not hold thousands
            // of files open, even while starting.
            if let Some((_, previous)) = segments.iter_mut().next_back() {
                previous.deactivate();
            }
            segments.insert(base, segment);
        }
        if segments.is_empty() {
            let base = checkpoint.log_start_offset.max(0);
            segments.insert(base, Segment::create(storage.as_ref(), dir, base, now_ms)?);
        }
        let first_base = *segments.keys().next().unwrap_or(&0);
        let log_end_offset = segments
            .values()
            .next_back()
            .map_or(first_base, |s| s.next_offset.max(s.base_offset));
        let log_start_offset = checkpoint
            .log_start_offset
            .clamp(first_base, log_end_offset);
        let mut epoch_cache: Vec<EpochEntry> =
            read_json(storage.as_ref(), &dir.join(LEADER_EPOCH_FILE)).unwrap_or_default();
        epoch_cache.retain(|e| e.start_offset <= log_end_offset);
        let mut log = Log {
            dir: dir.to_path_buf(),
            files,
            clock,
            config,
            segments,
            rolled_unsynced: Vec::new(),
            dir_changes: 0,
            dir_changes_synced: 0,
            log_start_offset,
            log_end_offset,
            high_watermark: log_end_offset,
            recovery_point: checkpoint.recovery_point.min(log_end_offset),
            leader_epoch: epoch_cache.last().map_or(0, |e| e.epoch),
            epoch_cache,
            producers: ProducerStateTable::default(),
            producers_evicted: 0,
            deleted: Arc::new(AtomicBool::new(false)),
            first_dirty_offset: checkpoint.first_dirty_offset,
        };
        if log.epoch_cache.is_empty() {
            log.set_leader_epoch(log.leader_epoch)?;
        }
        log.restore_producer_state(clean)?;
        log.active().sync_all()?;
        storage.sync_dir(dir)?;
        log.recovery_point = log.log_end_offset;
        Ok((log, report))
    }

    fn storage(&self) -> &Arc<dyn Storage> {
        self.files.storage()
    }

    fn restore_producer_state(&mut self, clean: bool) -> Result<(), LogError> {
        let snapshot: Option<ProducerSnapshot> = read_json(
            self.storage().as_ref(),
            &self.dir.join(PRODUCER_SNAPSHOT_FILE),
        );
        let from = match snapshot {
            Some(s) if s.offset <= self.log_end_offset => {
                self.producers = s.producers;
                s.offset
            }
            _ => self.log_start_offset,
        };
        self.producers_evicted += self.producers.restored(self.config.producer_ids_max) as u64;
        if clean && from == self.log_end_offset {
            return Ok(());
        }
        let now_ms = self.clock.now_ms();
        let from = from.max(self.log_start_offset);
        let producers_max = self.config.producer_ids_max;
        let (files, producers) = (&self.files, &mut self.producers);
        for segment in self.segments.values().filter(|s| s.next_offset > from) {
            let file = segment.log_ref(files).resolve()?;
            let start = segment.offset_hint(from, files).resolve()?;
            let mut walker = HeaderWalker::new(file.as_ref(), start, segment.size_bytes);
            while let Some((header, _)) = walker.next_batch()? {
                if header.last_offset() >= from {
                    self.producers_evicted +=
                        producers.record(&header, now_ms, producers_max) as u64;
                }
            }
        }
        Ok(())
    }

    fn active(&self) -> &Segment {
        // Invariant: a log always has at least one segment (open creates one when none exist,
        // and retention never deletes the active segment).
        self.segments
            .values()
            .next_back()
            .expect("log has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("log has an active segment")
    }

    /// First retained offset.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// One past the last offset written.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// Offsets below this are committed and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Offsets below this are known to be on disk (fsynced).
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// The leader epoch new batches are stamped with.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// Total bytes in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size_bytes).sum()
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The current settings.
    pub fn config(&self) -> LogConfig {
        self.config
    }

    /// Replaces the settings (after a topic config change); they apply from the next append.
    pub fn set_config(&mut self, config: LogConfig) {
        assert!(config.segment_bytes > 0 && config.segment_bytes <= SEGMENT_BYTES_LIMIT);
        self.config = config;
    }

    /// Starts a new leader epoch at the current log end, persisting the epoch cache.
    pub fn set_leader_epoch(&mut self, epoch: i32) -> Result<(), LogError> {
        assert!(epoch >= self.leader_epoch, "leader epoch must not go back");
        if epoch == self.leader_epoch && !self.epoch_cache.is_empty() {
            return Ok(());
        }
        let mut cache = self.epoch_cache.clone();
        cache.push(EpochEntry {
            epoch,
            start_offset: self.log_end_offset,
        });
        write_json(
            self.storage().as_ref(),
            &self.dir.join(LEADER_EPOCH_FILE),
            &cache,
        )?;
        self.leader_epoch = epoch;
        self.epoch_cache = cache;
        Ok(())
    }

    /// The end offset of `epoch` for OffsetForLeaderEpoch: the largest epoch ≤ `epoch` known,
    /// and the start offset of the epoch after it (or the log end). `None` when unknown.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        let idx = self.epoch_cache.partition_point(|e| e.epoch <= epoch);
        let found = self.epoch_cache.get(idx.checked_sub(1)?)?;
        let end = self
            .epoch_cache
            .get(idx)
            .map_or(self.log_end_offset, |next| next.start_offset);
        Some((found.epoch, end))
    }

    /// Marks the log deleted (its directory is about to go): every later write is refused or
    /// skipped, so nothing fails on the missing files.
    pub fn mark_deleted(&mut self) {
        self.deleted.store(true, Ordering::Release);
        self.rolled_unsynced.clear();
    }

    /// True once [`Log::mark_deleted`] was called.
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Checks the idempotent-producer sequence, assigns offsets and appends a validated batch:
    /// the stored bytes are the producer's, with only base offset and leader epoch patched.
    /// `LogError::DiskFull` leaves the log exactly as it was.
    pub fn append(&mut self, batch: &ValidBatch) -> Result<AppendInfo, LogError> {
        if self.is_deleted() {
            return Err(LogError::Deleted);
        }
        let header = *batch.header();
        let bytes = batch.len() as u64;
        if bytes > self.config.max_message_bytes {
            return Err(LogError::MessageTooLarge { bytes });
        }
        if bytes > self.config.segment_bytes {
            return Err(LogError::RecordListTooLarge {
                bytes,
                segment_bytes: self.config.segment_bytes,
            });
        }
        if header.is_transactional() {
            return Err(LogError::Unsupported("transactional batches"));
        }
        match self.producers.check(&header) {
            SequenceCheck::Append => {}
            SequenceCheck::Duplicate(BatchMetadata {
                base_offset,
                last_offset,
                ..
            }) => {
                return Ok(AppendInfo {
                    base_offset,
                    last_offset,
                    duplicate: true,
                    log_start_offset: self.log_start_offset,
                    log_append_time_ms: -1,
                });
            }
            SequenceCheck::OutOfOrder => return Err(LogError::OutOfOrderSequence),
            SequenceCheck::StaleEpoch => return Err(LogError::InvalidProducerEpoch),
        }
        let base_offset = self.log_end_offset;
        let next_offset = base_offset
            .checked_add(i64::from(header.record_count))
            .ok_or(LogError::Unsupported("offsets beyond i64::MAX"))?;
        let now_ms = self.clock.now_ms();
        self.maybe_roll(bytes, i64::from(header.last_offset_delta), now_ms)?;
        let head = patched_head(
            batch.bytes(),
            base_offset,
            self.leader_epoch,
            batch.max_timestamp(),
            batch.log_append_time(),
        );
        let mut stored = header;
        stored.base_offset = base_offset;
        stored.partition_leader_epoch = self.leader_epoch;
        stored.max_timestamp = batch.max_timestamp();
        if batch.log_append_time() {
            stored.attributes |= crate::batch::ATTR_LOG_APPEND_TIME;
        }
        let interval = self.config.index_interval_bytes;
        let parts: [&[u8]; 2] = [&head, &batch.bytes()[PATCHED_HEAD_BYTES..]];
        self.active_mut()
            .append(&stored, &parts, interval, now_ms)?;
        self.producers_evicted +=
            self.producers
                .record(&stored, now_ms, self.config.producer_ids_max) as u64;
        self.log_end_offset = next_offset;
        self.high_watermark = self.log_end_offset;
        Ok(AppendInfo {
            base_offset,
            last_offset: stored.last_offset(),
            duplicate: false,
            log_start_offset: self.log_start_offset,
            log_append_time_ms: if batch.log_append_time() {
                batch.max_timestamp()
            } else {
                -1
            },
        })
    }

    fn maybe_roll(
        &mut self,
        incoming_bytes: u64,
        last_offset_delta: i64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let config = self.config;
        let active = self.active();
        if active.size_bytes == 0 {
            return Ok(());
        }
        let full = active.size_bytes + incoming_bytes > config.segment_bytes;
        let aged = now_ms.saturating_sub(active.created_ms) >= config.segment_ms;
        let relative_last = self.log_end_offset - active.base_offset + last_offset_delta;
        let offsets_exhausted = relative_last > RELATIVE_OFFSET_MAX;
        if full || aged || offsets_exhausted || active.indexes_full() {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Starts a new segment at the log end. The old one is not fsynced here (that would stall
    /// appends): its files join the next flush ticket, and the broker flushes soon after a roll.
    fn roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        if self.rolled_unsynced.len() >= ROLLED_UNSYNCED_MAX {
            let (_, files) = self.rolled_unsynced.remove(0);
            for file in files {
                file.sync()?;
            }
        }
        let base = self.log_end_offset;
        let segment = Segment::create(self.storage().as_ref(), &self.dir, base, now_ms)?;
        let handles = self.active_mut().deactivate();
        self.rolled_unsynced.push((base, handles));
        self.dir_changes += 1;
        tracing::debug!(target: "weir::log", dir = %self.dir.display(), base, "rolled segment");
        self.segments.insert(base, segment);
        Ok(())
    }

    /// Rolls the active segment when it is older than `segment.ms`.
    pub fn roll_if_aged(&mut self) -> Result<(), LogError> {
        if self.is_deleted() {
            return Ok(());
        }
        self.maybe_roll(0, 0, self.clock.now_ms())
    }

    /// The segment holding `offset`, or the first one after it (offsets may have gaps).
    fn segment_for(&self, offset: i64) -> Option<&Segment> {
        let holding = self
            .segments
            .range(..=offset)
            .next_back()
            .map(|(_, s)| s)
            .filter(|s| s.next_offset > offset);
        holding.or_else(|| {
            self.segments
                .range(offset.saturating_add(1)..)
                .map(|(_, s)| s)
                .find(|s| s.size_bytes > 0)
        })
    }

    /// What a fetch at `offset` may read, stopping before `upper_offset` (the high watermark
    /// for consumers). `None` when `offset` is at or past the upper bound. Memory only: the
    /// reading happens in [`ReadView::slice`].
    pub fn read_view(&self, offset: i64, upper_offset: i64) -> Result<Option<ReadView>, LogError> {
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        if offset >= upper_offset {
            return Ok(None);
        }
        let Some(segment) = self.segment_for(offset) else {
            return Ok(None);
        };
        let upper = (upper_offset < segment.next_offset)
            .then(|| (upper_offset, segment.offset_hint(upper_offset, &self.files)));
        Ok(Some(ReadView {
            log: segment.log_ref(&self.files),
            start: segment.offset_hint(offset, &self.files),
            offset,
            end_position: segment.size_bytes,
            upper,
        }))
    }

    /// A search for the first batch with a record timestamp ≥ `timestamp` (ListOffsets by
    /// time); `None` when no segment holds one.
    pub fn lookup_timestamp(&self, timestamp: i64) -> Option<BatchLookup> {
        let segment = self.segments.values().find(|s| {
            s.size_bytes > 0
                && s.max_timestamp >= timestamp
                && s.next_offset > self.log_start_offset
        })?;
        Some(BatchLookup {
            log: segment.log_ref(&self.files),
            start: segment.timestamp_hint(timestamp, &self.files),
            end_position: segment.size_bytes,
            target: LookupTarget::Timestamp(timestamp),
            log_start_offset: self.log_start_offset,
        })
    }

    /// A search for the batch carrying the largest timestamp in the log (the first such batch).
    pub fn lookup_max_timestamp(&self) -> Option<BatchLookup> {
        let segment = self
            .segments
            .values()
            .filter(|s| s.max_timestamp >= 0 && s.size_bytes > 0)
            .fold(None::<&Segment>, |best, s| match best {
                Some(b) if b.max_timestamp >= s.max_timestamp => Some(b),
                _ => Some(s),
            })?;
        // Stored headers carry the true largest timestamp: the first batch reaching the
        // segment's holds the record.
        Some(BatchLookup {
            log: segment.log_ref(&self.files),
            start: segment.timestamp_hint(segment.max_timestamp, &self.files),
            end_position: segment.size_bytes,
            target: LookupTarget::Timestamp(segment.max_timestamp),
            log_start_offset: self.log_start_offset,
        })
    }

    /// Takes whole segments past `retention.ms` (by each segment's largest record timestamp, or
    /// its last write when no record has a timestamp) or
    /// beyond `retention.bytes` out of the log, oldest first, and advances the log start
    /// offset. The returned files are deleted by the caller after releasing the lock.
    pub fn enforce_retention(&mut self) -> Result<Vec<SegmentRemoval>, LogError> {
        if self.is_deleted() || !self.config.retention_deletes {
            return Ok(Vec::new());
        }
        let now_ms = self.clock.now_ms();
        let config = self.config;
        let expired = |s: &Segment| {
            config.retention_ms >= 0
                && s.size_bytes > 0
                && now_ms.saturating_sub(s.retention_time_ms()) > config.retention_ms
        };
        if self.segments.len() == 1 && expired(self.active()) {
            self.roll(now_ms)?;
        }
        let mut removals = Vec::new();
        let mut total_bytes = self.size_bytes();
        while self.segments.len() > 1 {
            let Some(oldest) = self.segments.values().next() else {
                break;
            };
            let over_size = config.retention_bytes >= 0
                && total_bytes - oldest.size_bytes >= config.retention_bytes as u64;
            if !(expired(oldest) || over_size) {
                break;
            }
            let Some((_, segment)) = self.segments.pop_first() else {
                break;
            };
            total_bytes -= segment.size_bytes;
            tracing::info!(target: "weir::log", dir = %self.dir.display(), base = segment.base_offset, "retention deleted segment");
            removals.push(SegmentRemoval {
                paths: segment.paths.clone(),
                files: self.files.clone(),
            });
            if self.segments.len() == 1 && expired(self.active()) {
                self.roll(now_ms)?;
            }
        }
        if !removals.is_empty() {
            let first = *self.segments.keys().next().unwrap_or(&self.log_end_offset);
            self.log_start_offset = self.log_start_offset.max(first);
        }
        Ok(removals)
    }

    /// Base offset of the active segment (the cleaner never touches it).
    pub fn active_segment_base(&self) -> i64 {
        self.active().base_offset
    }

    /// A cleaning of this compacted log, when enough of its inactive segments is dirty
    /// (`min.cleanable.dirty.ratio`) or a dirty record waited `max.compaction.lag.ms`.
    /// Segments whose newest record is younger than `min.compaction.lag.ms` wait, and so do
    /// the ones after them. Memory only: [`CleaningPlan::clean`] does the work without the lock.
    pub fn cleaning_plan(&self, decompressed_bytes_max: u64) -> Option<CleaningPlan> {
        let config = self.config.compaction?;
        if self.is_deleted() {
            return None;
        }
        let now_ms = self.clock.now_ms();
        let active_base = self.active().base_offset;
        let sources: Vec<SourceSegment> = self
            .segments
            .values()
            .take_while(|s| {
                s.base_offset < active_base
                    && now_ms.saturating_sub(s.retention_time_ms()) >= config.min_compaction_lag_ms
            })
            .map(|s| SourceSegment {
                base_offset: s.base_offset,
                next_offset: s.next_offset,
                size_bytes: s.size_bytes,
                retention_time_ms: s.retention_time_ms(),
                last_write_ms: s.last_write_ms,
                log: s.log_ref(&self.files),
            })
            .collect();
        let dirty_start = self.first_dirty_offset.max(self.log_start_offset);
        let total: u64 = sources.iter().map(|s| s.size_bytes).sum();
        let dirty: Vec<&SourceSegment> = sources
            .iter()
            .filter(|s| s.next_offset > dirty_start)
            .collect();
        let dirty_bytes: u64 = dirty.iter().map(|s| s.size_bytes).sum();
        if dirty_bytes == 0 {
            return None;
        }
        let ratio_reached = u128::from(dirty_bytes) * 1_000_000
            >= u128::from(total) * u128::from(config.min_cleanable_dirty_ratio_ppm);
        let overdue = dirty
            .iter()
            .any(|s| now_ms.saturating_sub(s.retention_time_ms) >= config.max_compaction_lag_ms);
        if !(ratio_reached || overdue) {
            return None;
        }
        Some(CleaningPlan {
            abandoned: self.deleted.clone(),
            dir: self.dir.clone(),
            files: self.files.clone(),
            sources,
            dirty_start,
            config,
            segment_bytes: self.config.segment_bytes,
            index_interval_bytes: self.config.index_interval_bytes,
            decompressed_bytes_max,
            now_ms,
        })
    }

    /// Swaps cleaned copies in for the segments they replace (renames only, under the lock, so
    /// no reader ever finds a cleaned index beside an old log file). A group whose segments
    /// changed meanwhile (retention deleted one) is discarded. The returned commit deletes the
    /// replaced files and the manifests outside the lock.
    pub fn finish_cleaning(&mut self, cleaned: CleanedLog) -> Result<CleaningCommit, LogError> {
        let storage = self.storage().clone();
        let mut commit = CleaningCommit {
            storage: storage.clone(),
            files: self.files.clone(),
            dir: self.dir.clone(),
            removals: Vec::new(),
            manifests: Vec::new(),
            discarded: Vec::new(),
        };
        let active_base = self.active().base_offset;
        for group in cleaned.groups {
            let intact = !self.is_deleted()
                && group
                    .sources
                    .iter()
                    .all(|b| *b < active_base && self.segments.contains_key(b));
            if !intact {
                // Withdrawn at once (an unlink, no sync), so a crash cannot apply it later.
                storage.remove(&group.manifest)?;
                commit.discarded.push(group.segment.paths.clone());
                continue;
            }
            let base = group.sources[0];
            let target = SegmentPaths::new(&self.dir, base);
            for (from, to) in group.segment.paths.all().into_iter().zip(target.all()) {
                self.files.forget(to);
                storage.rename(from, to)?;
                self.files.forget(to);
            }
            let mut segment = group.segment;
            segment.paths = target;
            for b in &group.sources {
                if let Some(old) = self.segments.remove(b) {
                    if *b != base {
                        commit.removals.push(SegmentRemoval {
                            paths: old.paths,
                            files: self.files.clone(),
                        });
                    }
                }
            }
            self.segments.insert(base, segment);
            self.dir_changes += 1;
            commit.manifests.push(group.manifest);
        }
        if commit.discarded.is_empty() {
            self.first_dirty_offset = self.first_dirty_offset.max(cleaned.clean_until);
        }
        Ok(commit)
    }

    /// Forgets idle producers; returns how many.
    pub fn expire_producers(&mut self, expiration_ms: i64) -> usize {
        self.producers.expire(self.clock.now_ms(), expiration_ms)
    }

    /// Number of idempotent producers tracked.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Producers forgotten because the table was full, since the log was opened.
    pub fn producers_evicted(&self) -> u64 {
        self.producers_evicted
    }

    /// The files to fsync for everything appended so far to be durable.
    pub fn flush_ticket(&self) -> FlushTicket {
        let mut files: Vec<Arc<dyn StorageFile>> = self
            .rolled_unsynced
            .iter()
            .flat_map(|(_, f)| f.iter().cloned())
            .collect();
        files.extend(self.active().log_handle());
        let dir = (self.dir_changes > self.dir_changes_synced)
            .then(|| (self.storage().clone(), self.dir.clone()));
        if self.is_deleted() {
            files.clear();
        }
        let dir = dir.filter(|_| !self.is_deleted());
        FlushTicket {
            done: FlushDone {
                end_offset: self.log_end_offset,
                dir_changes: self.dir_changes,
            },
            files,
            dir,
        }
    }

    /// True when a rolled segment waits for its fsync.
    pub fn has_unsynced_rolled(&self) -> bool {
        !self.rolled_unsynced.is_empty()
    }

    /// Records that a ticket's files were synced.
    pub fn flush_done(&mut self, done: FlushDone) {
        self.rolled_unsynced
            .retain(|(rolled_at, _)| *rolled_at > done.end_offset);
        self.dir_changes_synced = self.dir_changes_synced.max(done.dir_changes);
        self.recovery_point = self
            .recovery_point
            .max(done.end_offset.min(self.log_end_offset));
    }

    /// The recovery checkpoint and producer snapshot as of now, to write outside the lock
    /// (nothing is written for a deleted log).
    pub fn checkpoint(&self) -> LogCheckpoint {
        LogCheckpoint {
            skip: self.is_deleted(),
            storage: self.storage().clone(),
            dir: self.dir.clone(),
            snapshot: ProducerSnapshot {
                offset: self.log_end_offset,
                producers: self.producers.clone(),
            },
            checkpoint: RecoveryCheckpoint {
                recovery_point: self.recovery_point,
                log_start_offset: self.log_start_offset,
                first_dirty_offset: self.first_dirty_offset,
            },
        }
    }

    /// Fsyncs everything, writes checkpoints and the clean-shutdown marker. The log must not
    /// be appended to afterwards. A full disk fails the checkpoint writes with
    /// `LogError::DiskFull` after the data is synced: the next start then recovers as after a
    /// crash, losing nothing.
    pub fn close(&mut self) -> Result<(), LogError> {
        if self.is_deleted() {
            return Ok(());
        }
        self.flush_ticket().sync()?;
        self.active().sync_all()?;
        self.storage().sync_dir(&self.dir)?;
        self.rolled_unsynced.clear();
        self.recovery_point = self.log_end_offset;
        self.checkpoint().write()?;
        self.storage()
            .write_atomic(&self.dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
        Ok(())
    }
}
