//! Log compaction (`cleanup.policy=compact`): keeps the latest record of every key in the
//! inactive segments, as Kafka's log cleaner does.
//!
//! A cleaning is planned under the log's lock ([`crate::Log::cleaning_plan`]: which segments,
//! from where they are dirty), run without it ([`CleaningPlan::clean`]: read the segments,
//! map each key to its latest offset, write cleaned copies) and committed under it again
//! ([`crate::Log::finish_cleaning`]). The active segment is never touched; offsets never
//! change (a cleaned log has gaps); a batch keeps its base offset, last offset delta,
//! producer fields and codec, and loses only the records a later record of the same key
//! supersedes, and tombstones once `delete.retention.ms` has passed since their segment's
//! newest record. Records of aborted transactions are removed and never supersede a record of
//! their key (a read_committed consumer never saw them), and nothing at or past the last
//! stable offset is cleaned: a transaction still open there may yet commit or abort.
//!
//! A transaction's marker (a control batch) stays as long as a batch of its transaction does,
//! and goes in a cleaning that finds none left (as in Kafka, one after the cleaning that
//! removed the last, whose swap may yet be discarded) once its segment is past
//! `delete.retention.ms`, as tombstones do. The cleaned copy carries its own
//! aborted-transaction index: the entries of the abort markers it kept, from all the segments
//! it replaces (an entry without its marker would have a read_committed consumer skip that
//! producer's later records).
//!
//! Crash safety: the cleaned copy of each group of segments is written as `N.*.cleaned` and
//! synced; then `N.cleaning.json` names the segments it replaces (the commit point); the
//! copies are renamed over the first segment's files and the others deleted; the manifest goes
//! last. Opening a log finishes a committed swap and discards an uncommitted one, so a kill -9
//! at any point leaves either the old segments or the cleaned ones, never a mix a consumer
//! could see.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir_codec::encode::put_framed;
use weir_storage::{FileCache, FileRef, Storage};

use crate::batch::BatchHeader;
use crate::compress::{rebuilt_batch, Levels};
use crate::records::for_each_stored_record;
use crate::segment::{HeaderWalker, Segment, SegmentPaths, RELATIVE_OFFSET_MAX};
use crate::txn_index::{AbortedLookup, AbortedTxn, TxnIndex};
use crate::LogError;

/// Suffix of a cleaned copy being written.
pub(crate) const CLEANED_SUFFIX: &str = "cleaned";
/// Suffix of the manifest that commits a swap.
pub(crate) const MANIFEST_SUFFIX: &str = "cleaning.json";
/// Bytes of key-map memory per distinct key (hash, offset and the table's overhead).
pub const KEY_MAP_BYTES_PER_ENTRY: usize = 40;

/// Kafka's compaction settings of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionConfig {
    /// `min.cleanable.dirty.ratio`, in millionths: clean once this share of the log is dirty.
    pub min_cleanable_dirty_ratio_ppm: u32,
    /// `min.compaction.lag.ms`: a record stays uncompacted at least this long.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty record is compacted within this long, whatever the
    /// dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long tombstones stay readable.
    pub delete_retention_ms: i64,
}

impl Default for CompactionConfig {
    fn default() -> CompactionConfig {
        CompactionConfig {
            min_cleanable_dirty_ratio_ppm: 500_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 86_400_000,
        }
    }
}

/// One inactive segment as the plan sees it.
#[derive(Clone)]
pub(crate) struct SourceSegment {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size_bytes: u64,
    pub retention_time_ms: i64,
    pub last_write_ms: i64,
    pub log: FileRef,
}

/// What one cleaning will do, taken under the log's lock; [`CleaningPlan::clean`] runs it
/// without the lock, off the async workers.
pub struct CleaningPlan {
    /// Set when the log is deleted meanwhile: the cleaning writes no manifest after that (its
    /// directory may soon belong to a new topic of the same name).
    pub(crate) abandoned: Arc<AtomicBool>,
    pub(crate) dir: PathBuf,
    pub(crate) files: Arc<FileCache>,
    /// Every inactive segment from the log start to the end of the cleanable range.
    pub(crate) sources: Vec<SourceSegment>,
    /// The first offset not cleaned before: keys are mapped from here.
    pub(crate) dirty_start: i64,
    pub(crate) config: CompactionConfig,
    pub(crate) segment_bytes: u64,
    pub(crate) index_interval_bytes: u64,
    pub(crate) decompressed_bytes_max: u64,
    pub(crate) now_ms: i64,
    /// The transactions aborted among the sources, read from their indexes when the
    /// cleaning runs.
    pub(crate) aborted: AbortedLookup,
}

/// Aborted transactions by producer id: each one's first offset and its abort marker's.
type AbortedRanges = HashMap<i64, Vec<(i64, i64)>>;

/// The transactions a cleaning read and the aborted ones it knows, to tell which markers may
/// go and which index entries the copies keep.
struct Transactions {
    /// Every transaction aborted among the sources, in marker order.
    aborted: Vec<AbortedTxn>,
    /// The same by producer.
    ranges: AbortedRanges,
    /// Producers with a transactional batch read since their last marker (in offset order,
    /// across the groups).
    read_since_marker: HashSet<i64>,
}

impl Transactions {
    fn new(aborted: Vec<AbortedTxn>) -> Transactions {
        let mut ranges = AbortedRanges::new();
        for txn in &aborted {
            ranges
                .entry(txn.producer_id)
                .or_default()
                .push((txn.first_offset, txn.last_offset));
        }
        Transactions {
            aborted,
            ranges,
            read_since_marker: HashSet::new(),
        }
    }

    /// Notes a batch read in offset order; for a marker, whether it may be removed: no batch
    /// of its transaction was read (every one went in an earlier cleaning) and its segment
    /// is past the delete horizon (`expired`).
    fn marker_removable(&mut self, header: &BatchHeader, expired: bool) -> bool {
        if !header.is_transactional() {
            return false;
        }
        if header.is_control() {
            let read = self.read_since_marker.remove(&header.producer_id);
            return !read && expired;
        }
        self.read_since_marker.insert(header.producer_id);
        false
    }

    /// The entries of the abort markers in `[from, until)` that were not removed (found by
    /// bisection: the entries are in marker order, and every group asks for its own range).
    fn kept_entries(&self, from: i64, until: i64, removed: &HashSet<i64>) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|txn| txn.last_offset < from);
        let end = self.aborted.partition_point(|txn| txn.last_offset < until);
        self.aborted[start..end.max(start)]
            .iter()
            .filter(|txn| !removed.contains(&txn.last_offset))
            .copied()
            .collect()
    }
}

/// A cleaned copy of consecutive segments, written and synced, waiting to be swapped in.
pub(crate) struct CleanedGroup {
    /// Base offsets of the segments it replaces (the first is its own).
    pub sources: Vec<i64>,
    /// The copy, inactive, still at its `.cleaned` paths.
    pub segment: Segment,
    /// The manifest committing the swap.
    pub manifest: PathBuf,
}

/// The outcome of [`CleaningPlan::clean`], for [`crate::Log::finish_cleaning`].
pub struct CleanedLog {
    pub(crate) groups: Vec<CleanedGroup>,
    /// Everything below this is now clean.
    pub(crate) clean_until: i64,
    /// What the cleaning read and wrote.
    pub stats: CleaningStats,
}

/// Figures of one cleaning, for the log line and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleaningStats {
    /// Segments read.
    pub segments: usize,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Records read.
    pub records_read: u64,
    /// Records dropped (superseded, expired tombstones, or of aborted transactions).
    pub records_dropped: u64,
    /// Transaction markers removed (their transactions left no batch, and
    /// `delete.retention.ms` passed).
    pub markers_removed: u64,
}

/// The manifest of a committed swap.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SwapManifest {
    /// Base offsets of the replaced segments; the first is the cleaned copy's own.
    pub sources: Vec<i64>,
}

/// A key's identity in the key map: 128 bits of two independent SipHash digests, so a
/// collision (which would drop a live record) is as unlikely as Kafka's MD5 makes it.
fn key_hash(key: &[u8]) -> u128 {
    let digest = |salt: u8| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut hasher);
        key.hash(&mut hasher);
        hasher.finish()
    };
    (u128::from(digest(0)) << 64) | u128::from(digest(1))
}

/// Whether `header` is a batch of a transaction that aborted.
fn is_aborted(aborted: &AbortedRanges, header: &BatchHeader) -> bool {
    header.is_transactional()
        && !header.is_control()
        && aborted.get(&header.producer_id).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|&(first, marker)| (first..marker).contains(&header.base_offset))
        })
}

/// What [`each_batch`] hands every batch to.
type BatchVisitor<'a> = dyn FnMut(&BatchHeader, &[u8]) -> Result<(), LogError> + 'a;

/// Reads every batch of a segment file, handing each to `visit` with its bytes.
fn each_batch(segment: &SourceSegment, visit: &mut BatchVisitor<'_>) -> Result<(), LogError> {
    let file = segment.log.resolve()?;
    let mut walker = HeaderWalker::new(file.as_ref(), 0, segment.size_bytes);
    let mut bytes = Vec::new();
    while let Some((header, position)) = walker.next_batch()? {
        bytes.resize(header.total_bytes() as usize, 0);
        file.read_exact_at(&mut bytes, position)?;
        visit(&header, &bytes)?;
    }
    Ok(())
}

impl CleaningPlan {
    /// Runs the cleaning: maps keys over the dirty segments (at most `key_map_entries` distinct
    /// keys; the rest waits for the next cleaning), then writes a cleaned copy of each group
    /// of segments below the mapped range. `pace` is told of every batch read, to throttle.
    pub fn clean(
        self,
        key_map_entries: usize,
        pace: &mut dyn FnMut(u64),
    ) -> Result<Option<CleanedLog>, LogError> {
        let mut stats = CleaningStats::default();
        let mut transactions = Transactions::new(self.aborted.collect()?);
        let mut latest: HashMap<u128, i64> = HashMap::new();
        let mut mapped_until = self.dirty_start;
        for segment in self
            .sources
            .iter()
            .filter(|s| s.next_offset > self.dirty_start)
        {
            let mut full = false;
            each_batch(segment, &mut |header, bytes| {
                pace(bytes.len() as u64);
                if header.is_control() || is_aborted(&transactions.ranges, header) {
                    return Ok(());
                }
                for_each_stored_record(
                    bytes,
                    self.decompressed_bytes_max,
                    &mut |offset, record| {
                        if let Some(key) = record.key {
                            latest.insert(key_hash(key), offset);
                        }
                    },
                )
                .map_err(LogError::Batch)?;
                full |= latest.len() > key_map_entries;
                Ok(())
            })?;
            if full {
                tracing::warn!(target: "weir::cleaner", dir = %self.dir.display(), keys = latest.len(), "key map full; cleaning the rest later (raise log.cleaner.dedupe.buffer.size)");
                break;
            }
            mapped_until = segment.next_offset;
        }
        if mapped_until <= self.dirty_start {
            return Ok(None);
        }
        let to_clean: Vec<&SourceSegment> = self
            .sources
            .iter()
            .filter(|s| s.next_offset <= mapped_until)
            .collect();
        let mut groups = Vec::new();
        let mut start = 0;
        while start < to_clean.len() {
            let mut end = start + 1;
            let mut bytes = to_clean[start].size_bytes;
            while end < to_clean.len()
                && bytes + to_clean[end].size_bytes <= self.segment_bytes
                && to_clean[end].next_offset - to_clean[start].base_offset <= RELATIVE_OFFSET_MAX
            {
                bytes += to_clean[end].size_bytes;
                end += 1;
            }
            let cleaned = self.clean_group(
                &to_clean[start..end],
                &latest,
                &mut transactions,
                mapped_until,
                &mut stats,
                pace,
            );
            match cleaned {
                Ok(group) => groups.push(group),
                Err(error) => {
                    // Nothing was swapped in: withdraw what this cleaning committed to disk.
                    self.discard(&groups, to_clean[start].base_offset);
                    return Err(error);
                }
            }
            start = end;
        }
        Ok(Some(CleanedLog {
            groups,
            clean_until: mapped_until,
            stats,
        }))
    }

    /// Removes the manifests and copies of `groups` and the copy being written at `failed`,
    /// after a failed cleaning (best effort: what remains is withdrawn at the next open, or
    /// swapped in there, which is as correct).
    fn discard(&self, groups: &[CleanedGroup], failed: i64) {
        let storage = self.files.storage();
        for group in groups {
            let _ = storage.remove(&group.manifest);
            let _ = group.segment.paths.remove(&self.files);
        }
        let _ = SegmentPaths::with_suffix(&self.dir, failed, CLEANED_SUFFIX).remove(&self.files);
    }

    /// Writes the cleaned copy of `sources` and its manifest.
    fn clean_group(
        &self,
        sources: &[&SourceSegment],
        latest: &HashMap<u128, i64>,
        transactions: &mut Transactions,
        mapped_until: i64,
        stats: &mut CleaningStats,
        pace: &mut dyn FnMut(u64),
    ) -> Result<CleanedGroup, LogError> {
        let storage = self.files.storage().clone();
        let base = sources[0].base_offset;
        let paths = SegmentPaths::with_suffix(&self.dir, base, CLEANED_SUFFIX);
        let mut segment = Segment::create_at(storage.as_ref(), paths, base, self.now_ms)?;
        let tombstone_horizon = self.now_ms.saturating_sub(self.config.delete_retention_ms);
        // The records of the batch being rewritten that stay, framed, and their count.
        let mut plain = Vec::new();
        let mut removed_markers = HashSet::new();
        for source in sources {
            stats.segments += 1;
            stats.bytes_read += source.size_bytes;
            let expired_tombstones = source.retention_time_ms < tombstone_horizon;
            each_batch(source, &mut |header, bytes| {
                pace(bytes.len() as u64);
                let removable = transactions.marker_removable(header, expired_tombstones);
                let rewritten = if header.is_control() {
                    removable.then(|| {
                        stats.markers_removed += 1;
                        removed_markers.insert(header.base_offset);
                        None
                    })
                } else if is_aborted(&transactions.ranges, header) {
                    let count = u64::try_from(header.record_count).unwrap_or(0);
                    stats.records_read += count;
                    stats.records_dropped += count;
                    Some(None)
                } else {
                    plain.clear();
                    let mut kept = 0usize;
                    let mut max_timestamp = header.base_timestamp;
                    let mut total = 0u64;
                    for_each_stored_record(
                        bytes,
                        self.decompressed_bytes_max,
                        &mut |offset, record| {
                            total += 1;
                            let superseded = record.key.is_some_and(|key| {
                                offset < mapped_until
                                    && latest
                                        .get(&key_hash(key))
                                        .is_some_and(|&newest| newest > offset)
                            });
                            let expired = record.key.is_some()
                                && record.value.is_none()
                                && expired_tombstones;
                            if !(superseded || expired) {
                                put_framed(&mut plain, record.raw.unwrap_or_default());
                                kept += 1;
                                max_timestamp = max_timestamp.max(record.timestamp);
                            }
                        },
                    )
                    .map_err(LogError::Batch)?;
                    stats.records_read += total;
                    stats.records_dropped += total - kept as u64;
                    (kept as u64 != total)
                        .then(|| rebuild_batch(header, &plain, kept, max_timestamp))
                };
                let written = match rewritten {
                    None => bytes.to_vec(),
                    Some(None) => return Ok(()),
                    Some(Some(batch)) => batch,
                };
                let header =
                    BatchHeader::parse(&written).ok_or(LogError::Corrupt { position: 0 })?;
                segment.append(&header, &[&written], self.index_interval_bytes, self.now_ms)?;
                stats.bytes_written += written.len() as u64;
                Ok(())
            })?;
        }
        let until = sources.last().map_or(base, |s| s.next_offset);
        segment.txn_index = TxnIndex::write_new(
            storage.as_ref(),
            segment.paths.txn_index.clone(),
            &transactions.kept_entries(base, until, &removed_markers),
        )?;
        segment.sync_all()?;
        segment.deactivate();
        // The copies' directory entries are durable before the manifest makes them the truth.
        storage.sync_dir(&self.dir)?;
        segment.last_write_ms = sources
            .iter()
            .map(|s| s.last_write_ms)
            .max()
            .unwrap_or(self.now_ms);
        if self.abandoned.load(Ordering::Acquire) {
            return Err(LogError::Deleted);
        }
        let manifest = self.dir.join(format!("{base:020}.{MANIFEST_SUFFIX}"));
        let body = serde_json::to_vec(&SwapManifest {
            sources: sources.iter().map(|s| s.base_offset).collect(),
        })
        .map_err(|e| LogError::Io(std::io::Error::other(e)))?;
        storage.write_atomic(&manifest, &body)?;
        Ok(CleanedGroup {
            sources: sources.iter().map(|s| s.base_offset).collect(),
            segment,
            manifest,
        })
    }
}

/// The batch with only the `kept` records of `plain` (each with its length prefix; their
/// offset and timestamp deltas are unchanged, as base offset and base timestamp are; the
/// largest timestamp among them is `max_timestamp`), compressed with the batch's own codec;
/// `None` when nothing is kept. Base offset, leader epoch, attributes, last offset delta, base
/// timestamp and producer fields stay as they were; the record count, max timestamp and CRC
/// are recomputed.
fn rebuild_batch(
    header: &BatchHeader,
    plain: &[u8],
    kept: usize,
    max_timestamp: i64,
) -> Option<Vec<u8>> {
    if kept == 0 {
        return None;
    }
    // A LogAppendTime batch keeps the time it was stamped with.
    let max_timestamp = if header.is_log_append_time() {
        header.max_timestamp
    } else {
        max_timestamp
    };
    Some(rebuilt_batch(
        header,
        header.compression(),
        Levels::DEFAULT,
        plain,
        kept,
        max_timestamp,
    ))
}

/// Finishes or discards the swaps an interrupted cleaning left in `dir` (at open, before the
/// segments are listed): a manifest commits its swap, which is completed; cleaned copies
/// without one are deleted.
pub(crate) fn recover_swaps(
    storage: &dyn Storage,
    files: &FileCache,
    dir: &Path,
) -> Result<(), LogError> {
    let names = storage.list(dir)?;
    for name in names.iter().filter(|n| n.ends_with(MANIFEST_SUFFIX)) {
        let manifest_path = dir.join(name);
        let manifest: SwapManifest = match storage
            .read(&manifest_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
        {
            Some(m) => m,
            None => {
                // A torn manifest was never the commit point (it is written atomically).
                storage.remove(&manifest_path)?;
                continue;
            }
        };
        let Some(&base) = manifest.sources.first() else {
            storage.remove(&manifest_path)?;
            continue;
        };
        let cleaned = SegmentPaths::with_suffix(dir, base, CLEANED_SUFFIX);
        let target = SegmentPaths::new(dir, base);
        // Each copy not yet renamed is renamed now: a crash between the renames of the log
        // and of its indexes must not leave the old indexes beside the cleaned log.
        for (from, to) in cleaned
            .with_txn_index()
            .into_iter()
            .zip(target.with_txn_index())
        {
            files.forget(to);
            if storage.exists(from) {
                storage.rename(from, to)?;
            }
            files.forget(to);
        }
        for &other in manifest.sources.iter().skip(1) {
            SegmentPaths::new(dir, other).remove(files)?;
        }
        storage.sync_dir(dir)?;
        storage.remove(&manifest_path)?;
        tracing::info!(target: "weir::cleaner", dir = %dir.display(), base, replaced = manifest.sources.len(), "finished a cleaning interrupted by a crash");
    }
    for name in storage
        .list(dir)?
        .iter()
        .filter(|n| n.ends_with(&format!(".{CLEANED_SUFFIX}")))
    {
        storage.remove(&dir.join(name))?;
    }
    storage.sync_dir(dir)?;
    Ok(())
}
