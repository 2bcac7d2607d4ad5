//! The request table: every request of this connection that is on the wire, by number.
//!
//! Numbers come from one [`RequestNumbers`] allocator shared by the core and the handles, so
//! a caller knows its request's number (to cancel it) before the core has seen the request.
//! The table itself has one owner, [`ClientConn`](super::ClientConn).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use baton_protocol::{Id, Target};

/// The wire id of request number `n` is `request-{n}`.
const ID_PREFIX: &str = "request-";

/// Hands out request numbers, never the same one twice.
#[derive(Debug, Clone)]
pub(crate) struct RequestNumbers(Arc<AtomicU64>);

impl Default for RequestNumbers {
    fn default() -> Self {
        Self(Arc::new(AtomicU64::new(1)))
    }
}

impl RequestNumbers {
    pub(crate) fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// The wire id of request number `n`.
pub(crate) fn request_id(n: u64) -> Id {
    Id::new(format!("{ID_PREFIX}{n}")).unwrap_or_else(|_| unreachable!("non-empty by construction"))
}

/// The number of a wire id this client made, or `None` for any id it never sends (the
/// canonical decimal form only, so `request-01` is not request 1).
pub(crate) fn request_number(id: &Id) -> Option<u64> {
    let digits = id.as_str().strip_prefix(ID_PREFIX)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if canonical { digits.parse().ok() } else { None }
}

/// What a response is for.
#[derive(Debug)]
pub(crate) enum Purpose<W> {
    /// A caller's request.
    User { waiter: W },
    /// Attaching to a session; `waiter` is `None` for the re-attach after a reconnect.
    Attach { session_id: Id, waiter: Option<W> },
    /// Detaching from the session.
    Detach { waiter: W },
    /// The subscribe request of subscription `key`.
    Subscribe { key: u64 },
    /// Unsubscribes and re-subscribe cleanups: the answer does not matter.
    Internal,
}

/// A request on the wire.
#[derive(Debug)]
pub(crate) struct Sent<W> {
    pub(crate) purpose: Purpose<W>,
    pub(crate) target: Target,
    deadline: Option<Instant>,
}

/// What an answered id was.
#[derive(Debug)]
pub(crate) enum Slot<W> {
    /// Sent and still wanted.
    Sent(Sent<W>),
    /// Cancelled after it was sent: its late answer is ignored, not fatal.
    Abandoned,
}

/// Requests on the wire by number, and the deadlines of every timed request (sent or not).
#[derive(Debug)]
pub(crate) struct RequestTable<W> {
    slots: HashMap<u64, Slot<W>>,
    deadlines: BTreeSet<(Instant, u64)>,
}

impl<W> Default for RequestTable<W> {
    fn default() -> Self {
        Self {
            slots: HashMap::new(),
            deadlines: BTreeSet::new(),
        }
    }
}

impl<W> RequestTable<W> {
    /// Records a request that was just written.
    pub(crate) fn insert(
        &mut self,
        number: u64,
        purpose: Purpose<W>,
        target: Target,
        deadline: Option<Instant>,
    ) {
        if let Some(at) = deadline {
            self.deadlines.insert((at, number));
        }
        self.slots.insert(
            number,
            Slot::Sent(Sent {
                purpose,
                target,
                deadline,
            }),
        );
    }

    /// Notes the deadline of a request that is not on the wire yet.
    pub(crate) fn watch_deadline(&mut self, number: u64, deadline: Instant) {
        self.deadlines.insert((deadline, number));
    }

    /// Forgets a deadline (the request was answered, cancelled or dropped unsent).
    pub(crate) fn forget_deadline(&mut self, number: u64, deadline: Option<Instant>) {
        if let Some(at) = deadline {
            self.deadlines.remove(&(at, number));
        }
    }

    /// Takes what the response for `number` answers.
    pub(crate) fn take(&mut self, number: u64) -> Option<Slot<W>> {
        let slot = self.slots.remove(&number)?;
        if let Slot::Sent(sent) = &slot {
            self.forget_deadline(number, sent.deadline);
        }
        Some(slot)
    }

    /// A sent request is given up on: returns it (its `cancel` must be sent) and keeps its
    /// number so the late answer is ignored. `None` if it is not on the wire.
    pub(crate) fn abandon(&mut self, number: u64) -> Option<Sent<W>> {
        match self.slots.get(&number) {
            Some(Slot::Sent(_)) => {}
            Some(Slot::Abandoned) | None => return None,
        }
        match self.slots.insert(number, Slot::Abandoned) {
            Some(Slot::Sent(sent)) => {
                self.forget_deadline(number, sent.deadline);
                Some(sent)
            }
            Some(Slot::Abandoned) | None => None,
        }
    }

    /// Whether a detach is on the wire.
    pub(crate) fn detaching(&self) -> bool {
        self.slots.values().any(|s| {
            matches!(
                s,
                Slot::Sent(Sent {
                    purpose: Purpose::Detach { .. },
                    ..
                })
            )
        })
    }

    /// The connection ended: every request on it, in number order (abandoned ones are
    /// forgotten). Deadlines of requests not on the wire stay.
    pub(crate) fn drain(&mut self) -> Vec<Sent<W>> {
        let mut sent: Vec<(u64, Sent<W>)> = self
            .slots
            .drain()
            .filter_map(|(n, slot)| match slot {
                Slot::Sent(s) => Some((n, s)),
                Slot::Abandoned => None,
            })
            .collect();
        sent.sort_unstable_by_key(|(n, _)| *n);
        for (n, s) in &sent {
            if let Some(at) = s.deadline {
                self.deadlines.remove(&(at, *n));
            }
        }
        sent.into_iter().map(|(_, s)| s).collect()
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Takes the number of one request whose deadline is at or before `now`.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<u64> {
        let &(at, number) = self.deadlines.first()?;
        if at > now {
            return None;
        }
        self.deadlines.pop_first();
        Some(number)
    }

    /// Requests on the wire or abandoned.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_form_of_an_id_is_one_of_ours() {
        assert_eq!(request_number(&request_id(7)), Some(7));
        assert_eq!(request_number(&Id::new("request-0").unwrap()), Some(0));
        for other in [
            "request-01",
            "request-+1",
            "request-",
            "request-1x",
            "req-1",
            "service-1",
        ] {
            assert_eq!(request_number(&Id::new(other).unwrap()), None, "{other}");
        }
        assert_eq!(
            request_number(&Id::new("request-99999999999999999999").unwrap()),
            None
        );
    }
}
