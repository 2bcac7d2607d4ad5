//! The model-facing union: `user`, `assistant` and `toolResult` messages.
//!
//! This is what a provider receives (after projection) and what it produces. Field names are
//! camelCase and `role` is the discriminant, as in the design text.

use baton_protocol::Value;
use serde::{Deserialize, Serialize};

use super::content::{AssistantContent, ToolCall, UserContent, de_user_content};

/// A user turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// Ordered text and image blocks (a stored string is read as one text block).
    #[serde(deserialize_with = "de_user_content")]
    pub content: Vec<UserContent>,
    /// Unix milliseconds.
    pub timestamp: u64,
}

impl UserMessage {
    /// A one-block text message.
    pub fn text(text: impl Into<String>, timestamp: u64) -> Self {
        Self {
            content: vec![UserContent::text(text)],
            timestamp,
        }
    }
}

/// Why an assistant response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The model finished its answer.
    Stop,
    /// The output token limit truncated the response.
    Length,
    /// The model asked for tools.
    ToolUse,
    /// The provider or the request failed.
    Error,
    /// The run was aborted.
    Aborted,
}

impl StopReason {
    /// The wire text (`stop`, `length`, `toolUse`, `error`, `aborted`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolUse => "toolUse",
            Self::Error => "error",
            Self::Aborted => "aborted",
        }
    }
}

/// Money spent, per token class (provider currency units).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Cache reads.
    pub cache_read: f64,
    /// Cache writes.
    pub cache_write: f64,
    /// Sum.
    pub total: f64,
}

/// Token accounting for one response.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Tokens read from a prompt cache.
    pub cache_read: u64,
    /// Tokens written to a prompt cache.
    pub cache_write: u64,
    /// Total tokens.
    pub total_tokens: u64,
    /// Cost breakdown.
    #[serde(default)]
    pub cost: Cost,
}

/// A settled model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    /// Ordered text, thinking and tool-call blocks.
    #[serde(default)]
    pub content: Vec<AssistantContent>,
    /// The API family that produced it (e.g. `scripted`, `openai-completions`).
    pub api: String,
    /// Provider id.
    pub provider: String,
    /// Requested model id.
    pub model: String,
    /// Model id the provider reported, when different (opaque).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_model: Option<String>,
    /// Provider response id (opaque, may be needed to continue a conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// Token usage.
    #[serde(default)]
    pub usage: Usage,
    /// Why the response ended.
    pub stop_reason: StopReason,
    /// Human-readable failure for `error` / `aborted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The provider's own stop reason text (opaque).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_stop_reason: Option<String>,
    /// Unix milliseconds.
    pub timestamp: u64,
}

impl AssistantMessage {
    /// The tool calls, in content order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|c| match c {
            AssistantContent::ToolCall(call) => Some(call),
            AssistantContent::Text(_) | AssistantContent::Thinking(_) => None,
        })
    }

    /// All text blocks joined (no separator).
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|c| match c {
                AssistantContent::Text(t) => Some(t.text.as_str()),
                AssistantContent::Thinking(_) | AssistantContent::ToolCall(_) => None,
            })
            .collect()
    }
}

/// The outcome of one tool call, linked by `toolCallId`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultMessage {
    /// The originating [`ToolCall::id`].
    pub tool_call_id: String,
    /// The tool's name.
    pub tool_name: String,
    /// Model-visible result.
    #[serde(deserialize_with = "de_user_content")]
    pub content: Vec<UserContent>,
    /// Runtime/UI details, not sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// True when the call failed.
    pub is_error: bool,
    /// Unix milliseconds.
    pub timestamp: u64,
}

impl ToolResultMessage {
    /// An error result with one text block.
    pub fn error(call: &ToolCall, message: impl Into<String>, timestamp: u64) -> Self {
        Self {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            content: vec![UserContent::text(message)],
            details: None,
            is_error: true,
            timestamp,
        }
    }
}

/// What providers accept: the closed model-layer union.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum Message {
    /// A user turn.
    User(UserMessage),
    /// A model response.
    Assistant(AssistantMessage),
    /// A tool outcome.
    ToolResult(ToolResultMessage),
}

impl Message {
    /// Unix milliseconds.
    pub fn timestamp(&self) -> u64 {
        match self {
            Self::User(m) => m.timestamp,
            Self::Assistant(m) => m.timestamp,
            Self::ToolResult(m) => m.timestamp,
        }
    }
}

impl Message {
    /// This message, borrowed.
    pub fn to_ref(&self) -> MessageRef<'_> {
        match self {
            Self::User(m) => MessageRef::User(m),
            Self::Assistant(m) => MessageRef::Assistant(m),
            Self::ToolResult(m) => MessageRef::ToolResult(m),
        }
    }
}

/// A borrowed [`Message`]: what iterating a model context yields (the context shares the
/// transcript's messages instead of copying them). Serialises exactly like [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum MessageRef<'a> {
    /// A user turn.
    User(&'a UserMessage),
    /// A model response.
    Assistant(&'a AssistantMessage),
    /// A tool outcome.
    ToolResult(&'a ToolResultMessage),
}

impl MessageRef<'_> {
    /// Unix milliseconds.
    pub fn timestamp(self) -> u64 {
        match self {
            Self::User(m) => m.timestamp,
            Self::Assistant(m) => m.timestamp,
            Self::ToolResult(m) => m.timestamp,
        }
    }

    /// An owned copy.
    pub fn to_message(self) -> Message {
        match self {
            Self::User(m) => Message::User(m.clone()),
            Self::Assistant(m) => Message::Assistant(m.clone()),
            Self::ToolResult(m) => Message::ToolResult(m.clone()),
        }
    }
}
