//! End to end: the service adapter behind a real `baton-server`, driven through the protocol
//! by `baton-client` in process, and the `baton-host` and `baton` binaries as processes.
//!
//! Synchronisation is on observed state (replica contents, output lines, exit status);
//! timeouts only guard against hangs.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod bash_cancel;
mod chord_errors;
mod in_process;
mod process;
mod raw;
mod support;
