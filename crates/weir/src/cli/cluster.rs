//! `weir cluster status`.

use clap::{Args, Subcommand};
use weir_client::Admin;

use super::{within, ConnectArgs};

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
    /// Brokers, controller, topic and partition counts, under-replicated partitions.
    Status,
}

/// Runs a cluster command.
pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let ClusterCommand::Status = args.command;
    let admin = Admin::new(args.connect.client_config());
    let status = within(&args.connect, admin.cluster_status()).await?;
    outln!("cluster id:               {}", status.cluster_id);
    outln!("controller:               {}", status.controller);
    outln!("brokers:                  {}", status.brokers.len());
    for broker in &status.brokers {
        outln!("  {}  {}", broker.node_id, broker.address);
    }
    outln!("topics:                   {}", status.topics);
    outln!("partitions:               {}", status.partitions);
    outln!("under-replicated:         {}", status.under_replicated);
    Ok(())
}
