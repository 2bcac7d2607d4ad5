//! The listener: binds, accepts, runs TLS (if any) and hyper's HTTP/1 with upgrades for each
//! connection, and stops and waits for all of it on close.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use baton_server::listen::configure_accepted;
use baton_server::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_FRAME_LENGTH, KeepaliveConfig, Server, ServerHost,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::error::WebError;
use super::gate::WebGate;
use super::heartbeat::HeartbeatConfig;
use super::hosts::{Hosts, Scheme};
use super::routes::{Site, handle};
use super::socket;
use super::tls::WebTls;
use crate::spawn::spawn_tracked;

/// HTTP connections served at once (page loads, pairing, upgrades in progress); beyond it
/// accepting waits. An upgraded socket leaves this count and holds a server connection slot
/// instead.
pub const MAX_HTTP_CONNECTIONS: usize = 512;
/// How long an HTTP connection may finish its request once the listener closes.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Where and how the web listener serves.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WebConfig {
    /// Address to bind; port 0 picks a free port.
    pub addr: SocketAddr,
    /// HTTPS with this certificate; `None`: plain HTTP.
    pub tls: Option<WebTls>,
    /// More names the listener answers to (`--web-host NAME[:PORT]`), preferred for links.
    pub web_hosts: Vec<String>,
    /// Plain HTTP on a non-loopback address (cookies in the clear). Off by default.
    pub allow_insecure_remote: bool,
    /// The server's frame limit: WebSocket messages are capped at it plus 4.
    pub max_frame_length: u32,
    /// Bounds the TLS handshake, request headers and a request body's arrival.
    pub timeout: Duration,
    /// TCP keepalive and (Linux) user timeout on accepted sockets, as the server's
    /// [`ServerConfig::tcp_keepalive`](baton_server::ServerConfig::tcp_keepalive); `None`
    /// disables both.
    pub tcp_keepalive: Option<KeepaliveConfig>,
    /// The WebSocket heartbeat: the server's pings and the silence after which a socket is
    /// closed; `None` disables it.
    pub heartbeat: Option<HeartbeatConfig>,
}

impl WebConfig {
    /// Plain HTTP on `addr` (loopback unless allowed otherwise), the server's default frame
    /// limit, handshake timeout and keepalive, and the default heartbeat.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            tls: None,
            web_hosts: Vec::new(),
            allow_insecure_remote: false,
            max_frame_length: DEFAULT_MAX_FRAME_LENGTH,
            timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            tcp_keepalive: Some(KeepaliveConfig::default()),
            heartbeat: Some(HeartbeatConfig::default()),
        }
    }
}

/// A running web listener. Stopped by [`WebListener::close`] (or by dropping it, without
/// waiting). Sockets it upgraded are the server's connections: [`Server::close`] drains them.
#[derive(Debug)]
pub struct WebListener {
    local: SocketAddr,
    base_urls: Vec<String>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl WebListener {
    /// Binds `config.addr` and serves the page, pairing through `gate` and sockets into
    /// `server`.
    ///
    /// # Errors
    /// [`WebError::InsecureRemote`] for plain HTTP off loopback without the opt-in,
    /// [`WebError::WebHost`] for a malformed name, [`WebError::Bind`].
    pub async fn start<H: ServerHost>(
        config: WebConfig,
        server: Arc<Server<H>>,
        gate: Arc<dyn WebGate>,
    ) -> Result<Self, WebError> {
        let scheme = match config.tls {
            Some(_) => Scheme::Https,
            None => Scheme::Http,
        };
        if scheme == Scheme::Http
            && !config.addr.ip().is_loopback()
            && !config.allow_insecure_remote
        {
            return Err(WebError::InsecureRemote(config.addr));
        }
        let listener = TcpListener::bind(config.addr)
            .await
            .map_err(|source| WebError::Bind {
                addr: config.addr,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| WebError::Bind {
            addr: config.addr,
            source,
        })?;
        let cert_names = config
            .tls
            .as_ref()
            .map(|t| t.dns_names.clone())
            .unwrap_or_default();
        let hosts = Hosts::new(scheme, local, &cert_names, &config.web_hosts)?;
        let base_urls = hosts.base_urls().to_vec();
        let tasks = TaskTracker::new();
        let stop = CancellationToken::new();
        let site = Arc::new(Site {
            hosts,
            gate,
            server,
            ws_config: socket::config(config.max_frame_length),
            timeout: config.timeout,
            heartbeat: config.heartbeat,
            tasks: tasks.clone(),
            shutdown: stop.clone(),
        });
        let acceptor = config
            .tls
            .map(|t| tokio_rustls::TlsAcceptor::from(t.config));
        tracing::info!(addr = %local, %scheme, "web listener on {}", base_urls.first().map_or("", String::as_str));
        spawn_tracked(
            &tasks,
            accept_loop(
                listener,
                site,
                acceptor,
                config.tcp_keepalive,
                tasks.clone(),
                stop.clone(),
            )
            .instrument(tracing::info_span!("web", addr = %local)),
        );
        Ok(Self {
            local,
            base_urls,
            stop,
            tasks,
        })
    }

    /// The bound address (port resolved).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The listener's base URLs for links, preferred first: each `--web-host`, the
    /// certificate's names, then the bound address.
    pub fn base_urls(&self) -> &[String] {
        &self.base_urls
    }

    /// Stops accepting, ends HTTP connections (a request in progress gets a moment to
    /// finish) and waits for every task of the listener. Sockets already upgraded stay
    /// with the server until [`Server::close`].
    pub async fn close(&self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for WebListener {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop<H: ServerHost>(
    listener: TcpListener,
    site: Arc<Site<H>>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    keepalive: Option<KeepaliveConfig>,
    tasks: TaskTracker,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(MAX_HTTP_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = stop.cancelled() => break,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => break,
        };
        match accepted {
            Ok((tcp, addr)) => {
                configure_accepted(&tcp, keepalive);
                spawn_tracked(
                    &tasks,
                    serve_http(Arc::clone(&site), acceptor.clone(), tcp, addr, permit),
                );
            }
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_BACKOFF) => {}
                }
            }
        }
    }
}

async fn serve_http<H: ServerHost>(
    site: Arc<Site<H>>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    tcp: TcpStream,
    addr: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    match acceptor {
        None => serve_connection(site, TokioIo::new(tcp), addr).await,
        Some(acceptor) => {
            let handshake = tokio::time::timeout(site.timeout, acceptor.accept(tcp));
            let tls = tokio::select! {
                r = handshake => r,
                () = site.shutdown.cancelled() => return,
            };
            match tls {
                Ok(Ok(tls)) => serve_connection(site, TokioIo::new(tls), addr).await,
                Ok(Err(error)) => tracing::debug!(%addr, %error, "TLS handshake failed"),
                Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
            }
        }
    }
}

async fn serve_connection<H, I>(site: Arc<Site<H>>, io: I, addr: SocketAddr)
where
    H: ServerHost,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let shutdown = site.shutdown.clone();
    let timeout = site.timeout;
    let service = service_fn(move |req| {
        let site = Arc::clone(&site);
        async move { Ok::<_, Infallible>(handle(site, req, addr).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(io, service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(error) = r {
                tracing::debug!(%addr, %error, "http connection ended");
            }
        }
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
        }
    }
}
