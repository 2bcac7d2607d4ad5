//! Replays the committed `fuzz/seeds/client_replica/` inputs through `baton_client::fuzzing::client_replica` on
//! stable `cargo test` (the cargo-fuzz target runs the same body), and checks the generated
//! seeds are committed. Regenerate (never deletes files):
//!
//! ```sh
//! cargo test -p baton-client --test fuzz_seeds -- --ignored regenerate_seeds
//! ```

use baton_protocol::fuzzing::SeedSet;

const SEEDS: SeedSet = SeedSet {
    target: "client_replica",
    hand: HAND,
    random_count: 16,
    random_len: 80,
    salt: 2,
};

#[test]
fn seeds_replay() {
    let n = SEEDS.replay(
        env!("CARGO_MANIFEST_DIR"),
        baton_client::fuzzing::client_replica,
    );
    assert!(n > 0, "no seeds for {}", SEEDS.target);
}

#[test]
fn generated_seeds_are_committed_and_pass() {
    SEEDS.check_committed(
        env!("CARGO_MANIFEST_DIR"),
        baton_client::fuzzing::client_replica,
    );
}

#[test]
#[ignore = "writes fuzz/seeds/; run by hand after changing the generator"]
fn regenerate_seeds() {
    SEEDS.write(env!("CARGO_MANIFEST_DIR"));
}

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
        // b's update (sequence 1) is held back across a replacement whose b starts at 0, the
        // replacement's own first update of b is lost, and its second (a non-root op) applies
        // cleanly to the stale value: undetectable, so no convergence claim.
        "singleton-reorder-across-replacement",
        &[
            0, 0, 0, 0, 0, 2, 0, 1, 1, 6, 1, 1, 1, 5, 8, 0, 0, 0, 0, 0, 0, 1, 1, 6, 1, 0, 5, 0, 1,
            2, 0, 1, 1,
        ],
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
