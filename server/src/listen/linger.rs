//! Closing so that the last frame arrives.
//!
//! A socket closed with unread input makes the kernel reset the connection (TCP sends RST;
//! a Unix peer's next read fails with `ECONNRESET`), and the reset can overtake the
//! `hello_error` the server just wrote, or make the client's own write of its hello fail
//! before it reads anything. So every refusal, and every connection the server closes while
//! the client may still be writing, ends the same way: write the last frame, shut down the
//! write half (the client reads end of stream after the frame), then read and discard what
//! the client still sends, up to [`DISCARD_LIMIT`] bytes, until its end of stream or until
//! [`LINGER_DEADLINE`], whichever comes first; only then close. A peer that sends more than
//! the limit is no longer read but still held open until the deadline: its writes block, and
//! it gets the time to read the frame before the reset (a client still writing a large
//! message that gives up on its first failed write, as browsers do, would otherwise lose the
//! frame to a reset that follows it by a fraction of a millisecond).
//!
//! Both bounds are hang guards against a hostile peer, not synchronisation: a peer that keeps
//! writing past the limit, or never closes, is dropped at the deadline (and may then see a
//! reset, after the frame). Lingering sockets never hold a connection slot, and at most
//! [`MAX_LINGERING`](crate::server) may linger at once; beyond that a socket closes at once.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// The most a closing connection reads and discards before closing: 64 KiB.
pub(crate) const DISCARD_LIMIT: usize = 64 * 1024;
/// The longest a closing connection lingers (writing the refusal, then discarding): 1 s.
pub(crate) const LINGER_DEADLINE: Duration = Duration::from_secs(1);
/// Bytes read at a time while discarding.
const DISCARD_CHUNK: usize = 4 * 1024;

/// How a lingering close ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lingered {
    /// The peer closed its side (or its connection failed) within the bounds.
    PeerClosed,
    /// The peer sent more than [`DISCARD_LIMIT`].
    LimitReached,
    /// [`LINGER_DEADLINE`] passed first.
    DeadlinePassed,
}

/// Writes `frame`, shuts down the write half, then discards input as described in the
/// module doc, all before `deadline`. Returns how the discarding ended (`DeadlinePassed` also
/// when the write itself did not finish in time).
pub(crate) async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    frame: &[u8],
    deadline: Instant,
) -> Lingered {
    let written = tokio::time::timeout_at(deadline, async {
        stream.write_all(frame).await?;
        stream.shutdown().await
    })
    .await;
    match written {
        Err(_elapsed) => Lingered::DeadlinePassed,
        Ok(Err(error)) => {
            tracing::debug!(%error, "cannot write the refusal");
            Lingered::PeerClosed
        }
        Ok(Ok(())) => discard(stream, deadline).await,
    }
}

/// Reads and drops input until the peer's end of stream (or a read error), [`DISCARD_LIMIT`]
/// bytes, or `deadline`; past the limit, holds the stream unread until `deadline`.
pub(crate) async fn discard<R: AsyncRead + Unpin>(reader: &mut R, deadline: Instant) -> Lingered {
    let mut buf = vec![0u8; DISCARD_CHUNK];
    let mut total = 0usize;
    let reading = async {
        loop {
            let room = DISCARD_LIMIT.saturating_sub(total).min(buf.len());
            if room == 0 {
                return Lingered::LimitReached;
            }
            match reader.read(&mut buf[..room]).await {
                Ok(0) | Err(_) => return Lingered::PeerClosed,
                Ok(n) => total = total.saturating_add(n),
            }
        }
    };
    let how = tokio::time::timeout_at(deadline, reading)
        .await
        .unwrap_or(Lingered::DeadlinePassed);
    if how == Lingered::LimitReached {
        tokio::time::sleep_until(deadline).await;
    }
    tracing::trace!(discarded = total, ?how, "lingering close done");
    how
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;
    use tokio::time::Instant;

    use super::{DISCARD_LIMIT, LINGER_DEADLINE, Lingered, discard, refuse};

    #[tokio::test]
    async fn a_refusal_is_written_then_input_is_discarded_until_the_peer_closes() {
        let (mut server, mut client) = UnixStream::pair().unwrap();
        client.write_all(b"hello and more").await.unwrap();
        let refusing = async { refuse(&mut server, b"no", Instant::now() + LINGER_DEADLINE).await };
        let reading = async {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            client.write_all(b"late").await.unwrap();
            drop(client);
            got
        };
        let (how, got) = tokio::join!(refusing, reading);
        assert_eq!(got, b"no");
        assert_eq!(how, Lingered::PeerClosed);
    }

    #[tokio::test]
    async fn discarding_stops_at_the_limit_and_holds_the_stream_until_the_deadline() {
        let (mut server, mut client) = UnixStream::pair().unwrap();
        let flood = vec![0u8; DISCARD_LIMIT + 1];
        let start = Instant::now();
        let writing = async {
            // Ends when the server stops reading and closes.
            let _ = client.write_all(&flood).await;
        };
        let discarding = async {
            let how = discard(&mut server, start + LINGER_DEADLINE).await;
            drop(server);
            how
        };
        let ((), how) = tokio::join!(writing, discarding);
        assert_eq!(how, Lingered::LimitReached);
        assert!(
            start.elapsed() >= LINGER_DEADLINE,
            "a peer past the limit is not reset before the deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_is_dropped_at_the_deadline() {
        let (mut server, _client) = UnixStream::pair().unwrap();
        let start = Instant::now();
        let how = discard(&mut server, start + LINGER_DEADLINE).await;
        assert_eq!(how, Lingered::DeadlinePassed);
        assert!(start.elapsed() >= LINGER_DEADLINE);
    }
}
