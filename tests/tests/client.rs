//! Integration tests of baton-client against a real in-process baton-server with the test
//! host: every transport, cancellation reaching the host, and replicas that converge through
//! random state streams, dropped connections and resubscriptions.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

#[path = "client/convergence.rs"]
mod convergence;
#[path = "client/transports.rs"]
mod transports;
