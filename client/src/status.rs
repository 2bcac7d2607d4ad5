//! Connection status as seen by users of the client, and why a client finished.

use std::time::{Duration, Instant};

/// Where the client's connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Handshaken and serving requests.
    Connected,
    /// The connection dropped (or the last attempt failed); the next attempt is scheduled.
    Reconnecting {
        /// The number of the attempt that is scheduled (1-based, counted since the last
        /// healthy connection).
        attempt: u32,
        /// Why the last connection or attempt ended.
        reason: String,
        /// The delay drawn for this attempt: the policy's capped exponential backoff with
        /// its jitter applied, exactly as the client waits it.
        retry_in: Duration,
        /// When the attempt starts (`retry_in` from when this status was set), on the clock
        /// the client runs on: tokio's, which is [`Instant::now`] unless tokio's time is
        /// paused. A countdown is `retry_at - now`.
        retry_at: Instant,
    },
    /// Finished for good: no more requests, no more reconnecting.
    Closed {
        /// Why.
        reason: CloseReason,
    },
}

/// Why a client finished ([`Status::Closed`], and [`EndReason::Closed`] for its
/// subscriptions).
///
/// [`EndReason::Closed`]: crate::EndReason::Closed
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CloseReason {
    /// The client was closed ([`Client::close`](crate::Client::close), or every handle was
    /// dropped).
    #[error("{0}")]
    Requested(String),
    /// The first connection could not be established.
    #[error("{0}")]
    ConnectFailed(String),
    /// The connection was lost and the client has no [`ReconnectPolicy`](crate::ReconnectPolicy).
    #[error("{0}")]
    Lost(String),
    /// The policy's [`max_attempts`](crate::ReconnectPolicy::max_attempts) failed in a row.
    #[error("gave up reconnecting after {attempts} attempts: {last}")]
    GaveUp {
        /// Attempts made since the last healthy connection.
        attempts: u32,
        /// Why the last one failed.
        last: String,
    },
    /// A reconnect attempt was answered in a way no retry can change: the client stopped at
    /// once instead of retrying.
    #[error(transparent)]
    Refused(#[from] ReconnectRefusal),
}

impl CloseReason {
    /// The refusal, when reconnecting was refused.
    pub fn refusal(&self) -> Option<&ReconnectRefusal> {
        match self {
            Self::Refused(r) => Some(r),
            _ => None,
        }
    }
}

/// Why a connection attempt can never succeed by being retried: the address now reaches
/// another server, or this server will not have this client. A reconnecting client that
/// meets one stops at once ([`CloseReason::Refused`]); any other failure (refused, reset,
/// timed out, a server draining or busy) is retried with backoff.
///
/// See [`ConnectError::refusal`](crate::ConnectError::refusal) for how a failure is
/// classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReconnectRefusal {
    /// The server that answers has another server id than the one first reached (a
    /// different host, or the host restarted with another identity): its sessions are not
    /// this client's sessions.
    #[error("a different host answers now: its server id is {got}, not {expected}")]
    ServerChanged {
        /// The server id the client was pinned to.
        expected: String,
        /// The one the server presented.
        got: String,
    },
    /// The server refused this client's identity: its access policy does not admit it
    /// (`hello_error` `forbidden`), or the TLS handshake refused its client certificate
    /// (an alert such as `unknown_ca`, `bad_certificate`, `certificate_revoked`).
    #[error("this identity is no longer admitted by the host: {reason}")]
    IdentityRefused {
        /// The server's message, or the TLS alert.
        reason: String,
    },
    /// This client no longer trusts the server's TLS certificate (another issuer, another
    /// name, expired): the trust roots are read once, so retrying cannot change it.
    #[error("the host's TLS certificate is no longer trusted: {reason}")]
    ServerUntrusted {
        /// rustls' reason.
        reason: String,
    },
    /// The server speaks another protocol version now (`hello_error` `version`).
    #[error("the host speaks another protocol version now: {reason}")]
    Incompatible {
        /// The server's message.
        reason: String,
    },
}
