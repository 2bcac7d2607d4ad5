//! Fuzz target `client_replica`: the body is `baton_client::fuzzing::client_replica`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_client::fuzzing::client_replica(data));
