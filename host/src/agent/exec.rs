//! Executing one batch of tool calls.
//!
//! Each call goes through: lookup (unknown → error result), argument coercion and validation
//! against the tool's schema (invalid → error result; the tool gets the coerced arguments),
//! execution (an `Err` or a panic → `isError` result). Results are returned in the assistant's
//! call order whatever order they finish in.

use std::sync::Arc;

use baton_protocol::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::event::LoopEvent;
use super::run::{AgentConfig, RunContext};
use crate::message::{ToolCall, ToolResultMessage};
use crate::spawn::spawn_tracked;
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput};

/// How a batch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolExecution {
    /// All calls at once.
    #[default]
    Parallel,
    /// One after another; an abort skips the calls not yet started.
    Sequential,
}

/// A finished call.
#[derive(Debug)]
pub(crate) struct Executed {
    pub result: ToolResultMessage,
    pub terminate: bool,
}

enum Prepared {
    /// The tool and the arguments it gets: the call's, coerced to its schema (the call itself,
    /// which the transcript records, keeps what the model sent, as upstream's does).
    Ready(Arc<dyn Tool>, Value),
    Failed(String),
}

fn prepare(config: &AgentConfig, call: &ToolCall) -> Prepared {
    let Some(tool) = config.tools.get(&call.name) else {
        return Prepared::Failed(format!("Tool {} not found", call.name));
    };
    match tool.parameters().parse(&call.arguments) {
        Ok(args) => Prepared::Ready(Arc::clone(tool), args),
        Err(v) => Prepared::Failed(format!("Invalid arguments for tool {}: {v}", call.name)),
    }
}

fn to_result(call: &ToolCall, outcome: Result<ToolOutput, ToolError>, now: u64) -> Executed {
    match outcome {
        Ok(out) => Executed {
            result: ToolResultMessage {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: out.content,
                details: out.details,
                is_error: out.is_error,
                timestamp: now,
            },
            terminate: out.terminate,
        },
        Err(e) => Executed {
            result: ToolResultMessage::error(call, e.message, now),
            terminate: false,
        },
    }
}

/// Runs `calls`; returns one result per call, in call order.
pub(crate) async fn execute_batch(
    config: &AgentConfig,
    ctx: &dyn RunContext,
    calls: &[ToolCall],
    cancel: &CancellationToken,
    tracker: &TaskTracker,
) -> Vec<Executed> {
    let mut slots: Vec<Option<Executed>> = calls.iter().map(|_| None).collect();
    let (tx, mut rx) = mpsc::channel::<(usize, Result<ToolOutput, ToolError>)>(calls.len().max(1));
    let mut expected = 0usize;
    for (i, call) in calls.iter().enumerate() {
        ctx.emit(LoopEvent::ToolStart { call: call.clone() });
        match prepare(config, call) {
            Prepared::Failed(text) => {
                let done = to_result(call, Err(ToolError::new(text)), ctx.now_ms());
                ctx.emit(LoopEvent::ToolEnd {
                    result: done.result.clone(),
                });
                slots[i] = Some(done);
            }
            Prepared::Ready(tool, args) => {
                let tool_ctx = ToolContext {
                    cwd: config.cwd.clone(),
                    artifacts_dir: config.artifacts_dir.clone(),
                    cancel: cancel.clone(),
                    tool_call_id: call.id.clone(),
                };
                let tx = tx.clone();
                let span = tracing::debug_span!("tool", tool_call_id = %call.id, name = %call.name);
                let task = async move {
                    let out = tool.execute(&args, &tool_ctx).await;
                    // The receiver outlives every sender it waits for.
                    let _ = tx.send((i, out)).await;
                }
                .instrument(span);
                match config.tool_execution {
                    ToolExecution::Parallel => {
                        drop(spawn_tracked(tracker, task));
                        expected += 1;
                    }
                    ToolExecution::Sequential => {
                        if cancel.is_cancelled() {
                            let done = to_result(
                                call,
                                Err(ToolError::new(
                                    "Tool execution skipped: the run was aborted",
                                )),
                                ctx.now_ms(),
                            );
                            ctx.emit(LoopEvent::ToolEnd {
                                result: done.result.clone(),
                            });
                            slots[i] = Some(done);
                            continue;
                        }
                        // Spawned (not awaited inline) so a panicking tool becomes a result.
                        let handle = spawn_tracked(tracker, task);
                        let _ = handle.await;
                        receive(&mut rx, calls, &mut slots, ctx);
                        fill_missing(i, calls, &mut slots, ctx);
                    }
                }
            }
        }
    }
    drop(tx);
    while expected > 0 {
        match rx.recv().await {
            Some((i, out)) => {
                expected -= 1;
                store(i, out, calls, &mut slots, ctx);
            }
            // Every sender is gone: the remaining tasks panicked.
            None => break,
        }
    }
    for i in 0..calls.len() {
        fill_missing(i, calls, &mut slots, ctx);
    }
    slots.into_iter().flatten().collect()
}

fn receive(
    rx: &mut mpsc::Receiver<(usize, Result<ToolOutput, ToolError>)>,
    calls: &[ToolCall],
    slots: &mut [Option<Executed>],
    ctx: &dyn RunContext,
) {
    while let Ok((i, out)) = rx.try_recv() {
        store(i, out, calls, slots, ctx);
    }
}

fn store(
    i: usize,
    out: Result<ToolOutput, ToolError>,
    calls: &[ToolCall],
    slots: &mut [Option<Executed>],
    ctx: &dyn RunContext,
) {
    let done = to_result(&calls[i], out, ctx.now_ms());
    ctx.emit(LoopEvent::ToolEnd {
        result: done.result.clone(),
    });
    slots[i] = Some(done);
}

fn fill_missing(
    i: usize,
    calls: &[ToolCall],
    slots: &mut [Option<Executed>],
    ctx: &dyn RunContext,
) {
    if slots[i].is_none() {
        tracing::error!(tool_call_id = %calls[i].id, "tool task panicked");
        let text = format!("Tool {} failed unexpectedly (panicked)", calls[i].name);
        let done = to_result(&calls[i], Err(ToolError::new(text)), ctx.now_ms());
        ctx.emit(LoopEvent::ToolEnd {
            result: done.result.clone(),
        });
        slots[i] = Some(done);
    }
}
