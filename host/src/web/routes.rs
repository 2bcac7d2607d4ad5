//! The HTTP surface: the page, `POST /pair`, `GET /me` and the `GET /ws` upgrade, each behind
//! the `Host`, `Origin` and cookie checks, every answer with the security headers.
//!
//! | path | checks | answer |
//! |---|---|---|
//! | `GET`/`HEAD` `/`, `/assets/app.js`, `/assets/app.css` | Host | the embedded page (gzip if accepted, `ETag`, 304 on `If-None-Match`) |
//! | `POST /pair` (JSON `{"code"}`, ≤ 4 KiB) | Host, Origin (required) | 200 `{"tokenId","role","session","serverId"}` + `Set-Cookie`, or 403 `{"error"}` |
//! | `GET /me` | Host, Origin (if sent) | 200 as `/pair`, or 401 `{"error"}` |
//! | `GET /ws` | Host, Origin (required), cookie | 101 and the socket, or 403 with one line |
//!
//! A refused request is answered before anything is upgraded or any protocol byte flows.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_server::{PeerIdentity, Server, ServerHost};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::assets::{Asset, asset, none_match};
use super::cookie;
use super::encoding::accepts_gzip;
use super::gate::{WebGate, WebPeer};
use super::headers::secure;
use super::heartbeat::HeartbeatConfig;
use super::hosts::Hosts;
use super::socket::WsBytes;
use crate::spawn::spawn_tracked;

/// The largest `POST /pair` body.
pub const MAX_PAIR_BODY: usize = 4 * 1024;

/// A response body: always whole (the page is embedded, errors are one line).
pub(crate) type Body = Full<Bytes>;

/// What every request of one listener shares.
pub(crate) struct Site<H: ServerHost> {
    pub(crate) hosts: Hosts,
    pub(crate) gate: Arc<dyn WebGate>,
    pub(crate) server: Arc<Server<H>>,
    pub(crate) ws_config: WebSocketConfig,
    /// Bounds a request body's arrival (and the TLS handshake, and request headers).
    pub(crate) timeout: Duration,
    /// Each socket's heartbeat, if any.
    pub(crate) heartbeat: Option<HeartbeatConfig>,
    /// Upgraded sockets' watchers.
    pub(crate) tasks: TaskTracker,
    pub(crate) shutdown: CancellationToken,
}

/// Answers one request; every answer carries the security headers.
pub(crate) async fn handle<H: ServerHost>(
    site: Arc<Site<H>>,
    req: Request<Incoming>,
    addr: SocketAddr,
) -> Response<Body> {
    let no_store = matches!(req.uri().path(), "/pair" | "/me");
    let scheme = site.hosts.scheme();
    let mut response = route(site, req, addr).await;
    secure(response.headers_mut(), scheme, no_store);
    response
}

async fn route<H: ServerHost>(
    site: Arc<Site<H>>,
    req: Request<Incoming>,
    addr: SocketAddr,
) -> Response<Body> {
    let Some(host) = header_text(req.headers(), header::HOST).map(str::to_owned) else {
        return text(StatusCode::FORBIDDEN, "forbidden: no Host header");
    };
    if !site.hosts.allows(&host) {
        tracing::debug!(%host, "refused: a Host this listener does not answer to");
        let shown = shown_host(&host);
        return text(
            StatusCode::FORBIDDEN,
            &format!(
                "forbidden: this host does not answer to \"{shown}\"; \
                 start it with --web-host {shown} to allow that name"
            ),
        );
    }
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/ws") => upgrade(site, req, &host, addr),
        (&Method::POST, "/pair") => pair(&site, req, &host).await,
        (&Method::GET, "/me") => me(&site, &req, &host),
        (_, "/ws" | "/pair" | "/me") => method_not_allowed(),
        (&Method::GET | &Method::HEAD, p) => match asset(p) {
            Some(a) => page(a, req.headers()),
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        (_, p) if asset(p).is_some() => method_not_allowed(),
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// An embedded file: gzip if the request accepts it, with its `ETag`, revalidated on every load
/// (`no-cache`: the names are not content-hashed), 304 with no body when `If-None-Match` names
/// the form that would be sent.
fn page(a: &Asset, headers: &HeaderMap) -> Response<Body> {
    let gzip = accepts_gzip(headers);
    let etag = a.etag(gzip);
    let unchanged = none_match(
        headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok()),
        etag,
    );
    let mut r = if unchanged {
        let mut r = Response::new(Body::default());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Full::new(Bytes::from_static(if gzip {
            a.gzip
        } else {
            a.body
        })));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(a.content_type),
        );
        if gzip {
            r.headers_mut()
                .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        r
    };
    let h = r.headers_mut();
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    r
}

/// `Origin` must be the page's own; `required` unless a same-origin GET may leave it out.
fn check_origin(
    hosts: &Hosts,
    headers: &HeaderMap,
    host: &str,
    required: bool,
) -> Result<(), &'static str> {
    match header_text(headers, header::ORIGIN) {
        Some(origin) if hosts.is_own_origin(host, origin) => Ok(()),
        Some(_) => Err("forbidden: Origin is not this page's"),
        None if required => Err("forbidden: no Origin header"),
        None => Ok(()),
    }
}

#[derive(Deserialize)]
struct PairBody {
    code: String,
}

async fn pair<H: ServerHost>(site: &Site<H>, req: Request<Incoming>, host: &str) -> Response<Body> {
    if let Err(why) = check_origin(&site.hosts, req.headers(), host, true) {
        return json_error(StatusCode::FORBIDDEN, why);
    }
    let is_json = header_text(req.headers(), header::CONTENT_TYPE).is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if !is_json {
        return json_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected Content-Type: application/json",
        );
    }
    let body = Limited::new(req.into_body(), MAX_PAIR_BODY).collect();
    let body = match tokio::time::timeout(site.timeout, body).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) => {
            return json_error(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 4 KiB");
        }
        Err(_) => return json_error(StatusCode::REQUEST_TIMEOUT, "the body did not arrive"),
    };
    let Ok(PairBody { code }) = serde_json::from_slice(&body) else {
        return json_error(StatusCode::BAD_REQUEST, "expected {\"code\":\"…\"}");
    };
    match site.gate.pair(&code) {
        Ok(paired) => {
            let mut r = json(StatusCode::OK, &peer_json(site, &paired.peer));
            if let Ok(v) =
                HeaderValue::from_str(&cookie::set(&paired.cookie_value, site.hosts.scheme()))
            {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(refused) => json_error(StatusCode::FORBIDDEN, &refused.0),
    }
}

fn me<H: ServerHost>(site: &Site<H>, req: &Request<Incoming>, host: &str) -> Response<Body> {
    if let Err(why) = check_origin(&site.hosts, req.headers(), host, false) {
        return json_error(StatusCode::FORBIDDEN, why);
    }
    match cookie::read(req.headers(), site.hosts.scheme()).and_then(|c| site.gate.authenticate(c)) {
        Some(peer) => json(StatusCode::OK, &peer_json(site, &peer)),
        None => json_error(
            StatusCode::UNAUTHORIZED,
            "not paired: open a link from `baton link`",
        ),
    }
}

fn upgrade<H: ServerHost>(
    site: Arc<Site<H>>,
    mut req: Request<Incoming>,
    host: &str,
    addr: SocketAddr,
) -> Response<Body> {
    if let Err(why) = check_origin(&site.hosts, req.headers(), host, true) {
        tracing::debug!(%addr, "socket refused: {why}");
        return text(StatusCode::FORBIDDEN, why);
    }
    let Some(peer) =
        cookie::read(req.headers(), site.hosts.scheme()).and_then(|c| site.gate.authenticate(c))
    else {
        tracing::debug!(%addr, "socket refused: no valid cookie");
        return text(StatusCode::FORBIDDEN, "forbidden: not paired");
    };
    let headers = req.headers();
    let has_token = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if !has_token(header::CONNECTION, "upgrade") || !has_token(header::UPGRADE, "websocket") {
        return text(StatusCode::BAD_REQUEST, "expected a WebSocket upgrade");
    }
    if header_text(headers, header::SEC_WEBSOCKET_VERSION) != Some("13") {
        let mut r = text(StatusCode::UPGRADE_REQUIRED, "WebSocket version 13 only");
        r.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        return r;
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return text(StatusCode::BAD_REQUEST, "no Sec-WebSocket-Key");
    };
    let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) else {
        return text(StatusCode::BAD_REQUEST, "bad Sec-WebSocket-Key");
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let tasks = site.tasks.clone();
    spawn_tracked(&tasks, async move {
        let upgraded = tokio::select! {
            u = on_upgrade => match u {
                Ok(u) => u,
                Err(error) => {
                    tracing::debug!(%error, "upgrade failed");
                    return;
                }
            },
            () = site.shutdown.cancelled() => return,
        };
        serve_socket(&site, TokioIo::new(upgraded), peer, addr).await;
    });
    let mut r = Response::new(Body::default());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    r
}

/// Hands an upgraded socket to the server as the browser identity `web:<token id>`, and
/// closes the token's connections when it is revoked.
async fn serve_socket<H: ServerHost>(
    site: &Site<H>,
    io: TokioIo<hyper::upgrade::Upgraded>,
    peer: WebPeer,
    addr: SocketAddr,
) {
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(site.ws_config)).await;
    let ended = CancellationToken::new();
    let mut bytes = WsBytes::new(ws)
        .revoked_by(peer.revoked.clone())
        .cancel_on_drop(ended.clone());
    if let Some(heartbeat) = site.heartbeat {
        bytes = bytes.heartbeat(heartbeat);
    }
    let identity = PeerIdentity::Web {
        token_id: peer.token_id.clone(),
        addr,
    };
    if let Err(error) = site.server.adopt(bytes, identity) {
        tracing::debug!(%error, "socket not served");
        return;
    }
    tokio::select! {
        () = peer.revoked.cancelled() => {
            let closed = site
                .server
                .close_connections(|p| p.web_token_id() == Some(peer.token_id.as_str()));
            tracing::info!(token = %peer.token_id, closed, "browser token revoked: its sockets closed");
        }
        () = ended.cancelled() => {}
        () = site.shutdown.cancelled() => {}
    }
}

/// Who the browser is, and the server id its client must expect in `hello` (so the page
/// needs no probe connection to learn it).
fn peer_json<H: ServerHost>(site: &Site<H>, peer: &WebPeer) -> serde_json::Value {
    serde_json::json!({
        "tokenId": peer.token_id,
        "role": peer.role,
        "session": peer.session,
        "serverId": site.server.server_id().to_string(),
    })
}

/// The longest refused `Host` a refusal repeats.
const MAX_SHOWN_HOST: usize = 100;

/// A refused `Host` fit to repeat in one line: printable ASCII only (anything else becomes
/// `?`), cut at [`MAX_SHOWN_HOST`] characters.
fn shown_host(host: &str) -> String {
    host.chars()
        .take(MAX_SHOWN_HOST)
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn text(status: StatusCode, line: &str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{line}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(value.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn json_error(status: StatusCode, line: &str) -> Response<Body> {
    json(status, &serde_json::json!({ "error": line }))
}

fn method_not_allowed() -> Response<Body> {
    text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_host_is_repeated_as_printable_ascii_within_the_cap() {
        assert_eq!(shown_host("evil.example:7880"), "evil.example:7880");
        assert_eq!(shown_host("a\tb\u{e9}\u{7f}"), "a?b??");
        assert_eq!(shown_host(&"x".repeat(500)).len(), MAX_SHOWN_HOST);
    }
}
