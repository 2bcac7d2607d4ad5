//! A live session: its transcript, its turn, its subscribers.
//!
//! All mutable state sits behind one `std::sync::Mutex` that is never held across an
//! `.await`. Every change happens under that lock together with its persistence (for settled
//! messages) and the publication of its numbered [`SessionEvent`], so a subscriber that takes
//! a [`Snapshot`] and then applies the events with a greater `seq` always sees exactly the
//! session's state.
//!
//! Turn rules:
//! * [`Session::start_prompt`] while a turn runs fails with [`SessionError::Busy`] — prompts
//!   are never queued.
//! * [`Session::steer`] queues text that the loop injects at the next turn boundary; once the
//!   loop has decided to stop it fails with [`SessionError::NotRunning`] instead of queueing
//!   text nobody would read.
//! * [`Session::abort`] cancels the running turn (model stream and tools) and any running user
//!   commands.
//! * [`Session::bash`] runs a user command outside the model protocol. Its record is inserted
//!   at once when idle, otherwise after the turn settles, so a tool call and its result are
//!   never split.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_protocol::{Map, Value};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::entry::EntryKind;
use super::error::{SessionError, StoreError};
use super::file::SessionFile;
use super::tree::Rebuilt;
use super::view::{
    ItemBody, Phase, SessionEvent, SessionEventKind, SessionState, Snapshot, TranscriptItem,
};
use crate::agent::{self, AgentConfig, LoopEvent, RunContext, RunOutcome, ToolExecution};
use crate::clock::Clock;
use crate::message::{AgentMessage, AssistantContent, BashExecutionMessage, UserMessage};
use crate::models::ModelRegistry;
use crate::projection::ContextTransform;
use crate::provider::{ModelRef, StreamUpdate, ThinkingLevel};
use crate::spawn::spawn_tracked;
use crate::tool::{BashConfig, ToolSet, run_bash};

/// Default capacity of a session's event channel (a subscriber that falls further behind
/// gets `Lagged` and must take a fresh snapshot).
pub const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// Most steering texts queued at once; more are refused with
/// [`SessionError::SteerQueueFull`].
pub const MAX_QUEUED_STEER: usize = 32;
/// Most user commands running at once in a session; more are refused with
/// [`SessionError::TooManyCommands`] (this also bounds the records deferred during a turn).
pub const MAX_RUNNING_COMMANDS: usize = 8;

/// Settings shared by the sessions of a host.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// System prompt for every model call.
    pub system_prompt: String,
    /// Bash tool and user command settings.
    pub bash: BashConfig,
    /// Parallel or sequential tool batches.
    pub tool_execution: ToolExecution,
    /// Optional context transform.
    pub transform: Option<Arc<dyn ContextTransform>>,
    /// Event channel capacity per session.
    pub event_capacity: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            system_prompt: crate::DEFAULT_SYSTEM_PROMPT.into(),
            bash: BashConfig::default(),
            tool_execution: ToolExecution::Parallel,
            transform: None,
            event_capacity: DEFAULT_EVENT_CAPACITY,
        }
    }
}

/// Directory-listing metadata (`pi.session-directory`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionMeta {
    /// Session id.
    pub id: String,
    /// Display name.
    pub name: Option<String>,
    /// Working directory.
    pub cwd: String,
    /// ISO-8601 creation time.
    pub created_at: String,
    /// ISO-8601 time of the last entry.
    pub updated_at: String,
    /// `idle` or `turn` (sessions not open are idle).
    pub phase: Phase,
    /// Current model.
    pub model: ModelRef,
}

/// How a prompt's run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptOutcome {
    /// The loop's outcome.
    pub run: RunOutcome,
    /// Steering texts still queued when the run ended (after an abort, an error or a
    /// terminating tool batch); they were not delivered.
    pub dropped_steering: Vec<String>,
}

/// What a user command did.
#[derive(Debug, Clone, PartialEq)]
pub struct BashOutcome {
    /// The record.
    pub message: BashExecutionMessage,
    /// True when a turn was running, so the record is inserted when it settles.
    pub deferred: bool,
}

/// A started prompt; await [`RunHandle::wait`] for its outcome. Dropping the handle does not
/// stop the turn (use [`Session::abort`]).
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

/// A live session. Cheap to clone; all clones are the same session.
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    cwd: PathBuf,
    artifacts_dir: PathBuf,
    created_at: String,
    config: SessionConfig,
    tools: ToolSet,
    models: Arc<ModelRegistry>,
    clock: Arc<dyn Clock>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    events: broadcast::Sender<SessionEvent>,
    phase: watch::Sender<Phase>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    model: ModelRef,
    thinking: ThinkingLevel,
    name: Option<String>,
    items: Vec<TranscriptItem>,
    messages: Vec<AgentMessage>,
    leaf: Option<String>,
    updated_at: String,
    file: SessionFile,
    seq: u64,
    queued_steer: Vec<String>,
    accepting_steer: bool,
    pending_bash: Vec<BashExecutionMessage>,
    abort: CancellationToken,
    streaming: Option<usize>,
    running_tools: HashMap<String, usize>,
    bash_counter: u64,
    running_commands: usize,
}

/// Everything needed to bring a session up.
#[derive(Debug)]
pub(crate) struct SessionParts {
    pub id: String,
    pub cwd: PathBuf,
    pub artifacts_dir: PathBuf,
    pub created_at: String,
    pub file: SessionFile,
    pub rebuilt: Rebuilt,
    pub default_model: ModelRef,
    pub config: SessionConfig,
    pub models: Arc<ModelRegistry>,
    pub clock: Arc<dyn Clock>,
    pub shutdown: CancellationToken,
    pub updated_at: String,
}

impl Session {
    pub(crate) fn start(parts: SessionParts) -> Self {
        let mut items = Vec::new();
        let mut messages = Vec::new();
        let mut args: HashMap<String, Value> = HashMap::new();
        for (id, m) in parts.rebuilt.messages {
            if let AgentMessage::Assistant(a) = &m {
                for c in a.tool_calls() {
                    args.insert(c.id.clone(), c.arguments.clone());
                }
            }
            let body = ItemBody::settled(&m, |call_id| {
                args.get(call_id).cloned().unwrap_or(Value::Map(Map::new()))
            });
            items.push(TranscriptItem { id, body });
            messages.push(m);
        }
        let tools = ToolSet::coding(parts.config.bash.clone());
        let (events, _) = broadcast::channel(parts.config.event_capacity.max(1));
        let abort = parts.shutdown.child_token();
        let state = State {
            phase: Phase::Idle,
            model: parts.rebuilt.model.unwrap_or(parts.default_model),
            thinking: parts.rebuilt.thinking.unwrap_or_default(),
            name: parts.rebuilt.name,
            items,
            messages,
            leaf: parts.rebuilt.leaf,
            updated_at: parts.updated_at,
            file: parts.file,
            seq: 0,
            queued_steer: Vec::new(),
            accepting_steer: false,
            pending_bash: Vec::new(),
            abort,
            streaming: None,
            running_tools: HashMap::new(),
            bash_counter: 0,
            running_commands: 0,
        };
        Self {
            inner: Arc::new(Inner {
                id: parts.id,
                cwd: parts.cwd,
                artifacts_dir: parts.artifacts_dir,
                created_at: parts.created_at,
                config: parts.config,
                tools,
                models: parts.models,
                clock: parts.clock,
                tracker: TaskTracker::new(),
                shutdown: parts.shutdown,
                events,
                phase: watch::Sender::new(Phase::Idle),
                state: Mutex::new(state),
            }),
        }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The working directory.
    pub fn cwd(&self) -> &Path {
        &self.inner.cwd
    }

    /// The current state and its sequence number.
    pub fn snapshot(&self) -> Snapshot {
        self.inner.lock().snapshot()
    }

    /// A snapshot and a receiver of every later event, atomically (no event is missed or
    /// duplicated). On `RecvError::Lagged` take a new subscription.
    pub fn subscribe(&self) -> (Snapshot, broadcast::Receiver<SessionEvent>) {
        let st = self.inner.lock();
        (st.snapshot(), self.inner.events.subscribe())
    }

    /// The sequence number of the last published [`SessionEvent`] (what
    /// [`Session::snapshot`] would report, without copying the state).
    pub fn event_seq(&self) -> u64 {
        self.inner.lock().seq
    }

    /// The runtime transcript (settled messages only).
    pub fn messages(&self) -> Vec<AgentMessage> {
        self.inner.lock().messages.clone()
    }

    /// Directory metadata.
    pub fn meta(&self) -> SessionMeta {
        let st = self.inner.lock();
        SessionMeta {
            id: self.inner.id.clone(),
            name: st.name.clone(),
            cwd: self.inner.cwd.display().to_string(),
            created_at: self.inner.created_at.clone(),
            updated_at: st.updated_at.clone(),
            phase: st.phase,
            model: st.model.clone(),
        }
    }

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
            if st.phase != Phase::Idle {
                return Err(SessionError::Busy);
            }
            let provider = inner
                .models
                .resolve(&st.model)
                .ok_or_else(|| SessionError::UnknownModel(st.model.to_string()))?;
            let config = AgentConfig {
                provider,
                model: st.model.id.clone(),
                system_prompt: inner.config.system_prompt.clone(),
                thinking: st.thinking,
                tools: inner.tools.clone(),
                transform: inner.config.transform.clone(),
                tool_execution: inner.config.tool_execution,
                cwd: inner.cwd.clone(),
                artifacts_dir: inner.artifacts_dir.clone(),
            };
            st.phase = Phase::Turn;
            st.accepting_steer = true;
            inner.publish(&mut st, SessionEventKind::Phase(Phase::Turn));
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
    /// As [`Session::start_prompt`] and [`RunHandle::wait`].
    pub async fn prompt(&self, text: impl Into<String>) -> Result<PromptOutcome, SessionError> {
        self.start_prompt(text)?.wait().await
    }

    /// Queues steering text for the next turn boundary of the running turn.
    ///
    /// # Errors
    /// [`SessionError::NotRunning`] when no turn will read it.
    pub fn steer(&self, text: impl Into<String>) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if st.phase != Phase::Turn || !st.accepting_steer {
            return Err(SessionError::NotRunning);
        }
        if st.queued_steer.len() >= MAX_QUEUED_STEER {
            return Err(SessionError::SteerQueueFull);
        }
        st.queued_steer.push(text.into());
        let q = st.queued_steer.clone();
        self.inner
            .publish(&mut st, SessionEventKind::QueuedSteer(q));
        Ok(())
    }

    /// Aborts the running turn and user commands. Returns whether a turn was running.
    pub fn abort(&self) -> bool {
        let mut st = self.inner.lock();
        st.abort.cancel();
        st.abort = self.inner.shutdown.child_token();
        st.phase == Phase::Turn
    }

    /// Runs a user `!command` (`exclude_from_context` for `!!command`).
    ///
    /// # Errors
    /// [`SessionError::Bash`] if the shell could not start; [`SessionError::Store`] if the
    /// record could not be persisted; [`SessionError::Closed`] after shutdown.
    pub async fn bash(
        &self,
        command: &str,
        exclude_from_context: bool,
    ) -> Result<BashOutcome, SessionError> {
        self.bash_until(command, exclude_from_context, std::future::pending())
            .await
    }

    /// [`Session::bash`], also cancelled when `stop` completes: the command's process group
    /// is killed, as [`Session::abort`] would, and the record says `cancelled`.
    ///
    /// # Errors
    /// As [`Session::bash`].
    pub async fn bash_until(
        &self,
        command: &str,
        exclude_from_context: bool,
        stop: impl Future<Output = ()> + Send,
    ) -> Result<BashOutcome, SessionError> {
        let inner = &self.inner;
        let started = inner.clock.now_ms();
        let (cancel, name) = {
            let mut st = inner.lock();
            if inner.shutdown.is_cancelled() {
                return Err(SessionError::Closed);
            }
            if st.running_commands >= MAX_RUNNING_COMMANDS {
                return Err(SessionError::TooManyCommands);
            }
            st.running_commands += 1;
            st.bash_counter += 1;
            (
                st.abort.child_token(),
                format!("user-bash-{started}-{}", st.bash_counter),
            )
        };
        // Releases the slot however this future ends (completion, error or drop).
        let _slot = CommandSlot {
            inner: Arc::clone(inner),
        };
        let config = &inner.config.bash;
        let run = run_bash(
            config,
            command,
            &inner.cwd,
            config.default_timeout,
            &inner.artifacts_dir,
            &name,
            &cancel,
        )
        .instrument(tracing::info_span!("bash", session_id = %inner.id));
        tokio::pin!(run, stop);
        // Once `stop` fires, the same run goes on until it has killed the command and
        // collected its output, so the record is written either way.
        let run = tokio::select! {
            biased;
            run = &mut run => run,
            () = &mut stop => {
                cancel.cancel();
                run.await
            }
        }
        .map_err(SessionError::Bash)?;
        let mut output = run.output;
        if run.timed_out {
            output.push_str("\n\n(command timed out)");
        }
        let message = BashExecutionMessage {
            command: command.to_owned(),
            output,
            exit_code: run.exit_code,
            cancelled: run.cancelled || run.timed_out,
            truncated: run.truncated,
            full_output_path: run.full_output_path.map(|p| p.display().to_string()),
            timestamp: started,
            exclude_from_context,
        };
        let mut st = inner.lock();
        let deferred = st.phase != Phase::Idle;
        if deferred {
            st.pending_bash.push(message.clone());
        } else {
            inner.append_new(&mut st, AgentMessage::BashExecution(message.clone()))?;
        }
        Ok(BashOutcome { message, deferred })
    }

    /// Switches model (recorded as a `model_change` entry).
    ///
    /// # Errors
    /// [`SessionError::Busy`], [`SessionError::UnknownModel`], [`SessionError::Store`].
    pub fn set_model(&self, model: ModelRef) -> Result<(), SessionError> {
        if self.inner.models.resolve(&model).is_none() {
            return Err(SessionError::UnknownModel(model.to_string()));
        }
        let mut st = self.inner.lock();
        if st.phase != Phase::Idle {
            return Err(SessionError::Busy);
        }
        self.inner
            .record(&mut st, EntryKind::model_change(&model))?;
        st.model = model.clone();
        self.inner.publish(&mut st, SessionEventKind::Model(model));
        Ok(())
    }

    /// Switches reasoning effort (recorded as a `thinking_level_change` entry).
    ///
    /// # Errors
    /// [`SessionError::Busy`], [`SessionError::Store`].
    pub fn set_thinking(&self, level: ThinkingLevel) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if st.phase != Phase::Idle {
            return Err(SessionError::Busy);
        }
        self.inner.record(
            &mut st,
            EntryKind::ThinkingLevelChange {
                thinking_level: level,
            },
        )?;
        st.thinking = level;
        self.inner
            .publish(&mut st, SessionEventKind::ThinkingLevel(level));
        Ok(())
    }

    /// Renames the session (a `session_info` entry).
    ///
    /// # Errors
    /// [`SessionError::Store`].
    pub fn set_name(&self, name: Option<String>) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        self.inner
            .record(&mut st, EntryKind::SessionInfo { name: name.clone() })?;
        st.name = name;
        Ok(())
    }

    /// Records a compaction: history before `first_kept_entry_id` is replaced by `summary`
    /// in the runtime transcript (the file keeps everything).
    ///
    /// # Errors
    /// [`SessionError::Busy`], [`SessionError::Store`].
    pub fn compact(
        &self,
        summary: &str,
        first_kept_entry_id: &str,
        tokens_before: u64,
    ) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if st.phase != Phase::Idle {
            return Err(SessionError::Busy);
        }
        self.inner.record(
            &mut st,
            EntryKind::Compaction {
                summary: summary.to_owned(),
                first_kept_entry_id: first_kept_entry_id.to_owned(),
                tokens_before,
            },
        )?;
        let loaded = SessionFile::read(st.file.path())?;
        let rebuilt = super::tree::rebuild(&loaded.entries);
        st.messages = rebuilt.messages.into_iter().map(|(_, m)| m).collect();
        Ok(())
    }

    /// Waits until no turn is running.
    pub async fn wait_idle(&self) {
        let mut rx = self.inner.phase.subscribe();
        let _ = rx.wait_for(|p| *p == Phase::Idle).await;
    }

    /// Aborts everything and waits for the session's tasks to finish.
    pub async fn close(&self) {
        self.abort();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, st: &mut State, kind: SessionEventKind) {
        st.seq += 1;
        // No subscribers is fine: the state is the source of truth.
        let _ = self.events.send(SessionEvent { seq: st.seq, kind });
    }

    /// Appends a non-message entry on the active path.
    fn record(&self, st: &mut State, kind: EntryKind) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let e = st.file.append_new(st.leaf.as_deref(), now, kind)?;
        st.leaf = Some(e.id);
        st.updated_at = e.timestamp;
        Ok(())
    }

    fn persist_message(
        &self,
        st: &mut State,
        id: String,
        message: &AgentMessage,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let e = st.file.append_with_id(
            id,
            st.leaf.as_deref(),
            now,
            EntryKind::Message {
                message: message.clone(),
            },
        )?;
        st.leaf = Some(e.id);
        st.updated_at = e.timestamp;
        Ok(())
    }

    /// Persists and appends a message that has no view item yet.
    fn append_new(&self, st: &mut State, message: AgentMessage) -> Result<(), StoreError> {
        let id = st.file.allocate_id();
        self.persist_message(st, id.clone(), &message)?;
        let item = TranscriptItem {
            id,
            body: ItemBody::settled(&message, |_| Value::Map(Map::new())),
        };
        st.items.push(item.clone());
        st.messages.push(message);
        self.publish(st, SessionEventKind::ItemAdded { item });
        Ok(())
    }

    /// Ends a run: flushes deferred user commands, drops undelivered steering, goes idle.
    fn finish_run(&self) -> Vec<String> {
        let mut st = self.lock();
        st.streaming = None;
        st.running_tools.clear();
        for message in std::mem::take(&mut st.pending_bash) {
            if let Err(error) = self.append_new(&mut st, AgentMessage::BashExecution(message)) {
                tracing::error!(%error, "could not persist a deferred bash record");
            }
        }
        let dropped = std::mem::take(&mut st.queued_steer);
        if !dropped.is_empty() {
            self.publish(&mut st, SessionEventKind::QueuedSteer(Vec::new()));
        }
        st.accepting_steer = false;
        st.phase = Phase::Idle;
        self.publish(&mut st, SessionEventKind::Phase(Phase::Idle));
        self.phase.send_replace(Phase::Idle);
        dropped
    }
}

impl State {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            seq: self.seq,
            state: SessionState {
                phase: self.phase,
                model: self.model.clone(),
                thinking_level: self.thinking,
                transcript: self.items.clone(),
                queued_steer: self.queued_steer.clone(),
            },
        }
    }
}

/// One running user command; dropping it frees the slot.
struct CommandSlot {
    inner: Arc<Inner>,
}

impl Drop for CommandSlot {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        st.running_commands = st.running_commands.saturating_sub(1);
    }
}

/// The session as the loop sees it.
struct RunCtx {
    inner: Arc<Inner>,
}

impl RunContext for RunCtx {
    fn messages(&self) -> Vec<AgentMessage> {
        self.inner.lock().messages.clone()
    }

    fn append(&self, message: AgentMessage) -> Result<(), StoreError> {
        let inner = &self.inner;
        let mut st = inner.lock();
        let st = &mut *st;
        match &message {
            AgentMessage::Assistant(_) if st.streaming.is_some() => {
                let index = st.streaming.take().unwrap_or_default();
                let id = st.items[index].id.clone();
                inner.persist_message(st, id.clone(), &message)?;
                let item = TranscriptItem {
                    id,
                    body: ItemBody::settled(&message, |_| Value::Null),
                };
                st.items[index] = item.clone();
                st.messages.push(message);
                inner.publish(st, SessionEventKind::ItemReplaced { index, item });
            }
            AgentMessage::ToolResult(r) if st.running_tools.contains_key(&r.tool_call_id) => {
                let index = st.running_tools.remove(&r.tool_call_id).unwrap_or_default();
                let id = st.items[index].id.clone();
                inner.persist_message(st, id, &message)?;
                st.messages.push(message);
            }
            _ => inner.append_new(st, message)?,
        }
        Ok(())
    }

    fn emit(&self, event: LoopEvent) {
        let inner = &self.inner;
        let mut st = inner.lock();
        let st = &mut *st;
        match event {
            LoopEvent::AssistantStart { partial } => {
                let id = st.file.allocate_id();
                let item = TranscriptItem {
                    id,
                    body: ItemBody::streaming(&partial),
                };
                st.items.push(item.clone());
                st.streaming = Some(st.items.len() - 1);
                inner.publish(st, SessionEventKind::ItemAdded { item });
            }
            LoopEvent::AssistantUpdate(update) => {
                let Some(index) = st.streaming else { return };
                let Some(ItemBody::Assistant { content, .. }) =
                    st.items.get_mut(index).map(|i| &mut i.body)
                else {
                    return;
                };
                let kind = match update {
                    StreamUpdate::BlockStart {
                        index: content_index,
                        block,
                    } => {
                        content.push(block.clone());
                        SessionEventKind::BlockAdded {
                            index,
                            content_index,
                            block,
                        }
                    }
                    StreamUpdate::TextAppend {
                        index: content_index,
                        delta,
                    } => {
                        if let Some(AssistantContent::Text(t)) = content.get_mut(content_index) {
                            t.text.push_str(&delta);
                        }
                        SessionEventKind::TextAppended {
                            index,
                            content_index,
                            delta,
                        }
                    }
                    StreamUpdate::ThinkingAppend {
                        index: content_index,
                        delta,
                    } => {
                        if let Some(AssistantContent::Thinking(t)) = content.get_mut(content_index)
                        {
                            t.thinking.push_str(&delta);
                        }
                        SessionEventKind::ThinkingAppended {
                            index,
                            content_index,
                            delta,
                        }
                    }
                };
                inner.publish(st, kind);
            }
            LoopEvent::ToolStart { call } => {
                let id = st.file.allocate_id();
                let item = TranscriptItem {
                    id,
                    body: ItemBody::running(&call, inner.clock.now_ms()),
                };
                st.items.push(item.clone());
                st.running_tools.insert(call.id, st.items.len() - 1);
                inner.publish(st, SessionEventKind::ItemAdded { item });
            }
            LoopEvent::ToolEnd { result } => {
                let Some(&index) = st.running_tools.get(&result.tool_call_id) else {
                    return;
                };
                let arguments = match &st.items[index].body {
                    ItemBody::Tool { arguments, .. } => arguments.clone(),
                    _ => Value::Null,
                };
                let item = TranscriptItem {
                    id: st.items[index].id.clone(),
                    body: ItemBody::finished(&result, arguments),
                };
                st.items[index] = item.clone();
                inner.publish(st, SessionEventKind::ItemReplaced { index, item });
            }
            LoopEvent::TurnStart { .. } | LoopEvent::TurnEnd { .. } => {}
        }
    }

    fn take_steering(&self, last_chance: bool) -> Vec<AgentMessage> {
        let inner = &self.inner;
        let mut st = inner.lock();
        if st.queued_steer.is_empty() {
            if last_chance {
                st.accepting_steer = false;
            }
            return Vec::new();
        }
        let texts = std::mem::take(&mut st.queued_steer);
        inner.publish(&mut st, SessionEventKind::QueuedSteer(Vec::new()));
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
