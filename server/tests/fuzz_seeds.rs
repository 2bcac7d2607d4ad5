//! Replays the committed `fuzz/seeds/server_conn/` inputs through `baton_server::fuzzing::server_conn` on
//! stable `cargo test` (the cargo-fuzz target runs the same body), and checks the generated
//! seeds are committed. Regenerate (never deletes files):
//!
//! ```sh
//! cargo test -p baton-server --test fuzz_seeds -- --ignored regenerate_seeds
//! ```

use std::fs;
use std::path::PathBuf;

const TARGET: &str = "server_conn";

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
        baton_server::fuzzing::server_conn(&bytes);
        n += 1;
    }
    assert!(n > 0, "no seeds for {TARGET}");
}

#[test]
fn generated_seeds_are_committed_and_pass() {
    for (name, bytes) in generate() {
        baton_server::fuzzing::server_conn(&bytes);
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
const RANDOM_LEN: usize = 96;
const SALT: u64 = 1;

// Scripts for `server_conn` (see `baton_server::fuzzing::server_conn`): five limit bytes, then
// operations; every choice is `byte % n`.
/// Limits: 4 active requests, 3 subscriptions, queue length 4, 64 KiB pending, 1 MiB frames.
const ROOMY: [u8; 5] = [3, 2, 3, 4, 0];
const HAND: &[(&str, &[u8])] = &[
    (
        "subscribe-publish-unsubscribe-late-hello",
        &[
            3, 2, 3, 4, 0, // limits
            0, 0, 1, // queue hello
            4, 0, // deliver everything
            6, 1, // host accepts the attach
            9, 0, // drain: hello
            0, 3, 0, 1, 0, 2, // queue subscribe s0 as r0
            1, 1, 4, 1, 1, 1, 2, // queue echo("a") as r1
            4, 0, // deliver
            8, 0, 1, 1, 2, 70, // publish to s0 before its response
            7, 0, 6, // finish r0 with a snapshot
            8, 0, 1, 0, 50, // publish a 50-byte string
            7, 0, 5, 10, // finish r1 with a string
            2, 8, 0, 0, 2, // queue a cancel for a never-requested id
            0, 5, 0, 2, 2, // queue unsubscribe s0 as r2
            4, 2, 30, 4, 2, 30, 4, 0, // deliver in chunks
            7, 0, 7, 0, // finish r2
            8, 0, 1, 1, 2, 5, // publish after the unsubscribe
            9, 0, // drain
            0, 0, 1, 4, 0, // a second hello: hello_error
            9, 0,
        ],
    ),
    (
        "slow-subscriber-reset-then-overflow",
        &[
            0, 0, 0, 0, 0, // 1 active, 1 subscription, queue 1, 160 bytes pending
            0, 0, 1, 4, 0, 6, 1, 9, 0, // hello, attach, drain
            0, 3, 0, 1, 0, 2, 4, 0, 7, 0, 6, 9, 0, // subscribe s0 and finish it
            8, 0, 1, 1, 2, 1, 8, 0, 1, 1, 2, 2, 8, 0, 1, 1, 2, 3, // publishes, no drain
            8, 0, 1, 0, 120, 8, 0, 1, 0, 150, 8, 0, 1, 0, 199, // bigger ones: overflow
            9, 0,
        ],
    ),
    (
        "garbage-after-hello",
        &[
            3, 2, 3, 4, 0, 0, 0, 1, 4, 0, 6, 1, 3, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x00, 4, 0, 9, 0,
        ],
    ),
    ("handshake-timeout", &[3, 2, 3, 4, 0, 10, 0, 7, 9, 0, 9, 0]),
    (
        "attach-refused-with-queued-requests",
        &[
            3, 2, 3, 4, 0, 0, 0, 1, 1, 1, 4, 1, 1, 1, 2, 4, 0, 6, 0, 9, 0,
        ],
    ),
    (
        "busy-and-duplicate-id",
        &[
            0, 0, 0, 4, 0, // one active request
            0, 0, 1, 4, 0, 6, 1, // hello, attach
            1, 1, 2, 7, 0, 2, 1, 1, 2, 7, 0, 2, 1, 1, 2, 7, 1, 2, 4, 0, // r0, r0, r1
            9, 0, 7, 0, 0, 9, 0,
        ],
    ),
    (
        "requests-before-attach-then-drain-mode",
        &[
            3, 2, 3, 4, 0, 0, 0, 1, 1, 1, 2, 7, 0, 2, 0, 3, 1, 1, 1, 2, 4, 0, 6, 1, 10, 2, 1, 1, 2,
            7, 2, 2, 4, 0, 7, 0, 2, 7, 0, 6, 9, 0,
        ],
    ),
    (
        "small-frames",
        &[
            3, 2, 3, 4, 2, 0, 0, 1, 4, 0, 6, 1, 1, 1, 2, 7, 0, 2, 4, 0, 7, 0, 5, 200, 9, 0,
        ],
    ),
];

#[test]
fn roomy_limits_are_what_the_scripts_say() {
    // Guards the comments above against a change of the limit tables.
    assert_eq!(ROOMY.len(), 5);
}
