//! # baton-client
//!
//! The client side of Pi protocol v8: connect over Unix sockets, TCP or TLS (optionally with
//! a client certificate), make routed requests, cancel them, attach to sessions, and rebuild a
//! service's live state from one snapshot plus deltas. The `baton` command is built on it.
//!
//! ```text
//! Client / Session / Subscription ──orders (bounded)──▶ connection task ◀──▶ socket
//!   ▲                                                    │ owns ClientConn (sans-IO core)
//!   └─ answers (oneshot) · replicas, attachment, status ─┘ and every channel it feeds
//!      (watch) · subscription events (bounded mpsc)
//! ```
//!
//! The connection logic is a sans-IO core, `conn::ClientConn` (handshake, the one request
//! table, the in-flight limit, deadlines, the attachment route, subscriptions, the reconnect
//! plan; time and the jitter seed are inputs; unit-tested without sockets or tokio). It owns
//! no channel: it emits events, and the task around it (`driver`) only reads into the core's
//! buffer, writes what it hands out, sleeps until its next deadline and turns its events into
//! sends.
//!
//! * [`Client::connect`] opens the transport and completes the handshake (an expected
//!   `serverId` is enforced).
//! * [`Client::request`] returns the server's answer; responses may arrive in any order.
//! * [`Client::attach`] returns a [`Session`] whose calls always use the current attachment.
//! * [`Client::subscribe`] / [`Session::subscribe`] return a [`Subscription`]: a replica plus
//!   a stream of [`SubscriptionEvent`]s. Updates are applied to the replica straight from
//!   the frame bytes and reach the stream in batches, one [`UpdateBatch`] per read, decoded
//!   only on demand. A session subscription ends ([`EndReason`]) when its attachment does; a
//!   dropped connection alone only makes it resync.
//!
//! ## Lifetime
//! The connection lives while a handle that can use it does: a [`Client`] (any clone), a
//! [`Session`], or a [`Subscription`] (which keeps receiving after its client was dropped, as
//! a stream does). When the last of them is dropped the connection task stops: it makes no
//! further attempt to connect, sends nothing more, closes the socket and ends, and the status
//! becomes [`Status::Closed`] ([`CloseReason::Requested`]). A status, attachment or replica
//! watch does not keep it alive. [`Client::close`] ends it at once, whatever handles remain.
//!
//! ## Cancellation
//! Dropping a request future cancels it: the pending entry is removed and, if the request was
//! already sent, a `cancel` goes to the server. A cancellation token or timeout in
//! [`RequestOptions`] does the same. Dropping a [`Subscription`] unsubscribes.
//!
//! ## Disconnects
//! A request that was sent but not answered when the connection dropped fails with
//! [`RequestError::OutcomeUnknown`]: it may have run. One that never left the client fails
//! with [`RequestError::NotSent`]. With a [`ReconnectPolicy`] the client reconnects with
//! backoff (to the same `serverId` only), re-attaches and re-subscribes; subscriptions report
//! [`SubscriptionEvent::Resyncing`] and then a fresh snapshot. [`Status::Reconnecting`]
//! carries the delay drawn for the next attempt.
//!
//! A reconnect attempt that no retry can cure ends the client at once with
//! [`Status::Closed`] and [`CloseReason::Refused`] (a typed [`ReconnectRefusal`]): another
//! server id answers at the address, the server refused this identity (access policy or TLS
//! client certificate), this client no longer trusts its certificate, or it speaks another
//! protocol version. Every other failure is retried.
//!
//! ## Modules, bottom up
//! Each layer uses only the layers below it:
//!
//! 1. Leaves: `endpoint`, `status`, `reply`, `tls` (configuration and [`TlsFailure`]), then
//!    `config` and `error`; `transport` opens a byte stream for an endpoint.
//! 2. `conn/`: the sans-IO core (`command`, `event`, `requests`, `in_flight`,
//!    `subscriptions`); it knows nothing of tokio's channels or the layers above.
//! 3. `sink` (each subscription's channels on the task's side, and the replicas the task
//!    lends the core), then `shared` (what the handles share: the order queue, and the
//!    mailbox they share with the task: `Drop`'s deferred work and the signals that stop it).
//! 4. `driver`: the connection task.
//! 5. The public handles: `subscription` ([`Subscription`]), `client` ([`Client`]), and
//!    `session` ([`Session`], and [`Client::attach`], which makes one).

mod client;
mod config;
mod conn;
mod driver;
mod endpoint;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod reply;
mod session;
mod shared;
mod sink;
mod status;
mod subscription;
mod tls;
mod transport;

pub use client::{Client, RequestOptions};
pub use config::{
    ClientConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_EARLY_UPDATE_BUFFER, DEFAULT_HEALTHY_AFTER,
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_RECONNECT_JITTER, DEFAULT_SUBSCRIPTION_EVENTS,
    DEFAULT_TCP_KEEPALIVE_INTERVAL, DEFAULT_TCP_KEEPALIVE_RETRIES, DEFAULT_TCP_KEEPALIVE_TIME,
    DEFAULT_WRITE_BACKLOG, KeepaliveConfig, ReconnectPolicy, Relocate,
};
pub use conn::{
    Encodings, EndReason, SESSION_MANAGEMENT_SERVICE, SubscriptionEvent, UpdateBatch, Updates,
};
pub use endpoint::{Endpoint, EndpointError};
pub use error::{ConnectError, RequestError};
pub use reply::Reply;
pub use session::Session;
pub use status::{CloseReason, ReconnectRefusal, Status};
pub use subscription::Subscription;
pub use tls::{TlsConfigError, TlsFailure, TlsOptions};
