//! The one place tasks are spawned: every task is tracked so shutdown can await it.

use std::future::Future;

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
