//! The agent loop: stream a response, run its tool calls, repeat until the model stops.
//!
//! ```text
//! prompt ─▶ [steering] ─▶ project ─▶ provider stream ─▶ settled assistant
//!              ▲                                            │
//!              │          error / aborted ──────────────────┼─▶ end (no tools)
//!              │          length ─▶ every call fails ───────┤
//!              │          toolUse ─▶ execute batch ─────────┤
//!              └──────── results (call order) ◀─────────────┘
//!                         all results terminate ─▶ end
//!                         no calls, no steering ─▶ end
//! ```
//!
//! The loop owns no state: it reads and appends through a [`RunContext`], which the session
//! implements (persisting each settled message and publishing events). Cancellation is one
//! [`tokio_util::sync::CancellationToken`] that reaches the provider stream and every running tool.

mod config;
mod context;
mod event;
mod exec;
mod run;

pub use config::{AgentConfig, ToolExecution};
pub use context::RunContext;
pub use event::LoopEvent;
pub use run::{LENGTH_FAILURE_TEXT, RunError, RunOutcome, run};
