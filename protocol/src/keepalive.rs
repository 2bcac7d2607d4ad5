//! The dead-peer budget both ends put on their TCP sockets.
//!
//! Pi v8 has no ping frame, and a client watching a quiet session legitimately sends nothing
//! for hours, so neither end may close a connection for silence alone. A peer that vanished
//! without a FIN or RST (a closed laptop lid, a NAT that forgot the flow) is left to the
//! kernel: TCP keepalive probes an idle connection, and the TCP user timeout (Linux) bounds
//! how long sent data may stay unacknowledged — the case keepalive does not probe. This
//! module only names the budget; `baton-server` and `baton-client` apply it to their sockets.

use std::time::Duration;

/// Idle time before the first TCP keepalive probe: 30 s.
pub const DEFAULT_TCP_KEEPALIVE_TIME: Duration = Duration::from_secs(30);
/// Interval between TCP keepalive probes: 10 s.
pub const DEFAULT_TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered keepalive probes before the kernel drops the connection: 3.
pub const DEFAULT_TCP_KEEPALIVE_RETRIES: u32 = 3;

/// TCP keepalive parameters (and, through [`KeepaliveConfig::dead_after`], the user timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeepaliveConfig {
    /// Idle time before the first probe ([`DEFAULT_TCP_KEEPALIVE_TIME`]).
    pub time: Duration,
    /// Time between probes ([`DEFAULT_TCP_KEEPALIVE_INTERVAL`]).
    pub interval: Duration,
    /// Probes before the connection is dropped ([`DEFAULT_TCP_KEEPALIVE_RETRIES`]).
    pub retries: u32,
}

impl KeepaliveConfig {
    /// Probes after `time` of silence, every `interval`, `retries` times.
    pub fn new(time: Duration, interval: Duration, retries: u32) -> Self {
        Self {
            time,
            interval,
            retries,
        }
    }

    /// How long a silent peer lives: `time + interval × retries` (60 s by default). Also the
    /// TCP user timeout: data unacknowledged for this long drops the connection.
    pub fn dead_after(&self) -> Duration {
        self.time
            .saturating_add(self.interval.saturating_mul(self.retries))
    }
}

impl Default for KeepaliveConfig {
    fn default() -> Self {
        Self::new(
            DEFAULT_TCP_KEEPALIVE_TIME,
            DEFAULT_TCP_KEEPALIVE_INTERVAL,
            DEFAULT_TCP_KEEPALIVE_RETRIES,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_peer_is_dead_after_the_idle_time_plus_every_probe() {
        assert_eq!(
            KeepaliveConfig::default().dead_after(),
            Duration::from_secs(60)
        );
        let short = KeepaliveConfig::new(Duration::from_secs(1), Duration::from_secs(1), 2);
        assert_eq!(short.dead_after(), Duration::from_secs(3));
        let huge = KeepaliveConfig::new(Duration::MAX, Duration::MAX, u32::MAX);
        assert_eq!(huge.dead_after(), Duration::MAX, "saturates, never panics");
    }
}
