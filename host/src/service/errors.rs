//! The one place runtime errors become wire errors, and the service's own wire errors
//! (`invalid_request`, `busy` and the limits').

use baton_protocol::ErrorCode;
use baton_server::ServiceError;

use crate::session::SessionError;

/// `invalid_request` with `message`.
pub(crate) fn invalid(message: impl Into<String>) -> ServiceError {
    ServiceError::from_code(ErrorCode::InvalidRequest, message)
}

/// `busy` with `message`.
pub(crate) fn busy(message: impl Into<String>) -> ServiceError {
    ServiceError::from_code(ErrorCode::Busy, message)
}

/// `busy`: opening one more session would exceed the open-session limit and no open
/// session is idle.
pub(crate) fn too_many_open(limit: usize) -> ServiceError {
    busy(format!(
        "Too many open sessions (limit {limit}); every open session is in use"
    ))
}

/// `busy`: the creating identity owns the most sessions it may.
pub(crate) fn too_many_owned(limit: usize) -> ServiceError {
    busy(format!(
        "Too many sessions for this client identity (limit {limit}); remove some first"
    ))
}

/// A runtime error as the client sees it (`docs/services.md`):
///
/// | runtime | wire |
/// | --- | --- |
/// | `Busy` | `busy` / `Session is busy: a turn is running` |
/// | `SteerQueueFull`, `TooManyCommands`, `FollowUpQueueFull` | `busy` |
/// | `TurnEnded`, `UnknownFollowUp`, `CompactionNotOffered`, `NothingToCompact`, `PathRefused` | `invalid_request` |
/// | `Compaction` (the model's failure) | `internal_error`, with the reason |
/// | `CompactionAborted` | `cancelled` |
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
        SessionError::TurnEnded(id) => invalid(format!(
            "Turn {id} has ended; the steering text was not delivered (send it as a prompt or a follow-up)"
        )),
        SessionError::FollowUpQueueFull => busy(format!(
            "Too many follow-ups are queued (limit {})",
            crate::session::MAX_QUEUED_FOLLOW_UPS
        )),
        SessionError::UnknownFollowUp(id) => invalid(format!(
            "No queued follow-up {id} (it was already sent or removed)"
        )),
        SessionError::CompactionNotOffered => invalid("This session does not offer compaction"),
        SessionError::NothingToCompact => {
            invalid("Nothing to compact: the whole context fits in the kept recent tail")
        }
        SessionError::Compaction(reason) => ServiceError::from_code(
            ErrorCode::InternalError,
            format!("Compaction failed: {reason}"),
        ),
        SessionError::PathRefused(why) => invalid(format!("Path completion refused: {why}")),
        SessionError::CompactionAborted => {
            ServiceError::from_code(ErrorCode::Cancelled, "Compaction was aborted")
        }
        SessionError::Closed => ServiceError::server_draining(),
        other => ServiceError::internal(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_errors_map_to_documented_codes() {
        let code = |e: SessionError| service_error(e).kind();
        assert_eq!(code(SessionError::Busy), Some(ErrorCode::Busy));
        assert_eq!(code(SessionError::SteerQueueFull), Some(ErrorCode::Busy));
        assert_eq!(code(SessionError::TooManyCommands), Some(ErrorCode::Busy));
        assert_eq!(
            code(SessionError::UnknownSession("x".into())),
            Some(ErrorCode::SessionNotFound)
        );
        assert_eq!(
            code(SessionError::UnknownModel("a/b".into())),
            Some(ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(SessionError::BadCwd("/nope".into())),
            Some(ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(SessionError::NotRunning),
            Some(ErrorCode::InvalidRequest)
        );
        assert_eq!(code(SessionError::Closed), Some(ErrorCode::ServerDraining));
        assert_eq!(
            code(SessionError::TurnEnded("turn-1".into())),
            Some(ErrorCode::InvalidRequest)
        );
        assert_eq!(code(SessionError::FollowUpQueueFull), Some(ErrorCode::Busy));
        assert_eq!(
            code(SessionError::UnknownFollowUp("f1".into())),
            Some(ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(SessionError::NothingToCompact),
            Some(ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(SessionError::CompactionAborted),
            Some(ErrorCode::Cancelled)
        );
        let failed = service_error(SessionError::Compaction("HTTP 500".into()));
        assert!(failed.to_wire().message.contains("HTTP 500"));
        let internal = service_error(SessionError::Store(crate::journal::StoreError::Exists(
            "private".into(),
        )));
        assert!(internal.is(ErrorCode::InternalError));
        assert_eq!(internal.to_wire().message, "Internal server error");
    }

    #[test]
    fn service_errors_carry_their_codes() {
        assert!(busy("full").is(ErrorCode::Busy));
        assert!(invalid("bad").is(ErrorCode::InvalidRequest));
    }

    #[test]
    fn limit_errors_are_busy_and_name_the_limit() {
        let open = too_many_open(64);
        assert!(open.is(ErrorCode::Busy));
        assert!(open.to_wire().message.contains("limit 64"));
        let owned = too_many_owned(256);
        assert!(owned.is(ErrorCode::Busy));
        assert!(owned.to_wire().message.contains("limit 256"));
    }
}
