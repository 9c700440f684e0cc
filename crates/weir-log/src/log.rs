//! The partition log: an ordered set of segments with append, read, retention and recovery.
//!
//! Everything here runs under the partition's lock and touches only memory, except appends
//! (the write itself) and segment creation. Disk reads and fsyncs are handed out as values —
//! [`ReadView`], [`BatchLookup`], [`AbortedLookup`], [`FlushTicket`], [`LogCheckpoint`],
//! [`SegmentRemoval`] — that the caller runs after releasing the lock, off the async workers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use weir_storage::{FileCache, FileRef, Storage, StorageFile};

use crate::batch::{
    parse_marker, patched_head, validate_stored_header, BatchHeader, TxnMarker, PATCHED_HEAD_BYTES,
};
use crate::checkpoint::{
    read_json, write_json, EpochEntry, ProducerSnapshot, RecoveryCheckpoint, CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_FILE, PRODUCER_SNAPSHOT_FILE, RECOVERY_CHECKPOINT_FILE,
};
use crate::cleaner::{recover_swaps, CleanedLog, CleaningPlan, CompactionConfig, SourceSegment};
use crate::producer_state::{
    ActiveProducer, BatchMetadata, LegacyAbortedTxn, ProducerStateTable, SequenceCheck,
    VerificationGuard,
};
use crate::segment::{
    HeaderWalker, PositionHint, Segment, SegmentCut, SegmentPaths, RELATIVE_OFFSET_MAX,
    SEGMENT_BYTES_LIMIT,
};
use crate::txn_index::{AbortedLookup, AbortedTxn, TxnIndex};
use crate::validate::ValidBatch;
use crate::LogError;
use weir_clock::Clock;

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
    /// The log's leader epoch when the batch was appended (or found already written): an
    /// `acks=all` write is acknowledged only while its leader still leads at that epoch.
    pub leader_epoch: i32,
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
    /// The log's truncation count when the ticket was taken.
    truncations: u64,
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
    /// Synced before the snapshot, which may name offsets past aborted-transaction index
    /// entries only once they are durable: the active segment's index and the files of
    /// rolled segments not yet synced (their indexes among them).
    sync_first: Vec<Arc<dyn StorageFile>>,
    /// Also sync the directory (a segment or an index file was created since its last sync).
    sync_dir: bool,
    snapshot: ProducerSnapshot,
    checkpoint: RecoveryCheckpoint,
    /// The log's truncation count when this was taken, and the live count: after a
    /// truncation both files would describe records that are gone.
    truncations_taken: u64,
    truncations: Arc<AtomicU64>,
}

impl LogCheckpoint {
    /// Writes both files atomically. A full disk is `LogError::DiskFull`: the previous files
    /// stay, and the next start scans a little more. Nothing is written when the log was
    /// truncated since this was taken (see [`Log::truncate_to`]).
    pub fn write(&self) -> Result<(), LogError> {
        if self.skip || self.truncations.load(Ordering::Acquire) != self.truncations_taken {
            return Ok(());
        }
        for file in &self.sync_first {
            file.sync()?;
        }
        if self.sync_dir {
            self.storage.sync_dir(&self.dir)?;
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
    /// The partition has followers: appends leave the high watermark to
    /// [`Log::set_high_watermark`].
    replicated: bool,
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
    /// Truncations so far, shared with checkpoints taken: a flush ticket or checkpoint taken
    /// before one is stale.
    truncations: Arc<AtomicU64>,
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
            replicated: false,
            recovery_point: checkpoint.recovery_point.min(log_end_offset),
            leader_epoch: epoch_cache.last().map_or(0, |e| e.epoch),
            epoch_cache,
            producers: ProducerStateTable::default(),
            producers_evicted: 0,
            deleted: Arc::new(AtomicBool::new(false)),
            first_dirty_offset: checkpoint.first_dirty_offset,
            truncations: Arc::new(AtomicU64::new(0)),
        };
        if log.epoch_cache.is_empty() {
            log.set_leader_epoch(log.leader_epoch)?;
        }
        let snapshot = log.read_producer_snapshot();
        log.restore_producer_state(snapshot, clean)?;
        log.active().sync_all()?;
        storage.sync_dir(dir)?;
        log.recovery_point = log.log_end_offset;
        Ok((log, report))
    }

    fn storage(&self) -> &Arc<dyn Storage> {
        self.files.storage()
    }

    fn read_producer_snapshot(&self) -> Option<ProducerSnapshot> {
        read_json(
            self.storage().as_ref(),
            &self.dir.join(PRODUCER_SNAPSHOT_FILE),
        )
    }

    /// Rebuilds the producer table from `snapshot` (when it is not past the log end) and the
    /// batch headers after it; `clean` skips the scan when the snapshot is at the log end.
    /// The aborted-transaction indexes are cut to the entries below where the scan starts, and
    /// the scan appends the aborts it meets.
    fn restore_producer_state(
        &mut self,
        snapshot: Option<ProducerSnapshot>,
        clean: bool,
    ) -> Result<(), LogError> {
        self.producers = ProducerStateTable::default();
        let from = match snapshot {
            Some(s) if s.offset <= self.log_end_offset => {
                self.producers = s.producers;
                s.offset
            }
            Some(_) => {
                // It describes records the log no longer has: deleted before the log grows
                // past its offset again, when it would look valid.
                self.storage()
                    .remove(&self.dir.join(PRODUCER_SNAPSHOT_FILE))?;
                self.log_start_offset
            }
            None => self.log_start_offset,
        };
        self.producers_evicted += self.producers.restored(self.config.producer_ids_max) as u64;
        let legacy_aborted = self.producers.take_legacy_aborted();
        if clean && from == self.log_end_offset && legacy_aborted.is_empty() {
            return Ok(());
        }
        let storage = self.storage().clone();
        for segment in self.segments.values_mut().filter(|s| s.next_offset >= from) {
            segment.txn_index.retain_below(storage.as_ref(), from)?;
        }
        for legacy in legacy_aborted {
            self.index_legacy_abort(legacy, from)?;
        }
        let now_ms = self.clock.now_ms();
        let from = from.max(self.log_start_offset);
        let producers_max = self.config.producer_ids_max;
        let (files, producers) = (&self.files, &mut self.producers);
        for segment in self.segments.values_mut().filter(|s| s.next_offset > from) {
            let file = segment.log_ref(files).resolve()?;
            let start = segment.offset_hint(from, files).resolve()?;
            let mut walker = HeaderWalker::new(file.as_ref(), start, segment.size_bytes);
            while let Some((header, position)) = walker.next_batch()? {
                if header.last_offset() >= from {
                    let marker = if header.is_control() {
                        let mut batch = vec![0u8; header.total_bytes() as usize];
                        file.read_exact_at(&mut batch, position)?;
                        parse_marker(&batch)
                    } else {
                        None
                    };
                    if let Some(aborted) = producers.aborted_by(&header, marker) {
                        let keep_open = segment.is_active();
                        if segment
                            .txn_index
                            .append(storage.as_ref(), &aborted, keep_open)?
                        {
                            self.dir_changes += 1;
                        }
                    }
                    self.producers_evicted +=
                        producers.record(&header, marker, now_ms, producers_max) as u64;
                }
            }
        }
        Ok(())
    }

    /// Writes an abort a snapshot of an earlier version listed to the index of the segment
    /// holding its marker, unless the index has it (a crash before the next snapshot).
    fn index_legacy_abort(&mut self, legacy: LegacyAbortedTxn, from: i64) -> Result<(), LogError> {
        if legacy.last_offset < self.log_start_offset || legacy.last_offset >= from {
            return Ok(());
        }
        let storage = self.storage().clone();
        let Some((_, segment)) = self.segments.range_mut(..=legacy.last_offset).next_back() else {
            return Ok(());
        };
        let indexed = segment.txn_index.entries(storage.as_ref())?;
        if indexed.iter().any(|e| e.last_offset == legacy.last_offset) {
            return Ok(());
        }
        let txn = AbortedTxn {
            producer_id: legacy.producer_id,
            first_offset: legacy.first_offset,
            last_offset: legacy.last_offset,
            // Unknown: a search reads on past it.
            last_stable_offset: -1,
        };
        let keep_open = segment.is_active();
        if segment
            .txn_index
            .append(storage.as_ref(), &txn, keep_open)?
        {
            self.dir_changes += 1;
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

    /// Moves the high watermark up to `offset` (on a follower the leader's, on a leader with
    /// followers how far they all have the log), clamped to `[log_start_offset,
    /// log_end_offset]`. It never moves back here: only [`Log::truncate_to`] lowers it.
    pub fn set_high_watermark(&mut self, offset: i64) {
        let clamped = offset.clamp(self.log_start_offset, self.log_end_offset);
        self.high_watermark = self.high_watermark.max(clamped);
    }

    /// Whether the partition has followers. While it has, an append leaves the high watermark
    /// where it is and only [`Log::set_high_watermark`] moves it; without, every append is
    /// committed at once, so turning this off moves it to the log end. Replicated appends
    /// ([`Log::append_replicated`]) never move it either way.
    pub fn set_replicated(&mut self, replicated: bool) {
        self.replicated = replicated;
        if !replicated {
            self.high_watermark = self.log_end_offset;
        }
    }

    /// Whether the partition has followers ([`Log::set_replicated`]).
    pub fn is_replicated(&self) -> bool {
        self.replicated
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
        self.replace_epoch_cache(cache)
    }

    /// Persists `cache` as the leader epoch checkpoint, then adopts it: its last epoch becomes
    /// the current one. Nothing changes when the write fails.
    fn replace_epoch_cache(&mut self, cache: Vec<EpochEntry>) -> Result<(), LogError> {
        write_json(
            self.storage().as_ref(),
            &self.dir.join(LEADER_EPOCH_FILE),
            &cache,
        )?;
        self.leader_epoch = cache.last().map_or(0, |e| e.epoch);
        self.epoch_cache = cache;
        Ok(())
    }

    /// The leader epoch of the last batch in the log, as a follower's Fetch names it
    /// (`last_fetched_epoch`, KIP-320): the last epoch that started below the log end; -1 when
    /// none did (an empty log, or one whose epochs are unknown).
    pub fn last_fetched_epoch(&self) -> i32 {
        self.epoch_cache
            .iter()
            .rev()
            .find(|e| e.start_offset < self.log_end_offset)
            .map_or(-1, |e| e.epoch)
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

    /// Whether `producer_id` at `epoch` has a transaction open here (its transactional batches
    /// need no verification).
    pub fn in_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers.in_transaction(producer_id, epoch)
    }

    /// The guard a transactional batch of `producer_id` at `epoch` needs before it may open
    /// the producer's transaction here, once the transaction coordinator confirmed the
    /// partition is in it; `None` when the transaction is open here already.
    pub fn start_txn_verification(
        &mut self,
        producer_id: i64,
        epoch: i16,
    ) -> Option<VerificationGuard> {
        self.producers.start_verification(producer_id, epoch)
    }

    /// Checks the idempotent-producer sequence, assigns offsets and appends a validated batch:
    /// the stored bytes are the producer's, with only base offset and leader epoch patched.
    /// The high watermark moves to the new log end unless the log is replicated
    /// ([`Log::set_replicated`]). `LogError::DiskFull` leaves the log exactly as it was.
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
        let check = if batch.is_from_coordinator() {
            self.producers.check_epoch(&header)
        } else {
            self.producers.check(&header)
        };
        match check {
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
                    leader_epoch: self.leader_epoch,
                });
            }
            SequenceCheck::OutOfOrder => return Err(LogError::OutOfOrderSequence),
            SequenceCheck::StaleEpoch => return Err(LogError::InvalidProducerEpoch),
        }
        if !self.producers.check_verified(&header, batch.verification()) {
            return Err(LogError::NotInTransaction);
        }
        let marker = marker_of(&header, batch.bytes());
        if let Some(TxnMarker {
            coordinator_epoch, ..
        }) = marker
        {
            if let Some(current) = self
                .producers
                .fenced_coordinator(header.producer_id, coordinator_epoch)
            {
                return Err(LogError::CoordinatorFenced {
                    coordinator_epoch,
                    current,
                });
            }
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
        let parts: [&[u8]; 2] = [&head, &batch.bytes()[PATCHED_HEAD_BYTES..]];
        self.append_to_active(&stored, &parts, marker, now_ms)?;
        self.producers_evicted +=
            self.producers
                .record(&stored, marker, now_ms, self.config.producer_ids_max) as u64;
        self.log_end_offset = next_offset;
        if !self.replicated {
            self.high_watermark = self.log_end_offset;
        }
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
            leader_epoch: self.leader_epoch,
        })
    }

    /// Appends one record batch exactly as the leader stored it (a follower's fetch): offsets
    /// and leader epoch are the leader's, and no byte changes. The batch must pass the checks
    /// of a stored batch (framing, magic, CRC-32C, counts; its records the leader validated)
    /// and start at or past the log end (a compacted leader's log has gaps), or it is refused
    /// with `NonContiguous`. The leader already
    /// refused duplicates, so producer sequences are recorded, not checked. A batch of a newer
    /// leader epoch starts that epoch at its base offset in the epoch cache. The high
    /// watermark stays: the leader's arrives through [`Log::set_high_watermark`].
    /// `OutOfResources` leaves the records as they were (a new epoch the batch starts may stay
    /// recorded at the log end, an epoch without records yet, as [`Log::set_leader_epoch`]
    /// records one).
    pub fn append_replicated(&mut self, batch: &[u8]) -> Result<AppendInfo, LogError> {
        let header = validate_stored_header(batch)?;
        self.append_stored(batch, header)
    }

    /// Appends the batches of a fetched records blob in order, as [`Log::append_replicated`]
    /// does, and returns how many were appended. Batches wholly below the log end (fetched
    /// again) are skipped, and a trailing partial batch (a fetch response may end with one,
    /// cut at its size limit) is ignored. Stops at the first error and returns it; the batches
    /// before it stay appended.
    pub fn append_replicated_batches(&mut self, records: &[u8]) -> Result<usize, LogError> {
        let mut appended = 0;
        let mut rest = records;
        while let Some(declared) = BatchHeader::parse(rest) {
            let whole = usize::try_from(declared.total_bytes())
                .ok()
                .filter(|total| *total <= rest.len());
            let Some(total) = whole else {
                break;
            };
            let (batch, tail) = rest.split_at(total);
            rest = tail;
            let header = validate_stored_header(batch)?;
            if header.last_offset() < self.log_end_offset {
                continue;
            }
            self.append_stored(batch, header)?;
            appended += 1;
        }
        Ok(appended)
    }

    /// Appends a batch as the leader stored it, its header validated as stored.
    fn append_stored(&mut self, batch: &[u8], header: BatchHeader) -> Result<AppendInfo, LogError> {
        if self.is_deleted() {
            return Err(LogError::Deleted);
        }
        // A compacted leader's log has gaps: a batch may start past the log end, never before.
        if header.base_offset < self.log_end_offset {
            return Err(LogError::NonContiguous {
                expected: self.log_end_offset,
                got: header.base_offset,
            });
        }
        let bytes = batch.len() as u64;
        if bytes > self.config.segment_bytes {
            return Err(LogError::RecordListTooLarge {
                bytes,
                segment_bytes: self.config.segment_bytes,
            });
        }
        let next_offset = header
            .base_offset
            .checked_add(i64::from(header.last_offset_delta))
            .and_then(|last| last.checked_add(1))
            .ok_or(LogError::Unsupported("offsets beyond i64::MAX"))?;
        let now_ms = self.clock.now_ms();
        self.maybe_roll(bytes, i64::from(header.last_offset_delta), now_ms)?;
        if header.partition_leader_epoch > self.leader_epoch {
            let mut cache = self.epoch_cache.clone();
            cache.push(EpochEntry {
                epoch: header.partition_leader_epoch,
                start_offset: header.base_offset,
            });
            self.replace_epoch_cache(cache)?;
        }
        let marker = marker_of(&header, batch);
        self.append_to_active(&header, &[batch], marker, now_ms)?;
        self.producers_evicted +=
            self.producers
                .record(&header, marker, now_ms, self.config.producer_ids_max) as u64;
        self.log_end_offset = next_offset;
        Ok(AppendInfo {
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            duplicate: false,
            log_start_offset: self.log_start_offset,
            log_append_time_ms: if header.is_log_append_time() {
                header.max_timestamp
            } else {
                -1
            },
            leader_epoch: self.leader_epoch,
        })
    }

    /// Appends a batch (`stored`: its header as stored, `marker`: what it says if it is a
    /// control batch) to the active segment. An abort marker's entry goes to the segment's
    /// aborted-transaction index first, so a full disk refuses the marker with nothing
    /// changed, and the entry is withdrawn if the batch cannot be written.
    fn append_to_active(
        &mut self,
        stored: &BatchHeader,
        parts: &[&[u8]],
        marker: Option<TxnMarker>,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let interval = self.config.index_interval_bytes;
        let aborted = self.producers.aborted_by(stored, marker);
        if let Some(aborted) = &aborted {
            let storage = self.storage().clone();
            if self
                .active_mut()
                .txn_index
                .append(storage.as_ref(), aborted, true)?
            {
                self.dir_changes += 1;
            }
        }
        let appended = self.active_mut().append(stored, parts, interval, now_ms);
        if appended.is_err() && aborted.is_some() {
            self.active_mut().txn_index.withdraw_last()?;
        }
        appended
    }

    /// Removes every record at `offset` and above: a follower whose log diverged from its new
    /// leader's cuts it back to where they agree. Truncation is at batch boundaries: the batch
    /// holding `offset` goes whole, so the log then ends at that batch's base offset (one past
    /// the last batch kept). A no-op when `offset` is at or past the log end. Below the log
    /// start offset everything goes and the log ends at its start offset, which stays.
    ///
    /// Later segments are deleted and the one holding the cut is cut and becomes the active
    /// segment, durably and in an order that leaves a prefix of the log after a crash at any
    /// point. The high watermark, recovery point and cleaner position are lowered to the new
    /// end, epochs starting at or past it are forgotten, producer state is rebuilt from what
    /// is left, and the checkpoints are rewritten. Flush tickets and checkpoints taken before
    /// are stale: [`Log::flush_done`] ignores them and [`LogCheckpoint::write`] writes
    /// nothing, so callers serialize this with checkpoint writes. Slow (file I/O and a scan of
    /// producer state under the lock), and rare. `OutOfResources` is returned only before
    /// anything changed; once removing began any failure is `Io`, fatal as for other writes.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if self.is_deleted() {
            return Err(LogError::Deleted);
        }
        let cut = offset.max(self.log_start_offset);
        if cut >= self.log_end_offset {
            return Ok(());
        }
        // The log will end in the last segment starting below the cut, or in the first one.
        let keep_base = self
            .segments
            .range(..cut)
            .next_back()
            .or_else(|| self.segments.iter().next())
            .map(|(base, _)| *base)
            .expect("log has an active segment");
        let plan = self
            .segments
            .get(&keep_base)
            .map(|segment| segment.plan_cut(self.storage().as_ref(), &self.files, cut))
            .expect("the kept segment is in the log")?;
        let snapshot = self.read_producer_snapshot();
        self.cut_log(keep_base, plan, snapshot)
            .map_err(|error| match error {
                LogError::Io(error) | LogError::OutOfResources(error) => LogError::Io(error),
                other => LogError::Io(std::io::Error::other(other)),
            })
    }

    /// Empties the log and starts it again at `offset`: a follower whose leader no longer has
    /// the offsets it needs (retention deleted them while it was behind) copies from the
    /// leader's log start instead, as Kafka's `truncateFullyAndStartAt` does. The checkpoint
    /// naming the new start is written first and the segments deleted newest first, so a crash
    /// at any point leaves either the old log or an empty one that reopens at `offset`.
    /// Producer state and the epoch cache start afresh; failures are `Io`, fatal.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        if self.is_deleted() {
            return Err(LogError::Deleted);
        }
        self.truncations.fetch_add(1, Ordering::AcqRel);
        let storage = self.storage().clone();
        storage.remove(&self.dir.join(PRODUCER_SNAPSHOT_FILE))?;
        self.producers = ProducerStateTable::default();
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.first_dirty_offset = offset;
        self.checkpoint().write()?;
        while let Some((base, segment)) = self.segments.pop_last() {
            segment.paths.remove(&self.files)?;
            tracing::info!(target: "weir::log", dir = %self.dir.display(), base, "deleted segment to start over at the leader's log start");
        }
        self.rolled_unsynced.clear();
        let now_ms = self.clock.now_ms();
        let segment = Segment::create(storage.as_ref(), &self.dir, offset, now_ms)?;
        self.segments.insert(offset, segment);
        self.active().sync_all()?;
        storage.sync_dir(&self.dir)?;
        self.dir_changes_synced = self.dir_changes;
        // The batches copied from the leader bring their epochs again.
        self.replace_epoch_cache(Vec::new())?;
        tracing::warn!(target: "weir::log", dir = %self.dir.display(), offset, "log emptied and restarted at the leader's log start");
        self.checkpoint().write()
    }

    /// The changes of [`Log::truncate_to`], once it planned the cut of the segment at
    /// `keep_base` and read the producer snapshot.
    fn cut_log(
        &mut self,
        keep_base: i64,
        plan: SegmentCut,
        snapshot: Option<ProducerSnapshot>,
    ) -> Result<(), LogError> {
        self.truncations.fetch_add(1, Ordering::AcqRel);
        let storage = self.storage().clone();
        // Gone first, so that no crash leaves a snapshot of records that are gone too.
        storage.remove(&self.dir.join(PRODUCER_SNAPSHOT_FILE))?;
        // Newest first, and durably before the cut below, so a crash leaves a prefix.
        while let Some(entry) = self.segments.last_entry().filter(|e| *e.key() > keep_base) {
            entry.get().paths.remove(&self.files)?;
            tracing::info!(target: "weir::log", dir = %self.dir.display(), base = *entry.key(), "truncation deleted segment");
            entry.remove();
        }
        storage.sync_dir(&self.dir)?;
        self.dir_changes_synced = self.dir_changes;
        let now_ms = self.clock.now_ms();
        let interval = self.config.index_interval_bytes;
        let (segment, recovered) = self
            .segments
            .get(&keep_base)
            .expect("the kept segment is in the log")
            .truncated(plan, now_ms, interval)?;
        segment.sync_all()?;
        if recovered > 0 {
            tracing::warn!(target: "weir::log", dir = %self.dir.display(), base = keep_base, bytes = recovered, "truncated corrupt data after the cut");
        }
        self.segments.insert(keep_base, segment);
        let end = self.active().next_offset.max(self.log_start_offset);
        self.log_end_offset = end;
        self.high_watermark = self.high_watermark.min(end);
        self.recovery_point = self.recovery_point.min(end);
        self.first_dirty_offset = self.first_dirty_offset.min(end);
        // The kept segment was just synced; those after it are gone.
        self.rolled_unsynced
            .retain(|(rolled_at, _)| *rolled_at <= keep_base);
        self.restore_producer_state(snapshot, false)?;
        let mut epochs = self.epoch_cache.clone();
        epochs.retain(|e| e.start_offset < end);
        if epochs.is_empty() {
            // As `open` does for a log without epochs: epoch 0 from the log end.
            epochs.push(EpochEntry {
                epoch: 0,
                start_offset: end,
            });
        }
        if epochs != self.epoch_cache {
            self.replace_epoch_cache(epochs)?;
        }
        tracing::info!(target: "weir::log", dir = %self.dir.display(), end, "truncated log");
        self.checkpoint().write()
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

    /// Moves the log start offset up to `offset`, at most to the log end (DeleteRecords on a
    /// leader, which allows no more than the high watermark; a follower following its
    /// leader's start): records below it are no longer read, listed or replicated, and
    /// retention deletes the segments wholly below it. The new start is checkpointed before
    /// this returns, so a restart keeps it; when the checkpoint cannot be written nothing
    /// changes. Returns the log start offset now.
    pub fn advance_log_start_offset(&mut self, offset: i64) -> Result<i64, LogError> {
        if self.is_deleted() {
            return Err(LogError::Deleted);
        }
        let offset = offset.min(self.log_end_offset);
        if offset <= self.log_start_offset {
            return Ok(self.log_start_offset);
        }
        let before = self.log_start_offset;
        self.log_start_offset = offset;
        if let Err(error) = self.checkpoint().write() {
            self.log_start_offset = before;
            return Err(error);
        }
        self.high_watermark = self.high_watermark.max(offset);
        tracing::info!(target: "weir::log", dir = %self.dir.display(), log_start_offset = offset, "log start offset advanced (records deleted)");
        Ok(offset)
    }

    /// Takes whole segments past `retention.ms` (by each segment's largest record timestamp, or
    /// its last write when no record has a timestamp),
    /// beyond `retention.bytes`, or wholly below the log start offset (DeleteRecords) out of
    /// the log, oldest first, and advances the log start
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
            let deleted_records = oldest.next_offset <= self.log_start_offset;
            if !(expired(oldest) || over_size || deleted_records) {
                break;
            }
            // Only what every in-sync replica has may go: a follower still fetching a segment
            // would otherwise find its offsets gone (as in Kafka, retention stops at the high
            // watermark).
            if oldest.next_offset > self.high_watermark {
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
        // Nothing at or past the last stable offset: an open transaction there may yet abort.
        let last_stable = self.last_stable_offset();
        let sources: Vec<SourceSegment> = self
            .segments
            .values()
            .take_while(|s| {
                s.base_offset < active_base
                    && s.next_offset <= last_stable
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
        let start = sources.first().map_or(0, |s| s.base_offset);
        let end = sources.last().map_or(0, |s| s.next_offset);
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
            aborted: self.aborted_lookup(start, end),
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
            for (from, to) in group
                .segment
                .paths
                .with_txn_index()
                .into_iter()
                .zip(target.with_txn_index())
            {
                self.files.forget(to);
                storage.rename(from, to)?;
                self.files.forget(to);
            }
            let mut segment = group.segment;
            // The copy's own aborted-transaction index replaced the first source's; an empty
            // one goes (a crash before leaves an empty file, which reads as none).
            segment.txn_index = if segment.txn_index.is_empty() {
                storage.remove(&target.txn_index)?;
                TxnIndex::empty(target.txn_index.clone())
            } else {
                TxnIndex::open(storage.as_ref(), target.txn_index.clone())?
            };
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

    /// The last stable offset: below it every transaction is decided (committed or aborted),
    /// so a read_committed consumer reads up to it. The high watermark, or the first offset
    /// of the oldest transaction still open if that is lower.
    pub fn last_stable_offset(&self) -> i64 {
        self.producers
            .first_unstable_offset()
            .map_or(self.high_watermark, |first| first.min(self.high_watermark))
    }

    /// How many transactions are open on the partition (their producers' records written, no
    /// marker yet).
    pub fn open_transactions(&self) -> usize {
        self.producers.open_transactions()
    }

    /// How many transactions open on the partition are hung: their producer has not appended
    /// here for longer than `max_timeout_ms` (the broker's `transaction.max.timeout.ms`), by
    /// when its coordinator would have ended any transaction it knows.
    pub fn hung_transactions(&self, max_timeout_ms: i64) -> usize {
        self.producers
            .open_transactions_idle_longer_than(self.clock.now_ms(), max_timeout_ms)
    }

    /// A search for the transactions aborted whose records may lie in `[from, upper)`, for a
    /// read_committed consumer to skip: the aborted-transaction indexes that hold entries,
    /// from the segment holding `from` on. Memory only: [`AbortedLookup::collect`] reads them.
    pub fn aborted_lookup(&self, from: i64, upper: i64) -> AbortedLookup {
        let start = self
            .segments
            .range(..=from)
            .next_back()
            .map_or(i64::MIN, |(base, _)| *base);
        AbortedLookup {
            from,
            upper,
            indexes: self
                .segments
                .range(start..)
                .map(|(_, segment)| &segment.txn_index)
                .filter(|index| !index.is_empty())
                .map(|index| index.file_ref(&self.files))
                .collect(),
        }
    }

    /// Every producer the partition tracks (DescribeProducers).
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        self.producers.active()
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
                truncations: self.truncations.load(Ordering::Acquire),
            },
            files,
            dir,
        }
    }

    /// True when a rolled segment waits for its fsync.
    pub fn has_unsynced_rolled(&self) -> bool {
        !self.rolled_unsynced.is_empty()
    }

    /// Records that a ticket's files were synced. A ticket taken before a truncation counts
    /// for the directory only: its end offset may name offsets written again since.
    pub fn flush_done(&mut self, done: FlushDone) {
        self.dir_changes_synced = self.dir_changes_synced.max(done.dir_changes);
        if done.truncations != self.truncations.load(Ordering::Acquire) {
            return;
        }
        self.rolled_unsynced
            .retain(|(rolled_at, _)| *rolled_at > done.end_offset);
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
            sync_first: self
                .rolled_unsynced
                .iter()
                .flat_map(|(_, files)| files.iter().cloned())
                .chain(self.active().txn_index.file())
                .collect(),
            sync_dir: self.dir_changes > self.dir_changes_synced,
            snapshot: ProducerSnapshot {
                offset: self.log_end_offset,
                producers: self.producers.clone(),
            },
            checkpoint: RecoveryCheckpoint {
                recovery_point: self.recovery_point,
                log_start_offset: self.log_start_offset,
                first_dirty_offset: self.first_dirty_offset,
            },
            truncations_taken: self.truncations.load(Ordering::Acquire),
            truncations: self.truncations.clone(),
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

/// What a control batch's marker says (`None` for a data batch).
fn marker_of(header: &BatchHeader, batch: &[u8]) -> Option<TxnMarker> {
    if header.is_control() {
        parse_marker(batch)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{build_batch, BatchError, ProducerFields};
    use crate::records::ValidationLimits;
    use crate::validate::validate;
    use weir_clock::ManualClock;
    use weir_storage::MemoryStorage;

    const DIR: &str = "/partition-0";

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_interval_bytes: 128,
            ..LogConfig::default()
        }
    }

    fn open(storage: &MemoryStorage) -> Log {
        let files = FileCache::new(Arc::new(storage.clone()), 8);
        Log::open(
            Path::new(DIR),
            files,
            Arc::new(ManualClock::new(1_000)),
            config(),
        )
        .expect("open log")
        .0
    }

    fn produce(
        log: &mut Log,
        values: &[&[u8]],
        producer: ProducerFields,
    ) -> Result<AppendInfo, LogError> {
        let batch = build_batch(values, 1_000, producer);
        let valid = validate(
            Bytes::from(batch),
            &ValidationLimits::unbounded_time(1 << 20),
        )?;
        log.append(&valid)
    }

    /// Appends `count` one-record batches of 50 bytes, the i-th holding `first + i`.
    fn produce_many(log: &mut Log, first: u8, count: u8) {
        for i in first..first + count {
            produce(log, &[&[i; 50]], ProducerFields::NONE).expect("append");
        }
    }

    /// Every stored batch from the log start to the log end, as a leader's fetches return them.
    fn stored(log: &Log) -> Vec<u8> {
        let mut out = Vec::new();
        let mut next = log.log_start_offset();
        while let Some(view) = log.read_view(next, log.log_end_offset()).expect("view") {
            let Some(slice) = view.slice(1 << 20, true).expect("slice") else {
                break;
            };
            let bytes = slice.read().expect("read");
            let batches = split(&bytes);
            assert!(!batches.is_empty(), "a read from {next} made no progress");
            for batch in batches {
                next = validate_stored_header(batch).expect("valid").last_offset() + 1;
                out.extend_from_slice(batch);
            }
        }
        out
    }

    /// The whole batches of `bytes`.
    fn split(bytes: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(header) = BatchHeader::parse(rest) {
            let total = header.total_bytes() as usize;
            if total > rest.len() {
                break;
            }
            let (batch, tail) = rest.split_at(total);
            out.push(batch);
            rest = tail;
        }
        out
    }

    /// The base offsets of the stored batches.
    fn base_offsets(log: &Log) -> Vec<i64> {
        split(&stored(log))
            .iter()
            .map(|b| validate_stored_header(b).expect("valid").base_offset)
            .collect()
    }

    /// A leader log of 20 batches: offsets 0-9 in epoch 1, 10-19 in epoch 3.
    fn leader(storage: &MemoryStorage) -> Log {
        let mut log = open(storage);
        log.set_leader_epoch(1).expect("epoch 1");
        produce_many(&mut log, 0, 10);
        log.set_leader_epoch(3).expect("epoch 3");
        produce_many(&mut log, 10, 10);
        log
    }

    #[test]
    fn a_follower_reproduces_the_leaders_log() {
        let leader = leader(&MemoryStorage::new());
        let mut follower = open(&MemoryStorage::new());
        assert_eq!(follower.last_fetched_epoch(), -1, "an empty log");
        let records = stored(&leader);
        assert_eq!(
            follower
                .append_replicated_batches(&records)
                .expect("replicate"),
            20
        );
        assert_eq!(stored(&follower), records, "identical bytes");
        assert_eq!(follower.log_end_offset(), 20);
        assert_eq!(follower.segment_count(), leader.segment_count());
        assert_eq!(follower.last_fetched_epoch(), 3);
        assert_eq!(follower.leader_epoch(), 3);
        for epoch in 0..5 {
            assert_eq!(
                follower.end_offset_for_epoch(epoch),
                leader.end_offset_for_epoch(epoch),
                "epoch {epoch}"
            );
        }
        assert_eq!(follower.end_offset_for_epoch(1), Some((1, 10)));
        assert_eq!(follower.end_offset_for_epoch(2), Some((1, 10)));
        assert_eq!(follower.end_offset_for_epoch(3), Some((3, 20)));

        assert_eq!(follower.high_watermark(), 0, "replication leaves it");
        follower.set_high_watermark(5);
        assert_eq!(follower.high_watermark(), 5);
        follower.set_high_watermark(2);
        assert_eq!(follower.high_watermark(), 5, "never back");
        follower.set_high_watermark(1_000);
        assert_eq!(follower.high_watermark(), 20, "clamped to the log end");

        assert_eq!(
            follower
                .append_replicated_batches(&records)
                .expect("fetched again"),
            0,
            "batches below the log end are skipped"
        );
        follower.close().expect("close");
        let reopened = open_at(&follower);
        assert_eq!(reopened.end_offset_for_epoch(2), Some((1, 10)));
        assert_eq!(reopened.last_fetched_epoch(), 3);
    }

    /// The log over the same storage as `log`, reopened (the caller closed or dropped it).
    fn open_at(log: &Log) -> Log {
        Log::open(
            Path::new(DIR),
            FileCache::new(log.storage().clone(), 8),
            Arc::new(ManualClock::new(1_000)),
            config(),
        )
        .expect("reopen")
        .0
    }

    #[test]
    fn a_batch_that_does_not_continue_the_log_is_refused() {
        let leader = leader(&MemoryStorage::new());
        let records = stored(&leader);
        let batches = split(&records);
        let mut follower = open(&MemoryStorage::new());
        follower
            .append_replicated_batches(&records[..batches[0].len() * 5])
            .expect("five batches");
        let before = (stored(&follower), follower.epoch_cache.clone());
        let again = follower.append_replicated(batches[0]);
        assert!(
            matches!(
                again,
                Err(LogError::NonContiguous {
                    expected: 5,
                    got: 0
                })
            ),
            "{again:?}"
        );
        // A gap (a compacted leader's log) is taken: the log goes on past it.
        let mut gapped = open(&MemoryStorage::new());
        gapped
            .append_replicated(batches[12])
            .expect("a batch past a gap");
        assert_eq!(gapped.log_end_offset(), 13);
        let mut corrupt = batches[5].to_vec();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 0xff;
        assert!(matches!(
            follower.append_replicated(&corrupt),
            Err(LogError::Batch(BatchError::Corrupt(_)))
        ));
        assert_eq!(follower.log_end_offset(), 5);
        assert_eq!((stored(&follower), follower.epoch_cache.clone()), before);
        let info = follower
            .append_replicated(batches[5])
            .expect("the next one");
        assert_eq!((info.base_offset, info.last_offset), (5, 5));
    }

    #[test]
    fn a_trailing_partial_batch_is_ignored() {
        let leader = leader(&MemoryStorage::new());
        let records = stored(&leader);
        let batches = split(&records);
        let mut follower = open(&MemoryStorage::new());
        let three: usize = batches[..3].iter().map(|b| b.len()).sum();
        let cut_in_body = three + batches[3].len() - 7;
        assert_eq!(
            follower
                .append_replicated_batches(&records[..cut_in_body])
                .expect("replicate"),
            3
        );
        assert_eq!(follower.log_end_offset(), 3);
        let four: usize = three + batches[3].len();
        assert_eq!(
            follower
                .append_replicated_batches(&records[..four + 30])
                .expect("a tail shorter than a header"),
            1
        );
        assert_eq!(follower.log_end_offset(), 4);
        assert_eq!(
            follower
                .append_replicated_batches(&records)
                .expect("the rest"),
            16
        );
        assert_eq!(stored(&follower), records);
    }

    #[test]
    fn truncation_mid_segment_keeps_a_prefix_and_appends_continue() {
        let storage = MemoryStorage::new();
        let mut log = open(&storage);
        produce_many(&mut log, 0, 40);
        let original = stored(&log);
        let segments = log.segment_count();
        assert!(segments > 3, "small segments roll");
        let cut = 25;
        assert!(!log.segments.contains_key(&cut), "a cut inside a segment");
        log.truncate_to(cut).expect("truncate");
        assert_eq!(log.log_end_offset(), cut);
        assert_eq!(log.high_watermark(), cut);
        assert!(log.recovery_point() <= cut);
        assert!(log.segment_count() < segments);
        let prefix: usize = split(&original)[..cut as usize]
            .iter()
            .map(|b| b.len())
            .sum();
        assert_eq!(stored(&log), original[..prefix].to_vec());
        log.truncate_to(cut + 5).expect("past the end: a no-op");
        assert_eq!(log.log_end_offset(), cut);

        let info = produce(&mut log, &[b"after"], ProducerFields::NONE).expect("append");
        assert_eq!(info.base_offset, cut);
        let expected = stored(&log);
        drop(log); // a crash
        let log = open(&storage);
        assert_eq!(log.log_end_offset(), cut + 1);
        assert_eq!(stored(&log), expected);
    }

    #[test]
    fn truncation_at_a_segment_boundary_removes_the_later_segments() {
        let storage = MemoryStorage::new();
        let mut log = open(&storage);
        produce_many(&mut log, 0, 40);
        let original = stored(&log);
        let base = *log.segments.keys().nth(2).expect("a third segment");
        log.truncate_to(base).expect("truncate");
        assert_eq!(log.segment_count(), 2);
        assert_eq!(log.log_end_offset(), base);
        assert_eq!(base_offsets(&log), (0..base).collect::<Vec<_>>());
        let names = storage.list(Path::new(DIR)).expect("list");
        assert!(
            !names.contains(&format!("{base:020}.log")),
            "the segment files are deleted: {names:?}"
        );
        produce_many(&mut log, 100, 10);
        assert_eq!(log.log_end_offset(), base + 10);
        log.close().expect("close");
        let log = open(&storage);
        assert_eq!(log.log_end_offset(), base + 10);
        let kept: usize = split(&original)[..base as usize]
            .iter()
            .map(|b| b.len())
            .sum();
        assert_eq!(stored(&log)[..kept], original[..kept]);
        assert_eq!(base_offsets(&log), (0..base + 10).collect::<Vec<_>>());
    }

    #[test]
    fn truncation_inside_a_batch_removes_the_whole_batch() {
        let storage = MemoryStorage::new();
        let mut log = open(&storage);
        for _ in 0..5 {
            produce(&mut log, &[b"a", b"b", b"c"], ProducerFields::NONE).expect("append");
        }
        log.truncate_to(7).expect("truncate");
        assert_eq!(log.log_end_offset(), 6, "the batch 6-8 went whole");
        assert_eq!(base_offsets(&log), vec![0, 3]);
        assert_eq!(
            produce(&mut log, &[b"d"], ProducerFields::NONE)
                .expect("append")
                .base_offset,
            6
        );
        drop(log);
        let log = open(&storage);
        assert_eq!(base_offsets(&log), vec![0, 3, 6]);
        assert_eq!(log.log_end_offset(), 7);
    }

    #[test]
    fn truncation_below_the_first_segment_empties_the_log() {
        let storage = MemoryStorage::new();
        let mut log = open(&storage);
        produce_many(&mut log, 0, 40);
        log.set_config(LogConfig {
            retention_bytes: 2048,
            ..config()
        });
        for removal in log.enforce_retention().expect("retention") {
            removal.remove().expect("delete");
        }
        let start = log.log_start_offset();
        assert!(start > 0, "retention moved the start");
        log.set_config(config());
        log.truncate_to(start - 3).expect("truncate");
        assert_eq!(log.log_start_offset(), start, "the start stays");
        assert_eq!(log.log_end_offset(), start);
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.size_bytes(), 0);
        assert_eq!(
            produce(&mut log, &[b"x"], ProducerFields::NONE)
                .expect("append")
                .base_offset,
            start
        );
        drop(log);
        let log = open(&storage);
        assert_eq!(log.log_start_offset(), start);
        assert_eq!(log.log_end_offset(), start + 1);

        let mut log = open(&MemoryStorage::new());
        produce_many(&mut log, 0, 20);
        log.truncate_to(0).expect("truncate everything");
        assert_eq!((log.log_end_offset(), log.segment_count()), (0, 1));
        assert!(stored(&log).is_empty());
    }

    #[test]
    fn a_follower_behind_the_leaders_log_start_starts_over_there() {
        let mut leader = open(&MemoryStorage::new());
        produce_many(&mut leader, 0, 40);
        leader.set_config(LogConfig {
            retention_bytes: 2048,
            ..config()
        });
        for removal in leader.enforce_retention().expect("retention") {
            removal.remove().expect("delete");
        }
        let start = leader.log_start_offset();
        assert!(start > 3, "retention moved the leader's start");
        let storage = MemoryStorage::new();
        let mut follower = open(&storage);
        produce_many(&mut follower, 0, 3);
        follower
            .truncate_fully_and_start_at(start)
            .expect("start over");
        assert_eq!(
            (follower.log_start_offset(), follower.log_end_offset()),
            (start, start)
        );
        assert_eq!(follower.size_bytes(), 0);
        let records = stored(&leader);
        let copied = follower
            .append_replicated_batches(&records)
            .expect("copies from the leader's start");
        assert!(copied > 0);
        assert_eq!(stored(&follower), records);
        assert_eq!(follower.log_end_offset(), leader.log_end_offset());
        drop(follower); // a crash
        let follower = open(&storage);
        assert_eq!(follower.log_start_offset(), start);
        assert_eq!(stored(&follower), records);
    }

    #[test]
    fn truncation_forgets_the_epochs_that_started_after_the_cut() {
        let leader = leader(&MemoryStorage::new());
        let storage = MemoryStorage::new();
        let mut follower = open(&storage);
        follower
            .append_replicated_batches(&stored(&leader))
            .expect("replicate");
        follower.truncate_to(12).expect("truncate");
        assert_eq!(follower.last_fetched_epoch(), 3, "epoch 3 keeps 10 and 11");
        follower.truncate_to(10).expect("truncate");
        assert_eq!(follower.leader_epoch(), 1);
        assert_eq!(follower.last_fetched_epoch(), 1);
        assert_eq!(follower.end_offset_for_epoch(3), Some((1, 10)));
        drop(follower);
        let mut follower = open(&storage);
        assert_eq!(follower.end_offset_for_epoch(3), Some((1, 10)));
        assert_eq!(
            follower
                .append_replicated_batches(&stored(&leader))
                .expect("the new leader's batches"),
            10
        );
        assert_eq!(follower.end_offset_for_epoch(3), Some((3, 20)));
    }

    #[test]
    fn truncated_producer_batches_are_forgotten() {
        let storage = MemoryStorage::new();
        let producer = |seq| ProducerFields {
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: seq,
        };
        let mut log = open(&storage);
        for seq in 0..10 {
            produce(&mut log, &[b"v"], producer(seq)).expect("append");
        }
        log.checkpoint().write().expect("a snapshot at 10");
        log.truncate_to(6).expect("truncate");
        let kept = produce(&mut log, &[b"v"], producer(5)).expect("retry");
        assert!(kept.duplicate, "sequence 5 is still in the log");
        assert_eq!(kept.base_offset, 5);
        let again = produce(&mut log, &[b"v"], producer(6)).expect("append");
        assert!(!again.duplicate, "sequence 6 was truncated");
        assert_eq!(again.base_offset, 6);
        drop(log);
        let mut log = open(&storage);
        let dup = produce(&mut log, &[b"v"], producer(6)).expect("retry");
        assert!(dup.duplicate, "the reopened log knows the new batch");
        assert_eq!(dup.base_offset, 6);
        assert!(matches!(
            produce(&mut log, &[b"v"], producer(9)),
            Err(LogError::OutOfOrderSequence)
        ));
    }

    #[test]
    fn a_truncation_survives_power_loss_and_stale_tickets_count_for_nothing() {
        let storage = MemoryStorage::new();
        let mut log = open(&storage);
        produce_many(&mut log, 0, 40);
        let done = log.flush_ticket().sync().expect("sync");
        log.flush_done(done);
        let expected_prefix: usize = split(&stored(&log))[..20].iter().map(|b| b.len()).sum();
        let original = stored(&log);

        let stale_ticket = log.flush_ticket();
        let stale_checkpoint = log.checkpoint();
        log.truncate_to(20).expect("truncate");
        assert_eq!(log.recovery_point(), 20);
        produce_many(&mut log, 100, 10);
        log.flush_done(stale_ticket.sync().expect("sync"));
        assert_eq!(
            log.recovery_point(),
            20,
            "a ticket from before the truncation proves nothing about offsets written since"
        );
        stale_checkpoint.write().expect("skipped");
        let snapshot: ProducerSnapshot =
            read_json(&storage, &Path::new(DIR).join(PRODUCER_SNAPSHOT_FILE))
                .expect("the snapshot truncation wrote");
        assert_eq!(snapshot.offset, 20, "not the stale one at 40");

        // The records appended since were never synced; the cut was.
        storage.power_loss();
        let log = open(&storage);
        assert_eq!(log.log_end_offset(), 20, "nothing truncated came back");
        assert_eq!(stored(&log), original[..expected_prefix].to_vec());
    }
}
