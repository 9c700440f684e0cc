//! Behaviour of the partition log through its public API: append, read, roll, retention,
//! recovery after crashes and power loss.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use weir_log::batch::{build_batch, validate_batch, ProducerFields};
use weir_log::storage::{FsStorage, PowerLossStorage, Storage};
use weir_log::{Clock, Log, LogConfig, LogError, ManualClock};

const HOUR_MS: i64 = 3600 * 1000;

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, storage: Arc<dyn Storage>, clock: &ManualClock, config: LogConfig) -> Log {
    Log::open(dir, storage, Arc::new(clock.clone()), config)
        .expect("open log")
        .0
}

fn batch(value: &[u8], timestamp: i64) -> Vec<u8> {
    build_batch(&[value], timestamp, ProducerFields::NONE)
}

/// Reads every batch from `offset` and returns (base offset, first value) pairs.
fn read_all(log: &Log, offset: i64) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = offset;
    loop {
        let bytes = log.read(next, 1 << 20, log.high_watermark()).expect("read");
        if bytes.is_empty() {
            return out;
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let header = weir_log::BatchHeader::parse(rest).expect("header");
            let (one, tail) = rest.split_at(header.total_bytes());
            validate_batch(one).expect("stored batch stays valid");
            out.push((header.base_offset, value_of(one)));
            next = header.last_offset() + 1;
            rest = tail;
        }
    }
}

/// The value of the first record of a batch built by `build_batch`.
fn value_of(batch: &[u8]) -> Vec<u8> {
    // Record layout after the 61-byte header: length, attributes, timestamp delta, offset
    // delta, key length (-1), value length, value; all lengths are zigzag varints.
    let mut rest = &batch[61..];
    let _record_len = varint(&mut rest);
    rest = &rest[1..];
    let _timestamp_delta = varint(&mut rest);
    let _offset_delta = varint(&mut rest);
    let _key_len = varint(&mut rest);
    let value_len = varint(&mut rest) as usize;
    rest[..value_len].to_vec()
}

fn varint(buf: &mut &[u8]) -> i64 {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = buf[0];
        *buf = &buf[1..];
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return ((value >> 1) as i64) ^ -((value & 1) as i64);
        }
        shift += 7;
    }
}

#[test]
fn append_read_roll_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_000_000);
    let mut log = open(dir.path(), Arc::new(FsStorage), &clock, small_segments());
    for i in 0..100u8 {
        let info = log
            .append(&mut batch(&[i; 20], 1000 + i64::from(i)))
            .expect("append");
        assert_eq!(info.base_offset, i64::from(i));
    }
    assert!(log.segment_count() > 5, "small segments roll");
    let read = read_all(&log, 0);
    assert_eq!(read.len(), 100);
    assert!(read
        .iter()
        .enumerate()
        .all(|(i, (o, v))| *o == i as i64 && v == &vec![i as u8; 20]));
    assert_eq!(
        read_all(&log, 57)[0].0,
        57,
        "read from the middle of a segment"
    );
    assert!(matches!(
        log.read(101, 100, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    log.close().expect("close");
    let (log, report) = Log::open(
        dir.path(),
        Arc::new(FsStorage),
        Arc::new(clock.clone()),
        small_segments(),
    )
    .expect("reopen");
    assert!(report.clean);
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(read_all(&log, 0).len(), 100);
}

#[test]
fn max_bytes_limits_but_first_batch_is_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(
        dir.path(),
        Arc::new(FsStorage),
        &clock,
        LogConfig::default(),
    );
    for _ in 0..10 {
        log.append(&mut batch(&[7u8; 100], 0)).expect("append");
    }
    let one = log.read(0, 10, 10).expect("read");
    assert_eq!(
        validate_batch(&one).expect("one whole batch").base_offset,
        0
    );
    let some = log.read(0, 500, 10).expect("read");
    assert!(some.len() <= 500 && some.len() > one.len());
    assert_eq!(
        log.read(0, 1 << 20, 3).expect("read").len(),
        3 * one.len(),
        "upper offset bounds the read"
    );
}

#[test]
fn timestamp_lookup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), Arc::new(FsStorage), &clock, small_segments());
    for i in 0..50 {
        log.append(&mut batch(b"x", 1000 * (i + 1)))
            .expect("append");
    }
    for (target, want) in [
        (0, Some(0)),
        (1000, Some(0)),
        (1001, Some(1)),
        (25_000, Some(24)),
        (50_000, Some(49)),
        (50_001, None),
    ] {
        let found = log
            .batch_for_timestamp(target)
            .expect("lookup")
            .map(|b| validate_batch(&b).expect("valid").base_offset);
        assert_eq!(found, want, "timestamp {target}");
    }
    let max = log.batch_with_max_timestamp().expect("max").expect("some");
    assert_eq!(validate_batch(&max).expect("valid").base_offset, 49);
}

#[test]
fn retention_by_time_and_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(100 * HOUR_MS);
    let config = LogConfig {
        retention_ms: 10 * HOUR_MS,
        ..small_segments()
    };
    let mut log = open(dir.path(), Arc::new(FsStorage), &clock, config);
    // Old records (timestamps an hour apart, starting 100 hours ago), then fresh ones.
    for i in 0..40 {
        log.append(&mut batch(&[1u8; 100], i * HOUR_MS / 4))
            .expect("append");
    }
    for _ in 0..40 {
        log.append(&mut batch(&[2u8; 100], 100 * HOUR_MS))
            .expect("append");
    }
    let deleted = log.enforce_retention().expect("retention");
    assert!(deleted > 0);
    let start = log.log_start_offset();
    assert!(
        start > 0 && start <= 40,
        "old segments gone, fresh kept: start {start}"
    );
    assert!(matches!(
        log.read(0, 100, 80),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(read_all(&log, start).last().map(|(o, _)| *o), Some(79));

    clock.advance(20 * HOUR_MS);
    log.enforce_retention().expect("retention");
    assert_eq!(
        log.log_start_offset(),
        80,
        "everything expired, even the active segment"
    );
    assert_eq!(log.log_end_offset(), 80);

    let size_config = LogConfig {
        retention_bytes: 2048,
        retention_ms: -1,
        ..small_segments()
    };
    log.set_config(size_config);
    for _ in 0..100 {
        log.append(&mut batch(&[3u8; 100], clock.now_ms()))
            .expect("append");
    }
    log.enforce_retention().expect("retention");
    assert!(
        log.size_bytes() <= 2048 + 1024,
        "size bound holds: {}",
        log.size_bytes()
    );
    assert_eq!(log.log_end_offset(), 180);
}

#[test]
fn unclean_restart_truncates_torn_tail_and_rebuilds_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), Arc::new(FsStorage), &clock, small_segments());
    for i in 0..30u8 {
        log.append(&mut batch(&[i; 50], 0)).expect("append");
    }
    drop(log); // no close: an unclean stop
    let last = last_segment(dir.path());
    let len = std::fs::metadata(&last).expect("meta").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .expect("open");
    file.set_len(len - 7).expect("tear the tail");
    std::fs::remove_file(last.with_extension("index")).expect("remove index");
    let (mut log, report) = Log::open(
        dir.path(),
        Arc::new(FsStorage),
        Arc::new(clock.clone()),
        small_segments(),
    )
    .expect("reopen");
    assert!(!report.clean);
    assert!(report.truncated_bytes > 0);
    assert_eq!(log.log_end_offset(), 29, "the torn last batch is gone");
    assert_eq!(read_all(&log, 0).len(), 29);
    assert_eq!(
        log.append(&mut batch(b"next", 0))
            .expect("append")
            .base_offset,
        29
    );
}

fn last_segment(dir: &Path) -> PathBuf {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("a segment")
}

#[test]
fn idempotent_duplicates_survive_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let producer = |seq| ProducerFields {
        producer_id: 9,
        producer_epoch: 0,
        base_sequence: seq,
    };
    let mut log = open(dir.path(), Arc::new(FsStorage), &clock, small_segments());
    for seq in 0..10 {
        log.append(&mut build_batch(&[b"v"], 0, producer(seq)))
            .expect("append");
    }
    drop(log);
    let mut log = open(dir.path(), Arc::new(FsStorage), &clock, small_segments());
    let dup = log
        .append(&mut build_batch(&[b"v"], 0, producer(9)))
        .expect("dup");
    assert!(dup.duplicate);
    assert_eq!(dup.base_offset, 9);
    assert!(matches!(
        log.append(&mut build_batch(&[b"v"], 0, producer(12))),
        Err(LogError::OutOfOrderSequence)
    ));
    assert_eq!(
        log.append(&mut build_batch(&[b"v"], 0, producer(10)))
            .expect("next")
            .base_offset,
        10
    );
    assert_eq!(log.log_end_offset(), 11);
}

#[test]
fn power_loss_keeps_every_synced_batch() {
    let storage = PowerLossStorage::new();
    let dir = Path::new("/partition-0");
    let clock = ManualClock::new(0);
    let mut log = open(dir, Arc::new(storage.clone()), &clock, small_segments());
    let mut acknowledged = 0;
    for i in 0..200u8 {
        log.append(&mut batch(&[i; 30], 0)).expect("append");
        if i % 7 == 0 {
            let ticket = log.flush_ticket();
            ticket.sync().expect("sync");
            log.flush_done(ticket.end_offset);
            acknowledged = ticket.end_offset;
        }
    }
    assert!(
        storage.unsynced_bytes() > 0,
        "the test must leave unsynced data to lose"
    );
    storage.power_loss();
    let log = open(dir, Arc::new(storage), &clock, small_segments());
    assert!(
        log.log_end_offset() >= acknowledged,
        "lost acknowledged data: end {} < {acknowledged}",
        log.log_end_offset()
    );
    let read = read_all(&log, 0);
    assert!(read
        .iter()
        .enumerate()
        .all(|(i, (o, v))| *o == i as i64 && v == &vec![i as u8; 30]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of batches reads back identically after an unclean restart with any
    /// number of bytes cut from the last segment: a prefix survives, nothing is reordered.
    #[test]
    fn random_tail_truncation_keeps_a_prefix(sizes in prop::collection::vec(1usize..300, 1..60), cut in 0u64..2000) {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(0);
        let mut log = open(dir.path(), Arc::new(FsStorage), &clock, small_segments());
        for (i, size) in sizes.iter().enumerate() {
            log.append(&mut batch(&vec![i as u8; *size], 0)).expect("append");
        }
        drop(log);
        let last = last_segment(dir.path());
        let len = std::fs::metadata(&last).expect("meta").len();
        std::fs::OpenOptions::new().write(true).open(&last).expect("open").set_len(len.saturating_sub(cut)).expect("cut");
        let log = open(dir.path(), Arc::new(FsStorage), &clock, small_segments());
        let read = read_all(&log, 0);
        prop_assert_eq!(read.len() as i64, log.log_end_offset());
        prop_assert!(read.len() <= sizes.len());
        if cut == 0 { prop_assert_eq!(read.len(), sizes.len()); }
        for (i, (offset, value)) in read.iter().enumerate() {
            prop_assert_eq!(*offset, i as i64);
            prop_assert_eq!(value.clone(), vec![i as u8; sizes[i]]);
        }
    }
}
