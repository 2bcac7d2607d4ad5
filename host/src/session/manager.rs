//! The sessions of a host: a directory of session files, opened lazily.
//!
//! # Layout
//!
//! ```text
//! <sessions_dir>/            mode 0700, owned by the host's user
//!   .lock                    flock'ed by the running host; names it (see `journal::SessionsDir`)
//!   <sessionId>.jsonl        header line + entries, mode 0600 (see `journal::SessionFile`)
//!   <sessionId>.artifacts/   full outputs of truncated bash commands
//! ```
//!
//! One host per directory: [`SessionManager::new`] locks it and fails with
//! [`StoreError::Locked`] if another host holds it. The lock is given up by
//! [`SessionManager::shutdown`] (after the last write is synced) or when the manager is
//! dropped.
//!
//! Session ids are lowercase UUIDv4s (validated before they touch a path). Creating a session
//! writes its file with `model_change` and `thinking_level_change` entries, so a resumed
//! session keeps its settings even if the host's defaults change. Writing it blocks on
//! `fsync` (the header, the directory entry) with [`FsyncPolicy::EveryEntry`], so async
//! callers use [`SessionManager::create_async`], which writes on a tracked blocking thread
//! and answers once the first entries are durable too.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_protocol::ids::is_canonical_uuid_v4;
use parking_lot::{Mutex, MutexGuard};
use ring::rand::{SecureRandom, SystemRandom};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::SessionError;
use super::runtime::{SessionConfig, SessionMeta, SessionParts, SessionRuntime};
use super::view::Phase;
use crate::clock::Clock;
use crate::journal::{
    DurableHandle, EntryKind, FsyncPolicy, SessionFile, SessionsDir, StoreError, rebuild,
};
use crate::model_ref::{ModelRef, ThinkingLevel};
use crate::provider::ModelRegistry;

/// Host-wide settings.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Where session files live (created if missing).
    pub sessions_dir: PathBuf,
    /// Working directory of sessions created without one.
    pub default_cwd: PathBuf,
    /// Model of sessions created without one (`None`: the registry's first model).
    pub default_model: Option<ModelRef>,
    /// When appends reach stable storage.
    pub fsync: FsyncPolicy,
    /// Per-session settings.
    pub session: SessionConfig,
}

impl HostConfig {
    /// Defaults for `sessions_dir`, with the process's current directory as default cwd.
    pub fn new(sessions_dir: impl Into<PathBuf>) -> Self {
        Self {
            sessions_dir: sessions_dir.into(),
            default_cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            default_model: None,
            fsync: FsyncPolicy::EveryEntry,
            session: SessionConfig::default(),
        }
    }
}

/// `create` arguments (all optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CreateOptions {
    /// Display name.
    pub name: Option<String>,
    /// Working directory (must exist).
    pub cwd: Option<PathBuf>,
    /// Model.
    pub model: Option<ModelRef>,
    /// Reasoning effort.
    pub thinking_level: Option<ThinkingLevel>,
    /// The creating identity's key, recorded in the header (`service::owner_key`).
    pub owner: Option<String>,
}

/// The host's sessions.
#[derive(Debug)]
pub struct SessionManager {
    config: HostConfig,
    models: Arc<ModelRegistry>,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
    /// The runtimes loaded now, one per session file, so a file has one writer. Whether a
    /// session is open to clients is not asked here: the service layer's residency
    /// (`service::residency`) owns that, and opens and closes runtimes through this map.
    open: Mutex<HashMap<String, SessionRuntime>>,
    dir: SessionsDir,
    /// [`SessionManager::create_async`]'s blocking writes (awaited by shutdown).
    creating: TaskTracker,
}

/// A validated `create`: what the new file records.
#[derive(Debug)]
struct NewSession {
    cwd: PathBuf,
    model: ModelRef,
    thinking_level: ThinkingLevel,
    name: Option<String>,
    owner: Option<String>,
    now: u64,
    /// The id to create it under (chosen before, to be claimed in the fleet first).
    #[cfg(feature = "cluster")]
    id: Option<String>,
}

impl NewSession {
    /// Writes the session file (blocking: with [`FsyncPolicy::EveryEntry`] the header and the
    /// directory entry are synced here); returns the new id and a handle on the durability
    /// of its first entries (queued to the directory's durability thread).
    fn write(self, dir: &SessionsDir) -> Result<(String, DurableHandle), SessionError> {
        let now = self.now;
        #[cfg(feature = "cluster")]
        if let Some(id) = self.id.clone() {
            let file = SessionFile::create_owned(dir, &id, &self.cwd, now, self.owner.as_deref())?;
            return self.write_entries(id, file);
        }
        let (id, file) = loop {
            let id = new_session_id();
            match SessionFile::create_owned(dir, &id, &self.cwd, now, self.owner.as_deref()) {
                Ok(f) => break (id, f),
                Err(StoreError::Exists(_)) => {}
                Err(e) => return Err(e.into()),
            }
        };
        self.write_entries(id, file)
    }

    /// The first entries of the new file `file` of session `id`.
    fn write_entries(
        self,
        id: String,
        mut file: SessionFile,
    ) -> Result<(String, DurableHandle), SessionError> {
        let now = self.now;
        let m = file.append_new(None, now, EntryKind::model_change(&self.model))?;
        let t = file.append_new(
            Some(&m.id),
            now,
            EntryKind::ThinkingLevelChange {
                thinking_level: self.thinking_level,
            },
        )?;
        if let Some(name) = self.name {
            file.append_new(
                Some(&t.id),
                now,
                EntryKind::SessionInfo { name: Some(name) },
            )?;
        }
        tracing::info!(session_id = %id, cwd = %self.cwd.display(), model = %self.model, "session created");
        Ok((id, file.durable_handle()))
    }
}

impl SessionManager {
    /// A manager over `config.sessions_dir` (created mode 0700 if missing), which it locks.
    ///
    /// # Errors
    /// [`StoreError::Locked`] when another host holds the directory (the message names it);
    /// [`StoreError::ForeignOwner`]; the directory cannot be created.
    pub fn new(
        config: HostConfig,
        models: ModelRegistry,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, StoreError> {
        let dir = SessionsDir::open(&config.sessions_dir, config.fsync, clock.now_ms())?;
        Ok(Self {
            dir,
            config,
            models: Arc::new(models),
            clock,
            shutdown: CancellationToken::new(),
            open: Mutex::new(HashMap::new()),
            creating: TaskTracker::new(),
        })
    }

    /// The offered models.
    pub fn models(&self) -> &ModelRegistry {
        &self.models
    }

    /// Creates a session file; the session opens on first [`SessionManager::open`].
    ///
    /// Blocks on the file's and the directory's `fsync` ([`FsyncPolicy::EveryEntry`]); its
    /// first entries are queued for the durability thread, not awaited. For blocking
    /// contexts and tests: async code calls [`SessionManager::create_async`].
    ///
    /// # Errors
    /// [`SessionError::BadCwd`], [`SessionError::UnknownModel`], [`SessionError::Store`].
    pub fn create(&self, options: CreateOptions) -> Result<String, SessionError> {
        let (id, _queued) = self.validate(options)?.write(&self.dir)?;
        Ok(id)
    }

    /// As [`SessionManager::create`], with the file written on a tracked blocking thread
    /// (never an async worker, never under a lock), answering once the file and its first
    /// entries are on stable storage.
    ///
    /// # Errors
    /// As [`SessionManager::create`].
    pub async fn create_async(&self, options: CreateOptions) -> Result<String, SessionError> {
        let new = self.validate(options)?;
        self.write_async(new).await
    }

    /// As [`SessionManager::create_async`], under the id `id` chosen before (the fleet
    /// claims it first); an existing file of that id is an error, never overwritten.
    ///
    /// # Errors
    /// As [`SessionManager::create`].
    #[cfg(feature = "cluster")]
    pub(crate) async fn create_async_as(
        &self,
        id: String,
        options: CreateOptions,
    ) -> Result<String, SessionError> {
        let mut new = self.validate(options)?;
        new.id = Some(id);
        self.write_async(new).await
    }

    /// Now, by the manager's clock (milliseconds since the epoch).
    #[cfg(feature = "cluster")]
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    async fn write_async(&self, new: NewSession) -> Result<String, SessionError> {
        let dir = self.dir.clone();
        let (id, durable) = self
            .creating
            .spawn_blocking(move || new.write(&dir))
            .await
            .map_err(|e| StoreError::Io {
                path: self.config.sessions_dir.clone(),
                source: std::io::Error::other(format!("writing the new session failed: {e}")),
            })??;
        durable.wait().await?;
        Ok(id)
    }

    /// Checks `options` against the host (cwd, model) and fills in the defaults.
    fn validate(&self, options: CreateOptions) -> Result<NewSession, SessionError> {
        let cwd = options
            .cwd
            .unwrap_or_else(|| self.config.default_cwd.clone());
        if !cwd.is_dir() {
            return Err(SessionError::BadCwd(cwd));
        }
        let model = options
            .model
            .or_else(|| self.config.default_model.clone())
            .or_else(|| self.models.first())
            .ok_or_else(|| SessionError::UnknownModel("(no models registered)".into()))?;
        if self.models.resolve(&model).is_none() {
            return Err(SessionError::UnknownModel(model.to_string()));
        }
        Ok(NewSession {
            cwd,
            model,
            thinking_level: options.thinking_level.unwrap_or_default(),
            name: options.name,
            owner: options.owner,
            now: self.clock.now_ms(),
            #[cfg(feature = "cluster")]
            id: None,
        })
    }

    /// The live session `id`, opening it from disk on first use.
    ///
    /// # Errors
    /// [`SessionError::UnknownSession`] for an invalid or missing id; [`SessionError::Closed`]
    /// after shutdown; [`SessionError::Store`] when the file cannot be read.
    pub fn open(&self, id: &str) -> Result<SessionRuntime, SessionError> {
        if !is_canonical_uuid_v4(id) {
            return Err(SessionError::UnknownSession(id.to_owned()));
        }
        if self.shutdown.is_cancelled() {
            return Err(SessionError::Closed);
        }
        let mut open = self.lock();
        if let Some(s) = open.get(id) {
            return Ok(s.clone());
        }
        let path = self.file_path(id);
        let (file, loaded) = SessionFile::open(&self.dir, &path).map_err(|e| match e {
            StoreError::NotFound(_) => SessionError::UnknownSession(id.to_owned()),
            other => SessionError::Store(other),
        })?;
        let updated_at = loaded
            .entries
            .last()
            .map_or_else(|| loaded.header.timestamp.clone(), |e| e.timestamp.clone());
        let rebuilt = rebuild(&loaded.entries);
        let session = SessionRuntime::start(SessionParts {
            id: id.to_owned(),
            cwd: PathBuf::from(&loaded.header.cwd),
            artifacts_dir: self.config.sessions_dir.join(format!("{id}.artifacts")),
            created_at: loaded.header.timestamp,
            file,
            rebuilt,
            default_model: self.default_model(),
            config: self.config.session.clone(),
            models: Arc::clone(&self.models),
            clock: Arc::clone(&self.clock),
            shutdown: self.shutdown.child_token(),
            updated_at,
        });
        tracing::info!(session_id = %id, "session opened");
        open.insert(id.to_owned(), session.clone());
        Ok(session)
    }

    /// Metadata of every session (open ones live, others read from disk), newest first.
    ///
    /// # Errors
    /// The directory cannot be read.
    pub fn list(&self) -> Result<Vec<SessionMeta>, StoreError> {
        let dir = &self.config.sessions_dir;
        let read = std::fs::read_dir(dir).map_err(|e| StoreError::Io {
            path: dir.clone(),
            source: e,
        })?;
        let open: HashMap<String, SessionRuntime> = self.lock().clone();
        let mut out = Vec::new();
        for entry in read.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
                continue;
            };
            if !is_canonical_uuid_v4(id) {
                continue;
            }
            if let Some(s) = open.get(id) {
                out.push(s.meta());
                continue;
            }
            match self.meta_from_file(id, &entry.path()) {
                Ok(meta) => out.push(meta),
                Err(error) => {
                    tracing::warn!(session_id = id, %error, "skipping an unreadable session file")
                }
            }
        }
        out.sort_by(|a, b| {
            b.updated_at
                .cmp(&a.updated_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(out)
    }

    /// Metadata of one session (live if open, else read from its file).
    ///
    /// # Errors
    /// [`SessionError::UnknownSession`] for an invalid or missing id; [`SessionError::Store`]
    /// when the file cannot be read.
    pub fn meta(&self, id: &str) -> Result<SessionMeta, SessionError> {
        if !is_canonical_uuid_v4(id) {
            return Err(SessionError::UnknownSession(id.to_owned()));
        }
        if let Some(s) = self.lock().get(id) {
            return Ok(s.meta());
        }
        self.meta_from_file(id, &self.file_path(id))
            .map_err(|e| match e {
                StoreError::NotFound(_) => SessionError::UnknownSession(id.to_owned()),
                StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    SessionError::UnknownSession(id.to_owned())
                }
                other => SessionError::Store(other),
            })
    }

    /// Who created session `id`, as its header records (`None` when the header names no
    /// owner). Reads only the header.
    ///
    /// # Errors
    /// [`SessionError::UnknownSession`] for an invalid or missing id; [`SessionError::Store`]
    /// when the header cannot be read.
    pub fn owner(&self, id: &str) -> Result<Option<String>, SessionError> {
        if !is_canonical_uuid_v4(id) {
            return Err(SessionError::UnknownSession(id.to_owned()));
        }
        SessionFile::read_header(&self.file_path(id))
            .map(|h| h.owner)
            .map_err(|e| match e {
                StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    SessionError::UnknownSession(id.to_owned())
                }
                other => SessionError::Store(other),
            })
    }

    fn meta_from_file(&self, id: &str, path: &Path) -> Result<SessionMeta, StoreError> {
        let loaded = SessionFile::read(path)?;
        let rebuilt = rebuild(&loaded.entries);
        Ok(SessionMeta {
            id: id.to_owned(),
            name: rebuilt.name,
            cwd: loaded.header.cwd.clone(),
            created_at: loaded.header.timestamp.clone(),
            updated_at: loaded
                .entries
                .last()
                .map_or(loaded.header.timestamp, |e| e.timestamp.clone()),
            phase: Phase::Idle,
            model: rebuilt.model.unwrap_or_else(|| self.default_model()),
        })
    }

    /// Whether the runtime of session `id` is loaded (held in memory). Whether a served
    /// session is open to clients is the service layer's answer (`ServiceHost::is_open`).
    pub fn is_open(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Closes `session` (aborting its turn and commands, waiting for its tasks) and forgets
    /// it, so its transcript and runtime are released and the next [`SessionManager::open`]
    /// reads the file again. A session the manager does not hold (removed, or replaced by a
    /// newer open) is only closed.
    pub async fn close(&self, session: &SessionRuntime) {
        session.close().await;
        let mut open = self.lock();
        if open
            .get(session.id())
            .is_some_and(|held| Arc::ptr_eq(&held.inner, &session.inner))
        {
            open.remove(session.id());
        }
    }

    /// Closes the session if open and deletes its file and artefacts.
    ///
    /// # Errors
    /// [`SessionError::UnknownSession`]; [`SessionError::Store`] on I/O failure.
    pub async fn remove(&self, id: &str) -> Result<(), SessionError> {
        if !is_canonical_uuid_v4(id) {
            return Err(SessionError::UnknownSession(id.to_owned()));
        }
        let live = self.lock().remove(id);
        if let Some(s) = live {
            s.close().await;
        }
        let path = self.file_path(id);
        std::fs::remove_file(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                SessionError::UnknownSession(id.to_owned())
            } else {
                SessionError::Store(StoreError::Io {
                    path: path.clone(),
                    source: e,
                })
            }
        })?;
        let artifacts = self.config.sessions_dir.join(format!("{id}.artifacts"));
        if artifacts.exists() {
            let _ = std::fs::remove_dir_all(&artifacts);
        }
        tracing::info!(session_id = %id, "session removed");
        Ok(())
    }

    /// Aborts every session, waits for their tasks and for their last entries to be synced,
    /// then releases the sessions directory (later writes fail with
    /// [`StoreError::Released`]), so another host may take it.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let sessions: Vec<SessionRuntime> = self.lock().values().cloned().collect();
        for s in sessions {
            s.close().await;
        }
        self.creating.close();
        self.creating.wait().await;
        self.dir.flush().await;
        self.dir.release();
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, SessionRuntime>> {
        self.open.lock()
    }

    fn file_path(&self, id: &str) -> PathBuf {
        self.config.sessions_dir.join(format!("{id}.jsonl"))
    }

    /// The model of sessions created without one: the configured default, else the
    /// registry's first model.
    pub fn default_model(&self) -> ModelRef {
        self.config
            .default_model
            .clone()
            .or_else(|| self.models.first())
            .unwrap_or_else(ModelRef::scripted)
    }

    /// The sessions directory.
    pub fn sessions_dir(&self) -> &Path {
        &self.config.sessions_dir
    }
}

impl Drop for SessionManager {
    /// Releases the directory even if sessions outlive the manager: they cannot write to it
    /// any more, so a successor host never shares a file with them.
    fn drop(&mut self) {
        self.dir.release();
    }
}

/// A fresh lowercase UUIDv4 from the system CSPRNG.
///
/// # Panics
/// If the operating system has no working random source, which no supported platform lacks.
pub(crate) fn new_session_id() -> String {
    let mut b = [0u8; 16];
    SystemRandom::new()
        .fill(&mut b)
        .expect("the system random source is available on every supported platform");
    uuid::Builder::from_random_bytes(b)
        .into_uuid()
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::provider::scripted::ScriptedConfig;
    use crate::session::SUMMARY_REQUEST_OPENING;

    fn manager(sessions: &Path, cwd: &Path) -> SessionManager {
        let mut config = HostConfig::new(sessions);
        config.default_cwd = cwd.to_path_buf();
        config.fsync = FsyncPolicy::EveryEntry;
        SessionManager::new(
            config,
            ModelRegistry::scripted(ScriptedConfig::new(Duration::ZERO, SUMMARY_REQUEST_OPENING)),
            Arc::new(ManualClock::new(1_748_568_000_000, 1)),
        )
        .unwrap()
    }

    // A current-thread runtime: the write must run on a blocking thread and the durable
    // wait on the directory's durability thread, or this would deadlock or never finish.
    #[tokio::test(flavor = "current_thread")]
    async fn create_async_writes_the_same_session_as_create_off_the_async_thread() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manager(&tmp.path().join("sessions"), tmp.path());
        let options = CreateOptions {
            name: Some("named".into()),
            thinking_level: Some(ThinkingLevel::High),
            ..CreateOptions::default()
        };
        let a = m.create_async(options.clone()).await.unwrap();
        let b = m.create(options).unwrap();
        assert_ne!(a, b);
        let (ma, mb) = (m.meta(&a).unwrap(), m.meta(&b).unwrap());
        assert_eq!(ma.name.as_deref(), Some("named"));
        assert_eq!(
            (&ma.name, &ma.model, &ma.cwd),
            (&mb.name, &mb.model, &mb.cwd)
        );
        assert_eq!(
            m.open(&a).unwrap().with_view(|v| v.thinking_level()),
            ThinkingLevel::High
        );
        m.shutdown().await;
    }

    #[test]
    fn session_ids_are_distinct_canonical_lowercase_uuid_v4s() {
        let ids: std::collections::HashSet<String> = (0..64).map(|_| new_session_id()).collect();
        assert_eq!(ids.len(), 64);
        for id in &ids {
            assert!(is_canonical_uuid_v4(id), "{id}");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn create_async_refuses_a_missing_cwd_before_writing_anything() {
        let tmp = tempfile::tempdir().unwrap();
        let sessions = tmp.path().join("sessions");
        let m = manager(&sessions, tmp.path());
        let err = m
            .create_async(CreateOptions {
                cwd: Some(tmp.path().join("missing")),
                ..CreateOptions::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(err, SessionError::BadCwd(_)), "{err:?}");
        let files = std::fs::read_dir(&sessions)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .count();
        assert_eq!(files, 0);
        m.shutdown().await;
    }
}
