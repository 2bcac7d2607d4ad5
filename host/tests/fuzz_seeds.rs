//! Replays the committed `fuzz/seeds/jsonl_reader/` inputs through `baton_host::fuzzing::jsonl_reader` on
//! stable `cargo test` (the cargo-fuzz target runs the same body), and checks the generated
//! seeds are committed. Regenerate (never deletes files):
//!
//! ```sh
//! cargo test -p baton-host --test fuzz_seeds -- --ignored regenerate_seeds
//! ```

use std::fs;
use std::path::PathBuf;

const TARGET: &str = "jsonl_reader";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(TARGET)
}

/// Deterministic pseudo-random inputs (xorshift), so the generator needs no crate.
fn random_inputs(count: usize, len: usize, salt: u64) -> Vec<Vec<u8>> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ salt;
    (0..count)
        .map(|i| {
            (0..len + i * 7)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect()
        })
        .collect()
}

/// Every generated seed, by file name.
fn generate() -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> = HAND
        .iter()
        .map(|(name, bytes)| (format!("hand-{name}"), bytes.to_vec()))
        .collect();
    for (i, bytes) in random_inputs(RANDOM_COUNT, RANDOM_LEN, SALT)
        .into_iter()
        .enumerate()
    {
        seeds.push((format!("random-{i:02}"), bytes));
    }
    seeds
}

#[test]
fn seeds_replay() {
    let mut n = 0;
    for entry in fs::read_dir(dir()).expect("the seed directory exists") {
        let path = entry.unwrap().path();
        let bytes = fs::read(&path).unwrap();
        eprintln!("replaying {}", path.display());
        baton_host::fuzzing::jsonl_reader(&bytes);
        n += 1;
    }
    assert!(n > 0, "no seeds for {TARGET}");
}

#[test]
fn generated_seeds_are_committed_and_pass() {
    for (name, bytes) in generate() {
        baton_host::fuzzing::jsonl_reader(&bytes);
        let committed = fs::read(dir().join(&name))
            .unwrap_or_else(|_| panic!("seed {name} is not committed; run regenerate_seeds"));
        assert_eq!(
            committed, bytes,
            "seed {name} is stale; run regenerate_seeds"
        );
    }
}

#[test]
#[ignore = "writes fuzz/seeds/; run by hand after changing the generator"]
fn regenerate_seeds() {
    fs::create_dir_all(dir()).unwrap();
    for (name, bytes) in generate() {
        fs::write(dir().join(name), bytes).unwrap();
    }
}

const RANDOM_COUNT: usize = 12;
const RANDOM_LEN: usize = 64;
const SALT: u64 = 3;

// Inputs for `jsonl_reader`: byte 0 even = the rest is a session file; odd = generator bytes.
const HAND: &[(&str, &[u8])] = &[
    ("raw-empty", b"\x00"),
    ("raw-header-only", b"\x00{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"timestamp\":\"2025-05-30T01:20:00.000Z\",\"cwd\":\"/w\"}\n"),
    ("raw-torn-header", b"\x00{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"times"),
    ("raw-bad-header", b"\x00{\"type\":\"other\"}\n{\"id\":\"1\"}\n"),
    ("raw-entries-and-torn-tail", b"\x00{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"timestamp\":\"t\",\"cwd\":\"/w\"}\n{\"id\":\"00000001\",\"parentId\":null,\"timestamp\":\"2025-05-30T01:20:00.000Z\",\"type\":\"model_change\",\"provider\":\"p\",\"modelId\":\"m\"}\n{\"id\":\"00000002\",\"parentId\":\"00000001\",\"timestamp\":\"t\",\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"hi\",\"timestamp\":1}}\n{\"id\":\"00000003\",\"parentId\":\"00000002\",\"timestamp\":\"t\",\"type\":\"mess"),
    ("raw-middle-garbage-and-blank-lines", b"\x00{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"timestamp\":\"t\",\"cwd\":\"/w\"}\n\n{\"id\":\"a\",\"timestamp\":\"t\",\"type\":\"from_the_future\"}\nnot json\n{\"id\":\"00000001\",\"parentId\":null,\"timestamp\":\"t\",\"type\":\"session_info\",\"name\":\"n\"}\n\n"),
    ("raw-parent-cycle", b"\x00{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"timestamp\":\"t\",\"cwd\":\"/w\"}\n{\"id\":\"a\",\"parentId\":\"b\",\"timestamp\":\"t\",\"type\":\"session_info\",\"name\":null}\n{\"id\":\"b\",\"parentId\":\"a\",\"timestamp\":\"t\",\"type\":\"compaction\",\"summary\":\"s\",\"firstKeptEntryId\":\"a\",\"tokensBefore\":5}\n"),
    ("raw-custom-data", b"\x00{\"type\":\"session\",\"version\":1,\"id\":\"s\",\"timestamp\":\"t\",\"cwd\":\"/w\"}\n{\"id\":\"1\",\"parentId\":null,\"timestamp\":\"t\",\"type\":\"custom\",\"customType\":\"c\",\"data\":{\"n\":1.5,\"big\":9007199254740991,\"s\":\"\\u0000\",\"a\":[null,true]}}\n"),
    ("gen-short", b"\x01\x05\x01\x02\x03\x04\x05\x06\x07\x08\x09"),
    ("gen-long", b"\x01\x17\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f generator bytes for the session entries"),
];
