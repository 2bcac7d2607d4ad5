//! The projection kept up to date as messages are appended: O(1) per message, so a model
//! call's context costs nothing that grows with the transcript.
//!
//! Why this is exact (equal to [`super::project`] of the whole list after every append):
//! [`super::repair`]'s output is a concatenation of independent parts, one per replayed
//! assistant message (the ones that did not end in `error` / `aborted`) and one before the
//! first. A part is: the assistant, then one result per tool call in call order, then the
//! part's user messages in order; tool results that answer none of the part's calls are
//! dropped. So only the last part can still change, and only in its result slots: a call's
//! slot holds the synthetic "No result provided" result until the first result with its id
//! arrives, which then takes the slot. Appending never moves an earlier message.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Arc;

use super::context::{Entry, ModelContext};
use super::rules::{MISSING_RESULT_TEXT, convert_one};
use crate::message::{AgentMessage, Message, StopReason, ToolResultMessage};

/// A [`ModelContext`] maintained incrementally from appended rich messages.
#[derive(Debug, Clone, Default)]
pub struct ContextProjector {
    context: ModelContext,
    /// The last replayed assistant's calls still waiting for a result: call id → the index
    /// of the slot (now a synthetic result) its first result will take.
    open_calls: HashMap<String, usize>,
}

impl ContextProjector {
    /// An empty projection.
    pub fn new() -> Self {
        Self::default()
    }

    /// The projection of `messages` (O(n): for rebuilding after the context was replaced).
    pub fn from_messages<M: Borrow<Arc<AgentMessage>>>(
        messages: impl IntoIterator<Item = M>,
    ) -> Self {
        let mut projector = Self::new();
        for m in messages {
            projector.push(m.borrow());
        }
        projector
    }

    /// The projected context now (clone it to hand it out: one reference count).
    pub fn context(&self) -> &ModelContext {
        &self.context
    }

    /// Projects one appended message (O(1) amortised, plus the size of any text it derives).
    pub fn push(&mut self, message: &Arc<AgentMessage>) {
        match &**message {
            AgentMessage::Assistant(a)
                if matches!(a.stop_reason, StopReason::Error | StopReason::Aborted) => {}
            AgentMessage::Assistant(a) => {
                // A replayed assistant starts a new part: the previous part is final.
                self.open_calls.clear();
                self.context.push(Entry::Shared(Arc::clone(message)));
                for call in a.tool_calls() {
                    let slot = self.context.len();
                    self.context.push(Entry::derived(Message::ToolResult(
                        ToolResultMessage::error(call, MISSING_RESULT_TEXT, a.timestamp),
                    )));
                    // A repeated id keeps its synthetic result: the first call takes the result.
                    self.open_calls.entry(call.id.clone()).or_insert(slot);
                }
            }
            AgentMessage::ToolResult(r) => {
                // Otherwise an orphan (or a second result for one call): dropped.
                if let Some(slot) = self.open_calls.remove(&r.tool_call_id) {
                    self.context.set(slot, Entry::Shared(Arc::clone(message)));
                }
            }
            AgentMessage::User(_) => self.context.push(Entry::Shared(Arc::clone(message))),
            other => {
                if let Some(m) = convert_one(other) {
                    self.context.push(Entry::derived(m));
                }
            }
        }
    }
}
