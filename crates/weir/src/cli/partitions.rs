//! `weir partitions`: move replicas between brokers (reassign, cancel, list the moves in
//! progress) and elect leaders.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde::Deserialize;
use weir_client::{Admin, Election, OngoingReassignment, PartitionInfo, PartitionResult};

use super::{id_list, within, ConnectArgs};

/// How often a waiting `reassign` looks at the moves in progress.
const PROGRESS_POLL: Duration = Duration::from_millis(500);

/// Move replicas between brokers and elect leaders.
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:
  weir partitions reassign orders --partition 0 --replicas 2,3,4
  weir partitions reassign orders --replace 1=4          every partition of orders: broker 1's replica to broker 4
  weir partitions reassign --plan moves.json             Kafka's kafka-reassign-partitions JSON
  weir partitions reassign orders --partition 0 --cancel
  weir partitions reassignments
  weir partitions elect-leaders                          every partition back to its preferred replica
  weir partitions elect-leaders orders --partition 0 --unclean")]
pub struct PartitionsArgs {
    #[command(subcommand)]
    command: PartitionsCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Debug, Subcommand)]
enum PartitionsCommand {
    /// Move partitions to new replicas: the new replicas copy the leader while clients go on,
    /// and the old ones are dropped once every new one is in sync. Waits and shows progress
    /// unless --no-wait.
    Reassign(ReassignArgs),
    /// List the reassignments in progress.
    Reassignments,
    /// Elect leaders: the preferred (first) replica where it is live and in sync, or with
    /// --unclean any live replica of a partition without a leader (acknowledged writes it
    /// lacks are lost).
    ElectLeaders(ElectArgs),
}

#[derive(Debug, Args)]
struct ReassignArgs {
    /// The topic to move (not with --plan).
    topic: Option<String>,
    /// The partitions to move (repeatable); every partition of the topic without it.
    #[arg(short, long = "partition")]
    partitions: Vec<i32>,
    /// The new replicas, preferred leader first: `2,3,4`.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["replace", "plan", "cancel"])]
    replicas: Vec<i32>,
    /// Put broker TO's replica where broker FROM's is, in every partition named: `1=4`.
    #[arg(long, value_name = "FROM=TO", value_parser = parse_replace, conflicts_with_all = ["plan", "cancel"])]
    replace: Option<(i32, i32)>,
    /// A reassignment plan in Kafka's JSON format:
    /// {"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3,4]}]}.
    #[arg(long, conflicts_with_all = ["topic", "cancel"])]
    plan: Option<PathBuf>,
    /// Cancel the moves in progress of the partitions named (back to their old replicas).
    #[arg(long)]
    cancel: bool,
    /// Allow a target with more or fewer replicas than the partition has.
    #[arg(long)]
    allow_replication_factor_change: bool,
    /// Start the moves and return at once.
    #[arg(long)]
    no_wait: bool,
    /// Longest wait for the moves to finish, in seconds (they go on after it).
    #[arg(long, default_value_t = 3600.0)]
    wait_timeout: f64,
}

#[derive(Debug, Args)]
struct ElectArgs {
    /// The topic; every partition of the cluster without it.
    topic: Option<String>,
    /// The partitions (repeatable); every partition of the topic without it.
    #[arg(short, long = "partition", requires = "topic")]
    partitions: Vec<i32>,
    /// An unclean election: any live replica may lead a partition without a leader.
    #[arg(long)]
    unclean: bool,
}

/// Kafka's reassignment JSON.
#[derive(Debug, Deserialize)]
struct Plan {
    partitions: Vec<PlannedMove>,
}

#[derive(Debug, Deserialize)]
struct PlannedMove {
    topic: String,
    partition: i32,
    replicas: Vec<i32>,
}

fn parse_replace(text: &str) -> Result<(i32, i32), String> {
    let parse = |s: &str| {
        s.trim()
            .parse::<i32>()
            .map_err(|_| format!("{s:?} is not a broker id"))
    };
    match text.split_once('=') {
        Some((from, to)) => Ok((parse(from)?, parse(to)?)),
        None => Err(format!("expected FROM=TO, got {text:?}")),
    }
}

/// Runs a partitions command.
pub async fn run(args: PartitionsArgs) -> anyhow::Result<()> {
    let admin = Admin::new(args.connect.client_config());
    match args.command {
        PartitionsCommand::Reassign(reassign) => {
            run_reassign(&admin, &args.connect, reassign).await
        }
        PartitionsCommand::Reassignments => {
            let ongoing = within(&args.connect, admin.list_reassignments(None)).await?;
            if ongoing.is_empty() {
                outln!("no reassignment in progress");
            }
            for move_ in &ongoing {
                outln!("{}", describe_move(move_));
            }
            Ok(())
        }
        PartitionsCommand::ElectLeaders(elect) => run_elect(&admin, &args.connect, elect).await,
    }
}

fn describe_move(m: &OngoingReassignment) -> String {
    format!(
        "{}-{}  replicas {}  adding {}  removing {}",
        m.topic,
        m.partition,
        id_list(&m.replicas),
        id_list(&m.adding),
        id_list(&m.removing)
    )
}

/// The partitions named: the given ones, or every partition of `topic`.
async fn partitions_of(
    admin: &Admin,
    connect: &ConnectArgs,
    topic: &str,
    given: &[i32],
) -> anyhow::Result<Vec<(String, i32, Vec<i32>)>> {
    let info = within(connect, admin.describe_topic(topic)).await?.info;
    let mut named = Vec::new();
    for partition in &info.partitions {
        if given.is_empty() || given.contains(&partition.partition) {
            named.push((
                topic.to_string(),
                partition.partition,
                partition.replicas.clone(),
            ));
        }
    }
    if let Some(missing) = given
        .iter()
        .find(|g| !named.iter().any(|(_, p, _)| p == *g))
    {
        bail!("topic {topic} has no partition {missing}");
    }
    Ok(named)
}

/// The moves `args` asks for: target replicas per partition, or `None` to cancel.
async fn planned_moves(
    admin: &Admin,
    connect: &ConnectArgs,
    args: &ReassignArgs,
) -> anyhow::Result<Vec<(String, i32, Option<Vec<i32>>)>> {
    if let Some(path) = &args.plan {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the plan {}", path.display()))?;
        let plan: Plan = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a reassignment plan", path.display()))?;
        return Ok(plan
            .partitions
            .into_iter()
            .map(|m| (m.topic, m.partition, Some(m.replicas)))
            .collect());
    }
    let Some(topic) = &args.topic else {
        bail!("name a topic, or give --plan");
    };
    let named = partitions_of(admin, connect, topic, &args.partitions).await?;
    if args.cancel {
        return Ok(named.into_iter().map(|(t, p, _)| (t, p, None)).collect());
    }
    if !args.replicas.is_empty() {
        return Ok(named
            .into_iter()
            .map(|(t, p, _)| (t, p, Some(args.replicas.clone())))
            .collect());
    }
    let Some((from, to)) = args.replace else {
        bail!("say where to move: --replicas, --replace FROM=TO, --plan or --cancel");
    };
    Ok(named
        .into_iter()
        .filter(|(_, _, replicas)| replicas.contains(&from))
        .map(|(t, p, replicas)| {
            let target = replicas
                .iter()
                .map(|id| if *id == from { to } else { *id })
                .collect();
            (t, p, Some(target))
        })
        .collect())
}

/// Prints each partition's refusal; the partitions accepted.
fn accepted(results: Vec<PartitionResult>) -> Vec<(String, i32)> {
    let mut ok = Vec::new();
    for r in results {
        match r.result {
            Ok(()) => ok.push((r.topic, r.partition)),
            Err(error) => eprintln!("{}-{}: refused: {error}", r.topic, r.partition),
        }
    }
    ok
}

async fn run_reassign(
    admin: &Admin,
    connect: &ConnectArgs,
    args: ReassignArgs,
) -> anyhow::Result<()> {
    let moves = planned_moves(admin, connect, &args).await?;
    if moves.is_empty() {
        outln!("nothing to move");
        return Ok(());
    }
    let requested = moves.len();
    let results = within(
        connect,
        admin.alter_reassignments(&moves, args.allow_replication_factor_change),
    )
    .await?;
    let started = accepted(results);
    let verb = if args.cancel { "cancelled" } else { "started" };
    outln!("{verb}: {} of {requested} partitions", started.len());
    if started.len() < requested {
        bail!("{} partitions refused (above)", requested - started.len());
    }
    if args.no_wait || args.cancel {
        return Ok(());
    }
    let targets: Vec<Target> = moves
        .into_iter()
        .filter_map(|(topic, partition, replicas)| {
            let key = (topic, partition);
            (started.contains(&key)).then_some((key, replicas.unwrap_or_default()))
        })
        .collect();
    wait_for_moves(
        admin,
        connect,
        &targets,
        Duration::from_secs_f64(args.wait_timeout.max(0.0)),
    )
    .await
}

/// A partition being moved and the replicas it is moving to.
type Target = ((String, i32), Vec<i32>);

/// Shows each partition's move as it progresses (replicas being added, which are in sync)
/// until every partition of `targets` is done, or `timeout`. A move is done when no
/// reassignment of the partition is listed and its metadata shows the target replicas: the
/// brokers asked may apply the controller's images at different moments, so one that has not
/// yet applied the start of a move would otherwise pass for one that applied its end.
async fn wait_for_moves(
    admin: &Admin,
    connect: &ConnectArgs,
    targets: &[Target],
    timeout: Duration,
) -> anyhow::Result<()> {
    let began = Instant::now();
    let partitions: Vec<(String, i32)> = targets.iter().map(|(key, _)| key.clone()).collect();
    let mut shown: BTreeMap<(String, i32), String> = BTreeMap::new();
    loop {
        let ongoing = within(connect, admin.list_reassignments(Some(&partitions))).await?;
        let mut described: BTreeMap<(String, i32), PartitionInfo> = BTreeMap::new();
        for (topic, _) in &partitions {
            if !described.keys().any(|(t, _)| t == topic) {
                let info = within(connect, admin.describe_topic(topic)).await?.info;
                for p in info.partitions {
                    described.insert((topic.clone(), p.partition), p);
                }
            }
        }
        let sizes = copy_progress(admin, connect, &ongoing, &described).await;
        let elapsed = began.elapsed().as_secs_f64();
        let mut moving = 0;
        for (key, target) in targets {
            let (topic, partition) = key;
            let (isr, replicas) = described
                .get(key)
                .map(|p| (p.isr.clone(), p.replicas.clone()))
                .unwrap_or_default();
            let state = match ongoing
                .iter()
                .find(|m| m.topic == *topic && m.partition == *partition)
            {
                Some(m) => {
                    moving += 1;
                    let synced = m.adding.iter().filter(|id| isr.contains(id)).count();
                    let copied = sizes.get(key).map_or_else(String::new, |(copied, total)| {
                        format!(", {:.1} of {:.1} MiB copied", mib(*copied), mib(*total))
                    });
                    format!(
                        "copying to {} ({synced} of {} in sync{copied}; isr {})",
                        id_list(&m.adding),
                        m.adding.len(),
                        id_list(&isr)
                    )
                }
                None if replicas != *target => {
                    moving += 1;
                    format!(
                        "replicas {}, moving to {}",
                        id_list(&replicas),
                        id_list(target)
                    )
                }
                None => format!("done: isr {}", id_list(&isr)),
            };
            if shown.get(key) != Some(&state) {
                outln!("[{elapsed:7.1}s] {topic}-{partition}: {state}");
                shown.insert(key.clone(), state);
            }
        }
        if moving == 0 {
            outln!(
                "reassigned {} partitions in {elapsed:.1} s",
                partitions.len()
            );
            return Ok(());
        }
        if began.elapsed() >= timeout {
            bail!(
                "{moving} partitions still moving after {:.0} s (they go on; follow them with `weir partitions reassignments`)",
                timeout.as_secs_f64()
            );
        }
        tokio::time::sleep(PROGRESS_POLL).await;
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// For each partition being moved: the bytes its slowest new replica holds, and the leader's
/// (DescribeLogDirs). Best effort: a broker that does not answer leaves its partitions out
/// (the move's other progress is still shown).
async fn copy_progress(
    admin: &Admin,
    connect: &ConnectArgs,
    ongoing: &[OngoingReassignment],
    described: &BTreeMap<(String, i32), PartitionInfo>,
) -> BTreeMap<(String, i32), (u64, u64)> {
    let mut asked: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
    for m in ongoing {
        let key = (m.topic.clone(), m.partition);
        let Some(leader) = described.get(&key).map(|p| p.leader) else {
            continue;
        };
        for node in m.adding.iter().chain(std::iter::once(&leader)) {
            asked.entry(*node).or_default().push(key.clone());
        }
    }
    let mut sizes: BTreeMap<i32, BTreeMap<(String, i32), u64>> = BTreeMap::new();
    for (node, partitions) in &asked {
        if let Ok(answer) = within(connect, admin.replica_sizes(*node, partitions)).await {
            sizes.insert(*node, answer);
        }
    }
    let size_on =
        |node: i32, key: &(String, i32)| sizes.get(&node).and_then(|s| s.get(key)).copied();
    ongoing
        .iter()
        .filter_map(|m| {
            let key = (m.topic.clone(), m.partition);
            let leader = described.get(&key)?.leader;
            let total = size_on(leader, &key)?;
            let copied = m
                .adding
                .iter()
                .map(|n| size_on(*n, &key).unwrap_or(0))
                .min()?;
            Some((key, (copied.min(total), total)))
        })
        .collect()
}

async fn run_elect(admin: &Admin, connect: &ConnectArgs, args: ElectArgs) -> anyhow::Result<()> {
    let election = if args.unclean {
        Election::Unclean
    } else {
        Election::Preferred
    };
    let partitions = match &args.topic {
        Some(topic) => Some(
            partitions_of(admin, connect, topic, &args.partitions)
                .await?
                .into_iter()
                .map(|(t, p, _)| (t, p))
                .collect::<Vec<_>>(),
        ),
        None => None,
    };
    let results = within(
        connect,
        admin.elect_leaders(election, partitions.as_deref()),
    )
    .await?;
    let mut elected = 0;
    let mut refused = 0;
    for r in results {
        match r.result {
            Ok(()) => {
                elected += 1;
                outln!("{}-{}: new leader elected", r.topic, r.partition);
            }
            Err(error) if error.is_election_not_needed() => {
                outln!(
                    "{}-{}: already led by the replica asked for",
                    r.topic,
                    r.partition
                );
            }
            Err(error) => {
                refused += 1;
                eprintln!("{}-{}: {error}", r.topic, r.partition);
            }
        }
    }
    outln!("elected {elected} leaders");
    if refused > 0 {
        bail!("{refused} partitions could not get the leader asked for (above)");
    }
    Ok(())
}
