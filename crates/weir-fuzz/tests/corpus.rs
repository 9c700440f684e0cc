//! Replays every saved fuzz input through its harness: the seeds (requests recorded from real
//! clients, their batches, segment files), the minimized corpus, and every input that once
//! made a harness fail (`fuzz/regressions`).

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions", "seeds"] {
        collect(&fuzz.join(dir).join(target), &mut files);
    }
    files.sort();
    files
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn replay(target: &str, harness: fn(&[u8]), at_least: usize) {
    let files = inputs(target);
    assert!(
        files.len() >= at_least,
        "{target}: expected at least {at_least} saved inputs, found {}",
        files.len()
    );
    for file in files {
        let data = std::fs::read(&file).expect("read input");
        let outcome = std::panic::catch_unwind(|| harness(&data));
        assert!(outcome.is_ok(), "{target} fails on {}", file.display());
    }
}

#[test]
fn decode_request_corpus() {
    replay("decode_request", weir_fuzz::decode_request, 50);
}

#[test]
fn validate_batch_corpus() {
    replay("validate_batch", weir_fuzz::validate_batch, 20);
}

#[test]
fn recover_log_corpus() {
    replay("recover_log", weir_fuzz::recover_log, 5);
}

#[test]
fn controller_frames_corpus() {
    replay("controller_frames", weir_fuzz::controller_frames, 5);
}

#[test]
fn sasl_exchange_corpus() {
    replay("sasl_exchange", weir_fuzz::sasl_exchange, 6);
}

#[test]
fn tls_handshake_corpus() {
    replay("tls_handshake", weir_fuzz::tls_handshake, 6);
}

/// The TLS harness reaches the handshake: a recorded ClientHello is answered with the server's
/// hello (a handshake record), a Kafka request in the clear is not.
#[test]
fn tls_handshake_seeds_reach_the_handshake() {
    for file in inputs("tls_handshake") {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let answers = weir_fuzz::tls_answers(&std::fs::read(&file).expect("read seed"));
        let handshake = answers.first() == Some(&0x16);
        match name.starts_with("plaintext") {
            true => assert!(!handshake, "{name}: answered with a handshake"),
            false
                if file.starts_with(
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds"),
                ) =>
            {
                assert!(
                    handshake,
                    "{name}: not answered with the server's hello: {answers:02x?}"
                )
            }
            false => {}
        }
    }
}
