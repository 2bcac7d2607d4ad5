//! Replays the committed `fuzz/seeds/client_replica/` inputs through `baton_client::fuzzing::client_replica` on
//! stable `cargo test` (the cargo-fuzz target runs the same body), and checks the generated
//! seeds are committed. Regenerate (never deletes files):
//!
//! ```sh
//! cargo test -p baton-client --test fuzz_seeds -- --ignored regenerate_seeds
//! ```

use std::fs;
use std::path::PathBuf;

const TARGET: &str = "client_replica";

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
        baton_client::fuzzing::client_replica(&bytes);
        n += 1;
    }
    assert!(n > 0, "no seeds for {TARGET}");
}

#[test]
fn generated_seeds_are_committed_and_pass() {
    for (name, bytes) in generate() {
        baton_client::fuzzing::client_replica(&bytes);
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

const RANDOM_COUNT: usize = 16;
const RANDOM_LEN: usize = 80;
const SALT: u64 = 2;

// Inputs for `client_replica`: byte 0 even = singleton, odd = keyed; then generator bytes
// (`byte % n` choices; a step's first byte picks the corruption, 5..=15 = none).
const HAND: &[(&str, &[u8])] = &[
    (
        "singleton-clean",
        &[
            0, 1, 5, 2, 4, 3, 4, 1, 5, 10, 0, 0, 2, 4, 10, 0, 1, 4, 2, 11, 1, 1, 2, 5, 12, 0, 0, 3,
            4, 13, 1, 0, 4, 3,
        ],
    ),
    (
        "singleton-lifecycle",
        &[
            0, 1, 5, 2, 4, 5, 6, 5, 7, 5, 8, 1, 2, 3, 4, 5, 0, 0, 4, 1, 5, 6, 5, 0, 0, 0, 4, 3,
        ],
    ),
    (
        "singleton-drop-then-update",
        &[0, 1, 5, 2, 4, 0, 0, 0, 4, 2, 5, 0, 0, 4, 3, 5, 0, 0, 4, 9],
    ),
    (
        "singleton-dup",
        &[0, 1, 5, 2, 4, 1, 0, 1, 4, 2, 5, 0, 1, 4, 3],
    ),
    (
        "singleton-reorder",
        &[0, 1, 5, 2, 4, 2, 0, 0, 4, 2, 5, 0, 0, 4, 3, 5, 0, 0, 4, 4],
    ),
    (
        "singleton-garbage",
        &[
            0, 1, 5, 2, 4, 3, 0, 0, 4, 2, 0, 2, 9, 5, 0, 0, 4, 3, 3, 0, 0, 4, 5, 1, 5, 0, 1, 4, 1,
        ],
    ),
    (
        "keyed-spawn-update-close",
        &[
            1, 2, 1, 4, 1, 5, 5, 7, 2, 2, 4, 2, 3, 5, 0, 2, 0, 4, 2, 5, 1, 2, 1, 4, 6, 5, 9, 0, 5,
            6, 5, 8, 0, 1, 4, 5, 0, 0, 0, 4, 7,
        ],
    ),
    (
        "keyed-resubscribe",
        &[
            1, 2, 1, 4, 1, 5, 4, 0, 0, 0, 4, 2, 5, 0, 0, 0, 4, 3, 0, 9, 1, 5, 7, 1, 1, 4, 1, 1, 4,
        ],
    ),
];
