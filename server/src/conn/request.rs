//! One request's host call: polled once in the connection's task, and only if it is not done
//! then, the rest in a tracked task that the drain waits for and the hard stop drops.
//!
//! The fast path (a call that answers on its first poll) costs no task, no wake-up, no
//! boxed future (the connection's [`FirstPoll`] slot is reused), no clone of the server-wide
//! hard-stop token, and no span work beyond the macro's level check when nothing listens.

use std::future::Future;
use std::sync::Arc;

use baton_protocol::{Id, Target};
use tracing::{Instrument, Span};

use crate::conn::ServerShared;
use crate::conn::shared::ConnShared;
use crate::conn::state::Dispatch;
use crate::context::{Context, Peer};
use crate::error::ServiceError;
use crate::host::{CallResult, ServerHost, ServiceScope};
use crate::panics::guarded;
use crate::publish::Publisher;
use crate::router::Router;
use crate::tasks::{FirstPoll, spawn_counted};

/// Which scope serves a call.
enum Scope<H: ServerHost> {
    Server(Arc<H::Services>),
    Session(Arc<Router<H>>, baton_protocol::SessionTarget),
}

/// A dispatched request, ready to run: its id, its span, and its host call (a panic in the
/// host is its error, so it always ends in an answer).
pub(super) fn prepare<H: ServerHost>(
    server: &ServerShared<H>,
    shared: &Arc<ConnShared>,
    peer: &Arc<Peer>,
    services: &Arc<H::Services>,
    d: Dispatch,
) -> (
    Id,
    Span,
    impl Future<Output = CallResult> + Send + 'static + use<H>,
) {
    let Dispatch {
        id,
        target,
        call,
        cancel,
    } = d;
    let span = tracing::info_span!(
        "request",
        id = %id,
        service = %call.service_id,
        member = %call.member,
    );
    let scope = match target {
        Target::Server(_) => Scope::Server(Arc::clone(services)),
        Target::Session(t) => Scope::Session(Arc::clone(&server.router), t),
    };
    let conn_id = peer.connection_id;
    let publisher = Publisher::new(Arc::downgrade(shared));
    let ctx = Context::for_request(cancel, Arc::clone(peer));
    let work = guarded("call", async move {
        match scope {
            Scope::Server(services) => services.invoke_service(call, publisher, ctx).await,
            Scope::Session(router, t) => router.execute(conn_id, &t, call, publisher, ctx).await,
        }
    });
    (id, span, work)
}

/// Runs a prepared request: its first poll here, inside its span; if it is not done, the
/// rest in a task counted by the server's request tracker (the caller holds a token of that
/// tracker since before the request was dispatched, so a drain cannot miss it).
pub(super) fn run<H, F>(
    server: &Arc<ServerShared<H>>,
    shared: &Arc<ConnShared>,
    first_poll: &mut FirstPoll<F>,
    (id, span, work): (Id, Span, F),
) where
    H: ServerHost,
    F: Future<Output = CallResult> + Send + 'static,
{
    let polled = {
        let _entered = span.enter();
        first_poll.poll(work)
    };
    let rest = match polled {
        Ok(result) => {
            shared.with(|s| s.finish_request(&id, result));
            return;
        }
        Err(rest) => rest,
    };
    let token = server.requests.token();
    let server = Arc::clone(server);
    let shared = Arc::clone(shared);
    spawn_counted(
        token,
        async move {
            // The call first: one that is done never registers with the server-wide token.
            let result = tokio::select! {
                biased;
                r = rest => r,
                () = server.hard_stop.cancelled() => {
                    tracing::debug!("abandoned at the drain deadline");
                    Err(ServiceError::server_draining())
                }
            };
            shared.with(|s| s.finish_request(&id, result));
        }
        .instrument(span),
    );
}
