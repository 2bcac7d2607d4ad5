//! The application's richer message union: the model roles plus `bashExecution`, `custom`,
//! `branchSummary` and `compactionSummary`.
//!
//! These records are what the runtime transcript, the session file and the UI hold. They
//! reach a model only through [`crate::projection`], which derives a flattened copy and never
//! changes the record.

use baton_protocol::Value;
use serde::{Deserialize, Serialize};

use super::content::{UserContent, de_user_content};
use super::model::{AssistantMessage, Message, ToolResultMessage, UserMessage};

/// A user `!command` run outside the model's tool protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BashExecutionMessage {
    /// The command line.
    pub command: String,
    /// Combined stdout and stderr (the tail, when truncated).
    pub output: String,
    /// Exit code; `None` when the process was killed or never ran.
    pub exit_code: Option<i32>,
    /// True when the command was aborted.
    pub cancelled: bool,
    /// True when `output` holds only the tail.
    pub truncated: bool,
    /// Where the full output was kept when truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_output_path: Option<String>,
    /// Unix milliseconds.
    pub timestamp: u64,
    /// True for `!!command`: recorded and shown, but never sent to the model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclude_from_context: bool,
}

/// Application/extension content that the model sees as user content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomMessage {
    /// Application-chosen kind (namespaced, stable across versions).
    pub custom_type: String,
    /// Model-visible content.
    #[serde(deserialize_with = "de_user_content")]
    pub content: Vec<UserContent>,
    /// Whether a UI shows it (does not affect the model).
    #[serde(default = "yes")]
    pub display: bool,
    /// Application data, not sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Unix milliseconds.
    pub timestamp: u64,
}

fn yes() -> bool {
    true
}

/// A summary of a branch the conversation came back from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchSummaryMessage {
    /// The summary text.
    pub summary: String,
    /// The entry the abandoned branch started from; `None` (written as `null`, the key kept, as
    /// upstream's `fromId: string | null`) when it is not known.
    pub from_id: Option<String>,
    /// Unix milliseconds.
    pub timestamp: u64,
}

/// The summary that replaces history before a compaction boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionSummaryMessage {
    /// The summary text.
    pub summary: String,
    /// Context size before compaction, in tokens.
    pub tokens_before: u64,
    /// Unix milliseconds.
    pub timestamp: u64,
}

/// Every message the runtime keeps, discriminated by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum AgentMessage {
    /// A user turn.
    User(UserMessage),
    /// A model response.
    Assistant(AssistantMessage),
    /// A tool outcome.
    ToolResult(ToolResultMessage),
    /// A user shell command.
    BashExecution(BashExecutionMessage),
    /// Application content.
    Custom(CustomMessage),
    /// A branch summary.
    BranchSummary(BranchSummaryMessage),
    /// A compaction summary.
    CompactionSummary(CompactionSummaryMessage),
}

impl AgentMessage {
    /// The `role` discriminant.
    pub fn role(&self) -> &'static str {
        match self {
            Self::User(_) => "user",
            Self::Assistant(_) => "assistant",
            Self::ToolResult(_) => "toolResult",
            Self::BashExecution(_) => "bashExecution",
            Self::Custom(_) => "custom",
            Self::BranchSummary(_) => "branchSummary",
            Self::CompactionSummary(_) => "compactionSummary",
        }
    }

    /// Unix milliseconds.
    pub fn timestamp(&self) -> u64 {
        match self {
            Self::User(m) => m.timestamp,
            Self::Assistant(m) => m.timestamp,
            Self::ToolResult(m) => m.timestamp,
            Self::BashExecution(m) => m.timestamp,
            Self::Custom(m) => m.timestamp,
            Self::BranchSummary(m) => m.timestamp,
            Self::CompactionSummary(m) => m.timestamp,
        }
    }
}

impl From<Message> for AgentMessage {
    fn from(m: Message) -> Self {
        match m {
            Message::User(m) => Self::User(m),
            Message::Assistant(m) => Self::Assistant(m),
            Message::ToolResult(m) => Self::ToolResult(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_record_serialises_with_design_field_names() {
        let m = AgentMessage::BashExecution(BashExecutionMessage {
            command: "ls -la".into(),
            output: "total 32".into(),
            exit_code: Some(0),
            cancelled: false,
            truncated: false,
            full_output_path: None,
            timestamp: 1_748_568_000_000,
            exclude_from_context: false,
        });
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"role":"bashExecution","command":"ls -la","output":"total 32","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1748568000000}"#
        );
    }

    #[test]
    fn user_content_in_string_form_reads_as_one_text_block() {
        let m: AgentMessage =
            serde_json::from_str(r#"{"role":"user","content":"Read auth.ts","timestamp":1}"#)
                .unwrap();
        assert_eq!(m, AgentMessage::User(UserMessage::text("Read auth.ts", 1)));
    }

    #[test]
    fn design_text_tool_exchange_parses_and_round_trips() {
        let text = r#"[{"role":"user","content":[{"type":"text","text":"Read auth.ts"}],"timestamp":1748568000000},{"role":"assistant","content":[{"type":"text","text":"I will inspect that file."},{"type":"toolCall","id":"call_read_001","name":"read","arguments":{"path":"auth.ts"}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4-6","responseId":"msg_01","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0.0,"output":0.0,"cacheRead":0.0,"cacheWrite":0.0,"total":0.0}},"stopReason":"toolUse","timestamp":1748568000100},{"role":"toolResult","toolCallId":"call_read_001","toolName":"read","content":[{"type":"text","text":"export function authorize() {}"}],"isError":false,"timestamp":1748568000200}]"#;
        let msgs: Vec<AgentMessage> = serde_json::from_str(text).unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(serde_json::to_string(&msgs).unwrap(), text);
    }

    #[test]
    fn a_branch_summary_with_a_null_from_id_reads_and_writes_back_the_same_bytes() {
        let text =
            r#"{"role":"branchSummary","summary":"s","fromId":null,"timestamp":1748568000000}"#;
        let m: AgentMessage = serde_json::from_str(text).unwrap();
        assert!(matches!(&m, AgentMessage::BranchSummary(b) if b.from_id.is_none()));
        assert_eq!(serde_json::to_string(&m).unwrap(), text);
    }

    #[test]
    fn a_branch_summary_with_a_from_id_reads_and_writes_back_the_same_bytes() {
        let text =
            r#"{"role":"branchSummary","summary":"s","fromId":"e7","timestamp":1748568000000}"#;
        let m: AgentMessage = serde_json::from_str(text).unwrap();
        assert!(matches!(&m, AgentMessage::BranchSummary(b) if b.from_id.as_deref() == Some("e7")));
        assert_eq!(serde_json::to_string(&m).unwrap(), text);
    }
}
