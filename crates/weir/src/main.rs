//! The `weir` binary: `weir server` runs a broker; further subcommands are the command line.

mod data_dir;
mod server;
mod settings;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Weir: a Kafka-compatible commit-log message broker in one binary.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker (a single-node cluster) with embedded defaults.
    Server(server::ServerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Server(args) => server::run(args),
    }
}
