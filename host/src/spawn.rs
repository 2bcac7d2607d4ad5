//! The one place the crate spawns tasks: every task is tracked so shutdown can await it.

use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// Spawns `fut` on the current runtime, tracked by `tracker`, inside the current span.
#[expect(
    clippy::disallowed_methods,
    reason = "the tracked spawn helper: every host task goes through here"
)]
pub(crate) fn spawn_tracked<F>(tracker: &TaskTracker, fut: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(tracker.track_future(fut.in_current_span()))
}
