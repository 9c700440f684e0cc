//! `weir metadata query`: read-only SQL over the relational metadata a server keeps in its
//! data directory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use weir_controller::query::{run_query, QueryResult, DATABASE_FILE};

/// The cluster metadata as SQL tables.
#[derive(Debug, Args)]
#[command(after_help = "TABLES:
  brokers (node_id, incarnation_id, epoch, rack)
  broker_listeners (node_id, name, host, port)
  topics (topic_id, name, replication_factor)
  partitions (topic_id, partition_index, leader, leader_epoch, partition_epoch)   leader NULL: none
  replicas (topic_id, partition_index, node_id, position, in_sync, reassignment)   position 0: preferred leader; reassignment: adding, removing or NULL
  topic_configs (topic_id, name, value)
  broker_configs (node_id, name, value)   node_id NULL: the cluster-wide level
  meta (schema_version, applied_count, next_producer_id)

EXAMPLES:
  weir metadata query \"SELECT name, count(*) AS partitions FROM topics JOIN partitions USING (topic_id) GROUP BY name\"
  weir metadata query \"SELECT t.name, p.partition_index, l.host FROM partitions p JOIN topics t USING (topic_id) LEFT JOIN broker_listeners l ON l.node_id = p.leader WHERE EXISTS (SELECT 1 FROM replicas r WHERE r.topic_id = p.topic_id AND r.partition_index = p.partition_index AND NOT r.in_sync)\"   under-replicated partitions with their leader's host
  weir metadata query --data-dir /var/lib/weir \"SELECT t.name, c.name, c.value FROM topic_configs c JOIN topics t USING (topic_id)\"")]
pub struct MetadataArgs {
    #[command(subcommand)]
    command: MetadataCommand,
}

#[derive(Debug, Subcommand)]
enum MetadataCommand {
    /// Run one read-only SQL statement (SELECT or WITH) and print the rows.
    Query(QueryArgs),
}

#[derive(Debug, Args)]
struct QueryArgs {
    /// The statement.
    sql: String,
    /// The server's data directory (the database is DATA_DIR/metadata/metadata.db; the server
    /// may be running).
    #[arg(long, env = "WEIR_DATA_DIR", default_value = "./weir-data")]
    data_dir: PathBuf,
    /// Stop the query after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Print at most this many rows.
    #[arg(long, default_value_t = 10_000)]
    max_rows: usize,
}

/// Runs a metadata command; exit code 1 with one line on stderr when the query fails.
pub fn run(args: MetadataArgs) -> ExitCode {
    let MetadataCommand::Query(query) = args.command;
    let path = query.data_dir.join("metadata").join(DATABASE_FILE);
    let timeout = Duration::from_secs_f64(query.timeout.clamp(0.001, 86_400.0));
    match run_query(&path, &query.sql, timeout, query.max_rows) {
        Ok(result) => {
            out!("{}", table(&result));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(1)
        }
    }
}

/// The result as aligned columns under a header, then the row count.
fn table(result: &QueryResult) -> String {
    let mut widths: Vec<usize> = result.columns.iter().map(|c| c.chars().count()).collect();
    for row in &result.rows {
        for (width, value) in widths.iter_mut().zip(row) {
            *width = (*width).max(value.chars().count());
        }
    }
    let line = |values: &[String]| {
        let cells: Vec<String> = values
            .iter()
            .zip(&widths)
            .map(|(value, width)| format!("{value:<width$}"))
            .collect();
        format!("{}\n", cells.join("  ").trim_end())
    };
    let mut out = line(&result.columns);
    out.push_str(&line(
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    ));
    for row in &result.rows {
        out.push_str(&line(row));
    }
    let more = if result.truncated {
        " (more left out: --max-rows)"
    } else {
        ""
    };
    let noun = if result.rows.len() == 1 {
        "row"
    } else {
        "rows"
    };
    out.push_str(&format!("({} {noun}{more})\n", result.rows.len()));
    out
}
