//! The metadata quorum: controllers replicate the metadata commands with Raft (`openraft`) and
//! each applies the committed ones, in log order, to its image. A single-node server is a
//! quorum of one on the same path. The rest of the controller sees only [`MetadataQuorum`]:
//! propose a command, follow the applied images.

mod admission;
mod frame;
mod log_store;
mod network;
mod reserve;
mod state_machine;
mod stream;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{InitializeError, RaftError};
use openraft::{BasicNode, Config, Instant as _, LogIdOptionExt, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use weir_metadata::requests::{AddObserver, ControlRequest, EncodedAnswer};
use weir_metadata::{ControllerError, MetadataCommand, MetadataImage, QuorumStatus, VoterStatus};
use weir_storage::Storage;

use crate::forward::WireError;

pub use network::read_peer_frames;
pub use stream::QuorumTls;

use log_store::LogStore;
use reserve::SpaceReserve;
use state_machine::StateMachine;

#[allow(deprecated)] // the macro names openraft's default (deprecated) runtime re-export
mod raft_types {
    openraft::declare_raft_types!(
        /// Raft's types for the metadata quorum: commands in, the applied count out.
        pub TypeConfig:
            D = weir_metadata::MetadataCommand,
            R = u64,
            NodeId = u64,
            Node = openraft::BasicNode,
    );
}
pub use raft_types::TypeConfig;

type NodeId = u64;
type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
type MetadataRaft = openraft::Raft<TypeConfig, StateMachine>;

/// Heartbeats from the leader; also the deadline of each AppendEntries exchange.
const HEARTBEAT_MS: u64 = 150;
/// A follower that hears no leader for this long (randomized per campaign) stands.
const ELECTION_TIMEOUT_MS: (u64, u64) = (1_000, 2_000);
/// Commands between snapshots; a snapshot lets the log before it be purged.
const SNAPSHOT_EVERY_COMMANDS: u64 = 1_000;
/// How long a proposal waits for a leader to be known (at start, or during an election).
const LEADER_WAIT_MS: u64 = 10_000;
/// How long opening waits for the committed log to be applied again.
const RECOVERY_WAIT_MS: u64 = 60_000;
/// A proposal is refused (as on a full disk) while less than this is free where the log is:
/// a failed log write stops the quorum, so it must not be started without room.
const SPACE_RESERVE_BYTES: u64 = 1024 * 1024;

/// How often a released reserve of space for the log is made again when the disk has room.
const RESERVE_CHECK_MS: u64 = 10_000;

/// How long a forwarded change request may take at the active controller.
const FORWARD_DEADLINE_MS: u64 = 35_000;
/// How long a broker-only node keeps asking the voters to add it, then to hear from the leader.
const OBSERVER_JOIN_WAIT_MS: u64 = 60_000;
/// Deadline of one such request to one voter.
const OBSERVER_ASK_MS: u64 = 5_000;
/// Pause between rounds of asking.
const OBSERVER_RETRY_MS: u64 = 500;

/// A future of a quorum's answer.
pub type QuorumFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, ControllerError>> + Send + 'a>>;

/// A forwarded request's answer: what it produced and the `applied_count` of the image that
/// holds it, or the refusal.
pub type ControlAnswer = Result<(EncodedAnswer, u64), WireError>;

/// A future of a [`ControlAnswer`].
pub type ControlFuture<'a> = Pin<Box<dyn Future<Output = ControlAnswer> + Send + 'a>>;

/// Decides change requests forwarded by other controllers (the controller of this node).
pub trait ControlHandler: Send + Sync + 'static {
    /// Decides `request` here.
    fn handle(&self, request: ControlRequest) -> ControlFuture<'_>;
}

/// Where forwarded requests go once the controller exists.
type Handler = Arc<std::sync::OnceLock<Arc<dyn ControlHandler>>>;

/// Where metadata commands are committed and applied: what the controller builds on.
pub trait MetadataQuorum: Send + Sync + 'static {
    /// Proposes `command`; resolves once it is committed and applied to the published image,
    /// with that image's `applied_count`.
    fn propose(
        &self,
        command: MetadataCommand,
    ) -> Pin<Box<dyn Future<Output = Result<u64, ControllerError>> + Send + '_>>;

    /// The applied images, newest available.
    fn images(&self) -> watch::Receiver<Arc<MetadataImage>>;

    /// Sends `request` to the controller leading the quorum, answered with what it produced
    /// and the `applied_count` of the image that holds it; NOT_CONTROLLER when no other
    /// controller leads or it cannot be reached (the caller retries).
    fn forward(&self, request: ControlRequest) -> QuorumFuture<'_, (EncodedAnswer, u64)>;

    /// The quorum as this controller sees it as the leader; NOT_CONTROLLER on a follower.
    fn status(&self) -> Result<QuorumStatus, ControllerError>;

    /// True while this controller leads the quorum.
    fn leads(&self) -> bool;

    /// Adds a broker-only node as an observer of the quorum; NOT_CONTROLLER unless this
    /// controller leads.
    fn add_observer(&self, node_id: i32, address: String) -> QuorumFuture<'_, ()>;
}

/// One controller of the quorum: its voters (node id → controller address) and where it
/// keeps its log, votes and snapshots.
pub struct QuorumConfig {
    /// This controller's node id.
    pub node_id: i32,
    /// Every voter, with the address its controller listener has. A node not among them is a
    /// broker-only node: it follows the quorum's log as a Raft learner (an observer), never
    /// votes or leads, and asks a voter to add it at its first start.
    pub voters: BTreeMap<i32, String>,
    /// Directory of the Raft log, vote and snapshot.
    pub dir: PathBuf,
    /// TLS on the controller port, both ways (none: plaintext).
    pub tls: Option<QuorumTls>,
}

/// One controller's view of the Raft quorum (openraft's metrics, in Weir's types).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStatus {
    /// The controller leading the quorum, if one is known.
    pub leader: Option<i32>,
    /// This controller leads.
    pub is_leader: bool,
    /// The current Raft term.
    pub term: u64,
    /// Index of the last entry known committed.
    pub committed_index: Option<u64>,
    /// Index of the last entry applied to the metadata image.
    pub applied_index: Option<u64>,
    /// Index of the last entry in this controller's log.
    pub last_log_index: Option<u64>,
}

/// The Raft quorum, as one controller runs it.
pub struct RaftQuorum {
    raft: MetadataRaft,
    state_machine: StateMachine,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// The task answering peers, stopped with the quorum.
    peers: Option<tokio::task::JoinHandle<()>>,
    /// The controller that decides forwarded requests, once set.
    handler: Handler,
    /// The voters named at start (node id → controller address): where an observer asks to
    /// join.
    voters: BTreeMap<i32, String>,
    /// The connections kept to other controllers for forwarded requests.
    forwarder: network::Forwarder,
    /// Space held back for the log on a full disk, and the task that reserves it again.
    reserve: Arc<SpaceReserve>,
    reserving: tokio::task::JoinHandle<()>,
}

fn fatal(error: impl std::fmt::Display) -> ControllerError {
    ControllerError::Fatal(std::io::Error::other(error.to_string()))
}

impl RaftQuorum {
    /// Opens this controller's part of the quorum: replays its log and snapshot, serves its
    /// peers on `listener` (none for a quorum of one), initializes the quorum on first start,
    /// and returns once every command committed before is applied to the image again.
    pub async fn open(
        storage: Arc<dyn Storage>,
        config: QuorumConfig,
        listener: Option<TcpListener>,
    ) -> Result<RaftQuorum, ControllerError> {
        let dir = config.dir.clone();
        let reserve = Arc::new(SpaceReserve::new(storage.clone(), &dir));
        let (log, state_machine) = {
            let storage = storage.clone();
            let dir = dir.clone();
            let reserve = reserve.clone();
            tokio::task::spawn_blocking(move || {
                let log = LogStore::open(storage.clone(), &dir, reserve.clone())?;
                // Made before the quorum serves, so a disk filled right after start still
                // has room for the metadata changes that free it.
                reserve.keep();
                Ok::<_, std::io::Error>((log, StateMachine::open(storage, &dir)?))
            })
            .await
            .map_err(fatal)?
            .map_err(ControllerError::Fatal)?
        };
        let committed = log.committed().await;
        let raft_config = Config {
            cluster_name: "weir-metadata".into(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_TIMEOUT_MS.0,
            election_timeout_max: ELECTION_TIMEOUT_MS.1,
            install_snapshot_timeout: 30_000,
            enable_pre_vote: Some(true),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY_COMMANDS),
            max_in_snapshot_log_to_keep: 100,
            ..Config::default()
        }
        .validate()
        .map_err(fatal)?;
        let node_id = config.node_id as NodeId;
        let raft = MetadataRaft::new(
            node_id,
            Arc::new(raft_config),
            network::Network(stream::Dialer::new(config.tls.as_ref())),
            log,
            state_machine.clone(),
        )
        .await
        .map_err(fatal)?;
        let handler: Handler = Arc::default();
        let voter_addresses: Vec<String> = config.voters.values().cloned().collect();
        let peers = listener.map(|listener| {
            tokio::spawn(network::serve(
                listener,
                config.tls.clone(),
                raft.clone(),
                handler.clone(),
                voter_addresses,
            ))
        });
        tokio::spawn(log_leader_changes(raft.clone()));
        let members: BTreeMap<NodeId, BasicNode> = config
            .voters
            .iter()
            .map(|(id, addr)| (*id as NodeId, BasicNode::new(addr)))
            .collect();
        let voter = config.voters.contains_key(&config.node_id);
        if !voter {
            // An observer joins through a voter (`join_as_observer`); it never initializes.
        } else if !raft.is_initialized().await.map_err(fatal)? {
            match raft.initialize(members.clone()).await {
                Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(error) => return Err(fatal(error)),
            }
        } else if members.len() == 1 && members.contains_key(&node_id) {
            // A quorum of one need not wait out an election timeout to lead again.
            raft.trigger().elect(false).await.map_err(fatal)?;
        }
        let target = committed.index();
        raft.wait(Some(Duration::from_millis(RECOVERY_WAIT_MS)))
            .metrics(
                |m| m.last_applied.index() >= target,
                "the committed metadata to be applied",
            )
            .await
            .map_err(fatal)?;
        state_machine.recovered();
        let image = state_machine.images().borrow().clone();
        tracing::info!(target: "weir::controller", node_id, voters = members.len(), commands = image.applied_count, topics = image.topics().count(), "metadata quorum open");
        Ok(RaftQuorum {
            raft,
            state_machine,
            storage,
            dir,
            peers,
            handler,
            voters: config.voters,
            forwarder: network::Forwarder::new(stream::Dialer::new(config.tls.as_ref())),
            reserving: tokio::spawn(keep_reserving(reserve.clone())),
            reserve,
        })
    }

    /// Makes this broker-only node an observer of the quorum (a Raft learner) reachable at
    /// `address`: asks the voters in turn until the leader adds it (at every start; adding a
    /// node already there changes nothing), then waits until it has heard from the leader.
    /// A voter returns at once.
    pub async fn join_as_observer(&self, address: &str) -> Result<(), ControllerError> {
        let node_id = *self.raft.node_id();
        let me = i32::try_from(node_id).map_err(fatal)?;
        if self.voters.contains_key(&me) {
            return Ok(());
        }
        let until = Instant::now() + Duration::from_millis(OBSERVER_JOIN_WAIT_MS);
        let request = ControlRequest::from(AddObserver {
            node_id: me,
            address: address.to_string(),
        });
        let ask = Duration::from_millis(OBSERVER_ASK_MS);
        'asking: loop {
            for (voter, voter_address) in &self.voters {
                match self
                    .forwarder
                    .forward(voter_address, request.clone(), ask)
                    .await
                {
                    Ok(Ok(_)) => break 'asking,
                    Ok(Err(refused)) => {
                        let refused = ControllerError::from(refused);
                        if !matches!(refused, ControllerError::NotController(_)) {
                            return Err(refused);
                        }
                    }
                    Err(error) => {
                        tracing::debug!(target: "weir::controller", voter, %error, "cannot reach a voter to join the metadata quorum")
                    }
                }
            }
            if Instant::now() >= until {
                return Err(ControllerError::NotController(
                    "no voter of the metadata quorum added this node in time".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(OBSERVER_RETRY_MS)).await;
        }
        let left = until.saturating_duration_since(Instant::now());
        self.raft
            .wait(Some(left.max(Duration::from_millis(OBSERVER_RETRY_MS))))
            .metrics(
                |m| m.current_leader.is_some() && m.membership_config.get_node(&node_id).is_some(),
                "the metadata quorum's leader to reach this observer",
            )
            .await
            .map_err(|e| ControllerError::NotController(e.to_string()))?;
        tracing::info!(target: "weir::controller", node_id, address, "following the metadata quorum as an observer (broker-only node)");
        Ok(())
    }

    /// Adds broker-only node `node_id`, reachable at `address`, as an observer (a Raft
    /// learner); the leader only. Refused for a voter; re-adding an observer at the same
    /// address changes nothing.
    async fn add_observer_here(
        &self,
        node_id: i32,
        address: String,
    ) -> Result<(), ControllerError> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        if !metrics.state.is_leader() {
            return Err(ControllerError::NotController(
                "this controller does not lead the metadata quorum".into(),
            ));
        }
        let id = u64::try_from(node_id)
            .map_err(|_| ControllerError::InvalidRequest(format!("Invalid node id {node_id}")))?;
        let membership = &metrics.membership_config;
        if membership.voter_ids().any(|v| v == id) {
            return Err(ControllerError::InvalidRequest(format!(
                "node {node_id} is a voter of the metadata quorum; a broker-only node needs an id of its own"
            )));
        }
        if membership.get_node(&id).is_some_and(|n| n.addr == address) {
            return Ok(());
        }
        match self
            .raft
            .add_learner(id, BasicNode::new(&address), false)
            .await
        {
            Ok(_) => {
                tracing::info!(target: "weir::controller", node_id, address, "observer (broker-only node) added to the metadata quorum");
                Ok(())
            }
            // Leadership moved, or a membership change is still being committed (right after
            // the quorum formed): the observer asks again.
            Err(RaftError::APIError(error)) => {
                Err(ControllerError::NotController(error.to_string()))
            }
            Err(error) => Err(fatal(error)),
        }
    }

    /// Keeps the relational copy of the metadata in the SQLite database at `path`.
    pub fn keep_relational(&self, path: &Path) -> rusqlite::Result<()> {
        self.state_machine.keep_relational(path)
    }

    /// Lets `controller` decide the change requests other controllers forward here.
    pub fn serve_control(&self, controller: Arc<dyn ControlHandler>) {
        let _ = self.handler.set(controller);
    }

    /// The node id of the controller leading the quorum, if one is known.
    pub fn leader(&self) -> Option<i32> {
        let leader = self.raft.metrics().borrow_watched().current_leader;
        leader.and_then(|id| i32::try_from(id).ok())
    }

    /// This controller's view of the quorum now, for monitoring.
    pub fn raft_status(&self) -> RaftStatus {
        let metrics = self.raft.metrics().borrow_watched().clone();
        RaftStatus {
            leader: metrics.current_leader.and_then(|id| i32::try_from(id).ok()),
            is_leader: metrics.state.is_leader(),
            term: metrics.current_term,
            committed_index: metrics.cluster_committed.map(|id| id.index),
            applied_index: metrics.last_applied.map(|id| id.index),
            last_log_index: metrics.last_log_index,
        }
    }

    /// Stops this controller's Raft and stops answering its peers (a clean shutdown).
    pub async fn shutdown(&self) {
        if let Some(peers) = &self.peers {
            peers.abort();
        }
        self.reserving.abort();
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(target: "weir::controller", %error, "metadata quorum did not stop cleanly");
        }
    }

    /// Waits until some controller is known to lead, or the wait is over.
    async fn leader_known(&self, until: Instant) -> bool {
        let mut metrics = self.raft.metrics();
        loop {
            if metrics.borrow_watched().current_leader.is_some() {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, metrics.changed()).await.is_err() {
                return false;
            }
        }
    }

    async fn propose_command(&self, command: MetadataCommand) -> Result<u64, ControllerError> {
        let available = || {
            self.storage
                .available_bytes(&self.dir)
                .map_err(ControllerError::Storage)
        };
        let mut free = available()?;
        if free < SPACE_RESERVE_BYTES
            && self
                .reserve
                .release("a metadata change found the disk full")
        {
            free = available()?;
        }
        if free < SPACE_RESERVE_BYTES {
            return Err(ControllerError::Storage(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!("only {free} bytes free for the metadata log"),
            )));
        }
        let until = Instant::now() + Duration::from_millis(LEADER_WAIT_MS);
        loop {
            let error = match self.raft.client_write(command.clone()).await {
                Ok(written) => return Ok(written.data),
                Err(error) => error,
            };
            let Some(forward) = error.forward_to_leader() else {
                return Err(fatal(error));
            };
            match forward.leader_id {
                None if self.leader_known(until).await => continue,
                None => {
                    return Err(ControllerError::NotController(
                        "no metadata quorum leader was elected in time".into(),
                    ))
                }
                Some(leader) => {
                    return Err(ControllerError::NotController(format!(
                        "the active controller is node {leader}"
                    )))
                }
            }
        }
    }
}

/// Reserves the log's space again every [`RESERVE_CHECK_MS`] after it was released, once the
/// disk has room ([`RaftQuorum::open`] makes it first).
async fn keep_reserving(reserve: Arc<SpaceReserve>) {
    loop {
        tokio::time::sleep(Duration::from_millis(RESERVE_CHECK_MS)).await;
        let keeping = reserve.clone();
        let _ = tokio::task::spawn_blocking(move || keeping.keep()).await;
    }
}

/// Logs each change of the quorum's leader (or of its term) as this controller sees it, until
/// Raft stops.
async fn log_leader_changes(raft: MetadataRaft) {
    let mut metrics = raft.metrics();
    let mut last = (None, 0);
    loop {
        let (leader, term) = {
            let m = metrics.borrow_watched();
            (m.current_leader, m.current_term)
        };
        if (leader, term) != last {
            match leader {
                Some(leader) => {
                    tracing::info!(target: "weir::controller", leader, term, "metadata quorum leader")
                }
                None => {
                    tracing::info!(target: "weir::controller", term, "metadata quorum has no leader")
                }
            }
            last = (leader, term);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

impl RaftQuorum {
    async fn forward_request(
        &self,
        request: ControlRequest,
    ) -> Result<(EncodedAnswer, u64), ControllerError> {
        let (leader, address) = {
            let metrics = self.raft.metrics().borrow_watched().clone();
            let leader = metrics.current_leader;
            let address = leader.and_then(|l| {
                metrics
                    .membership_config
                    .get_node(&l)
                    .map(|n| n.addr.clone())
            });
            (leader, address)
        };
        let (Some(leader), Some(address)) = (leader, address) else {
            return Err(ControllerError::NotController(
                "no controller leads the metadata quorum yet".into(),
            ));
        };
        if leader == *self.raft.node_id() {
            return Err(ControllerError::NotController(
                "this controller became the leader; retry here".into(),
            ));
        }
        let deadline = Duration::from_millis(FORWARD_DEADLINE_MS);
        match self.forwarder.forward(&address, request, deadline).await {
            Ok(answer) => answer.map_err(ControllerError::from),
            Err(error) => Err(ControllerError::NotController(format!(
                "cannot reach the active controller {leader} at {address}: {error}"
            ))),
        }
    }
}

impl MetadataQuorum for RaftQuorum {
    fn forward(&self, request: ControlRequest) -> QuorumFuture<'_, (EncodedAnswer, u64)> {
        Box::pin(self.forward_request(request))
    }

    fn add_observer(&self, node_id: i32, address: String) -> QuorumFuture<'_, ()> {
        Box::pin(self.add_observer_here(node_id, address))
    }

    fn leads(&self) -> bool {
        self.raft.metrics().borrow_watched().state.is_leader()
    }

    fn status(&self) -> Result<QuorumStatus, ControllerError> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let me = *self.raft.node_id();
        if !metrics.state.is_leader() {
            return Err(ControllerError::NotController(
                "this controller does not lead the metadata quorum".into(),
            ));
        }
        let replication = metrics.replication.clone().unwrap_or_default();
        let heartbeat = metrics.heartbeat.clone().unwrap_or_default();
        let membership = &metrics.membership_config;
        let status_of = |id: u64| {
            let address = membership
                .get_node(&id)
                .map_or_else(String::new, |n| n.addr.clone());
            let (matched_index, last_contact_ms) = if id == me {
                (metrics.last_log_index, Some(0))
            } else {
                let matched = replication.get(&id).copied().flatten().map(|l| l.index);
                let contact = heartbeat
                    .get(&id)
                    .copied()
                    .flatten()
                    .map(|at| at.elapsed().as_millis() as u64);
                (matched, contact)
            };
            VoterStatus {
                node_id: id as i32,
                address,
                matched_index,
                last_contact_ms,
            }
        };
        let voter_ids: Vec<u64> = membership.voter_ids().collect();
        let voters = voter_ids.iter().map(|id| status_of(*id)).collect();
        let observers = membership
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| !voter_ids.contains(id))
            .map(status_of)
            .collect();
        Ok(QuorumStatus {
            leader: me as i32,
            term: metrics.current_term,
            commit_index: metrics.local_committed.map(|l| l.index),
            voters,
            observers,
        })
    }

    fn propose(
        &self,
        command: MetadataCommand,
    ) -> Pin<Box<dyn Future<Output = Result<u64, ControllerError>> + Send + '_>> {
        Box::pin(self.propose_command(command))
    }

    fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.state_machine.images()
    }
}

#[cfg(test)]
mod tests {
    use openraft::testing::log::{StoreBuilder, Suite};
    use openraft::StorageError;

    use super::*;

    /// Log stores and state machines on a fresh directory, as openraft's suite wants them.
    struct OnDisk;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for OnDisk {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
            let dir = tempfile::tempdir().expect("tempdir");
            let storage: Arc<dyn Storage> = Arc::new(weir_storage::MemoryStorage::new());
            let reserve = Arc::new(SpaceReserve::new(storage.clone(), dir.path()));
            let log = LogStore::open(storage.clone(), dir.path(), reserve).expect("log store");
            let state_machine = StateMachine::open(storage, dir.path()).expect("state machine");
            Ok((dir, log, state_machine))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_store_and_state_machine_pass_openraft_storage_suite() {
        Suite::test_all(OnDisk)
            .await
            .expect("openraft's storage suite");
    }

    async fn open(
        dir: &Path,
        node_id: i32,
        voters: &BTreeMap<i32, String>,
        listener: TcpListener,
    ) -> RaftQuorum {
        let config = QuorumConfig {
            node_id,
            voters: voters.clone(),
            dir: dir.to_path_buf(),
            tls: None,
        };
        RaftQuorum::open(Arc::new(weir_storage::FsStorage), config, Some(listener))
            .await
            .expect("quorum")
    }

    /// Waits (at most 20 s) until `check` holds.
    async fn eventually(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn producer_ids(first: i64) -> MetadataCommand {
        MetadataCommand::AllocateProducerIds { first, count: 10 }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_controllers_elect_replicate_and_fail_over() {
        let dirs: Vec<tempfile::TempDir> = (0..3)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let mut listeners = Vec::new();
        for _ in 0..3 {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
        }
        let voters: BTreeMap<i32, String> = (1..=3)
            .zip(&listeners)
            .map(|(id, l)| (id, l.local_addr().expect("addr").to_string()))
            .collect();
        let opening = (1..=3)
            .zip(listeners)
            .zip(&dirs)
            .map(|((id, listener), dir)| {
                let voters = voters.clone();
                async move { open(dir.path(), id, &voters, listener).await }
            });
        let mut nodes: Vec<Option<RaftQuorum>> = futures_util::future::join_all(opening)
            .await
            .into_iter()
            .map(Some)
            .collect();
        let leader_of = |nodes: &[Option<RaftQuorum>]| -> Option<i32> {
            let seen: Vec<Option<i32>> = nodes.iter().flatten().map(|n| n.leader()).collect();
            seen.first()
                .copied()
                .flatten()
                .filter(|l| seen.iter().all(|s| *s == Some(*l)))
        };
        eventually("the three agree on a leader", || {
            leader_of(&nodes).is_some()
        })
        .await;
        let first = leader_of(&nodes).expect("leader");
        let leader = nodes[(first - 1) as usize].as_ref().expect("running");
        assert_eq!(leader.propose(producer_ids(0)).await.expect("committed"), 1);
        let follower = nodes
            .iter()
            .flatten()
            .find(|n| n.leader() != Some(n.raft.node_id().to_owned() as i32));
        if let Some(follower) = follower {
            assert!(
                matches!(
                    follower.propose(producer_ids(10)).await,
                    Err(ControllerError::NotController(_))
                ),
                "a follower does not commit on its own"
            );
        }
        eventually("every image holds the command", || {
            nodes
                .iter()
                .flatten()
                .all(|n| n.images().borrow().next_producer_id == 10)
        })
        .await;

        // The leader goes; the other two elect one of themselves and go on.
        let stopped = nodes[(first - 1) as usize].take().expect("running");
        stopped.shutdown().await;
        drop(stopped);
        eventually("a new leader among the two left", || {
            leader_of(&nodes).is_some_and(|l| l != first)
        })
        .await;
        let second = leader_of(&nodes).expect("leader");
        let leader = nodes[(second - 1) as usize].as_ref().expect("running");
        // More than a snapshot's worth: the log the old leader missed is purged.
        const MISSED: i64 = 1_500;
        for i in 1..=MISSED {
            let applied = leader
                .propose(producer_ids(i * 10))
                .await
                .expect("committed");
            assert_eq!(applied, i as u64 + 1);
        }

        // The old leader comes back on its address and catches up from the new leader's
        // snapshot (a database) and the log after it.
        let address = voters[&first].clone();
        let listener = TcpListener::bind(&address).await.expect("rebind");
        let back = open(dirs[(first - 1) as usize].path(), first, &voters, listener).await;
        nodes[(first - 1) as usize] = Some(back);
        eventually("the returning node applies what it missed", || {
            nodes
                .iter()
                .flatten()
                .all(|n| n.images().borrow().next_producer_id == (MISSED + 1) * 10)
        })
        .await;
        let installed = dirs[(first - 1) as usize].path().join("raft-snapshot.db");
        let bytes = std::fs::read(&installed).expect("the snapshot it was sent");
        crate::relational::read_snapshot(&bytes).expect("a snapshot database");
        for node in nodes.iter().flatten() {
            node.shutdown().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broker_only_node_joins_as_an_observer_and_follows_the_log() {
        let dirs: Vec<tempfile::TempDir> = (0..4)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let mut listeners = Vec::new();
        for _ in 0..4 {
            listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
        }
        let addresses: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr").to_string())
            .collect();
        let voters: BTreeMap<i32, String> = (1..=3).zip(addresses.iter().cloned()).collect();
        let mut listeners = listeners.into_iter();
        let mut nodes = Vec::new();
        for id in 1..=4 {
            let listener = listeners.next().expect("listener");
            let dir = dirs[(id - 1) as usize].path();
            let quorum = Arc::new(open(dir, id, &voters, listener).await);
            if id <= 3 {
                quorum.serve_control(Arc::new(crate::Controller::new(
                    quorum.clone(),
                    crate::ControllerSettings::default(),
                )));
            }
            nodes.push(quorum);
        }
        let observer = nodes[3].clone();
        observer
            .join_as_observer(&addresses[3])
            .await
            .expect("joined");
        observer
            .join_as_observer(&addresses[3])
            .await
            .expect("joining again changes nothing");
        let leader = observer.leader().expect("a leader");
        assert!((1..=3).contains(&leader), "only voters lead");
        let leading = nodes[(leader - 1) as usize].clone();
        assert_eq!(
            leading.propose(producer_ids(0)).await.expect("committed"),
            1
        );
        eventually("the observer applies the command", || {
            observer.images().borrow().next_producer_id == 10
        })
        .await;
        let status = leading.status().expect("the leader's view");
        assert_eq!(status.voters.len(), 3);
        assert_eq!(
            status
                .observers
                .iter()
                .map(|o| o.node_id)
                .collect::<Vec<_>>(),
            vec![4]
        );
        assert!(
            matches!(
                observer.propose(producer_ids(10)).await,
                Err(ControllerError::NotController(_))
            ),
            "an observer does not commit on its own"
        );
        for node in &nodes {
            node.shutdown().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn snapshots_bound_the_log_and_restore_the_image() {
        const COMMANDS: i64 = 2_500;
        let disk = weir_storage::MemoryStorage::new();
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let dir = Path::new("/data/metadata/quorum");
        let config = || QuorumConfig {
            node_id: 1,
            voters: BTreeMap::from([(1, "local".to_string())]),
            dir: dir.to_path_buf(),
            tls: None,
        };
        let quorum = RaftQuorum::open(storage.clone(), config(), None)
            .await
            .expect("quorum");
        for i in 0..COMMANDS {
            quorum
                .propose(producer_ids(i * 10))
                .await
                .expect("committed");
        }
        let log_bytes = disk.read(&dir.join("raft-log")).expect("log").len();
        let snapshot_bytes = disk
            .read(&dir.join("raft-snapshot.db"))
            .expect("snapshot")
            .len();
        // Without purging, 2500 entries of ~150 bytes would be ~375 KB.
        assert!(
            log_bytes < 250_000,
            "the log was not bounded: {log_bytes} bytes"
        );
        assert!(snapshot_bytes > 0);
        quorum.shutdown().await;
        drop(quorum);
        disk.power_loss();
        let quorum = RaftQuorum::open(storage.clone(), config(), None)
            .await
            .expect("reopened");
        let image = quorum.images().borrow().clone();
        assert_eq!(image.applied_count, COMMANDS as u64);
        assert_eq!(image.next_producer_id, COMMANDS * 10);
        quorum.shutdown().await;
        drop(quorum);

        // The snapshot is a database of the relational tables as of its place in the log.
        let snapshot = disk.read(&dir.join("raft-snapshot.db")).expect("snapshot");
        let mut db = rusqlite::Connection::open_in_memory().expect("sqlite");
        db.deserialize_read_exact(rusqlite::MAIN_DB, &snapshot[..], snapshot.len(), true)
            .expect("a database");
        let (applied, next_producer_id): (i64, i64) = db
            .query_row(
                "SELECT applied_count, next_producer_id FROM meta",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("meta row");
        assert!(applied >= 1000, "snapshot at {applied} commands");
        assert_eq!(next_producer_id, applied * 10);

        // An earlier version's JSON snapshot is read and turned into a database.
        let (meta, image_json) = crate::relational::read_snapshot(&snapshot).expect("snapshot");
        let mut legacy = meta.into_bytes();
        legacy.push(b'\n');
        legacy.extend_from_slice(&image_json);
        disk.write_atomic(&dir.join("raft-snapshot.json"), &legacy)
            .expect("legacy");
        disk.remove(&dir.join("raft-snapshot.db")).expect("remove");
        let quorum = RaftQuorum::open(storage, config(), None)
            .await
            .expect("reopened over a legacy snapshot");
        assert_eq!(quorum.images().borrow().applied_count, COMMANDS as u64);
        assert!(disk.exists(&dir.join("raft-snapshot.db")));
        assert!(!disk.exists(&dir.join("raft-snapshot.json")));
        quorum.shutdown().await;
    }
}
