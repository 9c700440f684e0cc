//! The Kafka listener: accepts connections, reads frames, runs requests concurrently and writes
//! responses back in request order.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use weir_proto::api::api_versions_response;
use weir_proto::{decode_request, encode_response, read_frame, DecodeError};

use crate::bad_input::warn_bad_input;
use crate::broker::Broker;
use crate::handlers;

/// Requests read ahead on one connection before its responses are written. Kafka clients keep
/// at most five produce requests in flight; 64 leaves room for pipelined metadata and fetches.
/// Past it the connection stops reading (backpressure) until a response goes out.
pub const CONNECTION_PIPELINE_MAX: usize = 64;
/// Open connections accepted at once; further clients wait in the accept queue.
pub const CONNECTIONS_MAX: u32 = 10_000;
/// Time given to connections to finish their in-flight requests at shutdown.
pub const SHUTDOWN_DRAIN_MS: u64 = 5_000;

/// The future of one response: `None` when the request gets no response (Produce with acks=0).
pub type PendingResponse = Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>;

/// Accepts connections until shutdown, then waits (bounded) for open ones to drain.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX as usize));
    let mut shutdown = broker.shutdown.clone();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit,
            _ = crate::broker::stopping(&mut shutdown) => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = crate::broker::stopping(&mut shutdown) => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                let broker = broker.clone();
                tokio::spawn(async move {
                    handle_connection(broker, stream, peer.to_string()).await;
                    drop(permit);
                });
            }
            Err(error) => {
                tracing::warn!(target: "weir::server", %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(
        Duration::from_millis(SHUTDOWN_DRAIN_MS),
        slots.acquire_many(CONNECTIONS_MAX),
    )
    .await;
    if drained.is_err() {
        tracing::warn!(target: "weir::server", "connections still open after the shutdown drain period");
    }
}

async fn handle_connection(broker: Arc<Broker>, stream: TcpStream, peer: String) {
    tracing::debug!(target: "weir::server", %peer, "connection opened");
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let (responses, pending) = mpsc::channel::<JoinHandle<Option<Bytes>>>(CONNECTION_PIPELINE_MAX);
    let writer_task = tokio::spawn(write_responses(writer, pending));
    let max_bytes = broker.config.socket_request_max_bytes();
    let mut shutdown = broker.shutdown.clone();
    loop {
        let frame = tokio::select! {
            frame = read_frame(&mut reader, max_bytes) => frame,
            _ = crate::broker::stopping(&mut shutdown) => break,
        };
        let frame = match frame {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(error) => {
                warn_bad_input(&peer, &format!("closing connection: {error}"));
                break;
            }
        };
        let response = match decode_request(frame) {
            Ok(request) => handlers::dispatch(&broker, request),
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
                    &kafka_protocol::messages::ResponseKind::ApiVersions(body),
                );
                Box::pin(async move { frame.ok() })
            }
            Err(error) => {
                warn_bad_input(&peer, &format!("closing connection: {error}"));
                break;
            }
        };
        if responses.send(tokio::spawn(response)).await.is_err() {
            break;
        }
    }
    drop(responses);
    let _ = writer_task.await;
    tracing::debug!(target: "weir::server", %peer, "connection closed");
}

/// Writes responses in request order, flushing when no further response is ready.
async fn write_responses(
    writer: OwnedWriteHalf,
    mut pending: mpsc::Receiver<JoinHandle<Option<Bytes>>>,
) {
    let mut writer = BufWriter::with_capacity(64 * 1024, writer);
    while let Some(handle) = pending.recv().await {
        let response = match handle.await {
            Ok(response) => response,
            Err(error) => {
                tracing::error!(target: "weir::server", %error, "request handler failed; closing connection");
                return;
            }
        };
        if let Some(bytes) = response {
            if writer.write_all(&bytes).await.is_err() {
                return;
            }
        }
        if pending.is_empty() && writer.flush().await.is_err() {
            return;
        }
    }
    let _ = writer.flush().await;
}
