//! The loop itself.

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::AgentConfig;
use super::context::RunContext;
use super::event::LoopEvent;
use super::exec::{Executed, execute_batch};
use crate::journal::StoreError;
use crate::message::{AgentMessage, AssistantMessage, StopReason, ToolResultMessage};
use crate::projection::prepare_context;
use crate::provider::{AssistantBuilder, ModelRequest};

/// Text of the result given to every tool call of a `length`-truncated response.
pub const LENGTH_FAILURE_TEXT: &str = "Tool call was not executed: the response was truncated by the output token limit (stop reason: length), so its arguments may be incomplete.";

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
                    // A stream ends when cancelled too, and the abort may have landed
                    // after the branch above looked: the token decides, not the end.
                    let Some(ev) = ev else { aborted = cancel.is_cancelled(); break };
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
