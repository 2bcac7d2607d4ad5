//! The one place tasks are spawned: every task is tracked so shutdown can await it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

/// Spawns `fut` on the current runtime, tracked by `tracker`, inside the current span.
#[expect(
    clippy::disallowed_methods,
    reason = "the tracked spawn helper: every server task goes through here"
)]
pub(crate) fn spawn<F>(tracker: &TaskTracker, fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    drop(tokio::spawn(tracker.track_future(fut.in_current_span())));
}

/// Spawns `fut` on the current runtime, counted by `token` (taken from a [`TaskTracker`]
/// before the work began, so a drain that started meanwhile waits for it) until it ends.
#[expect(
    clippy::disallowed_methods,
    reason = "the tracked spawn helper: every server task goes through here"
)]
pub(crate) fn spawn_counted<F>(token: TaskTrackerToken, fut: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    drop(tokio::spawn(async move {
        fut.await;
        drop(token);
    }));
}

/// Polls futures once on the calling task, in one reused allocation.
///
/// Most host calls answer on their first poll; running them in the connection's task saves
/// a task spawn and a cross-thread wake-up per request, and polling them in this slot saves
/// the allocation and free of a boxed future per request: the slot's box is kept while
/// calls finish at once (the finished future is dropped in place, [`Pin::set`]), and only a
/// call that is still pending takes the box with it ([`Unfinished`]), to be spawned.
///
/// The first poll uses a no-op waker: that is sound because an [`Unfinished`] future is
/// spawned at once and the task's first poll registers its real waker before anything can
/// be missed.
pub(crate) struct FirstPoll<F> {
    slot: Option<Pin<Box<Option<F>>>>,
}

impl<F> Default for FirstPoll<F> {
    fn default() -> Self {
        Self { slot: None }
    }
}

impl<F: Future> FirstPoll<F> {
    /// Polls `fut` once: its output, or the rest of it to run elsewhere.
    pub(crate) fn poll(&mut self, fut: F) -> Result<F::Output, Unfinished<F>> {
        let mut slot = self.slot.take().unwrap_or_else(|| Box::pin(None));
        slot.as_mut().set(Some(fut));
        let mut cx = Context::from_waker(Waker::noop());
        let polled = slot
            .as_mut()
            .as_pin_mut()
            .expect("the slot was filled just above")
            .poll(&mut cx);
        match polled {
            Poll::Ready(output) => {
                slot.as_mut().set(None);
                self.slot = Some(slot);
                Ok(output)
            }
            Poll::Pending => Err(Unfinished(slot)),
        }
    }

    /// Frees the kept allocation (an idle connection should not hold one).
    pub(crate) fn release(&mut self) {
        self.slot = None;
    }
}

/// A future [`FirstPoll::poll`] left pending, in the box it was first polled in.
pub(crate) struct Unfinished<F>(Pin<Box<Option<F>>>);

impl<F: Future> Future for Unfinished<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.0
            .as_mut()
            .as_pin_mut()
            .expect("an unfinished future is held until it is done, and awaited once")
            .poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn work_done_on_its_first_poll_runs_inline_and_keeps_its_allocation_for_the_next() {
        async fn job(ran: Arc<AtomicBool>, n: u8) -> u8 {
            ran.store(true, Ordering::SeqCst);
            n
        }
        let mut first = FirstPoll::default();
        let ran = Arc::new(AtomicBool::new(false));
        let out = first.poll(job(Arc::clone(&ran), 7));
        assert!(matches!(out, Ok(7)));
        assert!(ran.load(Ordering::SeqCst), "ran before poll returned");
        let kept = first.slot.as_ref().map(|b| std::ptr::from_ref(&**b));
        assert!(kept.is_some());
        assert!(
            first.slot.as_ref().is_some_and(|b| b.is_none()),
            "the finished future is dropped"
        );
        // The same type of future again: it runs in the same allocation.
        let again = first.poll(job(Arc::clone(&ran), 8));
        assert!(matches!(again, Ok(8)));
        assert_eq!(first.slot.as_ref().map(|b| std::ptr::from_ref(&**b)), kept);
        first.release();
        assert!(first.slot.is_none());
    }

    #[tokio::test]
    async fn work_not_done_on_its_first_poll_is_spawned_and_a_drain_waits_for_it() {
        let tracker = TaskTracker::new();
        let (tx, rx) = oneshot::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        let mut first = FirstPoll::default();
        // The work is counted from before its first poll.
        let token = tracker.token();
        let Err(rest) = first.poll(async move {
            let _ = rx.await;
            d.store(true, Ordering::SeqCst);
        }) else {
            panic!("the work waits for the channel");
        };
        assert!(first.slot.is_none(), "the pending future took the box");
        spawn_counted(token, rest);
        tracker.close();
        assert_eq!(tracker.len(), 1);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), tracker.wait())
                .await
                .is_err(),
            "the drain must wait for the spawned rest of the work"
        );
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), tracker.wait())
            .await
            .expect("the work finishes once woken");
        assert!(done.load(Ordering::SeqCst));
    }
}
