//! Server configuration: every limit with its named default.

use std::time::Duration;

use baton_protocol::ServerId;
use baton_protocol::handshake::DEFAULT_HANDSHAKE_TIMEOUT as PROTOCOL_HANDSHAKE_TIMEOUT;
use baton_protocol::limits::DEFAULT_MAX_FRAME_LENGTH as PROTOCOL_MAX_FRAME_LENGTH;

pub use baton_protocol::keepalive::{
    DEFAULT_TCP_KEEPALIVE_INTERVAL, DEFAULT_TCP_KEEPALIVE_RETRIES, DEFAULT_TCP_KEEPALIVE_TIME,
    KeepaliveConfig,
};

use crate::error::ConfigError;

/// Largest frame payload accepted or sent: 16 MiB (upstream `DEFAULT_MAX_FRAME_LENGTH`).
pub const DEFAULT_MAX_FRAME_LENGTH: u32 = PROTOCOL_MAX_FRAME_LENGTH;
/// Time a connection has to complete the hello exchange: 5 s (upstream
/// `DEFAULT_HANDSHAKE_TIMEOUT_MS`). The TLS handshake has its own deadline of the same length.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = PROTOCOL_HANDSHAKE_TIMEOUT;
/// Outbound bytes a connection may have queued, as a multiple of the frame limit: 4
/// (upstream `maxPendingBytes` default). Must be at least one frame plus its header.
pub const DEFAULT_MAX_PENDING_BYTES_FRAMES: u64 = 4;
/// Simultaneous connections across all listeners: 1024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Requests one connection may have in flight: 256. The next one is answered `busy`.
pub const DEFAULT_MAX_ACTIVE_REQUESTS: usize = 256;
/// Subscriptions one connection may hold (pending or established): 256. The next subscribe
/// is answered `busy`.
pub const DEFAULT_MAX_SUBSCRIPTIONS: usize = 256;
/// Updates a subscriber may have waiting before its backlog is replaced by a resync: 100
/// (pi 1.0.x provider buffer cap).
pub const DEFAULT_SUBSCRIBER_QUEUE_LENGTH: usize = 100;
/// Time graceful close lets in-flight requests finish before they are abandoned: 10 s.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a closing connection has to flush its queued frames (including a final
/// `hello_error`) before the socket is dropped: 5 s (upstream `gracefulCloseTimeoutMs`).
pub const DEFAULT_GRACEFUL_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest timer upstream accepts (Node's maximum delay), kept for option parity.
pub const MAX_TIMEOUT: Duration = Duration::from_millis(2_147_483_647);

/// How the server re-baselines a subscriber whose backlog it dropped (a client too slow to
/// read [`ServerConfig::subscriber_queue_length`] updates). `docs/protocol.md` §11.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResyncDialect {
    /// Updates every upstream consumer accepts (chord 0.85.1 and later): one `replaced`
    /// carrying the current instance for a singleton; for a keyed subscription a `closed`
    /// for every instance the client holds, then a `spawned` for every current instance.
    #[default]
    Lifecycle,
    /// One `{"type":"reset","snapshot"}` (pi 1.0.x). chord 0.85.1 and 0.87.1 consumers
    /// refuse it (`Invalid service provider update`) and fail the connection: choose it
    /// only when every client speaks pi ≥ 1.0.
    Reset,
}

/// Everything a [`Server`](crate::Server) needs besides its host and listeners.
///
/// Fields are public and the struct is `#[non_exhaustive]`: start from
/// [`ServerConfig::new`] and assign what you want to change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The logical server identity announced in `hello` and checked on every request.
    pub server_id: ServerId,
    /// Largest frame payload in either direction ([`DEFAULT_MAX_FRAME_LENGTH`]); at least 1.
    pub max_frame_length: u32,
    /// Queued outbound bytes per connection before it is closed; `None` means 4 × the frame
    /// limit ([`DEFAULT_MAX_PENDING_BYTES_FRAMES`]). Must be ≥ `max_frame_length + 4`.
    pub max_pending_bytes: Option<u64>,
    /// Hello deadline ([`DEFAULT_HANDSHAKE_TIMEOUT`]).
    pub handshake_timeout: Duration,
    /// Connection limit ([`DEFAULT_MAX_CONNECTIONS`]).
    pub max_connections: usize,
    /// Active requests per connection ([`DEFAULT_MAX_ACTIVE_REQUESTS`]).
    pub max_active_requests: usize,
    /// Subscriptions per connection ([`DEFAULT_MAX_SUBSCRIPTIONS`]).
    pub max_subscriptions: usize,
    /// Pending updates per subscriber before its backlog is replaced by a resync
    /// ([`DEFAULT_SUBSCRIBER_QUEUE_LENGTH`]).
    pub subscriber_queue_length: usize,
    /// What that resync is made of ([`ResyncDialect::Lifecycle`], which every upstream
    /// client accepts).
    pub resync: ResyncDialect,
    /// Graceful-close deadline for in-flight requests ([`DEFAULT_DRAIN_TIMEOUT`]).
    pub drain_timeout: Duration,
    /// Flush deadline for a closing connection ([`DEFAULT_GRACEFUL_CLOSE_TIMEOUT`]).
    pub graceful_close_timeout: Duration,
    /// TCP keepalive on accepted TCP and TLS sockets, plus (on Linux) a TCP user timeout of
    /// [`KeepaliveConfig::dead_after`]; `None` disables both. This is how half-open
    /// connections (a peer that vanished without a FIN or RST) are found and closed: Pi v8 has
    /// no ping frame, and an idle subscriber of a quiet session is healthy, so the server
    /// cannot close connections merely for being silent.
    pub tcp_keepalive: Option<KeepaliveConfig>,
}

impl ServerConfig {
    /// Defaults for everything but the identity.
    pub fn new(server_id: ServerId) -> Self {
        Self {
            server_id,
            max_frame_length: DEFAULT_MAX_FRAME_LENGTH,
            max_pending_bytes: None,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_active_requests: DEFAULT_MAX_ACTIVE_REQUESTS,
            max_subscriptions: DEFAULT_MAX_SUBSCRIPTIONS,
            subscriber_queue_length: DEFAULT_SUBSCRIBER_QUEUE_LENGTH,
            resync: ResyncDialect::default(),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            graceful_close_timeout: DEFAULT_GRACEFUL_CLOSE_TIMEOUT,
            tcp_keepalive: Some(KeepaliveConfig::default()),
        }
    }

    /// The effective pending-byte limit.
    pub fn effective_max_pending_bytes(&self) -> u64 {
        self.max_pending_bytes
            .unwrap_or(u64::from(self.max_frame_length) * DEFAULT_MAX_PENDING_BYTES_FRAMES)
    }

    /// Checks every bound, with upstream's wording where upstream has one.
    ///
    /// # Errors
    /// The first option out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_frame_length == 0 {
            return Err(ConfigError::MaxFrameLength);
        }
        let min_pending = u64::from(self.max_frame_length) + 4;
        if self.effective_max_pending_bytes() < min_pending {
            return Err(ConfigError::MaxPendingBytes {
                minimum: min_pending,
            });
        }
        if self.handshake_timeout.is_zero() || self.handshake_timeout > MAX_TIMEOUT {
            return Err(ConfigError::Timeout {
                name: "handshakeTimeoutMs",
            });
        }
        if self.graceful_close_timeout.is_zero() || self.graceful_close_timeout > MAX_TIMEOUT {
            return Err(ConfigError::Timeout {
                name: "gracefulCloseTimeoutMs",
            });
        }
        if self.drain_timeout > MAX_TIMEOUT {
            return Err(ConfigError::Timeout {
                name: "drainTimeoutMs",
            });
        }
        for (name, value) in [
            ("max_connections", self.max_connections),
            ("max_active_requests", self.max_active_requests),
            ("max_subscriptions", self.max_subscriptions),
            ("subscriber_queue_length", self.subscriber_queue_length),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        Ok(())
    }
}
