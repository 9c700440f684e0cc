//! `weir dev-cluster`: a local cluster of `weir server` processes for trying the cluster out,
//! each a broker and a controller of one metadata quorum, stopped together on Ctrl-C.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use rustix::process::{kill_process, Pid, Signal};
use weir_client::{Admin, ClientConfig};

/// Most nodes a development cluster may have.
const NODES_MAX: u16 = 9;
/// How long the nodes have to stop after SIGTERM before they are killed.
const STOP_DEADLINE: Duration = Duration::from_secs(20);
/// How long the nodes have to start and find each other.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Options of `weir dev-cluster`.
#[derive(Debug, Args)]
#[command(
    about = "Start a local cluster of `weir server` processes (brokers and controllers)",
    long_about = "Start a local cluster: N `weir server` processes on 127.0.0.1, each a broker \
        and a controller of one metadata quorum. Node i's Kafka listener is on BASE-PORT + i - 1 \
        and its controller listener on BASE-PORT + 100 + i - 1; its HTTP gateway (REST API, \
        metrics, console) on HTTP-BASE-PORT + i - 1 (8080 + i - 1 by default, BASE-PORT + 200 \
        + i - 1 when only --base-port is given, so two clusters on different base ports do not \
        meet); its data and log are in \
        DATA-DIR/node-i (server.log) and its process id in DATA-DIR/node-i/pid. A node that \
        exits (kill one to try a failure) is reported and the others go on. Ctrl-C stops every \
        node cleanly. Restarting with the same DATA-DIR resumes the same cluster."
)]
pub struct DevClusterArgs {
    /// Number of nodes (1–9).
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Directory holding one data directory per node.
    #[arg(long, default_value = "./weir-dev-cluster")]
    data_dir: PathBuf,
    /// Kafka port of node 1; node i listens on BASE-PORT + i - 1 [default: 9092].
    #[arg(long)]
    base_port: Option<u16>,
    /// HTTP port of node 1; node i's HTTP gateway listens on HTTP-BASE-PORT + i - 1
    /// [default: 8080, or BASE-PORT + 200 when --base-port is given].
    #[arg(long)]
    http_base_port: Option<u16>,
}

/// Kafka port of node 1 without `--base-port`.
const BASE_PORT: u16 = 9092;
/// HTTP port of node 1 without `--base-port` or `--http-base-port`.
const HTTP_BASE_PORT: u16 = 8080;
/// Where the HTTP ports start above `--base-port` when only that is given (the controller
/// ports start at 100 above it).
const HTTP_PORT_OFFSET: u32 = 200;

impl DevClusterArgs {
    /// Kafka port of node 1.
    fn base_port(&self) -> u16 {
        self.base_port.unwrap_or(BASE_PORT)
    }

    /// HTTP port of node 1: `--http-base-port`, else `--base-port` + 200, else 8080.
    fn http_base_port(&self) -> u32 {
        match (self.http_base_port, self.base_port) {
            (Some(port), _) => u32::from(port),
            (None, Some(base)) => u32::from(base) + HTTP_PORT_OFFSET,
            (None, None) => u32::from(HTTP_BASE_PORT),
        }
    }
}

/// One node of the cluster.
struct Node {
    id: u16,
    kafka: String,
    http: String,
    controller: String,
    dir: PathBuf,
    child: Child,
}

/// Runs the cluster until Ctrl-C (or a node exits); returns the exit code.
pub fn run(args: DevClusterArgs) -> ExitCode {
    match run_cluster(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}

fn run_cluster(args: DevClusterArgs) -> anyhow::Result<()> {
    if args.nodes == 0 || args.nodes > NODES_MAX {
        bail!("--nodes must be between 1 and {NODES_MAX}");
    }
    let base_port = args.base_port();
    let http_base_port = args.http_base_port();
    if http_base_port + u32::from(args.nodes) > u32::from(u16::MAX) {
        bail!(
            "the HTTP ports from {http_base_port} (--http-base-port, or --base-port + {HTTP_PORT_OFFSET}) leave no room for {} nodes' ports",
            args.nodes
        );
    }
    if u32::from(base_port) + 100 + u32::from(args.nodes) > u32::from(u16::MAX) {
        bail!(
            "--base-port {base_port} leaves no room for {} nodes' ports",
            args.nodes
        );
    }
    let exe = std::env::current_exe().context("finding the weir binary")?;
    let address = |offset: u16| format!("127.0.0.1:{}", base_port + offset);
    let quorum: BTreeMap<u16, String> = (1..=args.nodes)
        .map(|id| (id, address(100 + id - 1)))
        .collect();
    let quorum_flag = quorum
        .iter()
        .map(|(id, addr)| format!("{id}@{addr}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut nodes: Vec<Node> = Vec::new();
    for id in 1..=args.nodes {
        let dir = args.data_dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = File::options()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .context("opening the node's log")?;
        let kafka = address(id - 1);
        let controller = quorum[&id].clone();
        let http = format!("127.0.0.1:{}", http_base_port + u32::from(id) - 1);
        let spawned = Command::new(&exe)
            .arg("server")
            .args(["--node-id", &id.to_string()])
            .arg("--data-dir")
            .arg(&dir)
            .args(["--listen", &kafka])
            .args(["--controller-listen", &controller])
            .args(["--controller-quorum", &quorum_flag])
            .args(["--http-listen", &http])
            // Its own process group: Ctrl-C reaches only this command, which stops each node
            // with one SIGTERM (a second signal would make a node exit without a clean stop).
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(error) => {
                stop(&mut nodes);
                return Err(error).context("starting a node");
            }
        };
        std::fs::write(dir.join("pid"), format!("{}\n", child.id()))?;
        nodes.push(Node {
            id,
            kafka,
            http,
            controller,
            dir,
            child,
        });
    }
    println!("NODE  PID      KAFKA            CONTROLLER       HTTP             DATA");
    for node in &nodes {
        println!(
            "{:<4}  {:<7}  {:<15}  {:<15}  {:<15}  {}",
            node.id,
            node.child.id(),
            node.kafka,
            node.controller,
            node.http,
            node.dir.display()
        );
    }
    let bootstrap: Vec<String> = nodes.iter().map(|n| n.kafka.clone()).collect();
    if let Err(error) = wait_until_ready(&mut nodes) {
        stop(&mut nodes);
        return Err(error);
    }
    println!(
        "ready: --brokers {}   (each node's log is server.log in its data directory; Ctrl-C stops them all)",
        bootstrap.join(",")
    );
    let outcome = supervise(&mut nodes);
    stop(&mut nodes);
    outcome
}

/// Waits until every node serves clients and lists every broker of the cluster.
fn wait_until_ready(nodes: &mut [Node]) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let deadline = Instant::now() + START_DEADLINE;
    let count = nodes.len();
    for node in nodes.iter_mut() {
        let mut config = ClientConfig::new(&node.kafka);
        config.client_id = "weir-dev-cluster".into();
        config.request_timeout = Duration::from_secs(2);
        loop {
            let status = runtime.block_on(Admin::new(config.clone()).cluster_status());
            if status.is_ok_and(|s| s.brokers.len() == count) {
                break;
            }
            if let Some(status) = node.child.try_wait()? {
                bail!(
                    "node {} exited during startup ({status}); see {}",
                    node.id,
                    node.dir.join("server.log").display()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "node {} did not serve a cluster of {count} brokers on {} in time; see {}",
                    node.id,
                    node.kafka,
                    node.dir.join("server.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Runs until Ctrl-C or SIGTERM, or until every node has exited. A node that exits on its own
/// (killed to try a failure) is reported and the others go on.
fn supervise(nodes: &mut [Node]) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut poll = tokio::time::interval(Duration::from_millis(500));
        let mut exited = vec![false; nodes.len()];
        loop {
            tokio::select! {
                _ = terminate.recv() => return Ok(()),
                _ = interrupt.recv() => return Ok(()),
                _ = poll.tick() => {
                    for (node, exited) in nodes.iter_mut().zip(exited.iter_mut()) {
                        if *exited {
                            continue;
                        }
                        if let Some(status) = node.child.try_wait()? {
                            eprintln!("node {} exited ({status}); the others go on; see {}", node.id, node.dir.join("server.log").display());
                            *exited = true;
                        }
                    }
                    if exited.iter().all(|e| *e) {
                        bail!("every node has exited");
                    }
                }
            }
        }
    })
}

/// Stops every node: SIGTERM, then SIGKILL for any still running at the deadline.
fn stop(nodes: &mut [Node]) {
    println!("stopping {} node(s)", nodes.len());
    for node in nodes.iter() {
        if let Some(pid) = i32::try_from(node.child.id()).ok().and_then(Pid::from_raw) {
            let _ = kill_process(pid, Signal::TERM);
        }
    }
    let deadline = Instant::now() + STOP_DEADLINE;
    for node in nodes.iter_mut() {
        loop {
            match node.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > deadline => {
                    eprintln!("node {} did not stop in time; killing it", node.id);
                    let _ = node.child.kill();
                    let _ = node.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = std::fs::remove_file(node.dir.join("pid"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(base_port: Option<u16>, http_base_port: Option<u16>) -> DevClusterArgs {
        DevClusterArgs {
            nodes: 3,
            data_dir: PathBuf::from("unused"),
            base_port,
            http_base_port,
        }
    }

    #[test]
    fn the_http_ports_follow_the_base_port_unless_given() {
        assert_eq!(args(None, None).http_base_port(), 8080);
        assert_eq!(args(Some(19092), None).http_base_port(), 19292);
        assert_eq!(args(Some(19092), Some(7000)).http_base_port(), 7000);
        assert_eq!(args(None, Some(7000)).http_base_port(), 7000);
        assert_eq!(args(None, None).base_port(), 9092);
    }
}
