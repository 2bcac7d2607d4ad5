//! The loop itself.

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::LENGTH_FAILURE_TEXT;
use super::event::LoopEvent;
use super::exec::{Executed, ToolExecution, execute_batch};
use crate::journal::StoreError;
use crate::message::{AgentMessage, AssistantMessage, StopReason, ToolResultMessage};
use crate::model_ref::ThinkingLevel;
use crate::projection::{ContextTransform, prepare_context};
use crate::provider::{AssistantBuilder, ModelContext, ModelRequest, Provider};
use crate::tool::ToolSet;

/// Everything a run needs besides its context.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The model provider.
    pub provider: Arc<dyn Provider>,
    /// Model id within the provider.
    pub model: String,
    /// System prompt.
    pub system_prompt: String,
    /// Reasoning effort.
    pub thinking: ThinkingLevel,
    /// Callable tools.
    pub tools: ToolSet,
    /// Optional rich → rich transform before each projection. With one, every model call
    /// copies and projects the whole context (O(n)); without, it takes the session's
    /// incrementally projected context (O(1)).
    pub transform: Option<Arc<dyn ContextTransform>>,
    /// Parallel or sequential batches.
    pub tool_execution: ToolExecution,
    /// Working directory for tools.
    pub cwd: PathBuf,
    /// Where tools keep artefacts (full bash output).
    pub artifacts_dir: PathBuf,
}

/// The loop's view of the session: read the transcript, append settled messages, publish
/// transient events, collect steering.
pub trait RunContext: Send + Sync {
    /// The model context now, projected and shared (O(1): a reference count, not a copy).
    /// Read for every model call without a [`ContextTransform`]. Must equal
    /// [`crate::projection::project`] of [`RunContext::messages`]; keep a
    /// [`crate::projection::ContextProjector`] next to the messages to get it cheaply.
    fn model_context(&self) -> ModelContext;
    /// The runtime transcript now, as a shared snapshot (O(1): the list is not copied). Read
    /// only when a [`ContextTransform`] is configured, which then copies it.
    fn messages(&self) -> Arc<Vec<Arc<AgentMessage>>>;
    /// Appends a settled message (persisting it first where the context is durable).
    ///
    /// # Errors
    /// The message could not be persisted; the run stops.
    fn append(&self, message: AgentMessage) -> Result<(), StoreError>;
    /// Publishes a transient event.
    fn emit(&self, event: LoopEvent);
    /// Takes queued steering messages. With `last_chance`, an empty queue also means the run
    /// is about to end: the context must refuse later steering rather than queue it.
    fn take_steering(&self, last_chance: bool) -> Vec<AgentMessage>;
    /// Wall-clock milliseconds for timestamps.
    fn now_ms(&self) -> u64;
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Stop reason of the last response (`aborted` when the run was aborted during tools).
    pub stop_reason: StopReason,
    /// Model calls made.
    pub turns: u32,
    /// True when the run ended because every result of the last batch asked to terminate.
    pub terminated_by_tools: bool,
    /// The last response's error message, for `error` / `aborted`.
    pub error_message: Option<String>,
}

/// A run could not continue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A settled message could not be persisted.
    #[error("persisting a settled message failed")]
    Persist(#[from] StoreError),
}

/// Runs the loop: appends `prompts`, then streams and executes until the model stops, the
/// run is aborted, or a tool batch asks to terminate.
///
/// # Errors
/// [`RunError::Persist`] when the context fails to store a settled message.
pub async fn run(
    config: &AgentConfig,
    ctx: &dyn RunContext,
    prompts: Vec<AgentMessage>,
    cancel: &CancellationToken,
    tracker: &TaskTracker,
) -> Result<RunOutcome, RunError> {
    for p in prompts {
        ctx.append(p)?;
    }
    let mut turns = 0u32;
    loop {
        for s in ctx.take_steering(false) {
            ctx.append(s)?;
        }
        turns += 1;
        ctx.emit(LoopEvent::TurnStart { turn: turns });
        let assistant = stream_assistant(config, ctx, cancel).await;
        let stop = assistant.stop_reason;
        let error_message = assistant.error_message.clone();
        let calls: Vec<_> = assistant.tool_calls().cloned().collect();
        ctx.append(AgentMessage::Assistant(assistant))?;
        let outcome = |stop_reason, terminated_by_tools| RunOutcome {
            stop_reason,
            turns,
            terminated_by_tools,
            error_message: error_message.clone(),
        };
        if matches!(stop, StopReason::Error | StopReason::Aborted) {
            ctx.emit(LoopEvent::TurnEnd { stop_reason: stop });
            return Ok(outcome(stop, false));
        }
        let mut terminate = false;
        if !calls.is_empty() {
            let executed: Vec<Executed> = if stop == StopReason::Length {
                calls
                    .iter()
                    .map(|call| {
                        ctx.emit(LoopEvent::ToolStart { call: call.clone() });
                        let result =
                            ToolResultMessage::error(call, LENGTH_FAILURE_TEXT, ctx.now_ms());
                        ctx.emit(LoopEvent::ToolEnd {
                            result: result.clone(),
                        });
                        Executed {
                            result,
                            terminate: false,
                        }
                    })
                    .collect()
            } else {
                execute_batch(config, ctx, &calls, cancel, tracker).await
            };
            terminate = !executed.is_empty() && executed.iter().all(|e| e.terminate);
            for e in executed {
                ctx.append(AgentMessage::ToolResult(e.result))?;
            }
        }
        ctx.emit(LoopEvent::TurnEnd { stop_reason: stop });
        if cancel.is_cancelled() {
            return Ok(RunOutcome {
                error_message: Some("Request was aborted".into()),
                ..outcome(StopReason::Aborted, false)
            });
        }
        if terminate {
            return Ok(outcome(stop, true));
        }
        if calls.is_empty() {
            let steering = ctx.take_steering(true);
            if steering.is_empty() {
                return Ok(outcome(stop, false));
            }
            for s in steering {
                ctx.append(s)?;
            }
        }
    }
}

/// One model call: take the projected context (or transform + project), stream, settle. Never fails: failures become an
/// `error` / `aborted` message.
async fn stream_assistant(
    config: &AgentConfig,
    ctx: &dyn RunContext,
    cancel: &CancellationToken,
) -> AssistantMessage {
    let messages = match config.transform.as_deref() {
        None => ctx.model_context(),
        transform => prepare_context(transform, &ctx.messages(), cancel).await,
    };
    let request = ModelRequest {
        model: config.model.clone(),
        system_prompt: config.system_prompt.clone(),
        messages,
        tools: config.tools.specs(),
        thinking: config.thinking,
    };
    let provider = &config.provider;
    let mut builder =
        AssistantBuilder::new(provider.api(), provider.id(), &config.model, ctx.now_ms());
    ctx.emit(LoopEvent::AssistantStart {
        partial: builder.partial().clone(),
    });
    let mut aborted = cancel.is_cancelled();
    if !aborted {
        let mut stream = provider.stream(request, cancel.clone());
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => { aborted = true; break; }
                ev = stream.next() => {
                    let Some(ev) = ev else { break };
                    for update in builder.apply(ev) {
                        ctx.emit(LoopEvent::AssistantUpdate(update));
                    }
                    if builder.is_finished() {
                        break;
                    }
                }
            }
        }
    }
    builder.finish(aborted)
}
