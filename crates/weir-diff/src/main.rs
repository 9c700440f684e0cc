//! `weir-diff`: the differential suite. It sends the same requests, at exact API versions, to
//! Apache Kafka and to Weir, normalises what legitimately differs (ids, ports, stamped times)
//! and reports SAME or DIFF per scenario. A DIFF that `docs/kafka-differences.md` does not
//! list fails the run, and so does a listed difference that has become SAME (the list must
//! stay true).

mod scenarios;
mod session;
mod setup;
mod wire;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use similar::TextDiff;

use scenarios::{Expect, Scenario};
use session::{Ctx, RunConstants};

/// Compare Weir's answers with Apache Kafka's, request by request.
#[derive(Debug, Parser)]
#[command(name = "weir-diff", version, about, long_about = None)]
struct Args {
    /// The reference broker: Apache Kafka, one node, empty or not (names are unique per run).
    #[arg(long, value_name = "HOST:PORT")]
    kafka: String,
    /// The broker under test.
    #[arg(long, value_name = "HOST:PORT")]
    weir: String,
    /// Run only scenarios whose name contains this text (repeatable).
    #[arg(long, value_name = "TEXT")]
    only: Vec<String>,
    /// Print every scenario's difference, listed ones included.
    #[arg(long)]
    verbose: bool,
    /// Also write the full report (both transcripts' differences) to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also write both brokers' whole transcripts of every differing scenario to the report.
    #[arg(long, requires = "report")]
    transcripts: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

/// How one scenario came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Same,
    /// A difference the list expects.
    Listed,
    /// A difference the list does not have.
    Unexpected,
    /// Listed as a difference but the answers are alike now.
    Stale,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut selected: Vec<Scenario> = scenarios::all()
        .into_iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| s.name.contains(o)))
        .collect();
    if args.list {
        for s in &selected {
            println!("{:<55} {}", s.name, s.about);
        }
        return ExitCode::SUCCESS;
    }
    if selected.is_empty() {
        eprintln!("no scenario matches {:?}", args.only);
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let report = runtime.block_on(run(&args, &mut selected));
    print!("{}", report.console);
    if let Some(path) = &args.report {
        if let Err(e) = std::fs::write(path, &report.full) {
            eprintln!("writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

struct Report {
    console: String,
    full: String,
    failed: bool,
}

async fn run(args: &Args, selected: &mut [Scenario]) -> Report {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64;
    let run = RunConstants {
        prefix: format!("d{}-", &uuid::Uuid::new_v4().simple().to_string()[..6]),
        timestamp_ms: now_ms - 60_000,
    };
    let started = Instant::now();
    let mut console = String::new();
    let mut full = String::new();
    let mut counts = [0usize; 4];
    for scenario in selected.iter() {
        let (kafka, weir) = tokio::join!(
            transcript(&args.kafka, &run, scenario),
            transcript(&args.weir, &run, scenario)
        );
        let same = kafka == weir;
        let verdict = match (same, scenario.expect) {
            (true, Expect::Same) => Verdict::Same,
            (true, _) => Verdict::Stale,
            (false, Expect::Same) => Verdict::Unexpected,
            (false, _) => Verdict::Listed,
        };
        counts[verdict as usize] += 1;
        let line = match (verdict, scenario.expect) {
            (Verdict::Same, _) => format!("SAME  {}\n", scenario.name),
            (Verdict::Listed, Expect::Deliberate(why)) => {
                format!("DIFF  {}  (deliberate: {why})\n", scenario.name)
            }
            (Verdict::Listed, Expect::Pending(why)) => {
                format!("DIFF  {}  (pending: {why})\n", scenario.name)
            }
            (Verdict::Unexpected, _) => format!("DIFF  {}  UNEXPECTED\n", scenario.name),
            _ => format!(
                "SAME  {}  STALE: listed as a difference, remove it from the list\n",
                scenario.name
            ),
        };
        console.push_str(&line);
        full.push_str(&line);
        if !same {
            let diff = TextDiff::from_lines(&kafka, &weir)
                .unified_diff()
                .context_radius(4)
                .header("kafka", "weir")
                .to_string();
            let _ = writeln!(full, "  {}\n{}", scenario.about, indent(&diff));
            if args.transcripts {
                let _ = writeln!(
                    full,
                    "  kafka:\n{}  weir:\n{}",
                    indent(&kafka),
                    indent(&weir)
                );
            }
            if verdict == Verdict::Unexpected || args.verbose {
                let _ = writeln!(console, "  {}\n{}", scenario.about, indent(&diff));
            }
        }
    }
    let [same, listed, unexpected, stale] = counts;
    let summary = format!(
        "\n{} scenarios in {:.1}s: {} SAME, {} DIFF ({listed} listed, {unexpected} unexpected){}\n",
        selected.len(),
        started.elapsed().as_secs_f64(),
        same + stale,
        listed + unexpected,
        if stale > 0 {
            format!(", {stale} listed but SAME")
        } else {
            String::new()
        },
    );
    console.push_str(&summary);
    full.push_str(&summary);
    Report {
        console,
        full,
        failed: unexpected + stale > 0,
    }
}

/// One broker's normalised transcript of `scenario`; a failure is part of it.
async fn transcript(addr: &str, run: &RunConstants, scenario: &Scenario) -> String {
    let mut cx = Ctx::new(addr, run.clone());
    if let Err(e) = (scenario.body)(&mut cx).await {
        cx.note(&format!("scenario failed: {e:#}"));
    }
    cx.transcript()
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}
