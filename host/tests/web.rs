//! The web listener over real loopback sockets: the HTTP checks and headers by raw HTTP, the
//! WebSocket endpoint with a WebSocket client carrying the frame-level test peer into a server
//! with the scriptable test host, pairing through a fake gate; then in front of the real
//! `ServiceHost` with its link store as the gate (`service_host`).

#![cfg(feature = "web")]
#![allow(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "test code: a failed unwrap is a failed test"
)]

#[path = "web/checks.rs"]
mod checks;
mod common;
#[path = "web/https.rs"]
mod https;
#[path = "web/page.rs"]
mod page;
#[path = "web/service_host.rs"]
mod service_host;
#[path = "web/sockets.rs"]
mod sockets;
#[path = "web/support.rs"]
mod support;
