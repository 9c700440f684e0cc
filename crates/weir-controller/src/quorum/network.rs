//! Raft's messages and forwarded change requests between controllers over TCP: each request
//! and its answer is one frame (`frame.rs`) on a connection the sender keeps open (one to each
//! peer for Raft, a few to the active controller for forwarded requests; reopened after any
//! error), in TLS with both sides' certificates when the quorum has it (`stream.rs`). Every
//! read and connect has a deadline and every frame a size bound; the port admits connections
//! by where they come from (`admission.rs`).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::errors::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::alias::{SnapshotMetaOf, SnapshotOf};
use openraft::{BasicNode, OptionalSend, Snapshot};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use weir_metadata::requests::ControlRequest;

use super::admission::Admission;
use super::frame::{buffer_bound, read_frame, read_frame_into, write_frame};
use super::stream::{self, Dialer, QuorumStream, QuorumTls};
use super::{ControlAnswer, Handler, MetadataRaft, NodeId, TypeConfig, Vote};
use crate::forward::WireError;

/// A served connection with no request for this long is closed.
const IDLE_MS: u64 = 60_000;
/// A new connection must bring its first whole frame within this: a peer sends at once (even
/// a snapshot of the largest frame needs only 7 MB/s).
const FIRST_FRAME_MS: u64 = 10_000;
/// Connections one controller opens to another for forwarded requests at once; more requests
/// wait for one of them.
const FORWARD_CONNECTIONS_MAX: usize = 8;
/// A kept forwarding connection unused for this long is closed rather than reused (well
/// before the other side's [`IDLE_MS`], so it is never reused as that side closes it).
const FORWARD_IDLE_MS: u64 = 20_000;
/// How often the members' addresses are resolved again (and at every membership change).
const MEMBERS_REFRESH_MS: u64 = 30_000;
/// Deadline of resolving one member's address.
const RESOLVE_MS: u64 = 2_000;

/// A message from one controller to another.
#[derive(Serialize, Deserialize)]
enum Request {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<TypeConfig>),
    PreVote(VoteRequest<TypeConfig>),
    Snapshot(Vote, SnapshotMetaOf<TypeConfig>, Vec<u8>),
    /// A change request forwarded to the leader's controller.
    Control(ControlRequest),
}

/// The connections this controller keeps to others for forwarded change requests: at most
/// [`FORWARD_CONNECTIONS_MAX`] to each, reused while they last, so a broker's heartbeats and
/// requests go over connections it already holds rather than asking the port for new ones.
pub struct Forwarder {
    dialer: Dialer,
    by_address: Mutex<HashMap<String, Arc<Channel>>>,
}

/// The forwarding connections to one controller.
struct Channel {
    permits: Semaphore,
    idle: Mutex<Vec<(QuorumStream, Instant)>>,
}

impl Forwarder {
    /// No connections yet; they are made as `dialer` makes them.
    pub(super) fn new(dialer: Dialer) -> Forwarder {
        Forwarder {
            dialer,
            by_address: Mutex::default(),
        }
    }

    /// Sends a change request to the controller at `addr` and waits (at most `deadline`, a
    /// free connection included) for its answer.
    pub async fn forward(
        &self,
        addr: &str,
        request: ControlRequest,
        deadline: Duration,
    ) -> io::Result<ControlAnswer> {
        let channel = lock(&self.by_address)
            .entry(addr.to_string())
            .or_insert_with(|| {
                Arc::new(Channel {
                    permits: Semaphore::new(FORWARD_CONNECTIONS_MAX),
                    idle: Mutex::new(Vec::new()),
                })
            })
            .clone();
        let exchange = async {
            let _permit = channel
                .permits
                .acquire()
                .await
                .map_err(|_| io::Error::other("forwarding closed"))?;
            let mut stream = match channel.take_idle() {
                Some(stream) => stream,
                None => self.dialer.connect(addr).await?,
            };
            write_frame(&mut stream, &Request::Control(request)).await?;
            let answer = read_frame(&mut stream).await?;
            lock(&channel.idle).push((stream, Instant::now()));
            Ok(answer)
        };
        tokio::time::timeout(deadline, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the active controller did not answer in time",
                ))
            })
    }
}

impl Channel {
    /// The most recently used kept connection still fit to reuse: used within
    /// [`FORWARD_IDLE_MS`], not closed by the other side, nothing unasked waiting on it.
    fn take_idle(&self) -> Option<QuorumStream> {
        let mut idle = lock(&self.idle);
        while let Some((stream, since)) = idle.pop() {
            if since.elapsed() < Duration::from_millis(FORWARD_IDLE_MS) && !stream.heard_from_peer()
            {
                return Some(stream);
            }
        }
        None
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads `bytes` as a connection to the controller port delivers them: frame after frame,
/// each decoded as a peer's message, until the bytes end or a frame is refused; returns how
/// many were whole messages. The fuzz harness of the port's framing: it panics if a frame's
/// buffer ever held more than [`buffer_bound`] of the bytes that arrived for it.
pub async fn read_peer_frames(mut bytes: &[u8]) -> usize {
    let mut messages = 0;
    loop {
        let mut body = Vec::new();
        let outcome = read_frame_into(&mut bytes, &mut body).await;
        assert!(
            body.capacity() <= buffer_bound(body.len()),
            "{} bytes held for a frame of which {} arrived",
            body.capacity(),
            body.len()
        );
        if outcome.is_err() {
            return messages;
        }
        if serde_json::from_slice::<Request>(&body).is_ok() {
            messages += 1;
        }
    }
}

/// Makes a client per peer; clients connect lazily, as the dialer does.
pub struct Network(pub(super) Dialer);

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: node.addr.clone(),
            dialer: self.0.clone(),
            stream: None,
        }
    }
}

/// The connection to one peer.
pub struct Peer {
    target: NodeId,
    addr: String,
    dialer: Dialer,
    stream: Option<QuorumStream>,
}

impl Peer {
    async fn exchange<R: DeserializeOwned>(&mut self, request: &Request) -> io::Result<R> {
        if self.stream.is_none() {
            self.stream = Some(self.dialer.connect(&self.addr).await?);
        }
        let stream = self.stream.as_mut().expect("connected above");
        write_frame(stream, request).await?;
        read_frame(stream).await
    }

    /// Sends `request` and waits for the answer within the RPC's deadline.
    async fn call<R: DeserializeOwned>(
        &mut self,
        request: Request,
        deadline: Duration,
    ) -> Result<R, RPCError<TypeConfig>> {
        let answer = tokio::time::timeout(
            deadline,
            self.exchange::<Result<R, RaftError<TypeConfig>>>(&request),
        )
        .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("controller {} did not answer in time", self.target),
            )),
        };
        match answer {
            Ok(Ok(response)) => Ok(response),
            // The peer's Raft is stopping or failed.
            Ok(Err(remote)) => {
                self.stream = None;
                Err(RPCError::Unreachable(Unreachable::new(&remote)))
            }
            Err(error) => {
                self.stream = None;
                Err(match error.kind() {
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::AddrNotAvailable => {
                        RPCError::Unreachable(Unreachable::new(&error))
                    }
                    _ => RPCError::Network(NetworkError::new(&error)),
                })
            }
        }
    }
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(Request::AppendEntries(rpc), option.soft_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(Request::Vote(rpc), option.soft_ttl()).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(Request::PreVote(rpc), option.soft_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotOf<TypeConfig, Vec<u8>>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let request = Request::Snapshot(vote, snapshot.meta, snapshot.snapshot);
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            answer = self.call(request, option.soft_ttl()) => Ok(answer?),
        }
    }
}

/// Answers peers' Raft messages and forwarded change requests (once `handler` is set) on
/// `listener` until the quorum stops, in TLS when `tls` is given (a peer without a
/// certificate the truststore vouches for is refused at the handshake). Connections are
/// admitted by where they come from: the addresses of the quorum's members (from its
/// membership, and `voters` before it has one) have places of their own, any other address a
/// small share apart.
pub async fn serve(
    listener: TcpListener,
    tls: Option<QuorumTls>,
    raft: MetadataRaft,
    handler: Handler,
    voters: Vec<String>,
) {
    let admission = Arc::new(Admission::default());
    let _members = AbortOnDrop(tokio::spawn(follow_members(
        raft.clone(),
        voters,
        admission.clone(),
    )));
    // Renewed certificates serve new connections, and are shown on new connections to peers,
    // as on the Kafka listeners.
    let (_serving, stopped) = tokio::sync::watch::channel(false);
    let _reload = tls.as_ref().map(|tls| {
        let server = tls.server.clone().watch(
            "controller".into(),
            weir_tls::RELOAD_CHECK_INTERVAL,
            stopped.clone(),
        );
        let client = tls.client.clone().watch(
            "controller peers".into(),
            weir_tls::RELOAD_CHECK_INTERVAL,
            stopped,
        );
        (
            AbortOnDrop(tokio::spawn(server)),
            AbortOnDrop(tokio::spawn(client)),
        )
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(target: "weir::controller", %error, "controller listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let place = match admission.admit(peer.ip()) {
            Ok(place) => place,
            Err(refusal) => {
                if let Some(suppressed) = admission.warn_now() {
                    tracing::warn!(target: "weir::controller", %peer, suppressed, "controller connection refused: {refusal}");
                }
                continue;
            }
        };
        let raft = raft.clone();
        let handler = handler.clone();
        let tls = tls.clone();
        let admission = admission.clone();
        tokio::spawn(async move {
            let _place = place;
            let stream = match stream::accept(stream, tls.as_ref()).await {
                Ok(stream) => stream,
                Err(error) => {
                    if let Some(suppressed) = admission.warn_now() {
                        tracing::warn!(target: "weir::controller", %peer, suppressed, %error, "controller connection refused: its TLS handshake failed");
                    }
                    return;
                }
            };
            if let Err(error) = serve_connection(stream, raft, handler).await {
                tracing::debug!(target: "weir::controller", %peer, %error, "controller connection closed");
            }
        });
    }
}

/// Aborts a task when dropped (its owner stopped).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps `admission`'s member addresses those of the quorum's members (voters and observers;
/// `voters` as configured until there is a membership), resolved at every membership change
/// and every [`MEMBERS_REFRESH_MS`].
async fn follow_members(raft: MetadataRaft, voters: Vec<String>, admission: Arc<Admission>) {
    let mut metrics = raft.metrics();
    let mut resolved: Option<(Vec<String>, Instant)> = None;
    loop {
        let mut addresses: Vec<String> = metrics
            .borrow_watched()
            .membership_config
            .nodes()
            .map(|(_, node)| node.addr.clone())
            .chain(voters.iter().cloned())
            .collect();
        addresses.sort();
        addresses.dedup();
        let fresh = resolved.as_ref().is_some_and(|(last, at)| {
            *last == addresses && at.elapsed() < Duration::from_millis(MEMBERS_REFRESH_MS)
        });
        if !fresh {
            admission.set_members(resolve(&addresses).await);
            resolved = Some((addresses, Instant::now()));
        }
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(Duration::from_millis(MEMBERS_REFRESH_MS)) => {}
        }
    }
}

/// The IP addresses `addresses` (host:port) resolve to; one that does not resolve in time adds
/// none.
async fn resolve(addresses: &[String]) -> HashSet<IpAddr> {
    let mut ips = HashSet::new();
    for address in addresses {
        let found = tokio::time::timeout(
            Duration::from_millis(RESOLVE_MS),
            tokio::net::lookup_host(address.as_str()),
        )
        .await;
        match found {
            Ok(Ok(found)) => ips.extend(found.map(|a| a.ip().to_canonical())),
            Ok(Err(error)) => {
                tracing::debug!(target: "weir::controller", address, %error, "cannot resolve a quorum member's address")
            }
            Err(_) => {
                tracing::debug!(target: "weir::controller", address, "resolving a quorum member's address timed out")
            }
        }
    }
    ips
}

async fn serve_connection(
    mut stream: QuorumStream,
    raft: MetadataRaft,
    handler: Handler,
) -> io::Result<()> {
    let mut wait = Duration::from_millis(FIRST_FRAME_MS);
    loop {
        let request: Request = match tokio::time::timeout(wait, read_frame(&mut stream)).await {
            Ok(Ok(request)) => request,
            Ok(Err(error)) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(error)) => return Err(error),
            Err(_) => return Ok(()),
        };
        wait = Duration::from_millis(IDLE_MS);
        match request {
            Request::AppendEntries(rpc) => {
                write_frame(&mut stream, &raft.append_entries(rpc).await).await?
            }
            Request::Vote(rpc) => write_frame(&mut stream, &raft.vote(rpc).await).await?,
            Request::PreVote(rpc) => write_frame(&mut stream, &raft.pre_vote(rpc).await).await?,
            Request::Snapshot(vote, meta, data) => {
                let snapshot = Snapshot {
                    meta,
                    snapshot: data,
                };
                let answer = raft
                    .install_full_snapshot(vote, snapshot)
                    .await
                    .map_err(RaftError::<TypeConfig>::Fatal);
                write_frame(&mut stream, &answer).await?
            }
            Request::Control(request) => {
                let answer: ControlAnswer = match handler.get() {
                    Some(controller) => controller.handle(request).await,
                    None => Err(WireError::NotController(
                        "this controller is starting".into(),
                    )),
                };
                write_frame(&mut stream, &answer).await?
            }
        }
    }
}
