//! Fuzz target `server_conn`: the body is `baton_server::fuzzing::server_conn`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_server::fuzzing::server_conn(data));
