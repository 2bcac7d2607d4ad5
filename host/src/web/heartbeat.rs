//! The server's WebSocket heartbeat, a pure state machine (time is a parameter): a ping every
//! [`PING_INTERVAL`], and the socket is dead once nothing (a pong, a message) has been heard
//! from the browser for [`DEAD_AFTER`]. TCP keepalive alone misses a phone that vanished
//! behind a NAT or proxy that still answers for it; the ping crosses to the browser itself.
//! The figures match the TCP keepalive's (30 s idle, dead after 60 s).

use std::time::Duration;

use tokio::time::Instant;

/// How often the server pings a browser's socket.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);
/// How long a socket may stay silent (no pong, no message) before it is closed.
pub const DEAD_AFTER: Duration = Duration::from_secs(60);

/// The heartbeat's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeartbeatConfig {
    /// Time between pings.
    pub interval: Duration,
    /// Silence after which the socket is closed.
    pub dead_after: Duration,
}

impl HeartbeatConfig {
    /// A ping every `interval`, closed after `dead_after` of silence.
    pub fn new(interval: Duration, dead_after: Duration) -> Self {
        Self {
            interval,
            dead_after,
        }
    }
}

impl Default for HeartbeatConfig {
    /// [`PING_INTERVAL`] and [`DEAD_AFTER`].
    fn default() -> Self {
        Self::new(PING_INTERVAL, DEAD_AFTER)
    }
}

/// What the heartbeat asks for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beat {
    /// Send a ping.
    Ping,
    /// Nothing heard for the deadline: close the socket.
    Dead,
}

/// One socket's heartbeat.
#[derive(Debug, Clone)]
pub(crate) struct Heartbeat {
    config: HeartbeatConfig,
    last_heard: Instant,
    next_ping: Instant,
}

impl Heartbeat {
    /// A socket that opened at `now` (the upgrade counts as heard).
    pub(crate) fn new(config: HeartbeatConfig, now: Instant) -> Self {
        Self {
            config,
            last_heard: now,
            next_ping: now + config.interval,
        }
    }

    /// The browser sent something at `now` (a pong, a message, its close).
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = now;
    }

    /// What is due at `now`: [`Beat::Dead`] once the deadline passed, else [`Beat::Ping`]
    /// once the interval did (the next ping is then an interval later).
    pub(crate) fn poll(&mut self, now: Instant) -> Option<Beat> {
        if now >= self.last_heard + self.config.dead_after {
            return Some(Beat::Dead);
        }
        if now >= self.next_ping {
            self.next_ping = now + self.config.interval;
            return Some(Beat::Ping);
        }
        None
    }

    /// When [`Heartbeat::poll`] next has something to say.
    pub(crate) fn deadline(&self) -> Instant {
        self.next_ping.min(self.last_heard + self.config.dead_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_silent_socket_is_pinged_every_interval_and_dead_after_the_deadline() {
        let t0 = Instant::now();
        let mut h = Heartbeat::new(HeartbeatConfig::default(), t0);
        assert_eq!(h.poll(t0), None);
        assert_eq!(h.deadline(), t0 + 30 * S);
        assert_eq!(h.poll(t0 + 29 * S), None);
        assert_eq!(h.poll(t0 + 30 * S), Some(Beat::Ping));
        assert_eq!(h.poll(t0 + 30 * S), None, "one ping per interval");
        assert_eq!(h.deadline(), t0 + 60 * S);
        assert_eq!(h.poll(t0 + 59 * S), None);
        assert_eq!(h.poll(t0 + 60 * S), Some(Beat::Dead));
    }

    #[test]
    fn anything_heard_moves_the_deadline() {
        let t0 = Instant::now();
        let mut h = Heartbeat::new(HeartbeatConfig::default(), t0);
        assert_eq!(h.poll(t0 + 30 * S), Some(Beat::Ping));
        h.heard(t0 + 31 * S);
        assert_eq!(h.poll(t0 + 60 * S), Some(Beat::Ping), "alive: pinged again");
        assert_eq!(h.poll(t0 + 90 * S), Some(Beat::Ping));
        assert_eq!(h.poll(t0 + 91 * S), Some(Beat::Dead), "nothing since 31 s");
        h.heard(t0 + 100 * S);
        assert_eq!(h.deadline(), t0 + 120 * S, "the next ping is due");
        assert_eq!(h.poll(t0 + 120 * S), Some(Beat::Ping));
        assert_eq!(h.poll(t0 + 159 * S), Some(Beat::Ping));
        assert_eq!(h.poll(t0 + 160 * S), Some(Beat::Dead));
    }
}
