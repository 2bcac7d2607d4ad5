//! How a connection reads: readiness first, into a read buffer that starts small, grows
//! while reads keep filling it, and is released whenever the connection goes idle.
//!
//! Most connections are idle most of the time (a subscriber between updates, a client
//! between prompts), and a read buffer reserved for them is memory the server holds per
//! connection for nothing. So on Unix and TCP the reader waits for the socket to become
//! readable holding **no** buffer ([`ClientMessageDecoder::release_buffer`] once everything
//! read has been decoded), then reads what is there without waiting. A read offers
//! [`MIN_READ`] bytes of room at first and twice as much after each read that filled all it
//! was offered, up to [`MAX_READ`], so a busy connection (pipelined requests, large frames)
//! reads in large chunks and an idle one costs nothing. A large frame's payload is reserved
//! by the decoder itself as its bytes arrive, in steps, whatever the read size.
//!
//! TLS reads go through the session (tokio-rustls holds its own buffers), so they use
//! `read_buf` with the same sizing and release.

use std::io;

use baton_protocol::codec::ClientMessageDecoder;
use tokio::io::AsyncReadExt;

use crate::listen::StreamReader;

/// Room offered to the first read after an idle period.
pub(crate) const MIN_READ: usize = 4 * 1024;
/// Most room offered to one read (a busy connection's chunk).
pub(crate) const MAX_READ: usize = 64 * 1024;

/// The room to offer the next read: [`MIN_READ`], doubled after each read that filled what
/// it was offered, up to [`MAX_READ`]; back to [`MIN_READ`] when the connection goes idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadSize {
    next: usize,
}

impl Default for ReadSize {
    fn default() -> Self {
        Self { next: MIN_READ }
    }
}

impl ReadSize {
    /// Room to ask the decoder for.
    pub(crate) fn next(self) -> usize {
        self.next
    }

    /// A read took `n` bytes where `offered` were free.
    pub(crate) fn after_read(&mut self, n: usize, offered: usize) {
        if n >= offered {
            self.next = (self.next * 2).min(MAX_READ);
        }
    }

    /// Nothing is waiting on the socket.
    pub(crate) fn idle(&mut self) {
        self.next = MIN_READ;
    }
}

/// Takes one unit of tokio's cooperative budget for each of `messages` handled, yielding
/// to the runtime whenever the budget of this turn is spent.
///
/// A Unix or TCP read that finds bytes waiting (`try_read_buf`) takes no budget, so without
/// this a connection whose peer keeps its input coming (a pipelining client, a burst queued
/// in the socket) would read, answer and read again without ever returning to the runtime,
/// and every other connection ready on that worker would wait for the whole burst. With it a
/// turn answers about a budget's worth (tokio's, 128 units per task poll) and the
/// connection goes to the back of the run queue, as a task reading through tokio's own
/// `poll_read` would. A batch larger than what is left pays in several turns, so the share
/// of the worker a connection gets follows the messages it sends, not the bytes one read
/// returns.
pub(crate) async fn spend_budget(messages: usize) {
    for _ in 0..messages {
        tokio::task::coop::consume_budget().await;
    }
}

/// Reads what the peer sent into the decoder's buffer; returns the byte count (0 at end of
/// stream). Cancel-safe: bytes are only ever taken from the socket by a synchronous
/// `try_read_buf` (or by `read_buf`, itself cancel-safe, for TLS).
pub(crate) async fn read_some(
    reader: &mut StreamReader,
    decoder: &mut ClientMessageDecoder,
    size: &mut ReadSize,
) -> io::Result<usize> {
    loop {
        if decoder.buffered() == 0 && decoder.buffer_capacity() == 0 {
            // Idle and holding nothing: wait for bytes before taking a buffer for them.
            reader.readable().await?;
        }
        let buf = decoder.read_buffer(size.next());
        let offered = buf.capacity() - buf.len();
        let r = match reader.try_read_buf(buf) {
            Some(r) => r,
            None => reader.read_buf(decoder.read_buffer(size.next())).await,
        };
        match r {
            Ok(n) => {
                size.after_read(n, offered);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if decoder.buffered() == 0 {
                    // Everything read so far is decoded: keep no buffer while idle.
                    decoder.release_buffer();
                    size.idle();
                } else {
                    // Part of a frame is buffered; the rest is on its way.
                    reader.readable().await?;
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use baton_protocol::{ClientMessage, encode_frame};
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::listen::Stream;

    #[test]
    fn the_read_size_doubles_while_reads_fill_it_and_falls_back_when_idle() {
        let mut s = ReadSize::default();
        assert_eq!(s.next(), MIN_READ);
        s.after_read(100, MIN_READ);
        assert_eq!(s.next(), MIN_READ, "a short read does not grow it");
        s.after_read(MIN_READ, MIN_READ);
        assert_eq!(s.next(), 2 * MIN_READ);
        for _ in 0..10 {
            let offered = s.next();
            s.after_read(offered, offered);
        }
        assert_eq!(s.next(), MAX_READ, "capped");
        s.idle();
        assert_eq!(s.next(), MIN_READ);
    }

    /// Polls `read_some` once: what it read, or `None` if it is now waiting.
    fn poll_once(
        reader: &mut StreamReader,
        decoder: &mut ClientMessageDecoder,
        size: &mut ReadSize,
    ) -> Option<io::Result<usize>> {
        let fut = pin!(read_some(reader, decoder, size));
        match fut.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }

    async fn read_until_some(
        reader: &mut StreamReader,
        decoder: &mut ClientMessageDecoder,
        size: &mut ReadSize,
    ) -> usize {
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            read_some(reader, decoder, size),
        )
        .await
        .expect("the peer's bytes arrive (hang guard)")
        .expect("read")
    }

    #[tokio::test]
    async fn an_idle_connection_holds_no_read_buffer_once_everything_read_is_decoded() {
        let (ours, mut peer) = tokio::net::UnixStream::pair().unwrap();
        let (mut reader, _writer) = Stream::Unix(ours).into_split();
        let mut decoder = ClientMessageDecoder::new(1 << 20);
        let mut size = ReadSize::default();

        // Nothing sent yet: waiting takes no buffer at all.
        assert!(poll_once(&mut reader, &mut decoder, &mut size).is_none());
        assert_eq!(decoder.buffer_capacity(), 0);

        let hello = encode_frame(&ClientMessage::hello(), 1 << 20).unwrap();
        peer.write_all(&hello).await.unwrap();
        let n = read_until_some(&mut reader, &mut decoder, &mut size).await;
        assert_eq!(n, hello.len());
        assert!(decoder.buffer_capacity() >= MIN_READ);
        assert_eq!(
            decoder.next_message().unwrap(),
            Some(ClientMessage::hello())
        );
        assert_eq!(decoder.next_message().unwrap(), None);

        // Decoded and nothing more on the socket: the next wait releases the buffer.
        assert!(poll_once(&mut reader, &mut decoder, &mut size).is_none());
        assert_eq!(decoder.buffer_capacity(), 0);
        assert_eq!(size.next(), MIN_READ);
    }

    #[tokio::test]
    async fn a_frame_cut_across_reads_keeps_its_buffer_until_it_is_complete() {
        let (ours, mut peer) = tokio::net::UnixStream::pair().unwrap();
        let (mut reader, _writer) = Stream::Unix(ours).into_split();
        let mut decoder = ClientMessageDecoder::new(1 << 20);
        let mut size = ReadSize::default();
        let hello = encode_frame(&ClientMessage::hello(), 1 << 20).unwrap();
        let (first, rest) = hello.split_at(hello.len() / 2);

        peer.write_all(first).await.unwrap();
        read_until_some(&mut reader, &mut decoder, &mut size).await;
        assert_eq!(decoder.next_message().unwrap(), None);
        // The header is taken off as soon as it is complete; part of the payload is left.
        let part = decoder.buffered();
        assert!(part > 0 && part < first.len(), "{part}");
        // Mid-frame and nothing more yet: the buffered part stays.
        assert!(poll_once(&mut reader, &mut decoder, &mut size).is_none());
        assert_eq!(decoder.buffered(), part);
        assert!(decoder.buffer_capacity() >= part);

        peer.write_all(rest).await.unwrap();
        read_until_some(&mut reader, &mut decoder, &mut size).await;
        assert_eq!(
            decoder.next_message().unwrap(),
            Some(ClientMessage::hello())
        );
        assert!(poll_once(&mut reader, &mut decoder, &mut size).is_none());
        assert_eq!(decoder.buffer_capacity(), 0);
    }

    #[tokio::test]
    async fn a_burst_grows_the_reads_and_the_buffer_is_released_after_it() {
        let (ours, mut peer) = tokio::net::UnixStream::pair().unwrap();
        let (mut reader, _writer) = Stream::Unix(ours).into_split();
        let mut decoder = ClientMessageDecoder::new(1 << 20);
        let mut size = ReadSize::default();
        let hello = encode_frame(&ClientMessage::hello(), 1 << 20).unwrap();
        // Far more than one small read: frames back to back, written before reading.
        let burst: Vec<u8> = std::iter::repeat_n(&hello[..], 2_000)
            .flatten()
            .copied()
            .collect();
        // One write the socket buffer takes whole (tens of KiB), before any read.
        peer.write_all(&burst).await.unwrap();
        let mut frames = 0;
        let mut largest = 0;
        while frames < 2_000 {
            let n = read_until_some(&mut reader, &mut decoder, &mut size).await;
            largest = largest.max(n);
            while let Some(m) = decoder.next_message().unwrap() {
                assert_eq!(m, ClientMessage::hello());
                frames += 1;
            }
        }
        assert!(
            largest > MIN_READ,
            "reads grew past {MIN_READ}: largest {largest}"
        );
        assert!(poll_once(&mut reader, &mut decoder, &mut size).is_none());
        assert_eq!(decoder.buffer_capacity(), 0);
    }
}
