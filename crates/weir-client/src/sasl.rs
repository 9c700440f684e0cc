//! SASL login of a connection, as a Kafka client performs it on a SASL listener:
//! SaslHandshake names the mechanism, then SaslAuthenticate carries its tokens (PLAIN: one;
//! SCRAM: two, the server's last proving it holds the credential too).

use std::fmt;

use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use weir_sasl::{Mechanism, ScramClient, ScramHash};

use crate::connection::Connection;
use crate::error::{ClientError, Result};

/// A user and password, and the mechanism that sends them.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslLogin {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: Mechanism,
    /// The user name.
    pub username: String,
    /// The password (never shown by `Debug`).
    pub password: String,
}

impl fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism.name())
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Logs `connection` in as `login`; a refusal is [`ClientError::Authentication`] with the
/// broker's reason.
pub(crate) async fn authenticate(connection: &Connection, login: &SaslLogin) -> Result<()> {
    let refused = |reason: String| ClientError::Authentication {
        user: login.username.clone(),
        reason,
    };
    let mut handshake = SaslHandshakeRequest::default();
    handshake.mechanism = StrBytes::from_static_str(login.mechanism.name());
    let answer: SaslHandshakeResponse = connection
        .call_at(ApiKey::SaslHandshake, 1, &handshake)
        .await?;
    if answer.error_code != 0 {
        let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(refused(format!(
            "the listener does not offer {} (it offers: {})",
            login.mechanism.name(),
            if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            }
        )));
    }
    let version = connection.version_for(ApiKey::SaslAuthenticate, 0, 2)?;
    let step = |token: Vec<u8>| async move {
        let mut request = SaslAuthenticateRequest::default();
        request.auth_bytes = token.into();
        let answer: SaslAuthenticateResponse = connection
            .call_at(ApiKey::SaslAuthenticate, version, &request)
            .await?;
        if answer.error_code != 0 {
            let reason = answer
                .error_message
                .map(|m| m.to_string())
                .unwrap_or_else(|| format!("error code {}", answer.error_code));
            return Err(refused(reason));
        }
        Ok(answer.auth_bytes.to_vec())
    };
    match ScramHash::of(login.mechanism) {
        None => {
            step(weir_sasl::plain_message(&login.username, &login.password)).await?;
        }
        Some(hash) => {
            let mut scram = ScramClient::new(hash, &login.username, &login.password);
            let server_first = step(scram.first_message()).await?;
            let last = scram
                .final_message(&server_first)
                .map_err(|e| refused(e.to_string()))?;
            let server_final = step(last).await?;
            scram
                .check_server_final(&server_final)
                .map_err(|e| refused(e.to_string()))?;
        }
    }
    Ok(())
}
