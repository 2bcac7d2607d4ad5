//! The context every host call receives: cancellation plus the authenticated peer.

use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::identity::{PeerIdentity, Transport};
use crate::request_cancel::RequestCancel;

/// A connection's number within one server, for logs and host bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub(crate) u64);

impl ConnectionId {
    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Facts about one connection, fixed when it was accepted.
#[derive(Debug)]
pub struct Peer {
    pub(crate) connection_id: ConnectionId,
    pub(crate) transport: Transport,
    pub(crate) identity: PeerIdentity,
}

impl Peer {
    /// The connection's number.
    pub fn connection_id(&self) -> ConnectionId {
        self.connection_id
    }

    /// The transport it arrived on.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Who the listener established the peer to be.
    pub fn identity(&self) -> &PeerIdentity {
        &self.identity
    }
}

/// Passed to every host call (upstream chord `Context`, with the real peer instead of a
/// placeholder).
///
/// `cancellation` fires when the work is no longer wanted: the client cancelled the request,
/// disconnected, or the server is shutting down. A host may ignore it; the request then
/// completes normally (upstream semantics). Contexts for server-internal work (opening a
/// session, closing handles) carry the peer that caused it, or none.
#[derive(Clone)]
pub struct Context {
    cancellation: Cancellation,
    peer: Option<Arc<Peer>>,
}

/// Where a context's cancellation comes from.
#[derive(Clone)]
enum Cancellation {
    /// Server-internal work: a token of its own.
    Token(CancellationToken),
    /// A request: its token is made only if the host asks for it ([`RequestCancel`]).
    Request(Arc<RequestCancel>),
}

impl Context {
    pub(crate) fn new(cancellation: CancellationToken, peer: Option<Arc<Peer>>) -> Self {
        Self {
            cancellation: Cancellation::Token(cancellation),
            peer,
        }
    }

    pub(crate) fn for_request(cancel: Arc<RequestCancel>, peer: Arc<Peer>) -> Self {
        Self {
            cancellation: Cancellation::Request(cancel),
            peer: Some(peer),
        }
    }

    /// True when the client explicitly cancelled this request (a `cancel` frame), as opposed
    /// to the cancellation that comes with a disconnect or a server shutdown. A host can use
    /// it to keep long work (an agent's turn) running when only the client went away.
    pub fn cancel_requested(&self) -> bool {
        match &self.cancellation {
            Cancellation::Token(_) => false,
            Cancellation::Request(c) => c.is_requested(),
        }
    }

    /// A context with no peer that is never cancelled (for tests and host-internal calls).
    pub fn background() -> Self {
        Self::new(CancellationToken::new(), None)
    }

    /// The cancellation signal.
    pub fn cancellation(&self) -> &CancellationToken {
        match &self.cancellation {
            Cancellation::Token(t) => t,
            Cancellation::Request(c) => c.token(),
        }
    }

    /// True once the work is no longer wanted.
    pub fn is_cancelled(&self) -> bool {
        match &self.cancellation {
            Cancellation::Token(t) => t.is_cancelled(),
            Cancellation::Request(c) => c.is_cancelled(),
        }
    }

    /// Resolves when the work is no longer wanted.
    pub async fn cancelled(&self) {
        self.cancellation().cancelled().await;
    }

    /// The connection this call came from, if any.
    pub fn peer(&self) -> Option<&Peer> {
        self.peer.as_deref()
    }

    /// The authenticated identity of the peer, if the call came from a connection.
    pub fn identity(&self) -> Option<&PeerIdentity> {
        self.peer.as_deref().map(Peer::identity)
    }

    pub(crate) fn peer_arc(&self) -> Option<Arc<Peer>> {
        self.peer.clone()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("cancelled", &self.is_cancelled())
            .field("peer", &self.peer)
            .finish()
    }
}
