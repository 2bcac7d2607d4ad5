//! Where the file tools may go, and how they open and replace files.
//!
//! A path is resolved against the session's working directory (the *workspace*) and
//! canonicalised; when [`FileAccess`] is confined (the default) a path whose canonical form is
//! not inside the canonical workspace is refused, whether it got there through `..`, an
//! absolute path or a symlink. A file that does not exist yet is placed by its nearest existing
//! ancestor, which must be inside, and the rest of the path may not contain `..`.
//!
//! Opening is race-resistant where that is cheap: the final component is opened with
//! `O_NOFOLLOW` (a symlink swapped in after the check is refused), and the opened file's real
//! path is read back from `/proc/self/fd` and checked again. Replacing a file writes a
//! temporary file in the same directory and renames it over the target, so a reader sees the
//! old or the new content, never a mix.
//!
//! [`PathLocks`] serialise the calls of one session that touch the same file: a `read`,
//! `write` or `edit` holds its file's lock from before it reads until after it replaced the
//! file, so two edits of one file in one parallel batch both land.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::AsyncWriteExt;
use tokio::sync::OwnedMutexGuard;

use super::{ToolError, resolve_path};

/// How the `read`, `write` and `edit` tools of one session treat paths: confined to the
/// workspace or not, and the per-file locks they share. Clones share the locks.
#[derive(Debug, Clone)]
pub struct FileAccess {
    confine: bool,
    locks: PathLocks,
}

impl FileAccess {
    /// Paths must stay inside the working directory (the default).
    pub fn confined() -> Self {
        Self {
            confine: true,
            locks: PathLocks::default(),
        }
    }

    /// Any path the host user can reach is allowed (still canonicalised, locked, and opened
    /// without following a final symlink swapped in late; non-regular files are still refused).
    pub fn unconfined() -> Self {
        Self {
            confine: false,
            locks: PathLocks::default(),
        }
    }

    /// Whether paths are confined to the working directory.
    pub fn is_confined(&self) -> bool {
        self.confine
    }

    /// The locks shared by the tools holding this access.
    pub(crate) fn locks(&self) -> &PathLocks {
        &self.locks
    }

    /// `path` (as the model wrote it) resolved for a file that must exist.
    pub(crate) async fn existing(&self, cwd: &Path, path: &str) -> Result<Resolved, ToolError> {
        let root = self.root(cwd).await?;
        let joined = resolve_path(cwd, path);
        let real = tokio::fs::canonicalize(&joined)
            .await
            .map_err(|e| ToolError::io(&joined, &e))?;
        self.check(path, &real, &root)?;
        Ok(Resolved { real, root })
    }

    /// `path` resolved for a file that may not exist yet: the existing part is canonicalised
    /// and checked, the rest is appended (it may not contain `..`).
    pub(crate) async fn creatable(&self, cwd: &Path, path: &str) -> Result<Resolved, ToolError> {
        let root = self.root(cwd).await?;
        let real = canonical_creatable(path, &resolve_path(cwd, path)).await?;
        self.check(path, &real, &root)?;
        Ok(Resolved { real, root })
    }

    /// The key that orders the calls of one batch on `path`: its canonical form as
    /// [`FileAccess::creatable`] computes it (so a file an earlier call of the batch creates,
    /// and a symlink to a file, key alike), without the confinement check (a refused call
    /// fails when it runs); the lexical path when even that cannot be computed.
    pub(crate) async fn order_key(&self, cwd: &Path, path: &str) -> PathBuf {
        let joined = resolve_path(cwd, path);
        canonical_creatable(path, &joined).await.unwrap_or(joined)
    }

    async fn root(&self, cwd: &Path) -> Result<PathBuf, ToolError> {
        tokio::fs::canonicalize(cwd)
            .await
            .map_err(|e| ToolError::new(format!("workspace {}: {e}", cwd.display())))
    }

    fn check(&self, path: &str, real: &Path, root: &Path) -> Result<(), ToolError> {
        if !self.confine || real.starts_with(root) {
            return Ok(());
        }
        Err(outside(path, real, root))
    }

    /// Checks, through `/proc/self/fd`, that the opened `file` really is inside the workspace
    /// (a directory swapped for a symlink between the check and the open is caught here).
    /// Without `/proc` the check before opening stands alone.
    pub(crate) async fn verify_open(
        &self,
        path: &str,
        file: &tokio::fs::File,
        root: &Path,
    ) -> Result<(), ToolError> {
        if !self.confine {
            return Ok(());
        }
        let link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        match tokio::fs::read_link(&link).await {
            Ok(real) if !real.starts_with(root) => Err(outside(path, &real, root)),
            Ok(_) | Err(_) => Ok(()),
        }
    }
}

impl Default for FileAccess {
    fn default() -> Self {
        Self::confined()
    }
}

/// `joined` canonicalised for a file that may not exist yet: the existing part is
/// canonicalised, the rest is appended (it may not contain `..`).
async fn canonical_creatable(path: &str, joined: &Path) -> Result<PathBuf, ToolError> {
    let mut rest: Vec<OsString> = Vec::new();
    let mut probe = joined;
    loop {
        match tokio::fs::canonicalize(probe).await {
            Ok(base) => {
                let mut real = base;
                for part in rest.iter().rev() {
                    real.push(part);
                }
                return Ok(real);
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let (Some(parent), Some(Component::Normal(name))) =
                    (probe.parent(), probe.components().next_back())
                else {
                    return Err(ToolError::new(format!(
                        "refused: {path} has `..` after a directory that does not exist"
                    )));
                };
                rest.push(name.to_owned());
                probe = parent;
            }
            Err(e) => return Err(ToolError::io(probe, &e)),
        }
    }
}

fn outside(path: &str, real: &Path, root: &Path) -> ToolError {
    ToolError::new(format!(
        "refused: {path} resolves to {}, which is outside the workspace {}",
        real.display(),
        root.display()
    ))
}

/// A path the checks accepted.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// Canonical path of the file (for a new file: canonical parent plus the new names).
    pub(crate) real: PathBuf,
    /// Canonical workspace.
    pub(crate) root: PathBuf,
}

/// `O_NOFOLLOW | O_NONBLOCK`: a final symlink is refused (`ELOOP`), and opening a FIFO or a
/// device never waits for a peer.
fn open_flags() -> i32 {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    // The flag bits are small positive constants; the cast cannot wrap.
    flags.bits().cast_signed()
}

/// Opens the resolved regular file for reading: never follows a final symlink, never blocks on
/// a FIFO, and refuses anything but a regular file.
pub(crate) async fn open_regular(
    access: &FileAccess,
    path: &str,
    resolved: &Resolved,
) -> Result<(tokio::fs::File, std::fs::Metadata), ToolError> {
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(open_flags())
        .open(&resolved.real)
        .await
        .map_err(|e| open_error(path, &resolved.real, &e))?;
    let meta = file
        .metadata()
        .await
        .map_err(|e| ToolError::io(&resolved.real, &e))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    access.verify_open(path, &file, &resolved.root).await?;
    Ok((file, meta))
}

fn open_error(path: &str, real: &Path, e: &std::io::Error) -> ToolError {
    if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
        ToolError::new(format!(
            "refused: {path} became a symlink while it was being opened"
        ))
    } else {
        ToolError::io(real, e)
    }
}

/// The error for a path that is a directory, FIFO, socket or device.
pub(crate) fn not_regular(path: &str, meta: &std::fs::Metadata) -> ToolError {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let kind = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    ToolError::new(format!("refused: {path} is {kind}, not a regular file"))
}

/// Makes each temporary file name unique within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Most tries at a fresh temporary name before giving up.
const TEMP_ATTEMPTS: usize = 16;

/// Replaces (or creates) the regular file `target` with `contents` atomically: a temporary file
/// in the same directory, written and synced, then renamed over `target`. `mode` is the
/// permission bits to give it (an existing file's, to keep them); `None` uses the default for
/// new files (`0o666` less the umask).
pub(crate) async fn replace_file(
    access: &FileAccess,
    path: &str,
    resolved: &Resolved,
    contents: &[u8],
    mode: Option<u32>,
) -> Result<(), ToolError> {
    let target = &resolved.real;
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(ToolError::new(format!("refused: {path} names no file")));
    };
    // A short prefix of the name keeps the temporary name within NAME_MAX.
    let stem: String = name.to_string_lossy().chars().take(64).collect();
    let mut created = None;
    for _ in 0..TEMP_ATTEMPTS {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{stem}.baton-{}-{n}.tmp", std::process::id()));
        match tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode.unwrap_or(0o666))
            .custom_flags(open_flags())
            .open(&tmp)
            .await
        {
            Ok(file) => {
                created = Some((tmp, file));
                break;
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ToolError::io(&tmp, &e)),
        }
    }
    let Some((tmp, mut file)) = created else {
        return Err(ToolError::new(format!(
            "{}: no free temporary name",
            dir.display()
        )));
    };
    let written = async {
        access.verify_open(path, &file, &resolved.root).await?;
        if let Some(mode) = mode {
            // The create mode was filtered by the umask; restore the original bits exactly.
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .await
                .map_err(|e| ToolError::io(&tmp, &e))?;
        }
        file.write_all(contents)
            .await
            .map_err(|e| ToolError::io(&tmp, &e))?;
        file.sync_all().await.map_err(|e| ToolError::io(&tmp, &e))?;
        drop(file);
        tokio::fs::rename(&tmp, target)
            .await
            .map_err(|e| ToolError::io(target, &e))
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    written
}

/// Per-session locks keyed by canonical path. An entry lives while some call holds or waits
/// for it; released entries are swept on every acquire and release, so the map is bounded by
/// the calls in flight.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathLocks {
    inner: Arc<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>,
}

impl PathLocks {
    /// Waits for the lock of `path` (a canonical path). Cancel-safe.
    pub(crate) async fn lock(&self, path: &Path) -> PathGuard {
        let entry = {
            let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            sweep(&mut map);
            Arc::clone(map.entry(path.to_path_buf()).or_default())
        };
        let held = entry.lock_owned().await;
        PathGuard {
            held: Some(held),
            locks: self.clone(),
        }
    }

    /// Entries in the map (tests check that they are cleaned up).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let mut map = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        sweep(&mut map);
        map.len()
    }
}

/// Drops the entries only the map still refers to.
fn sweep(map: &mut HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>) {
    map.retain(|_, m| Arc::strong_count(m) > 1);
}

/// Holds one path's lock; releasing it removes the entry when nobody else wants it.
#[derive(Debug)]
pub(crate) struct PathGuard {
    held: Option<OwnedMutexGuard<()>>,
    locks: PathLocks,
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut map = self
            .locks
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sweep(&mut map);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_path_lock_serialises_holders_and_its_entry_goes_away() {
        let locks = PathLocks::default();
        let a = locks.lock(Path::new("/w/a")).await;
        let b = locks.lock(Path::new("/w/b")).await;
        assert_eq!(locks.len(), 2);
        let second = locks.lock(Path::new("/w/a"));
        tokio::pin!(second);
        assert!(
            poll_once(second.as_mut()).await.is_none(),
            "a second holder got in"
        );
        drop(a);
        let again = second.await;
        drop(again);
        drop(b);
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_no_entry() {
        let locks = PathLocks::default();
        let held = locks.lock(Path::new("/w/a")).await;
        {
            let waiting = locks.lock(Path::new("/w/a"));
            tokio::pin!(waiting);
            assert!(poll_once(waiting.as_mut()).await.is_none());
        }
        drop(held);
        assert_eq!(locks.len(), 0);
    }

    /// Polls `f` once.
    async fn poll_once<F: Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
