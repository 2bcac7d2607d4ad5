//! What a provider is: the [`Provider`] trait, the [`ModelRequest`] one call takes and the
//! [`ProviderEvent`]s its pulled [`ProviderStream`] yields (the module docs, `super`, give the
//! rules every provider keeps).

use std::fmt;

use tokio_util::sync::CancellationToken;

use crate::BoxFuture;
use crate::message::{StopReason, ToolCall, Usage};
use crate::model_ref::ThinkingLevel;
use crate::projection::ModelContext;
use crate::tool::ToolSpec;

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// Model id within the provider.
    pub model: String,
    /// System prompt.
    pub system_prompt: String,
    /// The projected conversation: shared with the session, not a copy. Iterate it
    /// (`for m in &request.messages`) and match the borrowed
    /// [`MessageRef`](crate::message::MessageRef)s; see [`ModelContext`]. Tests build one from
    /// a `Vec<Message>` with `.into()`.
    pub messages: ModelContext,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Reasoning effort.
    pub thinking: ThinkingLevel,
}

/// What a provider stream yields.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderEvent {
    /// Text to append (a new text block starts when the previous block is not text).
    TextDelta(String),
    /// Reasoning to append (a new thinking block starts when the previous block is not one).
    ThinkingDelta(String),
    /// Opaque signature of the current thinking block (replaces any earlier one).
    ThinkingSignature(String),
    /// Opaque signature of the current text block.
    TextSignature(String),
    /// A redacted thinking block: no text, its opaque `data` kept as the signature (and
    /// `redacted: true`), replayed literally.
    RedactedThinking(String),
    /// The current block is complete: the next delta starts a new block even if it is of the
    /// same kind.
    BlockEnd,
    /// The provider's own stop reason, for a response that ends in [`ProviderEvent::Error`]
    /// (e.g. a refusal); `Done` carries its own.
    RawStopReason(String),
    /// A complete tool call block.
    ToolCall(ToolCall),
    /// Token usage so far (the last one wins).
    Usage(Usage),
    /// Opaque response identity.
    Metadata {
        /// Provider response id.
        response_id: Option<String>,
        /// Model that actually answered.
        response_model: Option<String>,
    },
    /// The response is complete.
    Done {
        /// Normalised stop reason (`stop`, `length` or `toolUse`).
        stop_reason: StopReason,
        /// The provider's own text for it.
        raw_stop_reason: Option<String>,
    },
    /// The request failed; nothing follows.
    Error(String),
}

/// A pulled stream of provider events.
pub trait ProviderStream: Send {
    /// The next event; `None` once the stream is over. Cancel-safe: dropping the future loses
    /// no event that was already returned.
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>>;
}

/// A model provider.
pub trait Provider: Send + Sync + fmt::Debug {
    /// Provider id (`scripted`, `openai`).
    fn id(&self) -> &str;
    /// API family recorded on assistant messages (`scripted`, `openai-completions`).
    fn api(&self) -> &str;
    /// Starts a call. Never fails here: failures are [`ProviderEvent::Error`]s.
    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> Box<dyn ProviderStream>;
}

/// A stream over a precomputed list of events (useful for tests and simple providers).
#[derive(Debug)]
pub struct VecStream {
    events: std::collections::VecDeque<ProviderEvent>,
}

impl VecStream {
    /// Yields `events` in order.
    pub fn new(events: Vec<ProviderEvent>) -> Self {
        Self {
            events: events.into(),
        }
    }
}

impl ProviderStream for VecStream {
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>> {
        let ev = self.events.pop_front();
        Box::pin(async move { ev })
    }
}
