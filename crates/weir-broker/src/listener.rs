//! One listener of a broker as its settings describe it: its name, security protocol,
//! address, and the TLS and SASL it asks of connections.

use weir_sasl::Mechanism;
use weir_tls::TlsSettings;

/// How a listener's connections are secured (`listener.security.protocol.map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// Neither encrypted nor authenticated.
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL authentication without TLS.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    pub(crate) fn parse(text: &str) -> Option<SecurityProtocol> {
        match text.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    /// Kafka's name of the protocol.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// One listener, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The listener's name, upper case (`PLAINTEXT`, `SSL`, `INTERNAL`, …).
    pub name: String,
    /// Its security protocol.
    pub protocol: SecurityProtocol,
    /// Host to bind (empty or a wildcard address: every interface).
    pub host: String,
    /// Port to bind; 0 picks a free one.
    pub port: u16,
    /// The host and port clients are told, when `advertised.listeners` names this listener.
    pub advertised: Option<(String, u16)>,
    /// The TLS settings of an SSL or SASL_SSL listener.
    pub tls: Option<TlsSettings>,
    /// The SASL mechanisms of a SASL_PLAINTEXT or SASL_SSL listener.
    pub sasl: Option<Vec<Mechanism>>,
}

impl ListenerConfig {
    /// The address to bind, `HOST:PORT` (an empty host binds every interface).
    pub fn bind_address(&self) -> String {
        let host = match self.host.as_str() {
            "" => "0.0.0.0",
            host if host.contains(':') => return format!("[{host}]:{}", self.port),
            host => host,
        };
        format!("{host}:{}", self.port)
    }

    /// Whether the bind host is every interface, which cannot be told to clients.
    pub fn binds_wildcard(&self) -> bool {
        self.host.is_empty()
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_unspecified())
    }
}
