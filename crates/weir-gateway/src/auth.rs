//! Who calls the HTTP gateway and what they may do. With the authorizer on
//! (`authorizer.class.name`), every request but those to the open paths (`--http-open`, by
//! default the health checks and `/metrics`) must carry HTTP Basic credentials of a SCRAM
//! user, checked against the credentials in the cluster metadata as a Kafka PLAIN login is:
//! none or wrong ones are 401. Guessing is slowed per address as on the Kafka listeners
//! ([`weir_sasl::logins`]): a password is checked in one of the address's few places for
//! logins under way, and past a few failures in a minute each further one is answered ever
//! later. Each route then asks the same ACLs a Kafka request would ([`Caller::require`]): a
//! refusal is 403. The gateway reaches the cluster as itself, so without the authorizer
//! nothing is checked here, as on the Kafka listeners.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use weir_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use weir_metadata::authorizer::{Access, AuthorizerSettings, ANONYMOUS};
use weir_metadata::MetadataImage;
use weir_sasl::logins::{LoginPlace, Logins};
use weir_sasl::{ScramCredential, ScramHash};

use crate::error::ApiError;
use crate::Gateway;

/// What an HTTP client is told to answer a 401 with.
const CHALLENGE: &str = "Basic realm=\"weir\", charset=\"UTF-8\"";
/// A refused login is answered after this long (Kafka's default
/// `connection.failed.authentication.delay.ms`), so guessing is slow.
const FAILED_LOGIN_DELAY: Duration = Duration::from_millis(100);
/// How long a checked password is taken on trust before it is checked again (a changed or
/// deleted credential is noticed at once: the entry holds the credential it was checked
/// against).
const VERIFIED_TTL: Duration = Duration::from_secs(300);
/// Checked passwords remembered at most (all are forgotten when full).
const VERIFIED_MAX: usize = 1024;
/// Longest a login waits for one of its address's places (a browser's first requests come
/// side by side) before it is answered 429.
const LOGIN_PLACE_WAIT: Duration = Duration::from_secs(5);

/// The client's address, as the connection it came on gives it.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

/// Passwords recently checked: checking one costs thousands of hash rounds, and a browser
/// sends the password with every request.
#[derive(Default)]
pub struct VerifiedLogins {
    entries: Mutex<HashMap<[u8; 32], Verified>>,
}

/// One checked login: who, against which credential, until when.
struct Verified {
    user: String,
    stored_key: Vec<u8>,
    until: Instant,
}

impl VerifiedLogins {
    fn key(user: &str, password: &str) -> [u8; 32] {
        let mut input = Vec::with_capacity(user.len() + password.len() + 1);
        input.extend_from_slice(user.as_bytes());
        input.push(0);
        input.extend_from_slice(password.as_bytes());
        let digest = ring::digest::digest(&ring::digest::SHA256, &input);
        let mut key = [0; 32];
        key.copy_from_slice(digest.as_ref());
        key
    }

    /// The user `user`, if `password` was checked against their credential in `image` lately:
    /// cheap, so it needs no place for a login.
    fn remembered(&self, image: &MetadataImage, user: &str, password: &str) -> Option<String> {
        let key = VerifiedLogins::key(user, password);
        let entries = self.entries.lock().ok()?;
        let seen = entries.get(&key)?;
        let same = current_credential(image, &seen.user)
            .is_some_and(|(_, c)| c.stored_key == seen.stored_key);
        (same && seen.until > Instant::now()).then(|| seen.user.clone())
    }

    /// The user `user` with `password`, if the credentials in `image` let them in: checked
    /// (thousands of hash rounds) unless [`VerifiedLogins::remembered`].
    fn check(&self, image: &MetadataImage, user: &str, password: &str) -> Option<String> {
        if let Some(user) = self.remembered(image, user, password) {
            return Some(user);
        }
        let key = VerifiedLogins::key(user, password);
        let now = Instant::now();
        let message = format!("\0{user}\0{password}");
        let lookup = |name: &str| current_credential(image, name).into_iter().collect();
        let user = weir_sasl::check_plain(message.as_bytes(), lookup).ok()?;
        let (_, credential) = current_credential(image, &user)?;
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= VERIFIED_MAX {
                entries.clear();
            }
            entries.insert(
                key,
                Verified {
                    user: user.clone(),
                    stored_key: credential.stored_key,
                    until: now + VERIFIED_TTL,
                },
            );
        }
        Some(user)
    }
}

/// The SCRAM credential of `user` a password is checked against.
fn current_credential(image: &MetadataImage, user: &str) -> Option<(ScramHash, ScramCredential)> {
    image
        .scram_credentials_of(user)?
        .iter()
        .next()
        .map(|(hash, credential)| (*hash, credential.clone()))
}

/// One of `peer`'s places for a login under way, waited for up to [`LOGIN_PLACE_WAIT`].
async fn login_place(limits: &Arc<Logins>, peer: IpAddr) -> Option<LoginPlace> {
    let deadline = Instant::now() + LOGIN_PLACE_WAIT;
    loop {
        if let Some(place) = limits.place(peer) {
            return Some(place);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(FAILED_LOGIN_DELAY).await;
    }
}

/// The user and password of an `Authorization: Basic` header.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// 401, with the challenge that makes a browser ask for a user and password.
fn unauthorized(message: &str) -> Response {
    (
        [(header::WWW_AUTHENTICATE, CHALLENGE)],
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message),
    )
        .into_response()
}

/// The middleware in front of every route: it finds who the caller is (or refuses them) and
/// leaves a [`Caller`] for the handler.
pub async fn authenticate(
    State(gateway): State<Arc<Gateway>>,
    mut request: Request,
    next: Next,
) -> Response {
    let mut settings = gateway.node.authorizer();
    let peer = request
        .extensions()
        .get::<Peer>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |p| p.0);
    let image = gateway.node.image();
    let open = gateway.open_paths.iter().any(|p| p == request.uri().path());
    if open {
        // Served to anyone, unchecked.
        settings = Arc::new(AuthorizerSettings::default());
    }
    let principal: Arc<str> = if !settings.enabled {
        Arc::from(ANONYMOUS)
    } else {
        let Some((user, password)) = basic_credentials(request.headers()) else {
            return unauthorized(
                "credentials required: HTTP Basic with a SCRAM user's name and password",
            );
        };
        match gateway.logins.remembered(&image, &user, &password) {
            Some(user) => Arc::from(format!("User:{user}")),
            None => match check_login(&gateway, &image, peer, user, password).await {
                Ok(user) => Arc::from(format!("User:{user}")),
                Err(refusal) => return refusal,
            },
        }
    };
    let access = Access::new(&settings, || image, principal, peer);
    request.extensions_mut().insert(Caller(Arc::new(access)));
    next.run(request).await
}

/// Checks `user`'s `password` in one of `peer`'s places for logins: the user, or the answer
/// refusing them (401 once the failure's delay has passed, 429 when the address has too many
/// logins under way).
async fn check_login(
    gateway: &Gateway,
    image: &Arc<MetadataImage>,
    peer: IpAddr,
    user: String,
    password: String,
) -> Result<String, Response> {
    let Some(place) = login_place(&gateway.login_limits, peer).await else {
        return Err((
            [(header::RETRY_AFTER, "5")],
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_logins",
                "too many logins under way from this address; try again later",
            ),
        )
            .into_response());
    };
    let checking = gateway.logins.clone();
    let checked_image = image.clone();
    // Checking a password is CPU work: off the connection's task.
    let checked =
        tokio::task::spawn_blocking(move || checking.check(&checked_image, &user, &password))
            .await
            .ok()
            .flatten();
    match checked {
        Some(user) => Ok(user),
        None => {
            let wait = gateway.login_limits.fail(peer, FAILED_LOGIN_DELAY);
            tracing::debug!(target: "weir::http", %peer, wait_ms = wait.as_millis() as u64, "HTTP login failed");
            tokio::time::sleep(wait).await;
            drop(place);
            Err(unauthorized(
                "Authentication failed: Invalid username or password",
            ))
        }
    }
}

/// What the caller of a request may do.
#[derive(Clone)]
pub struct Caller(Arc<Access>);

impl Caller {
    /// Whether the caller may do `operation` on the resource `name` of `resource_type`.
    pub fn may(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.0.allows(operation, resource_type, name)
    }

    /// 403 unless the caller may do `operation` on the resource `name` of `resource_type`.
    pub fn require(
        &self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> Result<(), ApiError> {
        if self.may(operation, resource_type, name) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "{} may not {operation} {resource_type} {name}",
                self.0.principal()
            ),
        ))
    }

    /// 403 unless the caller may do `operation` on the cluster.
    pub fn require_cluster(&self, operation: AclOperation) -> Result<(), ApiError> {
        self.require(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Who the caller is, `User:name`.
    pub fn principal(&self) -> &str {
        self.0.principal()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the request reached its handler without being authenticated",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use weir_metadata::{MetadataCommand, ScramUpsert};
    use weir_sasl::{ScramCredential, ScramHash};

    use super::*;

    fn with_password(image: &mut MetadataImage, user: &str, password: &str) {
        image.apply(&MetadataCommand::AlterScramCredentials {
            upserts: vec![ScramUpsert {
                user: user.to_string(),
                hash: ScramHash::Sha256,
                credential: ScramCredential::new(ScramHash::Sha256, password, 4096),
            }],
            deletions: Vec::new(),
        });
    }

    #[test]
    fn basic_credentials_are_read_as_browsers_send_them() {
        let mut headers = HeaderMap::new();
        assert_eq!(basic_credentials(&headers), None);
        // "alice:pa:ss" — a password may hold a colon.
        headers.insert(
            header::AUTHORIZATION,
            "Basic YWxpY2U6cGE6c3M=".parse().expect("header"),
        );
        assert_eq!(
            basic_credentials(&headers),
            Some(("alice".to_string(), "pa:ss".to_string()))
        );
        for bad in ["Bearer YWxpY2U6cGE6c3M=", "Basic !!!", "Basic YWxpY2U="] {
            headers.insert(header::AUTHORIZATION, bad.parse().expect("header"));
            assert_eq!(basic_credentials(&headers), None, "{bad}");
        }
    }

    #[test]
    fn a_checked_password_is_trusted_only_while_its_credential_stands() {
        let logins = VerifiedLogins::default();
        let mut image = MetadataImage::default();
        with_password(&mut image, "alice", "first");
        assert_eq!(
            logins.check(&image, "alice", "first"),
            Some("alice".to_string())
        );
        assert_eq!(logins.check(&image, "alice", "wrong"), None);
        assert_eq!(logins.check(&image, "bob", "first"), None);
        // Remembered, then a new password: the old one is checked again, and refused.
        assert_eq!(
            logins.check(&image, "alice", "first"),
            Some("alice".to_string())
        );
        with_password(&mut image, "alice", "second");
        assert_eq!(logins.check(&image, "alice", "first"), None);
        assert_eq!(
            logins.check(&image, "alice", "second"),
            Some("alice".to_string())
        );
    }
}
