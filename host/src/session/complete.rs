//! `@path` completion: the workspace entries whose path starts with what the user typed.
//!
//! Always confined to the session's working directory, whatever the tools' confinement:
//! a prefix that is absolute, holds `..` or a NUL, or whose directory resolves (through a
//! symlink) outside the workspace is refused; a symlink inside it that points outside is not
//! listed, and no symlink is followed except to tell whether it names a directory inside the
//! workspace. Bounded: at most [`MAX_COMPLETIONS`] entries are returned and at most
//! [`MAX_SCANNED_ENTRIES`] directory entries are read per call.

use std::path::{Component, Path, PathBuf};

use super::error::SessionError;
use super::runtime::SessionRuntime;

/// Most entries one completion returns.
pub const MAX_COMPLETIONS: usize = 50;
/// Most directory entries one completion reads (a huge directory is listed in part).
pub const MAX_SCANNED_ENTRIES: usize = 10_000;
/// Longest prefix accepted, in bytes.
pub const MAX_COMPLETION_PREFIX_BYTES: usize = 4096;

/// One completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathCompletion {
    /// Workspace-relative path (`src/main.rs`; a directory ends with `/`).
    pub path: String,
    /// True for a directory.
    pub dir: bool,
}

/// What a completion found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Completions {
    /// Matches, sorted by path.
    pub entries: Vec<PathCompletion>,
    /// True when more matched than were returned (or the directory was too large to read
    /// whole).
    pub truncated: bool,
}

impl SessionRuntime {
    /// The workspace entries whose relative path starts with `prefix` (see the module rules).
    ///
    /// # Errors
    /// [`SessionError::PathRefused`] for a prefix that would leave the workspace, is too long,
    /// or names a directory that cannot be read.
    pub async fn complete_path(&self, prefix: &str) -> Result<Completions, SessionError> {
        let cwd = self.cwd().to_path_buf();
        let prefix = prefix.to_owned();
        tokio::task::spawn_blocking(move || complete(&cwd, &prefix))
            .await
            .map_err(|_| SessionError::Closed)?
    }
}

/// [`SessionRuntime::complete_path`] over the workspace `cwd` (blocking).
///
/// # Errors
/// As [`SessionRuntime::complete_path`].
pub(super) fn complete(cwd: &Path, prefix: &str) -> Result<Completions, SessionError> {
    let refuse = |why: &str| SessionError::PathRefused(why.to_owned());
    if prefix.len() > MAX_COMPLETION_PREFIX_BYTES {
        return Err(SessionError::PathRefused(format!(
            "the prefix is {} bytes; the limit is {MAX_COMPLETION_PREFIX_BYTES}",
            prefix.len()
        )));
    }
    if prefix.contains('\0') {
        return Err(refuse("the prefix contains a NUL byte"));
    }
    let (dir_part, name_part) = match prefix.rfind('/') {
        Some(i) => (&prefix[..=i], &prefix[i + 1..]),
        None => ("", prefix),
    };
    let rel = Path::new(dir_part);
    for c in rel.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(refuse("the prefix may not contain `..`")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse("the prefix must be relative to the workspace"));
            }
        }
    }
    let root = std::fs::canonicalize(cwd)
        .map_err(|e| SessionError::PathRefused(format!("the workspace cannot be read: {e}")))?;
    let dir = match std::fs::canonicalize(root.join(rel)) {
        Ok(d) => d,
        // A directory that does not exist completes to nothing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Completions::default()),
        Err(e) => return Err(SessionError::PathRefused(format!("{dir_part}: {e}"))),
    };
    if !dir.starts_with(&root) {
        return Err(refuse("the prefix's directory is outside the workspace"));
    }
    let read = std::fs::read_dir(&dir)
        .map_err(|e| SessionError::PathRefused(format!("{dir_part}: {e}")))?;
    let mut out = Completions::default();
    let mut matched: Vec<PathCompletion> = Vec::new();
    for (scanned, entry) in read.enumerate() {
        if scanned >= MAX_SCANNED_ENTRIES {
            out.truncated = true;
            break;
        }
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        // Names that are not UTF-8 cannot be typed into a prompt.
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(name_part) || (name.starts_with('.') && !name_part.starts_with('.')) {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let dir_entry = if kind.is_symlink() {
            match inside_target(&entry.path(), &root) {
                Some(target) => target.is_dir(),
                // A link out of the workspace (or a dangling one) is not offered.
                None => continue,
            }
        } else {
            kind.is_dir()
        };
        let mut path = format!("{dir_part}{name}");
        if dir_entry {
            path.push('/');
        }
        matched.push(PathCompletion {
            path,
            dir: dir_entry,
        });
    }
    matched.sort_by(|a, b| a.path.cmp(&b.path));
    if matched.len() > MAX_COMPLETIONS {
        matched.truncate(MAX_COMPLETIONS);
        out.truncated = true;
    }
    out.entries = matched;
    Ok(out)
}

/// The canonical target of symlink `link` when it is inside `root`.
fn inside_target(link: &Path, root: &Path) -> Option<PathBuf> {
    let target = std::fs::canonicalize(link).ok()?;
    target.starts_with(root).then_some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(c: &Completions) -> Vec<&str> {
        c.entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn entries_matching_the_prefix_are_listed_with_directories_marked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "").unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();
        std::fs::write(dir.path().join("setup.py"), "").unwrap();
        std::fs::write(dir.path().join(".hidden"), "").unwrap();
        let c = complete(dir.path(), "s").unwrap();
        assert_eq!(paths(&c), ["setup.py", "src/"]);
        assert!(c.entries[1].dir);
        assert_eq!(
            paths(&complete(dir.path(), "src/").unwrap()),
            ["src/lib.rs", "src/main.rs"]
        );
        assert_eq!(
            paths(&complete(dir.path(), "src/m").unwrap()),
            ["src/main.rs"]
        );
        assert_eq!(paths(&complete(dir.path(), ".").unwrap()), [".hidden"]);
        assert!(complete(dir.path(), "nope/x").unwrap().entries.is_empty());
    }

    #[test]
    fn prefixes_that_leave_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["../", "/etc/", "a/../../", "x\0"] {
            assert!(
                matches!(complete(dir.path(), bad), Err(SessionError::PathRefused(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn symlinks_out_of_the_workspace_are_neither_listed_nor_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::fs::create_dir(dir.path().join("in")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("in"), dir.path().join("inlink")).unwrap();
        let c = complete(dir.path(), "").unwrap();
        assert_eq!(paths(&c), ["in/", "inlink/"]);
        assert!(matches!(
            complete(dir.path(), "out/"),
            Err(SessionError::PathRefused(_))
        ));
    }

    #[test]
    fn results_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_COMPLETIONS + 5 {
            std::fs::write(dir.path().join(format!("f{i:03}")), "").unwrap();
        }
        let c = complete(dir.path(), "f").unwrap();
        assert_eq!(c.entries.len(), MAX_COMPLETIONS);
        assert!(c.truncated);
        assert!(complete(dir.path(), &"a".repeat(MAX_COMPLETION_PREFIX_BYTES + 1)).is_err());
    }
}
