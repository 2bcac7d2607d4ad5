//! Fuzz target `cbor_value`: the body is `baton_protocol::fuzzing::cbor_value`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_protocol::fuzzing::cbor_value(data));
