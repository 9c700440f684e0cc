//! The Kafka listener: admits connections within the limits, reads frames within the memory
//! budget, runs requests concurrently and writes responses back in request order.
//!
//! Bounds, per connection: [`CONNECTION_PIPELINE_MAX`] requests in flight,
//! [`CONNECTION_REQUEST_BYTES_MAX`] bytes of small requests in flight,
//! [`CONNECTION_RESPONSE_BYTES_MAX`] response bytes in memory waiting for the client to read
//! (past either the socket is not read: backpressure), one frame being read, and
//! `connections.max.idle.ms` without a byte moving before it is closed. Broker-wide:
//! `max.connections`, `max.connections.per.ip`, and `queued.max.request.bytes` of large
//! requests in memory. When a connection closes, its unfinished requests are cancelled.
//!
//! A node serves several listeners alike (`BoundListener`); on an SSL listener a client has
//! [`TLS_HANDSHAKE_MS`] to finish its TLS handshake before anything is read, and each
//! request knows the listener it came on ([`RequestContext`]), whose endpoints it is answered
//! with.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use weir_log::ReadSlice;
use weir_proto::api::api_versions_response;
use weir_proto::{decode_request, encode_response, read_frame_length, DecodeError, FrameError};
use weir_sasl::Mechanism;
use weir_tls::{ServerTls, RELOAD_CHECK_INTERVAL};

use crate::broker::Broker;
use crate::config::DynamicConfigs;
use crate::connections::{resolve_overrides, ConnectionLimits, ConnectionSlot};
use crate::handlers;
use crate::rate_limit::{warn_bad_input, LineLimit};
use crate::reply::{FramePart, PendingReply, Reply, ResponseFrame};
use crate::request_context::RequestContext;
use crate::sasl::{GateStep, SaslGate};

/// Requests read ahead on one connection before its responses are written. Kafka clients keep
/// at most five produce requests in flight; 64 leaves room for pipelined metadata and fetches.
/// Past it the connection stops reading (backpressure) until a response goes out.
pub const CONNECTION_PIPELINE_MAX: usize = 64;
/// Response bytes held in memory for one connection, written or not yet read by the client,
/// past which the connection stops reading requests. Fetch records are streamed from the
/// segment files and do not count: this bounds metadata and small responses.
pub const CONNECTION_RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Frames up to this size are read without waiting for `queued.max.request.bytes`, so
/// fetches, metadata and heartbeats go on while large produce requests wait for memory; they
/// count against the connection's [`CONNECTION_REQUEST_BYTES_MAX`] instead.
pub const SMALL_FRAME_BYTES: u32 = 64 * 1024;
/// Bytes of small requests one connection may have in flight (long polls hold theirs for up to
/// 30 s); past it the connection is not read until some finish.
pub const CONNECTION_REQUEST_BYTES_MAX: usize = 1024 * 1024;
/// A frame holding part of `queued.max.request.bytes` whose client sends nothing for this long
/// is dropped with its connection, so a stalled client cannot keep memory from others.
pub const FRAME_STALL_MS: u64 = 15_000;
/// Bytes read from a segment file at a time when streaming fetch records to a client.
pub const STREAM_CHUNK_BYTES: usize = 64 * 1024;
/// Small responses are gathered into one write up to this size.
const COALESCE_BYTES_MAX: usize = 64 * 1024;
/// Time a client on an SSL listener has to finish its TLS handshake.
pub const TLS_HANDSHAKE_MS: u64 = 10_000;
/// Time given to connections to finish their in-flight requests at shutdown.
pub const SHUTDOWN_DRAIN_MS: u64 = 5_000;
/// Connections above their address's `connection_creation_rate` held open (unserved) at once
/// per listener, until their pause ends; more are closed at once.
const THROTTLED_CONNECTIONS_HELD_MAX: usize = 1024;

/// Lines about refused connections and accept failures.
static CONNECTION_WARNINGS: LineLimit = LineLimit::new();

/// Puts the connection limits in force as they change at runtime (they are dynamic broker
/// configs), until shutdown. Override host names are resolved here; a list that does not
/// resolve is logged and the limits in force are kept.
async fn follow_connection_settings(broker: Arc<Broker>, limits: Arc<ConnectionLimits>) {
    let mut settings = broker.runtime_settings();
    let mut shutdown = broker.shutdown.clone();
    let mut in_force = broker
        .config
        .runtime_settings(DynamicConfigs::none())
        .connections;
    loop {
        let wanted = settings.borrow_and_update().connections.clone();
        if wanted != in_force {
            match resolve_overrides(&wanted.per_ip_overrides).await {
                Ok(overrides) => {
                    let max_connections = limits.reconfigure(
                        wanted.max_connections,
                        wanted.max_connections_per_ip,
                        overrides,
                    );
                    if max_connections < wanted.max_connections {
                        tracing::warn!(target: "weir::server", asked = wanted.max_connections, kept = max_connections, "max.connections cannot rise above its value at startup (the open-file budget reserved that many)");
                    }
                    tracing::info!(target: "weir::server", max_connections = wanted.max_connections, max_connections_per_ip = wanted.max_connections_per_ip, overrides = wanted.per_ip_overrides.len(), "connection limits changed");
                    in_force = wanted;
                }
                Err(error) => {
                    tracing::error!(target: "weir::server", %error, "connection limits not changed");
                }
            }
        }
        tokio::select! {
            changed = settings.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = crate::shutdown::stopping(&mut shutdown) => return,
        }
    }
}

/// A bound Kafka listener, ready to serve.
pub struct BoundListener {
    /// The listener's name: requests that come in on it are answered with the other brokers'
    /// endpoints on the listener of the same name.
    pub name: Arc<str>,
    /// The bound socket.
    pub socket: TcpListener,
    /// The TLS of an SSL or SASL_SSL listener.
    pub tls: Option<Arc<ServerTls>>,
    /// The SASL mechanisms of a SASL_PLAINTEXT or SASL_SSL listener, whose clients
    /// authenticate before anything else.
    pub sasl: Option<Arc<[Mechanism]>>,
}

impl BoundListener {
    /// A PLAINTEXT listener of Kafka's default name.
    pub fn plaintext(socket: TcpListener) -> BoundListener {
        BoundListener {
            name: crate::broker::PLAINTEXT_LISTENER.into(),
            socket,
            tls: None,
            sasl: None,
        }
    }
}

/// Accepts connections on every listener until shutdown, then waits (bounded) for open ones
/// to drain. The connection limits count the connections of all listeners together.
pub async fn serve(
    broker: Arc<Broker>,
    listeners: Vec<BoundListener>,
    limits: Arc<ConnectionLimits>,
) {
    tokio::spawn(follow_connection_settings(broker.clone(), limits.clone()));
    let accepting: Vec<_> = listeners
        .into_iter()
        .map(|listener| tokio::spawn(accept(broker.clone(), listener, limits.clone())))
        .collect();
    for listener in accepting {
        let _ = listener.await;
    }
    let drained = tokio::time::timeout(
        Duration::from_millis(SHUTDOWN_DRAIN_MS),
        limits.all_closed(),
    )
    .await;
    if drained.is_err() {
        tracing::warn!(target: "weir::server", open = limits.open(), "connections still open after the shutdown drain period");
    }
}

/// Accepts one listener's connections until shutdown; an SSL listener's certificates are
/// reloaded when their files change meanwhile.
async fn accept(broker: Arc<Broker>, listener: BoundListener, limits: Arc<ConnectionLimits>) {
    let mut shutdown = broker.shutdown.clone();
    if let Some(tls) = &listener.tls {
        tokio::spawn(tls.clone().watch(
            listener.name.to_string(),
            RELOAD_CHECK_INTERVAL,
            broker.shutdown.clone(),
        ));
    }
    let held = Arc::new(Semaphore::new(THROTTLED_CONNECTIONS_HELD_MAX));
    loop {
        let accepted = tokio::select! {
            accepted = listener.socket.accept() => accepted,
            _ = crate::shutdown::stopping(&mut shutdown) => break,
        };
        match accepted {
            Ok((stream, peer)) => match limits.admit(peer.ip()) {
                Ok(slot) => {
                    let quotas = broker.image();
                    let pause = broker
                        .connection_rates
                        .admit(quotas.client_quotas(), peer.ip());
                    if !pause.is_zero() {
                        drop(slot);
                        throttle_connection(&broker, stream, peer, &listener.name, pause, &held);
                        continue;
                    }
                    broker
                        .metrics
                        .connections_accepted
                        .fetch_add(1, Ordering::Relaxed);
                    let context = RequestContext::anonymous(peer.ip(), listener.name.clone());
                    let sasl = listener.sasl.clone().map(SaslGate::new);
                    tokio::spawn(handle_connection(
                        broker.clone(),
                        stream,
                        peer,
                        context,
                        (listener.tls.clone(), sasl),
                        slot,
                    ));
                }
                Err(refusal) => {
                    drop(stream);
                    broker
                        .metrics
                        .connections_refused
                        .fetch_add(1, Ordering::Relaxed);
                    if let Some(suppressed) = CONNECTION_WARNINGS.admit() {
                        tracing::warn!(target: "weir::connections", %peer, listener = %listener.name, suppressed, "refused connection: {refusal}");
                    }
                }
            },
            Err(error) => {
                if let Some(suppressed) = CONNECTION_WARNINGS.admit() {
                    tracing::warn!(target: "weir::connections", %error, listener = %listener.name, suppressed, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Holds a connection from an address above its `connection_creation_rate` unserved for
/// `pause`, then closes it, as Kafka delays closing it (so that the client does not reconnect
/// at once); at most [`THROTTLED_CONNECTIONS_HELD_MAX`] per listener are held, the others
/// closed at once.
fn throttle_connection(
    broker: &Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    listener: &str,
    pause: Duration,
    held: &Arc<Semaphore>,
) {
    broker
        .metrics
        .connections_throttled
        .fetch_add(1, Ordering::Relaxed);
    if let Some(suppressed) = CONNECTION_WARNINGS.admit() {
        tracing::warn!(target: "weir::connections", %peer, %listener, suppressed, pause_ms = pause.as_millis() as u64, "closing a connection unserved: its address is above its connection_creation_rate");
    }
    let Ok(permit) = held.clone().try_acquire_owned() else {
        return;
    };
    let mut shutdown = broker.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = crate::shutdown::stopping(&mut shutdown) => {}
        }
        drop((stream, permit));
    });
}

/// When bytes last moved on a connection, in milliseconds since it opened.
struct Activity {
    opened: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = self.opened.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    /// Resolves once nothing has been read or written for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = self.opened + last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Bytes in memory for one connection (requests in flight, or responses not yet written), with
/// a limit the reader waits on before reading more.
struct ByteGate {
    outstanding: AtomicUsize,
    limit: usize,
    freed: Notify,
}

/// Bytes counted in a [`ByteGate`] until this is dropped.
struct Charge {
    gate: Arc<ByteGate>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.gate
            .outstanding
            .fetch_sub(self.bytes, Ordering::AcqRel);
        self.gate.freed.notify_waiters();
    }
}

impl ByteGate {
    fn new(limit: usize) -> Arc<ByteGate> {
        Arc::new(ByteGate {
            outstanding: AtomicUsize::new(0),
            limit,
            freed: Notify::new(),
        })
    }

    fn charge(self: &Arc<Self>, bytes: usize) -> Charge {
        self.outstanding.fetch_add(bytes, Ordering::AcqRel);
        Charge {
            gate: self.clone(),
            bytes,
        }
    }

    /// Returns once the outstanding bytes are within the limit.
    async fn within_limit(&self) {
        loop {
            let freed = self.freed.notified();
            if self.outstanding.load(Ordering::Acquire) <= self.limit {
                return;
            }
            freed.await;
        }
    }
}

/// A request's reply task, cancelled if the connection goes before the reply is written.
struct ReplyTask(JoinHandle<(Reply, Option<Charge>)>);

impl Drop for ReplyTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How a connection's read loop ended.
enum Ending {
    /// The client closed, or the server is stopping: finish writing what is pending.
    Drain,
    /// Bad input or idleness: close now.
    Close,
}

/// Serves one accepted connection, after its TLS handshake on an SSL listener; on a SASL
/// listener its client authenticates first.
async fn handle_connection(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    mut context: RequestContext,
    (tls, sasl): (Option<Arc<ServerTls>>, Option<SaslGate>),
    _slot: ConnectionSlot,
) {
    tracing::debug!(target: "weir::server", %peer, listener = %context.listener, "connection opened");
    let _open = OpenConnection::count(&broker);
    let _ = stream.set_nodelay(true);
    match tls {
        None => {
            let (reader, writer) = stream.into_split();
            serve_connection(broker, reader, writer, peer, (context, sasl)).await;
        }
        Some(tls) => {
            let deadline = Duration::from_millis(TLS_HANDSHAKE_MS);
            match tls.accept(stream, deadline).await {
                Ok(stream) => {
                    // A client certificate names the client, as in Kafka (a SASL login on
                    // SASL_SSL names it again).
                    if let Some(subject) = weir_tls::client_subject(&stream) {
                        context.principal = Arc::from(format!("User:{subject}"));
                    }
                    let (reader, writer) = tokio::io::split(stream);
                    serve_connection(broker, reader, writer, peer, (context, sasl)).await;
                }
                Err(error) => {
                    broker
                        .metrics
                        .tls_handshakes_failed
                        .fetch_add(1, Ordering::Relaxed);
                    warn_bad_input(
                        &peer.to_string(),
                        &format!(
                            "closing connection on listener {}: TLS handshake failed: {error}",
                            context.listener
                        ),
                    );
                }
            }
        }
    }
    tracing::debug!(target: "weir::server", %peer, "connection closed");
}

/// Reads requests and writes responses on one connection until it ends.
async fn serve_connection<R, W>(
    broker: Arc<Broker>,
    mut reader: R,
    writer: W,
    peer: SocketAddr,
    (mut context, mut sasl): (RequestContext, Option<SaslGate>),
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let gates = Gates {
        requests: ByteGate::new(CONNECTION_REQUEST_BYTES_MAX),
        responses: ByteGate::new(CONNECTION_RESPONSE_BYTES_MAX),
    };
    let (queue, pending) = mpsc::channel::<ReplyTask>(CONNECTION_PIPELINE_MAX);
    let mut writer_task = tokio::spawn(write_responses(
        broker.clone(),
        writer,
        pending,
        activity.clone(),
    ));
    let idle = Duration::from_millis(broker.config.connections_max_idle_ms);
    let ending = tokio::select! {
        ending = read_requests(&broker, &mut reader, (&peer, &mut context, &mut sasl), &queue, &activity, &gates) => ending,
        _ = activity.idle_for(idle) => {
            tracing::debug!(target: "weir::server", %peer, idle_ms = idle.as_millis() as u64, "closing idle connection");
            Ending::Close
        }
    };
    drop(queue);
    handlers::share_fetch::connection_closed(&broker, &context.share_sessions);
    match ending {
        Ending::Drain => {
            tokio::select! {
                _ = &mut writer_task => {}
                _ = activity.idle_for(idle) => writer_task.abort(),
            }
        }
        Ending::Close => writer_task.abort(),
    }
}

/// Counts a connection as open for as long as it lives.
struct OpenConnection(Arc<Broker>);

impl OpenConnection {
    fn count(broker: &Arc<Broker>) -> OpenConnection {
        broker
            .metrics
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        OpenConnection(broker.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0
            .metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection's byte limits.
struct Gates {
    /// Small requests in flight.
    requests: Arc<ByteGate>,
    /// Responses in memory not yet written.
    responses: Arc<ByteGate>,
}

/// Waits until the connection's client is no longer throttled; false when the broker stops
/// first.
async fn unmuted(
    context: &RequestContext,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    if !context.mute.is_muted() {
        return true;
    }
    tokio::select! {
        _ = context.mute.passed() => true,
        _ = crate::shutdown::stopping(shutdown) => false,
    }
}

async fn read_requests(
    broker: &Arc<Broker>,
    reader: &mut (impl AsyncRead + Unpin),
    (peer, context, sasl): (&SocketAddr, &mut RequestContext, &mut Option<SaslGate>),
    queue: &mpsc::Sender<ReplyTask>,
    activity: &Arc<Activity>,
    gates: &Gates,
) -> Ending {
    let max_bytes = broker.config.socket_request_max_bytes;
    // Until a SASL client has logged in it may send only small frames.
    let unauthenticated_max_bytes = max_bytes.min(broker.config.sasl_max_receive_bytes);
    let mut shutdown = broker.shutdown.clone();
    loop {
        // Backpressure: read no more while the client leaves responses unread or has too many
        // requests in flight.
        gates.responses.within_limit().await;
        gates.requests.within_limit().await;
        let frame_max = match sasl.as_ref().is_some_and(|gate| !gate.authenticated()) {
            true => unauthenticated_max_bytes,
            false => max_bytes,
        };
        // A client its quota throttled: nothing more is read until its time is up (KIP-219).
        if !unmuted(context, &mut shutdown).await {
            return Ending::Drain;
        }
        let frame = tokio::select! {
            frame = read_frame(reader, frame_max, &broker.request_memory, &gates.requests, activity) => frame,
            _ = crate::shutdown::stopping(&mut shutdown) => return Ending::Drain,
        };
        let (frame, held) = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => return Ending::Drain,
            Err(error) => {
                broker.metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
                warn_bad_input(&peer.to_string(), &format!("closing connection: {error}"));
                return Ending::Close;
            }
        };
        // A response answered while this frame was awaited (a fetch) may have throttled the
        // client meanwhile: the request waits out the pause too.
        if !unmuted(context, &mut shutdown).await {
            return Ending::Drain;
        }
        broker
            .metrics
            .bytes_in
            .fetch_add(frame.len() as u64 + 4, Ordering::Relaxed);
        let started = Instant::now();
        let mut api = None;
        let mut close_after = false;
        let pending: PendingReply = match decode_request(frame) {
            Ok(request) => {
                api = Some(request.api_key);
                match sasl.as_mut().filter(|gate| !gate.authenticated()) {
                    None => handlers::dispatch(broker, request, context).await,
                    Some(gate) => match gate.take(broker, request, context.peer).await {
                        GateStep::Dispatch(request) => {
                            handlers::dispatch(broker, *request, context).await
                        }
                        GateStep::Answer(reply) => {
                            if let Some(principal) = gate.principal() {
                                context.principal = principal.clone();
                            }
                            reply
                        }
                        GateStep::AnswerAndClose(reply) => {
                            close_after = true;
                            reply
                        }
                        GateStep::Close(reason) => {
                            broker.metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
                            warn_bad_input(
                                &peer.to_string(),
                                &format!("closing connection: {reason}"),
                            );
                            return Ending::Close;
                        }
                    },
                }
            }
            Err(DecodeError::UnsupportedApiVersionsVersion {
                correlation_id,
                version,
            }) => {
                tracing::debug!(target: "weir::server", %peer, version, "ApiVersions above supported range; answering in v0");
                let body = api_versions_response(ResponseError::UnsupportedVersion.code());
                let frame = encode_response(
                    ApiKey::ApiVersions,
                    0,
                    correlation_id,
                    &ResponseKind::ApiVersions(body),
                );
                Box::pin(async move {
                    frame.map_or(Reply::Close, |f| Reply::Frame(ResponseFrame::bytes(f)))
                })
            }
            Err(error) => {
                broker.metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
                warn_bad_input(&peer.to_string(), &format!("closing connection: {error}"));
                return Ending::Close;
            }
        };
        let responses = gates.responses.clone();
        let counted = broker.clone();
        let reply = tokio::spawn(async move {
            let reply = pending.await;
            if let Some(api) = api {
                let metrics = counted.metrics.api(api);
                metrics.requests.fetch_add(1, Ordering::Relaxed);
                metrics.latency.observe(started.elapsed());
            }
            // The request's bytes (and their share of the memory limits) are free now.
            drop(held);
            let charge = match &reply {
                Reply::Frame(frame) => Some(responses.charge(frame.memory_bytes())),
                _ => None,
            };
            (reply, charge)
        });
        if queue.send(ReplyTask(reply)).await.is_err() {
            return Ending::Close;
        }
        if close_after {
            return Ending::Drain;
        }
    }
}

/// What a request frame holds while it is in flight, released when dropped: its share of
/// `queued.max.request.bytes` (a large frame) or of the connection's small-request bytes.
enum Held {
    Shared { _permit: OwnedSemaphorePermit },
    Connection { _charge: Charge },
}

/// Reads one request frame. A frame up to [`SMALL_FRAME_BYTES`] counts against the
/// connection's small-request bytes; a larger one first takes its whole length from `budget`
/// (`queued.max.request.bytes`; all at once, so frames never wait holding part of it), and
/// when the budget is spent this socket is simply not read until memory frees. A sender that
/// stalls for [`FRAME_STALL_MS`] is dropped.
async fn read_frame(
    reader: &mut (impl AsyncRead + Unpin),
    max_bytes: u32,
    budget: &Arc<Semaphore>,
    small: &Arc<ByteGate>,
    activity: &Activity,
) -> Result<Option<(Bytes, Held)>, FrameError> {
    let Some(length) = read_frame_length(reader, max_bytes).await? else {
        return Ok(None);
    };
    activity.touch();
    let held = if length <= SMALL_FRAME_BYTES {
        Held::Connection {
            _charge: small.charge(length as usize),
        }
    } else {
        // `length` ≤ socket.request.max.bytes ≤ queued.max.request.bytes (checked at startup):
        // the acquire can always be satisfied.
        let permit = budget
            .clone()
            .acquire_many_owned(length)
            .await
            .map_err(|_| FrameError::Truncated)?;
        Held::Shared { _permit: permit }
    };
    let length = length as usize;
    // The memory is accounted for in full: allocate it at once (pages are only touched, and
    // counted by the kernel, as bytes arrive), so the buffer never moves.
    let mut body: Vec<u8> = Vec::with_capacity(length);
    let stall = Duration::from_millis(FRAME_STALL_MS);
    while body.len() < length {
        let mut limited = (&mut *reader).take((length - body.len()) as u64);
        let n = match tokio::time::timeout(stall, limited.read_buf(&mut body)).await {
            Ok(n) => n?,
            Err(_) => {
                return Err(FrameError::Stalled {
                    length: length as u32,
                    stalled_ms: FRAME_STALL_MS,
                })
            }
        };
        if n == 0 {
            return Err(FrameError::Truncated);
        }
        activity.touch();
    }
    Ok(Some((Bytes::from(body), held)))
}

/// Writes `bytes` fully, noting progress as it goes (a client that reads slowly is not idle).
/// A TLS stream may keep encrypted bytes back until flushed, so every write ends with one.
async fn write_tracked(
    writer: &mut (impl AsyncWrite + Unpin),
    bytes: &[u8],
    activity: &Activity,
) -> std::io::Result<()> {
    let mut written = 0;
    while written < bytes.len() {
        let n = writer.write(&bytes[written..]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        written += n;
        activity.touch();
    }
    writer.flush().await
}

/// Streams a fetch's records from its segment file: a chunk is read on a blocking thread, then
/// written, so at most one chunk per connection is in memory.
async fn stream_slice(
    writer: &mut (impl AsyncWrite + Unpin),
    slice: ReadSlice,
    chunk: &mut Vec<u8>,
    activity: &Activity,
) -> Result<(), String> {
    let mut offset = 0u64;
    while offset < slice.len() {
        let n = (slice.len() - offset).min(STREAM_CHUNK_BYTES as u64) as usize;
        let mut buffer = std::mem::take(chunk);
        buffer.resize(n, 0);
        let part = slice.clone();
        let read = tokio::task::spawn_blocking(move || {
            let result = part.read_at(offset, &mut buffer);
            (result, buffer)
        })
        .await
        .map_err(|e| e.to_string())?;
        let (result, buffer) = read;
        result.map_err(|e| format!("reading fetch records: {e}"))?;
        write_tracked(writer, &buffer, activity)
            .await
            .map_err(|e| e.to_string())?;
        *chunk = buffer;
        offset += n as u64;
    }
    Ok(())
}

/// Writes responses in request order, gathering small ones into one write. Gathered bytes go
/// out as soon as the next response is not ready yet (a long poll must not hold back the
/// answers before it) or nothing else is queued.
async fn write_responses(
    broker: Arc<Broker>,
    mut writer: impl AsyncWrite + Unpin,
    mut pending: mpsc::Receiver<ReplyTask>,
    activity: Arc<Activity>,
) {
    let mut out: Vec<u8> = Vec::new();
    let mut chunk: Vec<u8> = Vec::new();
    while let Some(mut task) = pending.recv().await {
        if !task.0.is_finished() {
            if write_tracked(&mut writer, &out, &activity).await.is_err() {
                return;
            }
            out.clear();
        }
        let (reply, charge) = match (&mut task.0).await {
            Ok(done) => done,
            Err(error) => {
                tracing::error!(target: "weir::server", %error, "request handler failed; closing connection");
                return;
            }
        };
        let frame = match reply {
            Reply::Frame(frame) => frame,
            Reply::NoResponse => continue,
            Reply::Close => {
                let _ = write_tracked(&mut writer, &out, &activity).await;
                return;
            }
        };
        broker
            .metrics
            .bytes_out
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        for part in frame.into_parts() {
            let result = match part {
                FramePart::Bytes(bytes) if out.len() + bytes.len() <= COALESCE_BYTES_MAX => {
                    out.extend_from_slice(&bytes);
                    Ok(())
                }
                FramePart::Bytes(bytes) => {
                    let flushed = write_tracked(&mut writer, &out, &activity).await;
                    out.clear();
                    match flushed {
                        Ok(()) => write_tracked(&mut writer, &bytes, &activity)
                            .await
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
                FramePart::Slice(slice) => {
                    let flushed = write_tracked(&mut writer, &out, &activity).await;
                    out.clear();
                    match flushed {
                        Ok(()) => stream_slice(&mut writer, slice, &mut chunk, &activity).await,
                        Err(e) => Err(e.to_string()),
                    }
                }
            };
            if let Err(error) = result {
                // A frame cut short cannot be resumed: the client sees the connection close.
                tracing::debug!(target: "weir::server", error, "response not written; closing connection");
                return;
            }
        }
        drop(charge);
        if pending.is_empty() {
            if write_tracked(&mut writer, &out, &activity).await.is_err() {
                return;
            }
            // Idle connections keep no buffers.
            out = Vec::new();
            chunk = Vec::new();
        }
    }
    let _ = write_tracked(&mut writer, &out, &activity).await;
}
