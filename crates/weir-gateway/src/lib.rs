//! `weir-gateway` is Weir over HTTP: a JSON REST API (topics, publish, read, consumer groups,
//! cluster status) described by an OpenAPI document, Prometheus metrics, health checks, and the
//! web console, served by `weir server` on `--http-listen`.
//!
//! It changes nothing by itself: every read and write goes to the cluster through the Kafka
//! protocol (`weir-client`, bootstrapped from this node's own listener), so an HTTP request
//! follows the same leaders, checks and limits as a Kafka client's, wherever the partition
//! lives. Metrics and health are read from this node's broker and controller in process,
//! through the port the gateway owns ([`NodeView`]), implemented by the binary.

mod auth;
mod cluster;
mod console;
mod consumers;
mod error;
mod extract;
mod groups;
mod metrics;
mod node;
mod records;
mod stall;
mod topics;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use weir_client::{Admin, ClientConfig, Security};
use weir_proto::connection_limits::{ConnectionLimits, ConnectionSlot};

pub use error::ApiError;
pub use node::{
    ApiStats, BrokerStats, Histogram, HotPartitionStats, NodeView, PartitionStats, RaftView,
    ShareStats, ThrottleStats,
};

/// Largest request body accepted (a publish of many records); larger ones get 413.
pub const REQUEST_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// HTTP connections served at once; more go to the probe lane.
pub const CONNECTIONS_MAX: u32 = 1024;
/// HTTP connections from one address at once (a quarter of [`CONNECTIONS_MAX`]), so one
/// address cannot hold them all; more go to the probe lane.
pub const CONNECTIONS_PER_ADDRESS_MAX: u32 = 256;
/// A client must send a request's headers within this long (and an idle keep-alive
/// connection is closed after it).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served when the gateway (or their address's share) is full: one request each,
/// and only the health checks and `/metrics` are answered, so a liveness probe never fails
/// because others hold the gateway. More are closed as they arrive.
pub const PROBE_CONNECTIONS_MAX: u32 = 32;
/// Probe-lane connections from one address at once.
pub const PROBE_CONNECTIONS_PER_ADDRESS_MAX: u32 = 4;
/// A probe-lane connection must send its request's headers within this long.
const PROBE_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a request may run (a long poll, a publish waiting for acks) before it is answered
/// with 504.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(60);

/// What the gateway serves from: this node (its broker and controller, as [`NodeView`]
/// shows them), and a Kafka client of the cluster bootstrapped from this node's listener.
pub struct Gateway {
    node: Arc<dyn NodeView>,
    admin: Admin,
    publisher: records::Publisher,
    consumers: Arc<consumers::Instances>,
    /// True once the Kafka listener accepts connections (readiness).
    serving: watch::Receiver<bool>,
    /// Paths served without credentials when the authorizer is on.
    open_paths: Vec<String>,
    /// Passwords recently checked.
    logins: Arc<auth::VerifiedLogins>,
    /// Failed logins and logins being checked, by address.
    login_limits: Arc<weir_sasl::logins::Logins>,
}

impl Gateway {
    /// A gateway for `node`, whose Kafka listener is at `bootstrap` and connected to as
    /// `security` says (the broker's inter-broker TLS and login); `serving` turns true when
    /// that listener accepts connections. With the authorizer on, `open_paths` are served
    /// without credentials.
    pub fn new(
        node: Arc<dyn NodeView>,
        bootstrap: &str,
        security: &Security,
        serving: watch::Receiver<bool>,
        open_paths: Vec<String>,
    ) -> Arc<Gateway> {
        let mut client = ClientConfig::new(bootstrap);
        client.security = security.clone();
        client.client_id = "weir-http".to_string();
        client.request_timeout = Duration::from_secs(30);
        let consumers = Arc::new(consumers::Instances::default());
        tokio::spawn(consumers::Instances::reap_idle(Arc::downgrade(&consumers)));
        Arc::new(Gateway {
            node,
            admin: Admin::new(client.clone()),
            publisher: records::Publisher::new(client),
            consumers,
            serving,
            open_paths,
            logins: Arc::default(),
            login_limits: Arc::default(),
        })
    }

    /// The API's routes, bound to this gateway.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/", get(console::index))
            .route("/console/app.js", get(console::script))
            .route("/console/style.css", get(console::style))
            .route("/health/live", get(cluster::live))
            .route("/health/ready", get(cluster::ready))
            .route("/metrics", get(metrics::scrape))
            .route("/openapi.json", get(openapi))
            .route("/cluster", get(cluster::status))
            .route("/topics", get(topics::list).post(topics::create))
            .route(
                "/topics/{topic}",
                get(topics::describe).delete(topics::delete),
            )
            .route(
                "/topics/{topic}/configs",
                get(topics::configs).patch(topics::alter_configs),
            )
            .route("/topics/{topic}/partitions", post(topics::add_partitions))
            .route("/topics/{topic}/publish", post(records::publish))
            .route(
                "/topics/{topic}/partitions/{partition}/records",
                get(records::read),
            )
            .route("/groups", get(groups::list))
            .route("/groups/{group}", get(groups::describe))
            .route("/groups/{group}/consumers", post(consumers::create))
            .route(
                "/groups/{group}/consumers/{instance}",
                delete(consumers::delete),
            )
            .route(
                "/groups/{group}/consumers/{instance}/records",
                get(consumers::poll),
            )
            .route(
                "/groups/{group}/consumers/{instance}/commit",
                post(consumers::commit),
            )
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .layer(DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
            .layer(middleware::from_fn_with_state(
                self.clone(),
                auth::authenticate,
            ))
            .layer(middleware::from_fn(within_deadline))
            .with_state(self.clone())
    }

    /// The routes answered on the probe lane: the health checks and `/metrics`; anything else
    /// is 503 until connections free.
    fn probe_router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/health/live", get(cluster::live))
            .route("/health/ready", get(cluster::ready))
            .route("/metrics", get(metrics::scrape))
            .fallback(gateway_full)
            .layer(middleware::from_fn_with_state(
                self.clone(),
                auth::authenticate,
            ))
            .layer(middleware::from_fn(within_deadline))
            .with_state(self.clone())
    }

    /// Serves HTTP on `listener` until `shutdown` turns true: at most [`CONNECTIONS_MAX`]
    /// connections, [`CONNECTIONS_PER_ADDRESS_MAX`] from one address, each request answered
    /// within [`REQUEST_DEADLINE`]; beyond them, a small probe lane answers the health checks
    /// and `/metrics` (one request per connection, headers within 2 s).
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let router = self.router();
        let probe_router = self.probe_router();
        let connections =
            ConnectionLimits::new(CONNECTIONS_MAX, CONNECTIONS_PER_ADDRESS_MAX, HashMap::new());
        let probes = ConnectionLimits::new(
            PROBE_CONNECTIONS_MAX,
            PROBE_CONNECTIONS_PER_ADDRESS_MAX,
            HashMap::new(),
        );
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stopping(&mut shutdown) => {
                    self.consumers.close_all();
                    return;
                }
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(target: "weir::http", %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let lane = match connections.admit(peer.ip()) {
                Ok(slot) => Lane {
                    slot,
                    router: router.clone().layer(Extension(auth::Peer(peer.ip()))),
                    header_read_timeout: HEADER_READ_TIMEOUT,
                    keep_alive: true,
                },
                Err(_) => match probes.admit(peer.ip()) {
                    Ok(slot) => Lane {
                        slot,
                        router: probe_router.clone().layer(Extension(auth::Peer(peer.ip()))),
                        header_read_timeout: PROBE_HEADER_READ_TIMEOUT,
                        keep_alive: false,
                    },
                    Err(_) => {
                        tracing::debug!(target: "weir::http", %peer, "refused HTTP connection: the gateway's connections ({CONNECTIONS_MAX}, {CONNECTIONS_PER_ADDRESS_MAX} from one address) and its probe lane are full");
                        continue;
                    }
                },
            };
            tokio::spawn(lane.serve(stream, shutdown.clone()));
        }
    }
}

/// Where an accepted HTTP connection is served: the full API, or the probe lane.
struct Lane {
    slot: ConnectionSlot,
    router: Router,
    header_read_timeout: Duration,
    keep_alive: bool,
}

impl Lane {
    /// Serves the connection until it closes or `stop` turns true (then lets it finish its
    /// request for up to 5 s); its place frees when done.
    async fn serve(self, stream: tokio::net::TcpStream, mut stop: watch::Receiver<bool>) {
        let service = TowerToHyperService::new(self.router);
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .keep_alive(self.keep_alive)
            .serve_connection(TokioIo::new(stall::StallGuard::new(stream)), service);
        tokio::pin!(connection);
        tokio::select! {
            _ = connection.as_mut() => {}
            _ = stopping(&mut stop) => {
                connection.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
            }
        }
        drop(self.slot);
    }
}

/// Resolves once `shutdown` turns true.
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers' futures stay `Send`.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// The OpenAPI 3.0 document of this API.
async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
}

/// Answers 504 for a request not done within [`REQUEST_DEADLINE`].
async fn within_deadline(request: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_DEADLINE, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
            format!("not answered within {} s", REQUEST_DEADLINE.as_secs()),
        )
        .into_response(),
    }
}

/// The probe lane's answer to anything but the health checks and `/metrics`.
async fn gateway_full() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "gateway_full",
        format!("the gateway holds its {CONNECTIONS_MAX} connections ({CONNECTIONS_PER_ADDRESS_MAX} from one address); only /health/live, /health/ready and /metrics are answered until some close"),
    )
}

async fn not_found() -> ApiError {
    ApiError::not_found("not_found", "no such endpoint; see /openapi.json")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; see /openapi.json",
    )
}
