//! Journal errors.

use std::path::PathBuf;

/// Persistence failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// File-system failure on `path`.
    #[error("session store i/o failed on {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An entry could not be encoded.
    #[error("session entry could not be encoded")]
    Encode(#[source] serde_json::Error),
    /// No such session file.
    #[error("session file {0} does not exist")]
    NotFound(String),
    /// The session already exists.
    #[error("session {0} already exists")]
    Exists(String),
    /// The first line is not a session header (or the path is not a regular file).
    #[error("session file {0} has no valid header")]
    BadHeader(String),
    /// Another process holds the sessions directory's lock.
    #[error("sessions directory {} is in use by {holder}", dir.display())]
    Locked {
        /// The sessions directory.
        dir: PathBuf,
        /// Who holds it, as recorded in `<dir>/.lock` (e.g. `baton-host pid 1234 (started
        /// 2026-01-01T00:00:00.000Z)`).
        holder: String,
    },
    /// The sessions directory belongs to another user, so its files could be read or replaced
    /// by someone else.
    #[error("sessions directory {} is owned by uid {owner}, not by this process's uid {uid}", dir.display())]
    ForeignOwner {
        /// The sessions directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
    /// An earlier append to this file failed and could not be rolled back, or syncing it
    /// failed; it takes no more appends, so nothing is glued onto an unknown tail.
    #[error("session file {} refuses appends after a failed write or sync (restart the host to reopen it)", path.display())]
    Unusable {
        /// The session file.
        path: PathBuf,
    },
    /// The host released the sessions directory (shutdown); it writes nothing more.
    #[error("sessions directory {} was released at shutdown", dir.display())]
    Released {
        /// The sessions directory.
        dir: PathBuf,
    },
}
