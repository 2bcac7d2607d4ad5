//! Host-side session features for clients that live in a session: the follow-up queue,
//! steering that names its turn, context compaction and `@path` completion, through the
//! runtime's public API. (Presence and the `pi.session` methods over a real server are in
//! `tests/e2e/session_features.rs`.)

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

#[path = "../common/mod.rs"]
mod common;
mod compaction;
mod follow_ups;
mod support;
