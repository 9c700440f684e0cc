//! `weir txn …`: list the transactional ids, describe one (state, producer, partitions, age),
//! and abort one's open transaction by fencing its producer.

use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use weir_client::Admin;

use super::{within, ConnectArgs};

/// Transactions of transactional producers.
#[derive(Debug, Args)]
#[command(
    after_help = "EXAMPLES:\n  weir txn list\n  weir txn describe payments-1\n  weir txn abort payments-1\n  weir txn abort --topic orders --partition 3 --start-offset 1200\n\nA transaction the coordinators do not know (a producer that wrote transactional records outside any transaction) hangs: read_committed consumers stop at it. weir cluster status lists hung transactions; abort with --topic, --partition and --start-offset ends one."
)]
pub struct TxnArgs {
    #[command(subcommand)]
    command: TxnCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Debug, Subcommand)]
enum TxnCommand {
    /// List the transactional ids with their producer and state.
    List,
    /// Show a transactional id's state, producer id and epoch, timeout, how long its
    /// transaction has been open, and its partitions.
    Describe {
        /// Transactional id.
        transactional_id: String,
    },
    /// Abort a transactional id's open transaction: its producer is fenced (the next epoch),
    /// so it can neither commit nor write again, and the coordinator aborts what it left
    /// open. A new producer of the id starts afresh, as after any restart. Or, with --topic,
    /// --partition and --start-offset, end the transaction open at that offset of a partition
    /// (a hung one, as `weir cluster status` lists them) with an abort marker its leader
    /// writes, as kafka-transactions abort does.
    Abort {
        /// Transactional id.
        #[arg(required_unless_present = "topic")]
        transactional_id: Option<String>,
        /// Topic of the partition whose transaction to end.
        #[arg(long, conflicts_with = "transactional_id", requires_all = ["partition", "start_offset"])]
        topic: Option<String>,
        /// That partition.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
        /// Offset of the transaction's first record on it.
        #[arg(long, requires = "topic")]
        start_offset: Option<i64>,
    },
}

/// How long ago `start_ms` was, as "12.3s", or "-" for none.
fn age(start_ms: i64) -> String {
    if start_ms < 0 {
        return "-".to_string();
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    format!(
        "{:.1}s",
        now_ms.saturating_sub(start_ms).max(0) as f64 / 1000.0
    )
}

/// Runs a txn command.
pub async fn run(args: TxnArgs) -> anyhow::Result<()> {
    let connect = &args.connect;
    let admin = Admin::new(connect.client_config());
    match args.command {
        TxnCommand::List => {
            let listed = within(connect, admin.list_transactions()).await?;
            outln!("{:<40}  {:>12}  STATE", "TRANSACTIONAL-ID", "PRODUCER-ID");
            for t in listed {
                outln!(
                    "{:<40}  {:>12}  {}",
                    t.transactional_id,
                    t.producer_id,
                    t.state
                );
            }
        }
        TxnCommand::Describe { transactional_id } => {
            let d = within(connect, admin.describe_transaction(&transactional_id)).await?;
            outln!("transactional id  {}", d.transactional_id);
            outln!("state             {}", d.state);
            outln!(
                "producer          {} epoch {}",
                d.producer_id,
                d.producer_epoch
            );
            outln!("timeout           {} ms", d.timeout_ms);
            outln!("open for          {}", age(d.start_ms));
            let partitions: Vec<String> = d
                .partitions
                .iter()
                .flat_map(|(topic, ps)| ps.iter().map(move |p| format!("{topic}-{p}")))
                .collect();
            outln!(
                "partitions        {}",
                if partitions.is_empty() {
                    "-".to_string()
                } else {
                    partitions.join(", ")
                }
            );
        }
        TxnCommand::Abort {
            topic: Some(topic),
            partition: Some(partition),
            start_offset: Some(start_offset),
            ..
        } => {
            let aborted = within(
                connect,
                admin.abort_hung_transaction(&topic, partition, start_offset),
            )
            .await?;
            outln!(
                "{topic}-{partition}: aborted the transaction open from offset {start_offset}; producer {} epoch {}",
                aborted.producer_id,
                aborted.producer_epoch
            );
        }
        TxnCommand::Abort {
            transactional_id: Some(transactional_id),
            ..
        } => {
            let before = within(connect, admin.describe_transaction(&transactional_id)).await?;
            let fenced = within(connect, admin.abort_transaction(&transactional_id)).await?;
            let what = if before.state == "Ongoing" {
                "aborted its open transaction"
            } else {
                "no transaction was open"
            };
            outln!(
                "{transactional_id}: {what}; producer {} fenced at epoch {}",
                fenced.producer_id,
                fenced.producer_epoch
            );
        }
        TxnCommand::Abort { .. } => {
            anyhow::bail!("give a transactional id, or --topic, --partition and --start-offset")
        }
    }
    Ok(())
}
