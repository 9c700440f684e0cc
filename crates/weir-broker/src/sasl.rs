//! SASL authentication of a connection on a SASL_PLAINTEXT or SASL_SSL listener, as Kafka
//! runs it: until a client has authenticated it may send ApiVersions, SaslHandshake (v1: the
//! mechanism) and SaslAuthenticate (the mechanism's tokens) and nothing else. SCRAM is
//! checked against the credentials in the metadata image, PLAIN against the same ones. A
//! failed login is answered SASL_AUTHENTICATION_FAILED after
//! `connection.failed.authentication.delay.ms` and its connection closed.
//!
//! Guessing is rate-limited per address ([`weir_sasl::logins`]): past a few failures in a
//! minute each further failure is answered ever later and holds one of the address's few
//! places for logins under way, so an address guesses at most that many passwords per delay
//! while a right password is let in at once. Neither passwords nor tokens reach a log line.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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

/// Lines about failed logins.
static LOGIN_WARNINGS: LineLimit = LineLimit::new();

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
    /// `User:name` once the client has authenticated.
    principal: Option<Arc<str>>,
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
            principal: None,
        }
    }

    /// Whether the client has authenticated.
    pub(crate) fn authenticated(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Who the client authenticated as, `User:name`.
    pub(crate) fn principal(&self) -> Option<&Arc<str>> {
        self.principal.as_ref()
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
        let place = broker.logins.place(peer);
        let image = broker.image();
        let secret = broker.logins.secret();
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
                            .scram_credentials_of(user)
                            .map(|credentials| {
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
                self.principal = Some(Arc::from(format!("User:{user}")));
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
