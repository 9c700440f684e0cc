//! `cargo fuzz run decode_request`: see `weir_fuzz::decode_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::decode_request(data));
