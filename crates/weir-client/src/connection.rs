//! One TCP connection to one broker, in TLS when the listener speaks it: version negotiation,
//! then pipelined requests whose responses are matched in order (Kafka answers every
//! connection in request order).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use weir_proto::{decode_response, encode_request, response_correlation_id};

use crate::error::{ClientError, Result};

/// Requests queued for the socket writer; past it, callers wait (backpressure).
const WRITE_QUEUE_MAX: usize = 256;
/// Largest response frame accepted (a fetch is bounded by its `max_bytes`).
const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

type Reply = oneshot::Sender<Result<Bytes>>;

/// The replies a connection's reader owes, in the order their requests were written. Once the
/// reader has stopped, `closed` says why: a request written after that could never be
/// answered, so its caller hears at once instead of waiting out its request timeout.
#[derive(Default)]
struct Awaiting {
    replies: VecDeque<(i32, Reply)>,
    closed: Option<ClientError>,
}

type SharedAwaiting = Arc<Mutex<Awaiting>>;

fn lock(awaiting: &SharedAwaiting) -> std::sync::MutexGuard<'_, Awaiting> {
    awaiting.lock().unwrap_or_else(|e| e.into_inner())
}

struct Outgoing {
    frame: Bytes,
    correlation_id: i32,
    reply: Option<Reply>,
    /// Told once the frame is written, for requests without a response (acks=0).
    written: Option<oneshot::Sender<()>>,
}

/// A request on the wire whose response has not been read yet.
pub struct PendingResponse {
    api_key: ApiKey,
    version: i16,
    reply: oneshot::Receiver<Result<Bytes>>,
    timeout: Duration,
    broker: String,
}

impl PendingResponse {
    /// Waits (up to the request timeout) for the response and decodes it.
    pub async fn response<Resp: Decodable>(self) -> Result<Resp> {
        let closed = || ClientError::Connection {
            broker: self.broker.clone(),
            reason: "connection closed".into(),
        };
        let bytes = tokio::time::timeout(self.timeout, self.reply)
            .await
            .map_err(|_| ClientError::Timeout(self.timeout.as_millis() as u64))?
            .map_err(|_| closed())??;
        decode_response(self.api_key, self.version, bytes)
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }
}

/// A connection to one broker.
pub struct Connection {
    address: String,
    client_id: String,
    outgoing: mpsc::Sender<Outgoing>,
    awaiting: SharedAwaiting,
    next_correlation_id: AtomicI32,
    versions: HashMap<i16, (i16, i16)>,
    request_timeout: Duration,
}

impl Connection {
    /// Connects, negotiates API versions and starts the reader and writer tasks.
    pub async fn connect(
        address: &str,
        client_id: &str,
        request_timeout: Duration,
    ) -> Result<Arc<Connection>> {
        Connection::open(address, client_id, request_timeout, None).await
    }

    /// [`Connection::connect`], in TLS with `tls` when given (the broker's certificate must
    /// name the host of `address`).
    pub(crate) async fn open(
        address: &str,
        client_id: &str,
        request_timeout: Duration,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<Arc<Connection>> {
        let fail = |reason: String| ClientError::Connection {
            broker: address.to_string(),
            reason,
        };
        let stream = tokio::time::timeout(request_timeout, TcpStream::connect(address))
            .await
            .map_err(|_| ClientError::Timeout(request_timeout.as_millis() as u64))?
            .map_err(|e| fail(e.to_string()))?;
        // Connecting to a closed local port in the ephemeral range can connect the socket to
        // itself (TCP simultaneous open); that is no broker, and would hold the port the broker
        // restarts on.
        if stream.local_addr().ok() == stream.peer_addr().ok() {
            return Err(fail("connected to itself: nothing listens there".into()));
        }
        let _ = stream.set_nodelay(true);
        let (outgoing, queue) = mpsc::channel(WRITE_QUEUE_MAX);
        let awaiting = SharedAwaiting::default();
        match tls {
            None => {
                let (reader, writer) = stream.into_split();
                spawn_loops(reader, writer, queue, &awaiting, address);
            }
            Some(config) => {
                let stream = weir_tls::connect(config, address, stream, request_timeout)
                    .await
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::TimedOut => {
                            ClientError::Timeout(request_timeout.as_millis() as u64)
                        }
                        std::io::ErrorKind::InvalidInput => fail(e.to_string()),
                        _ => ClientError::Tls {
                            broker: address.to_string(),
                            reason: format!("handshake failed: {e}"),
                        },
                    })?;
                let (reader, writer) = tokio::io::split(stream);
                spawn_loops(reader, writer, queue, &awaiting, address);
            }
        }
        let mut connection = Connection {
            address: address.to_string(),
            client_id: client_id.to_string(),
            outgoing,
            awaiting,
            next_correlation_id: AtomicI32::new(1),
            versions: HashMap::new(),
            request_timeout,
        };
        let mut request = ApiVersionsRequest::default();
        request.client_software_name = StrBytes::from_static_str("weir-client");
        request.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        let mut response: ApiVersionsResponse = connection
            .call_at(ApiKey::ApiVersions, 3, &request)
            .await
            .map_err(|error| match error {
                // A listener that wants a client certificate refuses the session after the
                // handshake, at the first read.
                ClientError::Connection { broker, reason } if tls.is_some() => ClientError::Tls {
                    broker,
                    reason: format!("the broker ended the session: {reason}"),
                },
                error => error,
            })?;
        if response.error_code != 0 {
            // An older broker answers UNSUPPORTED_VERSION in the v0 layout; retry at v0.
            response = connection
                .call_at(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())
                .await?;
        }
        if let Some(error) = ClientError::from_code(response.error_code, None) {
            return Err(error);
        }
        connection.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(Arc::new(connection))
    }

    /// The version to use for `api_key`: the highest both sides support, capped at `max`.
    pub fn version_for(&self, api_key: ApiKey, min: i16, max: i16) -> Result<i16> {
        let (broker_min, broker_max) = self
            .versions
            .get(&(api_key as i16))
            .copied()
            .ok_or_else(|| ClientError::Unsupported(format!("{api_key:?}")))?;
        let version = broker_max.min(max);
        if version < min.max(broker_min) {
            return Err(ClientError::Unsupported(format!(
                "{api_key:?} v{min}..={max} (broker has v{broker_min}..={broker_max})"
            )));
        }
        Ok(version)
    }

    /// Sends a request at `version` and waits for its response.
    pub async fn call_at<Req: Encodable, Resp: Decodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp> {
        let pending = self.begin(api_key, version, request).await?;
        pending.response().await
    }

    /// Queues a request on the socket and returns its pending response. Requests begun in
    /// order reach the broker in that order, whatever order their responses are awaited in.
    pub async fn begin<Req: Encodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<PendingResponse> {
        let reply = self
            .send(api_key, version, request, true)
            .await?
            .ok_or(ClientError::Closed)?;
        Ok(PendingResponse {
            api_key,
            version,
            reply,
            timeout: self.request_timeout,
            broker: self.address.clone(),
        })
    }

    /// Sends a request with the highest version both sides support within `max`.
    pub async fn call<Req: Encodable + Message, Resp: Decodable>(
        &self,
        api_key: ApiKey,
        max: i16,
        request: &Req,
    ) -> Result<Resp> {
        let version = self.version_for(api_key, Req::VERSIONS.min, max)?;
        self.call_at(api_key, version, request).await
    }

    /// Sends a request that gets no response (Produce with acks=0).
    pub async fn send_only<Req: Encodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<()> {
        let (written, on_written) = oneshot::channel();
        self.enqueue(api_key, version, request, None, Some(written))
            .await?;
        // Return only once the bytes are on the socket, so a caller that exits right after an
        // acks=0 send does not lose it.
        on_written.await.map_err(|_| self.closed())
    }

    async fn send<Req: Encodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
        expect_reply: bool,
    ) -> Result<Option<oneshot::Receiver<Result<Bytes>>>> {
        if !expect_reply {
            self.enqueue(api_key, version, request, None, None).await?;
            return Ok(None);
        }
        let (reply, receiver) = oneshot::channel();
        self.enqueue(api_key, version, request, Some(reply), None)
            .await?;
        Ok(Some(receiver))
    }

    async fn enqueue<Req: Encodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
        reply: Option<Reply>,
        written: Option<oneshot::Sender<()>>,
    ) -> Result<()> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_request(api_key, version, correlation_id, &self.client_id, request)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.outgoing
            .send(Outgoing {
                frame,
                correlation_id,
                reply,
                written,
            })
            .await
            .map_err(|_| self.closed())
    }

    fn closed(&self) -> ClientError {
        ClientError::Connection {
            broker: self.address.clone(),
            reason: "connection closed".into(),
        }
    }

    /// True once the connection has failed; a new one must be made.
    pub fn is_closed(&self) -> bool {
        self.outgoing.is_closed() || lock(&self.awaiting).closed.is_some()
    }
}

/// Starts the tasks that write `queue`'s frames to `writer` and read the answers.
fn spawn_loops(
    reader: impl AsyncRead + Unpin + Send + 'static,
    writer: impl AsyncWrite + Unpin + Send + 'static,
    queue: mpsc::Receiver<Outgoing>,
    awaiting: &SharedAwaiting,
    address: &str,
) {
    tokio::spawn(write_loop(
        writer,
        queue,
        awaiting.clone(),
        address.to_string(),
    ));
    tokio::spawn(read_loop(reader, awaiting.clone(), address.to_string()));
}

async fn write_loop(
    mut writer: impl AsyncWrite + Unpin,
    mut queue: mpsc::Receiver<Outgoing>,
    awaiting: SharedAwaiting,
    address: String,
) {
    while let Some(item) = queue.recv().await {
        if let Some(reply) = item.reply {
            let mut awaiting = lock(&awaiting);
            if let Some(error) = &awaiting.closed {
                let _ = reply.send(Err(error.clone()));
                break;
            }
            awaiting.replies.push_back((item.correlation_id, reply));
        }
        // TLS holds what is written until flushed.
        let written = async {
            writer.write_all(&item.frame).await?;
            writer.flush().await
        };
        if let Err(error) = written.await {
            tracing::debug!(target: "weir::client", %address, %error, "write failed");
            break;
        }
        if let Some(written) = item.written {
            let _ = written.send(());
        }
    }
    queue.close();
}

async fn read_loop(mut reader: impl AsyncRead + Unpin, awaiting: SharedAwaiting, address: String) {
    let failure = loop {
        let length = match reader.read_i32().await {
            Ok(length) => length,
            Err(error) => break error.to_string(),
        };
        if length < 4 || length as usize > RESPONSE_BYTES_MAX {
            break format!("response length {length} out of range");
        }
        let mut frame = vec![0u8; length as usize];
        if let Err(error) = reader.read_exact(&mut frame).await {
            break error.to_string();
        }
        let frame = Bytes::from(frame);
        let next = lock(&awaiting).replies.pop_front();
        match next {
            Some((correlation_id, reply))
                if response_correlation_id(&frame) == Some(correlation_id) =>
            {
                let _ = reply.send(Ok(frame));
            }
            Some((correlation_id, _)) => {
                break format!("response out of order (expected correlation id {correlation_id})")
            }
            None => break "unexpected response".to_string(),
        }
    };
    tracing::debug!(target: "weir::client", %address, reason = %failure, "connection closed");
    let error = ClientError::Connection {
        broker: address,
        reason: failure,
    };
    let mut awaiting = lock(&awaiting);
    for (_, reply) in awaiting.replies.drain(..) {
        let _ = reply.send(Err(error.clone()));
    }
    awaiting.closed = Some(error);
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use kafka_protocol::messages::ResponseKind;

    use super::*;

    /// A broker that answers the version handshake, then hangs up.
    async fn broker_that_hangs_up() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        let broker = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let length = socket.read_i32().await.expect("length");
            let mut frame = vec![0u8; length as usize];
            socket.read_exact(&mut frame).await.expect("frame");
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            let body = ResponseKind::ApiVersions(weir_proto::api::api_versions_response(0));
            let answer =
                weir_proto::encode_response(ApiKey::ApiVersions, version, correlation_id, &body)
                    .expect("encode");
            socket.write_all(&answer).await.expect("answer");
        });
        (address, broker)
    }

    #[tokio::test]
    async fn a_request_after_the_broker_hung_up_fails_at_once() {
        let (address, broker) = broker_that_hangs_up().await;
        let request_timeout = Duration::from_secs(30);
        let connection = Connection::connect(&address, "test", request_timeout)
            .await
            .expect("connect");
        broker.await.expect("the broker answered and hung up");

        let deadline = Instant::now() + Duration::from_secs(5);
        while !connection.is_closed() {
            assert!(
                Instant::now() < deadline,
                "the connection still looks open 5 s after the broker hung up"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A caller holding the connection from before hears at once, not after 30 s.
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            connection.call_at::<_, ApiVersionsResponse>(
                ApiKey::ApiVersions,
                3,
                &ApiVersionsRequest::default(),
            ),
        )
        .await;
        assert!(
            matches!(answer, Ok(Err(_))),
            "a request on a connection whose broker hung up waited for its timeout"
        );
    }
}
