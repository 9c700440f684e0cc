//! How a connection is secured on a listener that asks for it, as Kafka's
//! `security.protocol` names it: nothing (PLAINTEXT), TLS (SSL), a SASL login
//! (SASL_PLAINTEXT) or both (SASL_SSL).

use std::sync::Arc;
use std::time::Duration;

use crate::connection::Connection;
use crate::error::Result;
use crate::sasl::{self, SaslLogin};

/// What a listener asks of its clients' connections.
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// TLS with this config (the broker's certificate must name the host connected to).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// The login each connection makes first.
    pub sasl: Option<SaslLogin>,
}

impl Security {
    /// Connects to the broker at `address` as [`Connection::connect`] does, in TLS when this
    /// has a TLS config, then logged in when it has a login (a refusal is
    /// [`crate::ClientError::Authentication`]).
    pub async fn connect(
        &self,
        address: &str,
        client_id: &str,
        request_timeout: Duration,
    ) -> Result<Arc<Connection>> {
        let connection =
            Connection::open(address, client_id, request_timeout, self.tls.as_ref()).await?;
        if let Some(login) = &self.sasl {
            sasl::authenticate(&connection, login).await?;
        }
        Ok(connection)
    }
}
