//! `weir bench`: an OpenMessaging-Benchmark-shaped load generator. Producers send at a fixed
//! rate (or as fast as they can), consumers read the same topic, and end-to-end latency is
//! measured from the producer's send to the consumer's receipt on one clock.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use weir_client::{
    Acks, Admin, ClientError, Compression, Consumer, ConsumerConfig, OffsetSpec, Producer,
    ProducerConfig, ProducerRecord,
};

use super::ConnectArgs;

/// Largest latency the histograms hold, in microseconds (one minute).
const LATENCY_US_MAX: u64 = 60_000_000;
/// Bytes at the start of every value: the send time, in ns since the run's epoch.
const STAMP_BYTES: usize = 8;

/// Measure throughput and latency against a cluster.
#[derive(Debug, Args)]
#[command(
    after_help = "EXAMPLES:\n  weir bench --topic bench --duration 30\n  weir bench --topic bench --partitions 8 --record-size 1024 --rate 50000 --acks 1\n  weir bench --limits"
)]
pub struct BenchArgs {
    /// Topic to use; created when missing.
    #[arg(long, default_value = "weir-bench")]
    topic: String,
    /// Partitions of the topic when it is created.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Bytes per record value (at least 8: the send timestamp).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(STAMP_BYTES as u64..=1 << 30))]
    record_size: u64,
    /// Concurrent producers.
    #[arg(long, default_value_t = 1)]
    producers: usize,
    /// Concurrent consumers (they split the partitions); 0 measures producing only.
    #[arg(long, default_value_t = 1)]
    consumers: usize,
    /// Records per second over all producers, or `max`.
    #[arg(long, default_value = "max", value_parser = parse_rate)]
    rate: Rate,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds run before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Acknowledgement level: 0, 1 or all.
    #[arg(long, default_value = "1", value_parser = ["0", "1", "all", "-1"], allow_hyphen_values = true)]
    acks: String,
    /// Compression: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    compression: Compression,
    /// How long a producer batch waits for more records.
    #[arg(long, default_value_t = 1)]
    linger_ms: u64,
    /// Producer batch size in bytes.
    #[arg(long, default_value_t = 1_000_000)]
    batch_bytes: usize,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Instead of a run, measure this machine's limits: loopback TCP bandwidth and sequential
    /// disk writes with and without fsync (in --limits-dir).
    #[arg(long)]
    limits: bool,
    /// Directory for the disk part of --limits.
    #[arg(long, default_value = ".")]
    limits_dir: PathBuf,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// A target rate in records per second; `None` is as fast as possible.
#[derive(Debug, Clone, Copy)]
struct Rate(Option<u64>);

fn parse_rate(text: &str) -> Result<Rate, String> {
    match text {
        "max" => Ok(Rate(None)),
        t => t
            .parse::<u64>()
            .ok()
            .filter(|r| *r > 0)
            .map(|r| Rate(Some(r)))
            .ok_or_else(|| format!("expected a positive rate or `max`, got {t:?}")),
    }
}

/// Parses a compression codec name.
pub fn parse_compression(text: &str) -> Result<Compression, String> {
    match text {
        "none" => Ok(Compression::None),
        "gzip" => Ok(Compression::Gzip),
        "snappy" => Ok(Compression::Snappy),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        other => Err(format!(
            "unknown compression {other:?}: use none, gzip, snappy, lz4 or zstd"
        )),
    }
}

/// Runs `weir bench`.
pub fn run(args: BenchArgs) -> ExitCode {
    if args.limits {
        return super::run(limits(args.limits_dir));
    }
    super::run(bench(args))
}

fn histogram() -> Histogram<u64> {
    // Bounds are constants within hdrhistogram's limits, so creation cannot fail.
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
}

struct Shared {
    epoch: Instant,
    measure_from: Instant,
    measure_until: Instant,
    stop: AtomicBool,
    produced: AtomicU64,
    consumed: AtomicU64,
    publish_latency: Mutex<Histogram<u64>>,
    end_to_end_latency: Mutex<Histogram<u64>>,
}

impl Shared {
    fn measuring(&self, at: Instant) -> bool {
        at >= self.measure_from && at < self.measure_until
    }
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let admin = Admin::new(args.connect.client_config());
    match super::within(
        &args.connect,
        admin.create_topic(&args.topic, args.partitions, -1, &[]),
    )
    .await
    {
        Ok(()) => {}
        Err(error)
            if error
                .downcast_ref::<ClientError>()
                .and_then(ClientError::code)
                == Some(36) => {}
        Err(error) => return Err(error),
    }
    let partitions = super::within(&args.connect, admin.describe_topic(&args.topic))
        .await?
        .info
        .partitions
        .len() as i32;
    let start = Instant::now();
    let warmup = Duration::from_secs_f64(args.warmup.max(0.0));
    let duration = Duration::from_secs_f64(args.duration.max(0.1));
    let shared = Arc::new(Shared {
        epoch: start,
        measure_from: start + warmup,
        measure_until: start + warmup + duration,
        stop: AtomicBool::new(false),
        produced: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
        publish_latency: Mutex::new(histogram()),
        end_to_end_latency: Mutex::new(histogram()),
    });

    let mut consumers = Vec::new();
    for c in 0..args.consumers {
        let mine: Vec<i32> = (0..partitions)
            .filter(|p| *p as usize % args.consumers == c)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut config = ConsumerConfig::new(&args.connect.brokers);
        config.client = args.connect.client_config();
        let mut consumer = Consumer::new(config);
        for &p in &mine {
            super::within(
                &args.connect,
                consumer.assign(&args.topic, p, OffsetSpec::Latest),
            )
            .await?;
        }
        consumers.push(tokio::spawn(consume(consumer, shared.clone())));
    }

    let mut producers = Vec::new();
    for _ in 0..args.producers {
        let mut config = ProducerConfig::new(&args.connect.brokers);
        config.client = args.connect.client_config();
        config.acks = match args.acks.as_str() {
            "0" => Acks::None,
            "1" => Acks::Leader,
            _ => Acks::All,
        };
        config.idempotence = config.acks == Acks::All;
        config.linger = Duration::from_millis(args.linger_ms);
        config.batch_bytes = args.batch_bytes;
        config.compression = args.compression;
        let rate = args
            .rate
            .0
            .map(|r| (r as f64 / args.producers as f64).max(1.0));
        producers.push(tokio::spawn(produce(
            Producer::new(config),
            args.topic.clone(),
            args.record_size as usize,
            rate,
            shared.clone(),
        )));
    }

    tokio::time::sleep_until((shared.measure_until).into()).await;
    shared.stop.store(true, Ordering::Release);
    for producer in producers {
        producer.await??;
    }
    // Let consumers drain what was produced, bounded.
    let drain_deadline = Instant::now() + Duration::from_secs(10);
    while args.consumers > 0
        && shared.consumed.load(Ordering::Acquire) < shared.produced.load(Ordering::Acquire)
        && Instant::now() < drain_deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for consumer in &consumers {
        consumer.abort();
    }
    report(&args, &shared, duration)
}

async fn produce(
    producer: Producer,
    topic: String,
    record_size: usize,
    rate: Option<f64>,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let (tx, mut rx) =
        tokio::sync::mpsc::channel::<(Instant, weir_client::DeliveryFuture)>(100_000);
    let settle = {
        let shared = shared.clone();
        tokio::spawn(async move {
            while let Some((sent, delivery)) = rx.recv().await {
                delivery.await?;
                let acked = Instant::now();
                if shared.measuring(sent) {
                    let micros = acked.duration_since(sent).as_micros() as u64;
                    let _ = shared
                        .publish_latency
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .record(micros.clamp(1, LATENCY_US_MAX));
                    shared.produced.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<(), ClientError>(())
        })
    };
    let padding = vec![0x61u8; record_size - STAMP_BYTES];
    let started = Instant::now();
    let mut sent = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        if let Some(rate) = rate {
            // Pace by schedule, not by sleeping per record: catch up after a stall.
            let due = started + Duration::from_secs_f64(sent as f64 / rate);
            let now = Instant::now();
            if due > now {
                tokio::time::sleep(due - now).await;
            }
        }
        let now = Instant::now();
        let mut value = Vec::with_capacity(record_size);
        value
            .extend_from_slice(&(now.duration_since(shared.epoch).as_nanos() as u64).to_be_bytes());
        value.extend_from_slice(&padding);
        let delivery = producer
            .send(ProducerRecord {
                topic: topic.clone(),
                value: Some(Bytes::from(value)),
                ..ProducerRecord::default()
            })
            .await?;
        if tx.send((now, delivery)).await.is_err() {
            break;
        }
        sent += 1;
    }
    drop(tx);
    producer.flush().await?;
    settle.await??;
    producer.close().await?;
    Ok(())
}

async fn consume(mut consumer: Consumer, shared: Arc<Shared>) -> anyhow::Result<()> {
    loop {
        let records = consumer.poll(Duration::from_millis(200)).await?;
        let now = Instant::now();
        let mut latencies = Vec::with_capacity(records.len());
        for record in &records {
            let Some(stamp) = record
                .value
                .as_ref()
                .and_then(|v| v.get(..STAMP_BYTES))
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
            else {
                continue;
            };
            let sent = shared.epoch + Duration::from_nanos(u64::from_be_bytes(stamp));
            if shared.measuring(sent) {
                latencies.push(now.saturating_duration_since(sent).as_micros() as u64);
            }
        }
        if !latencies.is_empty() {
            shared
                .consumed
                .fetch_add(latencies.len() as u64, Ordering::Relaxed);
            let mut histogram = shared
                .end_to_end_latency
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for micros in latencies {
                let _ = histogram.record(micros.clamp(1, LATENCY_US_MAX));
            }
        }
    }
}

fn percentiles(histogram: &Histogram<u64>) -> serde_json::Value {
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    serde_json::json!({
        "p50_ms": ms(0.50), "p90_ms": ms(0.90), "p99_ms": ms(0.99), "p999_ms": ms(0.999),
        "max_ms": histogram.max() as f64 / 1000.0, "samples": histogram.len(),
    })
}

fn report(args: &BenchArgs, shared: &Shared, duration: Duration) -> anyhow::Result<()> {
    let seconds = duration.as_secs_f64();
    let produced = shared.produced.load(Ordering::Acquire) as f64;
    let consumed = shared.consumed.load(Ordering::Acquire) as f64;
    let mb = |records: f64| records * args.record_size as f64 / 1e6 / seconds;
    let publish = shared
        .publish_latency
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let end_to_end = shared
        .end_to_end_latency
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let produce_rate = produced / seconds;
    let rate_held = args
        .rate
        .0
        .map(|target| produce_rate >= target as f64 * 0.95);
    let report = serde_json::json!({
        "topic": args.topic, "record_size": args.record_size as usize, "producers": args.producers, "consumers": args.consumers,
        "acks": args.acks, "target_rate": args.rate.0, "rate_held": rate_held, "duration_s": seconds,
        "produce": {"records_per_s": produce_rate, "mb_per_s": mb(produced)},
        "consume": {"records_per_s": consumed / seconds, "mb_per_s": mb(consumed)},
        "publish_latency": percentiles(&publish),
        "end_to_end_latency": percentiles(&end_to_end),
    });
    outln!("weir bench: topic {} | {} B records | {} producer(s), {} consumer(s) | acks {} | {} s measured", args.topic, args.record_size as usize, args.producers, args.consumers, args.acks, seconds);
    outln!("{:<22} {:>14} {:>10}", "", "records/s", "MB/s");
    outln!(
        "{:<22} {:>14.0} {:>10.1}",
        "produce",
        produce_rate,
        mb(produced)
    );
    outln!(
        "{:<22} {:>14.0} {:>10.1}",
        "consume",
        consumed / seconds,
        mb(consumed)
    );
    if let (Some(target), Some(held)) = (args.rate.0, rate_held) {
        outln!(
            "target rate {target}/s: {}",
            if held { "held" } else { "NOT held" }
        );
    }
    outln!(
        "{:<22} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "latency (ms)",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max"
    );
    for (name, h) in [
        ("publish (send→ack)", &publish),
        ("end-to-end", &end_to_end),
    ] {
        let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        outln!(
            "{:<22} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            name,
            q(0.5),
            q(0.9),
            q(0.99),
            q(0.999),
            h.max() as f64 / 1000.0
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Measures loopback TCP bandwidth and disk write bandwidth with and without fsync.
async fn limits(dir: PathBuf) -> anyhow::Result<()> {
    let loopback = tokio::task::spawn_blocking(loopback_bandwidth).await??;
    let (buffered, fsynced, dsync) =
        tokio::task::spawn_blocking(move || disk_bandwidth(&dir)).await??;
    outln!("{:<52} {:>10}", "machine limit", "MB/s");
    outln!(
        "{:<52} {:>10.1}",
        "loopback TCP, one connection, 1 MiB writes",
        loopback
    );
    outln!(
        "{:<52} {:>10.1}",
        "disk: 1 GiB sequential, no fsync (page cache)",
        buffered
    );
    outln!(
        "{:<52} {:>10.1}",
        "disk: 1 GiB sequential, one fsync at the end",
        fsynced
    );
    outln!(
        "{:<52} {:>10.1}",
        "disk: 16 KiB writes, fsync after each",
        dsync
    );
    Ok(())
}

fn loopback_bandwidth() -> anyhow::Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let total: u64 = 4 << 30;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let mut stream = std::net::TcpStream::connect(address)?;
        let chunk = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        while sent < total {
            stream.write_all(&chunk)?;
            sent += chunk.len() as u64;
        }
        Ok(())
    });
    let (mut stream, _) = listener.accept()?;
    let started = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut received = 0u64;
    while received < total {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        received += n as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("sender thread failed"))??;
    Ok(received as f64 / 1e6 / seconds)
}

fn disk_bandwidth(dir: &std::path::Path) -> anyhow::Result<(f64, f64, f64)> {
    if !dir.is_dir() {
        anyhow::bail!("--limits-dir {} is not a directory", dir.display());
    }
    let path = dir.join(".weir-bench-limits");
    let chunk = vec![0x5au8; 1 << 20];
    let write_gib = |sync: bool| -> anyhow::Result<f64> {
        let started = Instant::now();
        let mut file = std::fs::File::create(&path)?;
        for _ in 0..1024 {
            file.write_all(&chunk)?;
        }
        if sync {
            file.sync_data()?;
        }
        Ok(1024.0 * 1.048576 / started.elapsed().as_secs_f64())
    };
    let buffered = write_gib(false)?;
    let fsynced = write_gib(true)?;
    let small = vec![0x5au8; 16 * 1024];
    let started = Instant::now();
    let mut file = std::fs::File::create(&path)?;
    for _ in 0..2000 {
        file.write_all(&small)?;
        file.sync_data()?;
    }
    let dsync = 2000.0 * small.len() as f64 / 1e6 / started.elapsed().as_secs_f64();
    std::fs::remove_file(&path)?;
    Ok((buffered, fsynced, dsync))
}
