//! One session's append-only JSONL file: the only writer of it.
//!
//! # Durability contract
//!
//! * **Creation** writes the header to `<id>.jsonl.tmp` (created exclusively, mode 0600),
//!   syncs it, then hard-links it to `<id>.jsonl`. `link(2)` never replaces an existing
//!   name, so creation never overwrites a session ([`StoreError::Exists`]), and a session
//!   file always starts with a complete header. The directory is synced before `create`
//!   returns, so a created session survives a power loss.
//! * **Append** serialises the entry to one buffer (`line + "\n"`) and writes it to the
//!   file, opened `O_APPEND`, under the session's lock; that is all it waits for. The entry
//!   is then **committed**: other readers see it and a crash of the process keeps it. If the
//!   write fails, possibly after writing part of the line (a full disk), the file is cut
//!   back to its committed length before the error is returned, so the next entry starts on
//!   a clean line instead of being glued to a fragment (and skipped on reopen); if that
//!   cut fails too, the file refuses further appends ([`StoreError::Unusable`]).
//! * **Durable**: with [`FsyncPolicy::EveryEntry`] the directory's durability thread
//!   `fdatasync`s the file after the append (see [`SessionsDir`]); a
//!   [`SessionFile::durable_handle`] taken after the append resolves once that sync has
//!   returned. An entry is **acknowledged** when the operation that wrote it reports success
//!   to its caller; an operation that promises durability (a turn's outcome) awaits the
//!   handle first. A failed sync fails the waiters and every later append (the kernel may
//!   have dropped the unsynced pages; the file is not trusted to be whole any more).
//! * **Open** reads every line. Bytes after the last newline are a torn write: they are
//!   skipped with a warning and truncated away before the next append, so a crash mid-write
//!   loses at most the entry being written and never prevents opening. A complete line that
//!   does not parse (corruption, or an entry type from a newer version) is skipped with a
//!   warning too. The truncation is safe because the directory is locked: no other host is
//!   writing that tail.
//!
//! With [`FsyncPolicy::Never`] a process crash still loses at most the entry being written
//! (the kernel has every completed `write`), but a power loss may lose recent entries.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::dir::{DurableHandle, FILE_MODE, FileSync, FsyncPolicy, SessionsDir};
use super::entry::{EntryKind, FORMAT_VERSION, SessionEntry, SessionHeader};
use super::error::StoreError;
use crate::clock::format_iso8601;

/// Longest header line [`SessionFile::read_header`] reads (a header is a few hundred bytes;
/// the working directory and owner key are its only variable parts).
pub(crate) const MAX_HEADER_BYTES: u64 = 64 * 1024;

/// What [`SessionFile::open`] found.
#[derive(Debug)]
pub struct Loaded {
    /// The header.
    pub header: SessionHeader,
    /// Parsed entries in file order.
    pub entries: Vec<SessionEntry>,
    /// Bytes of a torn last line that were skipped.
    pub torn_tail_bytes: usize,
    /// 1-based line numbers of complete lines that did not parse.
    pub skipped_lines: Vec<usize>,
}

/// An open session file, positioned for appending: the one writer of `<dir>/<id>.jsonl`
/// (the journal).
#[derive(Debug)]
pub struct SessionFile {
    dir: SessionsDir,
    sync: Arc<FileSync>,
    next_id: u64,
    /// A failed append could not be rolled back: the file's tail is unknown.
    unusable: bool,
    #[cfg(test)]
    fault: WriteFault,
}

/// Write faults injected by unit tests.
#[cfg(test)]
#[derive(Debug, Default)]
struct WriteFault {
    /// The next write stores this many bytes of its line, then fails with `ENOSPC`.
    partial: Option<usize>,
    /// Rolling back fails.
    truncate: bool,
}

impl SessionFile {
    /// Creates `<dir>/<id>.jsonl` with its header, never replacing an existing file.
    ///
    /// # Errors
    /// [`StoreError::Exists`] if the session exists; [`StoreError::Released`]; I/O failures.
    pub fn create(
        dir: &SessionsDir,
        id: &str,
        cwd: &Path,
        now_ms: u64,
    ) -> Result<Self, StoreError> {
        Self::create_owned(dir, id, cwd, now_ms, None)
    }

    /// As [`SessionFile::create`], recording `owner` (the creating identity's key) in the
    /// header.
    ///
    /// # Errors
    /// As [`SessionFile::create`].
    pub fn create_owned(
        dir: &SessionsDir,
        id: &str,
        cwd: &Path,
        now_ms: u64,
        owner: Option<&str>,
    ) -> Result<Self, StoreError> {
        let path = dir.path().join(format!("{id}.jsonl"));
        let header = SessionHeader {
            kind: "session".into(),
            version: FORMAT_VERSION,
            id: id.to_owned(),
            timestamp: format_iso8601(now_ms),
            cwd: cwd.display().to_string(),
            owner: owner.map(str::to_owned),
        };
        let mut line = serde_json::to_vec(&header).map_err(StoreError::Encode)?;
        line.push(b'\n');
        let tmp = dir.path().join(format!("{id}.jsonl.tmp"));
        let tmp_io = |e| StoreError::Io {
            path: tmp.clone(),
            source: e,
        };
        let _owner = dir.hold()?;
        if path.exists() {
            return Err(StoreError::Exists(id.to_owned()));
        }
        // A leftover of a crashed create of this id; the directory is ours, nobody writes it.
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(tmp_io(e)),
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)
            .map_err(tmp_io)?;
        let written = f.write_all(&line).and_then(|()| match dir.policy() {
            FsyncPolicy::EveryEntry => f.sync_data(),
            FsyncPolicy::Never => Ok(()),
        });
        drop(f);
        let linked = written.map_err(tmp_io).and_then(|()| {
            fs::hard_link(&tmp, &path).map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    StoreError::Exists(id.to_owned())
                } else {
                    StoreError::Io {
                        path: path.clone(),
                        source: e,
                    }
                }
            })
        });
        let removed = fs::remove_file(&tmp);
        linked?;
        removed.map_err(tmp_io)?;
        dir.sync_entries()?;
        let io = |e| StoreError::Io {
            path: path.clone(),
            source: e,
        };
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(Self::new(dir, FileSync::new(path.clone(), file, len), 1))
    }

    /// Opens an existing file: reads it, skips a torn tail (truncating it) and unparseable
    /// lines, tightens its mode to 0600, and positions for appending.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::BadHeader`] if the first line is not a session
    /// header or the path is not a regular file; [`StoreError::Released`]; I/O failures.
    pub fn open(dir: &SessionsDir, path: &Path) -> Result<(Self, Loaded), StoreError> {
        let io = |e: io::Error| {
            if e.kind() == io::ErrorKind::NotFound {
                StoreError::NotFound(path.display().to_string())
            } else {
                StoreError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        };
        let _owner = dir.hold()?;
        // Read-write never blocks on a FIFO, so the type check can follow the open.
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(StoreError::BadHeader(path.display().to_string()));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
                .map_err(io)?;
            tracing::info!(path = %path.display(), from = format!("{mode:04o}"), "tightened a session file to 0600");
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let loaded = parse(path, &bytes)?;
        let keep = (bytes.len() - loaded.torn_tail_bytes) as u64;
        if loaded.torn_tail_bytes > 0 {
            tracing::warn!(
                path = %path.display(),
                bytes = loaded.torn_tail_bytes,
                "session file ends in a torn line (interrupted write); skipping it"
            );
            file.set_len(keep).map_err(io)?;
        }
        let next_id = loaded
            .entries
            .iter()
            .filter_map(|e| u64::from_str_radix(&e.id, 16).ok())
            .max()
            .map_or(1, |m| m.saturating_add(1));
        // The cut is synced with the next append's sync (`fdatasync` covers the length); if
        // it is lost, the tail is torn again and skipped again.
        let this = Self::new(dir, FileSync::new(path.to_path_buf(), file, keep), next_id);
        Ok((this, loaded))
    }

    fn new(dir: &SessionsDir, sync: FileSync, next_id: u64) -> Self {
        Self {
            dir: dir.clone(),
            sync: Arc::new(sync),
            next_id,
            unusable: false,
            #[cfg(test)]
            fault: WriteFault::default(),
        }
    }

    /// Reads a file without opening it for writing (listing).
    ///
    /// # Errors
    /// As [`SessionFile::open`].
    pub fn read(path: &Path) -> Result<Loaded, StoreError> {
        let io = |e: io::Error| StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        // Opening a FIFO read-only would block: look before opening.
        let meta = fs::symlink_metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(StoreError::BadHeader(path.display().to_string()));
        }
        let bytes = fs::read(path).map_err(io)?;
        parse(path, &bytes)
    }

    /// Reads only the header (the first line, at most 64 KiB) of the file at
    /// `path`, without opening it for writing.
    ///
    /// # Errors
    /// [`StoreError::BadHeader`] if the path is not a regular file or its first line is not
    /// a session header; I/O failures.
    pub fn read_header(path: &Path) -> Result<SessionHeader, StoreError> {
        let io = |e: io::Error| StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        };
        let bad = || StoreError::BadHeader(path.display().to_string());
        let meta = fs::symlink_metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(bad());
        }
        let mut first = Vec::new();
        fs::File::open(path)
            .map_err(io)?
            .take(MAX_HEADER_BYTES)
            .read_to_end(&mut first)
            .map_err(io)?;
        let end = first.iter().position(|b| *b == b'\n').ok_or_else(bad)?;
        serde_json::from_slice::<SessionHeader>(&first[..end])
            .ok()
            .filter(|h| h.kind == "session")
            .ok_or_else(bad)
    }

    /// A fresh entry id (8 lowercase hex digits, increasing).
    pub fn allocate_id(&mut self) -> String {
        let id = format!("{:08x}", self.next_id);
        self.next_id = self.next_id.saturating_add(1);
        id
    }

    /// Appends one entry as one line. Returns once the line is written (committed), not
    /// once it is synced: see [`SessionFile::durable_handle`].
    ///
    /// # Errors
    /// Encoding or I/O failure: the file is cut back to its committed length, so it is as
    /// before the call. [`StoreError::Unusable`] after a rollback or a sync failed;
    /// [`StoreError::Released`] after the host gave up the directory.
    pub fn append(&mut self, entry: &SessionEntry) -> Result<(), StoreError> {
        let mut line = serde_json::to_vec(entry).map_err(StoreError::Encode)?;
        line.push(b'\n');
        let dir = self.dir.clone();
        let owner = dir.hold()?;
        if self.unusable || self.sync.sync_failed() {
            return Err(StoreError::Unusable {
                path: self.sync.path.clone(),
            });
        }
        let committed = self.sync.committed.load(Ordering::Acquire);
        if let Err(error) = self.write(&line) {
            self.roll_back(committed, &error);
            return Err(StoreError::Io {
                path: self.sync.path.clone(),
                source: error,
            });
        }
        self.sync
            .committed
            .store(committed + line.len() as u64, Ordering::Release);
        drop(owner);
        self.dir.queue(&self.sync);
        Ok(())
    }

    /// A handle on the durability of everything appended so far. Take it while holding
    /// whatever serialises appends (the session's lock), await it after releasing that.
    pub fn durable_handle(&self) -> DurableHandle {
        DurableHandle::new(&self.sync, self.dir.policy())
    }

    /// Builds and appends an entry with a fresh id; returns the entry.
    ///
    /// # Errors
    /// As [`SessionFile::append`].
    pub fn append_new(
        &mut self,
        parent: Option<&str>,
        now_ms: u64,
        kind: EntryKind,
    ) -> Result<SessionEntry, StoreError> {
        let id = self.allocate_id();
        self.append_with_id(id, parent, now_ms, kind)
    }

    /// Appends an entry with a previously allocated id.
    ///
    /// # Errors
    /// As [`SessionFile::append`].
    pub fn append_with_id(
        &mut self,
        id: String,
        parent: Option<&str>,
        now_ms: u64,
        kind: EntryKind,
    ) -> Result<SessionEntry, StoreError> {
        let entry = SessionEntry {
            id,
            parent_id: parent.map(str::to_owned),
            timestamp: format_iso8601(now_ms),
            kind,
        };
        self.append(&entry)?;
        Ok(entry)
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.sync.path
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        #[cfg(test)]
        if let Some(n) = self.fault.partial.take() {
            (&self.sync.file).write_all(&line[..n.min(line.len())])?;
            return Err(io::Error::from_raw_os_error(28));
        }
        (&self.sync.file).write_all(line)
    }

    /// Cuts the file back to `committed` after a failed write.
    fn roll_back(&mut self, committed: u64, error: &io::Error) {
        #[cfg(test)]
        let cut = if self.fault.truncate {
            Err(io::Error::from_raw_os_error(5))
        } else {
            self.sync.file.set_len(committed)
        };
        #[cfg(not(test))]
        let cut = self.sync.file.set_len(committed);
        match cut {
            Ok(()) => tracing::warn!(
                path = %self.sync.path.display(),
                %error,
                length = committed,
                "appending to a session file failed; cut it back to its last complete entry"
            ),
            Err(cut_error) => {
                self.unusable = true;
                tracing::error!(
                    path = %self.sync.path.display(),
                    %error,
                    %cut_error,
                    "appending to a session file failed and cutting it back failed too; it takes no more appends"
                );
            }
        }
    }
}

pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Loaded, StoreError> {
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let torn_tail_bytes = bytes.len() - complete;
    let mut lines = bytes[..complete]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate();
    let header = lines
        .next()
        .and_then(|(_, l)| serde_json::from_slice::<SessionHeader>(l).ok())
        .filter(|h| h.kind == "session")
        .ok_or_else(|| StoreError::BadHeader(path.display().to_string()))?;
    let mut entries = Vec::new();
    let mut skipped_lines = Vec::new();
    for (i, line) in lines {
        match serde_json::from_slice::<SessionEntry>(line) {
            Ok(e) => entries.push(e),
            Err(error) => {
                tracing::warn!(path = %path.display(), line = i + 1, %error, "skipping an unreadable session entry");
                skipped_lines.push(i + 1);
            }
        }
    }
    Ok(Loaded {
        header,
        entries,
        torn_tail_bytes,
        skipped_lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AgentMessage, UserMessage};

    fn msg(text: &str) -> EntryKind {
        EntryKind::Message {
            message: AgentMessage::User(UserMessage::text(text, 1)),
        }
    }

    const ID: &str = "6f1c2b7e-1d2a-4c3b-8a9d-0e1f2a3b4c5d";

    fn dir(policy: FsyncPolicy) -> (tempfile::TempDir, SessionsDir) {
        let tmp = tempfile::tempdir().unwrap();
        let d = SessionsDir::open(&tmp.path().join("sessions"), policy, 0).unwrap();
        (tmp, d)
    }

    fn create(d: &SessionsDir) -> SessionFile {
        SessionFile::create(d, ID, Path::new("/w"), 0).unwrap()
    }

    fn len(path: &Path) -> u64 {
        fs::metadata(path).unwrap().len()
    }

    #[test]
    fn appended_entries_read_back_in_order() {
        let (_tmp, d) = dir(FsyncPolicy::EveryEntry);
        let mut f = create(&d);
        let a = f.append_new(None, 1, msg("a")).unwrap();
        let b = f.append_new(Some(&a.id), 2, msg("b")).unwrap();
        let loaded = SessionFile::read(f.path()).unwrap();
        assert_eq!(loaded.header.id, ID);
        assert_eq!(loaded.header.cwd, "/w");
        assert_eq!(loaded.entries, vec![a, b]);
        assert_eq!(loaded.torn_tail_bytes, 0);
    }

    #[test]
    fn torn_last_line_is_skipped_and_truncated_before_the_next_append() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let mut f = create(&d);
        let a = f.append_new(None, 1, msg("a")).unwrap();
        let path = f.path().to_path_buf();
        drop(f);
        // Simulate a crash halfway through writing the second entry.
        let full = serde_json::to_string(&SessionEntry {
            id: "00000002".into(),
            parent_id: Some(a.id.clone()),
            timestamp: "t".into(),
            kind: msg("b"),
        })
        .unwrap();
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(&full.as_bytes()[..full.len() / 2]).unwrap();
        drop(raw);

        let (mut f, loaded) = SessionFile::open(&d, &path).unwrap();
        assert_eq!(loaded.entries, vec![a.clone()]);
        assert_eq!(loaded.torn_tail_bytes, full.len() / 2);
        let c = f.append_new(Some(&a.id), 3, msg("c")).unwrap();
        let again = SessionFile::read(&path).unwrap();
        assert_eq!(again.entries, vec![a, c]);
        assert_eq!(again.torn_tail_bytes, 0);
        assert!(again.skipped_lines.is_empty());
    }

    #[test]
    fn unreadable_middle_line_is_skipped_not_fatal() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let mut f = create(&d);
        let a = f.append_new(None, 1, msg("a")).unwrap();
        let path = f.path().to_path_buf();
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(b"{\"id\":\"zz\",\"type\":\"from_the_future\"}\n")
            .unwrap();
        drop(raw);
        // The foreign line moved the end of the file: committed length is re-read on open
        // only, so reopen before appending (as a host does: one writer per file).
        drop(f);
        let (mut f, _) = SessionFile::open(&d, &path).unwrap();
        let b = f.append_new(Some(&a.id), 2, msg("b")).unwrap();
        let loaded = SessionFile::read(&path).unwrap();
        assert_eq!(loaded.entries, vec![a, b]);
        assert_eq!(loaded.skipped_lines, vec![3]);
    }

    #[test]
    fn ids_continue_after_reopen() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let mut f = create(&d);
        f.append_new(None, 1, msg("a")).unwrap();
        f.append_new(None, 1, msg("b")).unwrap();
        let path = f.path().to_path_buf();
        drop(f);
        let (mut f, _) = SessionFile::open(&d, &path).unwrap();
        assert_eq!(f.allocate_id(), "00000003");
    }

    #[test]
    fn creating_an_existing_session_fails_and_leaves_it_untouched() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let mut f = create(&d);
        f.append_new(None, 1, msg("a")).unwrap();
        let before = fs::read(f.path()).unwrap();
        assert!(matches!(
            SessionFile::create(&d, ID, Path::new("/elsewhere"), 9),
            Err(StoreError::Exists(_))
        ));
        assert_eq!(fs::read(f.path()).unwrap(), before);
        assert!(!d.path().join(format!("{ID}.jsonl.tmp")).exists());
    }

    #[test]
    fn session_files_are_created_0600_and_tightened_on_open() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let f = create(&d);
        let path = f.path().to_path_buf();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&path), 0o600);
        drop(f);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        SessionFile::open(&d, &path).unwrap();
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn a_failed_partial_append_is_cut_back_and_the_next_entry_lands_on_a_clean_line() {
        let (_tmp, d) = dir(FsyncPolicy::EveryEntry);
        let mut f = create(&d);
        let a = f.append_new(None, 1, msg("a")).unwrap();
        let path = f.path().to_path_buf();
        let committed = len(&path);

        f.fault.partial = Some(17);
        let err = f.append_new(Some(&a.id), 2, msg("lost")).unwrap_err();
        assert!(
            matches!(&err, StoreError::Io { source, .. } if source.raw_os_error() == Some(28)),
            "{err:?}"
        );
        assert_eq!(len(&path), committed, "the fragment was cut off");

        let b = f.append_new(Some(&a.id), 3, msg("b")).unwrap();
        let loaded = SessionFile::read(&path).unwrap();
        assert_eq!(loaded.entries, vec![a.clone(), b.clone()]);
        assert!(loaded.skipped_lines.is_empty());
        assert_eq!(loaded.torn_tail_bytes, 0);
        drop(f);
        let (_, reopened) = SessionFile::open(&d, &path).unwrap();
        assert_eq!(reopened.entries, vec![a, b]);
    }

    #[test]
    fn a_failed_rollback_makes_the_file_refuse_appends_so_nothing_is_glued() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let mut f = create(&d);
        let a = f.append_new(None, 1, msg("a")).unwrap();
        f.fault.partial = Some(5);
        f.fault.truncate = true;
        f.append_new(Some(&a.id), 2, msg("lost")).unwrap_err();
        assert!(matches!(
            f.append_new(Some(&a.id), 3, msg("b")),
            Err(StoreError::Unusable { .. })
        ));
        // The fragment is a torn tail: reopening skips and cuts it.
        let path = f.path().to_path_buf();
        drop(f);
        let (mut f, loaded) = SessionFile::open(&d, &path).unwrap();
        assert_eq!(loaded.entries, vec![a.clone()]);
        assert_eq!(loaded.torn_tail_bytes, 5);
        let c = f.append_new(Some(&a.id), 4, msg("c")).unwrap();
        assert_eq!(SessionFile::read(&path).unwrap().entries, vec![a, c]);
    }

    #[tokio::test]
    async fn append_returns_before_the_sync_and_the_handle_resolves_after_it() {
        let (_tmp, d) = dir(FsyncPolicy::EveryEntry);
        let mut f = create(&d);
        let (open_gate, gate) = std::sync::mpsc::channel();
        *f.sync.test.gate.lock() = Some(gate);

        // The sync thread is parked in the gate; appends still return.
        f.append_new(None, 1, msg("a")).unwrap();
        f.append_new(None, 2, msg("b")).unwrap();
        let handle = f.durable_handle();
        let mut wait = std::pin::pin!(handle.wait());
        tokio::select! {
            biased;
            _ = &mut wait => panic!("durable while the sync was parked"),
            () = std::future::ready(()) => {}
        }

        // One release may cover both appends (group commit); two always do.
        open_gate.send(()).unwrap();
        open_gate.send(()).unwrap();
        wait.await.unwrap();
        d.flush().await;
    }

    #[tokio::test]
    async fn a_failed_sync_fails_the_waiters_and_every_later_append() {
        let (_tmp, d) = dir(FsyncPolicy::EveryEntry);
        let mut f = create(&d);
        *f.sync.test.fail.lock() = Some(5);
        f.append_new(None, 1, msg("a")).unwrap();
        let err = f.durable_handle().wait().await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Io { source, .. } if source.kind() == io::Error::from_raw_os_error(5).kind()),
            "{err:?}"
        );
        assert!(matches!(
            f.append_new(None, 2, msg("b")),
            Err(StoreError::Unusable { .. })
        ));
    }

    #[tokio::test]
    async fn without_fsync_the_handle_resolves_at_once() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let mut f = create(&d);
        f.append_new(None, 1, msg("a")).unwrap();
        f.durable_handle().wait().await.unwrap();
    }

    #[test]
    fn a_released_directory_refuses_appends_and_opens() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let mut f = create(&d);
        let path = f.path().to_path_buf();
        d.release();
        assert!(matches!(
            f.append_new(None, 1, msg("a")),
            Err(StoreError::Released { .. })
        ));
        assert!(matches!(
            SessionFile::open(&d, &path),
            Err(StoreError::Released { .. })
        ));
        assert_eq!(SessionFile::read(&path).unwrap().entries, vec![]);
    }

    #[test]
    fn a_fifo_in_place_of_a_session_file_is_refused_without_blocking() {
        let (_tmp, d) = dir(FsyncPolicy::Never);
        let path = d.path().join(format!("{ID}.jsonl"));
        // mknodat(2) makes the FIFO on every Unix, so this test has nothing to skip.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            SessionFile::read(&path),
            Err(StoreError::BadHeader(_))
        ));
        assert!(matches!(
            SessionFile::open(&d, &path),
            Err(StoreError::BadHeader(_))
        ));
    }
}
