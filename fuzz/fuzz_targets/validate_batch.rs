//! `cargo fuzz run validate_batch`: see `weir_fuzz::validate_batch`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::validate_batch(data));
