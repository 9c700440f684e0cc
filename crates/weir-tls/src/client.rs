//! TLS for Weir's client connections (its commands, with Kafka client properties): the
//! broker's certificate checked against the CA certificates of a PEM file and against the
//! host connected to, and a client certificate for listeners that ask for one.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, Resumption, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::{certificates, crypto_provider, keep_reloading, private_key, read_pem_file, TlsError};

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
    Ok(ClientTls::load(truststore, keystore)?.config())
}

/// TLS of a process's own client connections whose files may be renewed (the brokers' and
/// controllers' connections to one another): one [`ClientConfig`] that stays the same while
/// the CA certificates it trusts and the certificate it shows are replaced when the files'
/// bytes change, so connections made after a renewal use the new files.
#[derive(Debug)]
pub struct ClientTls {
    truststore: PathBuf,
    keystore: Option<PathBuf>,
    config: Arc<ClientConfig>,
    current: Arc<Renewable>,
}

/// The trust and the certificate in force, behind the verifier and resolver of the config.
#[derive(Debug)]
struct Renewable {
    loaded: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    verifier: Arc<WebPkiServerVerifier>,
    key: Option<Arc<CertifiedKey>>,
    /// The files' bytes they were made from.
    sources: (Vec<u8>, Option<Vec<u8>>),
}

impl Renewable {
    fn loaded(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.loaded.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl ServerCertVerifier for Renewable {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verifier = self.loaded().verifier.clone();
        verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let verifier = self.loaded().verifier.clone();
        verifier.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let verifier = self.loaded().verifier.clone();
        verifier.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.loaded().verifier.supported_verify_schemes()
    }
}

impl ResolvesClientCert for Renewable {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.loaded().key.clone()
    }

    fn has_certs(&self) -> bool {
        self.loaded().key.is_some()
    }
}

impl ClientTls {
    /// Trusts the CA certificates in the PEM file `truststore` and shows the key and chain of
    /// the PEM file `keystore` when given (as [`client_config`]); an error names the setting
    /// and what is wrong.
    pub fn load(truststore: &Path, keystore: Option<&Path>) -> Result<Arc<ClientTls>, TlsError> {
        let loaded = Self::read(truststore, keystore)?;
        let current = Arc::new(Renewable {
            loaded: RwLock::new(loaded),
        });
        let mut config = ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("TLS versions: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(current.clone())
            .with_client_cert_resolver(current.clone());
        // A resumed session skips both certificates: every connection shows and checks the
        // ones in force (these connections are few and long-lived).
        config.resumption = Resumption::disabled();
        Ok(Arc::new(ClientTls {
            truststore: truststore.to_path_buf(),
            keystore: keystore.map(Path::to_path_buf),
            config: Arc::new(config),
            current,
        }))
    }

    /// The config to connect with; it follows the files.
    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    fn read(truststore: &Path, keystore: Option<&Path>) -> Result<Loaded, TlsError> {
        let trusted = read_pem_file(truststore, "ssl.truststore.location")?;
        let shown = keystore
            .map(|path| read_pem_file(path, "ssl.keystore.location"))
            .transpose()?;
        let provider = crypto_provider();
        let mut roots = RootCertStore::empty();
        for certificate in certificates(&trusted, "ssl.truststore.location")? {
            roots.add(certificate).map_err(|e| {
                TlsError(format!(
                    "ssl.truststore.location: unusable certificate: {e}"
                ))
            })?;
        }
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| TlsError(format!("ssl.truststore.location: {e}")))?;
        let key = match &shown {
            None => None,
            Some(pem) => {
                let chain = certificates(pem, "ssl.keystore.location")?;
                let key =
                    CertifiedKey::from_der(chain, private_key(pem)?, &provider).map_err(|e| {
                        TlsError(format!(
                        "ssl.keystore.location: the key and certificate chain cannot serve: {e}"
                    ))
                    })?;
                Some(Arc::new(key))
            }
        };
        Ok(Loaded {
            verifier,
            key,
            sources: (trusted, shown),
        })
    }

    /// Reads the files again and, when their bytes changed and still make a usable
    /// configuration, puts it in force for the connections made from now on. `Ok(true)` when
    /// it changed; on an error what is in force stays.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let loaded = Self::read(&self.truststore, self.keystore.as_deref())?;
        if self.current.loaded().sources == loaded.sources {
            return Ok(false);
        }
        *self
            .current
            .loaded
            .write()
            .unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(true)
    }

    /// Reloads the files when they change, every `interval`, until `stop` turns true; `what`
    /// names the connections in the log.
    pub async fn watch(
        self: Arc<Self>,
        what: String,
        interval: Duration,
        stop: watch::Receiver<bool>,
    ) {
        let files = format!("{what} ({})", self.truststore.display());
        keep_reloading(files, interval, stop, || self.reload_if_changed()).await;
    }
}
