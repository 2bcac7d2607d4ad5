//! Client configuration with named defaults.

use std::time::Duration;

use baton_protocol::ServerId;
use baton_protocol::limits::DEFAULT_MAX_FRAME_LENGTH;

pub use baton_protocol::keepalive::{
    DEFAULT_TCP_KEEPALIVE_INTERVAL, DEFAULT_TCP_KEEPALIVE_RETRIES, DEFAULT_TCP_KEEPALIVE_TIME,
    KeepaliveConfig,
};

use crate::endpoint::Endpoint;
use crate::tls::TlsOptions;

/// Default time allowed for connecting plus the handshake: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on requests in flight on one connection: 1,024.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;
/// Default bound on frames queued for writing: 256.
pub const DEFAULT_OUTBOUND_QUEUE: usize = 256;
/// Default bound on undelivered change events per subscription before they collapse into
/// one "lagged" event (the state itself is never lost): 1,024.
pub const DEFAULT_SUBSCRIPTION_EVENTS: usize = 1024;
/// Default bound on updates buffered for a subscription before its snapshot arrives: 1,024.
pub const DEFAULT_EARLY_UPDATE_BUFFER: usize = 1024;

/// How to reconnect after the connection drops. Off unless set.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectPolicy {
    /// First delay.
    pub initial_delay: Duration,
    /// Cap on the delay.
    pub max_delay: Duration,
    /// Multiplier per failed attempt.
    pub multiplier: f64,
    /// Give up after this many consecutive failed attempts (`None`: never).
    pub max_attempts: Option<u32>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            multiplier: 2.0,
            max_attempts: None,
        }
    }
}

impl ReconnectPolicy {
    /// Delay before attempt `n` (0-based), with ±25% jitter from `jitter` in `[0, 1)`.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exp = self
            .multiplier
            .powi(i32::try_from(attempt.min(64)).unwrap_or(64));
        let base = self.initial_delay.as_secs_f64() * exp;
        let capped = base.min(self.max_delay.as_secs_f64());
        Duration::from_secs_f64((capped * (0.75 + 0.5 * jitter)).max(0.0))
    }
}

/// Everything a [`Client`](crate::Client) needs to connect.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Where the server is.
    pub endpoint: Endpoint,
    /// TLS trust and identity (used for `tls://`).
    pub tls: TlsOptions,
    /// Refuse any server whose hello carries another id.
    pub expected_server_id: Option<ServerId>,
    /// Frame limit for both directions.
    pub max_frame_length: u32,
    /// Time allowed for connect + TLS + hello.
    pub connect_timeout: Duration,
    /// Default per-request timeout (`None`: wait as long as the connection lives).
    pub request_timeout: Option<Duration>,
    /// Requests in flight at once; further calls wait for a slot.
    pub max_in_flight: usize,
    /// Reconnect policy (`None`: a dropped connection ends the client).
    pub reconnect: Option<ReconnectPolicy>,
    /// TCP keepalive and user timeout on `tcp://` and `tls://` sockets (on by default with
    /// [`KeepaliveConfig::default`]); `None` leaves the kernel's defaults.
    pub tcp_keepalive: Option<KeepaliveConfig>,
}

impl ClientConfig {
    /// Defaults for `endpoint`.
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            tls: TlsOptions::default(),
            expected_server_id: None,
            max_frame_length: DEFAULT_MAX_FRAME_LENGTH,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: None,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            reconnect: None,
            tcp_keepalive: Some(KeepaliveConfig::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_and_jitters_within_a_quarter() {
        let p = ReconnectPolicy::default();
        assert_eq!(p.delay(0, 0.5), Duration::from_millis(100));
        assert_eq!(p.delay(3, 0.5), Duration::from_millis(800));
        assert_eq!(p.delay(30, 0.5), Duration::from_secs(10));
        assert_eq!(p.delay(0, 0.0), Duration::from_millis(75));
        assert!(p.delay(0, 0.999) < Duration::from_millis(125));
    }
}
