//! `weir produce TOPIC`: one record per input line.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use bytes::Bytes;
use clap::Args;
use weir_client::{Acks, Producer, ProducerConfig, ProducerRecord};

use super::{parse_key_value, stdout_is_terminal, ConnectArgs};

/// Produce records read from stdin (or a file), one per line.
#[derive(Debug, Args)]
#[command(
    after_help = "EXAMPLES:\n  echo hello | weir produce orders\n  printf 'k1:v1\\nk2:v2\\n' | weir produce orders --key-separator : -v\n  weir produce orders --file records.txt -H source=import"
)]
pub struct ProduceArgs {
    /// Topic to write to (created if the broker auto-creates topics).
    topic: String,
    /// Read lines from this file instead of stdin.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Split each line at the first SEP: the part before is the key, the rest the value.
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Header added to every record, KEY=VALUE; repeatable.
    #[arg(short = 'H', long = "header", value_parser = parse_key_value)]
    headers: Vec<(String, String)>,
    /// Write every record to this partition instead of choosing by key.
    #[arg(short, long)]
    partition: Option<i32>,
    /// Acknowledgement level: 0, 1 or all.
    #[arg(long, default_value = "all", value_parser = ["0", "1", "all", "-1"], allow_hyphen_values = true)]
    acks: String,
    /// Compression: none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none", value_parser = super::bench::parse_compression)]
    compression: weir_client::Compression,
    /// Print the partition and offset of every record.
    #[arg(short, long)]
    verbose: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Runs `weir produce`.
pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let mut config = ProducerConfig::new(&args.connect.brokers);
    config.client = args.connect.client_config();
    config.delivery_timeout = args.connect.timeout();
    config.compression = args.compression;
    config.acks = match args.acks.as_str() {
        "0" => Acks::None,
        "1" => Acks::Leader,
        _ => Acks::All,
    };
    config.idempotence = config.acks == Acks::All;
    let producer = Producer::new(config);
    let input: Box<dyn BufRead> = match &args.file {
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let progress = stdout_is_terminal()
        .then(|| indicatif::ProgressBar::new_spinner().with_message("records sent"));
    let mut pending = std::collections::VecDeque::new();
    let mut stdout = std::io::stdout().lock();
    let mut count = 0u64;
    for line in input.lines() {
        let line = line?;
        let (key, value) = match &args.key_separator {
            Some(sep) => match line.split_once(sep.as_str()) {
                Some((k, v)) => (Some(Bytes::from(k.to_string())), v.to_string()),
                None => (None, line),
            },
            None => (None, line),
        };
        let mut record = ProducerRecord::new(args.topic.clone(), value);
        record.key = key;
        record.partition = args.partition;
        record.headers = args
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Some(Bytes::from(v.clone()))))
            .collect();
        pending.push_back(producer.send(record).await?);
        count += 1;
        if let Some(bar) = &progress {
            bar.set_position(count);
        }
        // Bounded look-ahead: settle the oldest records as the window fills.
        while pending.len() > 10_000 {
            if let Some(delivery) = pending.pop_front() {
                report(&mut stdout, args.verbose, delivery.await?)?;
            }
        }
    }
    producer.flush().await?;
    for delivery in pending {
        report(&mut stdout, args.verbose, delivery.await?)?;
    }
    if let Some(bar) = progress {
        bar.finish_with_message(format!("{count} records sent"));
    }
    producer.close().await?;
    Ok(())
}

fn report(
    out: &mut impl Write,
    verbose: bool,
    landed: weir_client::RecordMetadata,
) -> anyhow::Result<()> {
    if verbose {
        writeln!(
            out,
            "partition {} offset {}",
            landed.partition, landed.offset
        )?;
    }
    Ok(())
}
