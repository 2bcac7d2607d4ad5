//! Host code runs behind a panic guard.
//!
//! A panic in a host callback must cost at most the operation it was doing: the request is
//! answered `internal_error`, a failed open is retried by the next attach, a release or close
//! is reported and the connection or session is still torn down. Without the guard a panic
//! unwinds through the task that called the host (a connection's reader, the drain, a
//! caller's `Server::close`) and leaves slots, counters and attachments behind.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Poll;

use crate::error::ServiceError;

/// Awaits `work`, turning a panic in any of its polls into
/// `ServiceError::internal("host <what> panicked")` (the panic text goes to the log only,
/// never to a client).
pub(crate) async fn guarded<T, F>(what: &'static str, work: F) -> Result<T, ServiceError>
where
    F: Future<Output = Result<T, ServiceError>>,
{
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        // AssertUnwindSafe: after a panic the future is never polled again, so no broken
        // invariant inside it can be observed.
        match catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(panic) => {
                let detail = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(call = what, panic = %detail, "host code panicked");
                Poll::Ready(Err(ServiceError::internal(format!("host {what} panicked"))))
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_an_internal_error_naming_the_call() {
        let r: Result<(), _> = guarded("release", async { panic!("secret detail") }).await;
        let e = r.expect_err("a panic is an error");
        let wire = e.to_wire();
        assert!(wire.is(baton_protocol::ErrorCode::InternalError));
        assert!(!wire.message.contains("secret"), "{}", wire.message);
    }

    #[tokio::test]
    async fn a_panic_after_a_pending_poll_is_caught_too() {
        let r: Result<(), _> = guarded("close", async {
            tokio::task::yield_now().await;
            panic!("late")
        })
        .await;
        assert!(r.is_err());
    }

    #[tokio::test]
    async fn results_pass_through_untouched() {
        let ok: Result<u8, ServiceError> = guarded("open", async { Ok(7) }).await;
        assert_eq!(ok.expect("ok"), 7);
        let err: Result<u8, _> =
            guarded("open", async { Err(ServiceError::session_not_found()) }).await;
        assert!(
            err.expect_err("err")
                .is(baton_protocol::ErrorCode::SessionNotFound)
        );
    }
}
