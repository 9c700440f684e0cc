//! `cargo fuzz run recover_log`: see `weir_fuzz::recover_log`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::recover_log(data));
