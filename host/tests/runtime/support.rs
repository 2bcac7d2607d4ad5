//! Test doubles: a controllable provider, an in-memory run context and small tools.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use baton_host::BoxFuture;
use baton_host::ThinkingLevel;
use baton_host::agent::{AgentConfig, LoopEvent, RunContext, ToolExecution};
use baton_host::journal::StoreError;
use baton_host::message::MessageRef;
use baton_host::message::{AgentMessage, StopReason, ToolCall, UserMessage};
use baton_host::projection::ContextProjector;
use baton_host::provider::{ModelContext, ModelRequest, Provider, ProviderEvent, ProviderStream};
use baton_host::tool::{ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, ToolSet};
use baton_protocol::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One step of a fake response.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Yield this event.
    Event(ProviderEvent),
    /// Wait until the notify fires, then continue.
    Wait(Arc<Notify>),
    /// Never yield again (until dropped).
    Hang,
    /// Fire the call's cancellation token and end the stream, as an HTTP stream does when
    /// an abort lands after the loop last looked at the token but before the stream did.
    CancelAndEnd,
}

pub(crate) fn text(t: &str) -> Step {
    Step::Event(ProviderEvent::TextDelta(t.into()))
}

pub(crate) fn call(id: &str, name: &str, args: &str) -> Step {
    Step::Event(ProviderEvent::ToolCall(ToolCall::new(
        id,
        name,
        Value::from_json(args).unwrap(),
    )))
}

pub(crate) fn done(stop: StopReason) -> Step {
    Step::Event(ProviderEvent::Done {
        stop_reason: stop,
        raw_stop_reason: None,
    })
}

/// A provider that plays one scripted response per call and records the requests.
#[derive(Debug, Default)]
pub(crate) struct FakeProvider {
    responses: Mutex<VecDeque<Vec<Step>>>,
    pub(crate) requests: Mutex<Vec<ModelRequest>>,
}

impl FakeProvider {
    pub(crate) fn new(responses: Vec<Vec<Step>>) -> Arc<Self> {
        Arc::new(Self {
            responses: Mutex::new(responses.into()),
            requests: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub(crate) fn request(&self, i: usize) -> ModelRequest {
        self.requests.lock().unwrap()[i].clone()
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
                match self.steps.front()?.clone() {
                    Step::Event(ev) => {
                        self.steps.pop_front();
                        return Some(ev);
                    }
                    Step::Wait(n) => {
                        n.notified().await;
                        self.steps.pop_front();
                    }
                    Step::Hang => std::future::pending::<()>().await,
                    Step::CancelAndEnd => {
                        self.cancel.cancel();
                        return None;
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
        self.requests.lock().unwrap().push(request);
        let steps = self
            .responses
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| vec![text("(no more scripted responses)"), done(StopReason::Stop)]);
        Box::new(FakeStream {
            steps: steps.into(),
            cancel,
        })
    }
}

/// An in-memory context recording everything.
#[derive(Default)]
pub(crate) struct TestCtx {
    pub(crate) messages: Mutex<Vec<AgentMessage>>,
    /// `messages` projected as they are appended (what the runtime keeps too).
    projected: Mutex<ContextProjector>,
    pub(crate) events: Mutex<Vec<LoopEvent>>,
    pub(crate) steering: Mutex<VecDeque<String>>,
    /// Fires on every event (tests wait for a condition by re-checking after each).
    pub(crate) changed: Notify,
    /// Steering to queue when a tool starts.
    pub(crate) steer_on_tool_start: Mutex<Option<String>>,
}

impl TestCtx {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(crate) fn messages(&self) -> Vec<AgentMessage> {
        self.messages.lock().unwrap().clone()
    }

    pub(crate) fn events(&self) -> Vec<LoopEvent> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until `pred` holds for the recorded events.
    pub(crate) async fn wait_for(&self, pred: impl Fn(&[LoopEvent]) -> bool) {
        loop {
            let notified = self.changed.notified();
            if pred(&self.events.lock().unwrap()) {
                return;
            }
            notified.await;
        }
    }
}

impl RunContext for TestCtx {
    fn model_context(&self) -> ModelContext {
        self.projected.lock().unwrap().context().clone()
    }
    fn messages(&self) -> Arc<Vec<Arc<AgentMessage>>> {
        Arc::new(
            self.messages
                .lock()
                .unwrap()
                .iter()
                .cloned()
                .map(Arc::new)
                .collect(),
        )
    }
    fn append(&self, message: AgentMessage) -> Result<(), StoreError> {
        self.projected
            .lock()
            .unwrap()
            .push(&Arc::new(message.clone()));
        self.messages.lock().unwrap().push(message);
        Ok(())
    }
    fn emit(&self, event: LoopEvent) {
        if matches!(event, LoopEvent::ToolStart { .. })
            && let Some(s) = self.steer_on_tool_start.lock().unwrap().take()
        {
            self.steering.lock().unwrap().push_back(s);
        }
        self.events.lock().unwrap().push(event);
        self.changed.notify_waiters();
    }
    fn take_steering(&self, _last_chance: bool) -> Vec<AgentMessage> {
        self.steering
            .lock()
            .unwrap()
            .drain(..)
            .map(|t| AgentMessage::User(UserMessage::text(t, 0)))
            .collect()
    }
    fn now_ms(&self) -> u64 {
        1_000
    }
}

pub(crate) fn config(provider: Arc<dyn Provider>, tools: ToolSet) -> AgentConfig {
    AgentConfig {
        provider,
        model: "fake-model".into(),
        system_prompt: "sys".into(),
        thinking: ThinkingLevel::Off,
        tools,
        transform: None,
        tool_execution: ToolExecution::Parallel,
        cwd: std::env::temp_dir(),
        artifacts_dir: std::env::temp_dir(),
    }
}

pub(crate) fn user(t: &str) -> AgentMessage {
    AgentMessage::User(UserMessage::text(t, 0))
}

/// What a test tool does.
#[derive(Debug)]
pub(crate) enum Behaviour {
    /// Returns `echo:<arguments>`.
    Echo,
    /// Fails with an error.
    Throw,
    /// Panics.
    Panic,
    /// Returns a result that asks to terminate.
    Terminate,
    /// Waits for `gate`, then returns.
    WaitFor(Arc<Notify>),
    /// Returns, then fires `done` (after its result is sent).
    Signal(Arc<Notify>),
    /// Waits for cancellation, then fails.
    UntilCancelled,
}

#[derive(Debug)]
pub(crate) struct TestTool {
    name: String,
    schema: ObjectSchema,
    behaviour: Behaviour,
    pub(crate) runs: AtomicUsize,
}

impl TestTool {
    pub(crate) fn new(name: &str, behaviour: Behaviour) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            schema: ObjectSchema::new().optional("n", Schema::integer(), "a number"),
            behaviour,
            runs: AtomicUsize::new(0),
        })
    }

    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

impl Tool for TestTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "test tool"
    }
    fn parameters(&self) -> &ObjectSchema {
        &self.schema
    }
    fn execute<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            self.runs.fetch_add(1, Ordering::SeqCst);
            match &self.behaviour {
                Behaviour::Echo => Ok(ToolOutput::text(format!("echo:{}", arguments.to_json()))),
                Behaviour::Throw => Err(ToolError::new("boom")),
                Behaviour::Panic => panic!("tool panicked on purpose"),
                Behaviour::Terminate => Ok(ToolOutput::text("done").terminating()),
                Behaviour::WaitFor(gate) => {
                    gate.notified().await;
                    Ok(ToolOutput::text(format!("{} finished", self.name)))
                }
                Behaviour::Signal(done) => {
                    // notify_one stores a permit, so the waiter cannot miss it.
                    done.notify_one();
                    Ok(ToolOutput::text(format!("{} finished", self.name)))
                }
                Behaviour::UntilCancelled => {
                    ctx.cancel.cancelled().await;
                    Err(ToolError::new("cancelled"))
                }
            }
        })
    }
}

pub(crate) fn tools(list: Vec<Arc<TestTool>>) -> ToolSet {
    list.into_iter().fold(ToolSet::new(), |set, t| set.with(t))
}

pub(crate) fn results(msgs: &[AgentMessage]) -> Vec<(String, bool, String)> {
    msgs.iter()
        .filter_map(|m| match m {
            AgentMessage::ToolResult(r) => Some((
                r.tool_call_id.clone(),
                r.is_error,
                r.content
                    .iter()
                    .filter_map(|c| c.as_text())
                    .collect::<String>(),
            )),
            _ => None,
        })
        .collect()
}

pub(crate) fn roles(msgs: &[AgentMessage]) -> Vec<&'static str> {
    msgs.iter().map(AgentMessage::role).collect()
}

pub(crate) fn model_roles(msgs: &ModelContext) -> Vec<&'static str> {
    msgs.iter()
        .map(|m| match m {
            MessageRef::User(_) => "user",
            MessageRef::Assistant(_) => "assistant",
            MessageRef::ToolResult(_) => "toolResult",
        })
        .collect()
}
