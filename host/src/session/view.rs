//! The published view of a session: its state (snapshot) and the events that change it.
//!
//! The transcript view differs from the runtime transcript in three ways: it includes the
//! response being streamed (`status: "streaming"`) and tools still running (`status:
//! "running"`), a tool call and its result are one `tool` item, and every item carries the
//! id of its session entry. Events address items by index so a service can turn them into
//! path operations — streaming text is [`SessionEventKind::TextAppended`], an append.

use baton_protocol::Value;
use serde::{Deserialize, Serialize};

use crate::message::{
    AgentMessage, AssistantContent, AssistantMessage, BashExecutionMessage, BranchSummaryMessage,
    CompactionSummaryMessage, CustomMessage, StopReason, ToolCall, ToolResultMessage, Usage,
    UserContent,
};
use crate::provider::{ModelRef, ThinkingLevel};

/// What the session is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Ready for a prompt.
    Idle,
    /// A turn is running.
    Turn,
}

/// Status of an assistant item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AssistantStatus {
    /// Still streaming.
    Streaming,
    /// Settled normally (`stop`, `length`, `toolUse`).
    Complete,
    /// Settled with `error`.
    Error,
    /// Settled with `aborted`.
    Aborted,
}

/// Status of a tool item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    /// Executing.
    Running,
    /// Finished successfully.
    Complete,
    /// Finished with `isError`.
    Error,
}

/// One transcript item of the view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptItem {
    /// Session entry id.
    pub id: String,
    /// The item.
    #[serde(flatten)]
    pub body: ItemBody,
}

/// Item payloads, discriminated by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum ItemBody {
    /// A user message (prompt or steering).
    User {
        /// Content.
        content: Vec<UserContent>,
        /// Unix ms.
        timestamp: u64,
    },
    /// A model response, streaming or settled.
    ///
    /// Field order is wire key order, and the fields a settled response adds come last: a
    /// key inserted before existing ones would make a key-order-preserving diff delete and
    /// re-set every later field when the item settles.
    #[serde(rename_all = "camelCase")]
    Assistant {
        /// Streaming or settled status.
        status: AssistantStatus,
        /// Content blocks so far.
        content: Vec<AssistantContent>,
        /// Provider id.
        provider: String,
        /// Model id.
        model: String,
        /// Usage (zero while streaming).
        usage: Usage,
        /// Unix ms.
        timestamp: u64,
        /// Set once settled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        /// For `error` / `aborted`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
    },
    /// A tool call and (once finished) its result.
    ///
    /// As for [`ItemBody::Assistant`], the field a finished call adds (`details`) comes last.
    #[serde(rename_all = "camelCase")]
    Tool {
        /// Running or finished status.
        status: ToolStatus,
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool_name: String,
        /// Call arguments.
        arguments: Value,
        /// Result content (empty while running).
        content: Vec<UserContent>,
        /// Result error flag (false while running).
        is_error: bool,
        /// Unix ms.
        timestamp: u64,
        /// Result details.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// A user shell command.
    BashExecution(BashExecutionMessage),
    /// Application content.
    Custom(CustomMessage),
    /// A branch summary.
    BranchSummary(BranchSummaryMessage),
    /// A compaction summary.
    CompactionSummary(CompactionSummaryMessage),
}

impl ItemBody {
    /// The view of a streaming response shell.
    pub(crate) fn streaming(partial: &AssistantMessage) -> Self {
        Self::Assistant {
            status: AssistantStatus::Streaming,
            content: partial.content.clone(),
            stop_reason: None,
            error_message: None,
            provider: partial.provider.clone(),
            model: partial.model.clone(),
            usage: partial.usage,
            timestamp: partial.timestamp,
        }
    }

    /// The view of a running tool call.
    pub(crate) fn running(call: &ToolCall, timestamp: u64) -> Self {
        Self::Tool {
            status: ToolStatus::Running,
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: call.arguments.clone(),
            content: Vec::new(),
            details: None,
            is_error: false,
            timestamp,
        }
    }

    /// The view of a finished tool call.
    pub(crate) fn finished(result: &ToolResultMessage, arguments: Value) -> Self {
        Self::Tool {
            status: if result.is_error {
                ToolStatus::Error
            } else {
                ToolStatus::Complete
            },
            tool_call_id: result.tool_call_id.clone(),
            tool_name: result.tool_name.clone(),
            arguments,
            content: result.content.clone(),
            details: result.details.clone(),
            is_error: result.is_error,
            timestamp: result.timestamp,
        }
    }

    /// The view of a settled message. Tool results need their call's arguments, found by
    /// the caller.
    pub(crate) fn settled(
        message: &AgentMessage,
        call_arguments: impl FnOnce(&str) -> Value,
    ) -> Self {
        match message {
            AgentMessage::User(u) => Self::User {
                content: u.content.clone(),
                timestamp: u.timestamp,
            },
            AgentMessage::Assistant(a) => Self::Assistant {
                status: match a.stop_reason {
                    StopReason::Error => AssistantStatus::Error,
                    StopReason::Aborted => AssistantStatus::Aborted,
                    StopReason::Stop | StopReason::Length | StopReason::ToolUse => {
                        AssistantStatus::Complete
                    }
                },
                content: a.content.clone(),
                stop_reason: Some(a.stop_reason),
                error_message: a.error_message.clone(),
                provider: a.provider.clone(),
                model: a.model.clone(),
                usage: a.usage,
                timestamp: a.timestamp,
            },
            AgentMessage::ToolResult(r) => Self::finished(r, call_arguments(&r.tool_call_id)),
            AgentMessage::BashExecution(b) => Self::BashExecution(b.clone()),
            AgentMessage::Custom(c) => Self::Custom(c.clone()),
            AgentMessage::BranchSummary(s) => Self::BranchSummary(s.clone()),
            AgentMessage::CompactionSummary(s) => Self::CompactionSummary(s.clone()),
        }
    }
}

/// The whole published state of a session (`pi.session` member `state`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionState {
    /// `idle` or `turn`.
    pub phase: Phase,
    /// Current model.
    pub model: ModelRef,
    /// Current reasoning effort.
    pub thinking_level: ThinkingLevel,
    /// The transcript view.
    pub transcript: Vec<TranscriptItem>,
    /// Steering texts waiting for the next turn boundary.
    pub queued_steer: Vec<String>,
}

/// A state at an event sequence number: apply events with `seq` greater than this.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Sequence number of the last event reflected.
    pub seq: u64,
    /// The state.
    pub state: SessionState,
}

/// A numbered change.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// Strictly increasing by one per session.
    pub seq: u64,
    /// The change.
    pub kind: SessionEventKind,
}

/// State changes, each applicable to the previous state.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEventKind {
    /// `phase` changed.
    Phase(Phase),
    /// `model` changed.
    Model(ModelRef),
    /// `thinkingLevel` changed.
    ThinkingLevel(ThinkingLevel),
    /// `queuedSteer` is now this.
    QueuedSteer(Vec<String>),
    /// An item was appended to `transcript`.
    ItemAdded {
        /// The item.
        item: TranscriptItem,
    },
    /// `transcript[index]` was replaced (settled, or a tool finished).
    ItemReplaced {
        /// Position.
        index: usize,
        /// The new item.
        item: TranscriptItem,
    },
    /// `transcript[index].content[content_index]` was added.
    BlockAdded {
        /// Item position.
        index: usize,
        /// Block position.
        content_index: usize,
        /// The block.
        block: AssistantContent,
    },
    /// Text appended to `transcript[index].content[content_index].text`.
    TextAppended {
        /// Item position.
        index: usize,
        /// Block position.
        content_index: usize,
        /// Appended text.
        delta: String,
    },
    /// Text appended to `transcript[index].content[content_index].thinking`.
    ThinkingAppended {
        /// Item position.
        index: usize,
        /// Block position.
        content_index: usize,
        /// Appended text.
        delta: String,
    },
}

impl SessionState {
    /// Applies an event (what a subscriber does with the events after a snapshot).
    pub fn apply(&mut self, kind: &SessionEventKind) {
        match kind {
            SessionEventKind::Phase(p) => self.phase = *p,
            SessionEventKind::Model(m) => self.model = m.clone(),
            SessionEventKind::ThinkingLevel(t) => self.thinking_level = *t,
            SessionEventKind::QueuedSteer(q) => self.queued_steer = q.clone(),
            SessionEventKind::ItemAdded { item } => self.transcript.push(item.clone()),
            SessionEventKind::ItemReplaced { index, item } => {
                if let Some(slot) = self.transcript.get_mut(*index) {
                    *slot = item.clone();
                }
            }
            SessionEventKind::BlockAdded { index, block, .. } => {
                if let Some(ItemBody::Assistant { content, .. }) =
                    self.transcript.get_mut(*index).map(|i| &mut i.body)
                {
                    content.push(block.clone());
                }
            }
            SessionEventKind::TextAppended {
                index,
                content_index,
                delta,
            } => {
                if let Some(AssistantContent::Text(t)) =
                    block_mut(&mut self.transcript, *index, *content_index)
                {
                    t.text.push_str(delta);
                }
            }
            SessionEventKind::ThinkingAppended {
                index,
                content_index,
                delta,
            } => {
                if let Some(AssistantContent::Thinking(t)) =
                    block_mut(&mut self.transcript, *index, *content_index)
                {
                    t.thinking.push_str(delta);
                }
            }
        }
    }
}

fn block_mut(
    items: &mut [TranscriptItem],
    index: usize,
    content_index: usize,
) -> Option<&mut AssistantContent> {
    match items.get_mut(index).map(|i| &mut i.body) {
        Some(ItemBody::Assistant { content, .. }) => content.get_mut(content_index),
        _ => None,
    }
}
