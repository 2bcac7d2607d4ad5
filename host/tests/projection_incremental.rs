//! The incremental projection ([`ContextProjector`]) against the whole-list reference
//! ([`projection::project`]): equal after every append, for random transcripts.

use std::sync::Arc;

use baton_host::message::{
    AgentMessage, AssistantContent, AssistantMessage, BashExecutionMessage, BranchSummaryMessage,
    CompactionSummaryMessage, CustomMessage, MessageRef, StopReason, TextContent, ToolCall,
    ToolResultMessage, Usage, UserContent, UserMessage,
};
use baton_host::projection::{self, ContextProjector, ModelContext};
use baton_protocol::{Map, Value};
use proptest::prelude::*;

fn assistant(calls: &[String], stop: StopReason, timestamp: u64) -> AgentMessage {
    let mut content = vec![AssistantContent::Text(TextContent::new("ok"))];
    for id in calls {
        content.push(AssistantContent::ToolCall(ToolCall::new(
            id.as_str(),
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
        timestamp,
    })
}

fn result(id: &str, is_error: bool, timestamp: u64) -> AgentMessage {
    AgentMessage::ToolResult(ToolResultMessage {
        tool_call_id: id.into(),
        tool_name: "read".into(),
        content: vec![UserContent::text(format!("result {id} at {timestamp}"))],
        details: None,
        is_error,
        timestamp,
    })
}

fn bash(exclude: bool, timestamp: u64) -> AgentMessage {
    AgentMessage::BashExecution(BashExecutionMessage {
        command: "ls".into(),
        output: format!("out {timestamp}"),
        exit_code: Some(1),
        cancelled: false,
        truncated: false,
        full_output_path: None,
        timestamp,
        exclude_from_context: exclude,
    })
}

/// Ids from a small pool, so calls repeat, results answer calls of other turns, and some
/// results answer nothing.
fn call_id() -> impl Strategy<Value = String> {
    (0u8..5).prop_map(|n| format!("c{n}"))
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        Just(StopReason::Stop),
        Just(StopReason::ToolUse),
        Just(StopReason::Length),
        Just(StopReason::Error),
        Just(StopReason::Aborted),
    ]
}

/// One message of any kind; `t` makes every message distinguishable.
fn message() -> impl Strategy<Value = AgentMessage> {
    (
        0u8..9,
        prop::collection::vec(call_id(), 0..4),
        stop_reason(),
        call_id(),
        any::<bool>(),
        0u64..1_000_000,
    )
        .prop_map(|(kind, calls, stop, id, flag, t)| match kind {
            0 => AgentMessage::User(UserMessage::text(format!("u{t}"), t)),
            1 | 2 => assistant(&calls, stop, t),
            3 | 4 => result(&id, flag, t),
            5 => bash(flag, t),
            6 => AgentMessage::Custom(CustomMessage {
                custom_type: "ext.note".into(),
                content: vec![UserContent::text(format!("note {t}"))],
                display: flag,
                details: None,
                timestamp: t,
            }),
            7 => AgentMessage::CompactionSummary(CompactionSummaryMessage {
                summary: format!("s{t}"),
                tokens_before: t,
                timestamp: t,
            }),
            _ => AgentMessage::BranchSummary(BranchSummaryMessage {
                summary: format!("b{t}"),
                from_id: None,
                timestamp: t,
            }),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn appending_one_by_one_equals_the_whole_list_projection_at_every_step(
        messages in prop::collection::vec(message(), 0..40)
    ) {
        let mut projector = ContextProjector::new();
        let mut shared = Vec::new();
        for m in &messages {
            let m = Arc::new(m.clone());
            projector.push(&m);
            shared.push(m);
            let reference = projection::project(&shared);
            prop_assert_eq!(projector.context().to_messages(), reference.clone());
            prop_assert!(projection::is_well_paired(&reference));
        }
        let rebuilt = ContextProjector::from_messages(&shared);
        prop_assert_eq!(rebuilt.context(), projector.context());
    }

    #[test]
    fn a_context_handed_out_never_changes_when_later_messages_are_appended(
        messages in prop::collection::vec(message(), 1..30),
        cut in 0usize..30,
    ) {
        let cut = cut % messages.len();
        let mut projector = ContextProjector::new();
        for m in &messages[..cut] {
            projector.push(&Arc::new(m.clone()));
        }
        let snapshot: ModelContext = projector.context().clone();
        let before = snapshot.to_messages();
        for m in &messages[cut..] {
            projector.push(&Arc::new(m.clone()));
        }
        prop_assert_eq!(snapshot.to_messages(), before);
        prop_assert_eq!(projector.context().to_messages(), projection::project(&messages));
    }
}

#[test]
fn user_assistant_and_tool_result_messages_are_shared_with_the_transcript_not_copied() {
    let transcript: Vec<Arc<AgentMessage>> = vec![
        Arc::new(AgentMessage::User(UserMessage::text("hi", 1))),
        Arc::new(assistant(&["c1".into()], StopReason::ToolUse, 2)),
        Arc::new(result("c1", false, 3)),
    ];
    let projector = ContextProjector::from_messages(&transcript);
    let context = projector.context();
    assert_eq!(context.len(), 3);
    for (m, stored) in context.iter().zip(&transcript) {
        let same = match (m, &**stored) {
            (MessageRef::User(a), AgentMessage::User(b)) => std::ptr::eq(a, b),
            (MessageRef::Assistant(a), AgentMessage::Assistant(b)) => std::ptr::eq(a, b),
            (MessageRef::ToolResult(a), AgentMessage::ToolResult(b)) => std::ptr::eq(a, b),
            _ => false,
        };
        assert!(same, "{m:?} is not the stored allocation");
    }
}

#[test]
fn a_result_arriving_after_a_user_message_moves_up_to_its_call_and_replaces_the_synthetic_one() {
    let mut projector = ContextProjector::new();
    let push = |p: &mut ContextProjector, m: AgentMessage| p.push(&Arc::new(m));
    push(
        &mut projector,
        assistant(&["a".into(), "b".into()], StopReason::ToolUse, 10),
    );
    push(
        &mut projector,
        AgentMessage::User(UserMessage::text("steer", 11)),
    );
    let roles = |c: &ModelContext| -> Vec<(String, bool)> {
        c.iter()
            .map(|m| match m {
                MessageRef::User(_) => ("user".to_owned(), false),
                MessageRef::Assistant(_) => ("assistant".to_owned(), false),
                MessageRef::ToolResult(r) => (r.tool_call_id.clone(), r.is_error),
            })
            .collect()
    };
    let expect = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
        v.iter().map(|(s, e)| ((*s).to_owned(), *e)).collect()
    };
    assert_eq!(
        roles(projector.context()),
        expect(&[
            ("assistant", false),
            ("a", true),
            ("b", true),
            ("user", false)
        ])
    );
    push(&mut projector, result("b", false, 12));
    push(&mut projector, result("b", false, 13));
    assert_eq!(
        roles(projector.context()),
        expect(&[
            ("assistant", false),
            ("a", true),
            ("b", false),
            ("user", false)
        ])
    );
    match projector.context().get(2) {
        Some(MessageRef::ToolResult(r)) => assert_eq!(r.timestamp, 12, "the first result wins"),
        other => panic!("{other:?}"),
    }
    // A later replayed assistant closes the window: a late result for `a` is an orphan.
    push(&mut projector, assistant(&[], StopReason::Stop, 14));
    push(&mut projector, result("a", false, 15));
    assert_eq!(projector.context().len(), 5);
}

#[test]
fn the_context_serialises_exactly_like_the_owned_messages() {
    let transcript: Vec<Arc<AgentMessage>> = vec![
        Arc::new(AgentMessage::User(UserMessage::text("hi", 1))),
        Arc::new(bash(false, 2)),
        Arc::new(assistant(&["c1".into()], StopReason::ToolUse, 3)),
    ];
    let projector = ContextProjector::from_messages(&transcript);
    let owned = projection::project(&transcript);
    assert_eq!(
        serde_json::to_string(projector.context()).unwrap(),
        serde_json::to_string(&owned).unwrap()
    );
}
