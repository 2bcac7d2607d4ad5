//! The boundary a host implements: the server routes calls here and never sees the agent
//! runtime behind it. Modelled on upstream v8 (`ServerHost`, `RoutedServerServiceHost`,
//! `RoutedSessionHandle`, `RoutedSessionAttachment`).
//!
//! # Why generic traits with `impl Future` rather than `dyn`
//!
//! A server serves exactly one host type, so [`Server`](crate::Server) is generic over
//! [`ServerHost`] and every call is statically dispatched: no boxing per call, and the host's
//! attachment and session types stay concrete (associated types) instead of being erased.
//! Methods return `impl Future<Output = …> + Send` (not `async fn`) so the server can
//! require `Send` futures and spawn them. A host that wants dynamic dispatch internally can
//! still implement these traits on a wrapper around `Arc<dyn …>` of its own.
//!
//! # Calling contract
//!
//! * [`ServerHost::admit`] runs once per connection, right after the listener established
//!   the peer's identity and before any protocol byte is read or written. A refusal is the
//!   connection's only frame (`hello_error`), followed by a lingering close.
//! * [`ServerHost::connect_services`] runs once per connection, during the handshake (the
//!   handshake deadline keeps running while it does). Its [`ServiceScope`] serves every
//!   request addressed to the server target, and is released when the connection ends.
//! * A request addressed to a session target reaches the [`SessionHandle::Lease`] of the
//!   connection's current attachment. Attaching is a server-scope service call of the host
//!   (`pi.session-management.attach` in pi) that calls [`Presentation::attach_session`].
//! * One [`SessionHandle`] per session is shared by every connection attached to it; it is
//!   closed at server shutdown or session removal, not when the last client leaves.
//! * Each method receives a [`Context`] with a cancellation token and the peer's identity.

use std::future::Future;

use baton_protocol::Value;

use crate::chord::ServiceCall;
use crate::context::Context;
use crate::error::ServiceError;
use crate::identity::PeerIdentity;
use crate::presentation::Presentation;
use crate::publish::Publisher;

/// What a call returns: `None` is a void response (no `result` key), `Some(Value::Null)`
/// is `"result": null`.
pub type CallResult = Result<Option<Value>, ServiceError>;

/// The host behind a server.
pub trait ServerHost: Send + Sync + 'static {
    /// The server-scope services of one connection.
    type Services: ServiceScope;
    /// What [`resolve_session`](Self::resolve_session) finds.
    type Metadata: SessionMetadata;
    /// A hosted session.
    type Session: SessionHandle;

    /// Decides whether a peer may talk to this host at all, from the identity the listener
    /// established (Unix credentials, the verified client certificate, the TCP address),
    /// before any protocol byte. `Err` refuses the connection: the error's code and message
    /// are sent as its only frame (`hello_error`, e.g. `forbidden`), then it is closed. Must
    /// not block: it runs in the connection's task before the handshake deadline starts.
    ///
    /// The default admits everyone.
    fn admit(&self, identity: &PeerIdentity) -> Result<(), ServiceError> {
        let _ = identity;
        Ok(())
    }

    /// Creates one connection's server-scope services (upstream
    /// `serverServices.attachClient(presentation, context)`). `presentation` lets those
    /// services attach and detach this connection to sessions.
    ///
    /// An error fails the handshake: the client receives it as `hello_error`.
    fn connect_services(
        &self,
        presentation: Presentation,
        ctx: Context,
    ) -> impl Future<Output = Result<Self::Services, ServiceError>> + Send;

    /// Finds a session by the id a client gave. Must not start anything. Fail with
    /// [`ServiceError::session_not_found`] or [`ServiceError::session_ambiguous`].
    fn resolve_session(
        &self,
        session_id: &str,
        ctx: Context,
    ) -> impl Future<Output = Result<Self::Metadata, ServiceError>> + Send;

    /// Starts hosting a session. Called at most once at a time per session id: concurrent
    /// attaches share one open and its failure.
    fn open_session(
        &self,
        metadata: Self::Metadata,
        ctx: Context,
    ) -> impl Future<Output = Result<Self::Session, ServiceError>> + Send;
}

/// What [`ServerHost::resolve_session`] returns.
pub trait SessionMetadata: Send + Sync + 'static {
    /// The canonical session id; hosted sessions are keyed by it.
    fn session_id(&self) -> &str;
}

/// Something that serves calls for one connection: the server-scope services, or a
/// connection's lease on a session.
pub trait ServiceScope: Send + Sync + 'static {
    /// Runs one service call. `publish` emits updates for subscriptions this call (or an
    /// earlier one) created; control calls (`$chord.service` catalogue, subscribe,
    /// unsubscribe) arrive here too, the server only post-processes their results.
    ///
    /// `ctx` is cancelled when the client cancels the request or disconnects. Returning an
    /// error after cancellation produces `cancelled`; returning a value produces a normal
    /// response.
    fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        ctx: Context,
    ) -> impl Future<Output = CallResult> + Send;

    /// Ends the attachment. Runs after every call admitted through it has settled.
    fn release(&self, ctx: Context) -> impl Future<Output = Result<(), ServiceError>> + Send;
}

/// How a hosted session ended on its own.
#[derive(Debug)]
pub enum Termination {
    /// An expected close.
    Closed,
    /// The host let go of the handle while no client was attached (e.g. an idle session's
    /// runtime was closed): the server forgets it quietly, and the next attach opens the
    /// session again. A lease asked of it meanwhile fails with
    /// [`ServiceError::SessionReleased`].
    Released,
    /// An unexpected failure (logged by the server).
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// One hosted session, shared by all of its attachments.
pub trait SessionHandle: Send + Sync + 'static {
    /// A connection's lease on this session.
    type Lease: ServiceScope;

    /// Admits one more connection. [`ServiceError::SessionReleased`] says the host let go of
    /// this handle meanwhile: the server forgets it and opens the session again.
    fn lease(&self, ctx: Context)
    -> impl Future<Output = Result<Self::Lease, ServiceError>> + Send;

    /// Resolves when the session ended by itself. The server then releases every
    /// attachment (each client receives `attachment: null`) and forgets the handle; a later
    /// attach opens a new one. The default never resolves.
    fn terminated(&self) -> impl Future<Output = Termination> + Send {
        std::future::pending()
    }

    /// Stops hosting the session (server shutdown or session removal).
    fn close(&self, ctx: Context) -> impl Future<Output = Result<(), ServiceError>> + Send;
}
