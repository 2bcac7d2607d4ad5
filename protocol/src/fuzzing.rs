//! Fuzz target bodies, replayable from `cargo test` (not a stable API).
