//! `weir consume TOPIC`: print records; stop at the end of the data unless told otherwise.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};
use weir_client::{
    Admin, Consumer, ConsumerConfig, ConsumerRecord, GroupConsumer, GroupConsumerConfig, OffsetSpec,
};

use super::{stdout_is_terminal, ConnectArgs};

/// How records are printed.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// The value only.
    Value,
    /// Key, a tab, then the value.
    Kv,
    /// One JSON object per record: topic, partition, offset, key, value, timestamp, headers.
    Json,
}

/// Read records from a topic.
#[derive(Debug, Args)]
#[command(
    after_help = "EXAMPLES:\n  weir consume orders\n  weir consume orders -p 0 --offset 100 -n 10 --format json\n  weir consume orders --offset @1735689600000 --follow\n  weir consume orders --group billing --follow"
)]
pub struct ConsumeArgs {
    /// Topic to read.
    topic: String,
    /// Read only this partition (default: all).
    #[arg(short, long, conflicts_with = "group")]
    partition: Option<i32>,
    /// Read as a member of this consumer group: partitions come from the group, reading
    /// resumes at the group's committed offsets, and offsets are committed after printing.
    #[arg(short, long)]
    group: Option<String>,
    /// Where to start: earliest, latest, an offset, or @TIMESTAMP_MS. With --group, where a
    /// partition without a committed offset starts (earliest or latest).
    #[arg(long, default_value = "earliest", value_parser = parse_offset)]
    offset: OffsetSpec,
    /// Stop after this many records.
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// Keep waiting for new records instead of stopping at the end of the data.
    #[arg(long)]
    follow: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "value")]
    format: Format,
    #[command(flatten)]
    connect: ConnectArgs,
}

fn parse_offset(text: &str) -> Result<OffsetSpec, String> {
    match text {
        "earliest" | "beginning" => Ok(OffsetSpec::Earliest),
        "latest" | "end" => Ok(OffsetSpec::Latest),
        t if t.starts_with('@') => t[1..]
            .parse()
            .map(OffsetSpec::Timestamp)
            .map_err(|_| format!("bad timestamp {t:?}")),
        t => t.parse().map(OffsetSpec::At).map_err(|_| {
            format!("expected earliest, latest, an offset or @TIMESTAMP_MS, got {t:?}")
        }),
    }
}

/// Runs `weir consume`.
pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(group) = args.group.clone() {
        return run_in_group(args, group).await;
    }
    let mut config = ConsumerConfig::new(&args.connect.brokers);
    config.client = args.connect.client_config();
    let mut consumer = Consumer::new(config);
    let admin = Admin::new(args.connect.client_config());
    let info = super::within(&args.connect, consumer.cluster().topic(&args.topic, false)).await?;
    let partitions: Vec<i32> = match args.partition {
        Some(p) if p < 0 || p as usize >= info.partitions.len() => anyhow::bail!(
            "topic {} has no partition {p} (it has {})",
            args.topic,
            info.partitions.len()
        ),
        Some(p) => vec![p],
        None => info.partitions.iter().map(|p| p.partition).collect(),
    };
    // The end of the data as it is now: without --follow or -n, stop there.
    let mut ends = BTreeMap::new();
    for &partition in &partitions {
        let end = super::within(
            &args.connect,
            admin.list_offset(&args.topic, partition, OffsetSpec::Latest),
        )
        .await?
        .unwrap_or(0);
        // An offset past a partition's end starts at its end (nothing to read there yet).
        let from = match args.offset {
            OffsetSpec::At(offset) if offset > end => OffsetSpec::At(end),
            other => other,
        };
        let start =
            super::within(&args.connect, consumer.assign(&args.topic, partition, from)).await?;
        if end > start {
            ends.insert(partition, end);
        }
    }
    let stop_at_end = !args.follow && args.count.is_none();
    let progress = (stdout_is_terminal() && stop_at_end).then(indicatif::ProgressBar::new_spinner);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut printed = 0u64;
    loop {
        if stop_at_end && ends.is_empty() {
            break;
        }
        if args.count.is_some_and(|n| printed >= n) {
            break;
        }
        for record in consumer.poll(Duration::from_millis(500)).await? {
            if stop_at_end {
                match ends.get(&record.partition) {
                    Some(end) if record.offset < *end => {}
                    _ => continue,
                }
                if record.offset + 1 >= ends[&record.partition] {
                    ends.remove(&record.partition);
                }
            }
            if args.count.is_some_and(|n| printed >= n) {
                break;
            }
            print_record(&mut out, &record, args.format)?;
            printed += 1;
            if let Some(bar) = &progress {
                bar.set_position(printed);
            }
        }
        out.flush()?;
    }
    out.flush()?;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    Ok(())
}

/// `weir consume --group`: a group member that prints what it is assigned, commits after
/// each batch it printed, and leaves the group when it stops.
async fn run_in_group(args: ConsumeArgs, group: String) -> anyhow::Result<()> {
    let mut config = GroupConsumerConfig::new(&args.connect.brokers, &group);
    config.consumer.client = args.connect.client_config();
    config.auto_offset_reset = match args.offset {
        OffsetSpec::Earliest => OffsetSpec::Earliest,
        OffsetSpec::Latest => OffsetSpec::Latest,
        _ => anyhow::bail!("with --group, --offset must be earliest or latest (where a partition without a committed offset starts)"),
    };
    // Committed after each printed batch instead.
    config.auto_commit_interval = None;
    let mut consumer = GroupConsumer::subscribe(config, &[args.topic.as_str()]).await?;
    let stop_at_end = !args.follow && args.count.is_none();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut printed = 0u64;
    loop {
        if args.count.is_some_and(|n| printed >= n) {
            break;
        }
        let records = consumer.poll(Duration::from_millis(500)).await?;
        let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for record in &records {
            if args.count.is_some_and(|n| printed >= n) {
                break;
            }
            print_record(&mut out, record, args.format)?;
            printed += 1;
            next.insert((record.topic.clone(), record.partition), record.offset + 1);
        }
        out.flush()?;
        let offsets: Vec<((String, i32), i64)> = next.into_iter().collect();
        match consumer.commit_offsets(&offsets).await {
            // The group rebalanced: another member may read these again (at least once).
            Err(error) if error.is_rebalance() => {}
            other => other?,
        }
        if stop_at_end && records.is_empty() && consumer.at_end() {
            break;
        }
    }
    out.flush()?;
    consumer.close().await?;
    Ok(())
}

fn text(bytes: &Option<bytes::Bytes>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

fn print_record(
    out: &mut impl Write,
    record: &ConsumerRecord,
    format: Format,
) -> std::io::Result<()> {
    match format {
        Format::Value => {
            out.write_all(record.value.as_deref().unwrap_or_default())?;
            out.write_all(b"\n")
        }
        Format::Kv => {
            out.write_all(record.key.as_deref().unwrap_or_default())?;
            out.write_all(b"\t")?;
            out.write_all(record.value.as_deref().unwrap_or_default())?;
            out.write_all(b"\n")
        }
        Format::Json => {
            let headers: Vec<serde_json::Value> = record
                .headers
                .iter()
                .map(|(k, v)| serde_json::json!({"key": k, "value": text(v)}))
                .collect();
            let json = serde_json::json!({
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "key": text(&record.key),
                "value": text(&record.value),
                "timestamp": record.timestamp,
                "headers": headers,
            });
            writeln!(out, "{json}")
        }
    }
}
