//! TLS for Weir's client connections (its commands, with Kafka client properties): the
//! broker's certificate checked against the CA certificates of a PEM file and against the
//! host connected to, and a client certificate for listeners that ask for one.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::{certificates, crypto_provider, private_key, read_pem_file, TlsError};

/// The TLS handshake of `stream`, connected to the server at `address` (`host:port`,
/// `[v6]:port`), whose certificate must name that host; given at most `deadline` (then an
/// error of kind `TimedOut`). A host that is no name for TLS is an error of kind
/// `InvalidInput`.
pub async fn connect(
    config: &Arc<ClientConfig>,
    address: &str,
    stream: TcpStream,
    deadline: Duration,
) -> io::Result<TlsStream<TcpStream>> {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{host} is no host name for TLS: {e}"),
        )
    })?;
    let handshake = TlsConnector::from(config.clone()).connect(name, stream);
    tokio::time::timeout(deadline, handshake)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS handshake not done within {} ms", deadline.as_millis()),
            ))
        })
}

/// A client config trusting the CA certificates in the PEM file `truststore` (Kafka's
/// `ssl.truststore.location`), presenting the key and certificate chain of the PEM file
/// `keystore` (`ssl.keystore.location`) when given. TLS 1.2 and 1.3.
pub fn client_config(
    truststore: &Path,
    keystore: Option<&Path>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let pem = read_pem_file(truststore, "ssl.truststore.location")?;
    let mut roots = RootCertStore::empty();
    for certificate in certificates(&pem, "ssl.truststore.location")? {
        roots.add(certificate).map_err(|e| {
            TlsError(format!(
                "ssl.truststore.location: unusable certificate: {e}"
            ))
        })?;
    }
    let builder = ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS versions: {e}")))?
        .with_root_certificates(roots);
    let config = match keystore {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = read_pem_file(path, "ssl.keystore.location")?;
            let chain = certificates(&pem, "ssl.keystore.location")?;
            builder
                .with_client_auth_cert(chain, private_key(&pem)?)
                .map_err(|e| {
                    TlsError(format!(
                        "ssl.keystore.location: the key and certificate chain cannot serve: {e}"
                    ))
                })?
        }
    };
    Ok(Arc::new(config))
}
