//! Fuzz target `jsonl_reader`: the body is `baton_host::fuzzing::jsonl_reader`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| baton_host::fuzzing::jsonl_reader(data));
