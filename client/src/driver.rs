//! The tokio glue around [`ClientConn`]: one task owns the core, the transport and every
//! channel the core's outputs go to.
//!
//! The task reads straight into the core's read buffer (its decoder's own, so frames are
//! decoded where they were read), lending it the subscriptions' replicas ([`Sinks`]) while it
//! reads; writes what [`ClientConn::poll_transmit`] hands out; sleeps until
//! [`ClientConn::poll_timeout`]; takes handles' orders from one bounded queue while
//! [`ClientConn::accepts_commands`]; and turns the core's events into sends (answers to each
//! caller's `oneshot`, subscription changes to their sinks, the attachment and status to
//! `watch` channels). It holds no state of its own beyond buffers and those channels: the
//! request table, the in-flight limit, the subscriptions, the attachment and the reconnect
//! plan are the core's. Reading, writing, orders and timers are polled by one hand-written
//! future, so the transport is never split or locked and a slow socket never stops the reads.

use std::future::{Future, poll_fn};
use std::mem;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;

use baton_protocol::{DecodeError, SessionTarget};
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::{ClientConfig, DEFAULT_WRITE_BACKLOG};
use crate::conn::{ClientConn, Command, ConnConfig, Event, RequestNumbers};
use crate::endpoint::Endpoint;
use crate::error::ConnectError;
use crate::shared::{Deferred, Mailbox, Order, RELEASED, Shared, Waiter};
use crate::sink::Sinks;
use crate::status::Status;
use crate::tls;
use crate::transport::{self, BoxStream};

/// Orders queued for the connection task before handles wait.
const ORDER_QUEUE: usize = 256;

/// Room made in the read buffer before each read.
const READ_CHUNK: usize = 64 * 1024;
/// Orders taken per round, so a busy caller cannot starve the reads.
const ORDERS_PER_ROUND: usize = 256;
/// Rounds per poll before the task yields to the runtime.
const ROUNDS_PER_POLL: usize = 16;

/// A handshaken socket to the server: Unix, TCP, or TLS over TCP (what was read past the
/// hello stays in the core's read buffer).
pub(crate) struct Socket {
    stream: BoxStream,
}

/// Why [`Driver::serve`] returned.
enum Served {
    /// Close the client, for this reason.
    Closed(&'static str),
    /// The transport is gone (the core knows why).
    Lost,
}

/// The clock, as the core takes it.
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// Connects, completes the handshake and spawns the connection task; returns what the
/// client's handles share with it.
pub(crate) async fn connect(config: ClientConfig) -> Result<Arc<Shared>, ConnectError> {
    let tls = match config.endpoint {
        Endpoint::Tls { .. } => Some(tls::client_config(&config.tls)?),
        Endpoint::Unix(_) | Endpoint::Tcp { .. } => None,
    };
    let numbers = RequestNumbers::default();
    let mut conn = ClientConn::new(conn_config(&config), numbers.clone());
    let mut sinks = Sinks::default();
    let socket = establish(&config, tls.as_ref(), &mut conn, &mut sinks).await?;
    let server_id = conn
        .server_id()
        .cloned()
        .unwrap_or_else(|| unreachable!("a handshaken connection knows its server"));
    let (orders_tx, orders) = mpsc::channel(ORDER_QUEUE);
    let (status_tx, status) = watch::channel(Status::Connected);
    let (attachment_tx, attachment) = watch::channel(None);
    let mailbox = Arc::new(Mailbox::default());
    let shared = Shared::new(
        orders_tx,
        Arc::clone(&mailbox),
        numbers,
        status,
        attachment,
        server_id.clone(),
        config.request_timeout,
    );
    let span = tracing::debug_span!("client", endpoint = %config.endpoint, server_id = %server_id);
    let driver = Driver {
        mailbox,
        config,
        tls,
        conn,
        sinks,
        orders,
        status: status_tx,
        attachment: attachment_tx,
        dial: false,
    };
    shared.spawn(driver.run(socket).instrument(span));
    Ok(shared)
}

/// The core's configuration for a client of `config`, with a fresh jitter seed.
fn conn_config(config: &ClientConfig) -> ConnConfig {
    ConnConfig {
        max_frame_length: config.max_frame_length,
        expected_server_id: config.expected_server_id.clone(),
        reconnect: config.reconnect.clone(),
        max_in_flight: config.max_in_flight,
        jitter_seed: jitter_seed(),
    }
}

/// A seed for the reconnect jitter, from the OS's random source, so clients started together
/// do not back off in lockstep (which jitter exists to prevent).
fn jitter_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    // An OS without a random source: still a different seed for every client of this process.
    static FALLBACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = FALLBACK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ((u64::from(std::process::id()) << 32) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Opens a transport for `conn` and completes its handshake within the connect timeout.
async fn establish<W>(
    config: &ClientConfig,
    tls: Option<&Arc<rustls::ClientConfig>>,
    conn: &mut ClientConn<W>,
    sinks: &mut Sinks,
) -> Result<Socket, ConnectError> {
    let endpoint = &config.endpoint;
    let attempt = async {
        let tls = tls.map(|c| (c, config.tls.server_name.as_deref()));
        let mut stream = transport::open(endpoint, tls, config.tcp_keepalive).await?;
        conn.handle_open(now());
        let io_err = |source| ConnectError::Io {
            endpoint: endpoint.clone(),
            source,
        };
        let mut hello = BytesMut::new();
        if conn.poll_transmit(&mut hello) {
            stream.write_all(&hello).await.map_err(io_err)?;
            stream.flush().await.map_err(io_err)?;
        }
        loop {
            let n = match stream.read_buf(conn.read_buffer(READ_CHUNK)).await {
                Ok(n) => n,
                Err(e) => return Err(read_error(endpoint, e)),
            };
            if n == 0 {
                conn.handle_eof(now(), sinks);
            } else {
                conn.handle_read(now(), sinks);
            }
            if let Some(failure) = conn.take_handshake_failure() {
                return Err(failure.into_error(endpoint));
            }
            if conn.is_live() {
                return Ok(Socket { stream });
            }
            if n == 0 {
                return Err(ConnectError::Closed {
                    endpoint: endpoint.clone(),
                });
            }
        }
    };
    tokio::time::timeout(config.connect_timeout, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(ConnectError::Timeout {
                endpoint: endpoint.clone(),
            })
        })
}

fn read_error(endpoint: &Endpoint, e: std::io::Error) -> ConnectError {
    // A TLS alert (in TLS 1.3, the server refusing the client certificate) or a reset
    // surfaces as I/O on the first read.
    let failure = tls::tls_failure(&e);
    match DecodeError::from(e) {
        DecodeError::Io(e) if matches!(endpoint, Endpoint::Tls { .. }) => ConnectError::Tls {
            endpoint: endpoint.clone(),
            reason: e.to_string(),
            failure,
        },
        source => ConnectError::Protocol {
            endpoint: endpoint.clone(),
            source,
        },
    }
}

/// The connection task. It holds no [`Shared`], so it never keeps the client alive: when the
/// last handle is dropped it stops.
struct Driver {
    mailbox: Arc<Mailbox>,
    config: ClientConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
    conn: ClientConn<Waiter>,
    /// Every live subscription's channels and replica.
    sinks: Sinks,
    orders: mpsc::Receiver<Order>,
    status: watch::Sender<Status>,
    attachment: watch::Sender<Option<SessionTarget>>,
    /// The core asked for a new transport.
    dial: bool,
}

impl Driver {
    /// Runs until the core is closed: serve each transport, and between transports wait for
    /// the core to ask for the next one.
    async fn run(mut self, first: Socket) {
        let mut socket = Some(first);
        loop {
            if let Some(s) = socket.take() {
                match self.serve(s).await {
                    Served::Closed(reason) => self.conn.close(reason),
                    Served::Lost => {}
                }
            }
            let _ = self.deliver();
            socket = self.next_socket().await;
            if socket.is_none() {
                self.finish();
                return;
            }
        }
    }

    /// Between transports: commands and timers still reach the core (it holds requests for
    /// the next transport and fails them at their deadlines); a due attempt dials.
    async fn next_socket(&mut self) -> Option<Socket> {
        loop {
            let _ = self.deliver();
            if self.conn.is_closed() {
                return None;
            }
            if mem::take(&mut self.dial) {
                let mailbox = Arc::clone(&self.mailbox);
                if let Some(relocate) = self.config.relocate.clone() {
                    let found = tokio::select! {
                        biased;
                        why = mailbox.stopped() => Err(why),
                        found = tokio::time::timeout(self.config.connect_timeout, relocate.lookup()) => Ok(found.ok().flatten()),
                    };
                    match found {
                        Err(why) => {
                            self.conn.close(why);
                            continue;
                        }
                        Ok(Some(endpoint)) => {
                            if let Err(e) = self.retarget(endpoint) {
                                self.conn.handle_connect_failed(now(), &e);
                                continue;
                            }
                        }
                        Ok(None) => {}
                    }
                }
                let dialled = tokio::select! {
                    biased;
                    why = mailbox.stopped() => Err(why),
                    r = establish(
                        &self.config,
                        self.tls.as_ref(),
                        &mut self.conn,
                        &mut self.sinks,
                    ) => Ok(r),
                };
                match dialled {
                    Err(why) => self.conn.close(why),
                    Ok(Ok(t)) => return Some(t),
                    Ok(Err(e)) => self.conn.handle_connect_failed(now(), &e),
                }
                continue;
            }
            let deadline = self.conn.poll_timeout();
            let mailbox = Arc::clone(&self.mailbox);
            tokio::select! {
                biased;
                why = mailbox.stopped() => self.conn.close(why),
                () = mailbox.deferred_notify.notified() => self.drain_deferred(),
                order = self.orders.recv(), if self.conn.accepts_commands() => match order {
                    Some(order) => self.order(order),
                    None => self.conn.close(RELEASED),
                },
                () = sleep_until(deadline) => self.conn.handle_timeout(now()),
            }
        }
    }

    /// Dials `endpoint` from now on (a [`Relocate`](crate::Relocate) answer), with TLS set up
    /// for it if it is the first `tls://` one.
    fn retarget(&mut self, endpoint: Endpoint) -> Result<(), ConnectError> {
        if matches!(endpoint, Endpoint::Tls { .. }) && self.tls.is_none() {
            self.tls = Some(tls::client_config(&self.config.tls)?);
        }
        self.config.endpoint = endpoint;
        Ok(())
    }

    /// Serves one live transport until it is lost or the client closes.
    async fn serve(&mut self, mut socket: Socket) -> Served {
        let mailbox = Arc::clone(&self.mailbox);
        let mut stopped = pin!(mailbox.stopped());
        let mut notified = pin!(mailbox.deferred_notify.notified());
        let mut timer = pin!(tokio::time::sleep_until(Instant::now()));
        let mut armed: Option<std::time::Instant> = None;
        let mut write = BytesMut::new();
        let mut unflushed = false;
        // What arrived with the hello was handled (or set aside, for `deliver_read`).
        if self.deliver_read() {
            return Served::Lost;
        }
        poll_fn(|cx| {
            for _ in 0..ROUNDS_PER_POLL {
                let mut busy = false;
                if let Poll::Ready(why) = stopped.as_mut().poll(cx) {
                    return Poll::Ready(Served::Closed(why));
                }
                if notified.as_mut().poll(cx).is_ready() {
                    notified.set(mailbox.deferred_notify.notified());
                    self.drain_deferred();
                    busy = true;
                }
                for _ in 0..ORDERS_PER_ROUND {
                    if self.conn.pending_transmit() + write.len() >= DEFAULT_WRITE_BACKLOG
                        || !self.conn.accepts_commands()
                    {
                        break;
                    }
                    match self.orders.poll_recv(cx) {
                        Poll::Ready(Some(order)) => {
                            self.order(order);
                            busy = true;
                        }
                        Poll::Ready(None) => {
                            return Poll::Ready(Served::Closed(RELEASED));
                        }
                        Poll::Pending => break,
                    }
                }

                let read = self.conn.read_buffer(READ_CHUNK);
                match tokio_util::io::poll_read_buf(socket.stream.as_mut(), cx, read) {
                    Poll::Ready(Ok(0)) => self.conn.handle_eof(now(), &mut self.sinks),
                    Poll::Ready(Ok(_)) => {
                        self.conn.handle_read(now(), &mut self.sinks);
                        busy = true;
                    }
                    Poll::Ready(Err(e)) => {
                        self.conn
                            .handle_lost(now(), DecodeError::from(e).to_string());
                    }
                    Poll::Pending => {}
                }
                if self.deliver_read() {
                    return Poll::Ready(Served::Lost);
                }

                loop {
                    if write.is_empty() && !self.conn.poll_transmit(&mut write) {
                        break;
                    }
                    match socket.stream.as_mut().poll_write(cx, &write) {
                        Poll::Ready(Ok(n)) if n > 0 => {
                            write.advance(n);
                            unflushed = true;
                            busy = true;
                        }
                        Poll::Ready(Ok(_)) => {
                            self.conn
                                .handle_lost(now(), "the connection's writer stopped".to_owned());
                            let _ = self.deliver();
                            return Poll::Ready(Served::Lost);
                        }
                        Poll::Ready(Err(e)) => {
                            self.conn.handle_lost(
                                now(),
                                format!("the connection's writer stopped: {e}"),
                            );
                            let _ = self.deliver();
                            return Poll::Ready(Served::Lost);
                        }
                        Poll::Pending => break,
                    }
                }
                if unflushed && write.is_empty() {
                    match socket.stream.as_mut().poll_flush(cx) {
                        Poll::Ready(Ok(())) => unflushed = false,
                        Poll::Ready(Err(e)) => {
                            self.conn.handle_lost(
                                now(),
                                format!("the connection's writer stopped: {e}"),
                            );
                            let _ = self.deliver();
                            return Poll::Ready(Served::Lost);
                        }
                        Poll::Pending => {}
                    }
                }

                let next = self.conn.poll_timeout();
                if next != armed {
                    if let Some(at) = next {
                        timer.as_mut().reset(Instant::from_std(at));
                    }
                    armed = next;
                }
                if armed.is_some() && timer.as_mut().poll(cx).is_ready() {
                    armed = None;
                    self.conn.handle_timeout(now());
                    busy = true;
                }
                if self.deliver() {
                    return Poll::Ready(Served::Lost);
                }
                if !busy {
                    return Poll::Pending;
                }
            }
            // Plenty to do: let other tasks run, then continue.
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    /// Hands an order to the core (keeping a new subscription's channels), unless its caller
    /// already gave up.
    fn order(&mut self, order: Order) {
        match order {
            Order::Core(Command::Request(request)) if request.waiter.is_closed() => {}
            // Its handle's unsubscribe may already have come and gone.
            Order::Subscribe(new) if new.1.is_abandoned() => {}
            Order::Core(cmd) => self.conn.handle_command(now(), cmd),
            Order::Subscribe(new) => {
                let (subscribe, sink) = *new;
                self.sinks.insert(subscribe.key, sink);
                self.conn
                    .handle_command(now(), Command::Subscribe(subscribe));
            }
        }
    }

    /// Cancels and unsubscribes queued by handles' `Drop`.
    fn drain_deferred(&mut self) {
        let items: Vec<Deferred> = mem::take(&mut *self.mailbox.lock_deferred());
        for item in items {
            let cmd = match item {
                Deferred::Cancel(number) => Command::Cancel(number),
                Deferred::Unsubscribe(key) => {
                    self.sinks.remove(key);
                    Command::Unsubscribe(key)
                }
            };
            self.conn.handle_command(now(), cmd);
        }
    }

    /// Delivers the core's events, and while the last read holds frames the core set aside,
    /// has it handle them and delivers again. Returns whether the current transport must be
    /// dropped.
    fn deliver_read(&mut self) -> bool {
        loop {
            if self.deliver() {
                return true;
            }
            if !self.conn.has_unread_frames() {
                return false;
            }
            self.conn.handle_read(now(), &mut self.sinks);
        }
    }

    /// Delivers the core's events. Returns whether the current transport must be dropped.
    fn deliver(&mut self) -> bool {
        let mut disconnect = false;
        while let Some(event) = self.conn.poll_event() {
            match event {
                Event::Answer { waiter, answer } => {
                    // The caller may have given up meanwhile.
                    let _ = waiter.send(answer);
                }
                Event::Subscription { key, change } => self.sinks.deliver(key, change),
                Event::Attachment(attachment) => {
                    self.attachment.send_if_modified(|current| {
                        if *current == attachment {
                            false
                        } else {
                            *current = attachment;
                            true
                        }
                    });
                }
                Event::Status(status) => {
                    self.status.send_replace(status);
                }
                Event::Dial => self.dial = true,
                Event::Disconnect => disconnect = true,
            }
        }
        disconnect || !self.conn.is_live()
    }

    /// The core is closed: refuse what is still queued, and stop every task.
    fn finish(&mut self) {
        self.orders.close();
        while let Ok(order) = self.orders.try_recv() {
            self.order(order);
        }
        self.mailbox.lock_deferred().clear();
        let _ = self.deliver();
        self.mailbox.shutdown.cancel();
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}
