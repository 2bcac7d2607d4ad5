//! Executing one batch of tool calls.
//!
//! Each call goes through: lookup (unknown → error result), argument coercion and validation
//! against the tool's schema (invalid → error result; the tool gets the coerced arguments),
//! execution (an `Err` or a panic → `isError` result). Results are returned in the assistant's
//! call order whatever order they finish in.
//!
//! In a parallel batch, calls that touch the same file ([`Tool::touched_paths`]) run in call
//! order: before any task runs, each such call is chained to the previous call of the batch on
//! each of its paths, and waits for that call to finish (or fail, or panic); calls on
//! different files, and calls that name no file, still run at once. A waiting call that sees
//! the run aborted is skipped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use baton_protocol::Value;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::config::{AgentConfig, ToolExecution};
use super::context::RunContext;
use super::event::LoopEvent;
use crate::message::{ToolCall, ToolResultMessage};
use crate::spawn::spawn_tracked;
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput};

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

/// The text of a call the abort kept from running.
const SKIPPED: &str = "Tool execution skipped: the run was aborted";

/// The last call of the batch so far on each path, and each chained call's completion token
/// (cancelled when that call's task ends in any way). Lives for one batch; bounded by the
/// batch's calls and paths.
#[derive(Default)]
struct Chains {
    last: HashMap<PathBuf, usize>,
    done: Vec<CancellationToken>,
}

/// Where one call stands in the chains.
#[derive(Default)]
struct Turn {
    /// Completion tokens of the calls it must wait for.
    after: Vec<CancellationToken>,
    /// Releases its successors when dropped: after its result is sent, or when its task
    /// panics or is dropped.
    done: Option<DropGuard>,
}

impl Chains {
    /// Chains the next call, touching `paths`, after the previous calls on them.
    fn enter(&mut self, paths: Option<Vec<PathBuf>>) -> Turn {
        let Some(paths) = paths.filter(|p| !p.is_empty()) else {
            return Turn::default();
        };
        let me = self.done.len();
        let mut after: Vec<usize> = Vec::new();
        for path in paths {
            if let Some(prev) = self.last.insert(path, me)
                && prev != me
                && !after.contains(&prev)
            {
                after.push(prev);
            }
        }
        let done = CancellationToken::new();
        self.done.push(done.clone());
        Turn {
            after: after.into_iter().map(|i| self.done[i].clone()).collect(),
            done: Some(done.drop_guard()),
        }
    }
}

impl Turn {
    /// Waits for the calls before this one on its paths; `false` when the run was aborted
    /// first (the call is then skipped). A call with nothing to wait for always runs.
    async fn wait(&self, cancel: &CancellationToken) -> bool {
        if self.after.is_empty() {
            return true;
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => false,
            () = async {
                for prev in &self.after {
                    prev.cancelled().await;
                }
            } => true,
        }
    }
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
    let mut chains = Chains::default();
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
                let turn = match config.tool_execution {
                    ToolExecution::Parallel => {
                        chains.enter(tool.touched_paths(&args, &config.cwd).await)
                    }
                    ToolExecution::Sequential => Turn::default(),
                };
                let tx = tx.clone();
                let span = tracing::debug_span!("tool", tool_call_id = %call.id, name = %call.name);
                let task = async move {
                    let out = if turn.wait(&tool_ctx.cancel).await {
                        tool.execute(&args, &tool_ctx).await
                    } else {
                        Err(ToolError::new(SKIPPED))
                    };
                    // The receiver outlives every sender it waits for.
                    let _ = tx.send((i, out)).await;
                    // Successors on the same files start only now, so their results follow.
                    drop(turn.done);
                }
                .instrument(span);
                match config.tool_execution {
                    ToolExecution::Parallel => {
                        drop(spawn_tracked(tracker, task));
                        expected += 1;
                    }
                    ToolExecution::Sequential => {
                        if cancel.is_cancelled() {
                            let done = to_result(call, Err(ToolError::new(SKIPPED)), ctx.now_ms());
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
