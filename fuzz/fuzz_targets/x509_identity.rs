//! Fuzz target `x509_identity`: the body is `baton_server::fuzzing::x509_identity`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_server::fuzzing::x509_identity(data));
