//! Runtime behaviour through the public API: loop semantics and live sessions.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helper functions unwrap like the tests they serve"
)]

#[path = "../common/mod.rs"]
mod common;
mod file_order;
mod loop_semantics;
mod sessions;
mod support;
