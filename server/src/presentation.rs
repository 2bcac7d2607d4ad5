//! The face of the router a connection's server-scope services get (upstream
//! `RoutedServerPresentation`): attach, detach and prepare a removal. The router implements
//! [`PresentationOps`] for each connection; the host only ever sees [`Presentation`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::context::Context;
use crate::error::ServiceError;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a [`Presentation`] asks of the router, for its one connection.
pub(crate) trait PresentationOps: Send + Sync {
    /// See [`Presentation::attach_session`].
    fn attach(&self, session_id: String, ctx: Context) -> BoxFuture<Result<(), ServiceError>>;
    /// See [`Presentation::detach_session`].
    fn detach(&self, ctx: Context) -> BoxFuture<Result<(), ServiceError>>;
    /// See [`Presentation::prepare_session_removal`].
    fn prepare_removal(
        &self,
        session_id: String,
        ctx: Context,
    ) -> BoxFuture<Result<(), ServiceError>>;
}

/// What a connection's server-scope services use to attach it to sessions (upstream
/// `RoutedServerPresentation`). Cheap to clone; after the connection or server is gone,
/// every method fails with `server_draining`.
#[derive(Clone)]
pub struct Presentation {
    inner: Arc<dyn PresentationOps>,
}

impl fmt::Debug for Presentation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Presentation").finish_non_exhaustive()
    }
}

impl Presentation {
    pub(crate) fn new(ops: Arc<dyn PresentationOps>) -> Self {
        Self { inner: ops }
    }

    /// Attaches this connection to `session_id` (resolving and opening it if needed) and
    /// sends the client its `attachment` route before this returns. Attaching again to the
    /// current session does nothing. A previous attachment to another session is released
    /// without an `attachment: null`.
    ///
    /// # Errors
    /// `server_draining` while shutting down or after the client left; the host's
    /// `session_not_found` / `session_ambiguous`; the host's open failure (shared by
    /// concurrent attaches).
    pub async fn attach_session(&self, session_id: &str, ctx: Context) -> Result<(), ServiceError> {
        self.inner.attach(session_id.to_owned(), ctx).await
    }

    /// Detaches this connection: waits for its admitted session calls, releases the lease
    /// and sends `attachment: null` before returning. Does nothing if not attached.
    ///
    /// # Errors
    /// `server_draining` after the server or connection is gone.
    pub async fn detach_session(&self, ctx: Context) -> Result<(), ServiceError> {
        self.inner.detach(ctx).await
    }

    /// Before a session is deleted: releases every connection's attachment to it (each
    /// client gets `attachment: null`) and closes its handle.
    ///
    /// # Errors
    /// `server_draining` while shutting down; the handle's close error.
    pub async fn prepare_session_removal(
        &self,
        session_id: &str,
        ctx: Context,
    ) -> Result<(), ServiceError> {
        self.inner.prepare_removal(session_id.to_owned(), ctx).await
    }
}
