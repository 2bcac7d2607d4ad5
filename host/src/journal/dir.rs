//! The sessions directory a host owns: its lock, its modes, and its durability thread.
//!
//! # Ownership
//!
//! [`SessionsDir::open`] takes an exclusive `flock` on `<dir>/.lock` (never blocking) and
//! writes the holder into it: program name, pid and start time. A second host on the same
//! directory, in this process or another, fails with [`StoreError::Locked`], whose one-line
//! message names the holder: `sessions directory /x is in use by baton-host pid 1234 (started
//! 2026-01-01T00:00:00.000Z)`. The lock lives in the open file description, so the kernel
//! drops it when the holder exits, however it exits; the file itself stays (removing it
//! would let two hosts lock two different files). The lock is held until
//! [`SessionsDir::release`] (the manager's shutdown and drop) or until the last
//! [`SessionFile`](super::SessionFile) of the directory is dropped; after a release every
//! write fails with [`StoreError::Released`], so a successor host never shares the files.
//!
//! # Modes
//!
//! The directory is created 0700 and every file in it 0600, with the mode given to the
//! creating system call (no window in which it is wider). An existing directory owned by
//! this user is tightened to 0700 (logged); one owned by another user is refused
//! ([`StoreError::ForeignOwner`]). Existing session files are tightened to 0600 when opened.
//!
//! # Durability
//!
//! With [`FsyncPolicy::EveryEntry`] the directory runs one thread, `baton-fsync`, that
//! `fdatasync`s session files: an append writes its line (to the page cache) under the
//! session's lock and queues its file; the thread takes everything queued, syncs each file
//! once (group commit: all the lines written before the sync started are covered by it) and
//! raises the file's durable watermark. So no `fdatasync` runs on an async worker or under a
//! session lock. [`DurableHandle::wait`] resolves once the watermark covers what was
//! appended when the handle was taken.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use parking_lot::{RwLock, RwLockReadGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};

use super::error::StoreError;
use crate::clock::format_iso8601;

/// Name of the lock file inside the sessions directory.
pub const LOCK_FILE: &str = ".lock";
/// Mode of the sessions directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the host creates in it.
pub const FILE_MODE: u32 = 0o600;
/// Most bytes of `.lock` read to name its holder.
const MAX_HOLDER_BYTES: u64 = 4096;

/// When appends are flushed to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// `fdatasync` every appended entry, on the directory's durability thread, coalescing
    /// the entries written while a sync runs into the next one (group commit).
    #[default]
    EveryEntry,
    /// Leave flushing to the operating system; [`DurableHandle::wait`] resolves at once.
    Never,
}

/// A sessions directory locked by this host. Cheap to clone; all clones are the same lock.
#[derive(Debug, Clone)]
pub struct SessionsDir {
    inner: Arc<DirInner>,
}

#[derive(Debug)]
struct DirInner {
    path: PathBuf,
    policy: FsyncPolicy,
    /// The locked `.lock`; `None` once released. Writers hold the read side while they
    /// write, so a release waits for writes in progress and no write follows it. A write
    /// takes it once, never nested: a release waiting for the write side holds off new
    /// readers.
    lock: RwLock<Option<File>>,
    /// The durability thread's queue (`None` with [`FsyncPolicy::Never`]). The thread ends
    /// when this, the last sender, is dropped.
    jobs: Option<mpsc::Sender<Job>>,
}

impl Drop for DirInner {
    fn drop(&mut self) {
        // As in `release`: unlock, so a descriptor copy in a child being forked right now
        // cannot keep the directory locked after this host is gone.
        if let Some(file) = self.lock.get_mut().take() {
            let _ = file.unlock();
        }
    }
}

/// What `.lock` records about its holder.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Holder {
    program: String,
    pid: u32,
    started_at: String,
}

impl SessionsDir {
    /// Creates `path` (mode 0700) if missing, checks its owner and mode, locks it, and
    /// starts its durability thread. `now_ms` is recorded as the holder's start time.
    ///
    /// # Errors
    /// [`StoreError::Locked`] if another host holds it; [`StoreError::ForeignOwner`];
    /// I/O failures.
    pub fn open(path: &Path, policy: FsyncPolicy, now_ms: u64) -> Result<Self, StoreError> {
        let io = |e| StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| StoreError::Io {
                path: parent.to_path_buf(),
                source: e,
            })?;
        }
        match DirBuilder::new().mode(DIR_MODE).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        let meta = fs::metadata(path).map_err(io)?;
        if !meta.is_dir() {
            return Err(io(io::Error::from(io::ErrorKind::NotADirectory)));
        }
        let uid = rustix::process::geteuid().as_raw();
        if meta.uid() != uid {
            return Err(StoreError::ForeignOwner {
                dir: path.to_path_buf(),
                owner: meta.uid(),
                uid,
            });
        }
        tighten(path, &meta, DIR_MODE).map_err(io)?;

        let lock_path = path.join(LOCK_FILE);
        let lock_io = |e| StoreError::Io {
            path: lock_path.clone(),
            source: e,
        };
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .open(&lock_path)
            .map_err(lock_io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    dir: path.to_path_buf(),
                    holder: read_holder(&lock),
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(lock_io(e)),
        }
        let lock_meta = lock.metadata().map_err(lock_io)?;
        tighten(&lock_path, &lock_meta, FILE_MODE).map_err(lock_io)?;
        let holder = Holder {
            program: program_name(),
            pid: std::process::id(),
            started_at: format_iso8601(now_ms),
        };
        let mut text = serde_json::to_vec(&holder).map_err(StoreError::Encode)?;
        text.push(b'\n');
        lock.set_len(0).map_err(lock_io)?;
        lock.write_all(&text).map_err(lock_io)?;

        remove_stale_temporaries(path);

        let jobs = match policy {
            FsyncPolicy::Never => None,
            FsyncPolicy::EveryEntry => {
                let (tx, rx) = mpsc::channel();
                std::thread::Builder::new()
                    .name("baton-fsync".into())
                    .spawn(move || durability_thread(&rx))
                    .map_err(io)?;
                Some(tx)
            }
        };
        tracing::debug!(dir = %path.display(), ?policy, "sessions directory locked");
        Ok(Self {
            inner: Arc::new(DirInner {
                path: path.to_path_buf(),
                policy,
                lock: RwLock::new(Some(lock)),
                jobs,
            }),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The durability policy.
    pub fn policy(&self) -> FsyncPolicy {
        self.inner.policy
    }

    /// Waits until every file queued for syncing so far has been synced (or failed to).
    pub async fn flush(&self) {
        let Some(jobs) = &self.inner.jobs else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        if jobs.send(Job::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Gives up the lock: waits for writes in progress, then unlocks, so another host may
    /// take the directory. Every later write through this directory fails with
    /// [`StoreError::Released`]. Idempotent.
    pub fn release(&self) {
        let lock = self.inner.lock.write().take();
        if let Some(file) = lock {
            // Unlock explicitly rather than only closing: a child forked at this moment (any
            // thread spawning a command) holds a copy of the descriptor until its exec, and
            // the lock belongs to the open file, so closing ours alone would not free it.
            if let Err(error) = file.unlock() {
                tracing::warn!(dir = %self.inner.path.display(), %error, "could not unlock the sessions directory");
            }
            tracing::debug!(dir = %self.inner.path.display(), "sessions directory released");
        }
    }

    /// Proof that the directory is still ours, held for the duration of one write.
    ///
    /// # Errors
    /// [`StoreError::Released`] after [`SessionsDir::release`].
    pub(super) fn hold(&self) -> Result<RwLockReadGuard<'_, Option<File>>, StoreError> {
        let guard = self.inner.lock.read();
        if guard.is_none() {
            return Err(StoreError::Released {
                dir: self.inner.path.clone(),
            });
        }
        Ok(guard)
    }

    /// Queues `file` for the durability thread, unless it is already queued.
    pub(super) fn queue(&self, file: &Arc<FileSync>) {
        let Some(jobs) = &self.inner.jobs else {
            return;
        };
        if file.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if jobs.send(Job::Sync(Arc::clone(file))).is_err() {
            // The thread is gone (it only ends when every sender is dropped, so this is a
            // panic in it): nothing will ever become durable.
            file.fail(&io::Error::other("the durability thread stopped"));
        }
    }

    /// `fsync`s the directory itself, so a new name in it survives a power loss.
    ///
    /// # Errors
    /// I/O failures.
    pub(super) fn sync_entries(&self) -> Result<(), StoreError> {
        if self.inner.policy == FsyncPolicy::Never {
            return Ok(());
        }
        File::open(&self.inner.path)
            .and_then(|d| d.sync_all())
            .map_err(|e| StoreError::Io {
                path: self.inner.path.clone(),
                source: e,
            })
    }
}

/// The durability state of one open session file, shared by its
/// [`SessionFile`](super::SessionFile), the durability thread and [`DurableHandle`]s.
#[derive(Debug)]
pub(super) struct FileSync {
    pub(super) path: PathBuf,
    pub(super) file: File,
    /// Length of the file up to the end of its last complete entry.
    pub(super) committed: AtomicU64,
    queued: AtomicBool,
    durable: watch::Sender<Durable>,
    #[cfg(test)]
    pub(super) test: test_hooks::SyncHooks,
}

/// How much of a file is on stable storage.
#[derive(Debug, Clone, Default)]
struct Durable {
    /// Bytes known synced.
    synced: u64,
    /// The first sync failure: after it nothing more is claimed durable (the kernel may have
    /// dropped the unsynced pages), and the file takes no more appends.
    failed: Option<(io::ErrorKind, String)>,
}

impl FileSync {
    /// State of a file whose first `len` bytes are committed and taken as durable.
    pub(super) fn new(path: PathBuf, file: File, len: u64) -> Self {
        Self {
            path,
            file,
            committed: AtomicU64::new(len),
            queued: AtomicBool::new(false),
            durable: watch::Sender::new(Durable {
                synced: len,
                failed: None,
            }),
            #[cfg(test)]
            test: test_hooks::SyncHooks::default(),
        }
    }

    /// True once a sync of this file failed.
    pub(super) fn sync_failed(&self) -> bool {
        self.durable.borrow().failed.is_some()
    }

    fn fail(&self, error: &io::Error) {
        tracing::error!(
            path = %self.path.display(),
            %error,
            "syncing a session file failed; it takes no more appends"
        );
        let failed = (error.kind(), error.to_string());
        self.durable.send_modify(|d| {
            d.failed.get_or_insert(failed);
        });
    }

    /// One sync: covers everything committed when it starts.
    fn sync(&self) {
        // Cleared before reading `committed`, so an append after the read queues again.
        self.queued.store(false, Ordering::Release);
        let target = self.committed.load(Ordering::Acquire);
        {
            let d = self.durable.borrow();
            if d.failed.is_some() || d.synced >= target {
                return;
            }
        }
        #[cfg(test)]
        let result = self.test.sync(&self.file);
        #[cfg(not(test))]
        let result = self.file.sync_data();
        match result {
            Ok(()) => self
                .durable
                .send_modify(|d| d.synced = d.synced.max(target)),
            Err(e) => self.fail(&e),
        }
    }
}

/// Awaits the durability of everything a [`SessionFile`](super::SessionFile) had appended
/// when [`SessionFile::durable_handle`](super::SessionFile::durable_handle) made it. Take it
/// under the session's lock, await it after releasing the lock.
#[derive(Debug, Clone)]
#[must_use = "a durable handle does nothing unless waited on"]
pub struct DurableHandle {
    target: u64,
    /// `None` with [`FsyncPolicy::Never`]: nothing to wait for.
    file: Option<Arc<FileSync>>,
}

impl DurableHandle {
    pub(super) fn new(file: &Arc<FileSync>, policy: FsyncPolicy) -> Self {
        Self {
            target: file.committed.load(Ordering::Acquire),
            file: (policy == FsyncPolicy::EveryEntry).then(|| Arc::clone(file)),
        }
    }

    /// Resolves once every covered entry is on stable storage.
    ///
    /// # Errors
    /// [`StoreError::Io`] when syncing the file failed before covering them: they are in
    /// the file (a process crash keeps them) but a power loss may lose them.
    pub async fn wait(self) -> Result<(), StoreError> {
        let Some(file) = self.file else {
            return Ok(());
        };
        let target = self.target;
        let mut rx = file.durable.subscribe();
        let outcome = match rx
            .wait_for(|d| d.synced >= target || d.failed.is_some())
            .await
        {
            Ok(d) if d.synced >= target => Ok(()),
            Ok(d) => Err(d
                .failed
                .clone()
                .unwrap_or((io::ErrorKind::Other, "sync failed".into()))),
            // The sender lives in `file`, which this future holds.
            Err(_) => Err((io::ErrorKind::Other, "sync state dropped".into())),
        };
        outcome.map_err(|(kind, message)| StoreError::Io {
            path: file.path.clone(),
            source: io::Error::new(kind, message),
        })
    }
}

enum Job {
    Sync(Arc<FileSync>),
    Flush(oneshot::Sender<()>),
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sync(file) => f.debug_tuple("Sync").field(&file.path).finish(),
            Self::Flush(_) => f.write_str("Flush"),
        }
    }
}

/// The durability thread: each round takes every queued job, syncs each queued file once,
/// then answers the flushes of the round.
fn durability_thread(jobs: &mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut flushes = Vec::new();
        for job in std::iter::once(first).chain(jobs.try_iter()) {
            match job {
                Job::Sync(file) => file.sync(),
                Job::Flush(done) => flushes.push(done),
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// Clears group and other bits of `path` (logged), keeping the owner's.
fn tighten(path: &Path, meta: &fs::Metadata, mode: u32) -> io::Result<()> {
    let current = meta.permissions().mode() & 0o7777;
    if current & 0o077 == 0 {
        return Ok(());
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    tracing::info!(
        path = %path.display(),
        from = format!("{current:04o}"),
        to = format!("{mode:04o}"),
        "tightened the mode of a sessions-directory entry"
    );
    Ok(())
}

/// Who `.lock` says holds it, as one printable line.
fn read_holder(lock: &File) -> String {
    let mut bytes = Vec::new();
    let read = lock.take(MAX_HOLDER_BYTES).read_to_end(&mut bytes);
    let holder = read
        .ok()
        .and_then(|_| serde_json::from_slice::<Holder>(bytes.trim_ascii()).ok());
    match holder {
        Some(h) => format!(
            "{} pid {} (started {})",
            printable(&h.program),
            h.pid,
            printable(&h.started_at)
        ),
        None => "another process (it recorded no holder)".into(),
    }
}

/// At most 64 characters of `s`, without control characters, so the message stays a line.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// This program's file name (`baton-host` for the host binary).
fn program_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "baton-host".into())
}

/// Removes `<id>.jsonl.tmp` files a crashed `create` left (nobody else writes here: the
/// directory is locked).
fn remove_stale_temporaries(dir: &Path) {
    let Ok(read) = fs::read_dir(dir) else {
        return;
    };
    for entry in read.flatten() {
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| n.ends_with(".jsonl.tmp"))
            && entry.file_type().is_ok_and(|t| t.is_file())
        {
            match fs::remove_file(entry.path()) {
                Ok(()) => {
                    tracing::info!(path = %entry.path().display(), "removed a half-created session file")
                }
                Err(error) => {
                    tracing::warn!(path = %entry.path().display(), %error, "cannot remove a half-created session file")
                }
            }
        }
    }
}

#[cfg(test)]
pub(super) mod test_hooks {
    //! Faults for the durability thread.

    use std::fs::File;
    use std::io;
    use std::sync::mpsc;

    use parking_lot::Mutex;

    /// Sync faults of one file.
    #[derive(Debug, Default)]
    pub(in crate::journal) struct SyncHooks {
        /// Each sync first waits for a message here (the test releases it).
        pub(in crate::journal) gate: Mutex<Option<mpsc::Receiver<()>>>,
        /// Each sync fails with this errno instead of syncing.
        pub(in crate::journal) fail: Mutex<Option<i32>>,
    }

    impl SyncHooks {
        pub(super) fn sync(&self, file: &File) -> io::Result<()> {
            if let Some(gate) = &*self.gate.lock() {
                let _ = gate.recv();
            }
            if let Some(errno) = *self.fail.lock() {
                return Err(io::Error::from_raw_os_error(errno));
            }
            file.sync_data()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_second_open_is_refused_with_one_line_naming_the_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("sessions");
        let first = SessionsDir::open(&path, FsyncPolicy::Never, 1_748_568_000_000).unwrap();
        let err = SessionsDir::open(&path, FsyncPolicy::Never, 0).unwrap_err();
        let expected = format!(
            "sessions directory {} is in use by {} pid {} (started 2025-05-30T01:20:00.000Z)",
            path.display(),
            program_name(),
            std::process::id()
        );
        assert_eq!(err.to_string(), expected);
        assert!(matches!(err, StoreError::Locked { .. }));

        first.release();
        SessionsDir::open(&path, FsyncPolicy::Never, 0).unwrap();
    }

    #[test]
    fn a_garbage_lock_file_still_gives_a_one_line_refusal() {
        let tmp = tempfile::tempdir().unwrap();
        let _first = SessionsDir::open(tmp.path(), FsyncPolicy::Never, 0).unwrap();
        fs::write(
            tmp.path().join(LOCK_FILE),
            b"\n\x1b[2J{\"program\":\"x\ny\"",
        )
        .unwrap();
        let err = SessionsDir::open(tmp.path(), FsyncPolicy::Never, 0).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("another process (it recorded no holder)")
        );
        fs::write(
            tmp.path().join(LOCK_FILE),
            b"{\"program\":\"evil\\n\\u001b\",\"pid\":7,\"startedAt\":\"t\"}",
        )
        .unwrap();
        let err = SessionsDir::open(tmp.path(), FsyncPolicy::Never, 0).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("in use by evil pid 7 (started t)"),
            "{err}"
        );
    }

    #[test]
    fn the_directory_is_created_0700_and_an_existing_wider_one_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let fresh = tmp.path().join("a/b/sessions");
        let d = SessionsDir::open(&fresh, FsyncPolicy::Never, 0).unwrap();
        assert_eq!(mode(&fresh), 0o700);
        assert_eq!(mode(&fresh.join(LOCK_FILE)), 0o600);
        drop(d);

        let wide = tmp.path().join("wide");
        fs::create_dir(&wide).unwrap();
        fs::set_permissions(&wide, fs::Permissions::from_mode(0o777)).unwrap();
        fs::write(wide.join(LOCK_FILE), b"").unwrap();
        fs::set_permissions(wide.join(LOCK_FILE), fs::Permissions::from_mode(0o644)).unwrap();
        SessionsDir::open(&wide, FsyncPolicy::Never, 0).unwrap();
        assert_eq!(mode(&wide), 0o700);
        assert_eq!(mode(&wide.join(LOCK_FILE)), 0o600);
    }

    #[test]
    fn a_directory_owned_by_another_user_is_refused() {
        if rustix::process::geteuid().as_raw() != 0 {
            baton_testkit::Need::Root.skip("changing a directory's owner needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(tmp.path(), Some(54_321), None).unwrap();
        let err = SessionsDir::open(tmp.path(), FsyncPolicy::Never, 0).unwrap_err();
        assert!(
            matches!(err, StoreError::ForeignOwner { owner: 54_321, .. }),
            "{err}"
        );
    }

    #[test]
    fn half_created_session_files_are_removed_when_the_directory_is_taken() {
        let tmp = tempfile::tempdir().unwrap();
        let stale = tmp
            .path()
            .join("6f1c2b7e-1d2a-4c3b-8a9d-0e1f2a3b4c5d.jsonl.tmp");
        fs::write(&stale, b"{\"type\":\"sess").unwrap();
        SessionsDir::open(tmp.path(), FsyncPolicy::Never, 0).unwrap();
        assert!(!stale.exists());
    }

    #[test]
    fn a_released_directory_refuses_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let d = SessionsDir::open(tmp.path(), FsyncPolicy::Never, 0).unwrap();
        drop(d.hold().unwrap());
        d.release();
        d.release();
        assert!(matches!(d.hold(), Err(StoreError::Released { .. })));
    }
}
