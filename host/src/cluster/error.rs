//! Why joining, staying in or leaving the fleet failed: one line each.

use std::path::PathBuf;

use thiserror::Error;

use super::config::ConfigError;

/// An error from etcd or its client, kept opaque so the client crate's types stay out of
/// this crate's API.
pub type EtcdError = Box<dyn std::error::Error + Send + Sync>;

/// Why the host could not join the fleet, or fell out of it.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A TLS file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    TlsFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// etcd did not answer (down, unreachable, TLS refused) within the deadline.
    #[error("cannot reach etcd at {endpoints}: {source}")]
    Unreachable {
        /// The endpoints tried, comma-separated.
        endpoints: String,
        /// Why.
        source: EtcdError,
    },
    /// Another process owns the server id: the one-line refusal naming it.
    #[error("server id {server_id} is already served by {holder}")]
    Owned {
        /// The server id asked for.
        server_id: String,
        /// The holder, described ([`HolderRecord::describe`](super::record::HolderRecord::describe)).
        holder: String,
    },
    /// An etcd request failed.
    #[error("etcd {what} failed: {source}")]
    Etcd {
        /// The request.
        what: &'static str,
        /// Why.
        source: EtcdError,
    },
}
