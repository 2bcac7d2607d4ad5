//! Fuzz target `server_message_decode`: the body is `baton_protocol::fuzzing::server_message_decode`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_protocol::fuzzing::server_message_decode(data));
