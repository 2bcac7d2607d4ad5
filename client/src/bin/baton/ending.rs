//! How `attach` and `watch` end for good: the one line and the exit status, from the
//! library's typed reasons (never from matching message text).
//!
//! | ending | status | code |
//! | --- | --- | --- |
//! | the session ended or was removed (also while the connection was down) | 1 | `session_ended` |
//! | detached, attached elsewhere, re-attach or re-subscribe failed, the connection closed | 1 | `failed` or the server's code |
//! | reconnecting refused: another server id, identity refused, certificate untrusted, another protocol version | 3 | `server_changed`, `identity_refused`, `server_untrusted`, `incompatible` |
//! | reconnecting gave up (only with a policy that limits attempts) | 3 | `connect` |

use baton_client::{CloseReason, EndReason, ReconnectRefusal};
use baton_protocol::ErrorCode;

use crate::failure::{EXIT_CONNECT, EXIT_FAILED, Failure};

/// The machine-readable code of a session that is gone.
const SESSION_ENDED: &str = "session_ended";

/// The ending of a subscription that ended for good (`reason`, or `fallback` when the
/// subscription gives none).
pub(crate) fn subscription_ended(reason: Option<EndReason>, fallback: &str) -> Failure {
    match reason {
        Some(EndReason::Released) => Failure::new(
            EXIT_FAILED,
            SESSION_ENDED,
            "the session ended or was removed on the host",
        ),
        Some(EndReason::Detached) => Failure::op("detached from the session"),
        Some(EndReason::AttachedElsewhere { session_id }) => Failure::op(format!(
            "this connection was attached to session {session_id} instead"
        )),
        Some(EndReason::ReattachFailed(e)) if e.is(ErrorCode::SessionNotFound) => Failure::new(
            EXIT_FAILED,
            SESSION_ENDED,
            "the session was removed while the connection was down",
        ),
        Some(EndReason::ReattachFailed(e)) if e.is(ErrorCode::Forbidden) => Failure::new(
            EXIT_FAILED,
            ErrorCode::Forbidden.as_str(),
            format!("access to the session was revoked: {e}"),
        ),
        Some(EndReason::ReattachFailed(e)) => {
            let mut f = Failure::from(e.clone());
            f.message = format!("could not re-attach to the session: {e}");
            f
        }
        Some(EndReason::ResubscribeFailed(e)) => {
            let mut f = Failure::from(e.clone());
            f.message = format!("could not re-subscribe to the session: {e}");
            f
        }
        Some(EndReason::Closed(reason)) => closed(&reason),
        Some(other) => Failure::op(other.to_string()),
        None => Failure::op(format!("the session subscription ended: {fallback}")),
    }
}

/// The ending of a client that finished ([`baton_client::Status::Closed`]).
pub(crate) fn closed(reason: &CloseReason) -> Failure {
    match reason {
        CloseReason::Refused(refusal) => refused(refusal),
        CloseReason::GaveUp { .. } => Failure::new(EXIT_CONNECT, "connect", reason.to_string()),
        other => Failure::op(format!("the connection closed: {other}")),
    }
}

/// Reconnecting was refused: status 3, a code per kind, the library's one-line message.
fn refused(refusal: &ReconnectRefusal) -> Failure {
    let code = match refusal {
        ReconnectRefusal::ServerChanged { .. } => "server_changed",
        ReconnectRefusal::IdentityRefused { .. } => "identity_refused",
        ReconnectRefusal::ServerUntrusted { .. } => "server_untrusted",
        ReconnectRefusal::Incompatible { .. } => "incompatible",
        _ => "connect",
    };
    Failure::new(EXIT_CONNECT, code, format!("{refusal}; not reconnecting"))
}

#[cfg(test)]
mod tests {
    use baton_client::RequestError;
    use baton_protocol::WireError;

    use super::*;

    #[test]
    fn a_refused_reconnect_exits_3_with_its_own_code_and_one_line() {
        let refusal = ReconnectRefusal::ServerChanged {
            expected: "00000000-0000-4000-8000-000000000001".to_owned(),
            got: "00000000-0000-4000-8000-000000000002".to_owned(),
        };
        for f in [
            closed(&CloseReason::Refused(refusal.clone())),
            subscription_ended(Some(EndReason::Closed(CloseReason::Refused(refusal))), "x"),
        ] {
            assert_eq!(
                (f.status, f.code.as_str()),
                (EXIT_CONNECT, "server_changed")
            );
            assert_eq!(
                f.message,
                "a different host answers now: its server id is \
                 00000000-0000-4000-8000-000000000002, not \
                 00000000-0000-4000-8000-000000000001; not reconnecting"
            );
        }
        let f = closed(&CloseReason::Refused(ReconnectRefusal::IdentityRefused {
            reason: "Identity tls:sha256=ab is not admitted by the access policy".to_owned(),
        }));
        assert_eq!(
            (f.status, f.code.as_str()),
            (EXIT_CONNECT, "identity_refused")
        );
        assert!(!f.message.contains('\n'), "{}", f.message);
    }

    #[test]
    fn a_session_gone_exits_1_whether_released_or_missing_after_a_reconnect() {
        let released = subscription_ended(Some(EndReason::Released), "x");
        assert_eq!(
            (
                released.status,
                released.code.as_str(),
                released.message.as_str()
            ),
            (
                EXIT_FAILED,
                SESSION_ENDED,
                "the session ended or was removed on the host"
            )
        );
        let missing = subscription_ended(
            Some(EndReason::ReattachFailed(RequestError::Server(
                WireError::from_code(ErrorCode::SessionNotFound, "Session not found"),
            ))),
            "x",
        );
        assert_eq!(
            (missing.status, missing.code.as_str()),
            (EXIT_FAILED, SESSION_ENDED)
        );
        let lost = closed(&CloseReason::Lost("Byte transport closed".to_owned()));
        assert_eq!(
            (lost.status, lost.message.as_str()),
            (EXIT_FAILED, "the connection closed: Byte transport closed")
        );
    }
}
