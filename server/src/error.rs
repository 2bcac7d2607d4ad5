//! Error types of the server crate, split by who is at fault.

use std::path::PathBuf;

use baton_protocol::{ErrorCode, WireError};

/// A [`ServerConfig`](crate::ServerConfig) option out of range (caller bug).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Upstream's wording for a zero frame limit.
    #[error("Server maxFrameLength must be an integer between 1 and 4294967295")]
    MaxFrameLength,
    /// The pending-byte limit cannot hold one maximal frame.
    #[error("Server maxPendingBytes must be at least maxFrameLength + 4 ({minimum})")]
    MaxPendingBytes {
        /// `max_frame_length + 4`.
        minimum: u64,
    },
    /// A timeout of zero or above 2147483647 ms.
    #[error("Server {name} must be an integer between 1 and 2147483647")]
    Timeout {
        /// Option name as upstream spells it.
        name: &'static str,
    },
    /// A count limit of zero.
    #[error("{name} must be at least 1")]
    Zero {
        /// Field name.
        name: &'static str,
    },
}

/// Why [`Server::adopt`](crate::Server::adopt) did not take a connection (the stream is
/// dropped, which closes it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdoptError {
    /// [`Server::close`](crate::Server::close) has begun (or the server was dropped): like
    /// a listener that stopped accepting, it takes no new connection.
    #[error("the server is closing and takes no new connections")]
    Closing,
}

/// Why a listener could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// Binding or preparing the socket failed.
    #[error("cannot listen on {what}")]
    Io {
        /// Address or path.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Something other than a socket occupies the Unix socket path.
    #[error("refusing to replace {path}: it is not a socket")]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket directory is owned by another user or writable by group or others.
    #[error("refusing unsafe socket directory {path} (owner uid {owner}, mode {mode:o})")]
    UnsafeDirectory {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// Another server is accepting connections on the Unix socket path.
    #[error("a live server is already listening on {path}")]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The Unix socket path does not fit in `sockaddr_un`.
    #[error("Unix socket path {path} is too long ({len} bytes; at most {max})")]
    PathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The platform limit.
        max: usize,
    },
    /// Plain TCP on a non-loopback address without [`TcpOptions::allow_plaintext_non_loopback`].
    ///
    /// [`TcpOptions::allow_plaintext_non_loopback`]: crate::listen::TcpOptions::allow_plaintext_non_loopback
    #[error("refusing plaintext TCP on non-loopback address {addr}: use TLS, or opt in explicitly")]
    PlaintextNotLoopback {
        /// The requested address.
        addr: std::net::SocketAddr,
    },
    /// The TLS material could not be loaded.
    #[error("invalid TLS configuration: {reason}")]
    Tls {
        /// What was wrong.
        reason: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// Why [`Server::start`](crate::Server::start) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener could not be set up (the others were rolled back).
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// No listener was given.
    #[error("a server needs at least one listener")]
    NoListeners,
}

/// Why [`Server::close`](crate::Server::close) did not finish cleanly. The server is closed
/// regardless; this reports what could not be cleaned up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Failed to close routed Sessions: {}", .failures.join("; "))]
pub struct CloseError {
    /// One line per failure (host errors are described, not sanitised: this is local).
    pub failures: Vec<String>,
}

/// An error a host returns from a service call or lifecycle hook.
///
/// [`ServiceError::Remote`] reaches the client verbatim (upstream `ServerError` and chord
/// `RemoteServiceError`); [`ServiceError::Internal`] is logged and sanitised to
/// `internal_error` / `Internal server error`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// An error meant for the client: `code` and `message` go on the wire as given.
    #[error("{0}")]
    Remote(WireError),
    /// A private failure: the client sees only `internal_error`.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// From [`SessionHandle::lease`](crate::SessionHandle::lease): the host let go of this
    /// handle by itself (e.g. it closed an idle session) and its [`terminated`] resolves with
    /// [`Termination::Released`]. The server forgets the handle and opens the session again
    /// for the attach; it reaches a client only if that keeps happening
    /// ([`MAX_ATTACH_ATTEMPTS`](crate::MAX_ATTACH_ATTEMPTS) times), as `busy`.
    ///
    /// [`terminated`]: crate::SessionHandle::terminated
    /// [`Termination::Released`]: crate::Termination::Released
    #[error("the session handle was released by its host")]
    SessionReleased,
}

/// Upstream's sanitised message.
pub const INTERNAL_SERVER_ERROR_MESSAGE: &str = "Internal server error";

/// What a client sees when its attach kept meeting a session its host was closing.
const SESSION_CHURN_MESSAGE: &str = "Session was closed while attaching; try again";

impl ServiceError {
    /// A client-visible error with this code and message.
    ///
    /// For a code baton knows, prefer [`ServiceError::from_code`]; this takes any string
    /// because codes are opaque on the wire (e.g. a host's own `application_error`).
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self::Remote(WireError::new(code, message))
    }

    /// A client-visible error with a code baton knows.
    pub fn from_code(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::Remote(WireError::from_code(code, message))
    }

    /// A private error, sanitised on the wire.
    pub fn internal(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Internal(error.into())
    }

    /// `session_not_found` / `Session was not found`.
    pub fn session_not_found() -> Self {
        Self::from_code(ErrorCode::SessionNotFound, "Session was not found")
    }

    /// `session_ambiguous` / `Session ID matches more than one session`.
    pub fn session_ambiguous() -> Self {
        Self::from_code(
            ErrorCode::SessionAmbiguous,
            "Session ID matches more than one session",
        )
    }

    /// `session_not_attached` / `Session is not attached to this client`.
    pub fn session_not_attached() -> Self {
        Self::from_code(
            ErrorCode::SessionNotAttached,
            "Session is not attached to this client",
        )
    }

    /// `server_draining` / `Server is draining`.
    pub fn server_draining() -> Self {
        Self::from_code(ErrorCode::ServerDraining, "Server is draining")
    }

    /// The error body this error puts on the wire (sanitised for internal errors).
    pub fn to_wire(&self) -> WireError {
        match self {
            Self::Remote(e) => e.clone(),
            Self::Internal(_) => {
                WireError::from_code(ErrorCode::InternalError, INTERNAL_SERVER_ERROR_MESSAGE)
            }
            Self::SessionReleased => WireError::from_code(ErrorCode::Busy, SESSION_CHURN_MESSAGE),
        }
    }

    /// The wire code (`internal_error` for internal errors).
    pub fn code(&self) -> &str {
        match self {
            Self::Remote(e) => e.code.as_str(),
            Self::Internal(_) => ErrorCode::InternalError.as_str(),
            Self::SessionReleased => ErrorCode::Busy.as_str(),
        }
    }

    /// The wire code as one baton knows, or `None` for any other (still valid) code.
    pub fn kind(&self) -> Option<ErrorCode> {
        match self {
            Self::Remote(e) => e.kind(),
            Self::Internal(_) => Some(ErrorCode::InternalError),
            Self::SessionReleased => Some(ErrorCode::Busy),
        }
    }

    /// Whether the wire code is `code` (`internal_error` for internal errors).
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code() == code.as_str()
    }
}

impl From<WireError> for ServiceError {
    fn from(e: WireError) -> Self {
        Self::Remote(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_code_puts_the_codes_spelling_on_the_wire() {
        let e = ServiceError::from_code(ErrorCode::Busy, "too many");
        assert_eq!(e.code(), ErrorCode::Busy.as_str());
        assert_eq!(e.kind(), Some(ErrorCode::Busy));
        assert!(e.is(ErrorCode::Busy));
        assert_eq!(
            e.to_wire(),
            WireError::from_code(ErrorCode::Busy, "too many")
        );
    }

    #[test]
    fn an_internal_error_is_internal_error_on_the_wire() {
        let e = ServiceError::internal("private");
        assert_eq!(e.kind(), Some(ErrorCode::InternalError));
        assert!(e.is(ErrorCode::InternalError));
        assert_eq!(e.to_wire().message, INTERNAL_SERVER_ERROR_MESSAGE);
    }

    #[test]
    fn a_code_baton_does_not_know_has_no_kind() {
        let e = ServiceError::new("application_error", "x");
        assert_eq!(e.kind(), None);
        assert_eq!(e.code(), "application_error");
    }
}
