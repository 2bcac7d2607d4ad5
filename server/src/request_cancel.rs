//! One request's cancellation: a flag word, and a [`CancellationToken`] made only for a host
//! that asks for one.
//!
//! Most calls finish without ever waiting, so they never look at a token; making one per
//! request (and cloning it into the context, and dropping both) locks the token's tree node
//! each time. A [`RequestCancel`] is one allocation with two atomics' worth of state: the
//! connection state cancels it, [`Context::is_cancelled`](crate::Context::is_cancelled) and
//! [`Context::cancel_requested`](crate::Context::cancel_requested) read the flags, and only
//! [`Context::cancellation`](crate::Context::cancellation) (or `cancelled().await`) makes the
//! token.
//!
//! # Why a cancel is never lost
//!
//! The token lives in a [`OnceLock`], and whether it has been published lives in the same
//! atomic word as the cancelled flag. Both sides end with a read-modify-write of that word:
//!
//! * the canceller sets [`CANCELLED`] with `fetch_or` and cancels the token if the old word
//!   had [`TOKEN`];
//! * the host side first fills the `OnceLock`, then sets [`TOKEN`] with `fetch_or` and
//!   cancels the token itself if the old word had [`CANCELLED`].
//!
//! Read-modify-writes of one atomic are totally ordered, so one of the two comes second and
//! sees the other's bit: if the host's comes second it cancels the token; if the
//! canceller's comes second it sees [`TOKEN`], and since that bit was set (`Release`) after
//! the `OnceLock` was filled and read here with `Acquire`, the token is there to cancel.
//! A token cancelled twice is cancelled once. The tests run both orders, and the host side
//! split at its two steps with the cancel in between, deterministically.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio_util::sync::CancellationToken;

/// The request is cancelled (the client cancelled it, left, or the server shut down).
const CANCELLED: u8 = 1;
/// The client itself sent `cancel` (set together with [`CANCELLED`]).
const REQUESTED: u8 = 2;
/// The token exists and every later canceller must cancel it.
const TOKEN: u8 = 4;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct RequestCancel {
    state: AtomicU8,
    token: OnceLock<CancellationToken>,
}

impl RequestCancel {
    /// Cancels the request; `requested` when the client asked for it (a `cancel` frame).
    pub(crate) fn cancel(&self, requested: bool) {
        let bits = if requested {
            CANCELLED | REQUESTED
        } else {
            CANCELLED
        };
        let before = self.state.fetch_or(bits, Ordering::AcqRel);
        if before & TOKEN != 0
            && let Some(token) = self.token.get()
        {
            token.cancel();
        }
    }

    /// True once cancelled for any reason.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.state.load(Ordering::Acquire) & CANCELLED != 0
    }

    /// True once the client itself cancelled.
    pub(crate) fn is_requested(&self) -> bool {
        self.state.load(Ordering::Acquire) & REQUESTED != 0
    }

    /// The token, made on first use; cancelled if the request is.
    pub(crate) fn token(&self) -> &CancellationToken {
        if let Some(token) = self.token.get()
            && self.state.load(Ordering::Acquire) & TOKEN != 0
        {
            return token;
        }
        let token = self.make_token();
        self.publish_token(token);
        token
    }

    /// The host side's first step: the token exists (not yet visible to cancellers).
    fn make_token(&self) -> &CancellationToken {
        self.token.get_or_init(CancellationToken::new)
    }

    /// The host side's second step: cancellers see the token from now on; a cancel that
    /// came first is applied here.
    fn publish_token(&self, token: &CancellationToken) {
        let before = self.state.fetch_or(TOKEN, Ordering::AcqRel);
        if before & CANCELLED != 0 {
            token.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_nobody_asks_about_never_makes_a_token() {
        let c = RequestCancel::default();
        assert!(!c.is_cancelled());
        c.cancel(false);
        assert!(c.is_cancelled());
        assert!(!c.is_requested());
        assert!(c.token.get().is_none());
    }

    #[test]
    fn a_cancel_after_the_token_was_made_cancels_it() {
        let c = RequestCancel::default();
        let token = c.token().clone();
        assert!(!token.is_cancelled());
        c.cancel(true);
        assert!(token.is_cancelled());
        assert!(c.is_requested());
    }

    #[test]
    fn a_cancel_before_the_token_was_made_is_applied_to_it() {
        let c = RequestCancel::default();
        c.cancel(false);
        assert!(c.token().is_cancelled());
        assert!(!c.is_requested());
    }

    #[test]
    fn a_cancel_between_making_and_publishing_the_token_is_applied_by_the_host_side() {
        let c = RequestCancel::default();
        let token = c.make_token();
        c.cancel(true);
        assert!(!token.is_cancelled(), "the canceller could not see it yet");
        c.publish_token(token);
        assert!(token.is_cancelled());
        assert!(c.token().is_cancelled());
    }

    #[test]
    fn a_cancel_after_publishing_is_applied_by_the_canceller() {
        let c = RequestCancel::default();
        let token = c.make_token();
        c.publish_token(token);
        assert!(!token.is_cancelled());
        c.cancel(false);
        assert!(token.is_cancelled());
    }

    #[test]
    fn racing_threads_never_lose_a_cancel() {
        for _ in 0..2_000 {
            let c = std::sync::Arc::new(RequestCancel::default());
            let host = {
                let c = std::sync::Arc::clone(&c);
                std::thread::spawn(move || c.token().clone())
            };
            c.cancel(false);
            let token = host.join().unwrap();
            assert!(token.is_cancelled());
        }
    }
}
