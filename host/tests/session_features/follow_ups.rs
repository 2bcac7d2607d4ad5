//! The follow-up queue and steering that names its turn.

use std::sync::Arc;

use baton_host::message::StopReason;
use baton_host::message::UserContent;
use baton_host::session::{
    CompactionSettings, ItemBody, MAX_QUEUED_FOLLOW_UPS, Phase, SessionError, SessionEventKind,
    TranscriptItem,
};
use tokio::sync::Notify;

use crate::support::*;

fn user_texts(items: &[TranscriptItem]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match &i.body {
            ItemBody::User { content, .. } => Some(
                content
                    .iter()
                    .filter_map(|c| match c {
                        UserContent::Text(t) => Some(t.text.clone()),
                        UserContent::Image(_) => None,
                    })
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}

/// A fake whose first reply waits for `gate`; later replies answer at once.
fn gated() -> (Arc<FakeProvider>, Arc<Notify>) {
    let gate = Arc::new(Notify::new());
    let fake = FakeProvider::new(vec![vec![
        text("working"),
        Step::Wait(Arc::clone(&gate)),
        done(),
    ]]);
    (fake, gate)
}

#[tokio::test]
async fn a_follow_up_queued_during_a_turn_is_sent_when_it_settles_without_an_idle_between() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, gate) = gated();
    let m = manager(
        dir.path(),
        Some(fake.clone()),
        CompactionSettings::default(),
    );
    let (_, s) = open_new(&m, Some(fake_model()));
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("first").unwrap();
    let SessionEventKind::TurnId(Some(first_turn)) = wait_event(&mut rx, "turn id", |k| {
        matches!(k, SessionEventKind::TurnId(Some(_)))
    })
    .await
    else {
        unreachable!()
    };
    assert_eq!(
        s.snapshot().state.turn_id.as_deref(),
        Some(first_turn.as_str())
    );
    let queued = s.follow_up("second").unwrap();
    assert!(!queued.started);
    let also = s.follow_up("third").unwrap();
    assert_eq!(
        s.snapshot()
            .state
            .follow_ups
            .iter()
            .map(|f| f.id.clone())
            .collect::<Vec<_>>(),
        [queued.id.clone(), also.id.clone()]
    );
    gate.notify_one();
    let outcome = run.wait().await.unwrap();
    assert_eq!(outcome.run.stop_reason, StopReason::Stop);
    // Every event from here to idle: the phase never says idle before both follow-ups ran.
    let mut turn_ids = vec![first_turn];
    loop {
        let e = wait_event(&mut rx, "change", |_| true).await;
        match e {
            SessionEventKind::Phase(Phase::Idle) => break,
            SessionEventKind::TurnId(Some(id)) => turn_ids.push(id),
            _ => {}
        }
    }
    let state = s.snapshot().state;
    assert_eq!(user_texts(&state.transcript), ["first", "second", "third"]);
    assert!(state.follow_ups.is_empty());
    assert_eq!(state.turn_id, None);
    assert_eq!(turn_ids.len(), 3, "{turn_ids:?}");
    turn_ids.dedup();
    assert_eq!(turn_ids.len(), 3, "every turn has its own id");
    assert_eq!(fake.seen().len(), 3);
    m.shutdown().await;
}

#[tokio::test]
async fn an_aborted_turn_keeps_the_queue_and_an_idle_follow_up_sends_the_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, _gate) = gated();
    let m = manager(
        dir.path(),
        Some(fake.clone()),
        CompactionSettings::default(),
    );
    let (_, s) = open_new(&m, Some(fake_model()));
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("first").unwrap();
    wait_event(&mut rx, "streaming", |k| {
        matches!(k, SessionEventKind::TextAppended { .. })
    })
    .await;
    let kept = s.follow_up("kept").unwrap();
    assert!(s.abort());
    assert_eq!(
        run.wait().await.unwrap().run.stop_reason,
        StopReason::Aborted
    );
    idle(&s).await;
    let state = s.snapshot().state;
    assert_eq!(state.follow_ups.len(), 1, "abort keeps the queue");
    assert_eq!(state.follow_ups[0].id, kept.id);
    assert_eq!(user_texts(&state.transcript), ["first"]);
    // Idle: a new follow-up starts a turn at once with the oldest text; the new one waits.
    let newer = s.follow_up("newer").unwrap();
    assert!(newer.started);
    assert_eq!(s.snapshot().state.phase, Phase::Turn);
    // "kept" runs, settles normally, and "newer" follows before the session goes idle.
    idle(&s).await;
    assert!(s.snapshot().state.follow_ups.is_empty());
    assert_eq!(
        user_texts(&s.snapshot().state.transcript),
        ["first", "kept", "newer"]
    );
    m.shutdown().await;
}

#[tokio::test]
async fn follow_ups_can_be_edited_removed_and_cleared_and_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, gate) = gated();
    let m = manager(
        dir.path(),
        Some(fake.clone()),
        CompactionSettings::default(),
    );
    let (_, s) = open_new(&m, Some(fake_model()));
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("first").unwrap();
    wait_event(&mut rx, "turn id", |k| {
        matches!(k, SessionEventKind::TurnId(Some(_)))
    })
    .await;
    let a = s.follow_up("a").unwrap();
    let b = s.follow_up("b").unwrap();
    s.edit_follow_up(&a.id, "a2").unwrap();
    assert_eq!(s.follow_ups()[0].text, "a2");
    assert_eq!(s.remove_follow_up(&b.id).unwrap(), "b");
    assert!(matches!(
        s.remove_follow_up(&b.id),
        Err(SessionError::UnknownFollowUp(id)) if id == b.id
    ));
    assert!(matches!(
        s.edit_follow_up("f999", "x"),
        Err(SessionError::UnknownFollowUp(_))
    ));
    for i in 1..MAX_QUEUED_FOLLOW_UPS {
        s.follow_up(format!("n{i}")).unwrap();
    }
    assert!(matches!(
        s.follow_up("one too many"),
        Err(SessionError::FollowUpQueueFull)
    ));
    assert_eq!(s.clear_follow_ups(), MAX_QUEUED_FOLLOW_UPS);
    assert_eq!(s.clear_follow_ups(), 0);
    gate.notify_one();
    run.wait().await.unwrap();
    idle(&s).await;
    assert_eq!(user_texts(&s.snapshot().state.transcript), ["first"]);
    m.shutdown().await;
}

#[tokio::test]
async fn a_steer_naming_an_ended_turn_is_refused_and_one_naming_the_running_turn_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let (fake, gate) = gated();
    let m = manager(
        dir.path(),
        Some(fake.clone()),
        CompactionSettings::default(),
    );
    let (_, s) = open_new(&m, Some(fake_model()));
    let (_, mut rx) = s.subscribe();
    let run = s.start_prompt("first").unwrap();
    let SessionEventKind::TurnId(Some(turn)) = wait_event(&mut rx, "turn id", |k| {
        matches!(k, SessionEventKind::TurnId(Some(_)))
    })
    .await
    else {
        unreachable!()
    };
    assert!(matches!(
        s.steer_turn("late", Some("turn-00000000")),
        Err(SessionError::TurnEnded(id)) if id == "turn-00000000"
    ));
    s.steer_turn("on time", Some(&turn)).unwrap();
    assert_eq!(s.snapshot().state.queued_steer, ["on time"]);
    gate.notify_one();
    run.wait().await.unwrap();
    idle(&s).await;
    // The turn has ended: a steer naming it is refused, never queued or run as a prompt.
    assert!(matches!(
        s.steer_turn("too late", Some(&turn)),
        Err(SessionError::TurnEnded(_))
    ));
    assert!(matches!(s.steer("no turn"), Err(SessionError::NotRunning)));
    let texts = user_texts(&s.snapshot().state.transcript);
    assert!(texts.contains(&"on time".to_owned()), "{texts:?}");
    assert!(!texts.iter().any(|t| t.contains("late")), "{texts:?}");
    m.shutdown().await;
}
