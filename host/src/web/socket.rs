//! A WebSocket as the byte stream the protocol runs on: binary messages carry the frame bytes
//! (a message may hold any part of the stream), in both directions.
//!
//! * Reading hands out each binary message's bytes in order; ping and pong are the WebSocket
//!   layer's own. A text message is a protocol error: the socket is closed with 1003
//!   (unsupported data). A message over the cap (the server's frame limit plus the 4-byte
//!   length prefix: one whole frame fits) is closed with 1009 (too big) before it is buffered
//!   whole. A revoked browser token closes the socket with 1008 (policy).
//! * Such a refusal fails the read once, so the connection ends; the reads after it are the
//!   server's lingering close ([`Server::adopt`](baton_server::Server::adopt)): they send the
//!   close frame, shut down the socket's write side, then hand out the raw bytes the peer
//!   still sends for the server to drop, within its byte and time bounds. A browser still
//!   writing a huge message thus reads the close frame and the end of stream, not a reset
//!   that would destroy them.
//! * Writing sends one binary message per write of at most [`MAX_WRITE_MESSAGE`] bytes and
//!   waits on the sink before taking more: the WebSocket layer buffers at most its write
//!   buffer plus one message, so a browser that stops reading stops the connection's writer
//!   (which then falls back to the server's slow-consumer resync) instead of growing memory.
//! * With a heartbeat ([`WsBytes::heartbeat`]) the server pings the browser every interval
//!   and closes the socket with 1001 once nothing (pong or message) was heard for the
//!   deadline: a phone that vanished is dropped, and leaves presence.
//! * Shutting down sends the close frame: 1008 "browser token revoked" once the token is
//!   revoked (the server closing the token's connections shuts the socket down), else none.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker, ready};

use bytes::{Buf, Bytes};
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::{CancellationToken, DropGuard, WaitForCancellationFutureOwned};

use super::heartbeat::{Beat, Heartbeat, HeartbeatConfig};

/// The most one write puts in one binary message.
pub const MAX_WRITE_MESSAGE: usize = 64 * 1024;
/// Bytes the WebSocket layer gathers before writing to the socket.
const WRITE_BUFFER: usize = 64 * 1024;
/// Its hard cap: the write buffer plus a message, with room.
const MAX_WRITE_BUFFER: usize = 4 * MAX_WRITE_MESSAGE;
/// The close reason of a revoked browser token's sockets (code 1008, policy).
const REVOKED: &str = "browser token revoked";
/// The read buffer each socket keeps (small: a thousand idle tabs should cost little).
const READ_BUFFER: usize = 8 * 1024;

/// The WebSocket settings for a server whose frame limit is `max_frame_length`: messages
/// and frames capped at one whole protocol frame with its length prefix.
pub fn config(max_frame_length: u32) -> WebSocketConfig {
    let cap = usize::try_from(max_frame_length)
        .unwrap_or(usize::MAX)
        .saturating_add(4);
    let mut c = WebSocketConfig::default();
    c.read_buffer_size = READ_BUFFER;
    c.write_buffer_size = WRITE_BUFFER;
    c.max_write_buffer_size = MAX_WRITE_BUFFER;
    c.max_message_size = Some(cap);
    c.max_frame_size = Some(cap);
    c
}

/// A [`WebSocketStream`] read and written as bytes.
pub struct WsBytes<S> {
    ws: WebSocketStream<S>,
    /// What is left of the binary message being read.
    pending: Bytes,
    /// Cancelled: the socket closes with 1008.
    revoked: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    /// The same token, for a shutdown to ask (the server may end the connection before a
    /// read sees the revocation); `None` once its close frame is queued.
    revoked_token: Option<CancellationToken>,
    /// A close this side started because of the peer (text, too big, revoked), and the
    /// error reads then give.
    refusing: Option<Refusal>,
    /// Cancels its token when the socket is dropped (its connection ended).
    _ended: Option<DropGuard>,
    /// The server's pings and the deadline for hearing back.
    heartbeat: Option<Beating>,
    /// The waker of the last write, so a ping sent from a read does not take the write
    /// side's place in the WebSocket layer (which keeps one waker per direction).
    writer_waker: Option<Waker>,
}

/// A socket's heartbeat and its timer.
struct Beating {
    state: Heartbeat,
    timer: Pin<Box<Sleep>>,
    /// A ping waits for room in the WebSocket layer (the writer is backed up).
    ping_due: bool,
    /// A ping is queued but not yet flushed.
    unflushed: bool,
}

/// Wakes the reader and the writer: what a write started from a read registers.
struct BothWakers(Waker, Option<Waker>);

impl Wake for BothWakers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake_by_ref();
        if let Some(w) = &self.1 {
            w.wake_by_ref();
        }
    }
}

struct Refusal {
    /// The close frame, until the WebSocket layer has taken it.
    frame: Option<CloseFrame>,
    error: io::ErrorKind,
    reason: &'static str,
    /// How far the close has got since the read failed.
    stage: Closing,
}

/// The steps of a refusal, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// The read is still to fail (once).
    Fail,
    /// Flushing the close frame out.
    Flush,
    /// Shutting down the socket's write side (the peer reads its end after the close frame).
    Shutdown,
    /// Handing out the raw bytes the peer still sends, to be dropped. Below the WebSocket
    /// layer: after a message too big its parser is mid-frame.
    Discard,
}

impl<S> std::fmt::Debug for WsBytes<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsBytes")
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WsBytes<S> {
    /// Wraps an open WebSocket.
    pub fn new(ws: WebSocketStream<S>) -> Self {
        Self {
            ws,
            pending: Bytes::new(),
            revoked: None,
            revoked_token: None,
            refusing: None,
            _ended: None,
            heartbeat: None,
            writer_waker: None,
        }
    }

    /// Pings the browser every `config.interval` and closes the socket (1001) once nothing
    /// has been heard from it for `config.dead_after`.
    pub fn heartbeat(mut self, config: HeartbeatConfig) -> Self {
        let now = Instant::now();
        let state = Heartbeat::new(config, now);
        self.heartbeat = Some(Beating {
            timer: Box::pin(tokio::time::sleep_until(state.deadline())),
            state,
            ping_due: false,
            unflushed: false,
        });
        self
    }

    /// Runs the heartbeat from a read: true once the browser is dead. A due ping is sent
    /// if the WebSocket layer has room, with a waker that wakes the writer too.
    fn poll_heartbeat(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(beating) = &mut self.heartbeat else {
            return false;
        };
        loop {
            match beating.state.poll(Instant::now()) {
                Some(Beat::Dead) => return true,
                Some(Beat::Ping) => beating.ping_due = true,
                None => {}
            }
            let deadline = beating.state.deadline();
            if beating.timer.deadline() != deadline {
                beating.timer.as_mut().reset(deadline);
            }
            if beating.timer.as_mut().poll(cx).is_pending() {
                break;
            }
        }
        if !beating.ping_due && !beating.unflushed {
            return false;
        }
        let waker = Waker::from(Arc::new(BothWakers(
            cx.waker().clone(),
            self.writer_waker.clone(),
        )));
        let mut wcx = Context::from_waker(&waker);
        if beating.ping_due {
            match Pin::new(&mut self.ws).poll_ready(&mut wcx) {
                Poll::Ready(Ok(())) => {
                    beating.ping_due = false;
                    beating.unflushed = Pin::new(&mut self.ws)
                        .start_send(Message::Ping(Bytes::new()))
                        .is_ok();
                }
                // The connection is failing: the reads will say so.
                Poll::Ready(Err(_)) => beating.ping_due = false,
                Poll::Pending => {}
            }
        }
        if beating.unflushed && Pin::new(&mut self.ws).poll_flush(&mut wcx).is_ready() {
            beating.unflushed = false;
        }
        false
    }

    fn note_writer(&mut self, cx: &Context<'_>) {
        if self.heartbeat.is_some()
            && !self
                .writer_waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.writer_waker = Some(cx.waker().clone());
        }
    }

    /// Cancels `ended` when this stream is dropped.
    pub fn cancel_on_drop(mut self, ended: CancellationToken) -> Self {
        self._ended = Some(ended.drop_guard());
        self
    }

    /// Closes the socket (1008) as soon as `revoked` is cancelled.
    pub fn revoked_by(mut self, revoked: CancellationToken) -> Self {
        self.revoked = Some(Box::pin(revoked.clone().cancelled_owned()));
        self.revoked_token = Some(revoked);
        self
    }

    fn refuse(&mut self, code: CloseCode, reason: &'static str, error: io::ErrorKind) {
        self.refusing = Some(Refusal {
            frame: Some(CloseFrame {
                code,
                reason: reason.into(),
            }),
            error,
            reason,
            stage: Closing::Fail,
        });
    }

    /// A read during a refusal: the first fails (after queueing the close frame if the
    /// WebSocket layer has room); the ones after it send the frame, shut down the write side
    /// and then read the raw input, as [`Closing`] lists. Each step that waits on the peer
    /// is bounded by whoever reads: the server's lingering close.
    fn poll_refusal(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Some(refusal) = &mut self.refusing else {
            return Poll::Ready(Ok(()));
        };
        if let Some(frame) = refusal.frame.take() {
            match Pin::new(&mut self.ws).poll_ready(cx) {
                // A peer that does not read is not waited for here, only while lingering.
                Poll::Pending if refusal.stage == Closing::Fail => refusal.frame = Some(frame),
                Poll::Pending => {
                    refusal.frame = Some(frame);
                    return Poll::Pending;
                }
                Poll::Ready(Ok(())) => {
                    let _ = Pin::new(&mut self.ws).start_send(Message::Close(Some(frame)));
                }
                Poll::Ready(Err(_)) => {}
            }
        }
        loop {
            match refusal.stage {
                Closing::Fail => {
                    // Best effort now; [`Closing::Flush`] finishes it.
                    let _ = Pin::new(&mut self.ws).poll_flush(cx);
                    refusal.stage = Closing::Flush;
                    return Poll::Ready(Err(io::Error::new(refusal.error, refusal.reason)));
                }
                Closing::Flush => {
                    if let Err(error) = ready!(Pin::new(&mut self.ws).poll_flush(cx)) {
                        return Poll::Ready(Err(io_error(error)));
                    }
                    refusal.stage = Closing::Shutdown;
                }
                Closing::Shutdown => {
                    ready!(Pin::new(self.ws.get_mut()).poll_shutdown(cx))?;
                    refusal.stage = Closing::Discard;
                }
                Closing::Discard => return Pin::new(self.ws.get_mut()).poll_read(cx, buf),
            }
        }
    }
}

fn io_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        other => io::Error::other(other),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsBytes<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.refusing.is_none()
            && let Some(revoked) = &mut this.revoked
            && revoked.as_mut().poll(cx).is_ready()
        {
            this.refuse(CloseCode::Policy, REVOKED, io::ErrorKind::ConnectionAborted);
        }
        if this.refusing.is_none() && this.poll_heartbeat(cx) {
            this.refuse(
                CloseCode::Away,
                "no answer to ping",
                io::ErrorKind::TimedOut,
            );
        }
        if this.refusing.is_some() {
            return this.poll_refusal(cx, buf);
        }
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            let next = ready!(Pin::new(&mut this.ws).poll_next(cx));
            if let (Some(Ok(_)), Some(beating)) = (&next, &mut this.heartbeat) {
                beating.state.heard(Instant::now());
            }
            match next {
                Some(Ok(Message::Binary(bytes))) => this.pending = bytes,
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Text(_))) => {
                    this.refuse(
                        CloseCode::Unsupported,
                        "binary messages only",
                        io::ErrorKind::InvalidData,
                    );
                    return this.poll_refusal(cx, buf);
                }
                Some(Err(tungstenite::Error::Capacity(_))) => {
                    this.refuse(
                        CloseCode::Size,
                        "message over the frame limit",
                        io::ErrorKind::InvalidData,
                    );
                    return this.poll_refusal(cx, buf);
                }
                // The peer's close (answered by the WebSocket layer), or the end.
                Some(Ok(Message::Close(_))) | None => {
                    let _ = Pin::new(&mut this.ws).poll_flush(cx);
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsBytes<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        this.note_writer(cx);
        ready!(Pin::new(&mut this.ws).poll_ready(cx)).map_err(io_error)?;
        let n = buf.len().min(MAX_WRITE_MESSAGE);
        Pin::new(&mut this.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(&buf[..n])))
            .map_err(io_error)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.note_writer(cx);
        Pin::new(&mut this.ws).poll_flush(cx).map_err(io_error)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.note_writer(cx);
        // A revoked socket ends with its 1008, also when the server closed the connection
        // (closing the token's connections) before any read saw the revocation.
        if this.refusing.is_none()
            && this
                .revoked_token
                .as_ref()
                .is_some_and(CancellationToken::is_cancelled)
        {
            ready!(Pin::new(&mut this.ws).poll_ready(cx)).map_err(io_error)?;
            this.revoked_token = None;
            let _ = Pin::new(&mut this.ws).start_send(Message::Close(Some(CloseFrame {
                code: CloseCode::Policy,
                reason: REVOKED.into(),
            })));
        }
        match ready!(Pin::new(&mut this.ws).poll_close(cx)) {
            Ok(())
            | Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(io_error(e))),
        }
    }
}
