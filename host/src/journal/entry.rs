//! The JSONL record types: one header line, then a tree of entries.
//!
//! ```text
//! {"type":"session","version":1,"id":"<uuid>","timestamp":"2025-05-30T01:20:00.000Z","cwd":"/work"}
//! {"id":"00000001","parentId":null,"timestamp":"…","type":"model_change","provider":"scripted","modelId":"default"}
//! {"id":"00000002","parentId":"00000001","timestamp":"…","type":"message","message":{"role":"user",…}}
//! ```
//!
//! Every entry has `id`, `parentId` (null for a root) and an ISO-8601 UTC `timestamp`.
//! Entry types use snake_case names and camelCase fields. Readers skip (with a warning) entry
//! types they do not know, so a newer writer's file still opens; the header's `version` is
//! bumped for changes old readers would misread.

use baton_protocol::Value;
use serde::{Deserialize, Serialize};

use crate::message::{AgentMessage, UserContent};
use crate::model_ref::{ModelRef, ThinkingLevel};

/// Current file format version.
pub const FORMAT_VERSION: u32 = 1;

/// The first line of a session file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeader {
    /// Always `"session"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// Session id (a UUIDv4; also the file name).
    pub id: String,
    /// Creation time, ISO-8601 UTC.
    pub timestamp: String,
    /// Working directory.
    pub cwd: String,
    /// Who created the session: the creating connection's identity key
    /// (`service::owner_key`, e.g. `tls:sha256=<hex>`). Absent for sessions created in
    /// process without a peer and in files whose writer recorded none; such sessions are
    /// visible only to admins (`docs/host.md`, access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEntry {
    /// Unique within the file.
    pub id: String,
    /// The entry this one follows; `None` for a root.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// ISO-8601 UTC.
    pub timestamp: String,
    /// What the entry records.
    #[serde(flatten)]
    pub kind: EntryKind,
}

/// Entry payloads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "entries are built one at a time and written at once; boxing buys nothing"
)]
pub enum EntryKind {
    /// A settled message.
    Message {
        /// The message.
        message: AgentMessage,
    },
    /// The session switched model.
    #[serde(rename_all = "camelCase")]
    ModelChange {
        /// Provider id.
        provider: String,
        /// Model id.
        model_id: String,
    },
    /// The session switched reasoning effort.
    #[serde(rename_all = "camelCase")]
    ThinkingLevelChange {
        /// New level.
        thinking_level: ThinkingLevel,
    },
    /// History before `firstKeptEntryId` is replaced by `summary`.
    #[serde(rename_all = "camelCase")]
    Compaction {
        /// The summary.
        summary: String,
        /// First entry kept verbatim (on the active path, before this entry).
        first_kept_entry_id: String,
        /// Context size before compaction.
        tokens_before: u64,
    },
    /// Summary of an abandoned branch.
    #[serde(rename_all = "camelCase")]
    BranchSummary {
        /// Entry the branch started from. Upstream writes a string (`"root"` for an empty
        /// branch) but reads files unvalidated, so a `null` here loads there; it loads here too
        /// (as `None`) and is written back as `null`.
        from_id: Option<String>,
        /// The summary.
        summary: String,
    },
    /// A user label on an entry (`None` removes it).
    #[serde(rename_all = "camelCase")]
    Label {
        /// Labelled entry.
        target_id: String,
        /// The label.
        label: Option<String>,
    },
    /// Session metadata.
    SessionInfo {
        /// Display name.
        name: Option<String>,
    },
    /// Application state that never enters model context.
    #[serde(rename_all = "camelCase")]
    Custom {
        /// Application-chosen kind.
        custom_type: String,
        /// Its data.
        data: Value,
    },
    /// Application content that the model sees as user content.
    #[serde(rename_all = "camelCase")]
    CustomMessage {
        /// Application-chosen kind.
        custom_type: String,
        /// Content.
        content: Vec<UserContent>,
        /// Whether a UI shows it.
        display: bool,
        /// Application data.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
}

impl EntryKind {
    /// A model change entry for `model`.
    pub fn model_change(model: &ModelRef) -> Self {
        Self::ModelChange {
            provider: model.provider.clone(),
            model_id: model.id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::UserMessage;

    #[test]
    fn message_entry_has_the_documented_shape() {
        let e = SessionEntry {
            id: "00000002".into(),
            parent_id: Some("00000001".into()),
            timestamp: "2025-05-30T01:20:00.000Z".into(),
            kind: EntryKind::Message {
                message: AgentMessage::User(UserMessage::text("hi", 5)),
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"id":"00000002","parentId":"00000001","timestamp":"2025-05-30T01:20:00.000Z","type":"message","message":{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":5}}"#
        );
        assert_eq!(serde_json::from_str::<SessionEntry>(&line).unwrap(), e);
    }

    #[test]
    fn a_branch_summary_entry_with_a_null_from_id_reads_and_writes_back_the_same_bytes() {
        let line = r#"{"id":"00000003","parentId":"00000001","timestamp":"2025-05-30T01:20:00.000Z","type":"branch_summary","fromId":null,"summary":"b"}"#;
        let e: SessionEntry = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&e).unwrap(), line);
    }

    #[test]
    fn a_message_entry_holding_a_branch_summary_with_a_null_from_id_reads_and_writes_back_the_same_bytes()
     {
        let line = r#"{"id":"00000002","parentId":null,"timestamp":"2025-05-30T01:20:00.000Z","type":"message","message":{"role":"branchSummary","summary":"s","fromId":null,"timestamp":5}}"#;
        let e: SessionEntry = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&e).unwrap(), line);
    }

    #[test]
    fn every_entry_kind_round_trips() {
        let kinds = vec![
            EntryKind::model_change(&ModelRef::new("openai", "m")),
            EntryKind::ThinkingLevelChange {
                thinking_level: ThinkingLevel::High,
            },
            EntryKind::Compaction {
                summary: "s".into(),
                first_kept_entry_id: "1".into(),
                tokens_before: 9,
            },
            EntryKind::BranchSummary {
                from_id: Some("1".into()),
                summary: "b".into(),
            },
            EntryKind::BranchSummary {
                from_id: None,
                summary: "b".into(),
            },
            EntryKind::Label {
                target_id: "1".into(),
                label: Some("l".into()),
            },
            EntryKind::SessionInfo {
                name: Some("n".into()),
            },
            EntryKind::Custom {
                custom_type: "ext".into(),
                data: Value::from_json(r#"{"b":1,"a":2}"#).unwrap(),
            },
            EntryKind::CustomMessage {
                custom_type: "ext".into(),
                content: vec![UserContent::text("c")],
                display: true,
                details: None,
            },
        ];
        for kind in kinds {
            let e = SessionEntry {
                id: "x".into(),
                parent_id: None,
                timestamp: "t".into(),
                kind,
            };
            let line = serde_json::to_string(&e).unwrap();
            assert_eq!(
                serde_json::from_str::<SessionEntry>(&line).unwrap(),
                e,
                "{line}"
            );
        }
    }
}
