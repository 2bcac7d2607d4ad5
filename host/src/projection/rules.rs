//! The projection's rules over a whole list: the optional [`ContextTransform`], the per-role
//! conversion ([`convert`]) and the pairing repair ([`repair`]) of the module docs (`super`). The
//! incremental projector (`super::incremental`) reuses the per-message conversion and is
//! tested against [`project`].

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::context::ModelContext;
use crate::BoxFuture;
use crate::message::{
    AgentMessage, BashExecutionMessage, Message, StopReason, ToolResultMessage, UserContent,
    UserMessage,
};

/// Put before a compaction summary.
pub const COMPACTION_SUMMARY_PREFIX: &str = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
/// Put after a compaction summary.
pub const COMPACTION_SUMMARY_SUFFIX: &str = "\n</summary>";
/// Put before a branch summary.
pub const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
/// Put after a branch summary. Unlike [`COMPACTION_SUMMARY_SUFFIX`], no newline comes before
/// it: upstream (pi-coding-agent `messages.ts`) closes the tag right after the summary text.
pub const BRANCH_SUMMARY_SUFFIX: &str = "</summary>";
/// Text of the synthetic result for a tool call that has none.
pub const MISSING_RESULT_TEXT: &str = "No result provided";

/// Why a context transform gave up (the projection then uses the untransformed messages).
#[derive(Debug, thiserror::Error)]
#[error("context transform failed: {reason}")]
pub struct TransformError {
    /// What went wrong.
    pub reason: String,
}

/// An optional rich → rich pass before projection (pruning, retrieval, policy).
pub trait ContextTransform: Send + Sync + fmt::Debug {
    /// Returns the messages the model should see. An error makes the caller fall back to the
    /// input unchanged.
    fn transform<'a>(
        &'a self,
        messages: Vec<AgentMessage>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<AgentMessage>, TransformError>>;
}

/// The model-visible text of a bash record.
pub fn bash_execution_to_text(m: &BashExecutionMessage) -> String {
    let mut text = format!("Ran `{}`\n", m.command);
    if m.output.is_empty() {
        text.push_str("(no output)");
    } else {
        text.push_str("```\n");
        text.push_str(&m.output);
        text.push_str("\n```");
    }
    if m.cancelled {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = m.exit_code.filter(|c| *c != 0) {
        text.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    if m.truncated
        && let Some(path) = &m.full_output_path
    {
        text.push_str(&format!("\n\n[Output truncated. Full output: {path}]"));
    }
    text
}

/// Per-role conversion without pairing repair. Takes owned or shared messages
/// (`&[AgentMessage]`, `&[Arc<AgentMessage>]`).
pub fn convert<M: Borrow<AgentMessage>>(messages: &[M]) -> Vec<Message> {
    messages
        .iter()
        .filter_map(|m| convert_one(m.borrow()))
        .collect()
}

/// One message's conversion (`None`: not model-visible).
pub(crate) fn convert_one(message: &AgentMessage) -> Option<Message> {
    match message {
        AgentMessage::User(u) => Some(Message::User(u.clone())),
        AgentMessage::Assistant(a) => Some(Message::Assistant(a.clone())),
        AgentMessage::ToolResult(r) => Some(Message::ToolResult(r.clone())),
        AgentMessage::BashExecution(b) if b.exclude_from_context => None,
        AgentMessage::BashExecution(b) => Some(user_text(bash_execution_to_text(b), b.timestamp)),
        AgentMessage::Custom(c) => Some(Message::User(UserMessage {
            content: c.content.clone(),
            timestamp: c.timestamp,
        })),
        AgentMessage::BranchSummary(s) => Some(user_text(
            format!(
                "{BRANCH_SUMMARY_PREFIX}{}{BRANCH_SUMMARY_SUFFIX}",
                s.summary
            ),
            s.timestamp,
        )),
        AgentMessage::CompactionSummary(s) => Some(user_text(
            format!(
                "{COMPACTION_SUMMARY_PREFIX}{}{COMPACTION_SUMMARY_SUFFIX}",
                s.summary
            ),
            s.timestamp,
        )),
    }
}

fn user_text(text: String, timestamp: u64) -> Message {
    Message::User(UserMessage {
        content: vec![UserContent::text(text)],
        timestamp,
    })
}

/// Makes tool call/result pairing valid (see the module docs for the rules).
pub fn repair(messages: Vec<Message>) -> Vec<Message> {
    let mut slots: Vec<Option<Message>> = messages
        .into_iter()
        .filter(|m| {
            !matches!(m, Message::Assistant(a)
                if matches!(a.stop_reason, StopReason::Error | StopReason::Aborted))
        })
        .map(Some)
        .collect();
    let mut out = Vec::with_capacity(slots.len());
    for i in 0..slots.len() {
        let Some(msg) = slots[i].take() else { continue };
        match msg {
            Message::Assistant(a) => {
                let calls: Vec<_> = a.tool_calls().cloned().collect();
                let timestamp = a.timestamp;
                out.push(Message::Assistant(a));
                // The window where this assistant's results may sit: up to the next assistant.
                let end = (i + 1..slots.len())
                    .find(|&j| matches!(slots[j], Some(Message::Assistant(_))))
                    .unwrap_or(slots.len());
                let mut answered = HashSet::new();
                for call in &calls {
                    if !answered.insert(call.id.as_str()) {
                        // A duplicate id in one message: its first occurrence took the result.
                        out.push(Message::ToolResult(ToolResultMessage::error(
                            call,
                            MISSING_RESULT_TEXT,
                            timestamp,
                        )));
                        continue;
                    }
                    let found = (i + 1..end).find(|&j| {
                        matches!(&slots[j], Some(Message::ToolResult(r)) if r.tool_call_id == call.id)
                    });
                    match found.and_then(|j| slots[j].take()) {
                        Some(result) => out.push(result),
                        None => out.push(Message::ToolResult(ToolResultMessage::error(
                            call,
                            MISSING_RESULT_TEXT,
                            timestamp,
                        ))),
                    }
                }
            }
            // Not claimed by the preceding assistant: an orphan.
            Message::ToolResult(_) => {}
            user @ Message::User(_) => out.push(user),
        }
    }
    out
}

/// Conversion then repair: the whole projection, without a transform. The reference the
/// incremental [`ContextProjector`](super::ContextProjector) is tested against.
pub fn project<M: Borrow<AgentMessage>>(messages: &[M]) -> Vec<Message> {
    repair(convert(messages))
}

/// Runs the optional transform (falling back to `messages` on error or cancellation), then
/// [`project`]s the whole list (O(n): the session's
/// [`ContextProjector`](super::ContextProjector) is the path without a transform). Never
/// fails. Without a transform the shared messages are projected in place; a transform works
/// on owned copies (it may rewrite them).
pub async fn prepare_context(
    transform: Option<&dyn ContextTransform>,
    messages: &[Arc<AgentMessage>],
    cancel: &CancellationToken,
) -> ModelContext {
    let Some(transform) = transform else {
        return project(messages).into();
    };
    let fallback: Vec<AgentMessage> = messages.iter().map(|m| AgentMessage::clone(m)).collect();
    match transform.transform(fallback.clone(), cancel).await {
        Ok(transformed) => project(&transformed).into(),
        Err(error) => {
            tracing::warn!(%error, "context transform failed; using the untransformed transcript");
            project(&fallback).into()
        }
    }
}

/// True when every tool call is immediately followed by its results (call order) and every
/// result answers the call right before it. Used by tests and debug assertions.
pub fn is_well_paired(messages: &[Message]) -> bool {
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant(a) => {
                for call in a.tool_calls() {
                    i += 1;
                    match messages.get(i) {
                        Some(Message::ToolResult(r)) if r.tool_call_id == call.id => {}
                        _ => return false,
                    }
                }
            }
            Message::ToolResult(_) => return false,
            Message::User(_) => {}
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use baton_protocol::{Map, Value};

    use super::*;
    use crate::message::{
        AssistantContent, AssistantMessage, BranchSummaryMessage, CompactionSummaryMessage,
        CustomMessage, TextContent, ToolCall, Usage,
    };

    fn bash(exclude: bool) -> BashExecutionMessage {
        BashExecutionMessage {
            command: "ls -la".into(),
            output: "total 32\ndrwxr-xr-x 5 user staff 160 .".into(),
            exit_code: Some(0),
            cancelled: false,
            truncated: false,
            full_output_path: None,
            timestamp: 1_748_568_000_000,
            exclude_from_context: exclude,
        }
    }

    fn user(text: &str) -> AgentMessage {
        AgentMessage::User(UserMessage::text(text, 1))
    }

    fn assistant(calls: &[&str], stop: StopReason) -> AgentMessage {
        let mut content = vec![AssistantContent::Text(TextContent::new("ok"))];
        for id in calls {
            content.push(AssistantContent::ToolCall(ToolCall::new(
                *id,
                "read",
                Value::Map(Map::new()),
            )));
        }
        AgentMessage::Assistant(AssistantMessage {
            content,
            api: "test".into(),
            provider: "test".into(),
            model: "m".into(),
            response_model: None,
            response_id: None,
            usage: Usage::default(),
            stop_reason: stop,
            error_message: None,
            raw_stop_reason: None,
            timestamp: 2,
        })
    }

    fn result(id: &str) -> AgentMessage {
        AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "read".into(),
            content: vec![UserContent::text(format!("result {id}"))],
            details: None,
            is_error: false,
            timestamp: 3,
        })
    }

    fn only_text(m: &Message) -> &str {
        match m {
            Message::User(u) => u.content[0].as_text().unwrap(),
            other => panic!("expected user text, got {other:?}"),
        }
    }

    fn result_ids(msgs: &[Message]) -> Vec<(String, bool)> {
        msgs.iter()
            .filter_map(|m| match m {
                Message::ToolResult(r) => Some((r.tool_call_id.clone(), r.is_error)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn bash_record_becomes_user_text_with_command_and_fenced_output() {
        let out = project(&[AgentMessage::BashExecution(bash(false))]);
        assert_eq!(out.len(), 1);
        assert_eq!(
            only_text(&out[0]),
            "Ran `ls -la`\n```\ntotal 32\ndrwxr-xr-x 5 user staff 160 .\n```"
        );
        assert_eq!(out[0].timestamp(), 1_748_568_000_000);
    }

    #[test]
    fn bash_record_excluded_from_context_is_dropped() {
        let out = project(&[
            user("a"),
            AgentMessage::BashExecution(bash(true)),
            user("b"),
        ]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn bash_text_states_cancellation_exit_code_and_full_output_path() {
        let mut b = bash(false);
        b.output.clear();
        b.cancelled = true;
        assert_eq!(
            bash_execution_to_text(&b),
            "Ran `ls -la`\n(no output)\n\n(command cancelled)"
        );
        b.cancelled = false;
        b.exit_code = Some(2);
        b.truncated = true;
        b.full_output_path = Some("/tmp/out.log".into());
        assert_eq!(
            bash_execution_to_text(&b),
            "Ran `ls -la`\n(no output)\n\nCommand exited with code 2\n\n[Output truncated. Full output: /tmp/out.log]"
        );
    }

    #[test]
    fn summaries_become_user_text_with_prefix_and_suffix() {
        let out = project(&[
            AgentMessage::CompactionSummary(CompactionSummaryMessage {
                summary: "S1".into(),
                tokens_before: 10,
                timestamp: 1,
            }),
            AgentMessage::BranchSummary(BranchSummaryMessage {
                summary: "S2".into(),
                from_id: Some("e1".into()),
                timestamp: 2,
            }),
        ]);
        assert_eq!(
            only_text(&out[0]),
            format!("{COMPACTION_SUMMARY_PREFIX}S1{COMPACTION_SUMMARY_SUFFIX}")
        );
        assert_eq!(
            only_text(&out[1]),
            format!("{BRANCH_SUMMARY_PREFIX}S2{BRANCH_SUMMARY_SUFFIX}")
        );
    }

    #[test]
    fn a_branch_summary_closes_its_tag_right_after_the_text_and_a_compaction_summary_on_a_new_line()
    {
        let out = project(&[
            AgentMessage::BranchSummary(BranchSummaryMessage {
                summary: "went left".into(),
                from_id: Some("e1".into()),
                timestamp: 1,
            }),
            AgentMessage::CompactionSummary(CompactionSummaryMessage {
                summary: "went right".into(),
                tokens_before: 10,
                timestamp: 2,
            }),
        ]);
        assert_eq!(
            only_text(&out[0]),
            "The following is a summary of a branch that this conversation came back from:\n\n<summary>\nwent left</summary>"
        );
        assert_eq!(
            only_text(&out[1]),
            "The conversation history before this point was compacted into the following summary:\n\n<summary>\nwent right\n</summary>"
        );
    }

    #[test]
    fn custom_content_becomes_user_content() {
        let content = vec![UserContent::text("note")];
        let out = project(&[AgentMessage::Custom(CustomMessage {
            custom_type: "ext.note".into(),
            content: content.clone(),
            display: false,
            details: Some(Value::Bool(true)),
            timestamp: 7,
        })]);
        assert_eq!(
            out,
            vec![Message::User(UserMessage {
                content,
                timestamp: 7
            })]
        );
    }

    #[test]
    fn standard_messages_pass_through_unchanged() {
        let msgs = vec![
            user("hi"),
            assistant(&["c1"], StopReason::ToolUse),
            result("c1"),
        ];
        let out = project(&msgs);
        let back: Vec<AgentMessage> = out.into_iter().map(AgentMessage::from).collect();
        assert_eq!(back, msgs);
    }

    #[test]
    fn projection_never_mutates_the_stored_records() {
        let msgs = vec![
            AgentMessage::BashExecution(bash(false)),
            assistant(&["c1", "c2"], StopReason::ToolUse),
            result("c2"),
            user("later"),
        ];
        let before = msgs.clone();
        let _ = project(&msgs);
        assert_eq!(msgs, before);
    }

    #[test]
    fn tool_call_without_result_gets_a_synthetic_error_result() {
        let out = project(&[assistant(&["c1"], StopReason::ToolUse), user("next")]);
        assert!(is_well_paired(&out));
        assert_eq!(result_ids(&out), vec![("c1".into(), true)]);
        match &out[1] {
            Message::ToolResult(r) => assert_eq!(r.content[0].as_text(), Some(MISSING_RESULT_TEXT)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tool_result_without_call_is_dropped() {
        let out = project(&[user("a"), result("ghost"), user("b")]);
        assert_eq!(out.len(), 2);
        assert!(is_well_paired(&out));
    }

    #[test]
    fn results_are_moved_to_follow_their_call_in_call_order() {
        let out = project(&[
            assistant(&["c1", "c2"], StopReason::ToolUse),
            AgentMessage::BashExecution(bash(false)),
            result("c2"),
            result("c1"),
        ]);
        assert!(is_well_paired(&out));
        assert_eq!(
            result_ids(&out),
            vec![("c1".into(), false), ("c2".into(), false)]
        );
        assert!(
            matches!(out[3], Message::User(_)),
            "the bash text comes after the results"
        );
    }

    #[test]
    fn error_and_aborted_responses_are_not_replayed() {
        let out = project(&[
            user("a"),
            assistant(&["c1"], StopReason::Aborted),
            assistant(&[], StopReason::Error),
            user("b"),
        ]);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|m| matches!(m, Message::User(_))));
    }

    #[test]
    fn projection_is_idempotent_and_always_well_paired_on_generated_transcripts() {
        // A deterministic generator: 2,000 random transcripts over a small alphabet.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for _ in 0..2_000 {
            let len = next(12);
            let mut msgs = Vec::new();
            for _ in 0..len {
                let id = format!("c{}", next(4));
                msgs.push(match next(6) {
                    0 => user("u"),
                    1 => assistant(&[], StopReason::Stop),
                    2 => assistant(&[id.as_str(), "c9"], StopReason::ToolUse),
                    3 => result(&id),
                    4 => AgentMessage::BashExecution(bash(next(2) == 0)),
                    _ => assistant(
                        &[id.as_str()],
                        if next(2) == 0 {
                            StopReason::Aborted
                        } else {
                            StopReason::Length
                        },
                    ),
                });
            }
            let once = project(&msgs);
            assert!(is_well_paired(&once), "{msgs:?} → {once:?}");
            let twice = repair(once.clone());
            assert_eq!(once, twice);
        }
    }

    #[derive(Debug)]
    struct Failing;
    impl ContextTransform for Failing {
        fn transform<'a>(
            &'a self,
            _: Vec<AgentMessage>,
            _: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<Vec<AgentMessage>, TransformError>> {
            Box::pin(async {
                Err(TransformError {
                    reason: "boom".into(),
                })
            })
        }
    }

    #[derive(Debug)]
    struct KeepLast;
    impl ContextTransform for KeepLast {
        fn transform<'a>(
            &'a self,
            mut messages: Vec<AgentMessage>,
            _: &'a CancellationToken,
        ) -> BoxFuture<'a, Result<Vec<AgentMessage>, TransformError>> {
            Box::pin(async move { Ok(messages.split_off(messages.len() - 1)) })
        }
    }

    #[tokio::test]
    async fn failing_transform_falls_back_to_the_untransformed_transcript() {
        let msgs = vec![user("a"), user("b")];
        let shared: Vec<_> = msgs.iter().cloned().map(Arc::new).collect();
        let out = prepare_context(Some(&Failing), &shared, &CancellationToken::new()).await;
        assert_eq!(out, project(&msgs));
    }

    #[tokio::test]
    async fn transform_runs_before_projection() {
        let msgs = vec![user("a"), AgentMessage::BashExecution(bash(false))];
        let shared: Vec<_> = msgs.into_iter().map(Arc::new).collect();
        let out = prepare_context(Some(&KeepLast), &shared, &CancellationToken::new()).await;
        assert_eq!(out.len(), 1);
        assert!(only_text(&out.to_messages()[0]).starts_with("Ran `ls -la`"));
    }
}
