//! # baton-server
//!
//! The server side of Pi protocol v8 with the chord service layer: it accepts connections on
//! Unix, TCP and TLS listeners, runs the hello handshake, and routes every request to a
//! **host** (the application that owns agent sessions) through the traits in [`host`]. It
//! is byte-exact with upstream pi 1.0.x where upstream defines behaviour, and stronger where
//! upstream is weak: TLS with optional client certificates, the peer's authenticated
//! identity in every host [`Context`], bounded subscriber queues that fall back to a resync
//! from the current snapshot (in updates every upstream client accepts) instead of dropping
//! updates or blocking the host, limits on everything a peer
//! can grow, and a graceful drain.
//!
//! ```text
//!   listeners (unix 0600 / tcp / tls)  ──▶  connection: reader ─▶ ConnState ◀─ request tasks
//!           authenticate the peer                         │          ▲            │
//!                                                         ▼          │ publish    ▼
//!                                                      writer     Publisher    host traits
//!                                                                              (ServerHost,
//!                                                  Router: attachments, ◀──── SessionHandle)
//!                                                  hosted sessions
//! ```
//!
//! ## Embedding
//!
//! ```no_run
//! # use baton_server::*;
//! # async fn run<H: ServerHost>(host: H) -> Result<(), Box<dyn std::error::Error>> {
//! let server_id = "00000000-0000-4000-8000-000000000001".parse()?;
//! let config = ServerConfig::new(server_id);
//! let server = Server::start(config, host, vec![
//!     Listener::unix("/run/baton"),
//!     Listener::tcp("127.0.0.1:7400".parse()?),
//! ]).await?;
//! // ... until shutdown is requested:
//! server.close().await?;
//! # Ok(()) }
//! ```
//!
//! An embedder with a transport of its own (the host's web listener upgrades WebSockets and
//! authenticates browsers itself) hands each connection to [`Server::adopt`] with the
//! identity it established; from there it is served like a listener's.
//!
//! ## Limits
//!
//! | limit | default | on excess |
//! |---|---|---|
//! | frame length | [`DEFAULT_MAX_FRAME_LENGTH`] (16 MiB) | `hello_error{invalid_request}`, close |
//! | handshake | [`DEFAULT_HANDSHAKE_TIMEOUT`] (5 s) | `hello_error{invalid_request, "Handshake timeout"}`, close |
//! | pending outbound bytes | 4 × frame length | connection closed (logged) |
//! | connections | [`DEFAULT_MAX_CONNECTIONS`] | `hello_error{busy}`, close |
//! | active requests per connection | [`DEFAULT_MAX_ACTIVE_REQUESTS`] | response `busy`, connection kept |
//! | subscriptions per connection | [`DEFAULT_MAX_SUBSCRIPTIONS`] | response `busy`, connection kept |
//! | pending updates per subscriber | [`DEFAULT_SUBSCRIBER_QUEUE_LENGTH`] | backlog replaced by a resync (`replaced`, or `closed` + `spawned`; [`ResyncDialect`]) |
//! | drain | [`DEFAULT_DRAIN_TIMEOUT`] | in-flight requests abandoned |
//!
//! ## Cancellation
//!
//! Dropping a [`Server`] without [`Server::close`] stops accepting, aborts every connection
//! and abandons in-flight host calls without waiting. [`Server::close`] is the graceful path.
//! A client `cancel` only fires the request's [`Context`] token: the host decides whether to
//! stop (the client then gets `cancelled`) or to finish (a normal response).
//!
//! ## Modules, bottom up
//! Each layer uses only the layers below it (and, within a layer, those named before):
//!
//! 1. Leaves: `error`, `random`, `tasks`, `panics`, `config`, [`listen`] (sockets, TLS, the
//!    lingering close), `identity` ([`SubjectAltName`] below the certificate reader),
//!    `context`, and [`chord`] (the chord types and the subscription encoders).
//! 2. The sans-IO connection core in `conn/`: `limits`, `outbound`, `subscriptions`, `state`,
//!    then `shared`, the handle on one connection's state that every layer above uses.
//! 3. What the host traits name: `presentation` ([`Presentation`]) and `publish`
//!    ([`Publisher`]); beside them `registry`, the live connections of one server.
//! 4. [`host`]: the traits a host implements.
//! 5. `router`: session routing over the host's sessions.
//! 6. The connection task, `conn/mod.rs` (its reads sized by `conn/read`): reader, writer
//!    and request tasks.
//! 7. `server`: listeners, accept loops and graceful close ([`Server`]).
//!
//! `fuzzing` holds the fuzz targets' bodies over the core.

pub mod chord;
mod config;
mod conn;
mod context;
mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
mod identity;
pub mod listen;
mod panics;
mod presentation;
mod publish;
mod random;
mod registry;
mod request_cancel;
mod router;
mod server;
mod tasks;

pub use chord::SharedUpdate;
pub use config::{
    DEFAULT_DRAIN_TIMEOUT, DEFAULT_GRACEFUL_CLOSE_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_ACTIVE_REQUESTS, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_FRAME_LENGTH,
    DEFAULT_MAX_PENDING_BYTES_FRAMES, DEFAULT_MAX_SUBSCRIPTIONS, DEFAULT_SUBSCRIBER_QUEUE_LENGTH,
    DEFAULT_TCP_KEEPALIVE_INTERVAL, DEFAULT_TCP_KEEPALIVE_RETRIES, DEFAULT_TCP_KEEPALIVE_TIME,
    KeepaliveConfig, MAX_TIMEOUT, ResyncDialect, ServerConfig,
};
pub use context::{ConnectionId, Context, Peer};
pub use error::{
    AdoptError, CloseError, ConfigError, INTERNAL_SERVER_ERROR_MESSAGE, ListenError, ServiceError,
    StartError,
};
pub use host::{CallResult, ServerHost, ServiceScope, SessionHandle, SessionMetadata, Termination};
pub use identity::{ClientCertificate, PeerIdentity, SubjectAltName, Transport};
pub use listen::{ClientAuth, ListenAddr, Listener, TcpOptions, TlsConfig, unix_socket_path};
pub use presentation::Presentation;
pub use publish::{Published, Publisher};
pub use router::MAX_ATTACH_ATTEMPTS;
pub use server::Server;
