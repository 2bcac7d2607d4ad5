//! Replays the committed `fuzz/seeds/jsonl_reader/` inputs through `baton_host::fuzzing::jsonl_reader` on
//! stable `cargo test` (the cargo-fuzz target runs the same body), and checks the generated
//! seeds are committed. Regenerate (never deletes files):
//!
//! ```sh
//! cargo test -p baton-host --test fuzz_seeds -- --ignored regenerate_seeds
//! ```

use baton_protocol::fuzzing::SeedSet;

const SEEDS: SeedSet = SeedSet {
    target: "jsonl_reader",
    hand: HAND,
    random_count: 12,
    random_len: 64,
    salt: 3,
};

#[test]
fn seeds_replay() {
    let n = SEEDS.replay(
        env!("CARGO_MANIFEST_DIR"),
        baton_host::fuzzing::jsonl_reader,
    );
    assert!(n > 0, "no seeds for {}", SEEDS.target);
}

#[test]
fn generated_seeds_are_committed_and_pass() {
    SEEDS.check_committed(
        env!("CARGO_MANIFEST_DIR"),
        baton_host::fuzzing::jsonl_reader,
    );
}

#[test]
#[ignore = "writes fuzz/seeds/; run by hand after changing the generator"]
fn regenerate_seeds() {
    SEEDS.write(env!("CARGO_MANIFEST_DIR"));
}

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
