//! Entry points for the interop probes (`interop/probe`), which drive the real agent loop and
//! projection beside the upstream packages. Not a stable API.
//!
//! The loop's cancellation and task types come from `tokio-util`; re-exporting them lets a
//! probe call [`crate::agent::run`] without depending on `tokio-util` itself (and on the same
//! feature set).

pub use tokio_util::sync::CancellationToken;
pub use tokio_util::task::TaskTracker;
