//! Client errors, by cause. Server errors keep the server's code and message.

use baton_protocol::handshake::HandshakeError;
use baton_protocol::{DecodeError, EncodeError, ErrorCode, WireError};

use crate::endpoint::Endpoint;
use crate::status::ReconnectRefusal;
use crate::tls::{TlsConfigError, TlsFailure};

/// Why a connection could not be established.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The transport could not be opened (refused, unreachable, no such socket).
    #[error("cannot connect to {endpoint}: {source}")]
    Io {
        /// Where we tried.
        endpoint: Endpoint,
        /// The OS error.
        source: std::io::Error,
    },
    /// TLS configuration could not be built.
    #[error(transparent)]
    TlsConfig(#[from] TlsConfigError),
    /// The TLS handshake failed (untrusted certificate, name mismatch, refused client cert).
    #[error("TLS handshake with {endpoint} failed: {reason}")]
    Tls {
        /// Where we tried.
        endpoint: Endpoint,
        /// rustls' or the peer's reason.
        reason: String,
        /// Who refused whom, as far as the TLS error says.
        failure: TlsFailure,
    },
    /// The server answered the hello with `hello_error`, or the handshake broke a rule
    /// (wrong server id, unexpected first message).
    #[error("handshake with {endpoint} failed: {source}")]
    Handshake {
        /// Where we tried.
        endpoint: Endpoint,
        /// The handshake error; [`HandshakeError::Server`] keeps the code.
        source: HandshakeError,
    },
    /// The server's bytes did not decode.
    #[error("protocol error from {endpoint}: {source}")]
    Protocol {
        /// Where we tried.
        endpoint: Endpoint,
        /// The decoder's message.
        source: DecodeError,
    },
    /// The server closed the connection during the handshake.
    #[error("{endpoint} closed the connection during the handshake")]
    Closed {
        /// Where we tried.
        endpoint: Endpoint,
    },
    /// Connecting and the handshake took longer than the connect timeout.
    #[error("timed out connecting to {endpoint}")]
    Timeout {
        /// Where we tried.
        endpoint: Endpoint,
    },
}

impl ConnectError {
    /// Why retrying this connection can never succeed, if that is so: the server is not the
    /// one pinned by [`ClientConfig::expected_server_id`](crate::ClientConfig) (or first
    /// reached), it refused this client's identity (`hello_error` `forbidden`, or a TLS alert
    /// about the client certificate), the client no longer trusts its certificate, or it
    /// speaks another protocol version. `None` for failures a retry may cure (unreachable,
    /// reset, timed out, `server_draining`, `busy`, garbled bytes).
    ///
    /// A reconnecting client stops at once on these ([`CloseReason::Refused`]).
    ///
    /// [`CloseReason::Refused`]: crate::CloseReason::Refused
    pub fn refusal(&self) -> Option<ReconnectRefusal> {
        match self {
            Self::Handshake {
                source: HandshakeError::ServerMismatch { got, expected },
                ..
            } => Some(ReconnectRefusal::ServerChanged {
                expected: expected.clone(),
                got: got.clone(),
            }),
            Self::Handshake {
                source: HandshakeError::Server(e),
                ..
            } => match e.kind() {
                Some(ErrorCode::Forbidden) => Some(ReconnectRefusal::IdentityRefused {
                    reason: e.message.clone(),
                }),
                Some(ErrorCode::Version) => Some(ReconnectRefusal::Incompatible {
                    reason: e.message.clone(),
                }),
                _ => None,
            },
            Self::Tls {
                reason,
                failure: TlsFailure::ClientRefused,
                ..
            } => Some(ReconnectRefusal::IdentityRefused {
                reason: format!("the TLS handshake refused its certificate ({reason})"),
            }),
            Self::Tls {
                reason,
                failure: TlsFailure::ServerRejected,
                ..
            } => Some(ReconnectRefusal::ServerUntrusted {
                reason: reason.clone(),
            }),
            Self::Io { .. }
            | Self::TlsConfig(_)
            | Self::Tls { .. }
            | Self::Handshake { .. }
            | Self::Protocol { .. }
            | Self::Closed { .. }
            | Self::Timeout { .. } => None,
        }
    }

    /// The server's error code when it refused the hello (e.g. `version`).
    pub fn server_code(&self) -> Option<&str> {
        match self {
            Self::Handshake {
                source: HandshakeError::Server(e),
                ..
            } => Some(e.code.as_str()),
            _ => None,
        }
    }

    /// The server's error code as one baton knows ([`ErrorCode::Version`] for a version
    /// mismatch); `None` for other errors and for codes baton does not know.
    pub fn server_kind(&self) -> Option<ErrorCode> {
        match self {
            Self::Handshake {
                source: HandshakeError::Server(e),
                ..
            } => e.kind(),
            _ => None,
        }
    }
}

/// Why a request did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The server answered `ok:false`; code and message are the server's.
    #[error("{}: {}", .0.code, .0.message)]
    Server(WireError),
    /// The caller cancelled; the server was asked to stop (if the request had been sent).
    #[error("request cancelled")]
    Cancelled,
    /// The per-request timeout passed; the server was asked to stop.
    #[error("request timed out")]
    TimedOut,
    /// The connection ended before the request was sent: it did not run.
    #[error("disconnected before the request was sent: {0}")]
    NotSent(String),
    /// The connection ended after the request was sent and before its answer: the server may
    /// or may not have run it. Never reported as success or as a plain failure.
    #[error("outcome unknown: the connection was lost after the request was sent ({0})")]
    OutcomeUnknown(String),
    /// A session call while this client holds no attachment to that session.
    #[error("not attached to session {0}")]
    NotAttached(String),
    /// The message could not be encoded (over the frame limit).
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The client was closed.
    #[error("client is closed")]
    Closed,
}

impl RequestError {
    /// The server's error code, for [`RequestError::Server`].
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Server(e) => Some(e.code.as_str()),
            _ => None,
        }
    }

    /// The server's error code as one baton knows (e.g. [`ErrorCode::SessionNotFound`]);
    /// `None` for local errors and for codes baton does not know (see [`code`](Self::code)).
    pub fn kind(&self) -> Option<ErrorCode> {
        match self {
            Self::Server(e) => e.kind(),
            _ => None,
        }
    }

    /// Whether the server answered with `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        matches!(self, Self::Server(e) if e.is(code))
    }
}
