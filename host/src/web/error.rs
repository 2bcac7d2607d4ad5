//! Errors of the web listener.

use std::net::SocketAddr;

/// Why the web listener could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// Plain HTTP on a non-loopback address without the explicit opt-in: cookies and the
    /// pairing code would cross the network in the clear.
    #[error(
        "http://{0}: plain HTTP off loopback sends cookies in the clear; use https:// or pass --allow-insecure-remote"
    )]
    InsecureRemote(SocketAddr),
    /// A `--web-host` that is not `NAME[:PORT]`.
    #[error("--web-host {0:?}: expected a host name or IP address with an optional :PORT")]
    WebHost(String),
    /// The certificate or key does not form a usable TLS identity.
    #[error("web listener TLS: {0}")]
    Tls(String),
    /// Binding the socket failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
