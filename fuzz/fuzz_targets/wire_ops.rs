//! Fuzz target `wire_ops`: the body is `baton_protocol::fuzzing::wire_ops`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_protocol::fuzzing::wire_ops(data));
