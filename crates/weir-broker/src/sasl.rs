//! SASL authentication of a connection on a SASL_PLAINTEXT or SASL_SSL listener, as Kafka
//! runs it: until a client has authenticated it may send ApiVersions, SaslHandshake (v1: the
//! mechanism) and SaslAuthenticate (the mechanism's tokens) and nothing else. SCRAM is
//! checked against the credentials in the metadata image, PLAIN against the same ones. A
//! failed login is answered SASL_AUTHENTICATION_FAILED after
//! `connection.failed.authentication.delay.ms` and its connection closed.
//!
//! Guessing is rate-limited per address: once an address has [`FREE_FAILURES`] failures within
//! [`FAILURE_WINDOW`], each further failure is answered after the failure delay doubled per
//! failure, up to [`FAILURE_DELAY_MAX`], and a failed login holds one of the address's
//! [`LOGINS_IN_FLIGHT_MAX`] places until it is answered (a login finding none is refused at
//! once). So an address guesses at most that many passwords per delay, while a right password
//! is let in at once. Neither passwords nor tokens reach a log line.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    RequestKind, ResponseKind, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::ResponseError;
use weir_proto::Request;
use weir_sasl::{check_plain, Mechanism, SaslFailure, ScramHash, ScramServer, ScramStep};

use crate::broker::Broker;
use crate::handlers::{frame, str_bytes};
use crate::rate_limit::LineLimit;
use crate::reply::{PendingReply, Reply};

/// Failures an address may have within [`FAILURE_WINDOW`] before its failures are answered
/// ever later.
pub const FREE_FAILURES: u32 = 5;
/// The window failed logins are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Longest a failed login waits for its answer.
pub const FAILURE_DELAY_MAX: Duration = Duration::from_secs(5);
/// The least delay past the free failures, doubled per failure.
pub const FAILURE_DELAY_FLOOR: Duration = Duration::from_millis(100);
/// Logins of one address that may be under way (a failed one until it is answered).
pub const LOGINS_IN_FLIGHT_MAX: u32 = 4;
/// Addresses whose failures are remembered at once; past it the oldest windows are dropped.
const ADDRESSES_TRACKED_MAX: usize = 10_000;

/// Lines about failed logins.
static LOGIN_WARNINGS: LineLimit = LineLimit::new();

/// Failed logins by address, logins under way by address, and the secret that makes unknown
/// users' stand-in salts.
pub struct Logins {
    secret: Vec<u8>,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    in_flight: Mutex<HashMap<IpAddr, u32>>,
}

impl Default for Logins {
    fn default() -> Logins {
        Logins {
            secret: weir_sasl::random_salt(),
            failures: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
        }
    }
}

/// One of an address's places for logins under way, given back when dropped.
pub(crate) struct LoginPlace {
    broker: Arc<Broker>,
    address: IpAddr,
}

impl Drop for LoginPlace {
    fn drop(&mut self) {
        let mut in_flight = self
            .broker
            .logins
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = in_flight.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.address);
            }
        }
    }
}

impl Logins {
    /// A place for a login from `address`; `None` when all of its places are taken.
    fn place(broker: &Arc<Broker>, address: IpAddr) -> Option<LoginPlace> {
        let mut in_flight = broker
            .logins
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let count = in_flight.entry(address).or_insert(0);
        if *count >= LOGINS_IN_FLIGHT_MAX {
            return None;
        }
        *count += 1;
        Some(LoginPlace {
            broker: broker.clone(),
            address,
        })
    }

    /// Counts a failure of `address`; answered with how long to wait before saying so.
    fn fail(&self, address: IpAddr, base_delay: Duration) -> Duration {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= ADDRESSES_TRACKED_MAX && !failures.contains_key(&address) {
            failures.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
            if failures.len() >= ADDRESSES_TRACKED_MAX {
                return FAILURE_DELAY_MAX;
            }
        }
        let (since, count) = failures.entry(address).or_insert((now, 0));
        if now.duration_since(*since) >= FAILURE_WINDOW {
            (*since, *count) = (now, 0);
        }
        *count += 1;
        failure_delay(base_delay, *count)
    }
}

/// The wait before the answer to an address's `count`th failure in the window: the configured
/// delay, and past the free failures at least [`FAILURE_DELAY_FLOOR`] doubled per failure (so
/// a delay configured to 0 still slows guessing).
fn failure_delay(base_delay: Duration, count: u32) -> Duration {
    if count <= FREE_FAILURES {
        return base_delay.min(FAILURE_DELAY_MAX);
    }
    let doublings = (count - FREE_FAILURES).min(16);
    base_delay
        .max(FAILURE_DELAY_FLOOR)
        .saturating_mul(1 << doublings)
        .min(FAILURE_DELAY_MAX)
}

/// Where a connection's authentication stands.
enum State {
    /// Waiting for SaslHandshake.
    Handshake,
    /// The mechanism chosen; waiting for its first token.
    Chosen(Mechanism),
    /// A SCRAM exchange under way, with its hash.
    Scram(Box<ScramServer>, ScramHash),
    /// Authenticated.
    Done,
}

/// What the connection does with a request before authentication.
pub(crate) enum GateStep {
    /// Serve it as any request (ApiVersions).
    Dispatch(Box<Request>),
    /// Answer it and read on.
    Answer(PendingReply),
    /// Answer it, then close the connection.
    AnswerAndClose(PendingReply),
    /// Close the connection without an answer.
    Close(String),
}

/// The SASL authentication of one connection.
pub(crate) struct SaslGate {
    mechanisms: Arc<[Mechanism]>,
    state: State,
}

fn answered(reply: Reply) -> PendingReply {
    Box::pin(async move { reply })
}

impl SaslGate {
    /// A connection on a listener offering `mechanisms`.
    pub(crate) fn new(mechanisms: Arc<[Mechanism]>) -> SaslGate {
        SaslGate {
            mechanisms,
            state: State::Handshake,
        }
    }

    /// Whether the client has authenticated.
    pub(crate) fn authenticated(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Takes a request the client sent before it authenticated.
    pub(crate) async fn take(
        &mut self,
        broker: &Arc<Broker>,
        request: Request,
        peer: IpAddr,
    ) -> GateStep {
        let Request {
            header,
            api_key,
            version,
            body,
        } = request;
        let correlation_id = header.correlation_id;
        let respond = |body: ResponseKind| frame(api_key, version, correlation_id, body);
        match body {
            RequestKind::ApiVersions(_) => GateStep::Dispatch(Box::new(Request {
                header,
                api_key,
                version,
                body,
            })),
            RequestKind::SaslHandshake(request) => {
                let (response, close) = self.handshake(request, version);
                let reply = answered(respond(ResponseKind::SaslHandshake(response)));
                match close {
                    true => GateStep::AnswerAndClose(reply),
                    false => GateStep::Answer(reply),
                }
            }
            RequestKind::SaslAuthenticate(request) => {
                self.authenticate(broker, request, peer, respond).await
            }
            _ => GateStep::Close(format!(
                "{api_key:?} request before SASL authentication on a SASL listener"
            )),
        }
    }

    /// SaslHandshake. Version 0 is advertised because clients such as librdkafka 2.0 look for
    /// it before they use version 1, but is refused: after it a client would send raw tokens
    /// outside Kafka's framing, which only clients older than Kafka 1.0 do.
    fn handshake(
        &mut self,
        request: SaslHandshakeRequest,
        version: i16,
    ) -> (SaslHandshakeResponse, bool) {
        let mut response = SaslHandshakeResponse::default();
        response.mechanisms = self
            .mechanisms
            .iter()
            .map(|m| str_bytes(m.name()))
            .collect();
        if version == 0 {
            response.error_code = ResponseError::UnsupportedVersion.code();
            return (response, true);
        }
        if !matches!(self.state, State::Handshake) {
            response.error_code = ResponseError::IllegalSaslState.code();
            return (response, true);
        }
        match Mechanism::parse(&request.mechanism).filter(|m| self.mechanisms.contains(m)) {
            Some(mechanism) => {
                self.state = State::Chosen(mechanism);
                (response, false)
            }
            None => {
                response.error_code = ResponseError::UnsupportedSaslMechanism.code();
                (response, true)
            }
        }
    }

    async fn authenticate(
        &mut self,
        broker: &Arc<Broker>,
        request: SaslAuthenticateRequest,
        peer: IpAddr,
        respond: impl FnOnce(ResponseKind) -> Reply,
    ) -> GateStep {
        let delay = Duration::from_millis(broker.config.failed_authentication_delay_ms);
        let place = Logins::place(broker, peer);
        let image = broker.image();
        let secret = &broker.logins.secret;
        let outcome = if place.is_none() {
            Err(SaslFailure::BadCredentials(
                "Authentication failed: too many logins under way from this address; try again later"
                    .into(),
            ))
        } else {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Chosen(Mechanism::Plain) => {
                    let lookup = |user: &str| {
                        image
                            .scram_users()
                            .find(|(name, _)| name.as_str() == user)
                            .map(|(_, credentials)| {
                                credentials.iter().map(|(h, c)| (*h, c.clone())).collect()
                            })
                            .unwrap_or_default()
                    };
                    check_plain(&request.auth_bytes, lookup).map(|user| (user, Vec::new()))
                }
                State::Chosen(scram) => {
                    let hash = ScramHash::of(scram).unwrap_or(ScramHash::Sha256);
                    self.scram_step(
                        ScramServer::new(hash),
                        hash,
                        &request.auth_bytes,
                        &image,
                        secret,
                    )
                }
                State::Scram(server, hash) => {
                    self.scram_step(*server, hash, &request.auth_bytes, &image, secret)
                }
                State::Handshake | State::Done => Err(SaslFailure::Malformed(
                    "SaslAuthenticate before SaslHandshake".into(),
                )),
            }
        };
        let mut response = SaslAuthenticateResponse::default();
        match outcome {
            Ok((user, token)) if matches!(self.state, State::Done) => {
                tracing::debug!(target: "weir::sasl", %peer, user, "authenticated");
                response.auth_bytes = token.into();
                GateStep::Answer(answered(respond(ResponseKind::SaslAuthenticate(response))))
            }
            Ok((_, token)) => {
                response.auth_bytes = token.into();
                GateStep::Answer(answered(respond(ResponseKind::SaslAuthenticate(response))))
            }
            Err(failure) => {
                let wait = match place {
                    Some(_) => broker.logins.fail(peer, delay),
                    None => delay,
                };
                broker
                    .metrics
                    .sasl_authentications_failed
                    .fetch_add(1, Ordering::Relaxed);
                if let Some(suppressed) = LOGIN_WARNINGS.admit() {
                    tracing::warn!(target: "weir::sasl", %peer, suppressed, "SASL login failed: {failure}");
                }
                response.error_code = ResponseError::SaslAuthenticationFailed.code();
                response.error_message = Some(str_bytes(failure.to_string()));
                let reply = respond(ResponseKind::SaslAuthenticate(response));
                GateStep::AnswerAndClose(Box::pin(async move {
                    tokio::time::sleep(wait).await;
                    drop(place);
                    reply
                }))
            }
        }
    }

    /// One SCRAM step; on a challenge the exchange goes on (the state is set back to it).
    fn scram_step(
        &mut self,
        mut server: ScramServer,
        hash: ScramHash,
        token: &[u8],
        image: &weir_metadata::MetadataImage,
        secret: &[u8],
    ) -> Result<(String, Vec<u8>), SaslFailure> {
        let lookup = |user: &str| image.scram_credential(user, hash).cloned();
        match server.step(token, lookup, secret)? {
            ScramStep::Challenge(challenge) => {
                self.state = State::Scram(Box::new(server), hash);
                Ok((String::new(), challenge))
            }
            ScramStep::Authenticated { user, response } => {
                self.state = State::Done;
                Ok((user, response))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_past_the_free_ones_wait_ever_longer_up_to_the_cap() {
        let base = Duration::from_millis(100);
        assert_eq!(failure_delay(base, 1), base);
        assert_eq!(failure_delay(base, FREE_FAILURES), base);
        assert_eq!(failure_delay(base, FREE_FAILURES + 1), base * 2);
        assert_eq!(failure_delay(base, FREE_FAILURES + 3), base * 8);
        assert_eq!(failure_delay(base, 1000), FAILURE_DELAY_MAX);
        assert_eq!(failure_delay(Duration::ZERO, 1), Duration::ZERO);
        assert_eq!(
            failure_delay(Duration::ZERO, FREE_FAILURES + 1),
            FAILURE_DELAY_FLOOR * 2
        );

        let logins = Logins::default();
        let (guesser, neighbour) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        for _ in 0..FREE_FAILURES {
            assert_eq!(logins.fail(guesser, base), base);
        }
        assert_eq!(logins.fail(guesser, base), base * 2);
        assert_eq!(logins.fail(neighbour, base), base, "counted per address");
    }
}
