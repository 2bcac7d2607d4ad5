//! Listeners: where connections come from and how their peers are authenticated.
//!
//! Authentication happens here, before any protocol byte: the Unix socket is created with mode
//! 0600 and its peer credentials are read from the kernel; TLS verifies a client certificate
//! when a client CA is configured; plain TCP binds to loopback unless explicitly allowed
//! elsewhere.

mod linger;
mod stream;
mod tcp;
mod tls;
mod unix;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use tls::{ClientAuth, TlsConfig};
pub use unix::unix_socket_path;

pub(crate) use linger::{LINGER_DEADLINE, discard, refuse};
pub(crate) use stream::{Adopted, Stream, StreamReader, StreamWriter};
pub(crate) use tcp::BoundTcp;
pub use tcp::configure_accepted;
pub(crate) use unix::{BoundUnix, UnixSocketFile};

/// Options for a plain TCP listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpOptions {
    /// Address to bind; port 0 picks a free port.
    pub addr: SocketAddr,
    /// Allows binding a non-loopback address without TLS. Plain TCP authenticates nobody:
    /// anyone who can reach the port speaks the protocol. Off by default.
    pub allow_plaintext_non_loopback: bool,
}

impl TcpOptions {
    /// Plain TCP on `addr` (which must be loopback unless the opt-in is set).
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            allow_plaintext_non_loopback: false,
        }
    }
}

/// One place the server accepts connections.
#[derive(Clone)]
#[non_exhaustive]
pub enum Listener {
    /// A Unix socket at `<dir>/<serverId>.sock`, mode 0600. The directory is created with
    /// mode 0700 when missing.
    Unix {
        /// Directory holding the socket.
        dir: PathBuf,
    },
    /// Plain TCP.
    Tcp(TcpOptions),
    /// TLS over TCP.
    Tls {
        /// Address to bind; port 0 picks a free port.
        addr: SocketAddr,
        /// Certificates, key and client authentication.
        config: TlsConfig,
    },
}

impl Listener {
    /// A Unix socket in `dir`.
    pub fn unix(dir: impl Into<PathBuf>) -> Self {
        Self::Unix { dir: dir.into() }
    }

    /// Plain TCP on a loopback address.
    pub fn tcp(addr: SocketAddr) -> Self {
        Self::Tcp(TcpOptions::new(addr))
    }

    /// TLS on `addr`.
    pub fn tls(addr: SocketAddr, config: TlsConfig) -> Self {
        Self::Tls { addr, config }
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix { dir } => f.debug_struct("Unix").field("dir", dir).finish(),
            Self::Tcp(o) => f.debug_tuple("Tcp").field(o).finish(),
            Self::Tls { addr, config } => f
                .debug_struct("Tls")
                .field("addr", addr)
                .field("config", config)
                .finish(),
        }
    }
}

/// Where a started server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListenAddr {
    /// A Unix socket path.
    Unix(PathBuf),
    /// A plain TCP address.
    Tcp(SocketAddr),
    /// A TLS address.
    Tls(SocketAddr),
}

impl ListenAddr {
    /// The Unix socket path, for Unix listeners.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            Self::Unix(p) => Some(p),
            Self::Tcp(_) | Self::Tls(_) => None,
        }
    }

    /// The socket address, for TCP and TLS listeners.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self {
            Self::Unix(_) => None,
            Self::Tcp(a) | Self::Tls(a) => Some(*a),
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
            Self::Tcp(a) => write!(f, "tcp:{a}"),
            Self::Tls(a) => write!(f, "tls:{a}"),
        }
    }
}
