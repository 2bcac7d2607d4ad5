//! Client configuration with named defaults.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
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
/// Default bound on bytes waiting to be written to the socket: 256 KiB. While this much or
/// more waits (a slow or stalled server), the connection task takes no new request,
/// subscribe, attach or detach: they wait in the handles' bounded queue, and once it is full
/// the calls themselves wait; reading from the server goes on. Cancels and unsubscribes from
/// dropped handles, and what a reconnect sends (the re-attach, the re-subscribes and the
/// calls held for it), are queued regardless, so the backlog can exceed the bound by those
/// and by the one frame that crossed it.
pub const DEFAULT_WRITE_BACKLOG: usize = 256 * 1024;
/// Default bound on undelivered change events per subscription before they collapse into
/// one "lagged" event (the state itself is never lost): 1,024.
pub const DEFAULT_SUBSCRIPTION_EVENTS: usize = 1024;
/// Default bound on updates buffered for a subscription before its snapshot arrives: 1,024.
pub const DEFAULT_EARLY_UPDATE_BUFFER: usize = 1024;

/// Default time a reconnected connection must stay up, after its re-attach and
/// re-subscribes were answered, before the backoff starts again from `initial_delay`: 10 s.
pub const DEFAULT_HEALTHY_AFTER: Duration = Duration::from_secs(10);
/// Default jitter: each delay is scaled by a random factor in `[0.75, 1.25)`.
pub const DEFAULT_RECONNECT_JITTER: f64 = 0.25;

/// How to reconnect after the connection drops. Off unless set.
///
/// Attempts are counted from the last *healthy* connection, not from the last handshake: a
/// connection is healthy once the server answered its re-attach and every re-subscribe and it
/// then stayed up for [`healthy_after`](Self::healthy_after). A server that accepts the
/// handshake and then drops the connection (crash-looping, or failing right after the hello)
/// is therefore retried with growing delays instead of a storm at `initial_delay`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectPolicy {
    /// First delay.
    pub initial_delay: Duration,
    /// Cap on the delay before jitter.
    pub max_delay: Duration,
    /// Multiplier per failed attempt.
    pub multiplier: f64,
    /// Fraction of each delay that is random: the delay is scaled by a factor in
    /// `[1 - jitter, 1 + jitter)`, so many clients do not reconnect in lockstep. Clamped to
    /// `0..=1`; `0` makes delays exact (for tests).
    pub jitter: f64,
    /// How long a connection must stay up, after its re-attach and re-subscribes were
    /// answered, before the next loss starts the backoff from `initial_delay` again.
    pub healthy_after: Duration,
    /// Give up after this many attempts since the last healthy connection (`None`: never).
    /// An attempt that handshakes but is lost before it became healthy counts as failed.
    pub max_attempts: Option<u32>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: DEFAULT_RECONNECT_JITTER,
            healthy_after: DEFAULT_HEALTHY_AFTER,
            max_attempts: None,
        }
    }
}

impl ReconnectPolicy {
    /// Delay before attempt `attempt` (0-based): `initial_delay * multiplier^attempt`, capped
    /// at `max_delay`, then scaled by `1 + jitter * (2 * random - 1)` for `random` in `[0, 1)`.
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let exp = self
            .multiplier
            .powi(i32::try_from(attempt.min(64)).unwrap_or(64));
        let base = self.initial_delay.as_secs_f64() * exp;
        let capped = base.min(self.max_delay.as_secs_f64());
        let jitter = if self.jitter.is_nan() {
            0.0
        } else {
            self.jitter.clamp(0.0, 1.0)
        };
        let factor = 1.0 - jitter + 2.0 * jitter * random.clamp(0.0, 1.0);
        Duration::try_from_secs_f64((capped * factor).max(0.0)).unwrap_or(self.max_delay)
    }
}

/// The future a [`Relocate`] returns.
type Lookup = Pin<Box<dyn Future<Output = Option<Endpoint>> + Send>>;

/// Where to dial on a reconnect, asked before every attempt: a session's host in a fleet may
/// come back at another address, which a caller that can look it up (`baton.cluster`
/// `locate` through another host) knows and the client does not. `None` from it keeps the
/// endpoint last dialed. Whatever it answers, the attempt still requires
/// [`ClientConfig::expected_server_id`], so a lookup can move the client only to the same
/// server; it is bounded by [`ClientConfig::connect_timeout`] (past that, `None`).
#[derive(Clone)]
pub struct Relocate(Arc<dyn Fn() -> Lookup + Send + Sync>);

impl Relocate {
    /// A lookup that runs `f` before each reconnect attempt.
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<Endpoint>> + Send + 'static,
    {
        Self(Arc::new(move || Box::pin(f())))
    }

    /// Runs the lookup once.
    pub(crate) fn lookup(&self) -> Lookup {
        (self.0)()
    }
}

impl std::fmt::Debug for Relocate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Relocate(..)")
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
    /// Requests in flight at once; further calls wait for a slot, in order.
    pub max_in_flight: usize,
    /// Reconnect policy (`None`: a dropped connection ends the client).
    pub reconnect: Option<ReconnectPolicy>,
    /// TCP keepalive and user timeout on `tcp://` and `tls://` sockets (on by default with
    /// [`KeepaliveConfig::default`]); `None` leaves the kernel's defaults.
    pub tcp_keepalive: Option<KeepaliveConfig>,
    /// Where to dial on each reconnect (`None`: always [`endpoint`](Self::endpoint)).
    pub relocate: Option<Relocate>,
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
            relocate: None,
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

    #[test]
    fn zero_jitter_makes_every_delay_exact() {
        let p = ReconnectPolicy {
            jitter: 0.0,
            ..ReconnectPolicy::default()
        };
        assert_eq!(p.delay(0, 0.0), Duration::from_millis(100));
        assert_eq!(p.delay(0, 0.999), Duration::from_millis(100));
        assert_eq!(p.delay(2, 0.3), Duration::from_millis(400));
    }
}
