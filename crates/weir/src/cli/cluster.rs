//! `weir cluster status`.

use clap::{Args, Subcommand};
use weir_client::Admin;

use super::{id_list, within, ConnectArgs};

/// Cluster information.
#[derive(Debug, Args)]
#[command(
    after_help = "EXAMPLES:\n  weir cluster status\n  weir cluster status --brokers 10.0.0.5:9092"
)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Controllers (leader, term, commit index), brokers, topic and partition counts,
    /// under-replicated partitions, and hung transactions: open at a partition, their
    /// producer idle there for longer than the leader's transaction.max.timeout.ms, holding
    /// read_committed consumers back until aborted.
    Status,
}

/// Runs a cluster command.
pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let ClusterCommand::Status = args.command;
    let admin = Admin::new(args.connect.client_config());
    let status = within(&args.connect, admin.cluster_status()).await?;
    outln!("cluster id:               {}", status.cluster_id);
    outln!("controller:               {}", status.controller);
    // The quorum's view needs DescribeQuorum, which brokers without one do not answer.
    match within(&args.connect, admin.describe_quorum()).await {
        Ok(quorum) => {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            outln!(
                "metadata quorum:          leader {}, term {}, commit index {}",
                quorum.leader,
                quorum.epoch,
                quorum.high_watermark - 1
            );
            let members = quorum
                .voters
                .iter()
                .map(|v| ("voter", v))
                .chain(quorum.observers.iter().map(|o| ("observer", o)));
            for (role, voter) in members {
                let contact = match voter.last_fetch_timestamp {
                    -1 => "never heard from".to_string(),
                    at => format!("heard from {} ms ago", (now_ms - at).max(0)),
                };
                let log_end = match voter.log_end_offset {
                    -1 => "unknown".to_string(),
                    end => end.to_string(),
                };
                outln!("  {role} {}  log end {log_end}  {contact}", voter.node_id);
            }
        }
        Err(error) => outln!("metadata quorum:          unknown ({error:#})"),
    }
    outln!("brokers:                  {}", status.brokers.len());
    for broker in &status.brokers {
        outln!("  {}  {}", broker.node_id, broker.address);
    }
    outln!("topics:                   {}", status.topics);
    outln!("partitions:               {}", status.partitions);
    outln!(
        "under-replicated:         {}",
        status.under_replicated.len()
    );
    for p in &status.under_replicated {
        let leader = match p.leader {
            -1 => "none (offline)".to_string(),
            id => id.to_string(),
        };
        outln!(
            "  {}-{}  leader {leader}  replicas {}  isr {}",
            p.topic,
            p.partition,
            id_list(&p.replicas),
            id_list(&p.isr)
        );
    }
    let hung = match within(&args.connect, admin.hung_transactions()).await {
        Ok(hung) => hung,
        Err(error) => {
            outln!("hung transactions:        unknown ({error:#})");
            return Ok(());
        }
    };
    outln!("hung transactions:        {}", hung.found.len());
    for t in &hung.found {
        outln!(
            "  {}-{}  leader {}  producer {} epoch {}  open from offset {}  idle {:.1}s (transaction.max.timeout.ms {})",
            t.topic,
            t.partition,
            t.leader,
            t.producer_id,
            t.producer_epoch,
            t.start_offset,
            t.idle_ms as f64 / 1000.0,
            t.max_timeout_ms
        );
    }
    if let Some(t) = hung.found.first() {
        outln!(
            "  read_committed consumers stop at each; end one with an abort marker: weir txn abort --topic {} --partition {} --start-offset {}",
            t.topic,
            t.partition,
            t.start_offset
        );
    }
    for (leader, why) in &hung.unasked {
        outln!("  leader {leader} not asked: {why}");
    }
    Ok(())
}
