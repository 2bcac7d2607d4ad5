//! Replays the committed `fuzz/seeds/server_conn/` inputs through `baton_server::fuzzing::server_conn` on
//! stable `cargo test` (the cargo-fuzz target runs the same body), and checks the generated
//! seeds are committed. Regenerate (never deletes files):
//!
//! ```sh
//! cargo test -p baton-server --test fuzz_seeds -- --ignored regenerate_seeds
//! ```

use baton_protocol::fuzzing::SeedSet;

const SEEDS: SeedSet = SeedSet {
    target: "server_conn",
    hand: HAND,
    random_count: 16,
    random_len: 96,
    salt: 1,
};

#[test]
fn seeds_replay() {
    let n = SEEDS.replay(
        env!("CARGO_MANIFEST_DIR"),
        baton_server::fuzzing::server_conn,
    );
    assert!(n > 0, "no seeds for {}", SEEDS.target);
}

#[test]
fn generated_seeds_are_committed_and_pass() {
    SEEDS.check_committed(
        env!("CARGO_MANIFEST_DIR"),
        baton_server::fuzzing::server_conn,
    );
}

#[test]
#[ignore = "writes fuzz/seeds/; run by hand after changing the generator"]
fn regenerate_seeds() {
    SEEDS.write(env!("CARGO_MANIFEST_DIR"));
}

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
