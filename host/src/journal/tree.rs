//! Rebuilding the runtime transcript from the entry tree.
//!
//! The active leaf is the last entry in the file (appending after an older entry is how a
//! branch is made). The active path is root → leaf following `parentId`. If the path holds a
//! compaction, the latest one wins: the transcript is its summary, then the path's entries
//! from `firstKeptEntryId` up to the compaction, then the entries after it. Model and
//! thinking level are the last changes on the whole path; the name is the last
//! `session_info` in the file.

use std::collections::{HashMap, HashSet};

use super::entry::{EntryKind, SessionEntry};
use crate::clock::parse_iso8601;
use crate::message::{AgentMessage, BranchSummaryMessage, CompactionSummaryMessage, CustomMessage};
use crate::model_ref::{ModelRef, ThinkingLevel};

/// The state a session resumes with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rebuilt {
    /// Runtime transcript with the id of the entry each message came from.
    pub messages: Vec<(String, AgentMessage)>,
    /// Last model change on the path.
    pub model: Option<ModelRef>,
    /// Last thinking-level change on the path.
    pub thinking: Option<ThinkingLevel>,
    /// Last name set in the file.
    pub name: Option<String>,
    /// Id of the active leaf.
    pub leaf: Option<String>,
}

/// Rebuilds from entries in file order.
pub fn rebuild(entries: &[SessionEntry]) -> Rebuilt {
    let name = entries.iter().rev().find_map(|e| match &e.kind {
        EntryKind::SessionInfo { name } => Some(name.clone()),
        _ => None,
    });
    let Some(leaf) = entries.last() else {
        return Rebuilt {
            name: name.flatten(),
            ..Rebuilt::default()
        };
    };
    let path = active_path(entries, &leaf.id);
    let mut out = Rebuilt {
        name: name.flatten(),
        leaf: Some(leaf.id.clone()),
        ..Rebuilt::default()
    };
    for e in &path {
        match &e.kind {
            EntryKind::ModelChange { provider, model_id } => {
                out.model = Some(ModelRef::new(provider, model_id))
            }
            EntryKind::ThinkingLevelChange { thinking_level } => {
                out.thinking = Some(*thinking_level)
            }
            _ => {}
        }
    }
    let compaction = path
        .iter()
        .rposition(|e| matches!(e.kind, EntryKind::Compaction { .. }));
    match compaction {
        None => {
            for e in &path {
                push_messages(e, &mut out.messages);
            }
        }
        Some(c) => {
            let EntryKind::Compaction {
                summary,
                first_kept_entry_id,
                tokens_before,
            } = &path[c].kind
            else {
                unreachable!("rposition matched a compaction");
            };
            out.messages.push((
                path[c].id.clone(),
                AgentMessage::CompactionSummary(CompactionSummaryMessage {
                    summary: summary.clone(),
                    tokens_before: *tokens_before,
                    timestamp: millis(&path[c].timestamp),
                }),
            ));
            if let Some(first) = path[..c].iter().position(|e| &e.id == first_kept_entry_id) {
                for e in &path[first..c] {
                    push_messages(e, &mut out.messages);
                }
            }
            for e in &path[c + 1..] {
                push_messages(e, &mut out.messages);
            }
        }
    }
    out
}

/// Root → `leaf`, following `parentId` (a cycle or a dangling parent ends the walk).
pub fn active_path<'a>(entries: &'a [SessionEntry], leaf: &str) -> Vec<&'a SessionEntry> {
    let by_id: HashMap<&str, &SessionEntry> = entries.iter().map(|e| (e.id.as_str(), e)).collect();
    let mut path = Vec::new();
    let mut seen = HashSet::new();
    let mut cur = by_id.get(leaf).copied();
    while let Some(e) = cur {
        if !seen.insert(e.id.as_str()) {
            tracing::warn!(id = %e.id, "cycle in session entry parents; path cut");
            break;
        }
        path.push(e);
        cur = e.parent_id.as_deref().and_then(|p| by_id.get(p).copied());
    }
    path.reverse();
    path
}

fn push_messages(e: &SessionEntry, out: &mut Vec<(String, AgentMessage)>) {
    let msg = match &e.kind {
        EntryKind::Message { message } => message.clone(),
        EntryKind::CustomMessage {
            custom_type,
            content,
            display,
            details,
        } => AgentMessage::Custom(CustomMessage {
            custom_type: custom_type.clone(),
            content: content.clone(),
            display: *display,
            details: details.clone(),
            timestamp: millis(&e.timestamp),
        }),
        EntryKind::BranchSummary { from_id, summary } => {
            AgentMessage::BranchSummary(BranchSummaryMessage {
                summary: summary.clone(),
                from_id: from_id.clone(),
                timestamp: millis(&e.timestamp),
            })
        }
        EntryKind::ModelChange { .. }
        | EntryKind::ThinkingLevelChange { .. }
        | EntryKind::Compaction { .. }
        | EntryKind::Label { .. }
        | EntryKind::SessionInfo { .. }
        | EntryKind::Custom { .. } => return,
    };
    out.push((e.id.clone(), msg));
}

fn millis(ts: &str) -> u64 {
    parse_iso8601(ts).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::UserMessage;

    fn entry(id: &str, parent: Option<&str>, kind: EntryKind) -> SessionEntry {
        SessionEntry {
            id: id.into(),
            parent_id: parent.map(Into::into),
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            kind,
        }
    }

    fn msg(id: &str, parent: Option<&str>, text: &str) -> SessionEntry {
        entry(
            id,
            parent,
            EntryKind::Message {
                message: AgentMessage::User(UserMessage::text(text, 0)),
            },
        )
    }

    fn texts(r: &Rebuilt) -> Vec<String> {
        r.messages
            .iter()
            .map(|(_, m)| match m {
                AgentMessage::User(u) => u.content[0].as_text().unwrap().to_owned(),
                AgentMessage::CompactionSummary(c) => format!("summary:{}", c.summary),
                other => other.role().to_owned(),
            })
            .collect()
    }

    #[test]
    fn active_path_follows_the_last_entry_across_branches() {
        let entries = vec![
            msg("1", None, "a"),
            msg("2", Some("1"), "b"),
            msg("3", Some("1"), "c (branch)"),
            msg("4", Some("3"), "d"),
        ];
        let r = rebuild(&entries);
        assert_eq!(texts(&r), vec!["a", "c (branch)", "d"]);
        assert_eq!(r.leaf.as_deref(), Some("4"));
    }

    #[test]
    fn latest_compaction_replaces_history_before_the_first_kept_entry() {
        let entries = vec![
            msg("1", None, "old"),
            msg("2", Some("1"), "kept"),
            entry(
                "3",
                Some("2"),
                EntryKind::Compaction {
                    summary: "s1".into(),
                    first_kept_entry_id: "1".into(),
                    tokens_before: 1,
                },
            ),
            msg("4", Some("3"), "mid"),
            entry(
                "5",
                Some("4"),
                EntryKind::Compaction {
                    summary: "s2".into(),
                    first_kept_entry_id: "4".into(),
                    tokens_before: 2,
                },
            ),
            msg("6", Some("5"), "new"),
        ];
        let r = rebuild(&entries);
        assert_eq!(texts(&r), vec!["summary:s2", "mid", "new"]);
    }

    #[test]
    fn model_thinking_and_name_are_restored() {
        let entries = vec![
            entry(
                "1",
                None,
                EntryKind::model_change(&ModelRef::new("openai", "m1")),
            ),
            entry(
                "2",
                Some("1"),
                EntryKind::ThinkingLevelChange {
                    thinking_level: ThinkingLevel::Low,
                },
            ),
            entry(
                "3",
                Some("2"),
                EntryKind::SessionInfo {
                    name: Some("demo".into()),
                },
            ),
            entry(
                "4",
                Some("3"),
                EntryKind::model_change(&ModelRef::new("scripted", "default")),
            ),
        ];
        let r = rebuild(&entries);
        assert_eq!(r.model, Some(ModelRef::new("scripted", "default")));
        assert_eq!(r.thinking, Some(ThinkingLevel::Low));
        assert_eq!(r.name.as_deref(), Some("demo"));
        assert!(r.messages.is_empty());
    }

    #[test]
    fn parent_cycle_does_not_hang() {
        let entries = vec![msg("1", Some("2"), "a"), msg("2", Some("1"), "b")];
        assert_eq!(rebuild(&entries).messages.len(), 2);
    }
}
