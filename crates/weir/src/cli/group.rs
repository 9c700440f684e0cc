//! `weir group …`: list, describe (members, committed offsets, lag), delete, reset-offsets.

use clap::{ArgGroup, Args, Subcommand};
use weir_client::{Admin, OffsetReset};

use super::{within, ConnectArgs};

/// Consumer-group administration.
#[derive(Debug, Args)]
#[command(
    after_help = "EXAMPLES:\n  weir group list\n  weir group describe billing\n  weir group reset-offsets billing --topic orders --to-earliest --dry-run\n  weir group reset-offsets billing --topic orders --shift-by -100\n  weir group delete billing"
)]
pub struct GroupArgs {
    #[command(subcommand)]
    command: GroupCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Debug, Subcommand)]
enum GroupCommand {
    /// List groups with their state.
    List,
    /// Show a group's members and, per partition: owner, committed offset, log end, lag.
    Describe {
        /// Group id.
        group: String,
    },
    /// Delete a group that has no members, with its committed offsets.
    Delete {
        /// Group id.
        group: String,
    },
    /// Move a group's committed offsets for a topic (the group must have no members).
    #[command(group(ArgGroup::new("target").required(true).args(["to_earliest", "to_latest", "to_offset", "to_timestamp", "shift_by"])))]
    ResetOffsets {
        /// Group id.
        group: String,
        /// Topic whose partitions are reset (all of them).
        #[arg(long)]
        topic: String,
        /// The first retained offset.
        #[arg(long)]
        to_earliest: bool,
        /// The end of each partition.
        #[arg(long)]
        to_latest: bool,
        /// This offset (kept within each partition's retained range).
        #[arg(long)]
        to_offset: Option<i64>,
        /// The first offset at or after this timestamp (ms since the epoch).
        #[arg(long)]
        to_timestamp: Option<i64>,
        /// The committed offset moved by N (negative: back).
        #[arg(long, allow_negative_numbers = true)]
        shift_by: Option<i64>,
        /// Print the new offsets without committing them.
        #[arg(long)]
        dry_run: bool,
    },
}

fn or_dash(value: Option<i64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Runs a group command.
pub async fn run(args: GroupArgs) -> anyhow::Result<()> {
    let connect = &args.connect;
    let admin = Admin::new(connect.client_config());
    match args.command {
        GroupCommand::List => {
            let groups = within(connect, admin.list_groups()).await?;
            outln!("{:<40}  {:<20}  PROTOCOL-TYPE", "GROUP", "STATE");
            for g in groups {
                outln!("{:<40}  {:<20}  {}", g.group_id, g.state, g.protocol_type);
            }
        }
        GroupCommand::Describe { group } => {
            let d = within(connect, admin.describe_group(&group)).await?;
            if d.state == "Dead" {
                anyhow::bail!("group {group} does not exist");
            }
            outln!(
                "group {}  state {}  protocol {} {}  members {}",
                d.group_id,
                d.state,
                d.protocol_type,
                d.protocol,
                d.members.len()
            );
            for m in &d.members {
                let instance = m.group_instance_id.as_deref().unwrap_or("-");
                outln!(
                    "  member {}  client {}  host {}  instance {}",
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    instance
                );
            }
            outln!(
                "{:<30}  {:>9}  {:>12}  {:>14}  {:>10}  MEMBER",
                "TOPIC",
                "PARTITION",
                "COMMITTED",
                "LOG-END-OFFSET",
                "LAG"
            );
            for p in &d.partitions {
                outln!(
                    "{:<30}  {:>9}  {:>12}  {:>14}  {:>10}  {}",
                    p.topic,
                    p.partition,
                    or_dash(p.committed),
                    p.log_end_offset,
                    or_dash(p.lag),
                    p.member.as_deref().unwrap_or("-")
                );
            }
            let total: i64 = d.partitions.iter().filter_map(|p| p.lag).sum();
            outln!("total lag {total}");
        }
        GroupCommand::Delete { group } => {
            within(connect, admin.delete_group(&group)).await?;
            outln!("deleted group {group}");
        }
        GroupCommand::ResetOffsets {
            group,
            topic,
            to_earliest,
            to_latest,
            to_offset,
            to_timestamp,
            shift_by,
            dry_run,
        } => {
            let reset = match (to_offset, to_timestamp, shift_by) {
                (Some(offset), _, _) => OffsetReset::To(offset),
                (_, Some(ms), _) => OffsetReset::Timestamp(ms),
                (_, _, Some(delta)) => OffsetReset::ShiftBy(delta),
                _ if to_earliest => OffsetReset::Earliest,
                _ => {
                    debug_assert!(to_latest);
                    OffsetReset::Latest
                }
            };
            let changes =
                within(connect, admin.reset_offsets(&group, &topic, reset, dry_run)).await?;
            outln!(
                "{:<30}  {:>9}  {:>12}  {:>12}",
                "TOPIC",
                "PARTITION",
                "CURRENT",
                "NEW"
            );
            for c in &changes {
                outln!(
                    "{:<30}  {:>9}  {:>12}  {:>12}",
                    c.topic,
                    c.partition,
                    or_dash(c.current),
                    c.new
                );
            }
            match dry_run {
                true => outln!("dry run: nothing committed"),
                false => outln!("committed {} offsets for group {group}", changes.len()),
            }
        }
    }
    Ok(())
}
