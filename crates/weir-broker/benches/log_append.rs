//! Log append and read throughput on the data disk: fsync per append, group commit with 1, 8
//! and 64 concurrent appenders, no fsync, and sequential reads.
//!
//! `cargo bench -p weir-broker --bench log_append` (set `WEIR_BENCH_DIR` to choose the disk;
//! default `./target/bench-log`, `WEIR_BENCH_SECONDS` for the time per case, default 3).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_broker::partition::Partition;
use weir_broker::BrokerConfig;
use weir_log::batch::{build_batch, ProducerFields};
use weir_log::{validate, Log, SystemClock, ValidBatch, ValidationLimits};
use weir_storage::{FileCache, FsStorage};

#[derive(Clone, Copy)]
enum Sync {
    /// Each appender fsyncs its own append before the next (no sharing).
    PerAppend,
    /// Appenders wait for durability through the partition's group commit.
    GroupCommit,
    /// No fsync at all.
    Never,
}

struct Case {
    name: &'static str,
    batch_bytes: usize,
    appenders: usize,
    sync: Sync,
}

/// Opens the bench log in `dir` with default topic settings.
fn open_log(dir: &Path) -> (Log, weir_broker::TopicSettings) {
    let config = BrokerConfig::from_properties(&BTreeMap::new()).expect("defaults");
    let settings = config.topic_settings(weir_broker::DynamicConfigs::none(), &BTreeMap::new());
    let (log, _) = Log::open(
        dir,
        FileCache::new(Arc::new(FsStorage), 64),
        Arc::new(SystemClock),
        settings.log,
    )
    .expect("open log");
    (log, settings)
}

fn open_partition(dir: &Path) -> Arc<Partition> {
    let _ = std::fs::remove_dir_all(dir);
    let (log, settings) = open_log(dir);
    Arc::new(Partition::new(
        "bench".into(),
        weir_metadata::Uuid::nil(),
        0,
        dir.to_path_buf(),
        log,
        settings,
    ))
}

fn batch_of(total_bytes: usize) -> ValidBatch {
    let value = vec![0x5au8; total_bytes.saturating_sub(61 + 8)];
    let bytes = Bytes::from(build_batch(&[&value], 0, ProducerFields::NONE));
    validate(bytes, &ValidationLimits::unbounded_time(1 << 20)).expect("valid batch")
}

async fn run_case(case: &Case, dir: &Path, seconds: f64) -> (f64, f64) {
    let partition = open_partition(dir);
    let batch = Arc::new(batch_of(case.batch_bytes));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..case.appenders {
        let partition = partition.clone();
        let batch = batch.clone();
        let sync = case.sync;
        tasks.push(tokio::spawn(async move {
            let mut appends = 0u64;
            while Instant::now() < deadline {
                let info = partition.append(&batch).expect("append");
                match sync {
                    Sync::PerAppend => {
                        let ticket = partition.log().flush_ticket();
                        tokio::task::block_in_place(|| ticket.sync()).expect("fsync");
                    }
                    Sync::GroupCommit => {
                        assert!(partition.wait_durable(info.last_offset + 1).await);
                    }
                    Sync::Never => {}
                }
                appends += 1;
            }
            appends
        }));
    }
    let mut appends = 0;
    for task in tasks {
        appends += task.await.expect("appender");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mb = appends as f64 * batch.len() as f64 / 1e6;
    (mb / elapsed, appends as f64 / elapsed)
}

fn read_all(dir: &Path) -> f64 {
    let (log, _) = open_log(dir);
    let started = Instant::now();
    let mut offset = log.log_start_offset();
    let mut bytes = 0usize;
    while offset < log.high_watermark() {
        let view = log
            .read_view(offset, log.high_watermark())
            .expect("view")
            .expect("data below the high watermark");
        let chunk = view
            .slice(1 << 20, true)
            .expect("slice")
            .expect("bytes")
            .read()
            .expect("read");
        let mut rest = &chunk[..];
        while let Some(header) = weir_log::BatchHeader::parse(rest) {
            let total = header.total_bytes() as usize;
            if total > rest.len() {
                break;
            }
            offset = header.last_offset() + 1;
            rest = &rest[total..];
        }
        bytes += chunk.len() - rest.len();
    }
    bytes as f64 / 1e6 / started.elapsed().as_secs_f64()
}

fn main() {
    let dir = PathBuf::from(
        std::env::var("WEIR_BENCH_DIR").unwrap_or_else(|_| "target/bench-log".into()),
    )
    .join("bench-0");
    let seconds: f64 = std::env::var("WEIR_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut cases = Vec::new();
    for batch_bytes in [1024, 16 * 1024] {
        cases.push(Case {
            name: "fsync per append",
            batch_bytes,
            appenders: 1,
            sync: Sync::PerAppend,
        });
        for appenders in [1, 8, 64] {
            cases.push(Case {
                name: "group commit",
                batch_bytes,
                appenders,
                sync: Sync::GroupCommit,
            });
        }
        cases.push(Case {
            name: "no fsync",
            batch_bytes,
            appenders: 1,
            sync: Sync::Never,
        });
    }
    println!("| case | batch | appenders | MB/s | appends/s |");
    println!("|---|---|---|---|---|");
    for case in &cases {
        let (mb_per_s, appends_per_s) = runtime.block_on(run_case(case, &dir, seconds));
        println!(
            "| {} | {} B | {} | {:.1} | {:.0} |",
            case.name, case.batch_bytes, case.appenders, mb_per_s, appends_per_s
        );
        if case.name == "no fsync" {
            // The no-fsync case wrote the most data: read it back (page cache warm).
            println!(
                "| read (sequential, 1 MiB fetches) | {} B | 1 | {:.1} | |",
                case.batch_bytes,
                read_all(&dir)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
