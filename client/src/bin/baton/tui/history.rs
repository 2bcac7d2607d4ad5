//! Prompt history: recalled with Up/Down, kept across runs in a private file
//! (`$XDG_STATE_HOME/baton/history`, else `~/.local/state/baton/history`, mode 0600), one
//! JSON string per line so multi-line prompts survive.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use baton_protocol::Value;
use baton_protocol::unix::BaseDir;

/// Entries kept (older ones are dropped, in memory and in the file).
pub(crate) const HISTORY_LIMIT: usize = 1000;
/// Longest entry kept (characters); longer prompts are sent but not remembered.
pub(crate) const MAX_HISTORY_ENTRY_CHARS: usize = 64 * 1024;

/// The history and the position of a recall in progress.
#[derive(Debug, Default)]
pub(crate) struct History {
    entries: Vec<String>,
    /// Index being shown while recalling (`None`: editing a fresh line).
    at: Option<usize>,
    /// The line being typed before the recall started.
    draft: String,
    path: Option<PathBuf>,
}

/// Where the history file lives for this user: `baton/history` under the XDG state directory
/// (`None` without a usable one).
pub(crate) fn default_path() -> Option<PathBuf> {
    Some(BaseDir::State.from_env()?.join("baton").join("history"))
}

impl History {
    /// Loads `path` (a missing or unreadable file is an empty history); entries added later
    /// are appended to it.
    pub(crate) fn load(path: Option<PathBuf>) -> Self {
        let entries = path
            .as_deref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .map(|text| parse(&text))
            .unwrap_or_default();
        Self {
            entries,
            at: None,
            draft: String::new(),
            path,
        }
    }

    /// The entries, oldest first.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Remembers a sent line (not an immediate repeat) and ends any recall. A failure to
    /// write the file is returned for the UI to mention once; the entry is kept in memory.
    pub(crate) fn push(&mut self, line: &str) -> Result<(), String> {
        self.at = None;
        self.draft.clear();
        if line.trim().is_empty()
            || line.chars().count() > MAX_HISTORY_ENTRY_CHARS
            || self.entries.last().is_some_and(|l| l == line)
        {
            return Ok(());
        }
        self.entries.push(line.to_owned());
        let trimmed = self.entries.len() > HISTORY_LIMIT;
        if trimmed {
            let excess = self.entries.len() - HISTORY_LIMIT;
            self.entries.drain(..excess);
        }
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        let result = if trimmed {
            rewrite(&path, &self.entries)
        } else {
            append(&path, line)
        };
        result.map_err(|e| format!("cannot save history to {}: {e}", path.display()))
    }

    /// Up: the previous entry (`current` is the line being edited, kept as the draft).
    pub(crate) fn older(&mut self, current: &str) -> Option<&str> {
        let next = match self.at {
            None if self.entries.is_empty() => return None,
            None => {
                self.draft = current.to_owned();
                self.entries.len() - 1
            }
            Some(0) => return None,
            Some(i) => i - 1,
        };
        self.at = Some(next);
        self.entries.get(next).map(String::as_str)
    }

    /// Down: the next entry, then back to the draft.
    pub(crate) fn newer(&mut self) -> Option<String> {
        let i = self.at?;
        if i + 1 < self.entries.len() {
            self.at = Some(i + 1);
            return self.entries.get(i + 1).cloned();
        }
        self.at = None;
        Some(std::mem::take(&mut self.draft))
    }
}

fn parse(text: &str) -> Vec<String> {
    let mut entries: Vec<String> = text
        .lines()
        .filter_map(|l| Value::from_json(l).ok())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let excess = entries.len().saturating_sub(HISTORY_LIMIT);
    entries.drain(..excess);
    entries
}

fn open_private(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .open(path)?;
    // A file made earlier with wider permissions is narrowed: prompts can hold secrets.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

fn append(path: &Path, line: &str) -> std::io::Result<()> {
    let mut f = open_private(path, true)?;
    writeln!(f, "{}", Value::from(line).to_json())
}

fn rewrite(path: &Path, entries: &[String]) -> std::io::Result<()> {
    let mut out = String::new();
    for e in entries {
        out.push_str(&Value::from(e.as_str()).to_json());
        out.push('\n');
    }
    open_private(path, false)?.write_all(out.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_recalls_older_entries_and_down_returns_to_the_draft() {
        let mut h = History::load(None);
        h.push("one").unwrap();
        h.push("two").unwrap();
        assert_eq!(h.older("draft"), Some("two"));
        assert_eq!(h.older("two"), Some("one"));
        assert_eq!(h.older("one"), None);
        assert_eq!(h.newer().as_deref(), Some("two"));
        assert_eq!(h.newer().as_deref(), Some("draft"));
        assert_eq!(h.newer(), None);
    }

    #[test]
    fn immediate_repeats_and_blank_lines_are_not_remembered() {
        let mut h = History::load(None);
        for l in ["a", "a", "  ", "b"] {
            h.push(l).unwrap();
        }
        assert_eq!(h.entries(), ["a", "b"]);
    }

    #[test]
    fn the_file_is_private_keeps_multi_line_entries_and_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/baton/history");
        let mut h = History::load(Some(path.clone()));
        h.push("first\nsecond line").unwrap();
        h.push("plain").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = History::load(Some(path.clone()));
        assert_eq!(again.entries(), ["first\nsecond line", "plain"]);

        let mut h = again;
        for i in 0..HISTORY_LIMIT + 5 {
            h.push(&format!("p{i}")).unwrap();
        }
        let reloaded = History::load(Some(path));
        assert_eq!(reloaded.entries().len(), HISTORY_LIMIT);
        assert_eq!(
            reloaded.entries().last().unwrap(),
            &format!("p{}", HISTORY_LIMIT + 4)
        );
    }

    #[test]
    fn a_corrupt_file_loses_only_its_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history");
        std::fs::write(&path, "\"ok\"\nnot json\n42\n\"also ok\"\n").unwrap();
        assert_eq!(History::load(Some(path)).entries(), ["ok", "also ok"]);
    }
}
