//! Fuzz target `tracker`: the body is `baton_protocol::fuzzing::tracker`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_protocol::fuzzing::tracker(data));
