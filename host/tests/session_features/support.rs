//! A controllable provider and a session manager over a temporary directory.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_host::BoxFuture;
use baton_host::ModelRef;
use baton_host::message::StopReason;
use baton_host::provider::{ModelMeta, ModelRegistry};
use baton_host::provider::{ModelRequest, Provider, ProviderEvent, ProviderStream};
use baton_host::session::{
    CompactionSettings, CreateOptions, SessionEvent, SessionEventKind, SessionManager,
    SessionRuntime,
};
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

use crate::common::{fake_model_info, host_config, manual_clock, scripted_and};

/// Hang guard for waits on observed state (never a synchronisation).
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(30);

/// One step of a fake response.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Yield this event.
    Event(ProviderEvent),
    /// Wait until the notify fires (or the call is cancelled), then continue.
    Wait(Arc<Notify>),
}

pub(crate) fn text(t: &str) -> Step {
    Step::Event(ProviderEvent::TextDelta(t.into()))
}

pub(crate) fn done() -> Step {
    Step::Event(ProviderEvent::Done {
        stop_reason: StopReason::Stop,
        raw_stop_reason: None,
    })
}

/// A reply of `t` that stops.
pub(crate) fn reply(t: &str) -> Vec<Step> {
    vec![text(t), done()]
}

/// What a fake call was asked: the system prompt and the projected messages as JSON.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) system_prompt: String,
    pub(crate) messages_json: String,
}

/// Plays one scripted response per call (a plain `ok` once they run out) and records the
/// requests.
#[derive(Debug, Default)]
pub(crate) struct FakeProvider {
    responses: Mutex<VecDeque<Vec<Step>>>,
    seen: Mutex<Vec<Seen>>,
}

impl FakeProvider {
    pub(crate) fn new(responses: Vec<Vec<Step>>) -> Arc<Self> {
        Arc::new(Self {
            responses: Mutex::new(responses.into()),
            seen: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

struct FakeStream {
    steps: VecDeque<Step>,
    cancel: CancellationToken,
}

impl ProviderStream for FakeStream {
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>> {
        Box::pin(async move {
            loop {
                match self.steps.pop_front()? {
                    Step::Event(e) => return Some(e),
                    Step::Wait(n) => {
                        tokio::select! {
                            () = n.notified() => {}
                            () = self.cancel.cancelled() => return None,
                        }
                    }
                }
            }
        })
    }
}

impl Provider for FakeProvider {
    fn id(&self) -> &str {
        "fake"
    }

    fn api(&self) -> &str {
        "fake"
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> Box<dyn ProviderStream> {
        self.seen.lock().unwrap().push(Seen {
            system_prompt: request.system_prompt.clone(),
            messages_json: serde_json::to_string(&request.messages).unwrap(),
        });
        let steps = self
            .responses
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| reply("ok"));
        Box::new(FakeStream {
            steps: steps.into(),
            cancel,
        })
    }
}

pub(crate) fn fake_model() -> ModelRef {
    ModelRef::new("fake", "fake-model")
}

/// The scripted model plus `fake` as `fake/fake-model` with a `window`-token context.
pub(crate) fn registry_with_window(fake: Arc<FakeProvider>, window: u64) -> ModelRegistry {
    let mut r = scripted_and(None);
    r.register_with_meta(
        fake_model_info(),
        ModelMeta {
            context_window: Some(window),
            ..ModelMeta::default()
        },
        fake,
    );
    r
}

/// A manager over `registry`.
pub(crate) fn manager_with(
    dir: &Path,
    registry: ModelRegistry,
    compaction: CompactionSettings,
) -> SessionManager {
    let mut config = host_config(dir, dir);
    config.session.compaction = compaction;
    SessionManager::new(config, registry, manual_clock()).unwrap()
}

/// The scripted model (zero delay) plus `fake` as `fake/fake-model`.
pub(crate) fn registry(fake: Option<Arc<FakeProvider>>) -> ModelRegistry {
    scripted_and(fake.map(|f| f as _))
}

pub(crate) fn manager(
    dir: &Path,
    fake: Option<Arc<FakeProvider>>,
    compaction: CompactionSettings,
) -> SessionManager {
    manager_with(dir, registry(fake), compaction)
}

pub(crate) fn open_new(m: &SessionManager, model: Option<ModelRef>) -> (String, SessionRuntime) {
    let id = m
        .create(CreateOptions {
            model,
            ..CreateOptions::default()
        })
        .unwrap();
    let s = m.open(&id).unwrap();
    (id, s)
}

/// Waits for the first event `f` accepts.
pub(crate) async fn wait_event(
    rx: &mut broadcast::Receiver<SessionEvent>,
    what: &str,
    f: impl Fn(&SessionEventKind) -> bool,
) -> SessionEventKind {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let e = rx.recv().await.unwrap();
            if f(&e.kind) {
                return e.kind;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Waits until the session is idle (hang-guarded).
pub(crate) async fn idle(s: &SessionRuntime) {
    tokio::time::timeout(HANG_GUARD, s.wait_idle())
        .await
        .expect("session never went idle");
}
