//! Attaching, and the session handle: calls addressed to the current attachment, never to a
//! stale one.

use baton_protocol::chord::ServiceMode;
use baton_protocol::{Id, SessionTarget, Value};
use tokio::sync::oneshot;

use crate::client::{Client, RequestOptions, answered};
use crate::conn::{Answer, Command, TargetSpec};
use crate::error::RequestError;
use crate::reply::Reply;
use crate::shared::Order;
use crate::subscription::Subscription;

impl Client {
    /// Attaches this connection to `session_id` (or a prefix the server resolves) and returns
    /// a handle that addresses its calls to the current attachment; its
    /// [`id`](Session::id) is the session id the server announced.
    ///
    /// # Errors
    /// The server's error (e.g. `session_not_found`) or a connection error.
    pub async fn attach(&self, session_id: &str) -> Result<Session, RequestError> {
        let session_id =
            Id::new(session_id).map_err(|_| RequestError::NotAttached(String::new()))?;
        let (waiter, rx) = oneshot::channel();
        self.shared()
            .order(Order::Core(Command::Attach { session_id, waiter }))
            .await?;
        let target = match answered(rx.await) {
            Answer::Attached(r) => r?,
            Answer::Reply(r) => {
                r?;
                return Err(RequestError::NotSent("client closed".to_owned()));
            }
        };
        // The session as the server names it (`session_id` may have been a prefix).
        Ok(Session {
            client: self.clone(),
            session_id: target.session_id.clone(),
            first_target: target,
        })
    }
}

/// An attached session. Calls resolve the target when they are sent: if the connection is no
/// longer attached to this session, they fail with [`RequestError::NotAttached`] instead of
/// reaching the server with a stale route. It holds its [`Client`], so it keeps the
/// connection alive.
#[derive(Debug, Clone)]
pub struct Session {
    client: Client,
    session_id: Id,
    first_target: SessionTarget,
}

impl Session {
    /// The session id as the server announced it (the canonical id, even if the attach named
    /// a prefix).
    pub fn id(&self) -> &str {
        self.session_id.as_str()
    }

    /// The route the attach returned (it changes after a reconnect).
    pub fn initial_target(&self) -> &SessionTarget {
        &self.first_target
    }

    /// The client this session belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Calls a session service.
    ///
    /// # Errors
    /// [`RequestError`]; [`RequestError::NotAttached`] if the attachment is gone.
    pub async fn request(&self, call: Value) -> Result<Reply, RequestError> {
        self.request_with_options(call, RequestOptions::default())
            .await
    }

    /// [`request`](Self::request) with a cancellation token and/or timeout.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn request_with_options(
        &self,
        call: Value,
        options: RequestOptions,
    ) -> Result<Reply, RequestError> {
        self.client
            .request_with(TargetSpec::Session(self.session_id.clone()), call, options)
            .await
    }

    /// Subscribes to a session service and waits for its snapshot. After a reconnect the
    /// client re-attaches first, then re-subscribes.
    ///
    /// # Errors
    /// The server's error or a connection error.
    pub async fn subscribe(
        &self,
        service_id: &str,
        mode: ServiceMode,
    ) -> Result<Subscription, RequestError> {
        self.client
            .subscribe_at(
                TargetSpec::Session(self.session_id.clone()),
                service_id,
                mode,
            )
            .await
    }
}
