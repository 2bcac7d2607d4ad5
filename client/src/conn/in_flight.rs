//! The in-flight limit: how many callers' requests may be unsettled at once, and the requests
//! waiting, in order, for one of them to settle.
//!
//! A request takes a slot when the core admits it (it is then sent, or held for the next
//! transport) and gives it back when it settles: answered, cancelled, timed out, failed, or
//! lost with its connection. Requests beyond the limit wait here, first come first admitted;
//! as many may wait as the limit admits, and then the core takes no more commands
//! ([`ClientConn::accepts_commands`](super::ClientConn::accepts_commands)), so callers wait on
//! the handles' bounded queue. Attaching, detaching, subscribing and the core's own requests
//! do not count.

use std::collections::VecDeque;

use super::command::UserRequest;

/// Slots and the queue of requests waiting for one.
#[derive(Debug)]
pub(crate) struct InFlight<W> {
    limit: usize,
    admitted: usize,
    waiting: VecDeque<UserRequest<W>>,
}

impl<W> InFlight<W> {
    /// At most `limit` requests in flight (at least one).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            admitted: 0,
            waiting: VecDeque::new(),
        }
    }

    /// A new request takes a free slot (returned, to be sent or held), or waits behind the
    /// requests already waiting.
    pub(crate) fn admit(&mut self, request: UserRequest<W>) -> Option<UserRequest<W>> {
        if self.admitted < self.limit && self.waiting.is_empty() {
            self.admitted += 1;
            Some(request)
        } else {
            self.waiting.push_back(request);
            None
        }
    }

    /// An admitted request settled: its slot is free.
    pub(crate) fn release(&mut self) {
        debug_assert!(self.admitted > 0, "released more slots than were taken");
        self.admitted = self.admitted.saturating_sub(1);
    }

    /// The first waiting request, if a slot is free for it (it takes the slot).
    pub(crate) fn next_admitted(&mut self) -> Option<UserRequest<W>> {
        if self.admitted >= self.limit {
            return None;
        }
        let request = self.waiting.pop_front()?;
        self.admitted += 1;
        Some(request)
    }

    /// Takes waiting request `number` out of the queue (it never took a slot).
    pub(crate) fn take_waiting(&mut self, number: u64) -> Option<UserRequest<W>> {
        let at = self.waiting.iter().position(|r| r.number == number)?;
        self.waiting.remove(at)
    }

    /// Every waiting request, in order (the core finished).
    pub(crate) fn take_all_waiting(&mut self) -> VecDeque<UserRequest<W>> {
        std::mem::take(&mut self.waiting)
    }

    /// Whether the queue of waiting requests is at its bound.
    pub(crate) fn is_full(&self) -> bool {
        self.waiting.len() >= self.limit
    }

    /// Requests holding a slot.
    #[cfg(test)]
    pub(crate) fn admitted(&self) -> usize {
        self.admitted
    }

    /// Requests waiting for a slot.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }
}
