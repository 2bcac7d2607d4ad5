//! The store's errors.

use std::path::PathBuf;

/// Why the store could not do what was asked. Its `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The token file could not be read or written.
    #[error("browser token file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The token file is not one this host wrote.
    #[error("browser token file {}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong (one line).
        message: String,
    },
    /// The random source failed.
    #[error("{0}")]
    Random(String),
    /// A limit refused it (one line).
    #[error("{0}")]
    Refused(String),
}
