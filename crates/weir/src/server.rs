//! `weir server`: starts a node (a single-node broker, or a broker and/or controller of a
//! cluster) and runs it until SIGTERM or SIGINT.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use tokio::net::TcpListener;
use tokio::sync::watch;
use weir_broker::broker::PLAINTEXT_LISTENER;
use weir_broker::listeners::ListenerConfig;
use weir_broker::{
    connection_limits, BoundListener, Broker, BrokerConfig, BrokerIdentity, PartitionRegistry,
};
use weir_controller::election::UncleanDefaults;
use weir_controller::query::DATABASE_FILE;
use weir_controller::{
    Controller, ControllerSettings, LocalControl, QuorumConfig, QuorumTls, RaftQuorum,
};
use weir_gateway::Gateway;
use weir_log::SystemClock;
use weir_metadata::BrokerListener;
use weir_sasl::ScramHash;
use weir_storage::{FileCache, FsStorage, Storage};
use weir_tls::{ClientTls, ServerTls};

use crate::data_dir::{quorum_cluster_id, DataDir};
use crate::node_view::ServerNode;
use crate::settings;

/// Time allowed from the first signal to exit before the process gives up on a clean stop.
const SHUTDOWN_DEADLINE_MS: u64 = 10_000;
/// Exit code of a startup failure (bad configuration, data directory in use, port taken).
const EXIT_CODE_STARTUP: u8 = 2;
/// Exit code when a second signal interrupts the clean shutdown.
const EXIT_CODE_INTERRUPTED: i32 = 130;
/// The controller address a quorum of one records for itself: it has no peers to reach it.
const LOCAL_CONTROLLER: &str = "local";

/// Options of `weir server`.
#[derive(Debug, Args)]
#[command(
    about = "Run a broker (a single-node cluster) with embedded defaults, or a node of a cluster",
    long_about = "Run a Weir broker: a single-node cluster that any Kafka client can use, or, with \
        --controller-quorum, a node of a cluster (a broker and a controller of its Raft metadata quorum).\n\n\
        With no options it keeps its data in ./weir-data and listens for Kafka clients on 127.0.0.1:9092.\n\
        Settings come from flags, then WEIR_* environment variables, then the --config TOML file, then defaults.\n\
        On SIGTERM or SIGINT it stops accepting, answers waiting requests, fsyncs and exits 0; a second signal exits at once.",
    after_long_help = settings::properties_help()
)]
pub struct ServerArgs {
    /// Directory for logs and metadata; created if missing, locked while running.
    #[arg(long, env = "WEIR_DATA_DIR", default_value = "./weir-data")]
    data_dir: PathBuf,
    /// A Kafka listener, NAME://HOST:PORT (HOST:PORT alone is PLAINTEXT://HOST:PORT); repeat
    /// it, or separate with commas, for several. Given, it replaces the `listeners` setting
    /// (default PLAINTEXT://127.0.0.1:9092). Port 0 picks a free port. A name other than
    /// PLAINTEXT or SSL needs its protocol in listener.security.protocol.map.
    #[arg(
        long,
        env = "WEIR_LISTEN",
        value_delimiter = ',',
        value_name = "[NAME://]HOST:PORT"
    )]
    listen: Vec<String>,
    /// What clients are told to connect to for a listener, NAME://HOST:PORT (HOST:PORT alone
    /// is the PLAINTEXT listener's); repeat it for several. Replaces `advertised.listeners`. A
    /// listener not named advertises the address it bound; one bound to a wildcard host such
    /// as 0.0.0.0 must be named.
    #[arg(
        long,
        env = "WEIR_ADVERTISE",
        value_delimiter = ',',
        value_name = "[NAME://]HOST:PORT"
    )]
    advertise: Vec<String>,
    /// This broker's node id.
    #[arg(long, env = "WEIR_NODE_ID", default_value_t = 1)]
    node_id: i32,
    /// The controllers of the metadata quorum, ID@HOST:PORT,… (each a node's controller
    /// listener); every node of the cluster is given the same list. A node whose id is not in
    /// it is a broker-only node: it follows the quorum as an observer (give it
    /// --controller-listen) and can join a running cluster. Without it the server is a cluster
    /// of one (a quorum of one).
    #[arg(long, env = "WEIR_CONTROLLER_QUORUM")]
    controller_quorum: Option<String>,
    /// Address this node's controller listens on for the other controllers; defaults to its
    /// own entry in --controller-quorum (required for a broker-only node).
    #[arg(long, env = "WEIR_CONTROLLER_LISTEN", requires = "controller_quorum")]
    controller_listen: Option<String>,
    /// What this node runs, as Kafka's process.roles: `broker,controller` (the default for a
    /// node in --controller-quorum), `controller` (a dedicated controller: a voter of the
    /// metadata quorum with no Kafka listener and no partitions), or `broker` (what a node not
    /// in --controller-quorum is).
    #[arg(long, env = "WEIR_PROCESS_ROLES", value_parser = parse_roles, requires = "controller_quorum")]
    process_roles: Option<Roles>,
    /// Address of the HTTP gateway: the REST API, /metrics, /health/live and /health/ready,
    /// and the web console at /. Defaults to 127.0.0.1:8080, and then, if that port is taken,
    /// the node runs without HTTP (with a warning); an address given here that cannot be bound
    /// is a startup error. `off` runs no HTTP.
    #[arg(long, env = "WEIR_HTTP_LISTEN")]
    http_listen: Option<String>,
    /// Paths of the HTTP gateway served without credentials when the authorizer is on
    /// (`authorizer.class.name`); every other path then needs HTTP Basic credentials of a
    /// SCRAM user, and the ACLs that user has. `none` leaves none open.
    #[arg(
        long,
        env = "WEIR_HTTP_OPEN",
        value_delimiter = ',',
        default_value = "/health/live,/health/ready,/metrics",
        value_name = "PATH,..."
    )]
    http_open: Vec<String>,
    /// A SCRAM credential to create when the cluster has none for that user and mechanism
    /// (so the first start makes it and later starts keep what the cluster holds), in
    /// Kafka's format: 'SCRAM-SHA-256=[name=admin,password=admin-secret]', optionally with
    /// iterations=N (4096 to 16384, default 8192). Repeat it for several.
    #[arg(long, env = "WEIR_ADD_SCRAM", value_name = "MECHANISM=[name=USER,password=PASSWORD]", value_parser = parse_add_scram)]
    add_scram: Vec<AddScram>,
    /// TOML file of broker settings with Kafka's names (see the list below).
    #[arg(long, env = "WEIR_CONFIG")]
    config: Option<PathBuf>,
    /// Log filter: error, warn, info, debug, trace, or a tracing directive such as
    /// `weir=debug`. Defaults to RUST_LOG, else info.
    #[arg(long)]
    log_level: Option<String>,
}

/// One `--add-scram` credential.
#[derive(Clone)]
struct AddScram {
    hash: ScramHash,
    user: String,
    password: String,
    iterations: u32,
}

impl std::fmt::Debug for AddScram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} for {}", self.hash.mechanism().name(), self.user)
    }
}

/// Iterations of a credential `--add-scram` makes without `iterations=`.
const ADD_SCRAM_ITERATIONS: u32 = 8192;

/// Parses Kafka's `MECHANISM=[name=USER,password=PASSWORD,iterations=N]` (a value may be
/// double-quoted to hold commas). Errors never quote the password.
fn parse_add_scram(text: &str) -> Result<AddScram, String> {
    let (mechanism, body) = text
        .split_once('=')
        .ok_or("expected MECHANISM=[name=USER,password=PASSWORD]")?;
    let hash = weir_sasl::Mechanism::parse(mechanism)
        .and_then(ScramHash::of)
        .ok_or_else(|| format!("{mechanism:?} is not SCRAM-SHA-256 or SCRAM-SHA-512"))?;
    let body = body
        .trim()
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .ok_or("the credential must be in brackets: [name=USER,password=PASSWORD]")?;
    let mut fields = Vec::new();
    let (mut field, mut quoted) = (String::new(), false);
    for c in body.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    let (mut user, mut password, mut iterations) = (None, None, ADD_SCRAM_ITERATIONS as i32);
    for field in fields {
        match field.split_once('=') {
            Some(("name", value)) if !value.is_empty() => user = Some(value.to_string()),
            Some(("password", value)) if !value.is_empty() => password = Some(value.to_string()),
            Some(("iterations", value)) => {
                iterations = value
                    .parse()
                    .map_err(|_| format!("iterations {value:?} is not a number"))?;
            }
            Some((key, _)) if key == "password" || key == "name" => {
                return Err(format!("{key} must not be empty"))
            }
            Some((key, _)) => {
                return Err(format!(
                    "unknown field {key:?} (use name, password, iterations)"
                ))
            }
            None => return Err("expected name=USER,password=PASSWORD".into()),
        }
    }
    let iterations = weir_sasl::check_iterations(hash, iterations).map_err(|e| e.0)?;
    Ok(AddScram {
        hash,
        user: user.ok_or("no name=USER")?,
        password: password.ok_or("no password=PASSWORD")?,
        iterations,
    })
}

/// The roles a node runs (`--process-roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Roles {
    broker: bool,
    controller: bool,
}

fn parse_roles(text: &str) -> Result<Roles, String> {
    let mut roles = Roles {
        broker: false,
        controller: false,
    };
    for role in text.split(',').map(str::trim) {
        match role {
            "broker" => roles.broker = true,
            "controller" => roles.controller = true,
            other => {
                return Err(format!(
                    "unknown role `{other}`: use broker, controller or broker,controller"
                ))
            }
        }
    }
    Ok(roles)
}

/// The roles of node `node_id`: what `--process-roles` asks, checked against whether it is a
/// voter of the quorum, else what being a voter or not implies.
fn node_roles(asked: Option<Roles>, node_id: i32, voter: bool) -> anyhow::Result<Roles> {
    let Some(roles) = asked else {
        return Ok(Roles {
            broker: true,
            controller: voter,
        });
    };
    if roles.controller && !voter {
        bail!("node {node_id} runs a controller only as a voter of the metadata quorum: add it to --controller-quorum, or run it with --process-roles broker");
    }
    if voter && !roles.controller {
        bail!("node {node_id} is in --controller-quorum, so it is a controller: use --process-roles controller or broker,controller");
    }
    Ok(roles)
}

/// Runs the server; returns the process exit code.
pub fn run(args: ServerArgs) -> ExitCode {
    init_tracing(args.log_level.as_deref());
    log_panics();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return ExitCode::from(EXIT_CODE_STARTUP);
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::from(EXIT_CODE_STARTUP)
        }
    }
}

fn init_tracing(level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let mut directives = level
        .map(str::to_string)
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".to_string());
    // Raft's own step-by-step lines are for debugging it; the quorum logs what an operator
    // needs (leader changes, membership, snapshots) itself.
    if !directives.contains("openraft") {
        directives.push_str(",openraft=warn");
    }
    let filter =
        EnvFilter::try_new(&directives).unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

/// Logs a panic before the process aborts (the hook `main` installed): a panic means a bug,
/// and a partition whose append stopped half-way must never serve writes again, so the process
/// stops and the next start recovers the logs as after a crash.
fn log_panics() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(target: "weir::server", "panic: {info}; stopping, the next start recovers as after a crash");
        default_hook(info);
    }));
}

fn split_host_port(address: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) = address
        .rsplit_once(':')
        .with_context(|| format!("{address:?} is not HOST:PORT"))?;
    let port = port
        .parse()
        .with_context(|| format!("{address:?} has no valid port"))?;
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port,
    ))
}

/// `--listen` and `--advertise` as the settings they replace.
fn listener_flags(args: &ServerArgs) -> Vec<(&'static str, String)> {
    let named = |entries: &[String]| {
        entries
            .iter()
            .map(|entry| match entry.contains("://") {
                true => entry.clone(),
                false => format!("{PLAINTEXT_LISTENER}://{entry}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut flags = Vec::new();
    if !args.listen.is_empty() {
        flags.push(("listeners", named(&args.listen)));
    }
    if !args.advertise.is_empty() {
        flags.push(("advertised.listeners", named(&args.advertise)));
    }
    flags
}

async fn serve(args: ServerArgs) -> anyhow::Result<()> {
    let mut config = settings::load(args.config.as_deref(), &listener_flags(&args))?;
    let voters = match &args.controller_quorum {
        Some(spec) => parse_quorum(spec)?,
        None => BTreeMap::from([(args.node_id, LOCAL_CONTROLLER.to_string())]),
    };
    let voter = voters.contains_key(&args.node_id);
    let roles = node_roles(args.process_roles, args.node_id, voter)?;
    if !voter && args.controller_listen.is_none() && config.listeners.controller.is_empty() {
        bail!("node {} is not in --controller-quorum, so it runs as a broker-only node and needs --controller-listen HOST:PORT (or a controller listener in listeners and controller.listener.names), where the quorum's leader sends it the metadata log", args.node_id);
    }
    let cluster_id = (voters.len() > 1 || !voter).then(|| quorum_cluster_id(&voters));
    let data_dir = DataDir::open(&args.data_dir, args.node_id, cluster_id.as_deref())?;
    let controller_listeners = &config.listeners.controller;
    if !controller_listeners.is_empty() && args.controller_quorum.is_none() {
        bail!("controller.listener.names names a controller listener, but a server without --controller-quorum is a quorum of one and listens for no other controller");
    }
    let controller_address = args
        .controller_listen
        .clone()
        .or_else(|| controller_listeners.first().map(|l| l.bind_address()))
        .or_else(|| voters.get(&args.node_id).cloned());
    let controller_listener = match (&args.controller_quorum, &controller_address) {
        (Some(_), Some(address)) => {
            let address = address.clone();
            let listener = TcpListener::bind(&address)
                .await
                .with_context(|| format!("cannot listen for controllers on {address}"))?;
            Some(listener)
        }
        _ => None,
    };
    let kafka_listeners = match roles.broker {
        true => Some(bind_kafka_listeners(&config).await?),
        false => None,
    };
    let http_listener = match roles.broker {
        true => {
            bind_http_listener(
                args.http_listen.as_deref(),
                config.socket_listen_backlog_size,
            )
            .await?
        }
        false => None,
    };

    let metadata_dir = data_dir.path.join("metadata");
    std::fs::create_dir_all(&metadata_dir)?;
    let storage: Arc<dyn Storage> = Arc::new(FsStorage);
    let single_node = voters.len() == 1 && voter;
    let quorum_config = QuorumConfig {
        node_id: args.node_id,
        voters,
        dir: metadata_dir.join("quorum"),
        tls: controller_tls(controller_listeners.first())?,
    };
    let quorum = Arc::new(
        RaftQuorum::open(storage.clone(), quorum_config, controller_listener)
            .await
            .context("opening the metadata quorum")?,
    );
    if let (false, Some(address)) = (voter, &controller_address) {
        quorum
            .join_as_observer(address)
            .await
            .context("joining the metadata quorum as a broker-only node")?;
    }
    // The partitions a broker can keep open, which the active controller holds topics to.
    let budget = FileBudget::from_limit(raise_open_files_limit(), config.max_connections);
    let settings = ControllerSettings {
        session_timeout: Duration::from_millis(config.broker_session_timeout_ms),
        leader_rebalance: config
            .auto_leader_rebalance_enable
            .then(|| Duration::from_secs(config.leader_imbalance_check_interval_seconds)),
        unclean: UncleanDefaults {
            node_id: Some(args.node_id),
            configured: config.static_unclean_leader_election_enable(),
        },
        partitions_max: budget.partitions,
    };
    let controller = Arc::new(Controller::new(quorum.clone(), settings));
    quorum.serve_control(controller.clone());
    let leases = controller.watch_leases();
    let legacy_log = metadata_dir.join("metadata.log");
    if single_node {
        controller
            .migrate_single_node_log(storage, &legacy_log, args.node_id)
            .await
            .context("moving the metadata log of an earlier version into the quorum")?;
    } else if legacy_log.exists() {
        bail!("{} holds the metadata of a single-node server; start it once without --controller-quorum to move it into its quorum first", legacy_log.display());
    }
    // The relational copy is for `weir metadata query`; without it the broker runs as well.
    let database = metadata_dir.join(DATABASE_FILE);
    if let Err(error) = tokio::task::block_in_place(|| quorum.keep_relational(&database)) {
        tracing::error!(target: "weir::server", path = %database.display(), %error, "relational metadata unavailable; `weir metadata query` will not work until it opens");
    }
    let Some(kafka_listeners) = kafka_listeners else {
        return run_controller_only(&args, controller_address, data_dir, quorum, leases).await;
    };
    config.max_connections = budget.connections;
    let limits = connection_limits(&config)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let shutdown_rx_for_http = shutdown_rx.clone();
    let registry = PartitionRegistry::new(
        data_dir.path.join("logs"),
        FileCache::new(Arc::new(FsStorage), budget.cached_files),
        Arc::new(SystemClock),
        config.clone(),
        args.node_id,
    );
    let inter_broker = config
        .listeners
        .inter_broker
        .load()
        .map_err(|e| anyhow::anyhow!(e))?;
    if let Some(files) = &inter_broker.tls_files {
        // Renewed files are used by the connections to the other brokers made from then on.
        tokio::spawn(files.clone().watch(
            format!("inter-broker ({})", inter_broker.listener),
            weir_tls::RELOAD_CHECK_INTERVAL,
            shutdown_rx.clone(),
        ));
    }
    let identity = BrokerIdentity {
        node_id: args.node_id,
        cluster_id: data_dir.cluster_id.clone(),
        listeners: kafka_listeners.advertised.clone(),
        inter_broker: inter_broker.clone(),
    };
    let (bound, advertised) = kafka_listeners.inter_broker(&inter_broker.listener);
    let control = Arc::new(LocalControl::new(controller));
    let broker = tokio::task::block_in_place(|| {
        Broker::new(config, identity, control, registry, shutdown_rx)
    });
    let (serving_tx, serving_rx) = watch::channel(false);
    let http_address = match http_listener {
        Some(http) => {
            let address = http.local_addr()?;
            // Over TLS the broker's certificate names the advertised host, not the bound one.
            let bootstrap = match (&inter_broker.security.tls, bound.ip().is_unspecified()) {
                (Some(_), _) => advertised.clone(),
                (None, true) => format!("127.0.0.1:{}", bound.port()),
                (None, false) => bound.to_string(),
            };
            let node = Arc::new(ServerNode {
                broker: broker.clone(),
                quorum: quorum.clone(),
            });
            let open: Vec<String> = args
                .http_open
                .iter()
                .map(|path| path.trim().to_string())
                .filter(|path| !path.is_empty() && path != "none")
                .collect();
            let gateway = Gateway::new(node, &bootstrap, &inter_broker.security, serving_rx, open);
            tokio::spawn(gateway.serve(http, shutdown_rx_for_http.clone()));
            tracing::info!(target: "weir::server", http = %address, "HTTP gateway listening: REST API, /metrics, /health, console at /");
            address.to_string()
        }
        None => "off".to_string(),
    };
    broker
        .join_cluster()
        .await
        .context("registering the broker with the controller")?;
    if !args.add_scram.is_empty() {
        let wanted = args
            .add_scram
            .iter()
            .map(|a| (a.user.clone(), a.hash, a.password.clone(), a.iterations))
            .collect();
        let added = weir_broker::add_missing_scram_credentials(&broker, wanted)
            .await
            .context("adding the --add-scram credentials")?;
        for credential in added {
            tracing::info!(target: "weir::server", credential, "SCRAM credential added (--add-scram)");
        }
    }
    // Listening for SIGTERM and SIGINT before `weir ready`: a signal that follows the line at
    // once must find the handler installed, or it ends the process uncleanly.
    let mut signals = ShutdownSignals::listen()?;
    tracing::info!(
        target: "weir::server",
        listen = %bound,
        http = %http_address,
        advertised = %advertised,
        listeners = %kafka_listeners.described,
        data_dir = %data_dir.path.display(),
        node_id = args.node_id,
        cluster_id = %data_dir.cluster_id,
        "weir ready"
    );
    let maintenance = tokio::spawn(broker.clone().run_log_maintenance());
    let coordinators = tokio::spawn(broker.clone().run_coordinators());
    let cleaner = tokio::spawn(broker.clone().run_log_cleaner());
    let isr_checks = tokio::spawn(broker.clone().run_isr_checks());
    let server = tokio::spawn(weir_broker::serve(
        broker.clone(),
        kafka_listeners.bound,
        limits,
    ));
    serving_tx.send_replace(true);
    signals.next().await;
    tracing::info!(target: "weir::server", "shutting down: moving leaderships to other replicas");
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(SHUTDOWN_DEADLINE_MS));
        tracing::error!(target: "weir::server", "clean shutdown took longer than {SHUTDOWN_DEADLINE_MS} ms; exiting");
        std::process::exit(1);
    });
    tokio::spawn(async move {
        signals.next().await;
        tracing::warn!(target: "weir::server", "second signal: exiting without a clean shutdown");
        std::process::exit(EXIT_CODE_INTERRUPTED);
    });
    broker.controlled_shutdown().await;
    tracing::info!(target: "weir::server", "shutting down: no new connections; finishing in-flight requests");
    shutdown_tx.send_replace(true);
    let _ = server.await;
    let _ = isr_checks.await;
    leases.abort();
    let _ = maintenance.await;
    let _ = coordinators.await;
    let _ = cleaner.await;
    tokio::task::block_in_place(|| broker.partitions().close_all());
    quorum.shutdown().await;
    tracing::info!(target: "weir::server", "stopped cleanly");
    drop(data_dir);
    Ok(())
}

/// Listens on `address` (host:port, resolved; the first address that binds) with a listen
/// backlog of `backlog` connections (`socket.listen.backlog.size`; the kernel caps it).
async fn listen(address: &str, backlog: u32) -> std::io::Result<TcpListener> {
    let mut last_error = None;
    for addr in tokio::net::lookup_host(address).await? {
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(backlog)) {
            Ok(listener) => return Ok(listener),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!("{address} resolves to no address"),
        )
    }))
}

/// TLS of the controller port when the controller listener speaks SSL: its keystore shown
/// both ways, its truststore vouching for the peers (each must show a certificate).
fn controller_tls(listener: Option<&ListenerConfig>) -> anyhow::Result<Option<QuorumTls>> {
    let Some((name, settings)) = listener.and_then(|l| Some((&l.name, l.tls.as_ref()?))) else {
        return Ok(None);
    };
    let refused = |e: weir_tls::TlsError| anyhow::anyhow!("controller listener {name}: {e}");
    let truststore = settings.truststore.as_deref().ok_or_else(|| {
        anyhow::anyhow!("controller listener {name} speaks SSL but has no ssl.truststore.location")
    })?;
    Ok(Some(QuorumTls {
        server: ServerTls::load(settings.clone()).map_err(refused)?,
        client: ClientTls::load(truststore, Some(&settings.keystore)).map_err(refused)?,
    }))
}

/// The Kafka listeners, bound.
struct KafkaListeners {
    /// Each listener, ready to serve.
    bound: Vec<BoundListener>,
    /// Each listener as registered: its name and the address clients are told.
    advertised: Vec<BrokerListener>,
    /// The address each bound, by listener name.
    addresses: BTreeMap<String, SocketAddr>,
    /// `NAME://HOST:PORT,…` as advertised, for the ready line.
    described: String,
}

impl KafkaListeners {
    /// The address the listener `name` bound and the one it advertises.
    fn inter_broker(&self, name: &str) -> (SocketAddr, String) {
        let bound = self.addresses[name];
        let advertised = self
            .advertised
            .iter()
            .find(|l| l.name == name)
            .map_or_else(String::new, |l| format!("{}:{}", l.host, l.port));
        (bound, advertised)
    }
}

/// Binds every Kafka listener and loads the TLS of the SSL ones; a port taken or a
/// certificate that cannot serve stops the start with the listener named.
async fn bind_kafka_listeners(config: &BrokerConfig) -> anyhow::Result<KafkaListeners> {
    let mut listeners = KafkaListeners {
        bound: Vec::new(),
        advertised: Vec::new(),
        addresses: BTreeMap::new(),
        described: String::new(),
    };
    for listener in &config.listeners.kafka {
        let name = &listener.name;
        let address = listener.bind_address();
        let tls = match &listener.tls {
            Some(settings) => Some(
                ServerTls::load(settings.clone())
                    .map_err(|e| anyhow::anyhow!("listener {name}: {e}"))?,
            ),
            None => None,
        };
        let socket = listen(&address, config.socket_listen_backlog_size)
            .await
            .with_context(|| format!("cannot listen on {address} (listener {name})"))?;
        let bound: SocketAddr = socket.local_addr()?;
        let (host, port) = listener
            .advertised
            .clone()
            .unwrap_or_else(|| (bound.ip().to_string(), bound.port()));
        if !listeners.described.is_empty() {
            listeners.described.push(',');
        }
        listeners
            .described
            .push_str(&format!("{name}://{host}:{port}"));
        tracing::info!(target: "weir::server", listener = %name, protocol = listener.protocol.name(), %bound, advertised = %format!("{host}:{port}"), "listening for Kafka clients");
        listeners.advertised.push(BrokerListener {
            name: name.clone(),
            host,
            port,
        });
        listeners.addresses.insert(name.clone(), bound);
        listeners.bound.push(BoundListener {
            name: name.as_str().into(),
            socket,
            tls,
            sasl: listener.sasl.as_deref().map(Into::into),
        });
    }
    Ok(listeners)
}

/// The HTTP gateway's default address.
const HTTP_LISTEN_DEFAULT: &str = "127.0.0.1:8080";

/// Binds the HTTP gateway's listener: `asked` must bind (a startup error otherwise) unless it
/// is `off`; without it the default is tried and, when taken, the node runs without HTTP.
async fn bind_http_listener(
    asked: Option<&str>,
    backlog: u32,
) -> anyhow::Result<Option<TcpListener>> {
    match asked {
        Some("off") => Ok(None),
        Some(address) => listen(address, backlog)
            .await
            .map(Some)
            .with_context(|| format!("cannot listen for HTTP on {address} (--http-listen)")),
        None => match listen(HTTP_LISTEN_DEFAULT, backlog).await {
            Ok(listener) => Ok(Some(listener)),
            Err(error) => {
                tracing::warn!(target: "weir::server", address = HTTP_LISTEN_DEFAULT, %error, "running without HTTP: the default HTTP address is not available (give --http-listen HOST:PORT, or --http-listen off)");
                Ok(None)
            }
        },
    }
}

/// A dedicated controller: votes in the metadata quorum, decides when it leads (brokers reach
/// it through their own controllers, which forward), and keeps the relational copy, until a
/// signal stops it.
async fn run_controller_only(
    args: &ServerArgs,
    controller_address: Option<String>,
    data_dir: DataDir,
    quorum: Arc<RaftQuorum>,
    leases: tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    let mut signals = ShutdownSignals::listen()?;
    tracing::info!(
        target: "weir::server",
        controller_listen = controller_address.as_deref().unwrap_or(""),
        data_dir = %data_dir.path.display(),
        node_id = args.node_id,
        cluster_id = %data_dir.cluster_id,
        roles = "controller",
        "weir ready"
    );
    signals.next().await;
    tracing::info!(target: "weir::server", "shutting down the controller");
    leases.abort();
    quorum.shutdown().await;
    tracing::info!(target: "weir::server", "stopped cleanly");
    drop(data_dir);
    Ok(())
}

/// Parses `--controller-quorum`: `ID@HOST:PORT` entries, comma-separated, distinct ids. A
/// `node_id` not among them is a broker-only node.
fn parse_quorum(spec: &str) -> anyhow::Result<BTreeMap<i32, String>> {
    let mut voters = BTreeMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((id, address)) = entry.split_once('@') else {
            bail!("--controller-quorum entry {entry:?} is not ID@HOST:PORT");
        };
        let id: i32 = id.parse().ok().filter(|id| *id >= 0).with_context(|| {
            format!("--controller-quorum entry {entry:?}: {id:?} is not a node id")
        })?;
        split_host_port(address).with_context(|| format!("--controller-quorum entry {entry:?}"))?;
        if voters.insert(id, address.to_string()).is_some() {
            bail!("--controller-quorum names node {id} twice");
        }
    }
    if voters.is_empty() {
        bail!("--controller-quorum names no controller");
    }
    Ok(voters)
}

/// Files kept for the metadata log, the data directory lock, listeners and the rest.
const OPEN_FILES_RESERVED: u64 = 256;
/// Files each partition keeps open: the active segment's log, offset index and time index.
const OPEN_FILES_PER_PARTITION: u64 = 3;
/// Most files of inactive segments kept open for reads (fewer on a low open-file limit).
const CACHED_FILES_MAX: u64 = 1024;

/// How the open-file limit is shared, so that neither connections nor topics nor reads of old
/// segments can exhaust it (an exhausted limit would fail a segment roll).
struct FileBudget {
    /// Inactive-segment files cached open.
    cached_files: usize,
    /// Client connections (`max.connections`, lowered to fit).
    connections: u32,
    /// Partitions the cluster may hold.
    partitions: usize,
}

impl FileBudget {
    fn from_limit(open_files_max: u64, max_connections: u32) -> FileBudget {
        let usable = open_files_max.saturating_sub(OPEN_FILES_RESERVED);
        let cached_files = CACHED_FILES_MAX.min(usable / 8).max(1);
        let connections = u64::from(max_connections)
            .min(usable.saturating_sub(cached_files) / 2)
            .max(1);
        let partitions =
            (usable.saturating_sub(cached_files + connections) / OPEN_FILES_PER_PARTITION).max(1);
        if connections < u64::from(max_connections) {
            tracing::warn!(target: "weir::server", open_files_max, max_connections, lowered_to = connections, "max.connections lowered to fit the open-file limit; raise `ulimit -n` for more");
        }
        tracing::info!(target: "weir::server", open_files_max, partitions_max = partitions, connections_max = connections, cached_segment_files = cached_files, "open-file budget");
        FileBudget {
            cached_files: cached_files as usize,
            connections: connections as u32,
            partitions: partitions as usize,
        }
    }
}

/// Raises the soft open-file limit to the hard one; returns the limit in force.
fn raise_open_files_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(target: "weir::server", %error, "cannot read or raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// SIGTERM and SIGINT, handled from the moment they are listened for (the process no longer
/// dies of them) and received in turn.
struct ShutdownSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Installs the handlers.
    fn listen() -> anyhow::Result<ShutdownSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
        })
    }

    /// Resolves at the next SIGTERM or SIGINT.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
