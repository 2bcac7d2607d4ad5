//! What the providers suite adds to the shared fake server: retry policies that never really
//! wait, running a call to its end, and request bodies as JSON.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use baton_host::message::AssistantMessage;
use baton_host::provider::retry::{NowFn, RetryPolicy, SleepFn};
use baton_host::provider::{AssistantBuilder, ModelRequest, Provider, ProviderEvent};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::fake::{HANG_GUARD, Recorded};

/// A recorded request's body as JSON.
pub(crate) trait JsonBody {
    /// The body parsed (`Null` when it is not JSON).
    fn json(&self) -> serde_json::Value;
}

impl JsonBody for Recorded {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// A retry policy that records each wait and returns at once.
pub(crate) fn recording_retry() -> (RetryPolicy, Arc<Mutex<Vec<Duration>>>) {
    let waits = Arc::new(Mutex::new(Vec::new()));
    let w = Arc::clone(&waits);
    let sleep: SleepFn = Arc::new(move |d| {
        w.lock().expect("lock").push(d);
        Box::pin(async {})
    });
    (RetryPolicy::default().with_sleep(sleep), waits)
}

/// [`recording_retry`] whose wall clock stands still at `now`.
pub(crate) fn recording_retry_at(now: SystemTime) -> (RetryPolicy, Arc<Mutex<Vec<Duration>>>) {
    let (retry, waits) = recording_retry();
    let clock: NowFn = Arc::new(move || now);
    (retry.with_clock(clock), waits)
}

/// A retry policy whose wait never ends, reporting when it starts.
pub(crate) fn stuck_retry() -> (RetryPolicy, mpsc::UnboundedReceiver<Duration>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sleep: SleepFn = Arc::new(move |d| {
        let _ = tx.send(d);
        Box::pin(std::future::pending())
    });
    (RetryPolicy::default().with_sleep(sleep), rx)
}

/// Runs one call to the end: the settled message and every event.
pub(crate) async fn call(
    provider: &dyn Provider,
    request: ModelRequest,
) -> (AssistantMessage, Vec<ProviderEvent>) {
    call_with(provider, request, CancellationToken::new()).await
}

/// [`call`] with a cancellation token (cancelled tokens settle as `aborted`).
pub(crate) async fn call_with(
    provider: &dyn Provider,
    request: ModelRequest,
    cancel: CancellationToken,
) -> (AssistantMessage, Vec<ProviderEvent>) {
    let model = request.model.clone();
    let mut stream = provider.stream(request, cancel.clone());
    let mut builder = AssistantBuilder::new(provider.api(), provider.id(), &model, 1);
    let mut events = Vec::new();
    loop {
        let ev = tokio::time::timeout(HANG_GUARD, stream.next())
            .await
            .expect("hang guard: the provider stream stalled");
        let Some(ev) = ev else { break };
        events.push(ev.clone());
        builder.apply(ev);
        if builder.is_finished() {
            break;
        }
    }
    (builder.finish(cancel.is_cancelled()), events)
}
