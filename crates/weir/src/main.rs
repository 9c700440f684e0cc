//! The `weir` binary: `weir server` runs a broker; `topic`, `produce`, `consume`, `group`,
//! `txn`, `cluster`, `partitions` and `bench` are the command line for any Kafka-compatible
//! cluster.

mod cli;
mod data_dir;
mod dev_cluster;
mod node_view;
mod server;
mod settings;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Weir: a Kafka-compatible commit-log message broker in one binary.
#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about,
    long_about = None,
    after_help = "The client commands (topic, produce, consume, group, txn, cluster, user, partitions, bench) take \
        --brokers (env WEIR_BROKERS) and --timeout before or after their name."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker (a single-node cluster) with embedded defaults, or a node of a cluster.
    Server(server::ServerArgs),
    /// Start a local cluster of server processes (brokers and controllers).
    DevCluster(dev_cluster::DevClusterArgs),
    /// Create, list, describe, delete and configure topics.
    Topic(cli::topic::TopicArgs),
    /// Write records read from stdin or a file, one per line.
    Produce(cli::produce::ProduceArgs),
    /// Read records and print them.
    Consume(cli::consume::ConsumeArgs),
    /// List, describe (with lag), delete consumer groups and reset their offsets.
    Group(cli::group::GroupArgs),
    /// List and describe transactions, and abort one: by fencing its producer, or a hung one
    /// with an abort marker.
    Txn(cli::txn::TxnArgs),
    /// Cluster status.
    Cluster(cli::cluster::ClusterArgs),
    /// Create, list and delete SCRAM users (SASL logins).
    User(cli::user::UserArgs),
    /// Add, list and remove ACLs (what the authorizer lets each principal do).
    Acl(cli::acl::AclArgs),
    /// Set, remove and list client quotas (byte rates, request time) of users, client ids and
    /// addresses.
    Quota(cli::quota::QuotaArgs),
    /// Move replicas between brokers (reassignments) and elect leaders.
    Partitions(cli::partitions::PartitionsArgs),
    /// Query the cluster metadata with SQL (read-only, from a server's data directory).
    Metadata(cli::metadata::MetadataArgs),
    /// Load generator: throughput and latency percentiles.
    Bench(cli::bench::BenchArgs),
}

fn main() -> ExitCode {
    abort_on_panic();
    let cli = Cli::parse_from(cli::hoist_connect_flags(std::env::args_os().collect()));
    match cli.command {
        Command::Server(args) => server::run(args),
        Command::DevCluster(args) => dev_cluster::run(args),
        Command::Topic(args) => cli::run(cli::topic::run(args)),
        Command::Produce(args) => cli::run(cli::produce::run(args)),
        Command::Consume(args) => cli::run(cli::consume::run(args)),
        Command::Group(args) => cli::run(cli::group::run(args)),
        Command::Txn(args) => cli::run(cli::txn::run(args)),
        Command::Cluster(args) => cli::run(cli::cluster::run(args)),
        Command::User(args) => cli::run(cli::user::run(args)),
        Command::Acl(args) => cli::run(cli::acl::run(args)),
        Command::Quota(args) => cli::run(cli::quota::run(args)),
        Command::Partitions(args) => cli::run(cli::partitions::run(args)),
        Command::Metadata(args) => cli::metadata::run(args),
        Command::Bench(args) => cli::bench::run(args),
    }
}

/// A panic is a bug: the process stops at once, as with `panic = "abort"`, rather than let a
/// runtime catch the unwinding task and serve on with a partition whose append stopped
/// half-way; the next start recovers the logs as after a crash. The profiles unwind (so the
/// test harness shares every compiled library with the binary) and this hook aborts after
/// the default hook has printed the message.
fn abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
}
