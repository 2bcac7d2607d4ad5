//! A live session: its state, its persistence and its settings. The transcript itself is
//! [`super::transcript`] and change delivery [`super::events`] (below this file); the turn
//! [`super::turn`], the busy stretch of turns and compactions [`super::driver`], compaction
//! [`super::compact`], follow-ups [`super::followup`] and user commands [`super::commands`]
//! (above it) add what a session does.
//!
//! All mutable state sits behind one mutex (`parking_lot`: a panic under it does not poison
//! the session) that is never held across an `.await`. Every change happens under that lock together with its persistence (for settled
//! messages) and the delivery of its numbered change, so a subscriber that takes a
//! [`Snapshot`] and then applies the events with a greater `seq` always sees exactly the
//! session's state, and an observer registered with [`SessionRuntime::observe`] sees every change
//! after the view it started from.
//!
//! Turn rules:
//! * [`SessionRuntime::start_prompt`] while a turn runs fails with [`SessionError::Busy`] — prompts
//!   are never queued; follow-ups are ([`SessionRuntime::follow_up`], `super::followup`), and
//!   are sent one per settled turn without the phase going idle in between.
//! * Every turn has an id (`turnId`); [`SessionRuntime::steer_turn`] refuses steering that
//!   names a turn which has ended.
//! * After a turn that crossed the context threshold, a compaction runs before the next
//!   follow-up or idle (`super::compaction`).
//! * [`SessionRuntime::steer`] queues text that the loop injects at the next turn boundary; once the
//!   loop has decided to stop it fails with [`SessionError::NotRunning`] instead of queueing
//!   text nobody would read.
//! * [`SessionRuntime::abort`] cancels the running turn (model stream and tools) and any running user
//!   commands.
//! * [`SessionRuntime::bash`] runs a user command outside the model protocol. Its record is inserted
//!   at once when idle, otherwise after the turn settles, so a tool call and its result are
//!   never split.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::activity::Activity;
use super::compaction::CompactionSettings;
use super::error::SessionError;
use super::events::{Change, ObserverId, Outlets, SessionObserver};
use super::transcript::{Transcript, TranscriptView};
use super::view::{Phase, SessionEvent, Snapshot, ToolConfinement};
use crate::agent::ToolExecution;
use crate::clock::Clock;
use crate::journal::{EntryKind, Rebuilt, SessionFile, StoreError};
use crate::message::{AgentMessage, BashExecutionMessage};
use crate::model_ref::{ModelRef, ThinkingLevel};
use crate::projection::ContextTransform;
use crate::provider::ModelRegistry;
use crate::tool::{BashConfig, ToolSet, confinement_status};

/// Default capacity of a session's event channel (a subscriber that falls further behind
/// gets `Lagged` and must take a fresh snapshot).
pub const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// Most steering texts queued at once; more are refused with
/// [`SessionError::SteerQueueFull`].
pub const MAX_QUEUED_STEER: usize = 32;
/// Most user commands running at once in a session; more are refused with
/// [`SessionError::TooManyCommands`] (this also bounds the records deferred during a turn).
pub const MAX_RUNNING_COMMANDS: usize = 8;

/// The system prompt sessions use unless configured otherwise ([`SessionConfig::system_prompt`]).
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a coding assistant working in the user's project directory. Use the read, write, edit and bash tools to inspect and change files, and answer concisely.";

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
    /// When and how the context is compacted.
    pub compaction: CompactionSettings,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
            bash: BashConfig::default(),
            tool_execution: ToolExecution::Parallel,
            transform: None,
            event_capacity: DEFAULT_EVENT_CAPACITY,
            compaction: CompactionSettings::default(),
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

/// A live session. Cheap to clone; all clones are the same session.
#[derive(Debug, Clone)]
pub struct SessionRuntime {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) id: String,
    pub(super) cwd: PathBuf,
    pub(super) artifacts_dir: PathBuf,
    pub(super) created_at: String,
    pub(super) config: SessionConfig,
    pub(super) tools: ToolSet,
    pub(super) models: Arc<ModelRegistry>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) tracker: TaskTracker,
    pub(super) shutdown: CancellationToken,
    pub(super) phase: watch::Sender<Phase>,
    state: Mutex<State>,
}

/// What subscribers see: the transcript and the settings shown with it.
#[derive(Debug)]
pub(super) struct Doc {
    pub(super) transcript: Transcript,
    pub(super) phase: Phase,
    pub(super) model: ModelRef,
    pub(super) thinking: ThinkingLevel,
    pub(super) queued_steer: Vec<String>,
    /// Whether the tools are confined (fixed at start).
    pub(super) confinement: ToolConfinement,
    /// The running turn, follow-ups, presence and compaction status.
    pub(super) activity: Activity,
}

impl Doc {
    pub(super) fn view(&self) -> TranscriptView<'_> {
        TranscriptView {
            transcript: &self.transcript,
            phase: self.phase,
            model: &self.model,
            thinking: self.thinking,
            queued_steer: &self.queued_steer,
            confinement: &self.confinement,
            activity: &self.activity,
        }
    }
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) doc: Doc,
    pub(super) outlets: Outlets,
    pub(super) name: Option<String>,
    pub(super) leaf: Option<String>,
    pub(super) updated_at: String,
    pub(super) file: SessionFile,
    pub(super) accepting_steer: bool,
    pub(super) pending_bash: Vec<BashExecutionMessage>,
    pub(super) abort: CancellationToken,
    pub(super) bash_counter: u64,
    pub(super) running_commands: usize,
}

impl State {
    /// Delivers the change `f` describes (from the state as it is now).
    pub(super) fn emit<'c>(&'c mut self, f: impl FnOnce(&'c Doc) -> Change<'c>) {
        let doc: &'c Doc = &self.doc;
        let change = f(doc);
        self.outlets.emit(change, &doc.view());
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            seq: self.outlets.seq(),
            state: self.doc.view().to_state(),
        }
    }
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

impl SessionRuntime {
    pub(crate) fn start(parts: SessionParts) -> Self {
        let tools = ToolSet::coding(parts.config.bash.clone());
        let abort = parts.shutdown.child_token();
        let state = State {
            doc: Doc {
                transcript: Transcript::from_messages(parts.rebuilt.messages),
                phase: Phase::Idle,
                model: parts.rebuilt.model.unwrap_or(parts.default_model),
                thinking: parts.rebuilt.thinking.unwrap_or_default(),
                queued_steer: Vec::new(),
                confinement: ToolConfinement::from(&confinement_status(&parts.config.bash)),
                activity: Activity::new(parts.config.compaction.enabled),
            },
            outlets: Outlets::new(parts.config.event_capacity),
            name: parts.rebuilt.name,
            leaf: parts.rebuilt.leaf,
            updated_at: parts.updated_at,
            file: parts.file,
            accepting_steer: false,
            pending_bash: Vec::new(),
            abort,
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

    /// The current state and its sequence number. This copies every transcript item; to
    /// read a long transcript, use [`SessionRuntime::with_view`].
    pub fn snapshot(&self) -> Snapshot {
        self.inner.lock().snapshot()
    }

    /// A snapshot and a receiver of every later event, atomically (no event is missed or
    /// duplicated). On `RecvError::Lagged` take a new subscription. The snapshot copies the
    /// whole transcript; [`SessionRuntime::observe`] does not.
    pub fn subscribe(&self) -> (Snapshot, broadcast::Receiver<SessionEvent>) {
        let st = self.inner.lock();
        (st.snapshot(), st.outlets.subscribe())
    }

    /// Registers the observer `make` builds from the current state for every later change,
    /// atomically (the observer sees exactly the changes after the view it was built from).
    /// `make` and the observer run under the session lock: neither may call the session.
    ///
    /// # Errors
    /// What `make` returns; nothing is registered then.
    pub fn observe<O: SessionObserver + 'static, E>(
        &self,
        make: impl FnOnce(&TranscriptView<'_>, u64) -> Result<Arc<O>, E>,
    ) -> Result<(ObserverId, Arc<O>), E> {
        let mut st = self.inner.lock();
        let observer = make(&st.doc.view(), st.outlets.seq())?;
        let id = st
            .outlets
            .add(Arc::clone(&observer) as Arc<dyn SessionObserver>);
        Ok((id, observer))
    }

    /// Stops telling `id` about changes.
    pub fn unobserve(&self, id: ObserverId) {
        self.inner.lock().outlets.remove(id);
    }

    /// Runs `f` on the current state under the session lock (items are borrowed, not
    /// copied). `f` must not call the session.
    pub fn with_view<R>(&self, f: impl FnOnce(&TranscriptView<'_>) -> R) -> R {
        let st = self.inner.lock();
        f(&st.doc.view())
    }

    /// The sequence number of the last published [`SessionEvent`] (what
    /// [`SessionRuntime::snapshot`] would report, without copying the state).
    pub fn event_seq(&self) -> u64 {
        self.inner.lock().outlets.seq()
    }

    /// The runtime transcript (settled messages only; a deep copy).
    pub fn messages(&self) -> Vec<AgentMessage> {
        self.inner.lock().doc.transcript.context_owned()
    }

    /// Number of transcript items.
    pub fn len(&self) -> usize {
        self.inner.lock().doc.transcript.len()
    }

    /// True when the transcript has no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
            phase: st.doc.phase,
            model: st.doc.model.clone(),
        }
    }

    /// Appends `messages` as settled history, persisted as one entry each, without running
    /// the model and without delivering changes: a way to give a session a long history
    /// quickly (fixtures, benchmarks, imports). Observers and subscribers registered before
    /// the call do not see these items; register after it.
    ///
    /// # Errors
    /// [`SessionError::Busy`] while a turn runs; [`SessionError::Store`].
    pub fn import_history(
        &self,
        messages: impl IntoIterator<Item = AgentMessage>,
    ) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if st.doc.phase != Phase::Idle {
            return Err(SessionError::Busy);
        }
        let st = &mut *st;
        for message in messages {
            let id = st.file.allocate_id();
            self.inner.persist_message(st, id.clone(), &message)?;
            st.doc.transcript.push_settled(id, Arc::new(message));
        }
        Ok(())
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
        if st.doc.phase != Phase::Idle {
            return Err(SessionError::Busy);
        }
        self.inner
            .record(&mut st, EntryKind::model_change(&model))?;
        st.doc.model = model;
        st.emit(|d| Change::Model(&d.model));
        Ok(())
    }

    /// Switches reasoning effort (recorded as a `thinking_level_change` entry).
    ///
    /// # Errors
    /// [`SessionError::Busy`], [`SessionError::Store`].
    pub fn set_thinking(&self, level: ThinkingLevel) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if st.doc.phase != Phase::Idle {
            return Err(SessionError::Busy);
        }
        self.inner.record(
            &mut st,
            EntryKind::ThinkingLevelChange {
                thinking_level: level,
            },
        )?;
        st.doc.thinking = level;
        st.emit(|_| Change::ThinkingLevel(level));
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

    /// Lists a client as attached (presence); returns the id to detach it with.
    pub fn attach_client(&self, identity: &str) -> u64 {
        let mut st = self.inner.lock();
        let (id, changed) = st.doc.activity.attach(identity);
        if changed {
            st.emit(|d| Change::Attached(&d.activity.attached));
        }
        id
    }

    /// Removes attachment `id` from the presence list (a second call is quiet).
    pub fn detach_client(&self, id: u64) {
        let mut st = self.inner.lock();
        if st.doc.activity.detach(id) {
            st.emit(|d| Change::Attached(&d.activity.attached));
        }
    }

    /// Waits until no turn is running.
    pub async fn wait_idle(&self) {
        let mut rx = self.inner.phase.subscribe();
        let _ = rx.wait_for(|p| *p == Phase::Idle).await;
    }

    /// Aborts the running turn (or compaction) and user commands. Returns whether a turn was
    /// running. Queued follow-ups stay queued: an aborted turn sends none of them (see
    /// [`SessionRuntime::follow_up`]).
    pub fn abort(&self) -> bool {
        let mut st = self.inner.lock();
        st.abort.cancel();
        st.abort = self.inner.shutdown.child_token();
        st.doc.phase == Phase::Turn
    }

    /// Aborts everything and waits for the session's tasks to finish.
    pub async fn close(&self) {
        self.abort();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }
}

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
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

    /// Appends a non-message entry on the active path.
    fn record(&self, st: &mut State, kind: EntryKind) -> Result<(), StoreError> {
        self.record_entry(st, kind).map(drop)
    }

    /// Appends a non-message entry on the active path; returns its id.
    pub(super) fn record_entry(
        &self,
        st: &mut State,
        kind: EntryKind,
    ) -> Result<String, StoreError> {
        self.record_entry_at(st, self.clock.now_ms(), kind)
    }

    /// [`Inner::record_entry`] at time `now` (Unix ms).
    pub(super) fn record_entry_at(
        &self,
        st: &mut State,
        now: u64,
        kind: EntryKind,
    ) -> Result<String, StoreError> {
        let e = st.file.append_new(st.leaf.as_deref(), now, kind)?;
        st.leaf = Some(e.id.clone());
        st.updated_at = e.timestamp;
        Ok(e.id)
    }

    /// Writes a settled message as entry `id`.
    pub(super) fn persist_message(
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
    pub(super) fn append_new(
        &self,
        st: &mut State,
        message: AgentMessage,
    ) -> Result<(), StoreError> {
        let id = st.file.allocate_id();
        self.persist_message(st, id.clone(), &message)?;
        let index = st.doc.transcript.push_settled(id, Arc::new(message));
        st.emit(|_| Change::ItemAdded { index });
        Ok(())
    }
}
