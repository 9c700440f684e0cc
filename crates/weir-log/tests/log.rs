//! Behaviour of the partition log through its public API: append, read, roll, retention,
//! recovery after crashes and power loss, a full disk, and bounded open files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use weir_codec::layout::BATCH_HEADER_BYTES;
use weir_codec::varint::{next_in, read_varlong};
use weir_log::batch::{build_batch, validate_header, ProducerFields, TxnResult};
use weir_log::{
    validate, AbortedTxn, BatchHeader, Clock, Log, LogConfig, LogError, ManualClock, ValidBatch,
    ValidationLimits, RELATIVE_OFFSET_MAX,
};
use weir_storage::{FileCache, FsStorage, MemoryStorage, Storage};

const HOUR_MS: i64 = 3600 * 1000;
/// Open inactive-segment files allowed in these tests.
const OPEN_FILES_MAX: usize = 8;

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

fn cache(storage: impl Storage) -> Arc<FileCache> {
    FileCache::new(Arc::new(storage), OPEN_FILES_MAX)
}

fn open_with(dir: &Path, files: &Arc<FileCache>, clock: &ManualClock, config: LogConfig) -> Log {
    Log::open(dir, files.clone(), Arc::new(clock.clone()), config)
        .expect("open log")
        .0
}

fn open(dir: &Path, clock: &ManualClock, config: LogConfig) -> Log {
    open_with(dir, &cache(FsStorage), clock, config)
}

fn batch(value: &[u8], timestamp: i64) -> Vec<u8> {
    build_batch(&[value], timestamp, ProducerFields::NONE)
}

fn append(log: &mut Log, bytes: Vec<u8>) -> Result<weir_log::AppendInfo, LogError> {
    let valid = validate(
        Bytes::from(bytes),
        &ValidationLimits::unbounded_time(1 << 20),
    )?;
    // A transactional batch here stands for one its transaction coordinator verified.
    let header = *valid.header();
    let guard = match header.is_transactional() {
        true => log.start_txn_verification(header.producer_id, header.producer_epoch),
        false => None,
    };
    log.append(&valid.verified(guard))
}

/// Whole batches in `bytes` (a trailing partial batch is dropped, as clients do).
fn batches(bytes: &[u8]) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(header) = BatchHeader::parse(rest) {
        let total = header.total_bytes() as usize;
        if total > rest.len() {
            break;
        }
        validate_header(&rest[..total]).expect("stored batch stays valid");
        out.push(header);
        rest = &rest[total..];
    }
    out
}

/// Reads every batch from `offset` up to the high watermark: (base offset, first value).
fn read_all(log: &Log, offset: i64) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = offset;
    loop {
        let Some(view) = log.read_view(next, log.high_watermark()).expect("view") else {
            return out;
        };
        let Some(slice) = view.slice(1 << 20, true).expect("slice") else {
            return out;
        };
        let bytes = slice.read().expect("read");
        let mut position = 0;
        for header in batches(&bytes) {
            let total = header.total_bytes() as usize;
            out.push((
                header.base_offset,
                value_of(&bytes[position..position + total]),
            ));
            next = header.last_offset() + 1;
            position += total;
        }
        assert!(position > 0, "a read from {next} made no progress");
    }
}

/// The value of the first record of a batch built by `build_batch`.
fn value_of(batch: &[u8]) -> Vec<u8> {
    // Record layout after the 61-byte header: length, attributes, timestamp delta, offset
    // delta, key length (-1), value length, value; all lengths are zigzag varints.
    let mut at = BATCH_HEADER_BYTES;
    let varint = |at: &mut usize| read_varlong(|| next_in(batch, at)).expect("a varint");
    let _record_len = varint(&mut at);
    at += 1; // attributes
    let _timestamp_delta = varint(&mut at);
    let _offset_delta = varint(&mut at);
    let _key_len = varint(&mut at);
    let value_len = varint(&mut at) as usize;
    batch[at..at + value_len].to_vec()
}

/// Checks that `read` is exactly offsets 0.. with the values `expected` gives.
fn assert_sequence(read: &[(i64, Vec<u8>)], count: usize, expected: impl Fn(usize) -> Vec<u8>) {
    assert_eq!(read.len(), count, "batches read back");
    for (i, (offset, value)) in read.iter().enumerate() {
        assert_eq!(*offset, i as i64, "offset of batch {i}");
        assert_eq!(value, &expected(i), "value of batch {i}");
    }
}

#[test]
fn append_read_roll_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_000_000);
    let files = cache(FsStorage);
    let mut log = open_with(dir.path(), &files, &clock, small_segments());
    for i in 0..100u8 {
        let info = append(&mut log, batch(&[i; 20], 1000 + i64::from(i))).expect("append");
        assert_eq!(info.base_offset, i64::from(i));
    }
    assert!(log.segment_count() > 5, "small segments roll");
    assert_sequence(&read_all(&log, 0), 100, |i| vec![i as u8; 20]);
    assert_eq!(
        read_all(&log, 57)[0].0,
        57,
        "read from the middle of a segment"
    );
    assert!(matches!(
        log.read_view(101, 100),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(
        files.open_count() <= OPEN_FILES_MAX,
        "inactive segments reopened through the bounded cache: {} open",
        files.open_count()
    );
    log.close().expect("close");
    let (log, report) = Log::open(
        dir.path(),
        cache(FsStorage),
        Arc::new(clock.clone()),
        small_segments(),
    )
    .expect("reopen");
    assert!(report.clean);
    assert_eq!(log.log_end_offset(), 100);
    assert_sequence(&read_all(&log, 0), 100, |i| vec![i as u8; 20]);
}

#[test]
fn reads_respect_max_bytes_and_the_upper_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), &clock, LogConfig::default());
    for _ in 0..10 {
        append(&mut log, batch(&[7u8; 100], 0)).expect("append");
    }
    let one_len = batch(&[7u8; 100], 0).len() as u64;
    let view = log.read_view(0, 10).expect("view").expect("data");
    let first = view.slice(10, true).expect("slice").expect("first batch");
    assert_eq!(
        first.len(),
        one_len,
        "the first batch is whole even beyond max_bytes"
    );
    assert!(
        view.slice(10, false).expect("slice").is_none(),
        "unless it is not first"
    );
    let some = view.slice(500, true).expect("slice").expect("some");
    assert_eq!(some.len(), 500, "a read may end mid-batch at the limit");
    assert_eq!(
        batches(&some.read().expect("read")).len() as u64,
        500 / one_len
    );
    let bounded = log.read_view(0, 3).expect("view").expect("data");
    let bounded = bounded.slice(1 << 20, true).expect("slice").expect("some");
    assert_eq!(
        bounded.len(),
        3 * one_len,
        "the upper offset bounds the read at a batch"
    );
    assert!(
        log.read_view(3, 3).expect("view").is_none(),
        "nothing at the upper offset"
    );
}

#[test]
fn timestamp_lookup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), &clock, small_segments());
    for i in 0..50 {
        append(&mut log, batch(b"x", 1000 * (i + 1))).expect("append");
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
            .lookup_timestamp(target)
            .map(|lookup| lookup.find().expect("find").expect("batch"))
            .map(|b| validate_header(&b).expect("valid").base_offset);
        assert_eq!(found, want, "timestamp {target}");
    }
    let max = log
        .lookup_max_timestamp()
        .expect("some")
        .find()
        .expect("find")
        .expect("batch");
    assert_eq!(validate_header(&max).expect("valid").base_offset, 49);
}

#[test]
fn retention_by_time_and_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(100 * HOUR_MS);
    let config = LogConfig {
        retention_ms: 10 * HOUR_MS,
        ..small_segments()
    };
    let mut log = open(dir.path(), &clock, config);
    // Old records (timestamps a quarter hour apart, starting 100 hours ago), then fresh ones.
    for i in 0..40 {
        append(&mut log, batch(&[1u8; 100], i * HOUR_MS / 4)).expect("append");
    }
    for _ in 0..40 {
        append(&mut log, batch(&[2u8; 100], 100 * HOUR_MS)).expect("append");
    }
    let segments_before = std::fs::read_dir(dir.path()).expect("dir").count();
    let removals = log.enforce_retention().expect("retention");
    assert!(!removals.is_empty());
    for removal in removals {
        removal.remove().expect("delete files");
    }
    assert!(std::fs::read_dir(dir.path()).expect("dir").count() < segments_before);
    let start = log.log_start_offset();
    assert!(
        start > 0 && start <= 40,
        "old segments gone, fresh kept: start {start}"
    );
    assert!(matches!(
        log.read_view(0, 80),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(read_all(&log, start).last().map(|(o, _)| *o), Some(79));

    clock.advance(Duration::from_millis(20 * HOUR_MS as u64));
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
        append(&mut log, batch(&[3u8; 100], clock.now_ms())).expect("append");
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
fn deleted_records_stay_deleted_across_a_restart_and_their_segments_go() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(100 * HOUR_MS);
    let mut log = open(dir.path(), &clock, small_segments());
    for i in 0..60u8 {
        append(&mut log, batch(&[i; 100], clock.now_ms())).expect("append");
    }
    assert_eq!(log.advance_log_start_offset(25).expect("advanced"), 25);
    assert!(matches!(
        log.read_view(24, 60),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(read_all(&log, 25).first().map(|(o, _)| *o), Some(25));
    assert_eq!(
        log.advance_log_start_offset(10).expect("unchanged"),
        25,
        "the start never moves back"
    );
    // Retention deletes the segments wholly below the start, however young.
    let segments_before = log.segment_count();
    for removal in log.enforce_retention().expect("retention") {
        removal.remove().expect("delete files");
    }
    assert!(log.segment_count() < segments_before);
    assert_eq!(log.log_start_offset(), 25);
    drop(log);

    // Checkpointed at once: a restart (even without a clean shutdown) keeps it.
    let mut log = open(dir.path(), &clock, small_segments());
    assert_eq!(log.log_start_offset(), 25);
    assert_eq!(read_all(&log, 25).len(), 35);
    assert_eq!(
        log.advance_log_start_offset(1_000).expect("advanced"),
        60,
        "at most to the log end"
    );
}

#[test]
fn unclean_restart_truncates_torn_tail_and_rebuilds_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), &clock, small_segments());
    for i in 0..30u8 {
        append(&mut log, batch(&[i; 50], 0)).expect("append");
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
        cache(FsStorage),
        Arc::new(clock.clone()),
        small_segments(),
    )
    .expect("reopen");
    assert!(!report.clean);
    assert!(report.truncated_bytes > 0);
    assert_eq!(log.log_end_offset(), 29, "the torn last batch is gone");
    assert_sequence(&read_all(&log, 0), 29, |i| vec![i as u8; 50]);
    assert_eq!(
        append(&mut log, batch(b"next", 0))
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
    let mut log = open(dir.path(), &clock, small_segments());
    for seq in 0..10 {
        append(&mut log, build_batch(&[b"v"], 0, producer(seq))).expect("append");
    }
    drop(log);
    let mut log = open(dir.path(), &clock, small_segments());
    let dup = append(&mut log, build_batch(&[b"v"], 0, producer(9))).expect("dup");
    assert!(dup.duplicate);
    assert_eq!(dup.base_offset, 9);
    assert!(matches!(
        append(&mut log, build_batch(&[b"v"], 0, producer(12))),
        Err(LogError::OutOfOrderSequence)
    ));
    assert_eq!(
        append(&mut log, build_batch(&[b"v"], 0, producer(10)))
            .expect("next")
            .base_offset,
        10
    );
    assert_eq!(log.log_end_offset(), 11);
}

/// `bytes` marked transactional (attributes bit 4), its CRC made again.
fn transactional(mut bytes: Vec<u8>) -> Vec<u8> {
    let at = weir_codec::layout::ATTRIBUTES_AT;
    let attributes = i16::from_be_bytes([bytes[at], bytes[at + 1]]) | 0x10;
    bytes[at..at + 2].copy_from_slice(&attributes.to_be_bytes());
    weir_codec::encode::write_crc(&mut bytes);
    bytes
}

/// A transaction's batches and its marker are appended: the marker ends the transaction
/// without a sequence (the producer's next batch goes on from its last sequence), a marker
/// of an older epoch is refused, and a follower takes both kinds as the leader stored them.
#[test]
fn transactional_batches_and_their_markers_are_appended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let producer = |epoch, seq| ProducerFields {
        producer_id: 4,
        producer_epoch: epoch,
        base_sequence: seq,
    };
    let mut log = open(dir.path(), &clock, small_segments());
    for seq in 0..2 {
        let bytes = transactional(build_batch(&[b"t"], 0, producer(1, seq)));
        append(&mut log, bytes).expect("transactional batch");
    }
    let marker = ValidBatch::marker(4, 1, TxnResult::Commit, 0, 0);
    assert!(marker.header().is_control() && marker.header().is_transactional());
    assert_eq!(log.append(&marker).expect("marker").base_offset, 2);
    let next = transactional(build_batch(&[b"t"], 0, producer(1, 2)));
    assert_eq!(append(&mut log, next).expect("next").base_offset, 3);
    let stale = ValidBatch::marker(4, 0, TxnResult::Abort, 0, 0);
    assert!(matches!(
        log.append(&stale),
        Err(LogError::InvalidProducerEpoch)
    ));
    let fencing = ValidBatch::marker(4, 2, TxnResult::Abort, 0, 0);
    assert_eq!(log.append(&fencing).expect("newer epoch").base_offset, 4);
    assert!(matches!(
        append(
            &mut log,
            transactional(build_batch(&[b"t"], 0, producer(1, 3)))
        ),
        Err(LogError::InvalidProducerEpoch)
    ));
    assert_eq!(log.log_end_offset(), 5);

    let copy_dir = tempfile::tempdir().expect("tempdir");
    let mut follower = open(copy_dir.path(), &clock, small_segments());
    follower.set_replicated(true);
    let view = log
        .read_view(0, log.log_end_offset())
        .expect("view")
        .expect("records");
    let slice = view.slice(1 << 20, true).expect("slice").expect("bytes");
    let bytes = slice.read().expect("read");
    assert_eq!(
        follower.append_replicated_batches(&bytes).expect("copied"),
        5
    );
    assert_eq!(follower.log_end_offset(), 5);
}

/// A marker carries the epoch of the transaction coordinator that wrote it, and the partition
/// keeps the newest per producer: a marker from an older coordinator (one that lost its
/// partition of `__transaction_state` but still writes) is refused, so it cannot end the
/// producer's next transaction; the epoch is rebuilt from the log and kept in the snapshot.
#[test]
fn a_marker_of_an_older_transaction_coordinator_is_fenced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let producer = |seq| ProducerFields {
        producer_id: 4,
        producer_epoch: 0,
        base_sequence: seq,
    };
    let send = |log: &mut Log, seq| {
        let bytes = transactional(build_batch(&[b"t"], 0, producer(seq)));
        append(log, bytes).expect("transactional batch").base_offset
    };
    let coordinator_epoch = |log: &Log| {
        log.active_producers()
            .iter()
            .find(|p| p.producer_id == 4)
            .map(|p| p.coordinator_epoch)
    };
    let mut log = open(dir.path(), &clock, small_segments());
    send(&mut log, 0);
    assert_eq!(coordinator_epoch(&log), Some(-1), "no marker yet");
    log.append(&ValidBatch::marker(4, 0, TxnResult::Commit, 3, 0))
        .expect("commit of coordinator 3");
    assert_eq!(coordinator_epoch(&log), Some(3));
    assert_eq!(send(&mut log, 1), 2, "the next transaction");
    let zombie = ValidBatch::marker(4, 0, TxnResult::Abort, 2, 0);
    assert!(matches!(
        log.append(&zombie),
        Err(LogError::CoordinatorFenced {
            coordinator_epoch: 2,
            current: 3
        })
    ));
    assert_eq!(
        (log.log_end_offset(), log.last_stable_offset()),
        (3, 2),
        "nothing written, the transaction still open"
    );
    log.append(&ValidBatch::marker(4, 0, TxnResult::Abort, 3, 0))
        .expect("the same coordinator");
    send(&mut log, 2);
    log.append(&ValidBatch::marker(4, 0, TxnResult::Commit, 5, 0))
        .expect("a newer coordinator");
    drop(log);
    let log = open(dir.path(), &clock, small_segments());
    assert_eq!(coordinator_epoch(&log), Some(5), "rebuilt from the batches");
    log.checkpoint().write().expect("checkpoint");
    drop(log);
    let mut log = open(dir.path(), &clock, small_segments());
    assert_eq!(coordinator_epoch(&log), Some(5), "read from the snapshot");
    send(&mut log, 3);
    assert!(matches!(
        log.append(&ValidBatch::marker(4, 0, TxnResult::Commit, 4, 0)),
        Err(LogError::CoordinatorFenced { .. })
    ));
}

/// A transaction open on the partition counts as hung once its producer has not appended
/// there for longer than the limit given (the broker's `transaction.max.timeout.ms`): a
/// producer that keeps writing is not hung, and a marker ends a hung one.
#[test]
fn an_open_transaction_idle_past_the_limit_is_hung_until_its_marker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(1_000_000);
    let producer = |id, seq| ProducerFields {
        producer_id: id,
        producer_epoch: 0,
        base_sequence: seq,
    };
    let mut log = open(dir.path(), &clock, small_segments());
    for id in [1, 2] {
        append(
            &mut log,
            transactional(build_batch(&[b"t"], 0, producer(id, 0))),
        )
        .expect("open");
    }
    append(&mut log, batch(b"plain", 0)).expect("plain");
    assert_eq!(
        (log.open_transactions(), log.hung_transactions(1_000)),
        (2, 0)
    );
    clock.advance(Duration::from_millis(1_000));
    assert_eq!(
        log.hung_transactions(1_000),
        0,
        "idle for exactly the limit"
    );
    append(
        &mut log,
        transactional(build_batch(&[b"t"], 0, producer(2, 1))),
    )
    .expect("more");
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        log.hung_transactions(1_000),
        1,
        "producer 1 idle past the limit"
    );
    clock.advance(Duration::from_millis(1_000));
    assert_eq!(log.hung_transactions(1_000), 2);
    log.append(&ValidBatch::marker(1, 0, TxnResult::Abort, 0, 0))
        .expect("abort marker");
    assert_eq!(
        (log.open_transactions(), log.hung_transactions(1_000)),
        (1, 1)
    );
    assert_eq!(log.hung_transactions(60_000), 0, "a longer limit");
}

/// A transactional batch opens its producer's transaction only with the guard of a
/// verification in flight: none, a stale one (a marker came between the verification and the
/// append) or another producer's is refused and changes nothing; once open, the transaction's
/// next batches need none, and a retried batch is still a duplicate.
#[test]
fn a_transaction_opens_only_with_its_verification_guard() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), &clock, small_segments());
    let txn_batch = |id, seq| {
        let fields = ProducerFields {
            producer_id: id,
            producer_epoch: 0,
            base_sequence: seq,
        };
        validate(
            Bytes::from(transactional(build_batch(&[b"t"], 0, fields))),
            &ValidationLimits::unbounded_time(1 << 20),
        )
        .expect("valid")
    };
    assert!(matches!(
        log.append(&txn_batch(4, 0)),
        Err(LogError::NotInTransaction)
    ));
    let stale = log.start_txn_verification(4, 0).expect("a guard");
    assert_eq!(log.start_txn_verification(4, 0), Some(stale), "shared");
    let other = log.start_txn_verification(5, 0).expect("a guard");
    assert!(matches!(
        log.append(&txn_batch(4, 0).verified(Some(other))),
        Err(LogError::NotInTransaction)
    ));
    log.append(&ValidBatch::marker(4, 0, TxnResult::Abort, 0, 0))
        .expect("marker");
    assert!(matches!(
        log.append(&txn_batch(4, 0).verified(Some(stale))),
        Err(LogError::NotInTransaction)
    ));
    assert_eq!(log.log_end_offset(), 1, "only the marker");
    let guard = log.start_txn_verification(4, 0);
    assert!(guard.is_some_and(|g| g != stale));
    let first = log.append(&txn_batch(4, 0).verified(guard)).expect("opens");
    assert_eq!(log.start_txn_verification(4, 0), None, "open here");
    log.append(&txn_batch(4, 1))
        .expect("inside the transaction");
    let retry = log.append(&txn_batch(4, 0)).expect("retry");
    assert!(retry.duplicate && retry.base_offset == first.base_offset);
    log.append(&ValidBatch::marker(4, 0, TxnResult::Commit, 0, 0))
        .expect("commit");
    assert!(matches!(
        log.append(&txn_batch(4, 2).verified(guard)),
        Err(LogError::NotInTransaction)
    ));
}

/// The last stable offset stops at the oldest open transaction, and aborted transactions are
/// listed for the range asked; both are the same after a reopen that rescans the batches and
/// after one that reads the producer snapshot.
#[test]
fn the_last_stable_offset_and_aborted_transactions_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let producer = |id, seq| ProducerFields {
        producer_id: id,
        producer_epoch: 0,
        base_sequence: seq,
    };
    let send = |log: &mut Log, id, seq| {
        let bytes = transactional(build_batch(&[b"t"], 0, producer(id, seq)));
        append(log, bytes).expect("transactional batch").base_offset
    };
    let mut log = open(dir.path(), &clock, small_segments());
    assert_eq!(send(&mut log, 4, 0), 0);
    assert_eq!(send(&mut log, 4, 1), 1);
    assert_eq!(log.last_stable_offset(), 0, "4's transaction is open");
    log.append(&ValidBatch::marker(4, 0, TxnResult::Commit, 0, 0))
        .expect("commit");
    assert_eq!(log.last_stable_offset(), 3);
    assert_eq!(send(&mut log, 5, 0), 3);
    assert_eq!(send(&mut log, 4, 2), 4);
    log.append(&ValidBatch::marker(5, 0, TxnResult::Abort, 0, 0))
        .expect("abort");
    let state = |log: &Log| {
        (
            log.last_stable_offset(),
            aborted_in(log, 0, log.log_end_offset()),
        )
    };
    let aborted = AbortedTxn {
        producer_id: 5,
        first_offset: 3,
        last_offset: 5,
        last_stable_offset: 4,
    };
    assert_eq!(
        state(&log),
        (4, vec![aborted]),
        "4's second transaction is open"
    );
    assert!(aborted_in(&log, 6, 7).is_empty(), "after its marker");
    assert!(aborted_in(&log, 0, 3).is_empty(), "before its first record");
    drop(log);
    let log = open(dir.path(), &clock, small_segments());
    assert_eq!(state(&log), (4, vec![aborted]), "rebuilt from the batches");
    log.checkpoint().write().expect("checkpoint");
    drop(log);
    let mut log = open(dir.path(), &clock, small_segments());
    assert_eq!(state(&log), (4, vec![aborted]), "read from the snapshot");
    log.append(&ValidBatch::marker(4, 0, TxnResult::Commit, 0, 0))
        .expect("commit");
    assert_eq!(state(&log), (7, vec![aborted]));
}

/// The aborted transactions the segments' indexes list for `[from, upper)`.
fn aborted_in(log: &Log, from: i64, upper: i64) -> Vec<AbortedTxn> {
    log.aborted_lookup(from, upper)
        .collect()
        .expect("read the aborted-transaction indexes")
}

/// The first and marker offsets of aborted transactions.
fn spans(listed: &[AbortedTxn]) -> Vec<(i64, i64)> {
    listed
        .iter()
        .map(|t| (t.first_offset, t.last_offset))
        .collect()
}

/// A transactional batch of `producer_id` at `sequence`, appended as its verified transaction.
fn send_transactional(log: &mut Log, producer_id: i64, sequence: i32, value: &[u8]) -> i64 {
    let fields = ProducerFields {
        producer_id,
        producer_epoch: 0,
        base_sequence: sequence,
    };
    let bytes = transactional(build_batch(&[value], 0, fields));
    append(log, bytes).expect("transactional batch").base_offset
}

/// Appends `producer_id`'s marker; returns its offset.
fn end_transaction(log: &mut Log, producer_id: i64, result: TxnResult) -> i64 {
    log.append(&ValidBatch::marker(producer_id, 0, result, 0, 0))
        .expect("marker")
        .base_offset
}

/// What an index must answer for `[from, upper)`, from the aborts a test made: markers at or
/// after `from`, first records before `upper`, markers below `end` (what the log still holds).
fn expected_aborts(
    made: &[(i64, i64, i64)],
    from: i64,
    upper: i64,
    end: i64,
) -> Vec<(i64, i64, i64)> {
    made.iter()
        .filter(|(_, first, last)| *last >= from && *first < upper && *last < end)
        .copied()
        .collect()
}

/// Every `[from, upper)` over the log, answered as the aborts made say.
fn assert_aborts_listed(log: &Log, made: &[(i64, i64, i64)], context: &str) {
    let end = log.log_end_offset();
    for from in (log.log_start_offset()..=end).step_by(3) {
        for upper in (from..=end + 1).step_by(5) {
            let listed: Vec<(i64, i64, i64)> = aborted_in(log, from, upper)
                .iter()
                .map(|t| (t.producer_id, t.first_offset, t.last_offset))
                .collect();
            assert_eq!(
                listed,
                expected_aborts(made, from, upper, end),
                "{context}: aborts listed for [{from}, {upper})"
            );
        }
    }
}

/// Aborted transactions are kept in an index file per segment (the one holding the marker):
/// a read_committed range lists every transaction aborted in it, also one that began before
/// another transaction which is still open and ended after it began (the search reads on
/// past an abort whose last stable offset is below the range's end); the snapshot lists none;
/// the indexes come back exact after a reopen, after a power loss, after being deleted, and
/// after a truncation, and go with their segments.
#[test]
fn aborted_transactions_are_indexed_per_segment_and_rebuilt() {
    let (storage, dir, clock) = (MemoryStorage::new(), Path::new("/p"), ManualClock::new(0));
    let config = small_segments();
    let mut log = open_with(dir, &cache(storage.clone()), &clock, config);
    let mut made = Vec::new();
    let filler = |log: &mut Log, n: usize| {
        for _ in 0..n {
            append(log, batch(&[7; 100], 0)).expect("filler");
        }
    };
    // 1 and 2 begin, then 3, which stays open; 1 and 2 abort after 3 began.
    let first_1 = send_transactional(&mut log, 1, 0, b"a");
    filler(&mut log, 3);
    let first_2 = send_transactional(&mut log, 2, 0, b"b");
    let open_first = send_transactional(&mut log, 3, 0, b"open");
    filler(&mut log, 12);
    made.push((1, first_1, end_transaction(&mut log, 1, TxnResult::Abort)));
    // A segment's worth: 1's marker and 2's are in different segments.
    filler(&mut log, 7);
    made.push((2, first_2, end_transaction(&mut log, 2, TxnResult::Abort)));
    assert_eq!(log.last_stable_offset(), open_first);
    let listed = aborted_in(&log, first_1, open_first);
    assert_eq!(
        listed.iter().map(|t| t.producer_id).collect::<Vec<_>>(),
        vec![1, 2],
        "both began below the last stable offset"
    );
    assert_eq!(listed[0].last_stable_offset, first_2, "2 was still open");
    assert_eq!(listed[1].last_stable_offset, open_first, "3 was still open");
    // More transactions, committed and aborted, over several segments.
    for (i, producer) in (4..10).enumerate() {
        let first = send_transactional(&mut log, producer, 0, b"t");
        filler(&mut log, i % 3 * 5);
        let result = match producer % 2 {
            0 => TxnResult::Abort,
            _ => TxnResult::Commit,
        };
        let marker = end_transaction(&mut log, producer, result);
        if result == TxnResult::Abort {
            made.push((producer, first, marker));
        }
        filler(&mut log, 6);
    }
    made.push((
        3,
        open_first,
        end_transaction(&mut log, 3, TxnResult::Abort),
    ));
    assert!(log.segment_count() > 5, "the test spans segments");
    assert_aborts_listed(&log, &made, "live");
    // Index files holding entries (a reopen may leave one whose entries it cut empty).
    let index_files = || {
        storage
            .list(dir)
            .expect("list")
            .into_iter()
            .filter(|name| name.ends_with(".txnindex"))
            .filter(|name| !storage.read(&dir.join(name)).expect("read").is_empty())
            .count()
    };
    let with_aborts = index_files();
    assert!(
        (2..log.segment_count()).contains(&with_aborts),
        "an index for each segment with an abort marker, and only those: {with_aborts}"
    );
    // Synced and checkpointed: the power loss below keeps the snapshot, which names offsets
    // past the entries, so those must be durable too.
    let done = log.flush_ticket().sync().expect("sync");
    log.flush_done(done);
    log.checkpoint().write().expect("checkpoint");
    let snapshot = storage
        .read(&dir.join("producer-state.json"))
        .expect("snapshot");
    assert!(
        !String::from_utf8_lossy(&snapshot).contains("aborted"),
        "the snapshot does not list aborts"
    );

    // Written after the checkpoint and never synced: a power loss takes it, and its index
    // entry, whatever reached the disk of either.
    let first = send_transactional(&mut log, 20, 0, b"lost");
    made.push((20, first, end_transaction(&mut log, 20, TxnResult::Abort)));
    assert_aborts_listed(&log, &made, "before the power loss");
    drop(log);
    storage.power_loss();
    let mut log = open_with(dir, &cache(storage.clone()), &clock, config);
    assert_aborts_listed(&log, &made, "after the power loss");
    log.close().expect("close");
    drop(log);
    let log = open_with(dir, &cache(storage.clone()), &clock, config);
    assert_aborts_listed(&log, &made, "after a clean reopen");
    drop(log);

    // Every index and the snapshot deleted: rebuilt from the batches.
    let before_rebuild = index_files();
    for name in storage.list(dir).expect("list") {
        if name.ends_with(".txnindex") || name == "producer-state.json" || name == "clean-shutdown"
        {
            storage.remove(&dir.join(name)).expect("remove");
        }
    }
    let mut log = open_with(dir, &cache(storage.clone()), &clock, config);
    assert_aborts_listed(&log, &made, "rebuilt");
    assert_eq!(index_files(), before_rebuild, "the same index files");

    // A truncation takes the entries of the markers it cuts, retention the files.
    let (_, _, second_last) = made[made.len() - 3];
    log.truncate_to(second_last).expect("truncate");
    assert_aborts_listed(&log, &made, "truncated");
    let start = made[1].2 + 1;
    log.set_high_watermark(log.log_end_offset());
    log.advance_log_start_offset(start).expect("delete records");
    for removal in log.enforce_retention().expect("retention") {
        removal.remove().expect("remove");
    }
    assert!(index_files() < with_aborts, "retention deleted indexes");
    assert_aborts_listed(&log, &made, "after retention");
}

/// A full disk refuses an abort marker with nothing changed, whether its index entry or the
/// marker itself did not fit, and the marker goes in once there is room.
#[test]
fn a_full_disk_refuses_an_abort_marker_and_its_index_entry_together() {
    let (storage, dir, clock) = (MemoryStorage::new(), Path::new("/p"), ManualClock::new(0));
    let mut log = open_with(dir, &cache(storage.clone()), &clock, small_segments());
    let first = send_transactional(&mut log, 1, 0, b"t");
    for room in [10, 40] {
        storage.set_capacity(Some(storage.used_bytes() + room));
        assert!(
            matches!(
                log.append(&ValidBatch::marker(1, 0, TxnResult::Abort, 0, 0)),
                Err(LogError::OutOfResources(_))
            ),
            "room for {room} bytes"
        );
        assert_eq!(log.last_stable_offset(), first, "still open");
        assert!(aborted_in(&log, 0, 10).is_empty(), "nothing indexed");
    }
    storage.set_capacity(None);
    let marker = end_transaction(&mut log, 1, TxnResult::Abort);
    let listed = aborted_in(&log, 0, marker + 1);
    assert_eq!(spans(&listed), vec![(first, marker)], "one entry");
}

/// A snapshot written before aborts were indexed per segment lists them itself: opening the
/// log writes them to the indexes, once.
#[test]
fn aborts_a_snapshot_of_an_earlier_version_lists_are_indexed() {
    let (storage, dir, clock) = (MemoryStorage::new(), Path::new("/p"), ManualClock::new(0));
    let mut log = open_with(dir, &cache(storage.clone()), &clock, small_segments());
    let first = send_transactional(&mut log, 1, 0, b"t");
    let marker = end_transaction(&mut log, 1, TxnResult::Abort);
    log.close().expect("close");
    drop(log);
    let snapshot_path = dir.join("producer-state.json");
    let mut snapshot: serde_json::Value =
        serde_json::from_slice(&storage.read(&snapshot_path).expect("snapshot")).expect("json");
    snapshot["producers"]["aborted"] = serde_json::json!([
        {"producer_id": 1, "first_offset": first, "last_offset": marker}
    ]);
    storage
        .write_atomic(
            &snapshot_path,
            &serde_json::to_vec(&snapshot).expect("json"),
        )
        .expect("write");
    for name in storage.list(dir).expect("list") {
        if name.ends_with(".txnindex") {
            storage.remove(&dir.join(name)).expect("remove");
        }
    }
    for reopen in 0..2 {
        let log = open_with(dir, &cache(storage.clone()), &clock, small_segments());
        let listed = aborted_in(&log, 0, marker + 1);
        assert_eq!(spans(&listed), vec![(first, marker)], "reopen {reopen}");
        drop(log);
    }
}

#[test]
fn power_loss_keeps_every_synced_batch() {
    let storage = MemoryStorage::new();
    let dir = Path::new("/partition-0");
    let clock = ManualClock::new(0);
    let mut log = open_with(dir, &cache(storage.clone()), &clock, small_segments());
    let mut acknowledged = 0;
    for i in 0..200u8 {
        append(&mut log, batch(&[i; 30], 0)).expect("append");
        if i % 7 == 0 {
            let done = log.flush_ticket().sync().expect("sync");
            log.flush_done(done);
            acknowledged = done.end_offset;
        }
    }
    assert!(
        storage.unsynced_bytes() > 0,
        "the test must leave unsynced data to lose"
    );
    storage.power_loss();
    let log = open_with(dir, &cache(storage), &clock, small_segments());
    assert!(
        log.log_end_offset() >= acknowledged,
        "lost acknowledged data: end {} < {acknowledged}",
        log.log_end_offset()
    );
    let end = log.log_end_offset() as usize;
    assert!(end > 0);
    assert_sequence(&read_all(&log, 0), end, |i| vec![i as u8; 30]);
}

#[test]
fn a_full_disk_refuses_writes_leaves_the_log_intact_and_recovers() {
    let storage = MemoryStorage::new();
    let dir = Path::new("/partition-0");
    let clock = ManualClock::new(0);
    let files = cache(storage.clone());
    let mut log = open_with(dir, &files, &clock, small_segments());
    for i in 0..20u8 {
        append(&mut log, batch(&[i; 40], 0)).expect("append");
    }
    // Room for part of one more batch: the write is cut off and must be undone.
    storage.set_capacity(Some(storage.used_bytes() + 60));
    let mut refused = 0;
    for i in 20..40u8 {
        match append(&mut log, batch(&[i; 40], 0)) {
            Err(LogError::OutOfResources(_)) => refused += 1,
            Ok(_) => {}
            Err(other) => panic!("unexpected error {other}"),
        }
    }
    assert!(refused > 0, "the disk filled up");
    let end = log.log_end_offset();
    assert_sequence(&read_all(&log, 0), end as usize, |i| vec![i as u8; 40]);
    // Space returns (retention, an operator): writes are accepted again where they stopped.
    storage.set_capacity(None);
    let info = append(&mut log, batch(b"after", 0)).expect("append after space returns");
    assert_eq!(info.base_offset, end);
    let done = log.flush_ticket().sync().expect("sync");
    log.flush_done(done);
    storage.power_loss();
    let log = open_with(dir, &cache(storage), &clock, small_segments());
    assert_eq!(
        log.log_end_offset(),
        end + 1,
        "nothing torn or lost across the full disk"
    );
    assert_eq!(read_all(&log, end)[0].1, b"after".to_vec());
}

#[test]
fn a_segment_rolls_before_relative_offsets_overflow() {
    let storage = MemoryStorage::new();
    let dir = Path::new("/p");
    // A segment at base 0 holding one batch at offset 2^31 - 3, as a log that grew there would.
    let mut far = batch(b"far", 0);
    far[..8].copy_from_slice(&(RELATIVE_OFFSET_MAX - 2).to_be_bytes());
    storage.plant(&dir.join("00000000000000000000.log"), &far);
    let clock = ManualClock::new(0);
    let mut log = open_with(dir, &cache(storage.clone()), &clock, LogConfig::default());
    assert_eq!(log.log_end_offset(), RELATIVE_OFFSET_MAX - 1);
    let values: Vec<&[u8]> = vec![b"v"; 5];
    let info = append(&mut log, build_batch(&values, 0, ProducerFields::NONE)).expect("append");
    assert_eq!(info.base_offset, RELATIVE_OFFSET_MAX - 1);
    assert_eq!(
        log.segment_count(),
        2,
        "the append that would pass Int.MaxValue rolled first"
    );
    assert_eq!(read_all(&log, info.base_offset)[0].0, info.base_offset);
}

#[test]
fn inactive_segments_are_reopened_through_the_bounded_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let files = cache(FsStorage);
    let config = LogConfig {
        segment_bytes: 100,
        ..small_segments()
    };
    let mut log = open_with(dir.path(), &files, &clock, config);
    for i in 0..300u16 {
        append(&mut log, batch(&i.to_be_bytes(), 10 * i64::from(i))).expect("append");
    }
    assert!(log.segment_count() >= 300, "one batch per segment");
    let read = read_all(&log, 0);
    assert_eq!(read.len(), 300);
    assert!(read
        .iter()
        .enumerate()
        .all(|(i, (_, v))| *v == (i as u16).to_be_bytes()));
    assert!(
        files.open_count() <= OPEN_FILES_MAX,
        "{} files open",
        files.open_count()
    );
    for target in [0i64, 150, 299] {
        let found = log
            .lookup_timestamp(10 * target)
            .and_then(|l| l.find().expect("find"))
            .map(|b| validate_header(&b).expect("valid").base_offset);
        assert_eq!(
            found,
            Some(target),
            "timestamp lookup in an inactive segment"
        );
    }
    assert!(
        files.open_count() <= OPEN_FILES_MAX,
        "{} files open",
        files.open_count()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of batches reads back identically after an unclean restart with any
    /// number of bytes cut from the last segment: a prefix survives, nothing is reordered.
    #[test]
    fn random_tail_truncation_keeps_a_prefix(sizes in prop::collection::vec(1usize..300, 1..60), cut in 0u64..2000) {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(0);
        let mut log = open(dir.path(), &clock, small_segments());
        for (i, size) in sizes.iter().enumerate() {
            append(&mut log, batch(&vec![i as u8; *size], 0)).expect("append");
        }
        drop(log);
        let last = last_segment(dir.path());
        let len = std::fs::metadata(&last).expect("meta").len();
        std::fs::OpenOptions::new().write(true).open(&last).expect("open").set_len(len.saturating_sub(cut)).expect("cut");
        let log = open(dir.path(), &clock, small_segments());
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

/// A producer's header claiming a far-future maxTimestamp cannot keep a segment from expiring:
/// the stored header carries the records' real largest timestamp, so retention (even after an
/// unclean restart, which reads headers back) and ListOffsets go by the records.
#[test]
fn a_lying_max_timestamp_cannot_switch_retention_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(100 * HOUR_MS);
    let config = LogConfig {
        retention_ms: HOUR_MS,
        ..small_segments()
    };
    let mut log = open(dir.path(), &clock, config);
    for i in 0..20 {
        let mut lying = batch(&[i; 60], HOUR_MS);
        lying[35..43].copy_from_slice(&i64::MAX.to_be_bytes());
        let crc = weir_log::batch::batch_crc(&lying);
        lying[17..21].copy_from_slice(&crc.to_be_bytes());
        append(&mut log, lying).expect("append");
    }
    for _ in 0..5 {
        append(&mut log, batch(b"fresh", 100 * HOUR_MS)).expect("append");
    }
    drop(log); // unclean: the reopen reads the stored headers back
    let mut log = open(dir.path(), &clock, config);
    assert!(!log.enforce_retention().expect("retention").is_empty());
    let start = log.log_start_offset();
    assert!(
        start > 0 && start <= 20,
        "segments of only old records expired by their real timestamps: start {start}"
    );
    let max = log
        .lookup_max_timestamp()
        .expect("a max")
        .find()
        .expect("find")
        .expect("batch");
    assert_eq!(
        validate_header(&max).expect("valid").max_timestamp,
        100 * HOUR_MS
    );
}

/// Records without a timestamp (-1) are kept for `retention.ms` after they were written, as
/// Kafka does by the file's modification time, not deleted at once.
#[test]
fn records_without_timestamps_expire_by_write_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(100 * HOUR_MS);
    let config = LogConfig {
        retention_ms: HOUR_MS,
        ..small_segments()
    };
    let mut log = open(dir.path(), &clock, config);
    for i in 0..30 {
        append(&mut log, batch(&[i; 60], -1)).expect("append");
    }
    assert!(
        log.enforce_retention().expect("retention").is_empty(),
        "kept while fresh"
    );
    assert_eq!(log.log_start_offset(), 0);
    clock.advance(Duration::from_millis(2 * HOUR_MS as u64));
    assert!(!log.enforce_retention().expect("retention").is_empty());
    assert_eq!(
        log.log_start_offset(),
        30,
        "expired an hour after they were written"
    );
}

/// The largest timestamp is found after a clean restart too, when the batch that carries it
/// sits before the last time-index entry.
#[test]
fn max_timestamp_lookup_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new(0);
    let mut log = open(dir.path(), &clock, LogConfig::default());
    for ts in [5_000, 9_000, 1_000, 2_000, 3_000, 9_000, 4_000] {
        append(&mut log, batch(&[7u8; 1500], ts)).expect("append");
    }
    log.close().expect("close");
    let log = open(dir.path(), &clock, LogConfig::default());
    let max = log
        .lookup_max_timestamp()
        .expect("a max")
        .find()
        .expect("find")
        .expect("batch");
    let header = validate_header(&max).expect("valid");
    assert_eq!(
        (header.base_offset, header.max_timestamp),
        (1, 9_000),
        "the first batch at 9000"
    );
}
