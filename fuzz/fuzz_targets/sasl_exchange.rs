//! `cargo fuzz run sasl_exchange`: see `weir_fuzz::sasl_exchange`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::sasl_exchange(data));
