//! Runs a scenario through baton-host's real loop (`agent::run`) with a provider whose streams
//! and tools whose behaviour come from the scenario, recording every loop event and every
//! settled message.
//!
//! Determinism: a parallel batch finishes in the scenario's `order` because each call waits on
//! its own gate ([`Notify`], which keeps a permit if opened before it is awaited) and the gate
//! of the next call opens when the loop emits `ToolEnd` for the previous one. The first gate
//! opens once every gated call has started. Aborts are triggered at scenario points, never by
//! a timer.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use baton_host::BoxFuture;
use baton_host::ThinkingLevel;
use baton_host::agent::{self, AgentConfig, LoopEvent, RunContext, RunOutcome};
use baton_host::interop::{CancellationToken, TaskTracker};
use baton_host::journal::StoreError;
use baton_host::message::{AgentMessage, UserMessage};
use baton_host::projection::ContextProjector;
use baton_host::provider::{
    ModelContext, ModelRequest, Provider, ProviderEvent, ProviderStream, StreamUpdate,
};
use baton_host::tool::{ObjectSchema, Tool, ToolContext, ToolError, ToolOutput, ToolSet};
use baton_protocol::Value;
use serde_json::json;
use tokio::sync::Notify;

use super::scenario::{Behaviour, End, Item, Scenario, Turn};

/// Serialises a baton type (without naming serde's trait, which the probe does not depend on).
macro_rules! to_json {
    ($v:expr) => {
        serde_json::to_value($v).unwrap_or_default()
    };
}

/// What the tools and the recorder share: gates, counters and the run's cancel token.
#[derive(Debug)]
struct Shared {
    calls: HashMap<String, Behaviour>,
    order: Vec<String>,
    gates: HashMap<String, Notify>,
    executing: AtomicUsize,
    abort_waiters: AtomicUsize,
    abort_tools: usize,
    cancel: CancellationToken,
}

impl Shared {
    fn open(&self, id: &str) {
        if let Some(g) = self.gates.get(id) {
            g.notify_one();
        }
    }
}

#[derive(Debug)]
struct ScenarioProvider {
    turns: Vec<Turn>,
    next: AtomicUsize,
    requests: Mutex<Vec<serde_json::Value>>,
}

impl Provider for ScenarioProvider {
    fn id(&self) -> &str {
        "scenario"
    }

    fn api(&self) -> &str {
        "scenario"
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> Box<dyn ProviderStream> {
        self.requests.lock().push(to_json!(&request.messages));
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        let Some(turn) = self.turns.get(i) else {
            return Box::new(ScenarioStream {
                events: VecDeque::from([ProviderEvent::Error("scenario has no more turns".into())]),
                abort_at_end: false,
                cancel,
            });
        };
        let mut events: VecDeque<ProviderEvent> = turn
            .items
            .iter()
            .map(|item| match item {
                Item::Text(t) => ProviderEvent::TextDelta(t.clone()),
                Item::Thinking(t) => ProviderEvent::ThinkingDelta(t.clone()),
                Item::ThinkingSignature(t) => ProviderEvent::ThinkingSignature(t.clone()),
                Item::ToolCall(c) => ProviderEvent::ToolCall(c.clone()),
            })
            .collect();
        let mut abort_at_end = false;
        match &turn.end {
            End::Done(stop) => events.push_back(ProviderEvent::Done {
                stop_reason: *stop,
                raw_stop_reason: None,
            }),
            End::Error(message) => events.push_back(ProviderEvent::Error(message.clone())),
            End::Abort => abort_at_end = true,
        }
        Box::new(ScenarioStream {
            events,
            abort_at_end,
            cancel,
        })
    }
}

#[derive(Debug)]
struct ScenarioStream {
    events: VecDeque<ProviderEvent>,
    abort_at_end: bool,
    cancel: CancellationToken,
}

impl ProviderStream for ScenarioStream {
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>> {
        if let Some(ev) = self.events.pop_front() {
            return Box::pin(async move { Some(ev) });
        }
        if self.abort_at_end {
            // Abort mid-stream: the response is still open when the run is cancelled.
            self.cancel.cancel();
            return Box::pin(std::future::pending());
        }
        Box::pin(async { None })
    }
}

#[derive(Debug)]
struct ScenarioTool {
    name: String,
    description: String,
    schema: ObjectSchema,
    shared: Arc<Shared>,
}

impl Tool for ScenarioTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
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
            let shared = &self.shared;
            let Some(b) = shared.calls.get(&ctx.tool_call_id) else {
                return Err(ToolError::new(format!(
                    "scenario: no behaviour for {}",
                    ctx.tool_call_id
                )));
            };
            if b.abort_while_running.is_some() {
                let n = shared.abort_waiters.fetch_add(1, Ordering::SeqCst) + 1;
                if n == shared.abort_tools {
                    shared.cancel.cancel();
                }
                ctx.cancel.cancelled().await;
            }
            // Gated calls finish in `order` (also after an abort, so the order never depends on
            // which waiter the abort wakes first).
            if let Some(gate) = shared.gates.get(&ctx.tool_call_id) {
                let n = shared.executing.fetch_add(1, Ordering::SeqCst) + 1;
                if n == shared.order.len() {
                    shared.open(&shared.order[0]);
                }
                gate.notified().await;
            }
            if let Some(text) = &b.abort_while_running {
                return Err(ToolError::new(text.clone()));
            }
            if let Some(text) = &b.throw {
                return Err(ToolError::new(text.clone()));
            }
            let text = b
                .text
                .clone()
                .unwrap_or_else(|| format!("{} {}", self.name, arguments.to_json()));
            let mut out = if b.is_error {
                ToolOutput::error(text)
            } else {
                ToolOutput::text(text)
            };
            if let Some(d) = &b.details {
                out = out.with_details(d.clone());
            }
            if b.terminate {
                out = out.terminating();
            }
            Ok(out)
        })
    }
}

/// The loop's context: an in-memory transcript plus an event log.
#[derive(Debug)]
struct Recorder {
    transcript: Mutex<Vec<AgentMessage>>,
    /// `transcript` projected as it is appended, as the runtime does.
    projected: Mutex<ContextProjector>,
    events: Mutex<Vec<serde_json::Value>>,
    shared: Arc<Shared>,
    clock: AtomicU64,
}

fn event_json(event: &LoopEvent) -> serde_json::Value {
    match event {
        LoopEvent::TurnStart { turn } => json!({"type": "TurnStart", "turn": turn}),
        LoopEvent::AssistantStart { partial } => {
            json!({"type": "AssistantStart", "partial": to_json!(partial)})
        }
        LoopEvent::AssistantUpdate(StreamUpdate::BlockStart { index, block }) => {
            json!({"type": "BlockStart", "index": index, "block": to_json!(block)})
        }
        LoopEvent::AssistantUpdate(StreamUpdate::TextAppend { index, delta }) => {
            json!({"type": "TextAppend", "index": index, "delta": delta})
        }
        LoopEvent::AssistantUpdate(StreamUpdate::ThinkingAppend { index, delta }) => {
            json!({"type": "ThinkingAppend", "index": index, "delta": delta})
        }
        LoopEvent::ToolStart { call } => json!({"type": "ToolStart", "call": to_json!(call)}),
        LoopEvent::ToolEnd { result } => json!({"type": "ToolEnd", "result": to_json!(result)}),
        LoopEvent::TurnEnd { stop_reason } => {
            json!({"type": "TurnEnd", "stopReason": stop_reason.as_str()})
        }
    }
}

impl RunContext for Recorder {
    fn model_context(&self) -> ModelContext {
        self.projected.lock().context().clone()
    }

    fn messages(&self) -> Arc<Vec<Arc<AgentMessage>>> {
        Arc::new(
            self.transcript
                .lock()
                .iter()
                .cloned()
                .map(Arc::new)
                .collect(),
        )
    }

    fn append(&self, message: AgentMessage) -> Result<(), StoreError> {
        self.events
            .lock()
            .push(json!({"type": "Append", "message": to_json!(&message)}));
        self.projected.lock().push(&Arc::new(message.clone()));
        self.transcript.lock().push(message);
        Ok(())
    }

    fn emit(&self, event: LoopEvent) {
        self.events.lock().push(event_json(&event));
        if let LoopEvent::ToolEnd { result } = &event {
            let order = &self.shared.order;
            if let Some(at) = order.iter().position(|id| *id == result.tool_call_id)
                && let Some(next) = order.get(at + 1)
            {
                self.shared.open(next);
            }
        }
    }

    fn take_steering(&self, _last_chance: bool) -> Vec<AgentMessage> {
        Vec::new()
    }

    fn now_ms(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }
}

fn outcome_json(o: &RunOutcome) -> serde_json::Value {
    json!({
        "stopReason": o.stop_reason.as_str(),
        "turns": o.turns,
        "terminatedByTools": o.terminated_by_tools,
        "errorMessage": o.error_message,
    })
}

/// Runs `scenario`; returns `{events, messages, requests, outcome}`.
pub(crate) async fn run(scenario: Scenario) -> Result<serde_json::Value, String> {
    let cancel = CancellationToken::new();
    let abort_tools = scenario
        .calls
        .values()
        .filter(|b| b.abort_while_running.is_some())
        .count();
    let shared = Arc::new(Shared {
        gates: scenario
            .order
            .iter()
            .map(|id| (id.clone(), Notify::new()))
            .collect(),
        calls: scenario.calls,
        order: scenario.order,
        executing: AtomicUsize::new(0),
        abort_waiters: AtomicUsize::new(0),
        abort_tools,
        cancel: cancel.clone(),
    });
    let mut tools = ToolSet::new();
    for t in scenario.tools {
        tools = tools.with(Arc::new(ScenarioTool {
            name: t.name,
            description: t.description,
            schema: t.schema,
            shared: Arc::clone(&shared),
        }));
    }
    let provider = Arc::new(ScenarioProvider {
        turns: scenario.turns,
        next: AtomicUsize::new(0),
        requests: Mutex::new(Vec::new()),
    });
    let config = AgentConfig {
        provider: Arc::clone(&provider) as Arc<dyn Provider>,
        model: "scenario".into(),
        system_prompt: "scenario system prompt".into(),
        thinking: ThinkingLevel::Off,
        tools,
        transform: None,
        tool_execution: scenario.tool_execution,
        cwd: PathBuf::from("."),
        artifacts_dir: std::env::temp_dir(),
    };
    let recorder = Recorder {
        transcript: Mutex::new(Vec::new()),
        projected: Mutex::new(ContextProjector::new()),
        events: Mutex::new(Vec::new()),
        shared,
        clock: AtomicU64::new(1),
    };
    let tracker = TaskTracker::new();
    let prompt = AgentMessage::User(UserMessage::text(scenario.prompt, 0));
    let outcome = agent::run(&config, &recorder, vec![prompt], &cancel, &tracker)
        .await
        .map_err(|e| format!("run failed: {e}"))?;
    tracker.close();
    tracker.wait().await;
    let messages = to_json!(&*recorder.transcript.lock());
    let events = serde_json::Value::Array(recorder.events.lock().clone());
    let requests = serde_json::Value::Array(provider.requests.lock().clone());
    Ok(json!({
        "events": events,
        "messages": messages,
        "requests": requests,
        "outcome": outcome_json(&outcome),
    }))
}
