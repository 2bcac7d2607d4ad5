//! Where the file tools may go, and how they open and replace files.
//!
//! Every path is resolved beneath a descriptor of the session's working directory (the
//! *workspace*), never by name from `/` ([`beneath`](super::beneath)): when [`FileAccess`] is
//! confined (the default) no component may lead out of it, whether through `..`, an absolute
//! path or a symlink, and each decision is made on a descriptor that is then used. A file is
//! placed by the descriptor of its directory and its name there ([`Placed`]); it is opened
//! with `O_NOFOLLOW | O_NONBLOCK` relative to that descriptor and checked with `fstat`, and it
//! is replaced by a temporary file created in that directory (`O_CREAT | O_EXCL`) and renamed
//! over the name with `renameat`, so a reader sees the old or the new content, never a mix. A
//! process of the workspace that swaps a directory for a symlink meanwhile can make a call
//! fail, never make it read or write outside.
//!
//! A refused path is named with where it really leads (its canonical form), e.g.
//! `refused: ../x resolves to /home/me/x, which is outside the workspace /home/me/proj`; that
//! canonical form is computed only for the message, and for one more resolution beneath the
//! workspace when a symlink with an absolute target leads back inside.
//!
//! [`PathLocks`] serialise the calls of one session that touch the same file: a `read`,
//! `write` or `edit` holds its file's lock from before it reads until after it replaced the
//! file, so two edits of one file in one parallel batch both land.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{ErrorKind, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use tokio::sync::OwnedMutexGuard;

use super::beneath::{MAX_SYMLINKS, Resolver, Root, Scope};
use super::{ToolError, resolve_path};

/// How the `read`, `write` and `edit` tools of one session treat paths: confined to the
/// workspace or not, and the per-file locks they share. Clones share the locks.
#[derive(Debug, Clone)]
pub struct FileAccess {
    confine: bool,
    resolver: Resolver,
    locks: PathLocks,
}

impl FileAccess {
    /// Paths must stay inside the working directory (the default).
    pub fn confined() -> Self {
        Self {
            confine: true,
            resolver: Resolver::best(),
            locks: PathLocks::default(),
        }
    }

    /// Any path the host user can reach is allowed (still locked, opened without following a
    /// final symlink swapped in late, and replaced by `renameat` in the file's directory;
    /// non-regular files are still refused).
    pub fn unconfined() -> Self {
        Self {
            confine: false,
            ..Self::confined()
        }
    }

    /// The same access resolving paths by the component-by-component walk, as it does where
    /// the kernel has no `openat2`.
    #[cfg(test)]
    pub(crate) fn walking(self) -> Self {
        Self {
            resolver: Resolver::Walk,
            ..self
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

    /// The key that orders and locks the calls of one batch on `path`: its canonical form
    /// (so a file an earlier call of the batch creates, and a symlink to a file, key alike),
    /// without the confinement check (a refused call fails when it runs); the lexical path
    /// when even that cannot be computed.
    pub(crate) async fn order_key(&self, cwd: &Path, path: &str) -> PathBuf {
        let joined = resolve_path(cwd, path);
        let (path, lexical) = (path.to_owned(), joined.clone());
        blocking(move || Ok(canonical_creatable(&path, &joined).unwrap_or(joined)))
            .await
            .unwrap_or(lexical)
    }

    /// Opens the existing regular file `path` (as the model wrote it) for reading: never
    /// blocks on a FIFO or a device, refuses anything but a regular file.
    pub(crate) async fn open_existing(&self, cwd: &Path, path: &str) -> Result<Opened, ToolError> {
        let call = self.call(cwd, path);
        blocking(move || {
            let call = call()?;
            call.beneath(|rel| {
                let placed = call.place(rel, false)?;
                let (file, meta) = call.open_regular(&placed)?;
                Ok(Opened {
                    file: tokio::fs::File::from_std(file),
                    mode: meta.mode() & 0o7777,
                    placed,
                })
            })
        })
        .await
    }

    /// Places `path` for a `write`: its missing parent directories are created (each beneath
    /// the workspace), and an existing file there must be a regular file, whose permission
    /// bits are returned to be kept.
    pub(crate) async fn place_new(
        &self,
        cwd: &Path,
        path: &str,
    ) -> Result<(Placed, Option<u32>), ToolError> {
        let call = self.call(cwd, path);
        blocking(move || {
            let call = call()?;
            call.beneath(|rel| {
                let placed = call.place(rel, true)?;
                let mode = match rustix::fs::statat(
                    &placed.dir,
                    &placed.name,
                    AtFlags::SYMLINK_NOFOLLOW,
                ) {
                    Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                        FileType::RegularFile => Some(st.st_mode & 0o7777),
                        other => return Err(Failure::Tool(not_regular(&call.path, other))),
                    },
                    Err(Errno::NOENT) => None,
                    Err(e) => return Err(Failure::from(e)),
                };
                Ok((placed, mode))
            })
        })
        .await
    }

    /// Opens the workspace for one call on `path`, when run (on a blocking thread).
    fn call(&self, cwd: &Path, path: &str) -> impl FnOnce() -> Result<Call, ToolError> + use<> {
        let (confine, resolver) = (self.confine, self.resolver);
        let (cwd, path) = (cwd.to_path_buf(), path.to_owned());
        move || Call::new(confine, resolver, &cwd, &path)
    }
}

impl Default for FileAccess {
    fn default() -> Self {
        Self::confined()
    }
}

/// Runs blocking file-system work off the runtime's threads (as `tokio::fs` does).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(ToolError::new(format!("file tool: {e}"))),
    }
}

/// An existing regular file, opened for reading, and where it is.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The file, opened beneath the workspace.
    pub(crate) file: tokio::fs::File,
    /// Its permission bits, from `fstat` on the descriptor.
    pub(crate) mode: u32,
    /// Its directory and name, to replace it.
    pub(crate) placed: Placed,
}

/// A file's place: the descriptor of its directory (beneath the workspace when confined) and
/// its name there, which was not a symlink when it was resolved.
#[derive(Debug)]
pub(crate) struct Placed {
    dir: OwnedFd,
    name: OsString,
    /// The path as resolved against the workspace, for messages.
    shown: PathBuf,
}

impl Placed {
    /// Replaces (or creates) the file with `contents` atomically: a temporary file in the same
    /// directory, written and synced, then renamed over the name, all relative to the
    /// directory's descriptor. `mode` is the permission bits to give it (an existing file's,
    /// to keep them); `None` uses the default for new files (`0o666` less the umask).
    pub(crate) async fn replace(
        self,
        contents: Vec<u8>,
        mode: Option<u32>,
    ) -> Result<(), ToolError> {
        blocking(move || self.replace_now(&contents, mode)).await
    }

    fn replace_now(&self, contents: &[u8], mode: Option<u32>) -> Result<(), ToolError> {
        // A short prefix of the name keeps the temporary name within NAME_MAX.
        let stem: String = self.name.to_string_lossy().chars().take(64).collect();
        let mut created = None;
        for _ in 0..TEMP_ATTEMPTS {
            let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let tmp = OsString::from(format!(".{stem}.baton-{}-{n}.tmp", std::process::id()));
            match rustix::fs::openat(
                &self.dir,
                tmp.as_os_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode.unwrap_or(0o666)),
            ) {
                Ok(fd) => {
                    created = Some((tmp, std::fs::File::from(fd)));
                    break;
                }
                Err(Errno::EXIST) => {}
                Err(e) => return Err(ToolError::io(&self.shown.with_file_name(&tmp), &e.into())),
            }
        }
        let Some((tmp, mut file)) = created else {
            return Err(ToolError::new(format!(
                "{}: no free temporary name",
                self.shown.parent().unwrap_or(&self.shown).display()
            )));
        };
        let shown_tmp = self.shown.with_file_name(&tmp);
        let written = (|| {
            if let Some(mode) = mode {
                // The create mode was filtered by the umask; restore the original bits exactly
                // (fchmod on the descriptor).
                file.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(|e| ToolError::io(&shown_tmp, &e))?;
            }
            file.write_all(contents)
                .map_err(|e| ToolError::io(&shown_tmp, &e))?;
            file.sync_all().map_err(|e| ToolError::io(&shown_tmp, &e))?;
            drop(file);
            rustix::fs::renameat(&self.dir, tmp.as_os_str(), &self.dir, self.name.as_os_str())
                .map_err(|e| ToolError::io(&self.shown, &e.into()))
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.dir, tmp.as_os_str(), AtFlags::empty());
        }
        written
    }
}

/// Why one resolution of a call failed.
#[derive(Debug)]
enum Failure {
    /// A step of it would leave the workspace (`EXDEV` beneath the root).
    Outside,
    /// Any other I/O error.
    Io(std::io::Error),
    /// An error already phrased for the model.
    Tool(ToolError),
}

impl From<Errno> for Failure {
    fn from(e: Errno) -> Self {
        Self::from(std::io::Error::from(e))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.raw_os_error() == Some(Errno::XDEV.raw_os_error()) {
            Self::Outside
        } else {
            Self::Io(e)
        }
    }
}

/// One call's workspace, opened, and the path it asked for.
#[derive(Debug)]
struct Call {
    root: Root,
    /// The canonical path of the root (`/` when unconfined).
    base: PathBuf,
    /// The path as the model wrote it.
    path: String,
    /// `path` resolved against the working directory.
    joined: PathBuf,
    /// `path` relative to the root, when it is lexically beneath it.
    rel: Option<PathBuf>,
}

impl Call {
    fn new(confine: bool, resolver: Resolver, cwd: &Path, path: &str) -> Result<Self, ToolError> {
        let joined = resolve_path(cwd, path);
        let workspace_error =
            |e: std::io::Error| ToolError::new(format!("workspace {}: {e}", cwd.display()));
        if !confine {
            let root =
                Root::open(Path::new("/"), Scope::InRoot, resolver).map_err(workspace_error)?;
            let absolute = std::path::absolute(&joined).map_err(|e| ToolError::io(&joined, &e))?;
            let rel = absolute.strip_prefix("/").ok().map(Path::to_path_buf);
            return Ok(Self {
                root,
                base: PathBuf::from("/"),
                path: path.to_owned(),
                joined,
                rel,
            });
        }
        let base = std::fs::canonicalize(cwd).map_err(workspace_error)?;
        let root = Root::open(&base, Scope::Beneath, resolver).map_err(workspace_error)?;
        let rel = if Path::new(path).is_absolute() {
            // Lexically inside (through the canonical or the given workspace path), or left to
            // the canonical form.
            joined
                .strip_prefix(&base)
                .or_else(|_| joined.strip_prefix(cwd))
                .ok()
                .map(Path::to_path_buf)
        } else {
            Some(PathBuf::from(path))
        };
        Ok(Self {
            root,
            base,
            path: path.to_owned(),
            joined,
            rel,
        })
    }

    /// Runs `op` on the path relative to the root. When a step of it led out of the
    /// workspace, the path's canonical form decides the message: outside, the call is refused;
    /// inside (a symlink with an absolute target, an absolute path through another name of
    /// the workspace), `op` runs once more on it, again beneath the root.
    fn beneath<T>(&self, op: impl Fn(&Path) -> Result<T, Failure>) -> Result<T, ToolError> {
        let first = match &self.rel {
            Some(rel) => op(rel),
            None => Err(Failure::Outside),
        };
        match first {
            Err(Failure::Outside) => {}
            other => return other.map_err(|f| self.error(f)),
        }
        let real = canonical_creatable(&self.path, &self.joined)?;
        let Ok(inside) = real.strip_prefix(&self.base) else {
            return Err(outside(&self.path, &real, &self.base));
        };
        op(inside).map_err(|f| self.error(f))
    }

    fn error(&self, failure: Failure) -> ToolError {
        match failure {
            Failure::Outside => ToolError::new(format!(
                "refused: {} leads outside the workspace {}",
                self.path,
                self.base.display()
            )),
            Failure::Io(e) => ToolError::io(&self.joined, &e),
            Failure::Tool(e) => e,
        }
    }

    /// The directory and name of the file `rel` names, following a final symlink while it
    /// stays in the workspace. With `create`, missing directories on the way are made.
    fn place(&self, rel: &Path, create: bool) -> Result<Placed, Failure> {
        let mut rel = rel.to_path_buf();
        let mut followed = false;
        for _ in 0..=MAX_SYMLINKS {
            let Some((parent, name)) = split(&rel) else {
                // The path names a directory: the workspace, or one it ends in `..` of.
                return Err(match self.root.open_dir(&rel) {
                    Ok(_) => Failure::Tool(not_regular(&self.path, FileType::Directory)),
                    Err(e) if create && e.kind() == ErrorKind::NotFound => {
                        Failure::Tool(dot_dot_after_missing(&self.path))
                    }
                    Err(e) => Failure::from(e),
                });
            };
            let dir = if create {
                self.dir_creating(parent)?
            } else {
                self.root.open_dir(parent)?
            };
            match rustix::fs::readlinkat(&dir, name, Vec::new()) {
                Ok(target) => {
                    let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                    rel = if target.is_absolute() {
                        match target.strip_prefix(&self.base) {
                            Ok(inside) => inside.to_path_buf(),
                            Err(_) => return Err(Failure::Outside),
                        }
                    } else {
                        parent.join(target)
                    };
                    followed = true;
                }
                // A symlink to nothing is not a place to write through.
                Err(Errno::NOENT) if create && followed => {
                    return Err(Failure::Tool(not_regular(&self.path, FileType::Symlink)));
                }
                Err(Errno::INVAL | Errno::NOENT) => {
                    return Ok(Placed {
                        dir,
                        name: name.to_owned(),
                        shown: self.joined.clone(),
                    });
                }
                Err(e) => return Err(Failure::from(e)),
            }
        }
        Err(Failure::Io(Errno::LOOP.into()))
    }

    /// The directory `rel`, made (with its missing parents) where it does not exist; each
    /// directory is made relative to its parent's descriptor, and the result opened beneath
    /// the root again.
    fn dir_creating(&self, rel: &Path) -> Result<OwnedFd, Failure> {
        let prefixes: Vec<&Path> = rel.ancestors().collect();
        // `prefixes` runs from `rel` to the empty path; find the longest one that exists.
        let mut existing = None;
        for (i, prefix) in prefixes.iter().enumerate() {
            match self.root.open_dir(prefix) {
                Ok(fd) => {
                    existing = Some((i, fd));
                    break;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        let Some((found, mut fd)) = existing else {
            return Err(Failure::Io(Errno::NOENT.into()));
        };
        // Every missing step must be a name: `..` after a missing directory is refused before
        // anything is made.
        let mut names = Vec::with_capacity(found);
        for prefix in prefixes[..found].iter().rev() {
            let Some((_, name)) = split(prefix) else {
                return Err(Failure::Tool(dot_dot_after_missing(&self.path)));
            };
            names.push((prefix, name));
        }
        for (prefix, name) in names {
            match rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(Failure::from(e)),
            }
            fd = self.root.open_dir(prefix)?;
        }
        Ok(fd)
    }

    /// Opens the file at `placed` for reading: `O_NOFOLLOW` (a symlink swapped in since it was
    /// placed is refused), `O_NONBLOCK` (a FIFO or a device never waits for a peer), and only
    /// a regular file, by `fstat` on the descriptor.
    fn open_regular(&self, placed: &Placed) -> Result<(std::fs::File, std::fs::Metadata), Failure> {
        let fd = rustix::fs::openat(
            &placed.dir,
            placed.name.as_os_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP => Failure::Tool(ToolError::new(format!(
                "refused: {} became a symlink while it was being opened",
                self.path
            ))),
            e => Failure::from(e),
        })?;
        let file = std::fs::File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(Failure::Tool(not_regular(
                &self.path,
                FileType::from_raw_mode(meta.mode()),
            )));
        }
        Ok((file, meta))
    }
}

/// The parent and the final name of `rel`, when it ends in a name (not `..`, `.` or nothing).
fn split(rel: &Path) -> Option<(&Path, &OsStr)> {
    match rel.components().next_back() {
        Some(Component::Normal(name)) => Some((rel.parent().unwrap_or(Path::new("")), name)),
        _ => None,
    }
}

/// `joined` canonicalised for a file that may not exist yet: the existing part is
/// canonicalised, the rest is appended (it may not contain `..`).
fn canonical_creatable(path: &str, joined: &Path) -> Result<PathBuf, ToolError> {
    let mut rest: Vec<OsString> = Vec::new();
    let mut probe = joined;
    loop {
        match std::fs::canonicalize(probe) {
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
                    return Err(dot_dot_after_missing(path));
                };
                rest.push(name.to_owned());
                probe = parent;
            }
            Err(e) => return Err(ToolError::io(probe, &e)),
        }
    }
}

fn dot_dot_after_missing(path: &str) -> ToolError {
    ToolError::new(format!(
        "refused: {path} has `..` after a directory that does not exist"
    ))
}

fn outside(path: &str, real: &Path, root: &Path) -> ToolError {
    ToolError::new(format!(
        "refused: {path} resolves to {}, which is outside the workspace {}",
        real.display(),
        root.display()
    ))
}

/// The error for a path that is a directory, FIFO, socket, device or a symlink to nothing.
fn not_regular(path: &str, kind: FileType) -> ToolError {
    let kind = match kind {
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Symlink => "a symlink to nothing",
        FileType::RegularFile | FileType::Unknown => "not a regular file",
    };
    ToolError::new(format!("refused: {path} is {kind}, not a regular file"))
}

/// Makes each temporary file name unique within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Most tries at a fresh temporary name before giving up.
const TEMP_ATTEMPTS: usize = 16;

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
            let mut map = self.inner.lock();
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
        let mut map = self.inner.lock();
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
        let mut map = self.locks.inner.lock();
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
