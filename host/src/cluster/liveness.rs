//! The lease's liveness as a pure state machine: when to renew, when to stop taking new work,
//! when the lease is lost. No I/O and no clock: time comes in as `now`.
//!
//! ```text
//!            renewed (TTL > 0)                         renewed, before the pause point
//!   Serving ───────────────▶ Serving       Paused ─────────────────────────────────▶ Serving
//!      │ no renewal by expiry − margin        │ etcd says the lease is gone (TTL 0)
//!      ▼                                      ▼
//!   Paused ─────────────── etcd says the lease is gone ─────────────────────────▶ Lost
//! ```
//!
//! The lease is known to be ours until [`Liveness::expires`]: the moment the last confirmed
//! renewal was *sent*, plus the TTL etcd answered (etcd renewed it later than we sent, so this
//! errs early). Renewals are due every TTL/[`RENEW_DIVISOR`] after that send. If none has been
//! confirmed by `expires − margin` (the [`safety_margin`], TTL/3), the host pauses: it keeps
//! serving what is open but takes no new connection or session, so by the time the lease
//! can expire and another process can claim the server id, this one has stopped growing.
//! Past `expires` the machine stays paused and keeps renewing: only etcd can say whether the
//! lease is gone (a restarted etcd extends every lease it kept), and when it says so the
//! machine is [`Health::Lost`] for good and the host must exit.
//!
//! # Calling contract
//! After [`Liveness::new`] and after every `handle_*` call, the glue drains
//! [`Liveness::poll_transition`], asks [`Liveness::poll_renew`] whether to start a renewal
//! (at most one is in flight), and sleeps until [`Liveness::poll_timeout`], where it calls
//! [`Liveness::handle_timeout`]. A renewal that has not answered within
//! [`Liveness::attempt_budget`] is reported with [`Liveness::handle_renew_failed`].

use std::time::Duration;

use tokio::time::Instant;

/// Renewals are due every TTL divided by this.
pub const RENEW_DIVISOR: u32 = 3;
/// After a failed renewal, the next attempt waits this long.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(500);
/// The shortest a renewal attempt is given before it counts as failed.
pub const MIN_ATTEMPT: Duration = Duration::from_millis(200);

/// How long before the lease can expire the host stops taking new work: a third of the TTL.
pub fn safety_margin(ttl: Duration) -> Duration {
    ttl / 3
}

/// Whether the host may take new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The lease is renewed: serve everything.
    Serving,
    /// Renewal is failing and the lease is near or past expiry: serve what is open, take no
    /// new connection or session.
    Paused,
    /// etcd says the lease is gone: another process may own the server id. Exit.
    Lost,
}

/// A change of [`Health`] (or of what the host should log), for the glue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "transitions tell the host to pause, resume or exit"]
pub enum Transition {
    /// Stop taking new work; the lease is ours for at most `remaining`.
    Paused {
        /// Until the lease can expire.
        remaining: Duration,
    },
    /// The lease's TTL ran out with no renewal confirmed: it may be gone. Still paused.
    Overdue,
    /// A renewal got through: take new work again.
    Resumed,
    /// The lease is gone: stop serving as the owner.
    Lost,
}

/// The liveness of one lease. See the module docs for the states and calling contract.
#[derive(Debug)]
pub struct Liveness {
    ttl: Duration,
    expires: Instant,
    next_renew: Instant,
    /// When the renewal in flight was sent.
    in_flight: Option<Instant>,
    health: Health,
    overdue: bool,
    /// At most one per `handle_*` call, drained after each: bounded by the contract.
    transition: Option<Transition>,
}

impl Liveness {
    /// A lease of `ttl` granted by a request sent at `sent`.
    pub fn new(sent: Instant, ttl: Duration) -> Self {
        Self {
            ttl,
            expires: sent + ttl,
            next_renew: sent + ttl / RENEW_DIVISOR,
            in_flight: None,
            health: Health::Serving,
            overdue: false,
            transition: None,
        }
    }

    /// Whether the host may take new work.
    pub fn health(&self) -> Health {
        self.health
    }

    /// Until when the lease is known to be ours.
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// When the host pauses unless a renewal is confirmed first.
    pub fn pause_at(&self) -> Instant {
        self.expires
            .checked_sub(safety_margin(self.ttl))
            .unwrap_or(self.expires)
    }

    /// Whether to send a renewal now; if so, it is in flight from `now` until a `handle_renew*`
    /// call.
    #[must_use]
    pub fn poll_renew(&mut self, now: Instant) -> bool {
        if self.health == Health::Lost || self.in_flight.is_some() || now < self.next_renew {
            return false;
        }
        self.in_flight = Some(now);
        true
    }

    /// How long the renewal started at `now` may take: until the pause point while serving
    /// (so the pause is never late), a renewal interval once paused; never under
    /// [`MIN_ATTEMPT`].
    pub fn attempt_budget(&self, now: Instant) -> Duration {
        let interval = self.ttl / RENEW_DIVISOR;
        let budget = match self.health {
            Health::Serving => self.pause_at().saturating_duration_since(now).min(interval),
            Health::Paused | Health::Lost => interval,
        };
        budget.max(MIN_ATTEMPT)
    }

    /// etcd renewed the lease and answered `ttl` (zero: the lease is gone).
    pub fn handle_renewed(&mut self, now: Instant, ttl: Duration) {
        let sent = self.in_flight.take().unwrap_or(now);
        if self.health == Health::Lost {
            return;
        }
        if ttl.is_zero() {
            self.lose();
            return;
        }
        self.ttl = ttl;
        self.expires = self.expires.max(sent + ttl);
        self.next_renew = sent + ttl / RENEW_DIVISOR;
        self.overdue = false;
        if self.health == Health::Paused && now < self.pause_at() {
            self.health = Health::Serving;
            self.transition = Some(Transition::Resumed);
        }
    }

    /// The renewal in flight failed (etcd unreachable, timed out): retry after
    /// [`RETRY_INTERVAL`].
    pub fn handle_renew_failed(&mut self, now: Instant) {
        self.in_flight = None;
        self.next_renew = now + RETRY_INTERVAL;
        self.handle_timeout(now);
    }

    /// etcd says the lease does not exist (expired or revoked).
    pub fn handle_lease_lost(&mut self) {
        self.in_flight = None;
        if self.health != Health::Lost {
            self.lose();
        }
    }

    /// Time has reached `now`: pause at the pause point, report once when past expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.health {
            Health::Serving if now >= self.pause_at() => {
                self.health = Health::Paused;
                self.transition = Some(Transition::Paused {
                    remaining: self.expires.saturating_duration_since(now),
                });
            }
            Health::Paused if now >= self.expires && !self.overdue => {
                self.overdue = true;
                self.transition = Some(Transition::Overdue);
            }
            Health::Serving | Health::Paused | Health::Lost => {}
        }
    }

    /// The next moment [`Liveness::handle_timeout`] or [`Liveness::poll_renew`] has something
    /// to do; `None` once lost.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let renew = self.in_flight.is_none().then_some(self.next_renew);
        let decision = match self.health {
            Health::Serving => Some(self.pause_at()),
            Health::Paused if !self.overdue => Some(self.expires),
            Health::Paused | Health::Lost => None,
        };
        match self.health {
            Health::Lost => None,
            Health::Serving | Health::Paused => [renew, decision].into_iter().flatten().min(),
        }
    }

    /// The transition the last `handle_*` call made, if any.
    pub fn poll_transition(&mut self) -> Option<Transition> {
        self.transition.take()
    }

    fn lose(&mut self) {
        self.health = Health::Lost;
        self.transition = Some(Transition::Lost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(9);
    const S: Duration = Duration::from_secs(1);

    /// A machine granted at `t0` with its first renewal sent and confirmed on schedule.
    fn granted() -> (Liveness, Instant) {
        let t0 = Instant::now();
        (Liveness::new(t0, TTL), t0)
    }

    #[test]
    fn renewals_are_due_every_third_of_the_ttl_and_keep_it_serving() {
        let (mut m, t0) = granted();
        assert_eq!(m.poll_timeout(), Some(t0 + 3 * S));
        assert!(!m.poll_renew(t0 + 2 * S));
        for round in 1..=10u32 {
            let at = t0 + 3 * S * round;
            assert!(m.poll_renew(at), "round {round}");
            assert!(!m.poll_renew(at), "only one renewal in flight");
            m.handle_renewed(at + S / 10, TTL);
            assert_eq!(m.poll_transition(), None);
            assert_eq!(m.health(), Health::Serving);
            assert_eq!(
                m.expires(),
                at + TTL,
                "counted from the send, not the answer"
            );
            assert_eq!(m.poll_timeout(), Some(at + 3 * S));
        }
    }

    #[test]
    fn failing_renewals_stop_new_work_a_margin_before_the_lease_can_expire() {
        let (mut m, t0) = granted();
        assert_eq!(m.pause_at(), t0 + 6 * S, "TTL 9 s, margin 3 s");
        let mut now = t0 + 3 * S;
        while now < m.pause_at() {
            if m.poll_renew(now) {
                assert!(m.attempt_budget(now) <= m.pause_at() - now + MIN_ATTEMPT);
                m.handle_renew_failed(now);
            }
            assert_eq!(m.poll_transition(), None, "still serving at {:?}", now - t0);
            now = m.poll_timeout().unwrap();
            m.handle_timeout(now);
        }
        assert_eq!(m.health(), Health::Paused);
        assert_eq!(
            m.poll_transition(),
            Some(Transition::Paused { remaining: 3 * S })
        );
        assert!(m.expires() > now, "paused before expiry");
    }

    #[test]
    fn a_renewal_that_gets_through_resumes_taking_work() {
        let (mut m, t0) = granted();
        m.handle_timeout(t0 + 6 * S);
        assert!(matches!(
            m.poll_transition(),
            Some(Transition::Paused { .. })
        ));
        let now = t0 + 6 * S + S / 2;
        assert!(m.poll_renew(now));
        assert_eq!(
            m.attempt_budget(now),
            3 * S,
            "paused: a whole interval per attempt"
        );
        m.handle_renewed(now + S / 10, TTL);
        assert_eq!(m.poll_transition(), Some(Transition::Resumed));
        assert_eq!(m.health(), Health::Serving);
        assert_eq!(m.expires(), now + TTL);
    }

    #[test]
    fn past_expiry_it_stays_paused_until_etcd_answers_either_way() {
        let (mut m, t0) = granted();
        m.handle_timeout(t0 + 6 * S);
        let _ = m.poll_transition();
        assert_eq!(
            m.poll_timeout(),
            Some(t0 + 3 * S),
            "the overdue renewal first"
        );
        m.handle_timeout(t0 + TTL);
        assert_eq!(m.poll_transition(), Some(Transition::Overdue));
        m.handle_timeout(t0 + TTL + S);
        assert_eq!(m.poll_transition(), None, "reported once");
        assert_eq!(m.health(), Health::Paused);
        // A restarted etcd extended the lease: it is still ours.
        let late = t0 + 20 * S;
        assert!(m.poll_renew(late));
        m.handle_renewed(late, TTL);
        assert_eq!(m.poll_transition(), Some(Transition::Resumed));
    }

    #[test]
    fn a_lost_lease_is_final_and_tells_the_host_to_exit() {
        let (mut m, t0) = granted();
        assert!(m.poll_renew(t0 + 3 * S));
        m.handle_renewed(t0 + 3 * S, Duration::ZERO);
        assert_eq!(m.poll_transition(), Some(Transition::Lost));
        assert_eq!(m.health(), Health::Lost);
        assert_eq!(m.poll_timeout(), None);
        assert!(!m.poll_renew(t0 + 100 * S));
        m.handle_renewed(t0 + 101 * S, TTL);
        m.handle_timeout(t0 + 102 * S);
        assert_eq!(m.poll_transition(), None);
        assert_eq!(m.health(), Health::Lost);

        let (mut m, t0) = granted();
        m.handle_timeout(t0 + 6 * S);
        let _ = m.poll_transition();
        m.handle_lease_lost();
        assert_eq!(m.poll_transition(), Some(Transition::Lost));
    }

    #[test]
    fn a_slow_answer_does_not_resume_when_it_leaves_too_little_time() {
        let (mut m, t0) = granted();
        m.handle_timeout(t0 + 6 * S);
        let _ = m.poll_transition();
        // Sent just before the pause point, confirmed much later: the lease (counted from the
        // send) is already inside the margin again.
        assert!(m.poll_renew(t0 + 6 * S));
        m.handle_renewed(t0 + 13 * S, TTL);
        assert_eq!(m.poll_transition(), None);
        assert_eq!(m.health(), Health::Paused);
        assert!(m.poll_renew(t0 + 13 * S), "the next renewal is due at once");
    }
}
