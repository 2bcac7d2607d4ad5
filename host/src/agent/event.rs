//! What the loop reports while it runs.

use crate::message::{AssistantMessage, StopReason, ToolCall, ToolResultMessage};
use crate::provider::StreamUpdate;

/// A transient loop event. Settled messages are not events: they go through
/// [`super::RunContext::append`].
#[derive(Debug, Clone, PartialEq)]
pub enum LoopEvent {
    /// A model call is about to start (1-based count within the run).
    TurnStart {
        /// Turn number.
        turn: u32,
    },
    /// A response began streaming; `partial` is the empty shell.
    AssistantStart {
        /// The message being built.
        partial: AssistantMessage,
    },
    /// The streaming response changed (append deltas, new blocks).
    AssistantUpdate(StreamUpdate),
    /// A tool call is starting.
    ToolStart {
        /// The call.
        call: ToolCall,
    },
    /// A tool call finished (completion order; appended later in call order).
    ToolEnd {
        /// The result.
        result: ToolResultMessage,
    },
    /// The turn is over: its response and tool results are settled.
    TurnEnd {
        /// The response's stop reason.
        stop_reason: StopReason,
    },
}
