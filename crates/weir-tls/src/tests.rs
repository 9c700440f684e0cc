use rcgen::{
    BasicConstraints, Certificate, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsConnector;

use super::*;

/// A certificate authority and what it signs, in PEM.
struct Authority {
    certificate: Certificate,
    key: KeyPair,
}

impl Authority {
    fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("key");
        let certificate = params.self_signed(&key).expect("self-signed");
        Authority { certificate, key }
    }

    /// A leaf certificate and key for `purpose`, as PEM (certificate, key).
    fn issue(&self, name: &str, purpose: ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params = CertificateParams::new(vec![name.to_string(), "127.0.0.1".to_string()])
            .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().expect("key");
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .expect("signed");
        (certificate.pem(), key.serialize_pem())
    }

    fn pem(&self) -> String {
        self.certificate.pem()
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    authority: Authority,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().expect("tempdir"),
            authority: Authority::new("weir test CA"),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    /// A keystore (key, then chain) for the server, and a truststore of the CA.
    fn settings(&self, client_auth: ClientAuth) -> TlsSettings {
        let (chain, key) = self
            .authority
            .issue("localhost", ExtendedKeyUsagePurpose::ServerAuth);
        TlsSettings {
            keystore: self.write("server.pem", &format!("{key}{chain}")),
            truststore: Some(self.write("ca.pem", &self.authority.pem())),
            client_auth,
            versions: vec![TlsVersion::Tls12, TlsVersion::Tls13],
        }
    }

    /// A client trusting the CA, presenting a certificate of its own when `identify`.
    fn client(
        &self,
        identify: bool,
        versions: &[&'static SupportedProtocolVersion],
    ) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.authority.pem().as_bytes()).expect("ca"))
            .expect("root");
        let provider = crypto_provider();
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots);
        let config = match identify {
            true => {
                let (chain, key) = self
                    .authority
                    .issue("client-1", ExtendedKeyUsagePurpose::ClientAuth);
                builder
                    .with_client_auth_cert(
                        certificates(chain.as_bytes(), "chain").expect("chain"),
                        private_key(key.as_bytes()).expect("key"),
                    )
                    .expect("client cert")
            }
            false => builder.with_no_client_auth(),
        };
        TlsConnector::from(Arc::new(config))
    }
}

const ALL: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12, &rustls::version::TLS13];

/// Serves one connection with `tls`, echoing one line; returns the address.
async fn echo_server(tls: Arc<ServerTls>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.expect("accept");
            let tls = tls.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = tls.accept(stream, Duration::from_secs(5)).await else {
                    return;
                };
                let mut buffer = [0u8; 5];
                if stream.read_exact(&mut buffer).await.is_ok() {
                    let _ = stream.write_all(&buffer).await;
                    let _ = stream.flush().await;
                }
            });
        }
    });
    address
}

/// Connects, sends "hello" and reads it back; the server's certificate and the version.
async fn talk(
    address: std::net::SocketAddr,
    connector: &TlsConnector,
) -> std::io::Result<(Vec<u8>, rustls::ProtocolVersion)> {
    let tcp = tokio::net::TcpStream::connect(address).await?;
    let name = ServerName::try_from("localhost").expect("name");
    let mut stream = connector.connect(name, tcp).await?;
    stream.write_all(b"hello").await?;
    stream.flush().await?;
    let mut buffer = [0u8; 5];
    stream.read_exact(&mut buffer).await?;
    assert_eq!(&buffer, b"hello");
    let (_, session) = stream.get_ref();
    let leaf = session.peer_certificates().expect("server certificate")[0].to_vec();
    let version = session.protocol_version().expect("version");
    Ok((leaf, version))
}

#[tokio::test]
async fn a_pem_keystore_serves_tls_1_3_and_1_2() {
    let fixture = Fixture::new();
    let tls = ServerTls::load(fixture.settings(ClientAuth::None)).expect("load");
    let address = echo_server(tls).await;
    let (_, version) = talk(address, &fixture.client(false, ALL))
        .await
        .expect("tls 1.3");
    assert_eq!(version, rustls::ProtocolVersion::TLSv1_3);
    let only_12 = fixture.client(false, &[&rustls::version::TLS12]);
    let (_, version) = talk(address, &only_12).await.expect("tls 1.2");
    assert_eq!(version, rustls::ProtocolVersion::TLSv1_2);
}

#[tokio::test]
async fn ssl_enabled_protocols_leaves_out_what_it_does_not_name() {
    let fixture = Fixture::new();
    let mut settings = fixture.settings(ClientAuth::None);
    settings.versions = TlsVersion::parse_list("TLSv1.3").expect("list");
    let address = echo_server(ServerTls::load(settings).expect("load")).await;
    let only_12 = fixture.client(false, &[&rustls::version::TLS12]);
    assert!(talk(address, &only_12).await.is_err());
    assert!(talk(address, &fixture.client(false, ALL)).await.is_ok());
}

#[tokio::test]
async fn required_client_auth_refuses_a_client_without_a_certificate() {
    let fixture = Fixture::new();
    let tls = ServerTls::load(fixture.settings(ClientAuth::Required)).expect("load");
    let address = echo_server(tls).await;
    assert!(talk(address, &fixture.client(false, ALL)).await.is_err());
    assert!(talk(address, &fixture.client(true, ALL)).await.is_ok());

    let other = Fixture::new();
    assert!(
        talk(address, &other.client(true, ALL)).await.is_err(),
        "a certificate from another CA (and a server it does not trust) is refused"
    );
}

#[tokio::test]
async fn requested_client_auth_lets_both_in() {
    let fixture = Fixture::new();
    let tls = ServerTls::load(fixture.settings(ClientAuth::Requested)).expect("load");
    let address = echo_server(tls).await;
    assert!(talk(address, &fixture.client(false, ALL)).await.is_ok());
    assert!(talk(address, &fixture.client(true, ALL)).await.is_ok());
}

#[tokio::test]
async fn plaintext_on_a_tls_port_fails_the_handshake_at_once() {
    let fixture = Fixture::new();
    let tls = ServerTls::load(fixture.settings(ClientAuth::None)).expect("load");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let client = tokio::spawn(async move {
        let mut tcp = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        // A Kafka ApiVersions v3 request frame's start, as a plaintext client sends it.
        tcp.write_all(&[
            0, 0, 0, 20, 0, 18, 0, 3, 0, 0, 0, 1, 0, 4, b'k', b'c', b'a', b't',
        ])
        .await
        .expect("write");
        let mut rest = Vec::new();
        let _ = tcp.read_to_end(&mut rest).await;
    });
    let (stream, _) = listener.accept().await.expect("accept");
    let started = std::time::Instant::now();
    let refused = tls.accept(stream, Duration::from_secs(10)).await;
    assert!(refused.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once, not at the deadline"
    );
    client.await.expect("client");
}

#[tokio::test]
async fn a_silent_client_is_dropped_at_the_handshake_deadline() {
    let fixture = Fixture::new();
    let tls = ServerTls::load(fixture.settings(ClientAuth::None)).expect("load");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let _silent = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let (stream, _) = listener.accept().await.expect("accept");
    let error = tls
        .accept(stream, Duration::from_millis(200))
        .await
        .expect_err("deadline");
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
}

#[tokio::test]
async fn a_renewed_certificate_is_served_after_reload_and_a_broken_one_is_not() {
    let fixture = Fixture::new();
    let settings = fixture.settings(ClientAuth::None);
    let keystore = settings.keystore.clone();
    let tls = ServerTls::load(settings).expect("load");
    let address = echo_server(tls.clone()).await;
    let client = fixture.client(false, ALL);
    let (before, _) = talk(address, &client).await.expect("before");
    assert!(!tls.reload_if_changed().expect("unchanged"));

    let (chain, key) = fixture
        .authority
        .issue("localhost", ExtendedKeyUsagePurpose::ServerAuth);
    std::fs::write(&keystore, format!("{chain}{key}")).expect("renew");
    assert!(tls.reload_if_changed().expect("renewed"));
    let (after, _) = talk(address, &client).await.expect("after");
    assert_ne!(before, after, "new connections get the renewed certificate");

    std::fs::write(&keystore, &chain[..chain.len() / 2]).expect("half-written file");
    assert!(tls.reload_if_changed().is_err());
    let (kept, _) = talk(address, &client).await.expect("kept");
    assert_eq!(
        kept, after,
        "a file that cannot serve leaves the one in force"
    );
}

/// A process's own client TLS follows its files: a new truststore or client certificate is
/// used by the connections made after a reload, and a file that cannot serve leaves what is in
/// force.
#[tokio::test]
async fn a_client_renews_its_trust_and_certificate_on_reload() {
    let fixture = Fixture::new();
    let address =
        echo_server(ServerTls::load(fixture.settings(ClientAuth::Required)).expect("load")).await;
    let (chain, key) = fixture
        .authority
        .issue("client-1", ExtendedKeyUsagePurpose::ClientAuth);
    let truststore = fixture.write("client-ca.pem", &fixture.authority.pem());
    let keystore = fixture.write("client.pem", &format!("{key}{chain}"));
    let tls = ClientTls::load(&truststore, Some(&keystore)).expect("load");
    let connector = TlsConnector::from(tls.config());
    assert!(
        talk(address, &connector).await.is_ok(),
        "trusted and identified"
    );
    assert!(!tls.reload_if_changed().expect("unchanged"));

    let stranger = Authority::new("another CA");
    std::fs::write(&truststore, stranger.pem()).expect("trust another CA");
    assert!(tls.reload_if_changed().expect("renewed"));
    assert!(
        talk(address, &connector).await.is_err(),
        "the server is no longer trusted"
    );

    std::fs::write(&truststore, fixture.authority.pem()).expect("trust the CA again");
    let (chain, key) = stranger.issue("client-1", ExtendedKeyUsagePurpose::ClientAuth);
    std::fs::write(&keystore, format!("{key}{chain}")).expect("a certificate of another CA");
    assert!(tls.reload_if_changed().expect("renewed"));
    assert!(
        talk(address, &connector).await.is_err(),
        "the server refuses the new certificate"
    );

    let (chain, key) = fixture
        .authority
        .issue("client-1", ExtendedKeyUsagePurpose::ClientAuth);
    std::fs::write(&keystore, format!("{key}{chain}")).expect("renewed by the CA");
    assert!(tls.reload_if_changed().expect("renewed"));
    assert!(talk(address, &connector).await.is_ok(), "renewed");

    std::fs::write(&keystore, &chain[..chain.len() / 2]).expect("half-written file");
    assert!(tls.reload_if_changed().is_err());
    assert!(
        talk(address, &connector).await.is_ok(),
        "what was in force stays"
    );
}

fn load_error(settings: TlsSettings) -> String {
    match ServerTls::load(settings) {
        Ok(_) => panic!("loaded"),
        Err(error) => error.0,
    }
}

#[test]
fn unusable_files_are_refused_with_the_setting_named() {
    let fixture = Fixture::new();
    let good = fixture.settings(ClientAuth::None);
    let pem = std::fs::read_to_string(&good.keystore).expect("read");
    let (chain, _) = fixture
        .authority
        .issue("localhost", ExtendedKeyUsagePurpose::ServerAuth);
    let other_key = KeyPair::generate().expect("key").serialize_pem();

    let missing = TlsSettings {
        keystore: fixture.dir.path().join("absent.pem"),
        ..good.clone()
    };
    assert!(load_error(missing).starts_with("ssl.keystore.location: cannot read"));

    let no_key = TlsSettings {
        keystore: fixture.write("chain-only.pem", &chain),
        ..good.clone()
    };
    assert!(load_error(no_key).contains("no private key"));

    let encrypted = pem.replace(" PRIVATE KEY", " ENCRYPTED PRIVATE KEY");
    let encrypted = TlsSettings {
        keystore: fixture.write("encrypted.pem", &encrypted),
        ..good.clone()
    };
    assert!(load_error(encrypted).contains("encrypted"));

    let mismatched = TlsSettings {
        keystore: fixture.write("mismatched.pem", &format!("{other_key}{chain}")),
        ..good.clone()
    };
    assert!(load_error(mismatched).contains("cannot serve"));

    let no_truststore = TlsSettings {
        truststore: None,
        client_auth: ClientAuth::Required,
        ..good.clone()
    };
    assert!(load_error(no_truststore).contains("ssl.truststore.location"));

    // A keystore whose key does not match its chain, as truststore too: no error quotes it.
    let secret_line = other_key.lines().nth(1).expect("key line");
    let error = load_error(TlsSettings {
        keystore: fixture.write("x.pem", &format!("{other_key}{chain}")),
        truststore: Some(fixture.write("y.pem", &other_key)),
        client_auth: ClientAuth::Required,
        ..good.clone()
    });
    assert!(!error.contains(secret_line), "no key material in {error}");
}

#[test]
fn settings_parse_as_kafka_writes_them() {
    assert_eq!(ClientAuth::parse("required"), Ok(ClientAuth::Required));
    assert_eq!(ClientAuth::parse("REQUESTED"), Ok(ClientAuth::Requested));
    assert_eq!(ClientAuth::parse("none"), Ok(ClientAuth::None));
    assert!(ClientAuth::parse("sometimes").is_err());
    assert_eq!(
        TlsVersion::parse_list("TLSv1.3, TLSv1.2,TLSv1.3"),
        Ok(vec![TlsVersion::Tls12, TlsVersion::Tls13])
    );
    assert!(TlsVersion::parse_list("TLSv1.1,TLSv1.2")
        .expect_err("old")
        .0
        .contains("TLSv1.1"));
    assert!(TlsVersion::parse_list("").is_err());
    assert!(TlsVersion::parse_list("TLS1.3").is_err());
}
