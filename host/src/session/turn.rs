//! A session's turn: starting a prompt, steering it, aborting it, and the loop's view of the
//! session ([`RunContext`]), which turns loop events into transcript changes.

use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::Instrument;

use tokio_util::sync::CancellationToken;

use super::error::SessionError;
use super::events::Change;
use super::runtime::{Inner, MAX_QUEUED_STEER, SessionRuntime, State};
use super::view::Phase;
use crate::agent::{self, AgentConfig, LoopEvent, RunContext, RunOutcome};
use crate::journal::StoreError;
use crate::message::{AgentMessage, AssistantContent, StopReason, UserMessage};
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
    /// [`SessionError::Busy`] while a turn (or a compaction) runs;
    /// [`SessionError::UnknownModel`] if the session's model is no longer offered;
    /// [`SessionError::Closed`] after shutdown.
    pub fn start_prompt(&self, text: impl Into<String>) -> Result<RunHandle, SessionError> {
        let inner = &self.inner;
        let turn = {
            let mut st = inner.lock();
            if st.doc.phase != Phase::Idle {
                if inner.shutdown.is_cancelled() {
                    return Err(SessionError::Closed);
                }
                return Err(SessionError::Busy);
            }
            inner.begin_turn(&mut st, text.into())?
        };
        let (tx, rx) = oneshot::channel();
        inner.spawn_driver(turn, Some(tx));
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

/// Where a turn's outcome goes (the first turn of a driver has a waiter; follow-ups do not).
type Reply = oneshot::Sender<Result<PromptOutcome, SessionError>>;

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

    /// Publishes `phase: turn` unless the session is in it already (a follow-up or a
    /// compaction continuing a busy stretch publishes no idle in between).
    pub(super) fn enter_busy(&self, st: &mut State) {
        if st.doc.phase != Phase::Turn {
            st.doc.phase = Phase::Turn;
            st.emit(|_| Change::Phase(Phase::Turn));
            self.phase.send_replace(Phase::Turn);
        }
    }

    /// Runs `first` and then, while each turn settles normally, the queued follow-ups, one
    /// turn after another, with an automatic compaction between two turns when the context
    /// has grown past the threshold. `reply` gets the first turn's outcome once the session
    /// has gone idle or started the next turn.
    pub(super) fn spawn_driver(self: &Arc<Self>, first: Turn, reply: Option<Reply>) {
        let inner = Arc::clone(self);
        let span = tracing::info_span!("turn", session_id = %self.id);
        let task = async move {
            let mut turn = first;
            let mut reply = reply;
            loop {
                let outcome = inner.run_turn(turn).await;
                let normal = matches!(
                    &outcome,
                    Ok(o) if !matches!(o.run.stop_reason, StopReason::Error | StopReason::Aborted)
                );
                if normal && inner.wants_compaction() {
                    inner.auto_compact().await;
                }
                let next = inner.next_or_idle(normal);
                if let Some(tx) = reply.take() {
                    let _ = tx.send(outcome);
                }
                match next {
                    Some(t) => turn = t,
                    None => break,
                }
            }
        };
        drop(spawn_tracked(&self.tracker, task.instrument(span)));
    }

    /// Runs one turn's loop and settles it (the phase stays `turn`).
    async fn run_turn(self: &Arc<Self>, turn: Turn) -> Result<PromptOutcome, SessionError> {
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
    fn settle_turn(&self) -> Vec<String> {
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

    /// After a busy stretch step (a turn, a compaction): starts the oldest queued follow-up
    /// when `send` (the step ended normally), else goes idle.
    pub(super) fn next_or_idle(&self, send: bool) -> Option<Turn> {
        let mut st = self.lock();
        let st = &mut *st;
        self.flush_deferred(st);
        if send && !st.doc.activity.follow_ups.is_empty() && !self.shutdown.is_cancelled() {
            let next = st.doc.activity.follow_ups.remove(0);
            st.emit(|d| Change::FollowUps(&d.activity.follow_ups));
            match self.begin_turn(st, next.text) {
                Ok(turn) => return Some(turn),
                Err(error) => {
                    tracing::warn!(%error, follow_up = %next.id, "could not send a queued follow-up");
                }
            }
        }
        if st.doc.phase != Phase::Idle {
            st.doc.phase = Phase::Idle;
            st.emit(|_| Change::Phase(Phase::Idle));
            self.phase.send_replace(Phase::Idle);
        }
        None
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
