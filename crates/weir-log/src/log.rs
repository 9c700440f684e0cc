//! The partition log: an ordered set of segments with append, read, retention and recovery.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::{patch_batch, validate_batch};
use crate::checkpoint::{
    read_json, write_json, EpochEntry, ProducerSnapshot, RecoveryCheckpoint, CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_FILE, PRODUCER_SNAPSHOT_FILE, RECOVERY_CHECKPOINT_FILE,
};
use crate::clock::Clock;
use crate::producer_state::{BatchMetadata, ProducerStateTable, SequenceCheck};
use crate::segment::{BatchLocation, Segment, SEGMENT_BYTES_LIMIT};
use crate::storage::{Storage, StorageFile};
use crate::LogError;

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
    /// Every offset below this is durable once `files` are synced.
    pub end_offset: i64,
    files: Vec<Arc<dyn StorageFile>>,
}

impl FlushTicket {
    /// Fsyncs the files. Slow: call without holding the log's lock.
    pub fn sync(&self) -> std::io::Result<()> {
        for file in &self.files {
            file.sync()?;
        }
        Ok(())
    }
}

/// One partition's log.
pub struct Log {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    config: LogConfig,
    segments: BTreeMap<i64, Segment>,
    /// Files of rolled segments not yet fsynced, with the log end offset at their roll.
    rolled_unsynced: Vec<(i64, Vec<Arc<dyn StorageFile>>)>,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    recovery_point: i64,
    leader_epoch: i32,
    epoch_cache: Vec<EpochEntry>,
    producers: ProducerStateTable,
}

fn segment_base_offsets(names: &[String]) -> Vec<i64> {
    let mut bases: Vec<i64> = names
        .iter()
        .filter_map(|n| n.strip_suffix(".log"))
        .filter_map(|stem| stem.parse().ok())
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
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        config: LogConfig,
    ) -> Result<(Log, RecoveryReport), LogError> {
        assert!(config.segment_bytes > 0 && config.segment_bytes <= SEGMENT_BYTES_LIMIT);
        storage.create_dir_all(dir)?;
        let now_ms = clock.now_ms();
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
        let mut segments = BTreeMap::new();
        let mut truncated = false;
        for (i, &base) in bases.iter().enumerate() {
            if truncated {
                tracing::warn!(target: "weir::log", dir = %dir.display(), base, "deleting segment after a truncated one");
                Segment::open_for_recovery(storage.as_ref(), dir, base, now_ms)?
                    .delete(storage.as_ref(), dir)?;
                continue;
            }
            let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            let segment = if clean || next_base <= checkpoint.recovery_point {
                Segment::open_trusted(storage.as_ref(), dir, base, now_ms)?
            } else {
                let mut segment = Segment::open_for_recovery(storage.as_ref(), dir, base, now_ms)?;
                let cut = segment.recover(config.index_interval_bytes, &mut |_| {})?;
                report.segments_scanned += 1;
                if cut > 0 {
                    tracing::warn!(target: "weir::log", dir = %dir.display(), base, bytes = cut, "truncated torn or corrupt tail");
                    report.truncated_bytes += cut;
                    truncated = true;
                }
                segment
            };
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
            storage,
            clock,
            config,
            segments,
            rolled_unsynced: Vec::new(),
            log_start_offset,
            log_end_offset,
            high_watermark: log_end_offset,
            recovery_point: checkpoint.recovery_point.min(log_end_offset),
            leader_epoch: epoch_cache.last().map_or(0, |e| e.epoch),
            epoch_cache,
            producers: ProducerStateTable::default(),
        };
        if log.epoch_cache.is_empty() {
            log.set_leader_epoch(log.leader_epoch)?;
        }
        log.restore_producer_state(clean)?;
        log.active().sync_all()?;
        log.recovery_point = log.log_end_offset;
        Ok((log, report))
    }

    fn restore_producer_state(&mut self, clean: bool) -> Result<(), LogError> {
        let snapshot: Option<ProducerSnapshot> = read_json(
            self.storage.as_ref(),
            &self.dir.join(PRODUCER_SNAPSHOT_FILE),
        );
        let from = match snapshot {
            Some(s) if s.offset <= self.log_end_offset => {
                self.producers = s.producers;
                s.offset
            }
            _ => self.log_start_offset,
        };
        if clean && from == self.log_end_offset {
            return Ok(());
        }
        let now_ms = self.clock.now_ms();
        let mut offset = from.max(self.log_start_offset);
        while let Some((_, location)) = self.locate(offset)? {
            self.producers.record(&location.header, now_ms);
            offset = location.header.last_offset() + 1;
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
        self.leader_epoch = epoch;
        self.epoch_cache.push(EpochEntry {
            epoch,
            start_offset: self.log_end_offset,
        });
        write_json(
            self.storage.as_ref(),
            &self.dir.join(LEADER_EPOCH_FILE),
            &self.epoch_cache,
        )
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

    /// Validates one batch, checks idempotent-producer sequence, assigns offsets and appends.
    /// `batch` is patched in place with its base offset and leader epoch.
    pub fn append(&mut self, batch: &mut [u8]) -> Result<AppendInfo, LogError> {
        let mut header = validate_batch(batch)?;
        if batch.len() as u64 > self.config.max_message_bytes {
            return Err(LogError::MessageTooLarge {
                bytes: batch.len() as u64,
            });
        }
        if header.is_control() || header.is_transactional() {
            return Err(LogError::Unsupported("transactional and control batches"));
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
                });
            }
            SequenceCheck::OutOfOrder => return Err(LogError::OutOfOrderSequence),
            SequenceCheck::StaleEpoch => return Err(LogError::InvalidProducerEpoch),
        }
        let now_ms = self.clock.now_ms();
        self.maybe_roll(batch.len() as u64, now_ms)?;
        let base_offset = self.log_end_offset;
        patch_batch(batch, base_offset, self.leader_epoch);
        header.base_offset = base_offset;
        header.partition_leader_epoch = self.leader_epoch;
        let interval = self.config.index_interval_bytes;
        self.active_mut().append(&header, batch, interval)?;
        self.producers.record(&header, now_ms);
        self.log_end_offset = header.last_offset() + 1;
        self.high_watermark = self.log_end_offset;
        Ok(AppendInfo {
            base_offset,
            last_offset: header.last_offset(),
            duplicate: false,
            log_start_offset: self.log_start_offset,
        })
    }

    fn maybe_roll(&mut self, incoming_bytes: u64, now_ms: i64) -> Result<(), LogError> {
        let config = self.config;
        let active = self.active();
        let full = active.size_bytes + incoming_bytes > config.segment_bytes;
        let aged = now_ms.saturating_sub(active.created_ms) >= config.segment_ms;
        if active.size_bytes > 0 && (full || aged) {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Closes the active segment (making it durable) and starts a new one at the log end.
    /// The old segment is not fsynced here (that would stall appends): its files join the next
    /// flush ticket, and the broker flushes soon after a roll.
    fn roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        let base = self.log_end_offset;
        self.rolled_unsynced
            .push((base, self.active().all_handles()));
        let segment = Segment::create(self.storage.as_ref(), &self.dir, base, now_ms)?;
        tracing::debug!(target: "weir::log", dir = %self.dir.display(), base, "rolled segment");
        self.segments.insert(base, segment);
        Ok(())
    }

    /// Rolls the active segment when it is older than `segment.ms`.
    pub fn roll_if_aged(&mut self) -> Result<(), LogError> {
        self.maybe_roll(0, self.clock.now_ms())
    }

    /// The segment and batch holding `offset` (or the first batch after it).
    fn locate(&self, offset: i64) -> Result<Option<(&Segment, BatchLocation)>, LogError> {
        let start = self
            .segments
            .range(..=offset)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        for segment in self.segments.range(start..).map(|(_, s)| s) {
            if let Some(location) = segment.locate(offset)? {
                return Ok(Some((segment, location)));
            }
        }
        Ok(None)
    }

    /// Reads whole batches from `offset`: up to `max_bytes` (the first batch is returned whole
    /// even when larger), stopping below `upper_offset` (the high watermark for consumers).
    /// Empty bytes when `offset` is at the end.
    pub fn read(&self, offset: i64, max_bytes: u64, upper_offset: i64) -> Result<Bytes, LogError> {
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        if offset >= upper_offset {
            return Ok(Bytes::new());
        }
        match self.locate(offset)? {
            Some((segment, location)) => {
                segment.read_from(location.position, max_bytes, upper_offset)
            }
            None => Ok(Bytes::new()),
        }
    }

    /// The first batch with a record timestamp ≥ `timestamp`, for ListOffsets by time.
    pub fn batch_for_timestamp(&self, timestamp: i64) -> Result<Option<Bytes>, LogError> {
        for segment in self.segments.values() {
            if let Some(location) = segment.find_timestamp(timestamp)? {
                if location.header.last_offset() >= self.log_start_offset {
                    return segment.read_batch(&location).map(Some);
                }
            }
        }
        Ok(None)
    }

    /// The batch carrying the largest timestamp in the log (the first such batch).
    pub fn batch_with_max_timestamp(&self) -> Result<Option<Bytes>, LogError> {
        let best = self
            .segments
            .values()
            .filter(|s| s.max_timestamp >= 0)
            .fold(None::<&Segment>, |best, s| match best {
                Some(b) if b.max_timestamp >= s.max_timestamp => Some(b),
                _ => Some(s),
            });
        let Some(segment) = best else { return Ok(None) };
        match segment.locate(segment.max_timestamp_batch_offset)? {
            Some(location) => segment.read_batch(&location).map(Some),
            None => Ok(None),
        }
    }

    /// Deletes whole segments past `retention.ms` (by each segment's largest timestamp) or
    /// beyond `retention.bytes`, oldest first, and advances the log start offset. Returns the
    /// number of segments deleted.
    pub fn enforce_retention(&mut self) -> Result<usize, LogError> {
        let now_ms = self.clock.now_ms();
        let config = self.config;
        let expired = |s: &Segment| {
            config.retention_ms >= 0
                && s.size_bytes > 0
                && now_ms - s.max_timestamp > config.retention_ms
        };
        if self.segments.len() == 1 && expired(self.active()) {
            self.roll(now_ms)?;
        }
        let mut deleted = 0;
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
            segment.delete(self.storage.as_ref(), &self.dir)?;
            deleted += 1;
            if self.segments.len() == 1 && expired(self.active()) {
                self.roll(now_ms)?;
            }
        }
        if deleted > 0 {
            let first = *self.segments.keys().next().unwrap_or(&self.log_end_offset);
            self.log_start_offset = self.log_start_offset.max(first);
            self.write_checkpoint()?;
        }
        Ok(deleted)
    }

    /// Forgets idle producers; returns how many.
    pub fn expire_producers(&mut self, expiration_ms: i64) -> usize {
        self.producers.expire(self.clock.now_ms(), expiration_ms)
    }

    /// Number of idempotent producers tracked.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// The files to fsync for everything appended so far to be durable.
    pub fn flush_ticket(&self) -> FlushTicket {
        let mut files: Vec<Arc<dyn StorageFile>> = self
            .rolled_unsynced
            .iter()
            .flat_map(|(_, f)| f.iter().cloned())
            .collect();
        files.extend(self.active().sync_handles());
        FlushTicket {
            end_offset: self.log_end_offset,
            files,
        }
    }

    /// True when a rolled segment waits for its fsync.
    pub fn has_unsynced_rolled(&self) -> bool {
        !self.rolled_unsynced.is_empty()
    }

    /// Records that a ticket's files were synced.
    pub fn flush_done(&mut self, end_offset: i64) {
        self.rolled_unsynced
            .retain(|(rolled_at, _)| *rolled_at > end_offset);
        self.recovery_point = self.recovery_point.max(end_offset.min(self.log_end_offset));
    }

    /// Writes the recovery checkpoint and producer snapshot, so the next open scans less.
    pub fn write_checkpoint(&self) -> Result<(), LogError> {
        let snapshot = ProducerSnapshot {
            offset: self.log_end_offset,
            producers: self.producers.clone(),
        };
        write_json(
            self.storage.as_ref(),
            &self.dir.join(PRODUCER_SNAPSHOT_FILE),
            &snapshot,
        )?;
        let checkpoint = RecoveryCheckpoint {
            recovery_point: self.recovery_point,
            log_start_offset: self.log_start_offset,
        };
        write_json(
            self.storage.as_ref(),
            &self.dir.join(RECOVERY_CHECKPOINT_FILE),
            &checkpoint,
        )
    }

    /// Fsyncs everything, writes checkpoints and the clean-shutdown marker. The log must not
    /// be appended to afterwards.
    pub fn close(&mut self) -> Result<(), LogError> {
        for segment in self.segments.values() {
            segment.sync_all()?;
        }
        self.recovery_point = self.log_end_offset;
        self.write_checkpoint()?;
        self.storage
            .write_atomic(&self.dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
        Ok(())
    }

    /// Removes every batch at or after `offset` (for replication's truncation and for tests).
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if offset >= self.log_end_offset {
            return Ok(());
        }
        let offset = offset.max(self.log_start_offset);
        while self.segments.len() > 1 && self.active().base_offset >= offset {
            if let Some((_, segment)) = self.segments.pop_last() {
                segment.delete(self.storage.as_ref(), &self.dir)?;
            }
        }
        self.active_mut().truncate_to(offset)?;
        self.log_end_offset = self.active().next_offset.max(self.active().base_offset);
        self.high_watermark = self.high_watermark.min(self.log_end_offset);
        self.recovery_point = self.recovery_point.min(self.log_end_offset);
        self.producers.truncate(self.log_end_offset);
        self.epoch_cache
            .retain(|e| e.start_offset < self.log_end_offset || e.start_offset == 0);
        Ok(())
    }

    /// Deletes the log's directory and everything in it.
    pub fn delete(self) -> Result<(), LogError> {
        self.storage.remove_dir_all(&self.dir)?;
        Ok(())
    }
}
