//! One session's append-only JSONL file.
//!
//! # Durability contract
//!
//! * **Creation** writes the header to `<id>.jsonl.tmp`, syncs it and renames it into place,
//!   so a session file always starts with a complete header.
//! * **Append** serialises the entry to one buffer (`line + "\n"`) and writes it with a single
//!   `write_all` on a file opened with `O_APPEND`, then, with [`FsyncPolicy::EveryEntry`] (the
//!   default), `fdatasync`s. An entry is committed once its newline is on disk.
//! * **Open** reads every line. Bytes after the last newline are a torn write: they are
//!   skipped with a warning and truncated away before the next append, so a crash mid-write
//!   loses at most the entry being written and never prevents opening. A complete line that
//!   does not parse (corruption, or an entry type from a newer version) is skipped with a
//!   warning too.
//!
//! With [`FsyncPolicy::Never`] a process crash still loses at most the entry being written
//! (the kernel has every completed `write`), but a power loss may lose recent entries.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::entry::{EntryKind, FORMAT_VERSION, SessionEntry, SessionHeader};
use super::error::StoreError;
use crate::clock::format_iso8601;

/// When appends are flushed to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// `fdatasync` after every entry.
    #[default]
    EveryEntry,
    /// Leave flushing to the operating system.
    Never,
}

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

/// An open session file, positioned for appending.
#[derive(Debug)]
pub struct SessionFile {
    path: PathBuf,
    file: File,
    fsync: FsyncPolicy,
    next_id: u64,
}

impl SessionFile {
    /// Creates `<dir>/<id>.jsonl` with its header.
    ///
    /// # Errors
    /// [`StoreError::Exists`] if the session exists; I/O failures.
    pub fn create(
        dir: &Path,
        id: &str,
        cwd: &Path,
        now_ms: u64,
        fsync: FsyncPolicy,
    ) -> Result<Self, StoreError> {
        let path = dir.join(format!("{id}.jsonl"));
        if path.exists() {
            return Err(StoreError::Exists(id.to_owned()));
        }
        let header = SessionHeader {
            kind: "session".into(),
            version: FORMAT_VERSION,
            id: id.to_owned(),
            timestamp: format_iso8601(now_ms),
            cwd: cwd.display().to_string(),
        };
        let mut line = serde_json::to_vec(&header).map_err(StoreError::Encode)?;
        line.push(b'\n');
        let tmp = dir.join(format!("{id}.jsonl.tmp"));
        let io = |e| StoreError::Io {
            path: tmp.clone(),
            source: e,
        };
        let mut f = File::create(&tmp).map_err(io)?;
        f.write_all(&line).map_err(io)?;
        f.sync_all().map_err(io)?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| StoreError::Io {
            path: path.clone(),
            source: e,
        })?;
        if fsync == FsyncPolicy::EveryEntry
            && let Ok(d) = File::open(dir)
        {
            let _ = d.sync_all();
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| StoreError::Io {
                path: path.clone(),
                source: e,
            })?;
        Ok(Self {
            path,
            file,
            fsync,
            next_id: 1,
        })
    }

    /// Opens an existing file: reads it, skips a torn tail (truncating it) and unparseable
    /// lines, and positions for appending.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; [`StoreError::BadHeader`] if the first line is not a session
    /// header; I/O failures.
    pub fn open(path: &Path, fsync: FsyncPolicy) -> Result<(Self, Loaded), StoreError> {
        let io = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::NotFound {
                StoreError::NotFound(path.display().to_string())
            } else {
                StoreError::Io {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
        };
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let loaded = parse(path, &bytes)?;
        if loaded.torn_tail_bytes > 0 {
            tracing::warn!(
                path = %path.display(),
                bytes = loaded.torn_tail_bytes,
                "session file ends in a torn line (interrupted write); skipping it"
            );
            let keep = (bytes.len() - loaded.torn_tail_bytes) as u64;
            file.set_len(keep).map_err(io)?;
        }
        let next_id = loaded
            .entries
            .iter()
            .filter_map(|e| u64::from_str_radix(&e.id, 16).ok())
            .max()
            .map_or(1, |m| m + 1);
        Ok((
            Self {
                path: path.to_path_buf(),
                file,
                fsync,
                next_id,
            },
            loaded,
        ))
    }

    /// Reads a file without opening it for writing (listing).
    ///
    /// # Errors
    /// As [`SessionFile::open`].
    pub fn read(path: &Path) -> Result<Loaded, StoreError> {
        let bytes = fs::read(path).map_err(|e| StoreError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        parse(path, &bytes)
    }

    /// A fresh entry id (8 lowercase hex digits, increasing).
    pub fn allocate_id(&mut self) -> String {
        let id = format!("{:08x}", self.next_id);
        self.next_id += 1;
        id
    }

    /// Appends one entry as one line.
    ///
    /// # Errors
    /// Encoding or I/O failure; the file is unchanged or ends in a torn line that the next
    /// open skips.
    pub fn append(&mut self, entry: &SessionEntry) -> Result<(), StoreError> {
        let mut line = serde_json::to_vec(entry).map_err(StoreError::Encode)?;
        line.push(b'\n');
        let io = |e| StoreError::Io {
            path: self.path.clone(),
            source: e,
        };
        self.file.write_all(&line).map_err(io)?;
        if self.fsync == FsyncPolicy::EveryEntry {
            self.file.sync_data().map_err(io)?;
        }
        Ok(())
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
        &self.path
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

    #[test]
    fn appended_entries_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut f =
            SessionFile::create(dir.path(), ID, Path::new("/w"), 0, FsyncPolicy::EveryEntry)
                .unwrap();
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
        let dir = tempfile::tempdir().unwrap();
        let mut f =
            SessionFile::create(dir.path(), ID, Path::new("/w"), 0, FsyncPolicy::Never).unwrap();
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

        let (mut f, loaded) = SessionFile::open(&path, FsyncPolicy::Never).unwrap();
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
        let dir = tempfile::tempdir().unwrap();
        let mut f =
            SessionFile::create(dir.path(), ID, Path::new("/w"), 0, FsyncPolicy::Never).unwrap();
        let a = f.append_new(None, 1, msg("a")).unwrap();
        let path = f.path().to_path_buf();
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(b"{\"id\":\"zz\",\"type\":\"from_the_future\"}\n")
            .unwrap();
        drop(raw);
        let b = f.append_new(Some(&a.id), 2, msg("b")).unwrap();
        let loaded = SessionFile::read(&path).unwrap();
        assert_eq!(loaded.entries, vec![a, b]);
        assert_eq!(loaded.skipped_lines, vec![3]);
    }

    #[test]
    fn ids_continue_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut f =
            SessionFile::create(dir.path(), ID, Path::new("/w"), 0, FsyncPolicy::Never).unwrap();
        f.append_new(None, 1, msg("a")).unwrap();
        f.append_new(None, 1, msg("b")).unwrap();
        let path = f.path().to_path_buf();
        drop(f);
        let (mut f, _) = SessionFile::open(&path, FsyncPolicy::Never).unwrap();
        assert_eq!(f.allocate_id(), "00000003");
    }

    #[test]
    fn creating_an_existing_session_fails() {
        let dir = tempfile::tempdir().unwrap();
        SessionFile::create(dir.path(), ID, Path::new("/w"), 0, FsyncPolicy::Never).unwrap();
        assert!(matches!(
            SessionFile::create(dir.path(), ID, Path::new("/w"), 0, FsyncPolicy::Never),
            Err(StoreError::Exists(_))
        ));
    }
}
