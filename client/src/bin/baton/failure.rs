//! How `baton` fails: an exit status from a small documented set, a machine-readable code
//! and a one-line message (printed as text, or as one JSON line under `--json`).
//!
//! | status | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | the operation failed (a server error; the turn ended in error or was aborted) |
//! | 2 | usage or configuration error (command line, config file, profile) |
//! | 3 | could not connect (no host, several local hosts, TLS, handshake), or `attach`/`watch` reconnecting was refused ([`crate::ending`]) |
//! | 4 | no such session, or the name or id prefix matches several |

use baton_client::{ConnectError, RequestError};
use baton_protocol::{ErrorCode, Map, Value};

use crate::config::ConfigError;
use crate::resolve::ResolveError;

/// Exit status: the operation failed.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit status: usage or configuration error.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status: could not connect.
pub(crate) const EXIT_CONNECT: u8 = 3;
/// Exit status: the session address names no single session.
pub(crate) const EXIT_NOT_FOUND: u8 = 4;

/// A failure with its exit status, code and one-line message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The exit status.
    pub(crate) status: u8,
    /// A stable machine-readable code (`usage`, `connect`, a protocol error code, …).
    pub(crate) code: String,
    /// What went wrong (empty: exit quietly, e.g. on a closed pipe).
    pub(crate) message: String,
}

impl Failure {
    /// Exit status `status` with `code` and `message`.
    pub(crate) fn new(status: u8, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// The operation failed (status 1).
    pub(crate) fn op(message: impl Into<String>) -> Self {
        Self::new(EXIT_FAILED, "failed", message)
    }

    /// A usage error found after parsing (status 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(EXIT_USAGE, "usage", message)
    }

    /// The error as one JSON line: `{"error":{"code":…,"message":…}}`.
    pub(crate) fn to_json(&self) -> String {
        let mut inner = Map::new();
        inner.insert("code", Value::from(self.code.as_str()));
        inner.insert("message", Value::from(self.message.as_str()));
        let mut outer = Map::new();
        outer.insert("error", Value::Map(inner));
        Value::Map(outer).to_json()
    }
}

impl From<RequestError> for Failure {
    fn from(e: RequestError) -> Self {
        match e.kind() {
            Some(ErrorCode::SessionNotFound) => Self::new(
                EXIT_NOT_FOUND,
                ErrorCode::SessionNotFound.as_str(),
                e.to_string(),
            ),
            Some(code) => Self::new(EXIT_FAILED, code.as_str(), e.to_string()),
            None => Self::op(e.to_string()),
        }
    }
}

impl From<ConnectError> for Failure {
    fn from(e: ConnectError) -> Self {
        let mut message = e.to_string();
        if matches!(&e, ConnectError::Tls { reason, .. } if reason.contains("not valid for name")) {
            message.push_str(
                " (reaching the host by address or through a tunnel? pass --server-name with a \
                 name its certificate lists)",
            );
        }
        Self::new(EXIT_CONNECT, "connect", message)
    }
}

impl From<ConfigError> for Failure {
    fn from(e: ConfigError) -> Self {
        Self::new(EXIT_USAGE, "config", e.to_string())
    }
}

impl From<ResolveError> for Failure {
    fn from(e: ResolveError) -> Self {
        let code = match &e {
            ResolveError::NotFound(_) => "session_not_found",
            ResolveError::TooShort(_) => "session_prefix_too_short",
            ResolveError::Ambiguous { .. } => "session_ambiguous",
        };
        Self::new(EXIT_NOT_FOUND, code, e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        // The reader went away (`baton … | head`): stop quietly, as Unix tools do.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Self::new(0, "closed", "");
        }
        Self::op(format!("output error: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_are_one_line_with_code_and_message() {
        let f = Failure::usage("bad\nthing \"quoted\"");
        let line = f.to_json();
        assert!(!line.contains('\n'), "{line}");
        let v = Value::from_json(&line).unwrap();
        let e = v
            .as_map()
            .and_then(|m| m.get("error"))
            .and_then(Value::as_map)
            .unwrap();
        assert_eq!(e.get("code").and_then(Value::as_str), Some("usage"));
        assert_eq!(
            e.get("message").and_then(Value::as_str),
            Some("bad\nthing \"quoted\"")
        );
    }

    #[test]
    fn address_errors_exit_4_with_their_own_codes() {
        let f = Failure::from(ResolveError::TooShort("ab".into()));
        assert_eq!(
            (f.status, f.code.as_str()),
            (EXIT_NOT_FOUND, "session_prefix_too_short")
        );
    }
}
