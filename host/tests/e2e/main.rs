//! End to end in process: the service adapter behind a real `baton-server`, driven through
//! the protocol by `baton-client` and by a frame-level peer. The `baton-host` and `baton`
//! binaries as processes are `host/cli/tests/process.rs` (Cargo builds a binary only for
//! its own package's tests).
//!
//! Synchronisation is on observed state (replica contents, output lines, exit status);
//! timeouts only guard against hangs.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod bash_cancel;
mod chord_errors;
#[path = "../common/mod.rs"]
mod common;
mod in_process;
mod raw;
mod session_features;
mod support;

use common::state;
