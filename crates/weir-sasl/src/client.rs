//! The client side of SASL as a Kafka client speaks it: a SCRAM exchange (RFC 5802; no
//! channel binding, as Kafka offers none) and a PLAIN message (RFC 4616).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

use crate::{constant_time_eq, random_bytes, SaslFailure, ScramHash, ITERATIONS_MAX, NONCE_BYTES};

/// The gs2 header of a client that binds no channel and names no other identity.
const GS2_HEADER: &str = "n,,";

/// The PLAIN message that logs `user` in with `password`: `NUL user NUL password`.
pub fn plain_message(user: &str, password: &str) -> Vec<u8> {
    format!("\0{user}\0{password}").into_bytes()
}

/// SCRAM's escaping of `,` and `=` in a user name (`=2C`, `=3D`).
fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// The client side of one SCRAM exchange: [`ScramClient::first_message`], then
/// [`ScramClient::final_message`] on the server's first message, then
/// [`ScramClient::check_server_final`] on its last, which proves the server holds the
/// credential too.
pub struct ScramClient {
    hash: ScramHash,
    password: String,
    nonce: String,
    client_first_bare: String,
    /// The server's signature the exchange must end with, once the proof is sent.
    expected_signature: Option<Vec<u8>>,
}

impl ScramClient {
    /// An exchange logging `user` in with `password`.
    pub fn new(hash: ScramHash, user: &str, password: &str) -> ScramClient {
        let nonce = BASE64.encode(random_bytes(NONCE_BYTES));
        let client_first_bare = format!("n={},r={nonce}", encode_saslname(user));
        ScramClient {
            hash,
            password: password.to_string(),
            nonce,
            client_first_bare,
            expected_signature: None,
        }
    }

    /// The client's first message.
    pub fn first_message(&self) -> Vec<u8> {
        format!("{GS2_HEADER}{}", self.client_first_bare).into_bytes()
    }

    /// The client's final message (its proof) in answer to the server's first message.
    /// Refused: a server message out of grammar, a nonce that does not extend this client's,
    /// or an iteration count outside Kafka's bounds (a server could make the client spend
    /// any amount of CPU otherwise).
    pub fn final_message(&mut self, server_first: &[u8]) -> Result<Vec<u8>, SaslFailure> {
        let malformed =
            |what: &str| SaslFailure::Malformed(format!("server-first message: {what}"));
        let text = std::str::from_utf8(server_first).map_err(|_| malformed("not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attribute in text.split(',') {
            match attribute.split_once('=') {
                Some(("r", value)) if nonce.is_none() => nonce = Some(value),
                Some(("s", value)) if salt.is_none() => salt = Some(value),
                Some(("i", value)) if iterations.is_none() => iterations = Some(value),
                Some(("m", _)) => return Err(malformed("mandatory extensions are not supported")),
                Some(("e", value)) => {
                    return Err(SaslFailure::BadCredentials(format!(
                        "Authentication failed: the server answered {value}"
                    )))
                }
                Some(_) => {}
                None => return Err(malformed("attribute without a value")),
            }
        }
        let nonce = nonce
            .filter(|n| n.len() > self.nonce.len() && n.starts_with(self.nonce.as_str()))
            .ok_or_else(|| malformed("the nonce does not extend the client's"))?;
        let salt = BASE64
            .decode(salt.ok_or_else(|| malformed("no salt"))?)
            .map_err(|_| malformed("the salt is not base64"))?;
        let iterations: u32 = iterations
            .ok_or_else(|| malformed("no iteration count"))?
            .parse()
            .map_err(|_| malformed("the iteration count is not a number"))?;
        if !(crate::ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return Err(malformed(&format!(
                "{iterations} iterations, outside {}..={ITERATIONS_MAX}",
                crate::ITERATIONS_MIN
            )));
        }
        let hash = self.hash;
        let salted = hash.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = hash.mac(&salted, b"Client Key");
        let stored_key = hash.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", BASE64.encode(GS2_HEADER));
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = hash.mac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hash.mac(&salted, b"Server Key");
        self.expected_signature = Some(hash.mac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server's final message: its signature proves it holds the credential.
    pub fn check_server_final(&self, server_final: &[u8]) -> Result<(), SaslFailure> {
        let text = std::str::from_utf8(server_final).unwrap_or_default();
        if let Some(error) = text.strip_prefix("e=") {
            return Err(SaslFailure::BadCredentials(format!(
                "Authentication failed: the server answered {error}"
            )));
        }
        let signature = text
            .strip_prefix("v=")
            .and_then(|v| BASE64.decode(v.split(',').next().unwrap_or_default()).ok());
        match (signature, &self.expected_signature) {
            (Some(got), Some(expected)) if constant_time_eq(&got, expected) => Ok(()),
            _ => Err(SaslFailure::BadCredentials(
                "Authentication failed: the server's signature does not prove it holds the credential"
                    .into(),
            )),
        }
    }
}

/// The quoted value of `option` in a JAAS login module line (`username="alice"` in
/// `...ScramLoginModule required username="alice" password="...";`), as Kafka's
/// `sasl.jaas.config` gives a client's login; `None` when it is missing or unquoted.
pub fn jaas_option(jaas: &str, option: &str) -> Option<String> {
    let mut rest = jaas;
    while let Some(at) = rest.find(option) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + option.len()..].trim_start();
        rest = &rest[at + option.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let Some(value) = after.strip_prefix('=').map(str::trim_start) else {
            continue;
        };
        let quoted = value.strip_prefix('"')?;
        let mut out = String::new();
        let mut chars = quoted.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(out),
                '\\' => out.push(chars.next()?),
                c => out.push(c),
            }
        }
        return None;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_plain, ScramCredential, ScramServer, ScramStep};

    const SECRET: &[u8] = b"server secret";

    /// Runs `client` against a server whose only user is `alice` with `password`: the user
    /// the server authenticated, or the first failure on either side.
    fn login(
        hash: ScramHash,
        password: &str,
        client: &mut ScramClient,
    ) -> Result<String, SaslFailure> {
        let credential = ScramCredential::new(hash, password, 4096);
        let lookup = |user: &str| (user == "alice,=x").then(|| credential.clone());
        let mut server = ScramServer::new(hash);
        let ScramStep::Challenge(first) = server.step(&client.first_message(), lookup, SECRET)?
        else {
            panic!("the server did not answer the first message with a challenge");
        };
        let last = client.final_message(&first)?;
        match server.step(&last, lookup, SECRET)? {
            ScramStep::Authenticated { user, response } => {
                client.check_server_final(&response)?;
                Ok(user)
            }
            ScramStep::Challenge(_) => panic!("a second challenge"),
        }
    }

    #[test]
    fn the_client_logs_in_with_the_right_password_only() {
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            let mut client = ScramClient::new(hash, "alice,=x", "s3cret");
            assert_eq!(
                login(hash, "s3cret", &mut client).as_deref(),
                Ok("alice,=x")
            );
            let mut guesser = ScramClient::new(hash, "alice,=x", "guess");
            assert!(matches!(
                login(hash, "s3cret", &mut guesser),
                Err(SaslFailure::BadCredentials(_))
            ));
        }
    }

    #[test]
    fn a_server_without_the_credential_or_out_of_bounds_is_refused() {
        let hash = ScramHash::Sha256;
        let mut client = ScramClient::new(hash, "alice", "pw");
        let nonce = client.nonce.clone();
        let salt = BASE64.encode(b"salt");
        for bad in [
            format!("r=other{nonce},s={salt},i=4096"),
            format!("r={nonce},s={salt},i=4096"),
            format!("r={nonce}x,s={salt},i=1000000000"),
            format!("r={nonce}x,s={salt},i=10"),
            format!("r={nonce}x,i=4096"),
            "e=other-error".to_string(),
        ] {
            assert!(client.final_message(bad.as_bytes()).is_err(), "{bad}");
        }
        client
            .final_message(format!("r={nonce}x,s={salt},i=4096").as_bytes())
            .expect("well formed");
        // A server that does not hold the credential cannot sign the exchange.
        assert!(client.check_server_final(b"v=AAAA").is_err());
        assert!(client.check_server_final(b"e=invalid-proof").is_err());
        assert!(client.check_server_final(b"").is_err());
    }

    #[test]
    fn the_plain_message_is_what_the_server_checks() {
        let credential = ScramCredential::new(ScramHash::Sha256, "pw", 4096);
        let lookup = |_: &str| vec![(ScramHash::Sha256, credential.clone())];
        assert_eq!(
            check_plain(&plain_message("alice", "pw"), lookup).as_deref(),
            Ok("alice")
        );
        assert!(check_plain(&plain_message("alice", "other"), lookup).is_err());
    }
}
