//! A session's turn: starting a prompt, steering it, aborting it, and the loop's view of the
//! session ([`RunContext`]), which turns loop events into transcript changes.

use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::Instrument;

use super::error::{SessionError, StoreError};
use super::events::Change;
use super::runtime::{Inner, MAX_QUEUED_STEER, SessionRuntime};
use super::view::Phase;
use crate::agent::{self, AgentConfig, LoopEvent, RunContext, RunOutcome};
use crate::message::{AgentMessage, AssistantContent, UserMessage};
use crate::provider::{ModelContext, StreamUpdate};
use crate::spawn::spawn_tracked;

/// How a prompt's run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptOutcome {
    /// The loop's outcome.
    pub run: RunOutcome,
    /// Steering texts still queued when the run ended (after an abort, an error or a
    /// terminating tool batch); they were not delivered.
    pub dropped_steering: Vec<String>,
}

/// A started prompt; await [`RunHandle::wait`] for its outcome. Dropping the handle does not
/// stop the turn (use [`SessionRuntime::abort`]).
#[derive(Debug)]
pub struct RunHandle {
    rx: oneshot::Receiver<Result<PromptOutcome, SessionError>>,
}

impl RunHandle {
    /// Waits until the turn settles.
    ///
    /// # Errors
    /// [`SessionError::Run`] if persisting failed mid-run; [`SessionError::Closed`] if the
    /// session shut down before reporting.
    pub async fn wait(self) -> Result<PromptOutcome, SessionError> {
        self.rx.await.unwrap_or(Err(SessionError::Closed))
    }
}

impl SessionRuntime {
    /// Starts a turn with `text`; returns at once.
    ///
    /// # Errors
    /// [`SessionError::Busy`] while a turn runs; [`SessionError::UnknownModel`] if the
    /// session's model is no longer offered; [`SessionError::Closed`] after shutdown.
    pub fn start_prompt(&self, text: impl Into<String>) -> Result<RunHandle, SessionError> {
        let inner = &self.inner;
        let now = inner.clock.now_ms();
        let (config, cancel) = {
            let mut st = inner.lock();
            if inner.shutdown.is_cancelled() {
                return Err(SessionError::Closed);
            }
            if st.doc.phase != Phase::Idle {
                return Err(SessionError::Busy);
            }
            let provider = inner
                .models
                .resolve(&st.doc.model)
                .ok_or_else(|| SessionError::UnknownModel(st.doc.model.to_string()))?;
            let config = AgentConfig {
                provider,
                model: st.doc.model.id.clone(),
                system_prompt: inner.config.system_prompt.clone(),
                thinking: st.doc.thinking,
                tools: inner.tools.clone(),
                transform: inner.config.transform.clone(),
                tool_execution: inner.config.tool_execution,
                cwd: inner.cwd.clone(),
                artifacts_dir: inner.artifacts_dir.clone(),
            };
            st.doc.phase = Phase::Turn;
            st.accepting_steer = true;
            st.emit(|_| Change::Phase(Phase::Turn));
            inner.phase.send_replace(Phase::Turn);
            (config, st.abort.child_token())
        };
        let (tx, rx) = oneshot::channel();
        let task_inner = Arc::clone(inner);
        let prompt = AgentMessage::User(UserMessage::text(text, now));
        let span = tracing::info_span!("turn", session_id = %inner.id);
        let task = async move {
            let ctx = RunCtx {
                inner: Arc::clone(&task_inner),
            };
            let result =
                agent::run(&config, &ctx, vec![prompt], &cancel, &task_inner.tracker).await;
            if let Err(error) = &result {
                tracing::error!(%error, "turn stopped: a settled message could not be persisted");
            }
            let dropped_steering = task_inner.finish_run();
            // The turn is acknowledged only once what it appended is on stable storage; the
            // wait runs outside the session lock, on the host's sync thread's schedule.
            let durable = task_inner.lock().file.durable_handle();
            let result = match (result, durable.wait().await) {
                (Ok(_), Err(error)) => {
                    tracing::error!(%error, "turn settled but its entries could not be synced");
                    Err(agent::RunError::from(error))
                }
                (result, _) => result,
            };
            let _ = tx.send(
                result
                    .map(|run| PromptOutcome {
                        run,
                        dropped_steering,
                    })
                    .map_err(SessionError::from),
            );
        };
        drop(spawn_tracked(&inner.tracker, task.instrument(span)));
        Ok(RunHandle { rx })
    }

    /// Runs a turn with `text` and waits until it settles.
    ///
    /// # Errors
    /// As [`SessionRuntime::start_prompt`] and [`RunHandle::wait`].
    pub async fn prompt(&self, text: impl Into<String>) -> Result<PromptOutcome, SessionError> {
        self.start_prompt(text)?.wait().await
    }

    /// Queues steering text for the next turn boundary of the running turn.
    ///
    /// # Errors
    /// [`SessionError::NotRunning`] when no turn will read it.
    pub fn steer(&self, text: impl Into<String>) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if st.doc.phase != Phase::Turn || !st.accepting_steer {
            return Err(SessionError::NotRunning);
        }
        if st.doc.queued_steer.len() >= MAX_QUEUED_STEER {
            return Err(SessionError::SteerQueueFull);
        }
        st.doc.queued_steer.push(text.into());
        st.emit(|d| Change::QueuedSteer(&d.queued_steer));
        Ok(())
    }

    /// Aborts the running turn and user commands. Returns whether a turn was running.
    pub fn abort(&self) -> bool {
        let mut st = self.inner.lock();
        st.abort.cancel();
        st.abort = self.inner.shutdown.child_token();
        st.doc.phase == Phase::Turn
    }
}

impl Inner {
    /// Ends a run: flushes deferred user commands, drops undelivered steering, goes idle.
    fn finish_run(&self) -> Vec<String> {
        let mut st = self.lock();
        st.doc.transcript.end_run();
        for message in std::mem::take(&mut st.pending_bash) {
            if let Err(error) = self.append_new(&mut st, AgentMessage::BashExecution(message)) {
                tracing::error!(%error, "could not persist a deferred bash record");
            }
        }
        let dropped = std::mem::take(&mut st.doc.queued_steer);
        if !dropped.is_empty() {
            st.emit(|d| Change::QueuedSteer(&d.queued_steer));
        }
        st.accepting_steer = false;
        st.doc.phase = Phase::Idle;
        st.emit(|_| Change::Phase(Phase::Idle));
        self.phase.send_replace(Phase::Idle);
        dropped
    }
}

/// The session as the loop sees it.
struct RunCtx {
    inner: Arc<Inner>,
}

impl RunContext for RunCtx {
    fn model_context(&self) -> ModelContext {
        self.inner.lock().doc.transcript.model_context()
    }

    fn messages(&self) -> Arc<Vec<Arc<AgentMessage>>> {
        self.inner.lock().doc.transcript.context()
    }

    fn append(&self, message: AgentMessage) -> Result<(), StoreError> {
        let inner = &self.inner;
        let mut st = inner.lock();
        let st = &mut *st;
        let message = Arc::new(message);
        match &*message {
            AgentMessage::Assistant(_) => {
                if let Some((_, id)) = st.doc.transcript.streaming() {
                    let id = id.to_owned();
                    inner.persist_message(st, id, &message)?;
                    if let Some((index, old)) = st.doc.transcript.settle_stream(message) {
                        st.emit(|_| Change::ItemReplaced { index, old: &old });
                    }
                    return Ok(());
                }
            }
            AgentMessage::ToolResult(_) => {
                // Persist first, under the tool item's id, then record it on the item.
                if let Some(id) = st.doc.transcript.running_tool_id(&message) {
                    inner.persist_message(st, id, &message)?;
                    st.doc.transcript.settle_tool(&message);
                    return Ok(());
                }
            }
            _ => {}
        }
        let message = Arc::try_unwrap(message).unwrap_or_else(|m| AgentMessage::clone(&m));
        inner.append_new(st, message)
    }

    fn emit(&self, event: LoopEvent) {
        let inner = &self.inner;
        let mut st = inner.lock();
        let st = &mut *st;
        match event {
            LoopEvent::AssistantStart { partial } => {
                let id = st.file.allocate_id();
                let index = st.doc.transcript.start_stream(id, partial);
                st.emit(|_| Change::ItemAdded { index });
            }
            LoopEvent::AssistantUpdate(update) => {
                let Some((index, partial)) = st.doc.transcript.stream_mut() else {
                    return;
                };
                match update {
                    StreamUpdate::BlockStart {
                        index: content_index,
                        block,
                    } => {
                        partial.content.push(block);
                        st.emit(|_| Change::BlockAdded {
                            index,
                            content_index,
                        });
                    }
                    StreamUpdate::TextAppend {
                        index: content_index,
                        delta,
                    } => {
                        if let Some(AssistantContent::Text(t)) =
                            partial.content.get_mut(content_index)
                        {
                            t.text.push_str(&delta);
                        }
                        st.emit(|_| Change::TextAppended {
                            index,
                            content_index,
                            delta: &delta,
                        });
                    }
                    StreamUpdate::ThinkingAppend {
                        index: content_index,
                        delta,
                    } => {
                        if let Some(AssistantContent::Thinking(t)) =
                            partial.content.get_mut(content_index)
                        {
                            t.thinking.push_str(&delta);
                        }
                        st.emit(|_| Change::ThinkingAppended {
                            index,
                            content_index,
                            delta: &delta,
                        });
                    }
                }
            }
            LoopEvent::ToolStart { call } => {
                let id = st.file.allocate_id();
                let index = st
                    .doc
                    .transcript
                    .start_tool(id, &call, inner.clock.now_ms());
                st.emit(|_| Change::ItemAdded { index });
            }
            LoopEvent::ToolEnd { result } => {
                let result = Arc::new(AgentMessage::ToolResult(result));
                if let Some((index, old)) = st.doc.transcript.finish_tool(result) {
                    st.emit(|_| Change::ItemReplaced { index, old: &old });
                }
            }
            LoopEvent::TurnStart { .. } | LoopEvent::TurnEnd { .. } => {}
        }
    }

    fn take_steering(&self, last_chance: bool) -> Vec<AgentMessage> {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.doc.queued_steer.is_empty() {
            if last_chance {
                st.accepting_steer = false;
            }
            return Vec::new();
        }
        let texts = std::mem::take(&mut st.doc.queued_steer);
        st.emit(|d| Change::QueuedSteer(&d.queued_steer));
        let now = inner.clock.now_ms();
        texts
            .into_iter()
            .map(|t| AgentMessage::User(UserMessage::text(t, now)))
            .collect()
    }

    fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }
}
