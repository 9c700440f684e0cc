//! Raft's messages between controllers over TCP: each request and its answer is one frame of
//! `[u32 length][JSON]` on a connection the sender keeps to each peer (reopened after any
//! error). Every read and connect has a deadline and every frame a size bound.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::{ControlAnswer, Handler, MetadataRaft, NodeId, TypeConfig, Vote};
use crate::forward::{ControlRequest, WireError};

/// Largest frame accepted: a snapshot of the whole image travels as one (an image of 10,000
/// partitions is a few MiB).
const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Controller connections served at once: each peer keeps one, and forwarded requests open
/// one each while they wait.
const CONNECTIONS_MAX: usize = 32;
/// A served connection with no request for this long is closed.
const IDLE_MS: u64 = 60_000;

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

/// Sends a change request to the controller at `addr` and waits (at most `deadline`) for its
/// answer.
pub async fn forward(
    addr: &str,
    request: ControlRequest,
    deadline: Duration,
) -> io::Result<ControlAnswer> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        write_frame(&mut stream, &Request::Control(request)).await?;
        read_frame(&mut stream).await
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

async fn write_frame(stream: &mut TcpStream, value: &impl Serialize) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    if body.len() > FRAME_BYTES_MAX {
        return Err(io::Error::other("frame too large"));
    }
    stream.write_all(&(body.len() as u32).to_be_bytes()).await?;
    stream.write_all(&body).await?;
    stream.flush().await
}

async fn read_frame<T: DeserializeOwned>(stream: &mut TcpStream) -> io::Result<T> {
    let length = stream.read_u32().await? as usize;
    if length > FRAME_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {length} bytes is larger than {FRAME_BYTES_MAX}"),
        ));
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Makes a client per peer; clients connect lazily.
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: node.addr.clone(),
            stream: None,
        }
    }
}

/// The connection to one peer.
pub struct Peer {
    target: NodeId,
    addr: String,
    stream: Option<TcpStream>,
}

impl Peer {
    async fn exchange<R: DeserializeOwned>(&mut self, request: &Request) -> io::Result<R> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
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
/// `listener` until the quorum stops.
pub async fn serve(listener: TcpListener, raft: MetadataRaft, handler: Handler) {
    let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(target: "weir::controller", %error, "controller listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(target: "weir::controller", %peer, "too many controller connections; closing");
            continue;
        };
        let raft = raft.clone();
        let handler = handler.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(error) = serve_connection(stream, raft, handler).await {
                tracing::debug!(target: "weir::controller", %peer, %error, "controller connection closed");
            }
        });
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    raft: MetadataRaft,
    handler: Handler,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    loop {
        let idle = Duration::from_millis(IDLE_MS);
        let request: Request = match tokio::time::timeout(idle, read_frame(&mut stream)).await {
            Ok(Ok(request)) => request,
            Ok(Err(error)) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(error)) => return Err(error),
            Err(_) => return Ok(()),
        };
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
