//! `cargo fuzz run controller_frames`: see `weir_fuzz::controller_frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weir_fuzz::controller_frames(data));
