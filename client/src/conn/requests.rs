//! The request table: every request of this connection that is on the wire, by number.
//!
//! Numbers come from one [`RequestNumbers`] allocator shared by the core and the handles, so
//! a caller knows its request's number (to cancel it) before the core has seen the request.
//! The table itself has one owner, [`ClientConn`](super::ClientConn).

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
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

/// `request-` and the 20 digits of `u64::MAX`.
const MAX_ID_LEN: usize = ID_PREFIX.len() + 20;

/// The wire id of request number `n`, written without a heap allocation (ids up to 24 bytes,
/// i.e. every number below 10^16, are stored inline by [`Id`]); one is made per request.
pub(crate) fn request_id(n: u64) -> Id {
    let mut buf = [0u8; MAX_ID_LEN];
    buf[..ID_PREFIX.len()].copy_from_slice(ID_PREFIX.as_bytes());
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b"0123456789"[(rest % 10) as usize];
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let len = ID_PREFIX.len() + digits.len() - at;
    buf[ID_PREFIX.len()..len].copy_from_slice(&digits[at..]);
    let text = std::str::from_utf8(&buf[..len]).unwrap_or_else(|_| unreachable!("ASCII"));
    Id::from_text(text).unwrap_or_else(|_| unreachable!("non-empty by construction"))
}

/// Hashes the table's keys, which are this client's own sequential request numbers (never
/// chosen by the peer: a response's id only looks a number up), so SipHash's flooding
/// resistance buys nothing and costs a measurable share of each request. A multiplicative
/// hash spreads consecutive numbers over the table's buckets.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NumberHasher(u64);

impl Hasher for NumberHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for `u64` keys; this keeps the hasher total.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the high bits hashbrown takes its control byte from vary too.
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by request number.
pub(crate) type NumberMap<V> = HashMap<u64, V, BuildHasherDefault<NumberHasher>>;

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
    /// Subscription `key`'s subscribe request under `wire_id` (a later attempt has another).
    Subscribe { key: u64, wire_id: Id },
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
    slots: NumberMap<Slot<W>>,
    deadlines: BTreeSet<(Instant, u64)>,
}

impl<W> Default for RequestTable<W> {
    fn default() -> Self {
        Self {
            slots: NumberMap::default(),
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
    fn a_request_id_is_the_prefix_and_the_number_in_decimal() {
        for n in [0, 1, 9, 10, 42, 99_999, 10_u64.pow(15), u64::MAX] {
            assert_eq!(request_id(n).as_str(), format!("request-{n}"));
            assert_eq!(request_number(&request_id(n)), Some(n));
        }
    }

    #[test]
    fn the_table_finds_every_number_it_holds() {
        let mut table = RequestTable::<()>::default();
        let target = Target::Server(
            "00000000-0000-4000-8000-000000000001"
                .parse()
                .expect("server id"),
        );
        for n in 0..1_000 {
            table.insert(n * 7, Purpose::Internal, target.clone(), None);
        }
        for n in 0..1_000 {
            assert!(matches!(table.take(n * 7), Some(Slot::Sent(_))), "{n}");
            assert!(table.take(n * 7 + 1).is_none());
        }
        assert_eq!(table.len(), 0);
    }

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
