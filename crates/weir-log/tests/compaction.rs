//! Log compaction through the public API: the cleaner against a model of what must survive,
//! with every codec, tombstones expiring after `delete.retention.ms`, reads across the gaps
//! compaction leaves, and crashes and power loss at each step of the swap.

use std::collections::BTreeMap;
use std::iter::empty;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use weir_codec::compression::Levels;
use weir_codec::encode::{put_record, seal};
use weir_log::batch::{
    build_transactional_batch, BatchHeader, KeyValue, ProducerFields, TxnResult,
};
use weir_log::cleaner::CompactionConfig;
use weir_log::records::for_each_stored_record;
use weir_log::{validate, Clock, Log, LogConfig, ManualClock, ValidBatch, ValidationLimits};
use weir_storage::{FileCache, MemoryStorage, Storage};

const DAY_MS: i64 = 24 * 3600 * 1000;
const DECOMPRESSED_MAX: u64 = 1 << 26;

/// A record to write: key, value (`None`: a tombstone), timestamp.
type Timed<'a> = (&'a [u8], Option<&'a [u8]>, i64);

/// A stored record: offset, key, value (`None`: a tombstone).
type Stored = (i64, Vec<u8>, Option<Vec<u8>>);

fn compacted(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 64,
        retention_deletes: false,
        compaction: Some(CompactionConfig {
            min_cleanable_dirty_ratio_ppm: 0,
            delete_retention_ms: DAY_MS,
            ..CompactionConfig::default()
        }),
        ..LogConfig::default()
    }
}

fn open(storage: &MemoryStorage, clock: &ManualClock, config: LogConfig) -> Log {
    let files = FileCache::new(Arc::new(storage.clone()), 8);
    Log::open(Path::new("/c-0"), files, Arc::new(clock.clone()), config)
        .expect("open")
        .0
}

/// A batch of keyed records compressed with `codec` (0–4).
fn keyed_batch(records: &[(Vec<u8>, Option<Vec<u8>>)], timestamp: i64, codec: i16) -> Vec<u8> {
    let timed: Vec<Timed<'_>> = records
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_deref(), timestamp))
        .collect();
    timed_batch(&timed, codec)
}

/// A batch of `(key, value, timestamp)` records compressed with `codec` (0–4).
fn timed_batch(records: &[Timed<'_>], codec: i16) -> Vec<u8> {
    let base = records.iter().map(|r| r.2).min().unwrap_or(0);
    let max = records.iter().map(|r| r.2).max().unwrap_or(0);
    let mut plain = Vec::new();
    for (i, (key, value, timestamp)) in records.iter().enumerate() {
        put_record(
            &mut plain,
            i as i32,
            timestamp - base,
            Some(key),
            *value,
            empty(),
        );
    }
    let count = records.len() as i32;
    let header = BatchHeader::new(count, codec, base, max, ProducerFields::NONE);
    seal(&header, &plain, Levels::DEFAULT)
}

fn append(log: &mut Log, batch: Vec<u8>) {
    let valid = validate(
        Bytes::from(batch),
        &ValidationLimits::unbounded_time(DECOMPRESSED_MAX),
    )
    .expect("valid batch");
    // A transactional batch here stands for one its transaction coordinator verified.
    let header = *valid.header();
    let guard = match header.is_transactional() {
        true => log.start_txn_verification(header.producer_id, header.producer_epoch),
        false => None,
    };
    log.append(&valid.verified(guard)).expect("append");
}

/// Every record readable from `from`, by fetching as a consumer does.
fn read_from(log: &Log, from: i64) -> Vec<Stored> {
    let mut out = Vec::new();
    let mut next = from;
    while let Some(view) = log.read_view(next, log.high_watermark()).expect("view") {
        let Some(slice) = view.slice(1 << 20, true).expect("slice") else {
            break;
        };
        let bytes = slice.read().expect("read");
        let mut rest = &bytes[..];
        let before = next;
        while let Some(header) = BatchHeader::parse(rest) {
            let total = header.total_bytes() as usize;
            if total > rest.len() {
                break;
            }
            for_each_stored_record(&rest[..total], DECOMPRESSED_MAX, &mut |offset, record| {
                if offset >= next {
                    let key = record.key.expect("keyed").to_vec();
                    out.push((offset, key, record.value.map(<[u8]>::to_vec)));
                }
            })
            .expect("stored batch reads");
            next = next.max(header.last_offset() + 1);
            rest = &rest[total..];
        }
        assert!(next > before, "a read at {before} made no progress");
    }
    out
}

/// Runs one whole cleaning; false when there was nothing to clean.
fn clean(log: &mut Log) -> bool {
    let Some(plan) = log.cleaning_plan(DECOMPRESSED_MAX) else {
        return false;
    };
    let Some(cleaned) = plan.clean(1 << 20, &mut |_| {}).expect("clean") else {
        return false;
    };
    log.finish_cleaning(cleaned)
        .expect("finish")
        .complete()
        .expect("complete");
    true
}

/// What a cleaning of everything below `clean_until` may leave: the latest record of each
/// key there (tombstones only while not expired), everything from `clean_until` on.
fn expected(all: &[Stored], clean_until: i64, tombstones_expired: bool) -> Vec<Stored> {
    // The cleaner maps keys up to the active segment only, as Kafka's does.
    let mut latest: BTreeMap<&[u8], i64> = BTreeMap::new();
    for (offset, key, _) in all.iter().filter(|r| r.0 < clean_until) {
        latest.insert(key, *offset);
    }
    all.iter()
        .filter(|(offset, key, value)| {
            *offset >= clean_until
                || (latest[key.as_slice()] == *offset && !(value.is_none() && tombstones_expired))
        })
        .cloned()
        .collect()
}

fn key(k: u8) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random keyed writes (updates, tombstones, every codec, several records per batch)
    /// cleaned twice: once with tombstones kept, once after delete.retention.ms. Each time
    /// the log holds exactly what the model says, reads from any offset (gaps included) find
    /// the next surviving record, and a restart reads the same.
    #[test]
    fn the_cleaner_keeps_exactly_the_latest_record_per_key(
        writes in proptest::collection::vec(
            (proptest::collection::vec((0u8..12, proptest::option::weighted(0.85, proptest::collection::vec(any::<u8>(), 0..40))), 1..6), 0i16..5),
            20..80,
        ),
        probes in proptest::collection::vec(0usize..400, 5),
    ) {
        let storage = MemoryStorage::new();
        let clock = ManualClock::new(1_700_000_000_000);
        let written_at = clock.now_ms();
        let config = compacted(700);
        let mut log = open(&storage, &clock, config);
        let mut all: Vec<Stored> = Vec::new();
        for (records, codec) in &writes {
            let records: Vec<(Vec<u8>, Option<Vec<u8>>)> =
                records.iter().map(|(k, v)| (key(*k), v.clone())).collect();
            let base = log.log_end_offset();
            append(&mut log, keyed_batch(&records, written_at, *codec));
            for (i, (k, v)) in records.into_iter().enumerate() {
                all.push((base + i as i64, k, v));
            }
        }
        prop_assume!(log.segment_count() > 2);
        let active_base = read_active_base(&log);
        prop_assert!(clean(&mut log));
        let after_first = expected(&all, active_base, false);
        prop_assert_eq!(read_from(&log, 0), after_first.clone());
        for probe in &probes {
            let from = (*probe as i64) % log.log_end_offset().max(1);
            let wanted: Vec<Stored> = after_first.iter().filter(|r| r.0 >= from).cloned().collect();
            prop_assert_eq!(read_from(&log, from), wanted, "reading from {}", from);
        }
        // Nothing dirty any more: no second cleaning until something is written.
        prop_assert!(!clean(&mut log));
        // Two days on, the tombstones written back then may go (the last record keeps the old
        // timestamp so its segment's newest record is old too).
        clock.advance(Duration::from_millis(2 * DAY_MS as u64));
        append(&mut log, keyed_batch(&[(key(200), Some(b"roll".to_vec()))], written_at, 0));
        all.push((log.log_end_offset() - 1, key(200), Some(b"roll".to_vec())));
        log.set_config(LogConfig { segment_ms: 1, ..config });
        log.roll_if_aged().expect("roll");
        log.set_config(config);
        let active_base = read_active_base(&log);
        prop_assert!(clean(&mut log));
        let after_second = expected(&all, active_base, true);
        prop_assert_eq!(read_from(&log, 0), after_second.clone());
        log.close().expect("close");
        let reopened = open(&storage, &clock, config);
        prop_assert_eq!(read_from(&reopened, 0), after_second);
    }
}

/// A compacted log in memory with segments of 200 bytes, and the time its clock stays at.
fn small_segments() -> (i64, Log) {
    let clock = ManualClock::new(1_700_000_000_000);
    let log = open(&MemoryStorage::new(), &clock, compacted(200));
    (clock.now_ms(), log)
}

#[test]
fn a_rebuilt_batch_carries_the_largest_timestamp_of_the_records_it_keeps() {
    let (t, mut log) = small_segments();
    // Key 1 at t-1 and key 2 at t-7; key 1 is written again, so the batch keeps key 2 only
    // (a segment whose newest record is in the future waits for it: compaction lag).
    append(
        &mut log,
        timed_batch(
            &[
                (&key(1), Some(b"old"), t - 1),
                (&key(2), Some(b"kept"), t - 7),
            ],
            0,
        ),
    );
    for _ in 0..6 {
        append(
            &mut log,
            keyed_batch(&[(key(1), Some(b"new".to_vec()))], t, 0),
        );
    }
    assert!(log.segment_count() > 2);
    assert!(clean(&mut log));
    let view = log.read_view(0, log.high_watermark()).expect("view");
    let slice = view.expect("a batch").slice(1 << 20, true).expect("slice");
    let bytes = slice.expect("bytes").read().expect("read");
    let header = BatchHeader::parse(&bytes).expect("a header");
    assert_eq!(
        (
            header.base_offset,
            header.record_count,
            header.max_timestamp
        ),
        (0, 1, t - 7)
    );
}

fn read_active_base(log: &Log) -> i64 {
    log.active_segment_base()
}

/// Writes `rounds` updates of 10 keys into small segments.
fn write_updates(log: &mut Log, clock: &ManualClock, rounds: u8) -> Vec<Stored> {
    let mut all = Vec::new();
    for round in 0..rounds {
        for k in 0..10u8 {
            let value = format!("v{round}-{k}").into_bytes();
            let offset = log.log_end_offset();
            append(
                log,
                keyed_batch(&[(key(k), Some(value.clone()))], clock.now_ms(), 0),
            );
            all.push((offset, key(k), Some(value)));
        }
    }
    all
}

/// A log of durable updates whose cleaning has written its copies and manifests but not
/// swapped them in: the log, every record written, the active segment's base, the cleaning.
fn cleaned_but_not_swapped(
    storage: &MemoryStorage,
    clock: &ManualClock,
) -> (Log, Vec<Stored>, i64, weir_log::CleanedLog) {
    let mut log = open(storage, clock, compacted(1024));
    let all = write_updates(&mut log, clock, 20);
    let done = log.flush_ticket().sync().expect("sync");
    log.flush_done(done);
    let active_base = log.active_segment_base();
    let plan = log.cleaning_plan(DECOMPRESSED_MAX).expect("dirty");
    let cleaned = plan
        .clean(1 << 20, &mut |_| {})
        .expect("clean")
        .expect("work");
    (log, all, active_base, cleaned)
}

#[test]
fn a_crash_after_the_manifest_finishes_the_swap_and_one_before_it_keeps_the_old_log() {
    for commit in [false, true] {
        let storage = MemoryStorage::new();
        let clock = ManualClock::new(1_700_000_000_000);
        let (log, all, active_base, _cleaned) = cleaned_but_not_swapped(&storage, &clock);
        let manifests: Vec<String> = storage
            .list(Path::new("/c-0"))
            .expect("list")
            .into_iter()
            .filter(|n| n.ends_with("cleaning.json"))
            .collect();
        assert!(!manifests.is_empty());
        if !commit {
            // The crash came before the manifest was written.
            for name in &manifests {
                storage
                    .remove(&Path::new("/c-0").join(name))
                    .expect("remove");
            }
        }
        storage.power_loss();
        drop(log);
        let reopened = open(&storage, &clock, compacted(1024));
        let want = if commit {
            expected(&all, active_base, false)
        } else {
            all.clone()
        };
        assert_eq!(
            read_from(&reopened, 0),
            want,
            "commit point reached: {commit}"
        );
        let leftovers: Vec<String> = storage
            .list(Path::new("/c-0"))
            .expect("list")
            .into_iter()
            .filter(|n| n.ends_with(".cleaned") || n.ends_with("cleaning.json"))
            .collect();
        assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
    }
}

#[test]
fn power_loss_after_the_swap_loses_nothing_and_keeps_it_clean() {
    let storage = MemoryStorage::new();
    let clock = ManualClock::new(1_700_000_000_000);
    let (mut log, all, active_base, cleaned) = cleaned_but_not_swapped(&storage, &clock);
    let commit = log.finish_cleaning(cleaned).expect("finish");
    // The renames happened; the deletions and the manifests' removal did not.
    storage.power_loss();
    drop(commit);
    drop(log);
    let reopened = open(&storage, &clock, compacted(1024));
    assert_eq!(read_from(&reopened, 0), expected(&all, active_base, false));
}

#[test]
fn nothing_is_cleaned_below_the_dirty_ratio_or_the_compaction_lag_and_the_active_segment_never() {
    let storage = MemoryStorage::new();
    let clock = ManualClock::new(1_700_000_000_000);
    let mut config = compacted(1024);
    config.compaction = Some(CompactionConfig {
        min_compaction_lag_ms: 60_000,
        ..config.compaction.expect("compaction")
    });
    let mut log = open(&storage, &clock, config);
    let all = write_updates(&mut log, &clock, 20);
    assert!(
        log.cleaning_plan(DECOMPRESSED_MAX).is_none(),
        "every record is younger than the lag"
    );
    clock.advance(Duration::from_millis(60_000));
    let active_base = log.active_segment_base();
    assert!(clean(&mut log));
    let survivors = read_from(&log, 0);
    assert_eq!(survivors, expected(&all, active_base, false));
    assert!(
        survivors.iter().filter(|r| r.0 >= active_base).count() > 0,
        "the active segment is kept whole"
    );
    // A little more dirt than the 0.5 default ratio allows is not cleaned.
    log.set_config(LogConfig {
        compaction: Some(CompactionConfig::default()),
        ..config
    });
    append(
        &mut log,
        keyed_batch(&[(key(1), Some(b"x".to_vec()))], clock.now_ms(), 0),
    );
    assert!(log.cleaning_plan(DECOMPRESSED_MAX).is_none());
}

#[test]
fn a_crash_between_renaming_the_log_and_its_indexes_still_finishes_the_swap() {
    let storage = MemoryStorage::new();
    let clock = ManualClock::new(1_700_000_000_000);
    let (log, all, active_base, _cleaned) = cleaned_but_not_swapped(&storage, &clock);
    // The segments are below the recovery point: their indexes are trusted at the next open.
    log.checkpoint().write().expect("checkpoint");
    // The swap got as far as the log file of the first group, not its indexes.
    let cleaned_log = storage
        .list(Path::new("/c-0"))
        .expect("list")
        .into_iter()
        .find(|n| n.ends_with(".log.cleaned"))
        .expect("a cleaned copy");
    let dir = Path::new("/c-0");
    storage
        .rename(
            &dir.join(&cleaned_log),
            &dir.join(cleaned_log.trim_end_matches(".cleaned")),
        )
        .expect("rename");
    drop(log);
    let reopened = open(&storage, &clock, compacted(1024));
    let want = expected(&all, active_base, false);
    assert_eq!(read_from(&reopened, 0), want);
    // Reads that start from the index (not from the segment's start) land on batches too.
    for record in &want {
        let from_here: Vec<Stored> = want.iter().filter(|r| r.0 >= record.0).cloned().collect();
        assert_eq!(
            read_from(&reopened, record.0),
            from_here,
            "reading from {}",
            record.0
        );
    }
}

#[test]
fn a_read_planned_before_a_swap_finds_nothing_rather_than_the_new_file() {
    let storage = MemoryStorage::new();
    let clock = ManualClock::new(1_700_000_000_000);
    let (mut log, _, _, cleaned) = cleaned_but_not_swapped(&storage, &clock);
    let stale = log
        .read_view(0, log.high_watermark())
        .expect("view")
        .expect("data");
    log.finish_cleaning(cleaned)
        .expect("finish")
        .complete()
        .expect("complete");
    assert!(stale.slice(1 << 20, true).expect("no error").is_none());
    assert!(
        !read_from(&log, 0).is_empty(),
        "a fresh read sees the cleaned log"
    );
}

/// A batch of `producer_id`'s transaction (epoch 0, its first sequence) of keyed records.
fn transactional_batch(producer_id: i64, records: &[(&[u8], &[u8])], timestamp: i64) -> Vec<u8> {
    let fields: Vec<KeyValue<'_>> = records.iter().map(|(k, v)| (Some(*k), Some(*v))).collect();
    let producer = ProducerFields {
        producer_id,
        producer_epoch: 0,
        base_sequence: 0,
    };
    build_transactional_batch(&fields, timestamp, producer)
}

/// Ends `producer_id`'s transaction on the log with its marker.
fn end_transaction(log: &mut Log, producer_id: i64, result: TxnResult, now_ms: i64) {
    let marker = ValidBatch::marker(producer_id, 0, result, 0, now_ms);
    log.append(&marker).expect("marker appended");
}

#[test]
fn aborted_records_are_removed_without_superseding_and_open_transactions_are_not_cleaned() {
    let (t, mut log) = small_segments();
    append(
        &mut log,
        keyed_batch(&[(key(1), Some(b"kept".to_vec()))], t, 0),
    );
    append(
        &mut log,
        transactional_batch(7, &[(&key(1), b"aborted"), (&key(2), b"aborted")], t),
    );
    end_transaction(&mut log, 7, TxnResult::Abort, t);
    append(
        &mut log,
        transactional_batch(8, &[(&key(3), b"committed")], t),
    );
    end_transaction(&mut log, 8, TxnResult::Commit, t);
    for _ in 0..4 {
        append(
            &mut log,
            keyed_batch(&[(key(9), Some(b"filler".to_vec()))], t, 0),
        );
    }
    // A transaction left open: nothing from its first record on is cleaned.
    let open_at = log.log_end_offset();
    append(&mut log, transactional_batch(9, &[(&key(1), b"open")], t));
    for _ in 0..4 {
        append(
            &mut log,
            keyed_batch(&[(key(9), Some(b"later".to_vec()))], t, 0),
        );
    }
    assert_eq!(log.last_stable_offset(), open_at);
    let before = read_from(&log, open_at);
    assert!(log.segment_count() > 4);
    assert!(clean(&mut log));

    let cleaned: Vec<Stored> = read_from(&log, 0)
        .into_iter()
        .filter(|r| r.0 < open_at)
        .collect();
    let offsets: Vec<i64> = cleaned.iter().map(|r| r.0).collect();
    assert_eq!(
        &offsets[..4],
        &[0, 3, 4, 5],
        "the aborted records (1, 2) are gone; the markers (3, 5) stay"
    );
    assert_eq!(
        (&cleaned[0].2, &cleaned[2].2),
        (&Some(b"kept".to_vec()), &Some(b"committed".to_vec())),
        "an aborted record supersedes nothing"
    );
    assert!(
        cleaned.len() < 4 + 4,
        "superseded fillers below the last stable offset were cleaned: {offsets:?}"
    );
    assert_eq!(
        read_from(&log, open_at),
        before,
        "at and past the last stable offset: untouched"
    );
}
