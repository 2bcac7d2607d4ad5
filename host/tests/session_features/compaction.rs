//! Context compaction: by hand and at the threshold, persisted, with the scripted model and
//! a fake provider.

use baton_host::message::{AgentMessage, UserMessage};
use baton_host::session::{
    CompactionSettings, ItemBody, Phase, SUMMARIZATION_SYSTEM_PROMPT, SessionError,
    SessionEventKind,
};

use crate::support::*;

/// Settings that keep only about `keep` tokens and assume a `window`-token model.
fn small(keep: u64, window: u64, reserve: u64) -> CompactionSettings {
    CompactionSettings {
        keep_recent_tokens: keep,
        default_context_window: window,
        reserve_tokens: reserve,
        ..CompactionSettings::default()
    }
}

fn history(n: usize, chars: usize) -> Vec<AgentMessage> {
    (0..n)
        .map(|i| {
            AgentMessage::User(UserMessage::text(
                format!("old message {i} {}", "x".repeat(chars)),
                1,
            ))
        })
        .collect()
}

fn first_is_summary(messages: &[AgentMessage], summary: &str) -> bool {
    matches!(messages.first(), Some(AgentMessage::CompactionSummary(s)) if s.summary == summary)
}

#[tokio::test]
async fn compacting_by_hand_replaces_the_old_context_with_the_model_summary_and_survives_a_reopen()
{
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![reply("SUMMARY-ONE"), reply("after")]);
    let settings = small(300, 100_000, 1000);
    let m = manager(dir.path(), Some(fake.clone()), settings);
    let (id, s) = open_new(&m, Some(fake_model()));
    s.import_history(history(6, 400)).unwrap();
    let items_before = s.len();
    let outcome = s.compact_now(Some("keep the numbers")).await.unwrap();
    assert!(outcome.tokens_after < outcome.tokens_before);
    assert_eq!(outcome.summary, "SUMMARY-ONE");
    let seen = fake.seen();
    assert_eq!(seen[0].system_prompt, SUMMARIZATION_SYSTEM_PROMPT);
    assert!(seen[0].messages_json.contains("old message 0"));
    assert!(seen[0].messages_json.contains("keep the numbers"));
    // The view keeps every item and shows the summary where it happened.
    let state = s.snapshot().state;
    assert_eq!(state.transcript.len(), items_before + 1);
    assert!(matches!(
        &state.transcript.last().unwrap().body,
        ItemBody::CompactionSummary(c) if c.summary == "SUMMARY-ONE"
    ));
    assert_eq!(state.phase, Phase::Idle);
    assert!(!state.compaction.running);
    // The model context starts at the summary, then the kept tail.
    let context = s.messages();
    assert!(first_is_summary(&context, "SUMMARY-ONE"));
    assert!(context.len() < items_before, "{} messages", context.len());
    s.prompt("next").await.unwrap();
    let next = &fake.seen()[1];
    assert!(next.messages_json.contains("SUMMARY-ONE"));
    assert!(!next.messages_json.contains("old message 0"));
    let kept_len = s.messages().len();
    m.shutdown().await;

    // Reopened from the journal: the projection still starts at the boundary.
    let fake = FakeProvider::new(vec![reply("again")]);
    let m = manager(dir.path(), Some(fake.clone()), settings);
    let s = m.open(&id).unwrap();
    let context = s.messages();
    assert!(first_is_summary(&context, "SUMMARY-ONE"));
    assert_eq!(context.len(), kept_len);
    s.prompt("after reopen").await.unwrap();
    let seen = &fake.seen()[0];
    assert!(seen.messages_json.contains("SUMMARY-ONE"));
    assert!(!seen.messages_json.contains("old message 0"));
    m.shutdown().await;
}

#[tokio::test]
async fn a_turn_that_crosses_the_threshold_is_followed_by_a_compaction_before_the_session_goes_idle()
 {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![reply("answer"), reply("AUTO-SUMMARY")]);
    // A 4000-token window with 1000 reserved: 3000 tokens of context call for compaction.
    let m = manager(dir.path(), Some(fake.clone()), small(200, 4000, 1000));
    let (_, s) = open_new(&m, Some(fake_model()));
    s.import_history(history(8, 2000)).unwrap();
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("one more").unwrap();
    let mut order = Vec::new();
    loop {
        match wait_event(&mut rx, "change", |_| true).await {
            SessionEventKind::Compaction(c) => {
                order.push(if c.running { "running" } else { "done" })
            }
            SessionEventKind::ItemAdded { item }
                if matches!(item.body, ItemBody::CompactionSummary(_)) =>
            {
                order.push("summary");
            }
            SessionEventKind::Phase(Phase::Idle) => {
                order.push("idle");
                break;
            }
            _ => {}
        }
    }
    assert_eq!(order, ["running", "summary", "done", "idle"]);
    run.wait().await.unwrap();
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].system_prompt, SUMMARIZATION_SYSTEM_PROMPT);
    assert!(first_is_summary(&s.messages(), "AUTO-SUMMARY"));
    m.shutdown().await;
}

#[tokio::test]
async fn the_threshold_uses_the_models_own_context_window() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![reply("answer"), reply("WINDOW-SUMMARY")]);
    // The default window (1,000,000) is far away; the model's own (4,000) is not.
    let m = manager_with(
        dir.path(),
        registry_with_window(fake.clone(), 4000),
        small(200, 1_000_000, 1000),
    );
    let (_, s) = open_new(&m, Some(fake_model()));
    s.import_history(history(8, 2000)).unwrap();
    s.prompt("one more").await.unwrap();
    idle(&s).await;
    assert!(first_is_summary(&s.messages(), "WINDOW-SUMMARY"));
    m.shutdown().await;

    // Under the threshold nothing is summarised.
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![reply("answer")]);
    let m = manager_with(
        dir.path(),
        registry_with_window(fake.clone(), 1_000_000),
        small(200, 4000, 1000),
    );
    let (_, s) = open_new(&m, Some(fake_model()));
    s.import_history(history(8, 2000)).unwrap();
    s.prompt("one more").await.unwrap();
    idle(&s).await;
    assert_eq!(fake.seen().len(), 1);
    assert!(!matches!(
        s.messages().first(),
        Some(AgentMessage::CompactionSummary(_))
    ));
    m.shutdown().await;
}

#[tokio::test]
async fn the_scripted_model_summarises_deterministically() {
    let summarise_once = || async {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path(), None, small(20, 100_000, 1000));
        let (_, s) = open_new(&m, None);
        s.prompt("please tell me about the parser").await.unwrap();
        s.prompt("and now the lexer").await.unwrap();
        s.prompt("thanks").await.unwrap();
        let outcome = s.compact_now(None).await.unwrap();
        m.shutdown().await;
        outcome.summary
    };
    let a = summarise_once().await;
    let b = summarise_once().await;
    assert_eq!(a, b);
    assert!(a.contains("please tell me about the parser"), "{a}");
}

#[tokio::test]
async fn a_failed_or_aborted_summary_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let fake = FakeProvider::new(vec![
        vec![Step::Event(baton_host::provider::ProviderEvent::Error(
            "HTTP 500 from the fake".into(),
        ))],
        vec![text("partial"), Step::Wait(gate)],
    ]);
    let m = manager(dir.path(), Some(fake.clone()), small(300, 100_000, 1000));
    let (id, s) = open_new(&m, Some(fake_model()));
    s.import_history(history(6, 400)).unwrap();
    let before = s.messages();
    let items = s.len();
    match s.compact_now(None).await {
        Err(SessionError::Compaction(reason)) => assert!(reason.contains("HTTP 500")),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.messages(), before);
    assert_eq!(s.len(), items);
    assert_eq!(s.snapshot().state.phase, Phase::Idle);
    // Aborted while the model writes: nothing is recorded either.
    let (_, mut rx) = s.subscribe();
    let (compacted, ()) = tokio::join!(s.compact_now(None), async {
        wait_event(
            &mut rx,
            "compaction running",
            |k| matches!(k, SessionEventKind::Compaction(c) if c.running),
        )
        .await;
        // The prompt is refused while the compaction holds the session.
        assert!(matches!(s.start_prompt("now"), Err(SessionError::Busy)));
        s.abort();
    });
    assert!(matches!(compacted, Err(SessionError::CompactionAborted)));
    assert_eq!(s.messages(), before);
    idle(&s).await;
    m.shutdown().await;
    let m = manager(dir.path(), None, small(300, 100_000, 1000));
    let s = m.open(&id).unwrap();
    assert!(!matches!(
        s.messages().first(),
        Some(AgentMessage::CompactionSummary(_))
    ));
    m.shutdown().await;
}

#[tokio::test]
async fn compaction_is_refused_when_there_is_nothing_to_compact_or_it_is_not_offered() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None, CompactionSettings::default());
    let (_, s) = open_new(&m, None);
    s.prompt("hello").await.unwrap();
    assert!(s.snapshot().state.compaction.offered);
    assert!(matches!(
        s.compact_now(None).await,
        Err(SessionError::NothingToCompact)
    ));
    assert_eq!(s.snapshot().state.phase, Phase::Idle);
    m.shutdown().await;
    let off = CompactionSettings {
        enabled: false,
        ..CompactionSettings::default()
    };
    let m = manager(dir.path(), None, off);
    let (_, s) = open_new(&m, None);
    assert!(!s.snapshot().state.compaction.offered);
    assert!(matches!(
        s.compact_now(None).await,
        Err(SessionError::CompactionNotOffered)
    ));
    m.shutdown().await;
}

/// The ids of the session's transcript items, in order.
fn item_ids(s: &baton_host::session::SessionRuntime) -> Vec<String> {
    s.snapshot()
        .state
        .transcript
        .into_iter()
        .map(|item| item.id)
        .collect()
}

#[tokio::test]
async fn compaction_summarises_the_branch_in_memory_whatever_happened_to_the_journal_file() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![reply("SUMMARY-ONE"), reply("SUMMARY-TWO")]);
    let m = manager(dir.path(), Some(fake.clone()), small(300, 100_000, 1000));
    let (id, s) = open_new(&m, Some(fake_model()));
    s.import_history(history(6, 400)).unwrap();
    // Another session's file takes this one's name behind the host's back: the host's own
    // file (its open descriptor) still takes the appends, but the path now reads otherwise.
    let (other, o) = open_new(&m, Some(fake_model()));
    let foreign: Vec<AgentMessage> = (0..6)
        .map(|i| AgentMessage::User(UserMessage::text(format!("foreign {i}"), 1)))
        .collect();
    o.import_history(foreign).unwrap();
    let sessions = dir.path().join("sessions");
    let path = sessions.join(format!("{id}.jsonl"));
    std::fs::rename(sessions.join(format!("{other}.jsonl")), &path).unwrap();
    let live = s.messages();
    let ids = item_ids(&s);

    let outcome = s.compact_now(None).await.unwrap();
    let request = &fake.seen()[0].messages_json;
    assert!(request.contains("old message 0"), "{request}");
    assert!(!request.contains("foreign"), "{request}");
    // The first kept entry is one of this session's, and the context keeps the live tail.
    let kept = ids
        .iter()
        .position(|i| *i == outcome.first_kept_entry_id)
        .expect("the first kept entry is an item of the session");
    let context = s.messages();
    assert!(first_is_summary(&context, "SUMMARY-ONE"));
    assert_eq!(context[1..], live[kept..]);

    // With no file at the path at all, the next compaction needs none either.
    std::fs::remove_file(&path).unwrap();
    s.import_history(history(4, 400)).unwrap();
    let outcome = s.compact_now(None).await.unwrap();
    assert_eq!(outcome.summary, "SUMMARY-TWO");
    let request = &fake.seen()[1].messages_json;
    assert!(
        request.contains("SUMMARY-ONE"),
        "the earlier summary is carried forward"
    );
    assert!(first_is_summary(&s.messages(), "SUMMARY-TWO"));
    m.shutdown().await;
}

#[tokio::test]
async fn identical_messages_in_two_entries_are_summarised_or_kept_by_their_own_entry() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProvider::new(vec![reply("SUMMARY")]);
    // Each filler is 105 estimated tokens and the repeated question 5: keeping 212 tokens
    // keeps the last two fillers and the question's second copy.
    let m = manager(dir.path(), Some(fake.clone()), small(212, 100_000, 1000));
    let (id, s) = open_new(&m, Some(fake_model()));
    let question = || AgentMessage::User(UserMessage::text("same question", 1));
    let mut filler = history(3, 400).into_iter();
    let mut next = || filler.next().unwrap();
    s.import_history([question(), next(), question(), next(), next()])
        .unwrap();
    let ids = item_ids(&s);
    let live = s.messages();
    assert_eq!(live[0], live[2], "two entries hold equal messages");

    let outcome = s.compact_now(None).await.unwrap();
    assert_eq!(
        outcome.first_kept_entry_id, ids[2],
        "the second copy's entry"
    );
    assert_ne!(outcome.first_kept_entry_id, ids[0]);
    let request = &fake.seen()[0].messages_json;
    assert!(
        request.contains("same question"),
        "the first copy is summarised"
    );
    assert!(request.contains("old message 0"), "{request}");
    let context = s.messages();
    assert!(first_is_summary(&context, "SUMMARY"));
    assert_eq!(context[1..], live[2..]);
    m.shutdown().await;

    // The journal rebuilds exactly the live context, summary included.
    let m = manager(dir.path(), None, small(212, 100_000, 1000));
    let reopened = m.open(&id).unwrap();
    assert_eq!(reopened.messages(), context);
    m.shutdown().await;
}

#[tokio::test]
async fn a_compaction_recorded_by_hand_keeps_the_live_tail_from_the_named_entry() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(dir.path(), None, CompactionSettings::default());
    let (id, s) = open_new(&m, None);
    s.import_history(history(4, 10)).unwrap();
    let ids = item_ids(&s);
    let live = s.messages();
    // An id the context does not hold is refused before anything is recorded.
    assert!(matches!(
        s.compact("S", "no-such-entry", 9),
        Err(SessionError::UnknownEntry(e)) if e == "no-such-entry"
    ));
    assert_eq!((s.messages(), s.len()), (live.clone(), 4));

    s.compact("BY-HAND", &ids[2], 9).unwrap();
    let context = s.messages();
    assert!(first_is_summary(&context, "BY-HAND"));
    assert_eq!(context[1..], live[2..]);
    assert_eq!(s.len(), 5, "the view gains the summary item");
    // The summary now starting the context stands for older entries: not a tail to keep.
    let summary_id = item_ids(&s).pop().unwrap();
    assert!(matches!(
        s.compact("S2", &summary_id, 9),
        Err(SessionError::UnknownEntry(_))
    ));
    m.shutdown().await;

    let m = manager(dir.path(), None, CompactionSettings::default());
    assert_eq!(m.open(&id).unwrap().messages(), context);
    m.shutdown().await;
}
