//! A session's turn: entering it, running the loop and settling it, steering it, and the
//! loop's view of the session ([`RunContext`]), which turns loop events into transcript
//! changes. Starting a prompt, and what runs after its turn, is [`super::driver`].

use std::sync::Arc;

use tokio::sync::oneshot;

use tokio_util::sync::CancellationToken;

use super::error::SessionError;
use super::events::Change;
use super::runtime::{Inner, MAX_QUEUED_STEER, SessionRuntime, State};
use super::view::Phase;
use crate::agent::{self, AgentConfig, LoopEvent, RunContext, RunOutcome};
use crate::journal::StoreError;
use crate::message::{AgentMessage, AssistantContent, UserMessage};
use crate::provider::{ModelContext, StreamUpdate};

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
    pub(super) rx: oneshot::Receiver<Result<PromptOutcome, SessionError>>,
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
    /// Queues steering text for the next turn boundary of the running turn.
    ///
    /// # Errors
    /// [`SessionError::NotRunning`] when no turn will read it.
    pub fn steer(&self, text: impl Into<String>) -> Result<(), SessionError> {
        self.steer_turn(text, None)
    }

    /// [`SessionRuntime::steer`] for the turn named `turn_id` (the state's `turnId` when the
    /// text was written): refused once that turn has ended, so steering meant for one turn is
    /// never read by another.
    ///
    /// # Errors
    /// [`SessionError::TurnEnded`] when `turn_id` is not the running turn (or it is about to
    /// end); otherwise as [`SessionRuntime::steer`].
    pub fn steer_turn(
        &self,
        text: impl Into<String>,
        turn_id: Option<&str>,
    ) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if let Some(id) = turn_id
            && (st.doc.activity.turn_id.as_deref() != Some(id) || !st.accepting_steer)
        {
            return Err(SessionError::TurnEnded(id.to_owned()));
        }
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
}

/// A turn ready to run: what the loop needs.
pub(super) struct Turn {
    config: AgentConfig,
    cancel: CancellationToken,
    prompt: AgentMessage,
}

impl Inner {
    /// Enters a turn with prompt `text` (the caller checked the session may start one): the
    /// phase becomes `turn` (if it is not already) and the turn gets its id.
    ///
    /// # Errors
    /// [`SessionError::Closed`] after shutdown; [`SessionError::UnknownModel`].
    pub(super) fn begin_turn(&self, st: &mut State, text: String) -> Result<Turn, SessionError> {
        if self.shutdown.is_cancelled() {
            return Err(SessionError::Closed);
        }
        let provider = self
            .models
            .resolve(&st.doc.model)
            .ok_or_else(|| SessionError::UnknownModel(st.doc.model.to_string()))?;
        let config = AgentConfig {
            provider,
            model: st.doc.model.id.clone(),
            system_prompt: self.config.system_prompt.clone(),
            thinking: st.doc.thinking,
            tools: self.tools.clone(),
            transform: self.config.transform.clone(),
            tool_execution: self.config.tool_execution,
            cwd: self.cwd.clone(),
            artifacts_dir: self.artifacts_dir.clone(),
        };
        self.enter_busy(st);
        // Entry ids are unique within the session file, across reopenings: so is this.
        st.doc.activity.turn_id = Some(format!("turn-{}", st.file.allocate_id()));
        st.emit(|d| Change::TurnId(d.activity.turn_id.as_deref()));
        st.accepting_steer = true;
        let prompt = AgentMessage::User(UserMessage::text(text, self.clock.now_ms()));
        Ok(Turn {
            config,
            cancel: st.abort.child_token(),
            prompt,
        })
    }

    /// Runs one turn's loop and settles it (the phase stays `turn`).
    pub(super) async fn run_turn(
        self: &Arc<Self>,
        turn: Turn,
    ) -> Result<PromptOutcome, SessionError> {
        let ctx = RunCtx {
            inner: Arc::clone(self),
        };
        let result = agent::run(
            &turn.config,
            &ctx,
            vec![turn.prompt],
            &turn.cancel,
            &self.tracker,
        )
        .await;
        if let Err(error) = &result {
            tracing::error!(%error, "turn stopped: a settled message could not be persisted");
        }
        let dropped_steering = self.settle_turn();
        // The turn is acknowledged only once what it appended is on stable storage; the
        // wait runs outside the session lock, on the host's sync thread's schedule.
        let durable = self.lock().file.durable_handle();
        let result = match (result, durable.wait().await) {
            (Ok(_), Err(error)) => {
                tracing::error!(%error, "turn settled but its entries could not be synced");
                Err(agent::RunError::from(error))
            }
            (result, _) => result,
        };
        result
            .map(|run| PromptOutcome {
                run,
                dropped_steering,
            })
            .map_err(SessionError::from)
    }

    /// Ends a turn: flushes deferred user commands, drops undelivered steering, clears the
    /// turn id. The phase stays `turn` until [`Inner::next_or_idle`].
    pub(super) fn settle_turn(&self) -> Vec<String> {
        let mut st = self.lock();
        st.doc.transcript.end_run();
        self.flush_deferred(&mut st);
        let dropped = std::mem::take(&mut st.doc.queued_steer);
        if !dropped.is_empty() {
            st.emit(|d| Change::QueuedSteer(&d.queued_steer));
        }
        st.accepting_steer = false;
        st.doc.activity.turn_id = None;
        st.emit(|_| Change::TurnId(None));
        dropped
    }

    /// Appends the user-command records deferred while the session was busy.
    pub(super) fn flush_deferred(&self, st: &mut State) {
        for message in std::mem::take(&mut st.pending_bash) {
            if let Err(error) = self.append_new(st, AgentMessage::BashExecution(message)) {
                tracing::error!(%error, "could not persist a deferred bash record");
            }
        }
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
        self.inner.lock().doc.transcript.context_messages()
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
