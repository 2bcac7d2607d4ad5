//! The web listener (feature `web`): the page, one-time pairing and the WebSocket endpoint
//! browsers connect to, in front of the server's connection core (docs/web.md).
//!
//! ```text
//!   TCP (loopback http / https) ─▶ hyper HTTP/1 ─▶ routes: Host, Origin, cookie (WebGate)
//!                                                   │ GET /ws: 101
//!                                                   ▼
//!                         WsBytes (binary messages ⇄ frame bytes) ─▶ Server::adopt
//! ```
//!
//! * `gate`: [`WebGate`], what the host's browser identities answer (pairing, cookies).
//! * `hosts`: the `Host` values the listener answers to and the page's origin ([`Scheme`]).
//! * `headers`, `cookie`, `assets`, `encoding`: the security headers, the `baton_web` cookie
//!   (`__Host-baton_web` on https), the embedded page (plain and gzip, with entity tags),
//!   `Accept-Encoding`.
//! * `socket`: [`WsBytes`], a WebSocket as a byte stream (caps, backpressure, closes);
//!   `heartbeat`: its pings and the deadline for an answer ([`HeartbeatConfig`]).
//! * `routes`: the HTTP surface; `tls`: [`WebTls`]; `listener`: [`WebListener`].

mod assets;
mod cookie;
mod encoding;
mod error;
mod gate;
mod headers;
mod heartbeat;
mod hosts;
mod listener;
mod routes;
mod socket;
mod tls;

pub use cookie::{COOKIE_NAME, SECURE_COOKIE_NAME, cookie_name};
pub use error::WebError;
pub use gate::{PairRefused, Paired, WebGate, WebPeer};
pub use headers::{CONTENT_SECURITY_POLICY, STRICT_TRANSPORT_SECURITY};
pub use heartbeat::{DEAD_AFTER, HeartbeatConfig, PING_INTERVAL};
pub use hosts::{Scheme, check_web_host};
pub use listener::{MAX_HTTP_CONNECTIONS, WebConfig, WebListener};
pub use routes::MAX_PAIR_BODY;
pub use socket::{MAX_WRITE_MESSAGE, WsBytes, config as websocket_config};
pub use tls::WebTls;
