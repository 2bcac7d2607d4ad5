//! The published view of a session: its state (snapshot) and the events that change it.
//!
//! The transcript view differs from the runtime transcript in three ways: it includes the
//! response being streamed (`status: "streaming"`) and tools still running (`status:
//! "running"`), a tool call and its result are one `tool` item, and every item carries the
//! id of its session entry. Events address items by index so a service can turn them into
//! path operations — streaming text is [`SessionEventKind::TextAppended`], an append.

use std::sync::LazyLock;

use baton_protocol::{Map, Value};
use serde::{Deserialize, Serialize};

use super::activity::{AttachedClient, CompactionStatus, FollowUp};
use crate::message::{
    AgentMessage, AssistantContent, AssistantMessage, BashExecutionMessage, BranchSummaryMessage,
    CompactionSummaryMessage, CustomMessage, StopReason, ToolCall, ToolResultMessage, Usage,
    UserContent,
};
use crate::model_ref::{ModelRef, ThinkingLevel};
use crate::tool::Confinement;

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

/// A borrowed [`TranscriptItem`]: the same serialised form, without copying the item's
/// content. The service serialises items from the runtime's one transcript through this (a
/// 50 MiB tool output is cut while serialising, never cloned whole).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ItemRef<'a> {
    /// Session entry id.
    pub id: &'a str,
    /// The item.
    #[serde(flatten)]
    pub body: BodyRef<'a>,
}

/// A borrowed [`ItemBody`]; see [`ItemRef`]. Field order and serde attributes mirror
/// [`ItemBody`] exactly (a test checks both serialise alike).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "role", rename_all = "camelCase")]
#[allow(missing_docs, reason = "mirrors ItemBody field for field")]
pub enum BodyRef<'a> {
    User {
        content: &'a [UserContent],
        timestamp: u64,
    },
    #[serde(rename_all = "camelCase")]
    Assistant {
        status: AssistantStatus,
        content: &'a [AssistantContent],
        provider: &'a str,
        model: &'a str,
        usage: Usage,
        timestamp: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error_message: Option<&'a str>,
    },
    #[serde(rename_all = "camelCase")]
    Tool {
        status: ToolStatus,
        tool_call_id: &'a str,
        tool_name: &'a str,
        arguments: &'a Value,
        content: &'a [UserContent],
        is_error: bool,
        timestamp: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        details: Option<&'a Value>,
    },
    BashExecution(&'a BashExecutionMessage),
    Custom(&'a CustomMessage),
    BranchSummary(&'a BranchSummaryMessage),
    CompactionSummary(&'a CompactionSummaryMessage),
}

/// What a tool result whose call is unknown shows as its arguments.
static NO_ARGUMENTS: LazyLock<Value> = LazyLock::new(|| Value::Map(Map::new()));

impl<'a> BodyRef<'a> {
    /// A streaming response shell or partial response.
    pub(crate) fn streaming(partial: &'a AssistantMessage) -> Self {
        Self::Assistant {
            status: AssistantStatus::Streaming,
            content: &partial.content,
            provider: &partial.provider,
            model: &partial.model,
            usage: partial.usage,
            timestamp: partial.timestamp,
            stop_reason: None,
            error_message: None,
        }
    }

    /// A running tool call.
    pub(crate) fn running(call: &'a ToolCall, timestamp: u64) -> Self {
        Self::Tool {
            status: ToolStatus::Running,
            tool_call_id: &call.id,
            tool_name: &call.name,
            arguments: &call.arguments,
            content: &[],
            is_error: false,
            timestamp,
            details: None,
        }
    }

    /// A finished tool call (`arguments` from its call, when known).
    pub(crate) fn finished(result: &'a ToolResultMessage, arguments: &'a Value) -> Self {
        Self::Tool {
            status: if result.is_error {
                ToolStatus::Error
            } else {
                ToolStatus::Complete
            },
            tool_call_id: &result.tool_call_id,
            tool_name: &result.tool_name,
            arguments,
            content: &result.content,
            is_error: result.is_error,
            timestamp: result.timestamp,
            details: result.details.as_ref(),
        }
    }

    /// A settled message; a tool result shows `arguments`.
    pub(crate) fn settled(message: &'a AgentMessage, arguments: Option<&'a Value>) -> Self {
        match message {
            AgentMessage::User(u) => Self::User {
                content: &u.content,
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
                content: &a.content,
                provider: &a.provider,
                model: &a.model,
                usage: a.usage,
                timestamp: a.timestamp,
                stop_reason: Some(a.stop_reason),
                error_message: a.error_message.as_deref(),
            },
            AgentMessage::ToolResult(r) => Self::finished(r, arguments.unwrap_or(&NO_ARGUMENTS)),
            AgentMessage::BashExecution(b) => Self::BashExecution(b),
            AgentMessage::Custom(c) => Self::Custom(c),
            AgentMessage::BranchSummary(s) => Self::BranchSummary(s),
            AgentMessage::CompactionSummary(s) => Self::CompactionSummary(s),
        }
    }

    /// The owned form.
    pub fn to_owned_body(&self) -> ItemBody {
        match *self {
            Self::User { content, timestamp } => ItemBody::User {
                content: content.to_vec(),
                timestamp,
            },
            Self::Assistant {
                status,
                content,
                provider,
                model,
                usage,
                timestamp,
                stop_reason,
                error_message,
            } => ItemBody::Assistant {
                status,
                content: content.to_vec(),
                provider: provider.to_owned(),
                model: model.to_owned(),
                usage,
                timestamp,
                stop_reason,
                error_message: error_message.map(str::to_owned),
            },
            Self::Tool {
                status,
                tool_call_id,
                tool_name,
                arguments,
                content,
                is_error,
                timestamp,
                details,
            } => ItemBody::Tool {
                status,
                tool_call_id: tool_call_id.to_owned(),
                tool_name: tool_name.to_owned(),
                arguments: arguments.clone(),
                content: content.to_vec(),
                is_error,
                timestamp,
                details: details.cloned(),
            },
            Self::BashExecution(b) => ItemBody::BashExecution(b.clone()),
            Self::Custom(c) => ItemBody::Custom(c.clone()),
            Self::BranchSummary(s) => ItemBody::BranchSummary(s.clone()),
            Self::CompactionSummary(s) => ItemBody::CompactionSummary(s.clone()),
        }
    }
}

impl<'a> From<&'a ItemBody> for BodyRef<'a> {
    fn from(body: &'a ItemBody) -> Self {
        match body {
            ItemBody::User { content, timestamp } => Self::User {
                content,
                timestamp: *timestamp,
            },
            ItemBody::Assistant {
                status,
                content,
                provider,
                model,
                usage,
                timestamp,
                stop_reason,
                error_message,
            } => Self::Assistant {
                status: *status,
                content,
                provider,
                model,
                usage: *usage,
                timestamp: *timestamp,
                stop_reason: *stop_reason,
                error_message: error_message.as_deref(),
            },
            ItemBody::Tool {
                status,
                tool_call_id,
                tool_name,
                arguments,
                content,
                is_error,
                timestamp,
                details,
            } => Self::Tool {
                status: *status,
                tool_call_id,
                tool_name,
                arguments,
                content,
                is_error: *is_error,
                timestamp: *timestamp,
                details: details.as_ref(),
            },
            ItemBody::BashExecution(b) => Self::BashExecution(b),
            ItemBody::Custom(c) => Self::Custom(c),
            ItemBody::BranchSummary(s) => Self::BranchSummary(s),
            ItemBody::CompactionSummary(s) => Self::CompactionSummary(s),
        }
    }
}

impl<'a> From<&'a TranscriptItem> for ItemRef<'a> {
    fn from(item: &'a TranscriptItem) -> Self {
        Self {
            id: &item.id,
            body: BodyRef::from(&item.body),
        }
    }
}

impl ItemRef<'_> {
    /// The owned form.
    pub fn to_owned_item(&self) -> TranscriptItem {
        TranscriptItem {
            id: self.id.to_owned(),
            body: self.body.to_owned_body(),
        }
    }

    /// True for a `bashExecution` record.
    pub fn is_bash_execution(&self) -> bool {
        matches!(self.body, BodyRef::BashExecution(_))
    }
}

/// Whether a session's tools are confined (`confinement` in the state). Fixed for the
/// session's life: it is in every snapshot and never changed by an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolConfinement {
    /// Bash commands run under kernel confinement (Landlock).
    pub active: bool,
    /// [`Confinement`]'s text: `landlock (ABI 7)`, `disabled` or `unavailable (<reason>)`.
    pub detail: String,
}

impl From<&Confinement> for ToolConfinement {
    fn from(c: &Confinement) -> Self {
        Self {
            active: c.is_active(),
            detail: c.to_string(),
        }
    }
}

/// The whole published state of a session (`pi.session` member `state`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionState {
    /// Whether the session's tools are confined (static).
    pub confinement: ToolConfinement,
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
    /// The running turn's id (`None` when no turn runs).
    pub turn_id: Option<String>,
    /// Follow-up prompts waiting for the running turn to settle, oldest first.
    pub follow_ups: Vec<FollowUp>,
    /// The clients attached to the session.
    pub attached: Vec<AttachedClient>,
    /// Whether compaction is offered and running.
    pub compaction: CompactionStatus,
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
    /// `turnId` is now this.
    TurnId(Option<String>),
    /// `followUps` is now this.
    FollowUps(Vec<FollowUp>),
    /// `attached` is now this.
    Attached(Vec<AttachedClient>),
    /// `compaction` is now this.
    Compaction(CompactionStatus),
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
            SessionEventKind::TurnId(t) => self.turn_id = t.clone(),
            SessionEventKind::FollowUps(f) => self.follow_ups = f.clone(),
            SessionEventKind::Attached(a) => self.attached = a.clone(),
            SessionEventKind::Compaction(c) => self.compaction = *c,
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
