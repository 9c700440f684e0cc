//! TLS for Weir's listeners. A listener's settings carry Kafka's names (`ssl.keystore.location`,
//! `ssl.truststore.location`, `ssl.client.auth`, `ssl.enabled.protocols`) and PEM files only:
//! the keystore is one file holding the private key and the certificate chain, leaf first, as
//! Kafka's `ssl.keystore.type=PEM` takes it. [`ServerTls`] is a listener's TLS in force: it
//! hands out acceptors, and [`ServerTls::watch`] reloads the files when their bytes change, so
//! a renewed certificate is served to new connections without a restart (open ones keep the
//! one they shook hands with). Only TLS 1.2 and 1.3 exist here (rustls speaks nothing older).
//! [`client_subject`] names a client by its certificate, as Kafka does. [`client_config`] is
//! the other side, for Weir's own client connections.

mod client;

pub use client::{client_config, connect, ClientTls};

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

mod principal;

/// How often [`ServerTls::watch`] reads the PEM files for changes.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// Largest PEM file read (a chain of a few certificates is a few KiB).
const PEM_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Whether a TLS listener asks clients for a certificate (`ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for (`none`, the default).
    None,
    /// Asked for and checked when given; a client without one is let in (`requested`).
    Requested,
    /// A client without a certificate the truststore vouches for is refused (`required`).
    Required,
}

impl ClientAuth {
    /// Parses Kafka's value of `ssl.client.auth`.
    pub fn parse(text: &str) -> Result<ClientAuth, TlsError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" | "" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            other => Err(TlsError(format!(
                "ssl.client.auth {other:?} is not one of none, requested, required"
            ))),
        }
    }
}

/// A TLS protocol version a listener speaks (`ssl.enabled.protocols`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `TLSv1.2`.
    Tls12,
    /// `TLSv1.3`.
    Tls13,
}

impl TlsVersion {
    /// Parses Kafka's comma-separated `ssl.enabled.protocols`; versions before 1.2 are refused.
    pub fn parse_list(text: &str) -> Result<Vec<TlsVersion>, TlsError> {
        let mut versions = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let version = match name {
                "TLSv1.2" => TlsVersion::Tls12,
                "TLSv1.3" => TlsVersion::Tls13,
                "TLSv1" | "TLSv1.1" | "SSLv3" | "SSLv2" => {
                    return Err(TlsError(format!(
                        "ssl.enabled.protocols: {name} is not offered, only TLSv1.2 and TLSv1.3"
                    )))
                }
                other => {
                    return Err(TlsError(format!(
                        "ssl.enabled.protocols: unknown protocol {other:?} (use TLSv1.2, TLSv1.3)"
                    )))
                }
            };
            if !versions.contains(&version) {
                versions.push(version);
            }
        }
        if versions.is_empty() {
            return Err(TlsError("ssl.enabled.protocols names no protocol".into()));
        }
        versions.sort();
        Ok(versions)
    }

    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        }
    }
}

/// One listener's TLS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.keystore.location`: a PEM file with the private key and the certificate chain.
    pub keystore: PathBuf,
    /// `ssl.truststore.location`: a PEM file of the certificates that vouch for clients
    /// (needed with client authentication).
    pub truststore: Option<PathBuf>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// `ssl.enabled.protocols`.
    pub versions: Vec<TlsVersion>,
}

/// Why TLS could not be set up, worded for the operator (never holding key material).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// The bytes of the files a config was built from, to tell when they change.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sources {
    keystore: Vec<u8>,
    truststore: Option<Vec<u8>>,
}

fn read_pem_file(path: &Path, setting: &str) -> Result<Vec<u8>, TlsError> {
    let unreadable =
        |e: std::io::Error| TlsError(format!("{setting}: cannot read {}: {e}", path.display()));
    let length = std::fs::metadata(path).map_err(unreadable)?.len();
    if length > PEM_FILE_BYTES_MAX {
        return Err(TlsError(format!(
            "{setting}: {} is {length} bytes, more than a PEM file of keys and certificates holds",
            path.display()
        )));
    }
    std::fs::read(path).map_err(unreadable)
}

impl Sources {
    fn read(settings: &TlsSettings) -> Result<Sources, TlsError> {
        Ok(Sources {
            keystore: read_pem_file(&settings.keystore, "ssl.keystore.location")?,
            truststore: settings
                .truststore
                .as_deref()
                .map(|path| read_pem_file(path, "ssl.truststore.location"))
                .transpose()?,
        })
    }
}

fn certificates(pem: &[u8], setting: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{setting}: unreadable PEM: {e}")))?;
    if certificates.is_empty() {
        return Err(TlsError(format!(
            "{setting}: the file holds no certificate (-----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(certificates)
}

fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("ENCRYPTED PRIVATE KEY") || text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(TlsError("ssl.keystore.location: the private key is encrypted; Weir reads unencrypted PEM keys only (decrypt it with `openssl pkcs8 -in KEY -out KEY.pem` and keep the file readable by the broker alone)".into()));
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|_| {
        TlsError(
            "ssl.keystore.location: the file holds no private key (PKCS#8, RSA or EC PEM)".into(),
        )
    })
}

/// The cryptography TLS runs on: *ring*, which builds with a C compiler alone. rustls marks it
/// deprecated for lacking post-quantum key exchange (X25519MLKEM768); clients that offer it
/// settle on X25519, which every Kafka client speaks.
#[allow(deprecated)]
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(settings: &TlsSettings, sources: &Sources) -> Result<ServerConfig, TlsError> {
    let key = private_key(&sources.keystore)?;
    let chain = certificates(&sources.keystore, "ssl.keystore.location")?;
    let provider = crypto_provider();
    let versions: Vec<_> = settings.versions.iter().map(|v| v.rustls()).collect();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| TlsError(format!("ssl.enabled.protocols: {e}")))?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        auth => {
            let Some(pem) = &sources.truststore else {
                return Err(TlsError(
                    "ssl.client.auth asks for client certificates: set ssl.truststore.location to a PEM file of the certificates that vouch for them".into(),
                ));
            };
            let mut roots = RootCertStore::empty();
            for certificate in certificates(pem, "ssl.truststore.location")? {
                roots.add(certificate).map_err(|e| {
                    TlsError(format!(
                        "ssl.truststore.location: unusable certificate: {e}"
                    ))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError(format!("ssl.truststore.location: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(chain, key).map_err(|e| {
        TlsError(format!(
            "ssl.keystore.location: the key and certificate chain cannot serve: {e}"
        ))
    })
}

/// A listener's TLS in force, replaced whole when its files change.
pub struct ServerTls {
    settings: TlsSettings,
    current: RwLock<(Arc<ServerConfig>, Sources)>,
}

impl ServerTls {
    /// Reads and checks the files; an error names the setting and what is wrong.
    pub fn load(settings: TlsSettings) -> Result<Arc<ServerTls>, TlsError> {
        let sources = Sources::read(&settings)?;
        let config = server_config(&settings, &sources)?;
        Ok(Arc::new(ServerTls {
            settings,
            current: RwLock::new((Arc::new(config), sources)),
        }))
    }

    /// An acceptor with the configuration in force.
    pub fn acceptor(&self) -> TlsAcceptor {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        TlsAcceptor::from(current.0.clone())
    }

    /// Takes the TLS handshake of an accepted connection, given at most `deadline`.
    pub async fn accept(
        &self,
        stream: TcpStream,
        deadline: Duration,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let handshake = self.acceptor().accept(stream);
        match tokio::time::timeout(deadline, handshake).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("TLS handshake not done within {} ms", deadline.as_millis()),
            )),
        }
    }

    /// Reads the files again and, when their bytes changed and still make a usable
    /// configuration, puts it in force. `Ok(true)` when it changed; on an error the
    /// configuration in force stays.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let sources = Sources::read(&self.settings)?;
        if self.current.read().unwrap_or_else(|e| e.into_inner()).1 == sources {
            return Ok(false);
        }
        let config = server_config(&self.settings, &sources)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (Arc::new(config), sources);
        Ok(true)
    }

    /// Reloads the files when they change, every `interval`, until `stop` turns true. A file
    /// replaced half-way (unreadable for a moment) is logged and tried again next time.
    pub async fn watch(
        self: Arc<Self>,
        listener: String,
        interval: Duration,
        stop: watch::Receiver<bool>,
    ) {
        let files = format!("listener {listener} ({})", self.settings.keystore.display());
        keep_reloading(files, interval, stop, || self.reload_if_changed()).await;
    }
}

/// Calls `reload` every `interval` until `stop` turns true, logging each change put in force
/// and, once per spell of failures, why the files cannot serve; `files` names them in the log.
async fn keep_reloading(
    files: String,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
    reload: impl Fn() -> Result<bool, TlsError>,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        match reload() {
            Ok(true) => {
                failing = false;
                tracing::info!(target: "weir::tls", files, "TLS certificates reloaded; new connections use them");
            }
            Ok(false) => failing = false,
            Err(error) if !failing => {
                failing = true;
                tracing::error!(target: "weir::tls", files, %error, "TLS files changed but cannot be used; the certificates in force stay");
            }
            Err(_) => {}
        }
    }
}

/// The RFC 2253 distinguished name of the certificate the client of `stream` presented
/// (`CN=client,O=Acme`), if it presented one: what Kafka makes the principal `User:` of.
pub fn client_subject(stream: &TlsStream<TcpStream>) -> Option<String> {
    let (_, connection) = stream.get_ref();
    let leaf = connection.peer_certificates()?.first()?;
    principal::subject_name(leaf)
}

#[cfg(test)]
mod tests;
