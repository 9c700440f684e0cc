//! The client commands of the `weir` binary: `topic`, `produce`, `consume`, `group`, `cluster`,
//! `partitions`, `user`, `acl`, `bench`.
//! Each exits 0 on success, 1 on a runtime error and 2 on a usage error, with one line on stderr.

/// `println!` for command output: a reader that went away (`weir topic list | head -1`) ends
/// the command quietly with exit code 0, as Unix tools do, instead of a panic.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for command output, as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!($($arg)*))
    };
}

pub mod acl;
pub mod bench;
pub mod cluster;
pub mod command_config;
pub mod consume;
pub mod group;
pub mod metadata;
pub mod partitions;
pub mod produce;
pub mod quota;
pub mod topic;
pub mod txn;
pub mod user;

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use weir_client::{ClientConfig, ClientError};

/// Writes command output to stdout; exits at once if it cannot: 0 when its reader closed it,
/// 1 with the reason on stderr otherwise (a full disk under a redirect).
pub fn write_out(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => {
            eprintln!("error: cannot write the output: {error}");
            std::process::exit(i32::from(EXIT_CODE_RUNTIME));
        }
    }
}

/// Exit code of a runtime failure (unreachable broker, unknown topic, refused request).
const EXIT_CODE_RUNTIME: u8 = 1;

/// Options every client command takes.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Brokers to bootstrap from, HOST:PORT[,HOST:PORT…] (Kafka's tools call it
    /// --bootstrap-server, which is taken too).
    #[arg(
        long,
        visible_alias = "bootstrap-server",
        env = "WEIR_BROKERS",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    pub brokers: String,
    /// Deadline for each request and connection attempt, in seconds.
    #[arg(long, default_value_t = 10.0, global = true)]
    pub timeout: f64,
    /// Kafka client properties for the connections, as Kafka's tools take them:
    /// security.protocol (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL); for SASL sasl.mechanism
    /// (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and the user and password in sasl.jaas.config (or
    /// sasl.username and sasl.password); for TLS ssl.truststore.location (PEM CA certificates)
    /// and, for client certificates, ssl.keystore.location (PEM key and chain).
    #[arg(
        long,
        value_name = "FILE",
        env = "WEIR_COMMAND_CONFIG",
        global = true,
        value_parser = command_config::load
    )]
    pub command_config: Option<command_config::CommandConfig>,
}

/// The commands that take [`ConnectArgs`].
const CLIENT_COMMANDS: &[&str] = &[
    "topic",
    "produce",
    "consume",
    "group",
    "txn",
    "cluster",
    "user",
    "acl",
    "partitions",
    "bench",
];
/// [`ConnectArgs`]' flags, which may also come before a client command's name.
const CONNECT_FLAGS: &[&str] = &["--brokers", "--timeout", "--command-config"];

/// The command line with [`CONNECT_FLAGS`] given before a client command's name
/// moved after it, where the command reads them: `weir --brokers H topic list` is
/// `weir topic --brokers H list`. Any other command line is left as it is, for the parser
/// to judge (`weir --brokers H server` is refused there).
pub fn hoist_connect_flags(args: Vec<OsString>) -> Vec<OsString> {
    let mut command = 1;
    while let Some(arg) = args.get(command).and_then(|a| a.to_str()) {
        let Some(flag) = CONNECT_FLAGS
            .iter()
            .find(|f| arg == **f || arg.strip_prefix(**f).is_some_and(|r| r.starts_with('=')))
        else {
            break;
        };
        // `--brokers H` takes the next argument; `--brokers=H` is one.
        command += if arg == *flag { 2 } else { 1 };
    }
    let is_client_command = args
        .get(command)
        .and_then(|a| a.to_str())
        .is_some_and(|name| CLIENT_COMMANDS.contains(&name));
    if command == 1 || !is_client_command {
        return args;
    }
    let mut hoisted = Vec::with_capacity(args.len());
    hoisted.push(args[0].clone());
    hoisted.push(args[command].clone());
    hoisted.extend_from_slice(&args[1..command]);
    hoisted.extend_from_slice(&args[command + 1..]);
    hoisted
}

impl ConnectArgs {
    /// The client config these options describe.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(&self.brokers);
        config.client_id = "weir-cli".into();
        config.request_timeout = self.timeout();
        if let Some(command_config) = &self.command_config {
            config.security = command_config.security.clone();
        }
        config
    }

    /// `--timeout` as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout.max(0.001))
    }
}

/// Runs a client command on a fresh runtime and turns its outcome into an exit code.
pub fn run<F>(command: F) -> ExitCode
where
    F: Future<Output = anyhow::Result<()>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_CODE_RUNTIME);
        }
    };
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", one_line(&error));
            ExitCode::from(EXIT_CODE_RUNTIME)
        }
    }
}

fn one_line(error: &anyhow::Error) -> String {
    match error.downcast_ref::<ClientError>() {
        Some(ClientError::Unreachable(address)) => format!(
            "cannot reach any broker at {address} (is `weir server` running? see --brokers)"
        ),
        _ => format!("{error:#}").replace('\n', " "),
    }
}

/// Runs `work` with the command's overall deadline.
pub async fn within<T>(
    connect: &ConnectArgs,
    work: impl Future<Output = Result<T, ClientError>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(connect.timeout(), work).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(anyhow::anyhow!(
            "timed out after {} s talking to {}",
            connect.timeout,
            connect.brokers
        )),
    }
}

/// Broker ids as `1,2,3`, as the command output lists replicas and ISRs.
pub fn id_list(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// Parses `key=value`.
pub fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

/// True when stdout is a terminal (progress bars only then).
pub fn stdout_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hoisted(line: &str) -> String {
        let args = line.split(' ').map(OsString::from).collect();
        hoist_connect_flags(args)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn connect_flags_before_a_client_command_move_after_its_name() {
        assert_eq!(
            hoisted("weir --brokers h:1 topic list"),
            "weir topic --brokers h:1 list"
        );
        assert_eq!(
            hoisted("weir --timeout=3 --brokers h:1 group describe g"),
            "weir group --timeout=3 --brokers h:1 describe g"
        );
        for unchanged in [
            "weir topic list --brokers h:1",
            "weir --brokers h:1 server",
            "weir --brokers",
            "weir --brokers h:1",
            "weir --version",
        ] {
            assert_eq!(hoisted(unchanged), unchanged);
        }
    }
}
