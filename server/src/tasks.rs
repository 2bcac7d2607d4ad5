//! The one place tasks are spawned: every task is tracked so shutdown can await it.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use tokio_util::task::TaskTracker;
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

/// Polls `fut` once on the calling task and, only if it is not done, spawns the rest as a
/// task tracked by `tracker`. Returns true if it finished inline.
///
/// Most host calls answer on their first poll; running them here saves a task spawn and a
/// cross-thread wake-up per request. The tracker counts the work from before the first poll,
/// so a drain that starts meanwhile still waits for it.
///
/// The first poll uses a no-op waker: that is sound because a `Pending` future is spawned at
/// once and the task's first poll registers its real waker before anything can be missed.
#[expect(
    clippy::disallowed_methods,
    reason = "the tracked spawn helper: every server task goes through here"
)]
pub(crate) fn run_or_spawn<F>(tracker: &TaskTracker, fut: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    let token = tracker.token();
    let mut fut = Box::pin(fut.in_current_span());
    let mut cx = Context::from_waker(Waker::noop());
    if let Poll::Ready(()) = fut.as_mut().poll(&mut cx) {
        return true;
    }
    drop(tokio::spawn(async move {
        fut.await;
        drop(token);
    }));
    false
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn work_done_on_its_first_poll_runs_inline_and_leaves_nothing_tracked() {
        let tracker = TaskTracker::new();
        let ran = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&ran);
        assert!(run_or_spawn(&tracker, async move {
            r.store(true, Ordering::SeqCst);
        }));
        assert!(
            ran.load(Ordering::SeqCst),
            "ran before run_or_spawn returned"
        );
        assert!(tracker.is_empty());
    }

    #[tokio::test]
    async fn work_not_done_on_its_first_poll_is_spawned_and_a_drain_waits_for_it() {
        let tracker = TaskTracker::new();
        let (tx, rx) = oneshot::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let d = Arc::clone(&done);
        assert!(!run_or_spawn(&tracker, async move {
            let _ = rx.await;
            d.store(true, Ordering::SeqCst);
        }));
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
