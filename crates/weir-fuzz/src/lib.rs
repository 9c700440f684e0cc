//! `weir-fuzz` holds the fuzz harnesses: functions that take arbitrary bytes and drive one of
//! Weir's parsers of untrusted input — the request decoder, the batch and record validator,
//! log recovery from arbitrary segment bytes, the controller port's framing, SASL logins and
//! TLS handshakes — asserting what must hold for any input.
//! The `cargo fuzz` targets in `fuzz/` call them, and `tests/corpus.rs` replays the saved
//! corpus and every input that once failed through them on every test run.
//!
//! It is test support only: nothing in the broker depends on it.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use weir_log::batch::{build_batch, validate_header, ProducerFields};
use weir_log::{validate, Log, LogConfig, ManualClock, ValidationLimits};
use weir_sasl::{check_plain, ScramCredential, ScramHash, ScramServer, ScramStep};
use weir_storage::{FileCache, MemoryStorage};

/// Decodes `data` as a request frame body (after the length prefix). Any input either decodes
/// or yields an error; nothing panics or allocates beyond the input's size.
pub fn decode_request(data: &[u8]) {
    let _ = weir_proto::decode_request(Bytes::copy_from_slice(data));
}

/// Reads `data` as a connection to the controller port delivers it: frames decoded as peers'
/// messages until the bytes end or one is refused. Nothing panics, and no frame's buffer
/// outgrows the bytes that arrived for it, whatever its length prefix says.
pub fn controller_frames(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(weir_controller::read_peer_frames(data));
}

/// Feeds `data` to an SSL listener's TLS as a client's bytes (its ClientHello and whatever
/// follows), then closes the client's side. The handshake answers or fails without a panic
/// or a hang, and never completes: finishing it would take answering this run's server
/// randomness. The listener asks for client certificates (`ssl.client.auth=requested`), so
/// certificate messages are checked too.
pub fn tls_handshake(data: &[u8]) {
    let _ = tls_answers(data);
}

/// What an SSL listener's TLS sends a client whose bytes are `data` (as [`tls_handshake`]
/// feeds them): a ServerHello and the rest of the server's flight for a real ClientHello, an
/// alert or nothing otherwise.
pub fn tls_answers(data: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    static LISTENER: OnceLock<(Arc<weir_tls::ServerTls>, tempfile::TempDir)> = OnceLock::new();
    let (tls, _dir) = LISTENER.get_or_init(tls_listener);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let accept = tls.acceptor().accept(server);
        let send = async move {
            let _ = client.write_all(data).await;
            let _ = client.shutdown().await;
            let mut answers = Vec::new();
            let _ = client.read_to_end(&mut answers).await;
            answers
        };
        let (accepted, answers) = tokio::join!(accept, send);
        assert!(
            accepted.is_err(),
            "a TLS handshake completed without the server's answers"
        );
        answers
    })
}

/// A TLS listener's settings with a fresh self-signed certificate, which also vouches for
/// clients; the directory holding its files.
fn tls_listener() -> (Arc<weir_tls::ServerTls>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a directory");
    let key = rcgen::KeyPair::generate().expect("a key");
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    let certificate = params.self_signed(&key).expect("a certificate");
    let keystore = dir.path().join("broker.pem");
    let truststore = dir.path().join("ca.pem");
    std::fs::write(&keystore, key.serialize_pem() + &certificate.pem()).expect("keystore");
    std::fs::write(&truststore, certificate.pem()).expect("truststore");
    let tls = weir_tls::ServerTls::load(weir_tls::TlsSettings {
        keystore,
        truststore: Some(truststore),
        client_auth: weir_tls::ClientAuth::Requested,
        versions: vec![weir_tls::TlsVersion::Tls12, weir_tls::TlsVersion::Tls13],
    })
    .expect("the listener's TLS");
    (tls, dir)
}

/// The one user the SASL harness knows, and its password.
const SASL_USER: &str = "admin";
const SASL_PASSWORD: &str = "admin-secret";
/// Separates the client's messages in a SASL harness input.
const SASL_TOKEN_END: u8 = 0xff;

/// Drives a SASL login with `data` as the client's side: its first byte picks SCRAM-SHA-256,
/// SCRAM-SHA-512 or PLAIN, the rest is the client's messages, separated by 0xff. Every
/// message is answered or refused without a panic, and a login succeeds only with the
/// password: never for SCRAM (the proof would have to answer this run's random nonce), and
/// for PLAIN only with the right password.
pub fn sasl_exchange(data: &[u8]) {
    static CREDENTIALS: OnceLock<[ScramCredential; 2]> = OnceLock::new();
    let credentials = CREDENTIALS.get_or_init(|| {
        [ScramHash::Sha256, ScramHash::Sha512]
            .map(|hash| ScramCredential::new(hash, SASL_PASSWORD, 4096))
    });
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let mut tokens = rest.split(|b| *b == SASL_TOKEN_END);
    let hash = match choice % 3 {
        0 => ScramHash::Sha256,
        1 => ScramHash::Sha512,
        _ => {
            let lookup = |user: &str| match user {
                SASL_USER => vec![(ScramHash::Sha256, credentials[0].clone())],
                _ => Vec::new(),
            };
            let message = tokens.next().unwrap_or_default();
            if let Ok(user) = check_plain(message, lookup) {
                assert_eq!(user, SASL_USER);
                assert!(message.ends_with(SASL_PASSWORD.as_bytes()));
            }
            return;
        }
    };
    let credential = &credentials[usize::from(hash == ScramHash::Sha512)];
    let mut server = ScramServer::new(hash);
    for token in tokens {
        let lookup = |user: &str| (user == SASL_USER).then(|| credential.clone());
        match server.step(token, lookup, b"fuzz-secret") {
            Ok(ScramStep::Challenge(_)) => {}
            Ok(ScramStep::Authenticated { user, .. }) => {
                panic!("{user} logged in without the password's proof")
            }
            Err(_) => return,
        }
    }
}

/// Validates `data` as a produced record batch. A batch that passes is internally consistent.
pub fn validate_batch(data: &[u8]) {
    let limits = ValidationLimits {
        decompressed_bytes_max: 4 * 1024 * 1024,
        now_ms: 1_700_000_000_000,
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: 3_600_000,
        keys_required: false,
        log_append_time: false,
    };
    if let Ok(batch) = validate(Bytes::copy_from_slice(data), &limits) {
        let header = batch.header();
        assert!(header.record_count > 0);
        assert_eq!(header.last_offset_delta, header.record_count - 1);
        assert_eq!(batch.len(), data.len());
        assert!(validate_header(data).is_ok());
        // Readers of stored batches (the cleaner, the group coordinator) see every record.
        let mut seen = 0;
        weir_log::records::for_each_stored_record(
            data,
            limits.decompressed_bytes_max,
            &mut |_, r| {
                assert!(r.raw.is_some());
                seen += 1;
            },
        )
        .expect("a validated batch reads as stored");
        assert_eq!(seen, header.record_count);
    }
}

/// Plants `data` as the only segment of a log (the first byte chooses whether a recovery
/// checkpoint claims it was cleanly closed), opens the log, reads everything back and appends.
/// Recovery must never panic, and what it keeps must be readable and appendable.
pub fn recover_log(data: &[u8]) {
    let Some((&mode, segment)) = data.split_first() else {
        return;
    };
    let storage = MemoryStorage::new();
    let dir = Path::new("/p");
    storage.plant(&dir.join("00000000000000000000.log"), segment);
    if mode & 1 == 1 {
        storage.plant(&dir.join("clean-shutdown"), b"");
    }
    let files = FileCache::new(Arc::new(storage), 4);
    let config = LogConfig {
        segment_bytes: 1 << 20,
        ..LogConfig::default()
    };
    let Ok((mut log, _)) = Log::open(dir, files, Arc::new(ManualClock::new(0)), config) else {
        return;
    };
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    while offset < end {
        let Ok(Some(view)) = log.read_view(offset, end) else {
            break;
        };
        let Ok(Some(slice)) = view.slice(1 << 20, true) else {
            break;
        };
        let Ok(bytes) = slice.read() else { break };
        let mut rest = &bytes[..];
        let mut advanced = false;
        while let Some(header) = weir_log::BatchHeader::parse(rest) {
            let total = header.total_bytes() as usize;
            if total > rest.len() || header.last_offset() < offset {
                break;
            }
            offset = header.last_offset() + 1;
            advanced = true;
            rest = &rest[total..];
        }
        if !advanced {
            break;
        }
    }
    let batch = build_batch(&[b"after recovery"], 0, ProducerFields::NONE);
    let valid = validate(
        Bytes::from(batch),
        &ValidationLimits::unbounded_time(1 << 20),
    )
    .expect("a built batch is valid");
    if let Ok(info) = log.append(&valid) {
        assert_eq!(
            info.base_offset, end,
            "appends continue at the recovered end"
        );
    }
}
