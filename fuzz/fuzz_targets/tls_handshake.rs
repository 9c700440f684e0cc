//! `cargo fuzz run tls_handshake`: see `weir_fuzz::tls_handshake`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::tls_handshake(data));
