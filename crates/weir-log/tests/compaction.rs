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
    let (_, clock, log) = small_segments_and_clock();
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

/// The aborted transactions a read_committed fetch of the whole log is told to skip, as
/// (producer, marker offset).
fn aborted_listed(log: &Log) -> Vec<(i64, i64)> {
    log.aborted_lookup(0, log.log_end_offset())
        .collect()
        .expect("aborted transactions")
        .iter()
        .map(|txn| (txn.producer_id, txn.last_offset))
        .collect()
}

/// Appends keyed fillers at `now_ms` until `count` more segments rolled: dirty data for the
/// next cleaning.
fn dirty_fillers(log: &mut Log, now_ms: i64, count: usize) {
    let until = log.segment_count() + count;
    while log.segment_count() < until {
        append(
            log,
            keyed_batch(&[(key(9), Some(b"filler".to_vec()))], now_ms, 0),
        );
    }
}

/// A compacted log in memory with segments of 200 bytes, its storage and its clock.
fn small_segments_and_clock() -> (MemoryStorage, ManualClock, Log) {
    let storage = MemoryStorage::new();
    let clock = ManualClock::new(1_700_000_000_000);
    let log = open(&storage, &clock, compacted(200));
    (storage, clock, log)
}

/// Producer 7's transaction of one record, `fillers` segments of other records, then its abort
/// marker and two more segments; returns the marker's offset.
fn aborted_transaction(log: &mut Log, now_ms: i64, fillers: usize) -> i64 {
    append(
        log,
        transactional_batch(7, &[(&key(1), b"aborted")], now_ms),
    );
    dirty_fillers(log, now_ms, fillers);
    let marker = log.log_end_offset();
    end_transaction(log, 7, TxnResult::Abort, now_ms);
    dirty_fillers(log, now_ms, 2);
    marker
}

#[test]
fn markers_go_once_their_transactions_left_nothing_and_delete_retention_passed() {
    let (storage, clock, mut log) = small_segments_and_clock();
    let t = clock.now_ms();
    let mut markers = Vec::new();
    let mut transaction = |log: &mut Log, producer: i64, key_byte: u8, result: TxnResult| {
        append(
            log,
            transactional_batch(producer, &[(&key(key_byte), b"txn")], t),
        );
        markers.push(log.log_end_offset());
        end_transaction(log, producer, result, t);
        dirty_fillers(log, t, 1);
    };
    // 7 and 10 abort; 8 commits a record a later one supersedes; 9 commits one that stays.
    transaction(&mut log, 7, 1, TxnResult::Abort);
    transaction(&mut log, 8, 2, TxnResult::Commit);
    transaction(&mut log, 9, 3, TxnResult::Commit);
    transaction(&mut log, 10, 4, TxnResult::Abort);
    append(
        &mut log,
        keyed_batch(&[(key(2), Some(b"newer".to_vec()))], t, 0),
    );
    dirty_fillers(&mut log, t, 2);
    let [abort_7, commit_8, commit_9, abort_10] = markers[..] else {
        panic!("four markers: {markers:?}")
    };
    let offsets = |log: &Log| -> Vec<i64> { read_from(log, 0).iter().map(|r| r.0).collect() };
    let holds = |log: &Log, offset: i64| offsets(log).contains(&offset);

    // Cleaned before delete.retention.ms passed: the aborted and superseded records go, every
    // marker stays. Cleaned again with larger segments, all of them merge into one copy, which
    // lists both aborts (a copy carries the entries of every segment it replaces).
    assert!(clean(&mut log));
    assert!(!holds(&log, abort_7 - 1) && !holds(&log, commit_8 - 1) && !holds(&log, abort_10 - 1));
    assert!(
        holds(&log, commit_9 - 1),
        "a committed record no later one supersedes stays"
    );
    dirty_fillers(&mut log, t, 2);
    log.set_config(compacted(4096));
    assert!(clean(&mut log));
    assert_eq!(log.segment_count(), 2, "one copy and the active segment");
    for marker in [abort_7, commit_8, commit_9, abort_10] {
        assert!(
            holds(&log, marker),
            "marker {marker} stays before the delete horizon"
        );
    }
    assert_eq!(aborted_listed(&log), [(7, abort_7), (10, abort_10)]);

    // Past the delete horizon, the first cleaning still reads no batch of the transactions
    // (they went in the last one) and removes the markers of 7, 8 and 10 with the entries;
    // 9's marker stays with its record.
    clock.advance(Duration::from_millis(2 * DAY_MS as u64));
    dirty_fillers(&mut log, clock.now_ms(), 2);
    assert!(clean(&mut log));
    for marker in [abort_7, commit_8, abort_10] {
        assert!(
            !holds(&log, marker),
            "marker {marker} removed: {:?}",
            offsets(&log)
        );
    }
    assert!(holds(&log, commit_9) && holds(&log, commit_9 - 1));
    assert_eq!(aborted_listed(&log), []);
    assert_eq!(log.last_stable_offset(), log.high_watermark());

    // A restart reads the same log and lists no aborted transaction either.
    let before = read_from(&log, 0);
    drop(log);
    let log = open(&storage, &clock, compacted(200));
    assert_eq!(read_from(&log, 0), before);
    assert_eq!(aborted_listed(&log), []);
    assert_eq!(log.last_stable_offset(), log.high_watermark());
}

#[test]
fn a_marker_stays_while_a_batch_of_its_transaction_does() {
    let (_, clock, mut log) = small_segments_and_clock();
    let t = clock.now_ms();
    // Aborted in the same cleaning that first sees it past the delete horizon: the data goes,
    // the marker waits for a cleaning that finds none of it (the copy with the data may yet be
    // discarded while the one with the marker is swapped in).
    let marker = aborted_transaction(&mut log, t, 1);
    clock.advance(Duration::from_millis(2 * DAY_MS as u64));
    assert!(clean(&mut log));
    let offsets: Vec<i64> = read_from(&log, 0).iter().map(|r| r.0).collect();
    assert!(
        !offsets.contains(&0) && offsets.contains(&marker),
        "{offsets:?}"
    );
    assert_eq!(aborted_listed(&log), [(7, marker)]);
}

#[test]
fn a_crash_after_the_manifest_swaps_in_the_copys_aborted_transaction_index_too() {
    let (storage, clock, mut log) = small_segments_and_clock();
    let t = clock.now_ms();
    let marker = aborted_transaction(&mut log, t, 0);
    assert!(clean(&mut log));
    assert_eq!(aborted_listed(&log), [(7, marker)]);
    // The next cleaning, past the delete horizon, removes the marker; its swap is committed
    // (the manifest written) but not done when the process dies.
    clock.advance(Duration::from_millis(2 * DAY_MS as u64));
    dirty_fillers(&mut log, clock.now_ms(), 2);
    let plan = log.cleaning_plan(DECOMPRESSED_MAX).expect("a cleaning");
    let cleaned = plan.clean(1 << 20, &mut |_| {}).expect("clean");
    assert_eq!(cleaned.expect("cleaned").stats.markers_removed, 1);
    // Below the recovery point: the indexes the open finds are trusted, not rebuilt.
    log.checkpoint().write().expect("checkpoint");
    drop(log);
    let reopened = open(&storage, &clock, compacted(200));
    let offsets: Vec<i64> = read_from(&reopened, 0).iter().map(|r| r.0).collect();
    assert!(!offsets.contains(&marker), "{offsets:?}");
    assert_eq!(
        aborted_listed(&reopened),
        [],
        "the old index went with the marker"
    );
}
