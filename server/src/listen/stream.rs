//! One byte stream type over every transport, so the connection driver is not generic.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream, tcp, unix};
use tokio_rustls::server::TlsStream;

/// An accepted, authenticated byte stream.
#[derive(Debug)]
pub(crate) enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// A transport the embedder opened and authenticated ([`Server::adopt`](crate::Server::adopt)),
    /// e.g. a WebSocket carrying the frame bytes.
    Adopted(Adopted),
}

/// What an adopted transport is: any tokio byte stream that can move between tasks.
pub(crate) trait AdoptedIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> AdoptedIo for T {}

/// An adopted transport, boxed so the connection driver stays one type. The mutex is never
/// locked (every access is through `&mut`, [`Mutex::get_mut`]): it only makes the stream
/// `Sync` without asking that of the embedder's transport.
pub(crate) struct Adopted(Mutex<Box<dyn AdoptedIo>>);

impl Adopted {
    pub(crate) fn new(io: impl AdoptedIo + 'static) -> Self {
        Self(Mutex::new(Box::new(io)))
    }

    fn io(self: Pin<&mut Self>) -> Pin<&mut dyn AdoptedIo> {
        Pin::new(&mut **self.get_mut().0.get_mut())
    }
}

impl fmt::Debug for Adopted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Adopted")
    }
}

impl AsyncRead for Adopted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.io().poll_read(cx, buf)
    }
}

impl AsyncWrite for Adopted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}

impl Stream {
    /// Splits into a read half and a write half for the connection's reader and writer.
    ///
    /// Unix and TCP sockets split into owned halves (no lock); TLS shares one session state
    /// between both directions, so it needs [`tokio::io::split`], which locks per call; so
    /// does an adopted transport, whose halves the server cannot know.
    pub(crate) fn into_split(self) -> (StreamReader, StreamWriter) {
        match self {
            Self::Unix(s) => {
                let (r, w) = s.into_split();
                (StreamReader::Unix(r), StreamWriter::Unix(w))
            }
            Self::Tcp(s) => {
                let (r, w) = s.into_split();
                (StreamReader::Tcp(r), StreamWriter::Tcp(w))
            }
            Self::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (StreamReader::Tls(r), StreamWriter::Tls(w))
            }
            Self::Adopted(s) => {
                let (r, w) = tokio::io::split(s);
                (StreamReader::Adopted(r), StreamWriter::Adopted(w))
            }
        }
    }
}

/// The read half of a [`Stream`].
#[derive(Debug)]
pub(crate) enum StreamReader {
    Unix(unix::OwnedReadHalf),
    Tcp(tcp::OwnedReadHalf),
    Tls(tokio::io::ReadHalf<Box<TlsStream<TcpStream>>>),
    Adopted(tokio::io::ReadHalf<Adopted>),
}

impl StreamReader {
    /// Waits until a read would not block (Unix, TCP); at once for TLS, whose reads go
    /// through the session, and for an adopted transport.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        match self {
            Self::Unix(r) => r.readable().await,
            Self::Tcp(r) => r.readable().await,
            Self::Tls(_) | Self::Adopted(_) => Ok(()),
        }
    }

    /// True if a failed read is worth lingering on: an adopted transport fails the read when
    /// it refuses its peer (a WebSocket closing with 1009, 1003 or 1008), then sends its own
    /// last frame and yields the input it discards through later reads. A Unix, TCP or TLS
    /// read fails only when the connection did, so there is nothing to linger on.
    pub(crate) fn lingers_after_failure(&self) -> bool {
        matches!(self, Self::Adopted(_))
    }

    /// Reads what the socket holds now into `buf`'s spare room without waiting (`WouldBlock`
    /// when it holds nothing); `None` for TLS and adopted transports.
    pub(crate) fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> Option<io::Result<usize>> {
        match self {
            Self::Unix(r) => Some(r.try_read_buf(buf)),
            Self::Tcp(r) => Some(r.try_read_buf(buf)),
            Self::Tls(_) | Self::Adopted(_) => None,
        }
    }
}

/// The write half of a [`Stream`]. Dropping an owned Unix or TCP half shuts down the
/// write direction.
#[derive(Debug)]
pub(crate) enum StreamWriter {
    Unix(unix::OwnedWriteHalf),
    Tcp(tcp::OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<Box<TlsStream<TcpStream>>>),
    Adopted(tokio::io::WriteHalf<Adopted>),
}

impl StreamWriter {
    /// True if [`Self::try_write`] can write (not TLS, whose writes go through the session,
    /// nor an adopted transport).
    pub(crate) fn can_try_write(&self) -> bool {
        !matches!(self, Self::Tls(_) | Self::Adopted(_))
    }

    /// Writes what the socket takes now without waiting; `None` for TLS and adopted
    /// transports.
    pub(crate) fn try_write(&self, buf: &[u8]) -> Option<io::Result<usize>> {
        match self {
            Self::Unix(w) => Some(w.try_write(buf)),
            Self::Tcp(w) => Some(w.try_write(buf)),
            Self::Tls(_) | Self::Adopted(_) => None,
        }
    }
}

impl AsyncRead for StreamReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
            Self::Adopted(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for StreamWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
            Self::Adopted(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s).poll_flush(cx),
            Self::Adopted(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
            Self::Adopted(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Self::Adopted(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Self::Adopted(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_flush(cx),
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Self::Adopted(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Self::Adopted(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
