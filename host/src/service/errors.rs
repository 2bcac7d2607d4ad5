//! The one place runtime errors become wire errors, plus argument checking.

use baton_protocol::Value;
use baton_server::ServiceError;

use crate::session::SessionError;

/// `invalid_request` with `message`.
pub(crate) fn invalid(message: impl Into<String>) -> ServiceError {
    ServiceError::new("invalid_request", message)
}

/// `busy` with `message`.
pub(crate) fn busy(message: impl Into<String>) -> ServiceError {
    ServiceError::new("busy", message)
}

/// A runtime error as the client sees it (`docs/services.md`):
///
/// | runtime | wire |
/// | --- | --- |
/// | `Busy` | `busy` / `Session is busy: a turn is running` |
/// | `SteerQueueFull`, `TooManyCommands` | `busy` |
/// | `UnknownSession` | `session_not_found` |
/// | `UnknownModel`, `BadCwd`, `NotRunning` | `invalid_request` |
/// | `Closed` | `server_draining` (the host is shutting down) |
/// | store, run and shell failures | internal (logged; the client sees `internal_error`) |
pub fn service_error(error: SessionError) -> ServiceError {
    match error {
        SessionError::Busy => busy("Session is busy: a turn is running"),
        SessionError::SteerQueueFull => busy("Too many steering messages are queued"),
        SessionError::TooManyCommands => busy("Too many user commands are running"),
        SessionError::UnknownSession(_) => ServiceError::session_not_found(),
        SessionError::UnknownModel(model) => invalid(format!("Unknown model {model}")),
        SessionError::BadCwd(path) => invalid(format!(
            "Working directory {} is not a directory",
            path.display()
        )),
        SessionError::NotRunning => invalid("No turn is running to steer"),
        SessionError::Closed => ServiceError::server_draining(),
        other => ServiceError::internal(other),
    }
}

/// Checks that `args` has exactly `n` elements.
pub(crate) fn arity(args: &[Value], n: usize, usage: &str) -> Result<(), ServiceError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(invalid(format!("Expected arguments {usage}")))
    }
}

/// `args[i]` as a string.
pub(crate) fn string_arg<'a>(
    args: &'a [Value],
    i: usize,
    usage: &str,
) -> Result<&'a str, ServiceError> {
    args.get(i)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("Expected arguments {usage}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_errors_map_to_documented_codes() {
        let code = |e: SessionError| service_error(e).code().to_owned();
        assert_eq!(code(SessionError::Busy), "busy");
        assert_eq!(code(SessionError::TooManyCommands), "busy");
        assert_eq!(
            code(SessionError::UnknownSession("x".into())),
            "session_not_found"
        );
        assert_eq!(
            code(SessionError::UnknownModel("a/b".into())),
            "invalid_request"
        );
        assert_eq!(
            code(SessionError::BadCwd("/nope".into())),
            "invalid_request"
        );
        assert_eq!(code(SessionError::NotRunning), "invalid_request");
        assert_eq!(code(SessionError::Closed), "server_draining");
        let internal = service_error(SessionError::Store(crate::session::StoreError::Exists(
            "private".into(),
        )));
        assert_eq!(internal.code(), "internal_error");
        assert_eq!(internal.to_wire().message, "Internal server error");
    }
}
