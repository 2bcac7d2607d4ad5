//! Fuzz target `frame_decode`: the body is `baton_protocol::fuzzing::frame_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_protocol::fuzzing::frame_decode(data));
