//! The session as the loop sees it ([`RunContext`]).

use std::sync::Arc;

use super::event::LoopEvent;
use crate::journal::StoreError;
use crate::message::AgentMessage;
use crate::provider::ModelContext;

/// The loop's view of the session: read the transcript, append settled messages, publish
/// transient events, collect steering.
pub trait RunContext: Send + Sync {
    /// The model context now, projected and shared (O(1): a reference count, not a copy).
    /// Read for every model call without a context transform
    /// ([`crate::projection::ContextTransform`]). Must equal [`crate::projection::project`]
    /// of [`RunContext::messages`]; keep a [`crate::projection::ContextProjector`] next to
    /// the messages to get it cheaply.
    fn model_context(&self) -> ModelContext;
    /// The runtime transcript now, as a shared snapshot. Read only when a context transform
    /// is configured, which then copies it.
    fn messages(&self) -> Arc<Vec<Arc<AgentMessage>>>;
    /// Appends a settled message (persisting it first where the context is durable).
    ///
    /// # Errors
    /// The message could not be persisted; the run stops.
    fn append(&self, message: AgentMessage) -> Result<(), StoreError>;
    /// Publishes a transient event.
    fn emit(&self, event: LoopEvent);
    /// Takes queued steering messages. With `last_chance`, an empty queue also means the run
    /// is about to end: the context must refuse later steering rather than queue it.
    fn take_steering(&self, last_chance: bool) -> Vec<AgentMessage>;
    /// Wall-clock milliseconds for timestamps.
    fn now_ms(&self) -> u64;
}
