//! The network model providers against local fake servers (loopback only, plain HTTP and
//! HTTPS with a CA made at test start): stream shapes, set-up failures inside the stream,
//! abort, interruption, `length` mid tool call, retries and their limits, replay; and the
//! start-up probe against the same servers.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helper functions unwrap like the tests they serve"
)]

mod anthropic;
#[path = "../common/mod.rs"]
mod common;
mod compaction;
mod fake;
mod openai;
mod probe;
mod support;
