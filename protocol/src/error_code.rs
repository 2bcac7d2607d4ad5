//! `ErrorCode`: every error code baton puts on the wire, in one typed set.
//!
//! Codes are opaque non-empty strings to a peer (a client must accept any, e.g.
//! `application_error`), so decoding keeps the text in [`WireError::code`](crate::WireError);
//! this enum is how baton's own crates *produce* and *recognise* codes, so none of them spells
//! a code as a string literal.

use std::fmt;

use crate::chord::RemoteServiceErrorCode;

/// A wire error code that baton produces or acts on (`docs/protocol.md` §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `invalid_request`: protocol misuse or arguments that do not fit.
    InvalidRequest,
    /// `version`: the client's hello names another protocol version.
    Version,
    /// `cancelled`: the request was cancelled by the client.
    Cancelled,
    /// `internal_error`: any host failure, sanitised.
    InternalError,
    /// `wrong_server`: the target names another server.
    WrongServer,
    /// `server_draining`: the server is shutting down gracefully.
    ServerDraining,
    /// `busy`: a per-connection or per-server limit (baton only).
    Busy,
    /// `session_not_found`.
    SessionNotFound,
    /// `session_ambiguous`: a session id prefix matches more than one session.
    SessionAmbiguous,
    /// `session_not_attached`: a stale or foreign session route.
    SessionNotAttached,
    /// `forbidden`: the peer's identity may not do this (a viewer calling a mutating method,
    /// a Unix account other than the host's refused at the listener) (baton only).
    Forbidden,
    /// One of chord's `service_*` codes.
    Service(RemoteServiceErrorCode),
}

impl ErrorCode {
    /// Every code, for exhaustive tests and documentation.
    pub const ALL: [ErrorCode; 19] = [
        Self::InvalidRequest,
        Self::Version,
        Self::Cancelled,
        Self::InternalError,
        Self::WrongServer,
        Self::ServerDraining,
        Self::Busy,
        Self::SessionNotFound,
        Self::SessionAmbiguous,
        Self::SessionNotAttached,
        Self::Forbidden,
        Self::Service(RemoteServiceErrorCode::NotAllowed),
        Self::Service(RemoteServiceErrorCode::NotFound),
        Self::Service(RemoteServiceErrorCode::ModeMismatch),
        Self::Service(RemoteServiceErrorCode::MemberNotFound),
        Self::Service(RemoteServiceErrorCode::MemberMismatch),
        Self::Service(RemoteServiceErrorCode::InstanceNotFound),
        Self::Service(RemoteServiceErrorCode::StaleInstance),
        Self::Service(RemoteServiceErrorCode::InvalidValue),
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::Version => "version",
            Self::Cancelled => "cancelled",
            Self::InternalError => "internal_error",
            Self::WrongServer => "wrong_server",
            Self::ServerDraining => "server_draining",
            Self::Busy => "busy",
            Self::SessionNotFound => "session_not_found",
            Self::SessionAmbiguous => "session_ambiguous",
            Self::SessionNotAttached => "session_not_attached",
            Self::Forbidden => "forbidden",
            Self::Service(code) => code.as_str(),
        }
    }

    /// Recognises a wire spelling; `None` for a code baton does not know (still valid on the
    /// wire).
    pub fn parse(code: &str) -> Option<Self> {
        Some(match code {
            "invalid_request" => Self::InvalidRequest,
            "version" => Self::Version,
            "cancelled" => Self::Cancelled,
            "internal_error" => Self::InternalError,
            "wrong_server" => Self::WrongServer,
            "server_draining" => Self::ServerDraining,
            "busy" => Self::Busy,
            "session_not_found" => Self::SessionNotFound,
            "session_ambiguous" => Self::SessionAmbiguous,
            "session_not_attached" => Self::SessionNotAttached,
            "forbidden" => Self::Forbidden,
            other => Self::Service(RemoteServiceErrorCode::parse(other)?),
        })
    }
}

impl From<RemoteServiceErrorCode> for ErrorCode {
    fn from(code: RemoteServiceErrorCode) -> Self {
        Self::Service(code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<ErrorCode> for &str {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_parses_back_from_its_spelling() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code), "{code}");
        }
    }

    #[test]
    fn spellings_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate spelling {code}");
        }
    }

    #[test]
    fn only_the_service_codes_parse_as_service_codes() {
        for code in ErrorCode::ALL {
            let service = RemoteServiceErrorCode::parse(code.as_str());
            match code {
                ErrorCode::Service(c) => assert_eq!(service, Some(c)),
                _ => assert_eq!(service, None, "{code}"),
            }
        }
    }

    #[test]
    fn an_unknown_code_is_not_recognised() {
        assert_eq!(ErrorCode::parse("application_error"), None);
        assert_eq!(ErrorCode::parse(""), None);
    }
}
