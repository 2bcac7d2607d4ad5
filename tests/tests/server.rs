//! Integration tests of baton-server over real Unix, TCP and TLS sockets, with the test host.
//! Ports the upstream server behaviour checklist (handshake, requests, cancel, sessions,
//! subscriptions, limits, drain) plus the transport and authentication guarantees.

#[path = "server/adopt.rs"]
mod adopt;
#[path = "server/drain.rs"]
mod drain;
#[path = "server/handshake.rs"]
mod handshake;
#[path = "server/limits.rs"]
mod limits;
#[path = "server/listeners.rs"]
mod listeners;
#[path = "server/perf.rs"]
mod perf;
#[path = "server/requests.rs"]
mod requests;
#[path = "server/sessions.rs"]
mod sessions;
#[path = "server/subscriptions.rs"]
mod subscriptions;
#[path = "server/tls.rs"]
mod tls;
