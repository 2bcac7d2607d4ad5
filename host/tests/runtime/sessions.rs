//! Live sessions: busy, steering, user commands, persistence and resume, the published view.

use std::path::Path;
use std::sync::Arc;

use baton_host::message::{AgentMessage, StopReason};
use baton_host::provider::ModelRegistry;
use baton_host::session::SessionEvent;
use baton_host::session::{
    AssistantStatus, CreateOptions, ItemBody, Phase, SessionError, SessionEventKind,
    SessionManager, SessionRuntime, ToolStatus,
};
use baton_host::{ModelRef, ThinkingLevel};
use tokio::sync::{Notify, broadcast};

use crate::common::{host_config, manual_clock, scripted_and};
use crate::support::*;

fn registry(fake: Option<Arc<FakeProvider>>) -> ModelRegistry {
    scripted_and(fake.map(|f| f as _))
}

fn manager(dir: &Path, fake: Option<Arc<FakeProvider>>) -> SessionManager {
    SessionManager::new(host_config(dir, dir), registry(fake), manual_clock()).unwrap()
}

fn fake_model() -> Option<ModelRef> {
    Some(ModelRef::new("fake", "fake-model"))
}

fn open_new(m: &SessionManager, model: Option<ModelRef>) -> SessionRuntime {
    let id = m
        .create(CreateOptions {
            name: Some("t".into()),
            model,
            ..CreateOptions::default()
        })
        .unwrap();
    m.open(&id).unwrap()
}

/// Waits until the session has streamed some text (the model call is under way).
async fn wait_streaming(rx: &mut broadcast::Receiver<SessionEvent>) {
    loop {
        if let SessionEventKind::TextAppended { .. } = rx.recv().await.unwrap().kind {
            return;
        }
    }
}

#[tokio::test]
async fn scripted_conversation_runs_a_tool_and_answers_from_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None);
    let s = open_new(&m, None);
    let out = s.prompt("please run `echo hi`").await.unwrap();
    assert_eq!(out.run.stop_reason, StopReason::Stop);
    assert_eq!(out.run.turns, 2);
    let state = s.snapshot().state;
    let roles: Vec<String> = state
        .transcript
        .iter()
        .map(|i| match &i.body {
            ItemBody::User { .. } => "user".into(),
            ItemBody::Assistant { status, .. } => format!("assistant:{status:?}"),
            ItemBody::Tool {
                status, content, ..
            } => format!("tool:{status:?}:{}", content[0].as_text().unwrap()),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        roles,
        vec![
            "user",
            "assistant:Complete",
            "tool:Complete:hi",
            "assistant:Complete"
        ]
    );
    let ItemBody::Assistant { content, .. } = &state.transcript[3].body else {
        panic!()
    };
    assert!(matches!(
        &content[0],
        baton_host::message::AssistantContent::Thinking(_)
    ));
    assert_eq!(state.phase, Phase::Idle);
}

#[tokio::test]
async fn scripted_conversation_is_identical_across_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        manager(&dir.path().join("a"), None),
        manager(&dir.path().join("b"), None),
    );
    let (sa, sb) = (open_new(&a, None), open_new(&b, None));
    sa.prompt("run `echo same`").await.unwrap();
    sb.prompt("run `echo same`").await.unwrap();
    assert_eq!(sa.messages(), sb.messages());
}

#[tokio::test]
async fn prompt_while_a_turn_runs_is_refused_busy_not_queued() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![vec![text("thinking..."), Step::Hang]]);
    let m = manager(dir.path(), Some(fake.clone()));
    let s = open_new(&m, fake_model());
    let (_, mut rx) = s.subscribe();
    let first = s.start_prompt("one").unwrap();
    wait_streaming(&mut rx).await;
    assert!(matches!(s.start_prompt("two"), Err(SessionError::Busy)));
    assert!(s.abort());
    let out = first.wait().await.unwrap();
    assert_eq!(out.run.stop_reason, StopReason::Aborted);
    assert_eq!(
        fake.calls(),
        1,
        "the refused prompt never reached the model"
    );
    let users = s
        .messages()
        .iter()
        .filter(|m| matches!(m, AgentMessage::User(_)))
        .count();
    assert_eq!(users, 1);
}

#[tokio::test]
async fn steer_while_idle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None);
    let s = open_new(&m, None);
    assert!(matches!(s.steer("x"), Err(SessionError::NotRunning)));
}

#[tokio::test]
async fn steering_during_a_turn_is_delivered_at_the_next_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Notify::new());
    let fake = FakeProvider::new(vec![
        vec![text("a"), Step::Wait(gate.clone()), done(StopReason::Stop)],
        vec![text("b"), done(StopReason::Stop)],
    ]);
    let m = manager(dir.path(), Some(fake.clone()));
    let s = open_new(&m, fake_model());
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("start").unwrap();
    wait_streaming(&mut rx).await;
    s.steer("also this").unwrap();
    assert_eq!(
        s.snapshot().state.queued_steer,
        vec!["also this".to_string()]
    );
    gate.notify_one();
    let out = run.wait().await.unwrap();
    assert_eq!(out.run.turns, 2);
    assert!(out.dropped_steering.is_empty());
    assert_eq!(
        model_roles(&fake.request(1).messages),
        vec!["user", "assistant", "user"]
    );
    assert!(s.snapshot().state.queued_steer.is_empty());
}

#[tokio::test]
async fn user_bash_while_idle_is_recorded_and_seen_by_the_next_model_call() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![vec![text("ok"), done(StopReason::Stop)]]);
    let m = manager(dir.path(), Some(fake.clone()));
    let s = open_new(&m, fake_model());
    let b = s.bash("echo from-user", false).await.unwrap();
    assert!(!b.deferred);
    assert_eq!(b.message.output, "from-user");
    assert_eq!(b.message.exit_code, Some(0));
    s.bash("echo secret", true).await.unwrap();
    s.prompt("what did I run?").await.unwrap();
    let seen: Vec<String> = fake
        .request(0)
        .messages
        .iter()
        .filter_map(|m| match m {
            baton_host::message::MessageRef::User(u) => u.content[0].as_text().map(str::to_owned),
            _ => None,
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            "Ran `echo from-user`\n```\nfrom-user\n```".to_string(),
            "what did I run?".into()
        ]
    );
    assert_eq!(
        roles(&s.messages()),
        vec!["bashExecution", "bashExecution", "user", "assistant"]
    );
}

#[tokio::test]
async fn user_bash_during_a_turn_is_inserted_after_the_turn_settles() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Notify::new());
    let fake = FakeProvider::new(vec![
        vec![
            text("calling"),
            call("c1", "bash", r#"{"command":"echo tool"}"#),
            Step::Wait(gate.clone()),
            done(StopReason::ToolUse),
        ],
        vec![text("done"), done(StopReason::Stop)],
    ]);
    let m = manager(dir.path(), Some(fake));
    let s = open_new(&m, fake_model());
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("go").unwrap();
    wait_streaming(&mut rx).await;
    let b = s.bash("echo user", false).await.unwrap();
    assert!(b.deferred);
    gate.notify_one();
    run.wait().await.unwrap();
    assert_eq!(
        roles(&s.messages()),
        vec![
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "bashExecution"
        ]
    );
}

#[tokio::test]
async fn session_reopened_from_disk_has_the_same_transcript_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let (id, messages, transcript) = {
        let m = manager(dir.path(), None);
        let s = open_new(&m, None);
        s.set_thinking(ThinkingLevel::High).unwrap();
        s.prompt("run `echo persisted`").await.unwrap();
        s.bash("echo extra", false).await.unwrap();
        let snap = s.snapshot();
        m.shutdown().await;
        (s.id().to_owned(), s.messages(), snap.state.transcript)
    };
    let m = manager(dir.path(), None);
    let s = m.open(&id).unwrap();
    assert_eq!(s.messages(), messages);
    let state = s.snapshot().state;
    assert_eq!(state.transcript, transcript);
    assert_eq!(state.thinking_level, ThinkingLevel::High);
    assert_eq!(state.model, ModelRef::scripted());
    // The resumed session keeps working.
    s.prompt("hello again").await.unwrap();
    assert_eq!(s.messages().len(), messages.len() + 2);
}

#[tokio::test]
async fn torn_last_line_is_skipped_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (id, messages) = {
        let m = manager(dir.path(), None);
        let s = open_new(&m, None);
        s.prompt("hello").await.unwrap();
        m.shutdown().await;
        (s.id().to_owned(), s.messages())
    };
    let path = dir.path().join("sessions").join(format!("{id}.jsonl"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(
        br#"{"id":"000000ff","parentId":"00000004","timestamp":"2025-05-30T01:2"#,
    );
    std::fs::write(&path, &bytes).unwrap();
    let m = manager(dir.path(), None);
    let s = m.open(&id).unwrap();
    assert_eq!(s.messages(), messages);
    s.prompt("still works").await.unwrap();
    m.shutdown().await;
    let m = manager(dir.path(), None);
    assert_eq!(m.open(&id).unwrap().messages().len(), messages.len() + 2);
}

#[tokio::test]
async fn subscriber_rebuilds_the_final_state_from_snapshot_plus_events() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None);
    let s = open_new(&m, None);
    let (snap, mut rx) = s.subscribe();
    let mut state = snap.state;
    let mut seq = snap.seq;
    s.prompt("run `printf 'a\\nb'` please").await.unwrap();
    let mut appends = 0;
    while let Ok(ev) = rx.try_recv() {
        assert_eq!(ev.seq, seq + 1, "no gaps");
        seq = ev.seq;
        if matches!(ev.kind, SessionEventKind::TextAppended { .. }) {
            appends += 1;
        }
        state.apply(&ev.kind);
    }
    assert!(appends > 3, "text streamed as appends ({appends})");
    let final_snap = s.snapshot();
    assert_eq!(final_snap.seq, seq);
    assert_eq!(state, final_snap.state);
    let tool = state
        .transcript
        .iter()
        .find(|i| matches!(i.body, ItemBody::Tool { .. }))
        .unwrap();
    let ItemBody::Tool {
        status, content, ..
    } = &tool.body
    else {
        panic!()
    };
    assert_eq!(*status, ToolStatus::Complete);
    assert_eq!(content[0].as_text(), Some("a\nb"));
}

#[tokio::test]
async fn streaming_item_is_visible_before_it_settles() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Notify::new());
    let fake = FakeProvider::new(vec![vec![
        text("half"),
        Step::Wait(gate.clone()),
        done(StopReason::Stop),
    ]]);
    let m = manager(dir.path(), Some(fake));
    let s = open_new(&m, fake_model());
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("go").unwrap();
    loop {
        if let SessionEventKind::TextAppended { .. } = rx.recv().await.unwrap().kind {
            break;
        }
    }
    let state = s.snapshot().state;
    let ItemBody::Assistant { status, .. } = &state.transcript.last().unwrap().body else {
        panic!()
    };
    assert_eq!(*status, AssistantStatus::Streaming);
    assert_eq!(state.phase, Phase::Turn);
    gate.notify_one();
    run.wait().await.unwrap();
    let state = s.snapshot().state;
    let ItemBody::Assistant {
        status,
        stop_reason,
        ..
    } = &state.transcript.last().unwrap().body
    else {
        panic!()
    };
    assert_eq!(
        (*status, *stop_reason),
        (AssistantStatus::Complete, Some(StopReason::Stop))
    );
}

#[tokio::test]
async fn model_changes_are_validated_refused_while_busy_and_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![vec![Step::Hang]]);
    let m = manager(dir.path(), Some(fake));
    let s = open_new(&m, None);
    assert!(matches!(
        s.set_model(ModelRef::new("nope", "x")),
        Err(SessionError::UnknownModel(_))
    ));
    s.set_model(ModelRef::new("fake", "fake-model")).unwrap();
    let run = s.start_prompt("go").unwrap();
    assert!(matches!(
        s.set_model(ModelRef::scripted()),
        Err(SessionError::Busy)
    ));
    s.abort();
    run.wait().await.unwrap();
    let id = s.id().to_owned();
    m.shutdown().await;
    let m2 = manager(dir.path(), Some(FakeProvider::new(vec![])));
    assert_eq!(
        m2.open(&id).unwrap().snapshot().state.model,
        ModelRef::new("fake", "fake-model")
    );
}

#[tokio::test]
async fn directory_lists_created_sessions_and_remove_deletes_them() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None);
    let a = m
        .create(CreateOptions {
            name: Some("alpha".into()),
            ..CreateOptions::default()
        })
        .unwrap();
    let b = m.create(CreateOptions::default()).unwrap();
    let list = m.list().unwrap();
    assert_eq!(list.len(), 2);
    let alpha = list.iter().find(|s| s.id == a).unwrap();
    assert_eq!(alpha.name.as_deref(), Some("alpha"));
    assert_eq!(alpha.phase, Phase::Idle);
    assert_eq!(alpha.cwd, dir.path().display().to_string());
    m.remove(&b).await.unwrap();
    assert_eq!(m.list().unwrap().len(), 1);
    assert!(matches!(m.open(&b), Err(SessionError::UnknownSession(_))));
    assert!(matches!(
        m.open("../../etc/passwd"),
        Err(SessionError::UnknownSession(_))
    ));
}

#[tokio::test]
async fn create_rejects_a_missing_working_directory_and_unknown_models() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None);
    let bad_cwd = CreateOptions {
        cwd: Some(dir.path().join("missing")),
        ..CreateOptions::default()
    };
    assert!(matches!(m.create(bad_cwd), Err(SessionError::BadCwd(_))));
    let bad_model = CreateOptions {
        model: Some(ModelRef::new("x", "y")),
        ..CreateOptions::default()
    };
    assert!(matches!(
        m.create(bad_model),
        Err(SessionError::UnknownModel(_))
    ));
}

#[tokio::test]
async fn steering_queue_is_bounded_and_undelivered_steering_is_reported_after_abort() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![vec![text("busy"), Step::Hang]]);
    let m = manager(dir.path(), Some(fake));
    let s = open_new(&m, fake_model());
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("go").unwrap();
    wait_streaming(&mut rx).await;
    for i in 0..baton_host::session::MAX_QUEUED_STEER {
        s.steer(format!("s{i}")).unwrap();
    }
    assert!(matches!(
        s.steer("one too many"),
        Err(SessionError::SteerQueueFull)
    ));
    s.abort();
    let out = run.wait().await.unwrap();
    assert_eq!(out.run.stop_reason, StopReason::Aborted);
    assert_eq!(
        out.dropped_steering.len(),
        baton_host::session::MAX_QUEUED_STEER
    );
    assert!(s.snapshot().state.queued_steer.is_empty());
    assert!(matches!(s.steer("late"), Err(SessionError::NotRunning)));
}

/// The `confinement` of a new session (runtime and published) of a manager in `dir` whose
/// bash config has `confine`.
fn confinement_of(dir: &Path, confine: bool) -> (baton_host::session::ToolConfinement, String) {
    std::fs::create_dir_all(dir).unwrap();
    let mut config = host_config(dir, dir);
    config.session.bash.confine = confine;
    let m = SessionManager::new(config, registry(None), manual_clock()).unwrap();
    let s = open_new(&m, None);
    let published = baton_host::service::session_state_value(&s.snapshot().state).unwrap();
    let field = published.as_map().unwrap().get("confinement").unwrap();
    (s.snapshot().state.confinement, field.to_json())
}

#[tokio::test]
async fn the_state_says_whether_the_tools_are_confined() {
    let dir = tempfile::tempdir().unwrap();
    let (unconfined, json) = confinement_of(&dir.path().join("off"), false);
    assert!(!unconfined.active);
    assert_eq!(unconfined.detail, "disabled");
    assert_eq!(json, r#"{"active":false,"detail":"disabled"}"#);

    // Confined: what the kernel provides (Landlock where it has it).
    let expected = baton_host::tool::confinement_status(&baton_host::tool::BashConfig::default());
    let (confined, json) = confinement_of(&dir.path().join("on"), true);
    assert_eq!(confined.active, expected.is_active());
    assert_eq!(confined.detail, expected.to_string());
    assert_ne!(confined.detail, "disabled");
    if confined.active {
        assert!(
            confined.detail.starts_with("landlock (ABI "),
            "{}",
            confined.detail
        );
    } else {
        assert!(
            confined.detail.starts_with("unavailable ("),
            "{}",
            confined.detail
        );
    }
    let detail = baton_protocol::Value::from(confined.detail.as_str()).to_json();
    assert_eq!(
        json,
        format!(r#"{{"active":{},"detail":{detail}}}"#, confined.active)
    );
}

#[tokio::test]
async fn state_converts_to_a_protocol_value_with_the_documented_keys() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None);
    let s = open_new(&m, None);
    s.prompt("run `echo v`").await.unwrap();
    let v = baton_host::to_protocol_value(&s.snapshot().state).unwrap();
    let map = v.as_map().unwrap();
    let keys: Vec<&str> = map.keys().collect();
    assert_eq!(
        keys,
        vec![
            "confinement",
            "phase",
            "model",
            "thinkingLevel",
            "transcript",
            "queuedSteer",
            "turnId",
            "followUps",
            "attached",
            "compaction"
        ]
    );
    assert_eq!(map.get("phase").unwrap().as_str(), Some("idle"));
    let items = map.get("transcript").unwrap().as_array().unwrap();
    let roles: Vec<&str> = items
        .iter()
        .map(|i| i.as_map().unwrap().get("role").unwrap().as_str().unwrap())
        .collect();
    assert_eq!(roles, vec!["user", "assistant", "tool", "assistant"]);
    let meta = baton_host::to_protocol_value(&s.meta()).unwrap();
    assert_eq!(
        meta.as_map().unwrap().get("name").unwrap().as_str(),
        Some("t")
    );
}
