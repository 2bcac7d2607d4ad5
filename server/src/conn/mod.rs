//! One connection: the sans-IO [`state::ConnState`] behind a mutex, a reader (this task) and
//! a writer task.
//!
//! * The reader decodes frames, feeds the state, starts the host attach and the request
//!   tasks, and arms the handshake timer. It waits for the socket to become readable holding
//!   no read buffer, and reads in chunks that grow only while reads keep filling them
//!   ([`read`]), so an idle connection costs no read memory. It stops reading while the handshake is pending
//!   (what arrived with the hello is queued in order), so a peer cannot queue unbounded
//!   input behind a slow host. Each message handled takes a unit of tokio's cooperative
//!   budget, so a connection whose input keeps coming yields after about a budget's worth of
//!   answers per turn instead of holding its worker for the whole burst
//!   ([`read::spend_budget`]).
//! * The writer takes frames from the state in order and writes them; it is woken by a
//!   [`Notify`](tokio::sync::Notify). Before it waits it flushes the stream if it wrote since
//!   the last flush (TLS and adopted transports such as a WebSocket buffer; Unix and TCP
//!   flushes are free). When the state is closing it flushes what is queued
//!   (bounded by the graceful-close timeout) and shuts the stream down.
//! * Each request's host call is polled once in the reader ([`request`]); one that is not
//!   done then runs in its own tracked task. Results go back into the state. After each read batch the
//!   reader writes what is queued itself if the writer is idle (Unix and TCP), otherwise it
//!   wakes the writer once for the batch, not once per response.
//!
//! No lock is held across an `.await`: every state access is one synchronous
//! [`ConnShared::with`]. The handle ([`shared`]) and the state below it know nothing of this
//! task; the router, the publishers and the server's [`Registry`] use the handle alone.

mod call;
pub(crate) mod limits;
mod outbound;
mod read;
mod request;
pub(crate) mod shared;
pub(crate) mod state;
pub(crate) mod subscriptions;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use baton_protocol::WireError;
use baton_protocol::codec::ClientMessageDecoder;
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::ServerConfig;
use crate::context::{Context, Peer};
use crate::error::ServiceError;
use crate::host::{ServerHost, ServiceScope};
use crate::listen::{Stream, StreamReader, StreamWriter};
use crate::panics::guarded;
use crate::presentation::Presentation;
use crate::registry::Registry;
use crate::router::Router;
use crate::tasks::{FirstPoll, spawn};

use self::limits::ConnLimits;
use self::shared::ConnShared;
use self::state::{ConnState, Step};

/// What every connection of one server shares: the host, the router, the limits, the
/// registry each connection enters while it runs, and the task trackers.
pub(crate) struct ServerShared<H: ServerHost> {
    pub(crate) host: Arc<H>,
    pub(crate) router: Arc<Router<H>>,
    pub(crate) config: ServerConfig,
    pub(crate) limits: ConnLimits,
    pub(crate) registry: Registry,
    /// Accept loops, connections, writers, attach tasks.
    pub(crate) conn_tasks: TaskTracker,
    /// Request tasks (graceful close waits for these).
    pub(crate) requests: TaskTracker,
    /// Drops in-flight request futures (drain deadline passed).
    pub(crate) hard_stop: CancellationToken,
}

/// Frames are gathered into writes of about this size.
const WRITE_BATCH: usize = 64 * 1024;
/// A write buffer (the writer's batch, the reader's carry) that is empty keeps at most this
/// much allocated: enough for a read batch's responses without an allocation each time,
/// while an idle connection does not keep a burst's 64 KiB.
const KEEP_WRITE_BUFFER: usize = 4 * 1024;

/// Frees `buf`'s allocation if it is empty and larger than [`KEEP_WRITE_BUFFER`].
fn trim_write_buffer(buf: &mut BytesMut) {
    if buf.is_empty() && buf.capacity() > KEEP_WRITE_BUFFER {
        *buf = BytesMut::new();
    }
}

/// The write half while the writer task waits for work, so the reader can write what a read
/// batch produced itself (no wake-up, no task switch: most answers to small requests go out
/// this way). Whoever holds the half is the only one taking frames from the state, which
/// keeps them in order.
#[derive(Default)]
struct ParkedWriter {
    writer: Option<StreamWriter>,
    /// Bytes the reader took from the state but the socket did not take: the writer writes
    /// them before anything else.
    carry: BytesMut,
}

/// Writes what the state has queued straight from the reader, if the writer task is parked
/// and the socket takes it without blocking. What it does not take is left in `carry` for
/// the writer, which is woken.
fn write_inline(shared: &ConnShared, parked: &Mutex<ParkedWriter>) {
    let mut parked = parked.lock();
    let ParkedWriter {
        writer: Some(writer),
        carry,
    } = &mut *parked
    else {
        return;
    };
    if !carry.is_empty() || !writer.can_try_write() {
        return;
    }
    loop {
        let taken = shared.with(|s| {
            if s.closing().is_some() {
                // Closing (flush, shutdown, kill timer) is the writer task's job.
                return false;
            }
            while carry.len() < WRITE_BATCH {
                let Some(frame) = s.poll_transmit() else {
                    break;
                };
                carry.extend_from_slice(&frame);
            }
            if carry.is_empty() {
                // All written: the writer has nothing to wake up for.
                let _ = s.take_wake();
            }
            !carry.is_empty()
        });
        if !taken {
            return;
        }
        match writer.try_write(carry) {
            Some(Ok(n)) => {
                shared.with(|s| s.transmitted(n));
                bytes::Buf::advance(carry, n);
                if !carry.is_empty() {
                    break;
                }
                trim_write_buffer(carry);
            }
            // Would block, or failed (the writer meets the error itself and aborts).
            Some(Err(_)) | None => break,
        }
    }
    shared.wake.notify_one();
}

/// Serves one accepted, authenticated stream until it closes.
///
/// Returns the read half when the server closed the connection (a `hello_error`, a drain)
/// after shutting down its write half while the peer had not closed its side, or when an
/// adopted transport failed the read (its own refusal of the peer, such as a WebSocket's
/// close 1009, which it sends itself; see [`StreamReader::lingers_after_failure`]): the
/// caller lingers on it (`listen::discard`) so input the peer is still sending does not turn
/// the close into a reset that overtakes the last frame.
pub(crate) async fn serve<H: ServerHost>(
    server: Arc<ServerShared<H>>,
    stream: Stream,
    peer: Arc<Peer>,
    reject: Option<WireError>,
) -> Option<StreamReader> {
    let span = tracing::info_span!(
        "connection",
        id = %peer.connection_id,
        peer = %peer.identity,
        transport = %peer.transport,
    );
    run(server, stream, peer, reject).instrument(span).await
}

async fn run<H: ServerHost>(
    server: Arc<ServerShared<H>>,
    stream: Stream,
    peer: Arc<Peer>,
    reject: Option<WireError>,
) -> Option<StreamReader> {
    tracing::debug!("connection accepted");
    let conn_id = peer.connection_id;
    let now = tokio::time::Instant::now().into_std();
    let shared = Arc::new(ConnShared::new(ConnState::new(
        now,
        server.config.handshake_timeout,
        server.config.server_id.clone(),
        server.limits,
    )));
    server.registry.register(conn_id, &shared);
    let (mut reader, writer) = stream.into_split();

    let kill = CancellationToken::new();
    let writer_done = CancellationToken::new();
    let shut_down = Arc::new(AtomicBool::new(false));
    let parked = Arc::new(Mutex::new(ParkedWriter::default()));
    {
        let shared = Arc::clone(&shared);
        let parked = Arc::clone(&parked);
        let kill = kill.clone();
        let done = writer_done.clone();
        let shut_down = Arc::clone(&shut_down);
        spawn(&server.conn_tasks, async move {
            let graceful = write_loop(&shared, &parked, writer, &kill).await;
            shut_down.store(graceful, Ordering::Release);
            done.cancel();
        });
    }

    if let Some(e) = reject {
        shared.with(|s| s.reject(e));
    }

    let presentation =
        server
            .router
            .register_client(conn_id, Arc::downgrade(&shared), Arc::clone(&peer));
    let conn_cancel = CancellationToken::new();
    let mut services: Option<Arc<H::Services>> = None;
    let mut attaching: Option<oneshot::Receiver<Result<H::Services, ServiceError>>> = None;
    // Reads go straight into the decoder's buffer and frames are decoded there, in place;
    // while the connection is idle it holds no buffer (`read`).
    let mut decoder = ClientMessageDecoder::new(server.config.max_frame_length);
    let mut read_size = read::ReadSize::default();
    // True once the peer's side ended (end of stream or a failed read).
    let mut peer_closed = false;
    // True once an adopted transport failed the read: it refused its peer and is lingered on.
    let mut refused = false;
    // Where requests are polled first (one allocation reused through a read batch).
    let mut first_poll = FirstPoll::default();

    loop {
        let deadline = shared.with(|s| s.deadline());
        let reading = attaching.is_none();
        tokio::select! {
            biased;
            () = shared.closing.cancelled() => break,
            r = async { attaching.as_mut().expect("guarded by is_some").await }, if attaching.is_some() => {
                attaching = None;
                match r {
                    Ok(Ok(s)) => {
                        let s = Arc::new(s);
                        services = Some(Arc::clone(&s));
                        // Counted from before dispatch, so a drain cannot slip in between.
                        let _counted = server.requests.token();
                        let dispatches = shared.with(|st| st.handshake_complete());
                        tracing::debug!("handshake complete");
                        for d in dispatches {
                            let prepared = request::prepare(&server, &shared, &peer, &s, d);
                            request::run(&server, &shared, &mut first_poll, prepared);
                        }
                        first_poll.release();
                    }
                    Ok(Err(e)) => shared.with(|st| st.handshake_failed(&e)),
                    Err(_) => shared.with(|st| st.handshake_failed(&ServiceError::internal("client attach task ended"))),
                }
            }
            () = sleep_until(deadline), if deadline.is_some() => {
                let now = tokio::time::Instant::now().into_std();
                shared.with(|s| s.handle_timeout(now));
            }
            r = read::read_some(&mut reader, &mut decoder, &mut read_size), if reading => match r {
                Ok(0) => {
                    if let Err(error) = decoder.end() {
                        tracing::debug!(%error, "peer closed mid-frame");
                    } else {
                        tracing::debug!("peer closed the connection");
                    }
                    shared.with(ConnState::abort);
                    peer_closed = true;
                    break;
                }
                Ok(_) => {
                    let hold = shared.hold_wakes();
                    // The batch's requests are counted by the server's request tracker from
                    // before they are dispatched until each is answered or has its own
                    // task's token: a drain that starts meanwhile waits for them.
                    let counted = server.requests.token();
                    let mut handled = 0;
                    // Every message the read completed, before reading again (a chunk whose
                    // frames are not all good yields none of them, and the error).
                    loop {
                        let m = match decoder.next_message() {
                            Ok(Some(m)) => m,
                            Ok(None) => break,
                            Err(e) => {
                                shared.with(|s| s.handle_decode_error(&e));
                                break;
                            }
                        };
                        handled += 1;
                        match shared.with(|s| s.handle_message(m)) {
                            Step::Nothing => {}
                            Step::Attach => {
                                attaching = Some(start_attach(&server, &presentation, &peer, &conn_cancel));
                            }
                            Step::Dispatch(d) => {
                                if let Some(s) = &services {
                                    let prepared = request::prepare(&server, &shared, &peer, s, d);
                                    request::run(&server, &shared, &mut first_poll, prepared);
                                }
                            }
                        }
                    }
                    // Kept through a batch only: an idle connection holds no future's memory.
                    first_poll.release();
                    write_inline(&shared, &parked);
                    drop(counted);
                    drop(hold);
                    // Answered and written: now the turn pays for the batch, and yields if it
                    // has spent its share ([`read::spend_budget`]).
                    read::spend_budget(handled).await;
                }
                Err(error) => {
                    tracing::debug!(%error, "read failed");
                    shared.with(ConnState::abort);
                    refused = reader.lingers_after_failure();
                    peer_closed = !refused;
                    break;
                }
            },
        }
    }

    // Teardown: cancel what the connection started, let the writer flush, release.
    conn_cancel.cancel();
    // The read half stays open while the writer flushes, so the close below never happens
    // with unread input before the last frame is out.
    let reader = (!peer_closed).then_some(reader);
    if tokio::time::timeout(
        server.config.graceful_close_timeout,
        writer_done.cancelled(),
    )
    .await
    .is_err()
    {
        tracing::debug!("close flush timed out; dropping the connection");
        kill.cancel();
        writer_done.cancelled().await;
    }
    shared.with(ConnState::abort);
    server.router.disconnect(conn_id).await;
    if let Some(mut rx) = attaching {
        rx.close();
        if let Ok(Ok(s)) = rx.try_recv() {
            services = Some(Arc::new(s));
        }
    }
    if let Some(s) = services {
        let ctx = Context::new(CancellationToken::new(), Some(Arc::clone(&peer)));
        if let Err(e) = guarded("release", s.release(ctx)).await {
            tracing::warn!(error = ?e, "releasing server services failed");
        }
    }
    server.registry.unregister(conn_id);
    tracing::debug!("connection closed");
    reader.filter(|_| refused || shut_down.load(Ordering::Acquire))
}

async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// Starts the host's `connect_services` in its own task, so the handshake timer keeps running
/// while the host works.
fn start_attach<H: ServerHost>(
    server: &Arc<ServerShared<H>>,
    presentation: &Presentation,
    peer: &Arc<Peer>,
    conn_cancel: &CancellationToken,
) -> oneshot::Receiver<Result<H::Services, ServiceError>> {
    let (tx, rx) = oneshot::channel();
    let host = Arc::clone(&server.host);
    let presentation = presentation.clone();
    let ctx = Context::new(conn_cancel.child_token(), Some(Arc::clone(peer)));
    spawn(&server.conn_tasks, async move {
        let result = guarded(
            "connect_services",
            host.connect_services(presentation, ctx.clone()),
        )
        .await;
        if let Err(Ok(services)) = tx.send(result) {
            // The connection ended first (e.g. the handshake timed out): release at once.
            if let Err(e) = guarded("release", services.release(ctx)).await {
                tracing::warn!(error = ?e, "releasing services of a closed connection failed");
            }
        }
    });
    rx
}

enum Next {
    /// Several small frames gathered into one write.
    Batch(BytesMut),
    /// One large frame, or the only one queued, written as is (no copy).
    Frame(Bytes),
    Done,
    Wait,
}

/// Writes until the state is finished; returns true if it then shut the write half down
/// (a graceful close), false if the connection was killed or failed.
async fn write_loop(
    shared: &ConnShared,
    parked: &Mutex<ParkedWriter>,
    mut writer: StreamWriter,
    kill: &CancellationToken,
) -> bool {
    let mut batch = BytesMut::new();
    // Written since the last flush: a transport that buffers (TLS, an adopted WebSocket)
    // is flushed before the writer idles, so the last frame of a burst is not left behind.
    let mut dirty = false;
    loop {
        let next = shared.with(|s| {
            while batch.len() < WRITE_BATCH {
                let Some(frame) = s.poll_transmit() else {
                    break;
                };
                // A large frame, or the only thing queued (one response, one subscription's
                // run of updates), is written as is: copying it into the batch would be a
                // second copy of every fanned-out byte.
                if batch.is_empty() && (frame.len() >= WRITE_BATCH || !s.has_output()) {
                    return Next::Frame(frame);
                }
                batch.extend_from_slice(&frame);
            }
            if !batch.is_empty() {
                Next::Batch(std::mem::take(&mut batch))
            } else if s.is_finished() {
                Next::Done
            } else {
                Next::Wait
            }
        });
        let written = match next {
            Next::Batch(bytes) => {
                let r = write(&mut writer, &bytes, kill).await;
                batch = bytes;
                batch.clear();
                trim_write_buffer(&mut batch);
                r
            }
            Next::Frame(frame) => write(&mut writer, &frame, kill).await,
            Next::Done => break,
            Next::Wait => {
                if dirty {
                    let flushed = tokio::select! {
                        r = writer.flush() => r,
                        () = kill.cancelled() => return false,
                    };
                    if let Err(error) = flushed {
                        tracing::debug!(%error, "flush failed");
                        shared.with(ConnState::abort);
                        return false;
                    }
                    dirty = false;
                }
                // Lend the write half to the reader while there is nothing to write.
                parked.lock().writer = Some(writer);
                let killed = tokio::select! {
                    () = shared.wake.notified() => false,
                    () = kill.cancelled() => true,
                };
                writer = {
                    let mut p = parked.lock();
                    std::mem::swap(&mut batch, &mut p.carry);
                    p.writer
                        .take()
                        .unwrap_or_else(|| unreachable!("only the writer task takes it back"))
                };
                if killed {
                    return false;
                }
                if batch.is_empty() {
                    continue;
                }
                let r = write(&mut writer, &batch, kill).await;
                batch.clear();
                trim_write_buffer(&mut batch);
                r
            }
        };
        match written {
            Some(Ok(len)) => {
                dirty = true;
                shared.with(|s| s.transmitted(len));
            }
            Some(Err(error)) => {
                tracing::debug!(%error, "write failed");
                shared.with(ConnState::abort);
                return false;
            }
            None => return false,
        }
    }
    let graceful = shared.with(|s| s.closing() == Some(state::Closing::Flush));
    if !graceful {
        return false;
    }
    tokio::select! {
        r = writer.shutdown() => r.is_ok(),
        () = kill.cancelled() => false,
    }
}

/// Writes `bytes` unless the connection is killed first (`None`).
async fn write<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    kill: &CancellationToken,
) -> Option<std::io::Result<usize>> {
    tokio::select! {
        r = writer.write_all(bytes) => Some(r.map(|()| bytes.len())),
        () = kill.cancelled() => None,
    }
}
