//! TLS for Weir's client connections (its commands, with Kafka client properties): the
//! broker's certificate checked against the CA certificates of a PEM file and against the
//! host connected to, and a client certificate for listeners that ask for one.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};

use crate::{certificates, crypto_provider, private_key, read_pem_file, TlsError};

/// The name the certificate of the server at `address` (`host:port`, `[v6]:port`) must hold.
pub fn server_name(address: &str) -> Result<ServerName<'static>, TlsError> {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| TlsError(format!("{host} is no host name for TLS: {e}")))
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
