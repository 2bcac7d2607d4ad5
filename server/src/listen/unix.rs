//! The Unix socket listener: `<dir>/<serverId>.sock`, mode 0600, never clobbering a live
//! server or a non-socket file.
//!
//! The socket is bound at a private sibling path, restricted to 0600, and only then
//! hard-linked to the public path, so the public name never exists with looser permissions
//! (upstream does the same). An existing public path is replaced only if it is a socket that
//! nobody accepts on.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_protocol::ServerId;
use tokio::net::{UnixListener, UnixStream};

use crate::error::ListenError;

/// `sockaddr_un.sun_path` holds 108 bytes on Linux (104 elsewhere), including the NUL.
#[cfg(any(target_os = "linux", target_os = "android"))]
const MAX_PATH_BYTES: usize = 107;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const MAX_PATH_BYTES: usize = 103;

/// How long a connect probe may take before the existing socket counts as live: 1 s.
const LIVENESS_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The socket path for `server_id` in `dir` (upstream `getUnixSocketPath`; the naming
/// convention is `baton_protocol::unix`).
pub fn unix_socket_path(dir: &Path, server_id: &ServerId) -> PathBuf {
    dir.join(baton_protocol::unix::socket_file_name(server_id))
}

/// A bound Unix listener and the socket file it created.
#[derive(Debug)]
pub(crate) struct BoundUnix {
    pub(crate) listener: UnixListener,
    pub(crate) file: UnixSocketFile,
}

/// The identity of a socket file this process created, so it removes only its own.
#[derive(Debug, Clone)]
pub(crate) struct UnixSocketFile {
    pub(crate) path: PathBuf,
    dev: u64,
    ino: u64,
}

impl BoundUnix {
    /// Binds `<dir>/<server_id>.sock`.
    pub(crate) async fn bind(dir: &Path, server_id: &ServerId) -> Result<Self, ListenError> {
        let path = unix_socket_path(dir, server_id);
        let private = dir.join(format!(
            ".{}.{:08x}.sock",
            &server_id.as_str()[..8],
            random_u32()
        ));
        for p in [&path, &private] {
            let len = p.as_os_str().len();
            if len > MAX_PATH_BYTES {
                return Err(ListenError::PathTooLong {
                    path: p.clone(),
                    len,
                    max: MAX_PATH_BYTES,
                });
            }
        }
        let io_err = |what: &Path| {
            let what = what.display().to_string();
            move |source| ListenError::Io { what, source }
        };
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io_err(dir))?;
        }

        let listener = UnixListener::bind(&private).map_err(io_err(&private))?;
        let result = async {
            std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600))
                .map_err(io_err(&private))?;
            let meta = std::fs::symlink_metadata(&private).map_err(io_err(&private))?;
            check_directory(dir, meta.uid())?;
            publish(&private, &path).await?;
            Ok::<_, ListenError>(meta)
        }
        .await;
        // The private name has served its purpose either way.
        let _ = std::fs::remove_file(&private);
        let meta = result?;
        tracing::info!(path = %path.display(), "listening on unix socket");
        Ok(Self {
            listener,
            file: UnixSocketFile {
                path,
                dev: meta.dev(),
                ino: meta.ino(),
            },
        })
    }
}

impl UnixSocketFile {
    /// Removes the public path, but only if it is still the socket this listener created.
    pub(crate) fn remove_socket(&self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => {
                if let Err(error) = std::fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), %error, "cannot remove unix socket");
                }
            }
            Ok(_) => {
                tracing::debug!(path = %self.path.display(), "unix socket path was replaced; leaving it");
            }
            Err(_) => {}
        }
    }
}

/// Refuses a directory that someone else owns or that others may write to: they could
/// replace the socket and impersonate the server to clients that discover it there. `uid` is
/// our effective uid (the owner of the socket we just bound).
fn check_directory(dir: &Path, uid: u32) -> Result<(), ListenError> {
    let meta = std::fs::metadata(dir).map_err(|source| ListenError::Io {
        what: dir.display().to_string(),
        source,
    })?;
    let mode = meta.permissions().mode();
    if meta.uid() != uid || mode & 0o022 != 0 {
        return Err(ListenError::UnsafeDirectory {
            path: dir.to_owned(),
            owner: meta.uid(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// Links `private` to `path`, replacing a stale socket at `path` but nothing else.
async fn publish(private: &Path, path: &Path) -> Result<(), ListenError> {
    let io_err = |source| ListenError::Io {
        what: path.display().to_string(),
        source,
    };
    // A few rounds: a stale socket may be replaced by someone else between our checks.
    for _ in 0..3 {
        match std::fs::hard_link(private, path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(e)),
        }
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(e)),
        };
        if !meta.file_type().is_socket() {
            return Err(ListenError::NotASocket {
                path: path.to_owned(),
            });
        }
        if is_live(path).await {
            return Err(ListenError::InUse {
                path: path.to_owned(),
            });
        }
        // Stale: remove it only if it is still the inode we probed.
        match std::fs::symlink_metadata(path) {
            Ok(now) if now.dev() == meta.dev() && now.ino() == meta.ino() => {
                tracing::info!(path = %path.display(), "removing stale unix socket");
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(e)),
                }
            }
            _ => {}
        }
    }
    Err(ListenError::InUse {
        path: path.to_owned(),
    })
}

/// True when something accepts connections at `path` (or does not refuse within the probe
/// timeout).
async fn is_live(path: &Path) -> bool {
    match tokio::time::timeout(LIVENESS_PROBE_TIMEOUT, UnixStream::connect(path)).await {
        Err(_elapsed) => true,
        Ok(Ok(_stream)) => true,
        Ok(Err(e)) => !matches!(
            e.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::NotFound
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset
        ),
    }
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    crate::random::fill(&mut b);
    u32::from_be_bytes(b)
}
