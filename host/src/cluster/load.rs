//! Publishing the host's load, coalesced: changes arrive as often as they happen, the member
//! record is rewritten at most once per [`LOAD_INTERVAL`] with the latest. Pure: time comes in
//! as `now`.

use std::time::Duration;

use tokio::time::Instant;

use super::record::Load;

/// The member record's load is rewritten at most this often.
pub const LOAD_INTERVAL: Duration = Duration::from_secs(1);

/// What load to publish, and when.
#[derive(Debug)]
pub struct LoadGate {
    wanted: Load,
    /// What etcd holds (`None`: unknown, e.g. after a failed write).
    published: Option<Load>,
    last: Instant,
}

impl LoadGate {
    /// A gate that knows `published` is in etcd already (the record written on joining).
    pub fn new(published: Load, now: Instant) -> Self {
        Self {
            wanted: published,
            published: Some(published),
            last: now,
        }
    }

    /// The load is now `load`.
    pub fn handle_load(&mut self, load: Load) {
        self.wanted = load;
    }

    /// The load to write now, if it differs from what etcd holds and the interval has passed.
    /// It counts as published; report a failed write with [`LoadGate::handle_failed`].
    #[must_use]
    pub fn poll_publish(&mut self, now: Instant) -> Option<Load> {
        if self.published == Some(self.wanted) || self.poll_timeout().is_some_and(|t| now < t) {
            return None;
        }
        self.published = Some(self.wanted);
        self.last = now;
        Some(self.wanted)
    }

    /// The last write failed: what etcd holds is unknown, so the next poll writes again.
    pub fn handle_failed(&mut self) {
        self.published = None;
    }

    /// When a pending change may be written; `None` when nothing is pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.published == Some(self.wanted) {
            return None;
        }
        Some(self.last + LOAD_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(open: u64) -> Load {
        Load {
            open_sessions: open,
            attached_clients: 0,
        }
    }

    #[test]
    fn changes_within_a_second_are_coalesced_into_the_latest() {
        let t0 = Instant::now();
        let mut gate = LoadGate::new(load(0), t0);
        assert_eq!(gate.poll_timeout(), None);
        for n in 1..=50 {
            gate.handle_load(load(n));
            assert_eq!(gate.poll_publish(t0 + Duration::from_millis(10 * n)), None);
        }
        assert_eq!(gate.poll_timeout(), Some(t0 + LOAD_INTERVAL));
        assert_eq!(gate.poll_publish(t0 + LOAD_INTERVAL), Some(load(50)));
        assert_eq!(
            gate.poll_publish(t0 + 5 * LOAD_INTERVAL),
            None,
            "nothing new"
        );
    }

    #[test]
    fn a_change_back_to_what_etcd_holds_writes_nothing() {
        let t0 = Instant::now();
        let mut gate = LoadGate::new(load(3), t0);
        gate.handle_load(load(4));
        gate.handle_load(load(3));
        assert_eq!(gate.poll_timeout(), None);
        assert_eq!(gate.poll_publish(t0 + LOAD_INTERVAL), None);
    }

    #[test]
    fn a_failed_write_is_retried_after_the_interval() {
        let t0 = Instant::now();
        let mut gate = LoadGate::new(load(0), t0);
        gate.handle_load(load(1));
        assert_eq!(gate.poll_publish(t0 + LOAD_INTERVAL), Some(load(1)));
        gate.handle_failed();
        assert_eq!(
            gate.poll_publish(t0 + LOAD_INTERVAL),
            None,
            "not before the interval"
        );
        assert_eq!(gate.poll_publish(t0 + 2 * LOAD_INTERVAL), Some(load(1)));
    }
}
