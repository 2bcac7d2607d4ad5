//! The server: listeners, accept loops, and graceful close, on top of everything else. Its
//! connections enter the [`Registry`] it keeps in their [`ServerShared`].

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baton_protocol::codec::encode_frame;
use baton_protocol::{ErrorCode, ServerId, ServerMessage, WireError};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ServerConfig;
use crate::conn::limits::ConnLimits;
use crate::conn::state::ConnState;
use crate::conn::{self, ServerShared};
use crate::context::{ConnectionId, Peer};
use crate::error::{AdoptError, CloseError, StartError};
use crate::host::ServerHost;
use crate::identity::passwd::UserNames;
use crate::identity::{ClientCertificate, PeerIdentity, Transport};
use crate::listen::{
    Adopted, BoundTcp, BoundUnix, LINGER_DEADLINE, ListenAddr, Listener, Stream, UnixSocketFile,
    configure_accepted, discard, refuse,
};
use crate::registry::Registry;
use crate::router::Router;
use crate::tasks::spawn;

/// Connections refused at the listener (e.g. over `max_connections`) that may be in their
/// refusal at once: TLS handshake, `hello_error`, lingering close (`listen::linger`). Beyond
/// this a refused Unix or TCP socket gets its `hello_error` only if the socket takes it
/// without waiting, and is closed at once (TLS: closed). They hold no connection slot.
const MAX_REFUSING: usize = 256;
/// Connections the server closed that may linger at once, reading and discarding what the
/// peer still sends so the close does not become a reset; beyond this they close at once.
/// They hold no connection slot.
const MAX_LINGERING: usize = 256;
/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// What the accept loops share: the connections' [`ServerShared`], and what admitting a
/// connection takes (its id, the connection and refusal slots, the TLS handshake's stop,
/// Unix user names).
struct Accepting<H: ServerHost> {
    server: Arc<ServerShared<H>>,
    /// Server shutdown: stops TLS handshakes in progress.
    shutdown: CancellationToken,
    next_connection: AtomicU64,
    connection_slots: Arc<Semaphore>,
    refuse_slots: Arc<Semaphore>,
    linger_slots: Arc<Semaphore>,
    user_names: UserNames,
}

/// A running server. Created by [`Server::start`]; stopped by [`Server::close`] (or, less
/// gracefully, by dropping it). A server cannot be restarted: start a new one.
pub struct Server<H: ServerHost> {
    shared: Arc<ServerShared<H>>,
    accepting: Arc<Accepting<H>>,
    /// Session watchers and other background work.
    tasks: TaskTracker,
    addrs: Vec<ListenAddr>,
    unix_files: Vec<UnixSocketFile>,
    stop_accepting: CancellationToken,
    closed: OnceCell<Result<(), CloseError>>,
}

impl<H: ServerHost> fmt::Debug for Server<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("server_id", &self.shared.config.server_id)
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

enum Bound {
    Unix(UnixListener),
    Tcp(TcpListener),
    Tls(TcpListener, tokio_rustls::TlsAcceptor),
}

impl<H: ServerHost> Server<H> {
    /// Validates `config`, binds every listener (rolling all back if one fails) and starts
    /// accepting.
    ///
    /// # Errors
    /// [`StartError::Config`] for an invalid option, [`StartError::NoListeners`], or the
    /// first [`StartError::Listen`] failure.
    pub async fn start(
        config: ServerConfig,
        host: impl Into<Arc<H>>,
        listeners: Vec<Listener>,
    ) -> Result<Self, StartError> {
        config.validate()?;
        if listeners.is_empty() {
            return Err(StartError::NoListeners);
        }
        let mut bound = Vec::new();
        let mut addrs = Vec::new();
        let mut unix_files = Vec::new();
        for listener in listeners {
            let result = match listener {
                Listener::Unix { dir } => BoundUnix::bind(&dir, &config.server_id).await.map(|b| {
                    addrs.push(ListenAddr::Unix(b.file.path.clone()));
                    unix_files.push(b.file);
                    Bound::Unix(b.listener)
                }),
                Listener::Tcp(o) => BoundTcp::bind(o.addr, true, o.allow_plaintext_non_loopback)
                    .await
                    .map(|b| {
                        tracing::info!(addr = %b.local, "listening on tcp");
                        addrs.push(ListenAddr::Tcp(b.local));
                        Bound::Tcp(b.listener)
                    }),
                Listener::Tls { addr, config: tls } => {
                    BoundTcp::bind(addr, false, true).await.map(|b| {
                        tracing::info!(addr = %b.local, "listening on tls");
                        addrs.push(ListenAddr::Tls(b.local));
                        Bound::Tls(b.listener, tls.acceptor())
                    })
                }
            };
            match result {
                Ok(b) => bound.push(b),
                Err(e) => {
                    for f in &unix_files {
                        f.remove_socket();
                    }
                    return Err(e.into());
                }
            }
        }

        let max_pending =
            usize::try_from(config.effective_max_pending_bytes()).unwrap_or(usize::MAX);
        let limits = ConnLimits {
            max_frame_length: config.max_frame_length,
            max_pending_bytes: max_pending,
            max_active_requests: config.max_active_requests,
            max_subscriptions: config.max_subscriptions,
            subscriber_queue_length: config.subscriber_queue_length,
            resync: config.resync,
        };
        let host: Arc<H> = host.into();
        let tasks = TaskTracker::new();
        let shutdown = CancellationToken::new();
        let router = Arc::new(Router::new(
            Arc::clone(&host),
            config.server_id.clone(),
            tasks.clone(),
            shutdown.clone(),
        ));
        let connection_slots = Arc::new(Semaphore::new(config.max_connections));
        let shared = Arc::new(ServerShared {
            host,
            router,
            config,
            limits,
            registry: Registry::default(),
            conn_tasks: TaskTracker::new(),
            requests: TaskTracker::new(),
            hard_stop: CancellationToken::new(),
        });
        let accepting = Arc::new(Accepting {
            server: Arc::clone(&shared),
            shutdown,
            next_connection: AtomicU64::new(1),
            connection_slots,
            refuse_slots: Arc::new(Semaphore::new(MAX_REFUSING)),
            linger_slots: Arc::new(Semaphore::new(MAX_LINGERING)),
            user_names: UserNames::system(),
        });
        let stop_accepting = CancellationToken::new();
        for b in bound {
            let accepting2 = Arc::clone(&accepting);
            let stop = stop_accepting.clone();
            spawn(&shared.conn_tasks, accept_loop(accepting2, b, stop));
        }
        Ok(Self {
            shared,
            accepting,
            tasks,
            addrs,
            unix_files,
            stop_accepting,
            closed: OnceCell::new(),
        })
    }

    /// The identity announced in `hello`.
    pub fn server_id(&self) -> &ServerId {
        &self.shared.config.server_id
    }

    /// Where the server listens (ports resolved), in listener order.
    pub fn local_addrs(&self) -> &[ListenAddr] {
        &self.addrs
    }

    /// Open connections.
    pub fn connection_count(&self) -> usize {
        self.shared.registry.len()
    }

    /// Sessions the server hosts now (open or opening): each holds its host handle until it
    /// is removed, ends by itself or is released by its host, or the server closes.
    pub fn hosted_session_count(&self) -> usize {
        self.shared.router.hosted_count()
    }

    /// Closes every open connection whose peer identity `matches` (an access-policy reload
    /// that revoked an identity): what is queued is flushed, its in-flight requests are
    /// cancelled, its attachment is released, then the socket closes. The server keeps
    /// serving everyone else. Returns how many connections were closed.
    pub fn close_connections(&self, matches: impl Fn(&PeerIdentity) -> bool) -> usize {
        let conns = self.shared.router.connections_where(matches);
        for c in &conns {
            c.with(ConnState::finish);
        }
        conns.len()
    }

    /// Serves one connection whose transport the embedder opened and authenticated itself
    /// (e.g. a WebSocket its own HTTP listener upgraded, carrying the frame bytes), as if a
    /// listener had accepted it: it takes a connection slot (over [`ServerConfig::max_connections`]
    /// it gets `hello_error{busy}` over `stream` and is closed), passes
    /// [`ServerHost::admit`] with `identity`, then runs the same connection core as every
    /// listener's (handshake timeout, frame, request and subscription limits, slow-consumer
    /// resync, graceful drain), in a task the server tracks. The transport is the one
    /// `identity` names ([`Transport::Web`] for [`PeerIdentity::Web`]).
    ///
    /// Every close ends with the server's lingering close, through `stream`: after the last
    /// frame and a shutdown, or after a read from `stream` failed, the server keeps reading
    /// and dropping what `stream` yields (bounded in bytes and time) before dropping it. So a
    /// transport that refuses its peer (a WebSocket's close 1009 for a message too big) fails
    /// the read, then sends its own last frame and hands out, through later reads, the input
    /// it discards; its close is not lost to the reset of a socket closed with unread input.
    ///
    /// `Ok` means the server took the stream (served or refused over it); it returns at once.
    ///
    /// # Errors
    /// [`AdoptError::Closing`] once [`Server::close`] has begun: `stream` is dropped, as a
    /// listener that stopped accepting would.
    pub fn adopt<S>(&self, stream: S, identity: PeerIdentity) -> Result<(), AdoptError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        // Counted by the connection tracker before the check: a close that begins after the
        // check waits for this connection like any other.
        let _counted = self.shared.conn_tasks.token();
        if self.stop_accepting.is_cancelled() {
            return Err(AdoptError::Closing);
        }
        let transport = transport_of(&identity);
        let stream = Stream::Adopted(Adopted::new(stream));
        let accepting = Arc::clone(&self.accepting);
        let Ok(permit) = Arc::clone(&accepting.connection_slots).try_acquire_owned() else {
            tracing::debug!(
                limit = accepting.server.config.max_connections,
                peer = %identity,
                "connection limit reached"
            );
            let error = busy(&accepting);
            spawn(&self.shared.conn_tasks, async move {
                refuse_opened(&accepting, stream, &error).await;
            });
            return Ok(());
        };
        let id = ConnectionId(accepting.next_connection.fetch_add(1, Ordering::Relaxed));
        spawn(
            &self.shared.conn_tasks,
            serve_identified(accepting, stream, permit, id, transport, identity),
        );
        Ok(())
    }

    /// Graceful close: stop accepting (the Unix socket file is removed), answer new requests
    /// `server_draining`, let in-flight requests finish until the drain timeout (then
    /// abandon them), close every connection after flushing it, release attachments and
    /// server services, close every hosted session, and wait for every task.
    ///
    /// Idempotent: later and concurrent calls wait for and return the same result.
    ///
    /// # Errors
    /// [`CloseError`] lists the hosted sessions whose `close` failed; the server is closed
    /// regardless.
    pub async fn close(&self) -> Result<(), CloseError> {
        self.closed.get_or_init(|| self.close_once()).await.clone()
    }

    async fn close_once(&self) -> Result<(), CloseError> {
        let s = &self.shared;
        tracing::info!("server closing");
        self.stop_accepting.cancel();
        for f in &self.unix_files {
            f.remove_socket();
        }
        s.router.set_closing();
        s.registry.drain();

        s.requests.close();
        if tokio::time::timeout(s.config.drain_timeout, s.requests.wait())
            .await
            .is_err()
        {
            tracing::info!("drain timeout: abandoning in-flight requests");
            s.hard_stop.cancel();
            s.requests.wait().await;
        }

        s.registry.each(|c| c.with(ConnState::finish));
        self.accepting.shutdown.cancel();
        s.conn_tasks.close();
        s.conn_tasks.wait().await;

        let result = s.router.close().await;
        self.tasks.close();
        self.tasks.wait().await;
        tracing::info!("server closed");
        result
    }
}

impl<H: ServerHost> Drop for Server<H> {
    fn drop(&mut self) {
        if self.closed.initialized() {
            return;
        }
        // Not closed gracefully: stop everything without waiting.
        self.stop_accepting.cancel();
        self.shared.hard_stop.cancel();
        self.accepting.shutdown.cancel();
        self.shared.router.set_closing();
        self.shared.registry.each(|c| c.with(ConnState::abort));
        for f in &self.unix_files {
            f.remove_socket();
        }
    }
}

async fn accept_loop<H: ServerHost>(
    accepting: Arc<Accepting<H>>,
    bound: Bound,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            a = accept(&bound) => a,
        };
        match accepted {
            Ok(a) => admit(&accepting, a),
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

enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream, SocketAddr),
    Tls(tokio::net::TcpStream, SocketAddr, tokio_rustls::TlsAcceptor),
}

async fn accept(bound: &Bound) -> std::io::Result<Accepted> {
    Ok(match bound {
        Bound::Unix(l) => Accepted::Unix(l.accept().await?.0),
        Bound::Tcp(l) => {
            let (s, a) = l.accept().await?;
            Accepted::Tcp(s, a)
        }
        Bound::Tls(l, acceptor) => {
            let (s, a) = l.accept().await?;
            Accepted::Tls(s, a, acceptor.clone())
        }
    })
}

impl Accepted {
    /// The address `accept` reported (TCP and TLS).
    fn addr(&self) -> Option<SocketAddr> {
        match self {
            Self::Unix(_) => None,
            Self::Tcp(_, addr) | Self::Tls(_, addr, _) => Some(*addr),
        }
    }

    /// One attempt to write `frame` without waiting (not TLS: no session yet).
    fn try_write(&self, frame: &[u8]) {
        let _ = match self {
            Self::Unix(s) => s.try_write(frame),
            Self::Tcp(s, _) => s.try_write(frame),
            Self::Tls(..) => return,
        };
    }
}

fn admit<H: ServerHost>(accepting: &Arc<Accepting<H>>, accepted: Accepted) {
    let Ok(permit) = Arc::clone(&accepting.connection_slots).try_acquire_owned() else {
        tracing::debug!(
            limit = accepting.server.config.max_connections,
            "connection limit reached"
        );
        refuse_connection(accepting, accepted, busy(accepting));
        return;
    };
    let id = ConnectionId(accepting.next_connection.fetch_add(1, Ordering::Relaxed));
    let accepting2 = Arc::clone(accepting);
    spawn(&accepting.server.conn_tasks, async move {
        let addr = accepted.addr();
        let Some(stream) = open(&accepting2, accepted).await else {
            return;
        };
        let Some((transport, identity)) = identify(&accepting2, &stream, addr).await else {
            return;
        };
        serve_identified(accepting2, stream, permit, id, transport, identity).await;
    });
}

/// The refusal of a connection over the connection limit.
fn busy<H: ServerHost>(accepting: &Accepting<H>) -> WireError {
    WireError::from_code(
        ErrorCode::Busy,
        format!(
            "Server connection limit of {} reached",
            accepting.server.config.max_connections
        ),
    )
}

/// Serves an opened stream whose peer is identified, holding its connection slot: the host's
/// [`ServerHost::admit`], then the connection core, then a lingering close. Listeners and
/// [`Server::adopt`] both end here.
async fn serve_identified<H: ServerHost>(
    accepting: Arc<Accepting<H>>,
    stream: Stream,
    permit: OwnedSemaphorePermit,
    id: ConnectionId,
    transport: Transport,
    identity: PeerIdentity,
) {
    if let Err(refusal) = accepting.server.host.admit(&identity) {
        tracing::debug!(peer = %identity, code = %refusal.to_wire().code, "refused by the host");
        drop(permit);
        refuse_opened(&accepting, stream, &refusal.to_wire()).await;
        return;
    }
    let peer = Arc::new(Peer {
        connection_id: id,
        transport,
        identity,
    });
    let leftover = conn::serve(Arc::clone(&accepting.server), stream, peer, None).await;
    // The slot is free once the connection is; lingering does not hold it.
    drop(permit);
    if let Some(mut reader) = leftover
        && let Ok(_slot) = accepting.linger_slots.try_acquire()
    {
        discard(&mut reader, tokio::time::Instant::now() + LINGER_DEADLINE).await;
    }
}

/// The transport an adopted connection's identity names.
fn transport_of(identity: &PeerIdentity) -> Transport {
    match identity {
        PeerIdentity::Unix { .. } => Transport::Unix,
        PeerIdentity::Tcp { .. } => Transport::Tcp,
        PeerIdentity::Tls { .. } | PeerIdentity::AnonymousTls { .. } => Transport::Tls,
        PeerIdentity::Web { .. } => Transport::Web,
    }
}

/// The `hello_error` frame of a refusal, or `None` (logged) if it cannot be encoded.
fn refusal_frame<H: ServerHost>(
    accepting: &Accepting<H>,
    error: WireError,
) -> Option<bytes::Bytes> {
    match encode_frame(
        &ServerMessage::HelloError(error),
        accepting.server.config.max_frame_length,
    ) {
        Ok(frame) => Some(frame),
        Err(error) => {
            tracing::debug!(%error, "cannot encode the refusal; closing");
            None
        }
    }
}

/// Refuses a connection at the listener, before any protocol byte is read: `error` is its
/// only frame, then a lingering close (`listen::linger`) so the refusal arrives even if the
/// client is already writing. Every listener-level refusal goes through here (or, once the
/// transport is open and the peer identified, through [`refuse_opened`]).
fn refuse_connection<H: ServerHost>(
    accepting: &Arc<Accepting<H>>,
    accepted: Accepted,
    error: WireError,
) {
    let Some(frame) = refusal_frame(accepting, error) else {
        return;
    };
    let Ok(slot) = Arc::clone(&accepting.refuse_slots).try_acquire_owned() else {
        tracing::debug!(limit = MAX_REFUSING, "too many refusals in progress");
        accepted.try_write(&frame);
        return;
    };
    let accepting2 = Arc::clone(accepting);
    spawn(&accepting.server.conn_tasks, async move {
        let _slot = slot;
        let Some(mut stream) = open(&accepting2, accepted).await else {
            return;
        };
        let how = refuse(
            &mut stream,
            &frame,
            tokio::time::Instant::now() + LINGER_DEADLINE,
        )
        .await;
        tracing::debug!(?how, "refused");
    });
}

/// Refuses an opened, identified connection the host did not admit ([`ServerHost::admit`]):
/// the same frame and lingering close as [`refuse_connection`], in the connection's own
/// task. Beyond [`MAX_REFUSING`] refusals at once the stream is closed without one.
async fn refuse_opened<H: ServerHost>(
    accepting: &Accepting<H>,
    mut stream: Stream,
    error: &WireError,
) {
    let Some(frame) = refusal_frame(accepting, error.clone()) else {
        return;
    };
    let Ok(_slot) = accepting.refuse_slots.try_acquire() else {
        tracing::debug!(limit = MAX_REFUSING, "too many refusals in progress");
        return;
    };
    let how = refuse(
        &mut stream,
        &frame,
        tokio::time::Instant::now() + LINGER_DEADLINE,
    )
    .await;
    tracing::debug!(?how, "refused");
}

/// Finishes transport setup: socket options, and the TLS handshake (bounded by
/// `handshake_timeout`, cancelled by server shutdown).
async fn open<H: ServerHost>(accepting: &Accepting<H>, accepted: Accepted) -> Option<Stream> {
    let keepalive = accepting.server.config.tcp_keepalive;
    match accepted {
        Accepted::Unix(s) => Some(Stream::Unix(s)),
        Accepted::Tcp(s, _) => {
            configure_accepted(&s, keepalive);
            Some(Stream::Tcp(s))
        }
        Accepted::Tls(s, addr, acceptor) => {
            configure_accepted(&s, keepalive);
            let handshake = tokio::time::timeout(
                accepting.server.config.handshake_timeout,
                acceptor.accept(s),
            );
            let tls = tokio::select! {
                r = handshake => r,
                () = accepting.shutdown.cancelled() => return None,
            };
            match tls {
                Ok(Ok(tls)) => Some(Stream::Tls(Box::new(tls))),
                Ok(Err(error)) => {
                    tracing::debug!(%addr, %error, "TLS handshake failed");
                    None
                }
                Err(_) => {
                    tracing::debug!(%addr, "TLS handshake timed out");
                    None
                }
            }
        }
    }
}

/// Establishes the peer's identity from an opened stream; `addr` is what `accept` reported.
async fn identify<H: ServerHost>(
    accepting: &Accepting<H>,
    stream: &Stream,
    addr: Option<SocketAddr>,
) -> Option<(Transport, PeerIdentity)> {
    match stream {
        Stream::Unix(s) => {
            let cred = match s.peer_cred() {
                Ok(c) => c,
                Err(error) => {
                    tracing::debug!(%error, "cannot read unix peer credentials; refusing");
                    return None;
                }
            };
            let identity = PeerIdentity::Unix {
                uid: cred.uid(),
                user_name: accepting.user_names.name(cred.uid()).await,
                gid: cred.gid(),
                pid: cred.pid(),
            };
            Some((Transport::Unix, identity))
        }
        Stream::Tcp(_) => {
            let addr = addr?;
            let identity = PeerIdentity::Tcp {
                addr,
                loopback: addr.ip().is_loopback(),
            };
            Some((Transport::Tcp, identity))
        }
        Stream::Tls(tls) => {
            let addr = addr?;
            let session = &tls.get_ref().1;
            let identity = match session.peer_certificates().and_then(|chain| chain.first()) {
                Some(leaf) => PeerIdentity::Tls {
                    addr,
                    client_certificate: Arc::new(ClientCertificate::from_der(
                        leaf.clone().into_owned(),
                    )),
                },
                None => PeerIdentity::AnonymousTls { addr },
            };
            Some((Transport::Tls, identity))
        }
        // Adopted streams come with their identity (`Server::adopt`), never through here.
        Stream::Adopted(_) => None,
    }
}
