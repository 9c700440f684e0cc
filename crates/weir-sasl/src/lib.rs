//! SASL as Kafka speaks it, without I/O: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677)
//! credentials as the metadata keeps them (salt, iterations, stored key, server key: never the
//! password), the server side of a SCRAM exchange ([`ScramServer`]), and PLAIN (RFC 4616)
//! checked against the same credentials ([`check_plain`]); the client side of both
//! ([`client`]); and how failed logins are slowed per address ([`logins`]).
//!
//! A user the store does not know is answered with a salt derived from the user name and a
//! server secret, and fails only at the proof, as a wrong password does: the exchange does not
//! tell who exists.

use std::fmt;

pub mod client;
pub mod logins;

pub use client::{jaas_option, plain_message, ScramClient};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac, pbkdf2};
use serde::{Deserialize, Serialize};

/// Fewest PBKDF2 iterations a SCRAM credential may have (Kafka's bound).
pub const ITERATIONS_MIN: u32 = 4096;
/// Most PBKDF2 iterations a SCRAM credential may have (Kafka's bound).
pub const ITERATIONS_MAX: u32 = 16384;
/// Bytes of salt a new credential gets.
const SALT_BYTES: usize = 32;
/// Bytes of randomness in a server nonce.
const NONCE_BYTES: usize = 24;
/// Longest SASL token accepted from a client.
pub const TOKEN_BYTES_MAX: usize = 8 * 1024;

/// A SASL mechanism Weir serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mechanism {
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `PLAIN`.
    Plain,
}

impl Mechanism {
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::Plain => "PLAIN",
        }
    }

    /// The mechanism called `name` (as clients and configs write it).
    pub fn parse(name: &str) -> Option<Mechanism> {
        [
            Mechanism::ScramSha256,
            Mechanism::ScramSha512,
            Mechanism::Plain,
        ]
        .into_iter()
        .find(|m| m.name().eq_ignore_ascii_case(name.trim()))
    }
}

/// A SCRAM hash function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramHash {
    /// SHA-256.
    Sha256,
    /// SHA-512.
    Sha512,
}

impl ScramHash {
    /// Kafka's code of the mechanism in AlterUserScramCredentials and
    /// DescribeUserScramCredentials (1 and 2).
    pub fn code(self) -> i8 {
        match self {
            ScramHash::Sha256 => 1,
            ScramHash::Sha512 => 2,
        }
    }

    /// The hash of Kafka's mechanism code.
    pub fn from_code(code: i8) -> Option<ScramHash> {
        match code {
            1 => Some(ScramHash::Sha256),
            2 => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    /// The SASL mechanism.
    pub fn mechanism(self) -> Mechanism {
        match self {
            ScramHash::Sha256 => Mechanism::ScramSha256,
            ScramHash::Sha512 => Mechanism::ScramSha512,
        }
    }

    /// The hash of a SCRAM mechanism.
    pub fn of(mechanism: Mechanism) -> Option<ScramHash> {
        match mechanism {
            Mechanism::ScramSha256 => Some(ScramHash::Sha256),
            Mechanism::ScramSha512 => Some(ScramHash::Sha512),
            Mechanism::Plain => None,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramHash::Sha256 => hmac::HMAC_SHA256,
            ScramHash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramHash::Sha256 => &digest::SHA256,
            ScramHash::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramHash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramHash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// Bytes of the hash's output.
    pub fn output_len(self) -> usize {
        self.digest().output_len()
    }

    fn mac(self, key: &[u8], message: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), message)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    /// `Hi(password, salt, iterations)` of RFC 5802: the salted password.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.output_len()];
        let rounds =
            std::num::NonZeroU32::new(iterations.max(1)).unwrap_or(std::num::NonZeroU32::MIN);
        pbkdf2::derive(self.pbkdf2(), rounds, salt, password, &mut out);
        out
    }
}

/// A SCRAM credential as the metadata keeps it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// Why a credential cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnacceptableCredential(pub String);

impl fmt::Display for UnacceptableCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a SCRAM iteration count against Kafka's bounds.
pub fn check_iterations(hash: ScramHash, iterations: i32) -> Result<u32, UnacceptableCredential> {
    u32::try_from(iterations)
        .ok()
        .filter(|i| (ITERATIONS_MIN..=ITERATIONS_MAX).contains(i))
        .ok_or_else(|| {
            UnacceptableCredential(format!(
                "Iterations {iterations} is not between {ITERATIONS_MIN} and {ITERATIONS_MAX} for {}",
                hash.mechanism().name()
            ))
        })
}

impl ScramCredential {
    /// The credential of a salted password (what AlterUserScramCredentials carries).
    pub fn from_salted_password(
        hash: ScramHash,
        salt: Vec<u8>,
        salted_password: &[u8],
        iterations: u32,
    ) -> ScramCredential {
        let client_key = hash.mac(salted_password, b"Client Key");
        ScramCredential {
            stored_key: hash.hash(&client_key),
            server_key: hash.mac(salted_password, b"Server Key"),
            salt,
            iterations,
        }
    }

    /// A new credential for `password` with a random salt.
    pub fn new(hash: ScramHash, password: &str, iterations: u32) -> ScramCredential {
        let salt = random_bytes(SALT_BYTES);
        let salted = hash.salted_password(password.as_bytes(), &salt, iterations);
        ScramCredential::from_salted_password(hash, salt, &salted, iterations)
    }

    /// Whether `password` is the one this credential was made from (compared in constant
    /// time).
    pub fn matches_password(&self, hash: ScramHash, password: &str) -> bool {
        let salted = hash.salted_password(password.as_bytes(), &self.salt, self.iterations);
        let client_key = hash.mac(&salted, b"Client Key");
        constant_time_eq(&hash.hash(&client_key), &self.stored_key)
    }
}

/// A random salt, as clients make one for AlterUserScramCredentials.
pub fn random_salt() -> Vec<u8> {
    random_bytes(SALT_BYTES)
}

fn random_bytes(count: usize) -> Vec<u8> {
    let mut bytes = vec![0; count];
    // The system's random source does not fail on Linux once the process runs.
    let _ = SystemRandom::new().fill(&mut bytes);
    bytes
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why an exchange failed. The message is safe to give the client and the log: it never holds
/// a password, a proof or a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslFailure {
    /// The credentials are wrong or the user unknown (SASL_AUTHENTICATION_FAILED).
    BadCredentials(String),
    /// The client broke the mechanism's grammar.
    Malformed(String),
}

impl fmt::Display for SaslFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SaslFailure::BadCredentials(message) | SaslFailure::Malformed(message) => {
                f.write_str(message)
            }
        }
    }
}

/// What the server side of a SCRAM exchange answers next.
#[derive(Debug, PartialEq, Eq)]
pub enum ScramStep {
    /// Send this and wait for the client's final message.
    Challenge(Vec<u8>),
    /// The client proved it holds the password of `user`; send the server's final message.
    Authenticated {
        /// The authenticated user.
        user: String,
        /// The server's final message (its signature).
        response: Vec<u8>,
    },
}

/// The server side of one SCRAM exchange: client-first, server-first, client-final,
/// server-final.
pub struct ScramServer {
    hash: ScramHash,
    state: ScramState,
}

enum ScramState {
    Initial,
    SentFirst(Authentication),
    Done,
}

/// Undoes SCRAM's escaping of `,` and `=` in a user name (`=2C`, `=3D`).
fn decode_saslname(name: &str) -> Result<String, SaslFailure> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => {
                return Err(SaslFailure::Malformed(
                    "invalid escape in the SCRAM user name".into(),
                ))
            }
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn malformed(what: &str) -> SaslFailure {
    SaslFailure::Malformed(format!("invalid SCRAM message: {what}"))
}

impl ScramServer {
    /// A new exchange for `hash`.
    pub fn new(hash: ScramHash) -> ScramServer {
        ScramServer {
            hash,
            state: ScramState::Initial,
        }
    }

    /// Takes the client's next message. `lookup` gives a user's credential for this hash;
    /// `secret` makes the stand-in salt of unknown users.
    pub fn step(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        secret: &[u8],
    ) -> Result<ScramStep, SaslFailure> {
        if message.len() > TOKEN_BYTES_MAX {
            return Err(malformed("too long"));
        }
        let text = std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))?;
        match std::mem::replace(&mut self.state, ScramState::Done) {
            ScramState::Initial => self.client_first(text, lookup, secret),
            ScramState::SentFirst(auth) => self.client_final(text, auth),
            ScramState::Done => Err(malformed("the exchange is over")),
        }
    }

    fn client_first(
        &mut self,
        text: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        secret: &[u8],
    ) -> Result<ScramStep, SaslFailure> {
        // gs2-header: a channel-binding flag (none is offered, so `p=` is refused) and an
        // optional authorization id, which must be the user itself.
        let mut parts = text.splitn(3, ',');
        let flag = parts.next().ok_or_else(|| malformed("no GS2 header"))?;
        if flag != "n" && flag != "y" {
            return Err(malformed("channel binding is not supported"));
        }
        let authzid = parts.next().ok_or_else(|| malformed("no GS2 header"))?;
        let bare = parts
            .next()
            .ok_or_else(|| malformed("no client-first message"))?;
        let mut user = None;
        let mut client_nonce = None;
        for attribute in bare.split(',') {
            match attribute.split_once('=') {
                Some(("n", value)) if user.is_none() => user = Some(decode_saslname(value)?),
                Some(("r", value)) if client_nonce.is_none() => client_nonce = Some(value),
                Some(("m", _)) => return Err(malformed("mandatory extensions are not supported")),
                Some(_) => {} // Kafka's extensions (tokenauth=…) and the like.
                None => return Err(malformed("attribute without a value")),
            }
        }
        let user = user
            .filter(|u| !u.is_empty())
            .ok_or_else(|| malformed("no user name"))?;
        let client_nonce = client_nonce
            .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b','))
            .ok_or_else(|| malformed("no valid client nonce"))?;
        if !authzid.is_empty() {
            let authzid = decode_saslname(
                authzid
                    .strip_prefix("a=")
                    .ok_or_else(|| malformed("bad authorization id"))?,
            )?;
            if authzid != user {
                return Err(SaslFailure::BadCredentials(
                    "Authentication failed: the authorization id must be the user name".into(),
                ));
            }
        }
        let (credential, known) = match lookup(&user) {
            Some(credential) => (credential, true),
            None => (self.stand_in(&user, secret), false),
        };
        let nonce = format!("{client_nonce}{}", BASE64.encode(random_bytes(NONCE_BYTES)));
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let challenge = server_first.clone().into_bytes();
        self.state = ScramState::SentFirst(Authentication {
            user,
            credential,
            known,
            nonce,
            client_first_bare: bare.to_string(),
            server_first,
        });
        Ok(ScramStep::Challenge(challenge))
    }

    /// A credential for a user the store does not know: its salt derived from the name, so a
    /// second try sees the same one, and keys nothing can match.
    fn stand_in(&self, user: &str, secret: &[u8]) -> ScramCredential {
        let salt = self.hash.mac(secret, user.as_bytes())[..SALT_BYTES.min(self.hash.output_len())]
            .to_vec();
        ScramCredential {
            salt,
            iterations: ITERATIONS_MIN,
            stored_key: random_bytes(self.hash.output_len()),
            server_key: random_bytes(self.hash.output_len()),
        }
    }

    fn client_final(&mut self, text: &str, auth: Authentication) -> Result<ScramStep, SaslFailure> {
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| malformed("no client proof"))?;
        let mut channel = None;
        let mut nonce = None;
        for attribute in without_proof.split(',') {
            match attribute.split_once('=') {
                Some(("c", value)) if channel.is_none() => channel = Some(value),
                Some(("r", value)) if nonce.is_none() => nonce = Some(value),
                Some(_) => {}
                None => return Err(malformed("attribute without a value")),
            }
        }
        let channel = channel.ok_or_else(|| malformed("no channel binding"))?;
        let binding = BASE64
            .decode(channel)
            .map_err(|_| malformed("channel binding is not base64"))?;
        if !(binding.starts_with(b"n,") || binding.starts_with(b"y,")) {
            return Err(malformed("channel binding is not supported"));
        }
        // Kafka accepts a final nonce that ends with the server's (librdkafka before 2.1
        // sends its own nonce again in front of it), and so does Weir.
        if !nonce.is_some_and(|n| n.ends_with(auth.nonce.as_str())) {
            return Err(malformed("the nonce does not match"));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| malformed("the proof is not base64"))?;
        let auth_message = format!(
            "{},{},{without_proof}",
            auth.client_first_bare, auth.server_first
        );
        let signature = self
            .hash
            .mac(&auth.credential.stored_key, auth_message.as_bytes());
        let proven = proof.len() == signature.len() && {
            let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
            constant_time_eq(&self.hash.hash(&client_key), &auth.credential.stored_key)
        };
        if !proven || !auth.known {
            return Err(SaslFailure::BadCredentials(format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                self.hash.mechanism().name()
            )));
        }
        let server_signature = self
            .hash
            .mac(&auth.credential.server_key, auth_message.as_bytes());
        Ok(ScramStep::Authenticated {
            user: auth.user,
            response: format!("v={}", BASE64.encode(server_signature)).into_bytes(),
        })
    }
}

/// What the server remembers between its first message and the client's final one.
struct Authentication {
    user: String,
    credential: ScramCredential,
    known: bool,
    nonce: String,
    client_first_bare: String,
    server_first: String,
}

/// Checks a PLAIN message (`authzid NUL authcid NUL password`) against the user's SCRAM
/// credentials (any of its mechanisms); answered with the user.
pub fn check_plain(
    message: &[u8],
    lookup: impl FnOnce(&str) -> Vec<(ScramHash, ScramCredential)>,
) -> Result<String, SaslFailure> {
    if message.len() > TOKEN_BYTES_MAX {
        return Err(SaslFailure::Malformed(
            "invalid PLAIN message: too long".into(),
        ));
    }
    let text = std::str::from_utf8(message)
        .map_err(|_| SaslFailure::Malformed("invalid PLAIN message: not UTF-8".into()))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslFailure::Malformed(
            "invalid PLAIN message: expected authzid, user and password separated by NUL".into(),
        ));
    };
    let refused = || {
        SaslFailure::BadCredentials("Authentication failed: Invalid username or password".into())
    };
    if user.is_empty() || (!authzid.is_empty() && authzid != user) {
        return Err(refused());
    }
    let credentials = lookup(user);
    match credentials.first() {
        Some((hash, credential)) if credential.matches_password(*hash, password) => {
            Ok(user.to_string())
        }
        Some(_) => Err(refused()),
        None => {
            // As long as a wrong password takes, so the time does not tell who exists.
            let _ = ScramHash::Sha512.salted_password(password.as_bytes(), b"weir", ITERATIONS_MIN);
            Err(refused())
        }
    }
}

#[cfg(test)]
mod tests;
