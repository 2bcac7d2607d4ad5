//! Idle clocks: since when each open session has had no attached client and no turn. The
//! idle timeout ([`ServiceLimits::idle_timeout`]) closes a session whose clock has run that
//! long, and the open cap evicts the session whose clock started first.
//!
//! The directory runs the clocks: at each of its changes it names the sessions idle now
//! ([`IdleClocks::update`]).
//!
//! [`ServiceLimits::idle_timeout`]: super::ServiceLimits::idle_timeout

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

/// The running clocks, by session id.
#[derive(Debug, Default)]
pub(crate) struct IdleClocks {
    since: HashMap<String, Instant>,
}

impl IdleClocks {
    /// Runs the clocks of exactly the sessions in `idle`: a clock already running keeps its
    /// start, a new one starts at `now`, every other one stops. Returns whether one started.
    pub(crate) fn update<'a>(&mut self, idle: impl Iterator<Item = &'a str>, now: Instant) -> bool {
        let idle: HashSet<&str> = idle.collect();
        self.since.retain(|id, _| idle.contains(id.as_str()));
        let mut started = false;
        for id in idle {
            if !self.since.contains_key(id) {
                self.since.insert(id.to_owned(), now);
                started = true;
            }
        }
        started
    }

    /// The idle sessions, the one idle longest first.
    pub(crate) fn order(&self) -> Vec<String> {
        self.by_age()
            .into_iter()
            .map(|(_, id)| id.to_owned())
            .collect()
    }

    /// The sessions idle for `timeout` or longer at `now` (longest first), and when the next
    /// one will be.
    pub(crate) fn due(&self, now: Instant, timeout: Duration) -> (Vec<String>, Option<Instant>) {
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (since, id) in self.by_age() {
            let deadline = since + timeout;
            if deadline <= now {
                due.push(id.to_owned());
            } else {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
            }
        }
        (due, next)
    }

    /// Restarts the clock of `id` at `now`, if it runs.
    pub(crate) fn restart(&mut self, id: &str, now: Instant) {
        if let Some(since) = self.since.get_mut(id) {
            *since = now;
        }
    }

    fn by_age(&self) -> Vec<(Instant, &str)> {
        let mut clocks: Vec<(Instant, &str)> = self
            .since
            .iter()
            .map(|(id, since)| (*since, id.as_str()))
            .collect();
        clocks.sort_unstable();
        clocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_keeps_its_start_while_idle_and_stops_when_not() {
        let mut clocks = IdleClocks::default();
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        assert!(clocks.update(["b", "a"].into_iter(), t0));
        assert!(
            !clocks.update(["a", "b"].into_iter(), t0 + minute),
            "both run on"
        );
        assert_eq!(clocks.order(), ["a", "b"], "same start: by id");
        assert!(clocks.update(["b", "c"].into_iter(), t0 + minute));
        assert_eq!(clocks.order(), ["b", "c"], "a stopped, c started later");
        let (due, next) = clocks.due(t0 + minute, minute);
        assert_eq!((due, next), (vec!["b".to_owned()], Some(t0 + 2 * minute)));
        clocks.restart("b", t0 + 3 * minute);
        clocks.restart("a", t0 + 3 * minute);
        assert_eq!(
            clocks.order(),
            ["c", "b"],
            "a does not run, so nothing restarts it"
        );
    }
}
