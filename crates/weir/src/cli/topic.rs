//! `weir topic …`: create, list, describe, delete, alter-config, add-partitions.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use weir_client::{Admin, ClientError};

use super::{id_list, parse_key_value, within, ConnectArgs};

/// Topic administration.
#[derive(Debug, Args)]
#[command(
    after_help = "EXAMPLES:\n  weir topic create orders -p 6 -c retention.ms=86400000\n  weir topic list\n  weir topic describe orders\n  weir topic alter-config orders --set retention.ms=3600000 --delete segment.ms\n  weir topic add-partitions orders --total 12\n  weir topic delete orders"
)]
pub struct TopicArgs {
    #[command(subcommand)]
    command: TopicCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Debug, Subcommand)]
enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name.
        name: String,
        /// Number of partitions (-1: the broker's num.partitions).
        #[arg(short, long, default_value_t = -1, allow_negative_numbers = true)]
        partitions: i32,
        /// Replication factor (-1: the broker's default.replication.factor).
        #[arg(short, long, default_value_t = -1, allow_negative_numbers = true)]
        replication: i16,
        /// Topic config, KEY=VALUE; repeatable.
        #[arg(short, long = "config", value_parser = parse_key_value)]
        config: Vec<(String, String)>,
    },
    /// List topic names.
    List,
    /// Show partitions, leaders, replicas, ISR, offsets and configs.
    Describe {
        /// Topic name.
        name: String,
    },
    /// Delete a topic and its data.
    Delete {
        /// Topic name.
        name: String,
    },
    /// Set or remove topic config overrides.
    #[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args(["set", "delete"])))]
    AlterConfig {
        /// Topic name.
        name: String,
        /// Override to set, KEY=VALUE; repeatable.
        #[arg(long, value_parser = parse_key_value)]
        set: Vec<(String, String)>,
        /// Override to remove (back to the default); repeatable.
        #[arg(long)]
        delete: Vec<String>,
    },
    /// Raise the partition count to a new total.
    AddPartitions {
        /// Topic name.
        name: String,
        /// The new total number of partitions.
        #[arg(long)]
        total: i32,
    },
}

/// Runs a topic command.
/// A broker's refusal prefixed with the topic it is about (Kafka's messages do not always name
/// it); other errors as they are.
fn naming_topic(error: anyhow::Error, topic: &str) -> anyhow::Error {
    if matches!(
        error.downcast_ref::<ClientError>(),
        Some(ClientError::Broker { .. })
    ) {
        error.context(format!("topic {topic}"))
    } else {
        error
    }
}

pub async fn run(args: TopicArgs) -> anyhow::Result<()> {
    let connect = &args.connect;
    let admin = Admin::new(connect.client_config());
    match args.command {
        TopicCommand::Create {
            name,
            partitions,
            replication,
            config,
        } => {
            let configs: Vec<(&str, &str)> = config
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            within(
                connect,
                admin.create_topic(&name, partitions, replication, &configs),
            )
            .await?;
            outln!("created topic {name}");
        }
        TopicCommand::List => {
            for name in within(connect, admin.list_topics()).await? {
                outln!("{name}");
            }
        }
        TopicCommand::Describe { name } => {
            let description = within(connect, admin.describe_topic(&name)).await?;
            let configs = within(connect, admin.describe_configs(&name)).await?;
            let info = &description.info;
            outln!(
                "topic {}  id {}  partitions {}",
                info.name,
                info.topic_id,
                info.partitions.len()
            );
            outln!(
                "{:>9}  {:>6}  {:>10}  {:>10}  {:>12}  {:>14}",
                "PARTITION",
                "LEADER",
                "REPLICAS",
                "ISR",
                "START",
                "HIGH-WATERMARK"
            );
            for (p, (start, end)) in info.partitions.iter().zip(&description.offsets) {
                outln!(
                    "{:>9}  {:>6}  {:>10}  {:>10}  {:>12}  {:>14}",
                    p.partition,
                    p.leader,
                    id_list(&p.replicas),
                    id_list(&p.isr),
                    start,
                    end
                );
            }
            outln!("configs:");
            for entry in configs {
                outln!(
                    "  {} = {}  ({})",
                    entry.name,
                    entry.value.unwrap_or_default(),
                    entry.source
                );
            }
        }
        TopicCommand::Delete { name } => {
            within(connect, admin.delete_topic(&name)).await?;
            outln!("deleted topic {name}");
        }
        TopicCommand::AlterConfig { name, set, delete } => {
            let set: BTreeMap<String, String> = set.into_iter().collect();
            within(connect, admin.alter_configs(&name, &set, &delete)).await?;
            outln!("altered configs of topic {name}");
        }
        TopicCommand::AddPartitions { name, total } => {
            within(connect, admin.add_partitions(&name, total))
                .await
                .map_err(|error| naming_topic(error, &name))?;
            outln!("topic {name} now has {total} partitions");
        }
    }
    Ok(())
}
