//! The view model as a person meets it: rendered into ratatui's `TestBackend` and compared
//! with reviewed snapshots (`snapshots/`), and key presses turned into actions.

use std::time::{Duration, Instant};

use baton_protocol::Value;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::history::History;
use super::model::{Action, Connection, Model, Outcome, Request};
use super::state::SessionState;

/// A fixed start for the test's clock (the views take time as an argument).
fn t0() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn state(json: &str) -> Value {
    Value::from_json(json).unwrap()
}

fn model(now: Instant) -> Model {
    Model::new(
        "0f3c9a52-6d1e-4b7a-9c2d-5e8f1a2b3c4d",
        "demo",
        History::load(None),
        now,
    )
}

fn draw(m: &Model, v: &Value, now: Instant, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    let s = SessionState::new(v);
    t.draw(|f| m.render(f, &s, now)).unwrap();
    format!("{}", t.backend())
}

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn typed(m: &mut Model, s: &Value, text: &str, now: Instant) {
    let st = SessionState::new(s);
    for c in text.chars() {
        assert_eq!(m.key(&st, key(KeyCode::Char(c)), now), Action::None);
    }
}

fn enter(m: &mut Model, s: &Value, now: Instant) -> Action {
    m.key(&SessionState::new(s), key(KeyCode::Enter), now)
}

const IDLE_TRANSCRIPT: &str = r#"{
  "phase": "idle", "model": "scripted/default", "thinkingLevel": "off", "queuedSteer": [],
  "transcript": [
    {"id": "u1", "role": "user", "content": [{"type": "text", "text": "run `ls -1`"}]},
    {"id": "a1", "role": "assistant", "status": "complete", "content": [
      {"type": "thinking", "thinking": "The user asked me to run `ls -1`."},
      {"type": "text", "text": "Running `ls -1`."},
      {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls -1"}}],
      "usage": {"totalTokens": 1234, "cost": {"total": 0.0021}}},
    {"id": "t1", "role": "tool", "status": "complete", "toolName": "bash", "isError": false,
     "content": [{"type": "text", "text": "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"}]},
    {"id": "a2", "role": "assistant", "status": "complete", "content": [
      {"type": "text", "text": "Here is the result of **bash**:\n```\na\nb\n```\n- eleven files"}]}
  ]
}"#;

#[test]
fn an_idle_session_shows_each_kind_of_item_styled_apart_and_a_status_line() {
    let now = t0();
    let m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    insta::assert_snapshot!(draw(&m, &v, now, 80, 30));
}

#[test]
fn ctrl_o_expands_long_tool_output() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    assert!(draw(&m, &v, now, 80, 40).contains("3 more lines (Ctrl-O expands)"));
    m.key(&SessionState::new(&v), ctrl('o'), now);
    let shown = draw(&m, &v, now, 80, 40);
    assert!(!shown.contains("more lines"), "{shown}");
    assert!(shown.contains("│ k"), "{shown}");
}

const RUNNING: &str = r#"{
  "phase": "turn", "model": "scripted/default", "thinkingLevel": "high", "turnId": "t3",
  "queuedSteer": ["go left"],
  "followUps": [{"id": "f1", "text": "then run the tests"}],
  "attached": [{"attachmentId": 1, "identity": "uid 1000 (alice)"}, {"attachmentId": 2, "identity": "bob"}],
  "transcript": [
    {"id": "u1", "role": "user", "content": [{"type": "text", "text": "run `sleep 8`"}]},
    {"id": "a1", "role": "assistant", "status": "complete", "content": [
      {"type": "text", "text": "Running `sleep 8`."},
      {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "sleep 8"}}]},
    {"id": "t1", "role": "tool", "status": "running", "toolName": "bash", "content": []}
  ]
}"#;

#[test]
fn a_running_turn_shows_activity_the_queues_and_who_else_is_here() {
    let start = t0();
    let mut m = model(start);
    let v = state(RUNNING);
    m.observe(&SessionState::new(&v), start);
    let later = start + Duration::from_millis(12_300);
    insta::assert_snapshot!(draw(&m, &v, later, 90, 14));
}

#[test]
fn a_lost_connection_shows_the_reconnect_countdown_and_in_flight_requests_end_unknown() {
    let now = t0();
    let mut m = model(now);
    let v = state(RUNNING);
    let s = SessionState::new(&v);
    typed(&mut m, &v, "/steer stop", now);
    let Action::Send { ticket, .. } = enter(&mut m, &v, now) else {
        panic!("the steer is sent");
    };
    m.set_connection(
        &s,
        Connection::Reconnecting {
            attempt: 3,
            reason: "Byte transport closed".into(),
            retry_at: Some(now + Duration::from_millis(2_500)),
        },
    );
    m.finished(&s, ticket, Outcome::Unknown);
    insta::assert_snapshot!(draw(&m, &v, now + Duration::from_millis(1_000), 90, 14));
    m.set_connection(&s, Connection::Connected);
    let shown = draw(&m, &v, now, 90, 14);
    assert!(
        shown.contains("reconnected; the session is live again"),
        "{shown}"
    );
    assert!(shown.contains("● connected"), "{shown}");
}

#[test]
fn slash_completion_lists_candidates_and_tab_cycles_them() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    typed(&mut m, &v, "/thinking m", now);
    m.key(&SessionState::new(&v), key(KeyCode::Tab), now);
    insta::assert_snapshot!(draw(&m, &v, now, 60, 12));
    m.key(&SessionState::new(&v), key(KeyCode::Tab), now);
    assert_eq!(m.input(), "/thinking minimal");
    m.key(&SessionState::new(&v), key(KeyCode::Tab), now);
    assert_eq!(m.input(), "/thinking medium");
}

#[test]
fn help_lists_commands_and_keys_and_hides_compact_unless_offered() {
    let now = t0();
    let mut m = model(now);
    let v = state(r#"{"phase":"idle","transcript":[]}"#);
    typed(&mut m, &v, "/help", now);
    assert_eq!(enter(&mut m, &v, now), Action::None);
    let shown = draw(&m, &v, now, 120, 20);
    assert!(shown.contains("/steer TEXT"), "{shown}");
    assert!(shown.contains("Ctrl-D detach"), "{shown}");
    assert!(!shown.contains("/compact"), "{shown}");
}

#[test]
fn enter_sends_a_prompt_while_idle_and_a_steer_naming_the_turn_while_running() {
    let now = t0();
    let mut m = model(now);
    let idle = state(IDLE_TRANSCRIPT);
    typed(&mut m, &idle, "hello", now);
    assert!(matches!(
        enter(&mut m, &idle, now),
        Action::Send { request: Request::Prompt(t), .. } if t == "hello"
    ));
    let running = state(RUNNING);
    typed(&mut m, &running, "go right", now);
    let Action::Send { ticket, request } = enter(&mut m, &running, now) else {
        panic!("a steer is sent");
    };
    assert_eq!(
        request,
        Request::Steer {
            text: "go right".into(),
            turn: Some(Value::from("t3"))
        }
    );
    assert_eq!(
        super::call_of(&request).to_json(),
        r#"{"serviceId":"pi.session","member":"steer","args":["go right",{"turnId":"t3"}]}"#
    );
    m.finished(
        &SessionState::new(&running),
        ticket,
        Outcome::Ok(Value::Null),
    );
    let shown = draw(&m, &running, now, 120, 20);
    assert!(shown.contains("✓ steer for turn t3 queued"), "{shown}");
}

#[test]
fn a_steer_the_host_refuses_goes_back_into_an_empty_input_and_never_over_new_text() {
    let now = t0();
    let mut m = model(now);
    let running = state(RUNNING);
    let s = SessionState::new(&running);
    typed(&mut m, &running, "one more thing", now);
    let Action::Send { ticket, .. } = enter(&mut m, &running, now) else {
        panic!("a steer is sent");
    };
    assert_eq!(m.input(), "");
    m.finished(
        &s,
        ticket,
        Outcome::Failed("invalid_request: Turn t3 has ended".into()),
    );
    assert_eq!(m.input(), "one more thing", "the refused steer is not lost");
    let shown = draw(&m, &running, now, 120, 20);
    assert!(
        shown.contains(
            "✗ /steer: invalid_request: Turn t3 has ended; press Enter to send it as a prompt"
        ),
        "{shown}"
    );

    // Text typed since is never overwritten.
    m.key(&s, ctrl('u'), now);
    typed(&mut m, &running, "second", now);
    let Action::Send { ticket, .. } = enter(&mut m, &running, now) else {
        panic!("a steer is sent");
    };
    typed(&mut m, &running, "new draft", now);
    m.finished(
        &s,
        ticket,
        Outcome::Failed("invalid_request: Turn t3 has ended".into()),
    );
    assert_eq!(m.input(), "new draft");
}

#[test]
fn alt_enter_queues_a_follow_up_while_a_turn_runs_and_is_a_newline_otherwise() {
    let now = t0();
    let mut m = model(now);
    let running = state(RUNNING);
    typed(&mut m, &running, "next", now);
    let alt_enter = KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT);
    assert!(matches!(
        m.key(&SessionState::new(&running), alt_enter, now),
        Action::Send { request: Request::FollowUp(t), .. } if t == "next"
    ));
    let idle = state(IDLE_TRANSCRIPT);
    typed(&mut m, &idle, "a", now);
    m.key(&SessionState::new(&idle), alt_enter, now);
    m.key(&SessionState::new(&idle), ctrl('j'), now);
    typed(&mut m, &idle, "b", now);
    assert_eq!(m.input(), "a\n\nb");
}

#[test]
fn queue_edits_and_removals_name_the_hosts_follow_up_ids() {
    let now = t0();
    let mut m = model(now);
    let v = state(RUNNING);
    typed(&mut m, &v, "/queue edit 1 run them twice", now);
    assert!(matches!(
        enter(&mut m, &v, now),
        Action::Send { request: Request::EditFollowUp { id, text }, .. } if id == "f1" && text == "run them twice"
    ));
    typed(&mut m, &v, "/queue rm 2", now);
    assert_eq!(enter(&mut m, &v, now), Action::None);
    assert!(draw(&m, &v, now, 100, 14).contains("there is no follow-up 2 (the queue holds 1)"));
    // A host without the queue says so instead of pretending.
    let old = state(r#"{"phase":"turn","transcript":[]}"#);
    typed(&mut m, &old, "/queue later", now);
    assert_eq!(enter(&mut m, &old, now), Action::None);
    assert!(draw(&m, &old, now, 100, 14).contains("this host has no follow-up queue"));
}

#[test]
fn ctrl_c_aborts_a_running_turn_then_exits_and_twice_while_idle_exits() {
    let now = t0();
    let mut m = model(now);
    let running = state(RUNNING);
    let s = SessionState::new(&running);
    m.observe(&s, now);
    assert!(matches!(
        m.key(&s, ctrl('c'), now),
        Action::Send {
            request: Request::Abort,
            ..
        }
    ));
    assert_eq!(m.key(&s, ctrl('c'), now), Action::Exit);

    let mut m = model(now);
    let idle = state(IDLE_TRANSCRIPT);
    let s = SessionState::new(&idle);
    typed(&mut m, &idle, "draft", now);
    assert_eq!(m.key(&s, ctrl('c'), now), Action::None);
    assert_eq!(m.input(), "", "the first Ctrl-C clears the input");
    assert_eq!(
        m.key(&s, ctrl('c'), now + Duration::from_millis(300)),
        Action::Exit
    );
    // Too far apart, or with a key between, it only arms again.
    let mut m = model(now);
    m.key(&s, ctrl('c'), now);
    assert_eq!(
        m.key(&s, ctrl('c'), now + Duration::from_secs(10)),
        Action::None
    );
    m.key(&s, key(KeyCode::Char('x')), now);
    assert_eq!(
        m.key(&s, ctrl('c'), now + Duration::from_secs(10)),
        Action::None
    );
}

#[test]
fn ctrl_d_detaches_on_an_empty_input_and_deletes_otherwise() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    let s = SessionState::new(&v);
    typed(&mut m, &v, "ab", now);
    m.key(&s, key(KeyCode::Home), now);
    assert_eq!(m.key(&s, ctrl('d'), now), Action::None);
    assert_eq!(m.input(), "b");
    m.key(&s, ctrl('u'), now);
    m.key(&s, key(KeyCode::End), now);
    m.key(&s, key(KeyCode::Backspace), now);
    assert_eq!(m.key(&s, ctrl('d'), now), Action::Detach);
}

#[test]
fn bang_commands_go_to_the_hosts_bash_and_bang_bang_stays_out_of_context() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    typed(&mut m, &v, "!!cat notes", now);
    let Action::Send { request, .. } = enter(&mut m, &v, now) else {
        panic!("sent");
    };
    assert_eq!(
        super::call_of(&request).to_json(),
        r#"{"serviceId":"pi.session","member":"bash","args":["cat notes",{"excludeFromContext":true}]}"#
    );
}

#[test]
fn up_recalls_history_and_edits_apply_at_the_cursor() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    let s = SessionState::new(&v);
    for line in ["first prompt", "second prompt"] {
        typed(&mut m, &v, line, now);
        enter(&mut m, &v, now);
    }
    m.key(&s, key(KeyCode::Up), now);
    assert_eq!(m.input(), "second prompt");
    m.key(&s, key(KeyCode::Up), now);
    assert_eq!(m.input(), "first prompt");
    let alt_b = KeyEvent::new(KeyCode::Char('b'), KeyModifiers::ALT);
    m.key(&s, alt_b, now);
    typed(&mut m, &v, "edited ", now);
    assert_eq!(m.input(), "first edited prompt");
    m.key(&s, key(KeyCode::Down), now);
    assert_eq!(m.input(), "second prompt");
}

#[test]
fn acknowledgements_name_what_the_host_did_and_refusals_are_shown() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    let s = SessionState::new(&v);
    typed(&mut m, &v, "/thinking high", now);
    let Action::Send { ticket, .. } = enter(&mut m, &v, now) else {
        panic!()
    };
    m.finished(&s, ticket, Outcome::Ok(Value::Null));
    typed(&mut m, &v, "/model nope/none", now);
    let Action::Send { ticket, .. } = enter(&mut m, &v, now) else {
        panic!()
    };
    m.finished(
        &s,
        ticket,
        Outcome::Failed("invalid_request: unknown model nope/none".into()),
    );
    let shown = draw(&m, &v, now, 100, 30);
    assert!(shown.contains("✓ thinking level is now high"), "{shown}");
    assert!(
        shown.contains("✗ /model: invalid_request: unknown model nope/none"),
        "{shown}"
    );
}

#[test]
fn a_large_paste_shows_as_one_marker_line() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    m.paste(&"log line\n".repeat(300));
    let shown = draw(&m, &v, now, 60, 10);
    assert!(shown.contains("› [paste #1 +300 lines]"), "{shown}");
    let Action::Send {
        request: Request::Prompt(text),
        ..
    } = enter(&mut m, &v, now)
    else {
        panic!()
    };
    assert_eq!(text.lines().count(), 300);
}

#[test]
fn a_narrow_terminal_wraps_instead_of_cutting_and_never_panics() {
    let now = t0();
    let mut m = model(now);
    let v = state(IDLE_TRANSCRIPT);
    typed(&mut m, &v, &"long input ".repeat(20), now);
    for (w, h) in [(1, 1), (5, 3), (20, 6), (33, 9)] {
        let _ = draw(&m, &v, now, w, h);
    }
    insta::assert_snapshot!(draw(&m, &v, now, 30, 16));
}

#[test]
fn hostile_states_render_without_panicking() {
    let now = t0();
    let m = model(now);
    for json in [
        "null",
        "[]",
        r#"{"transcript":[1,"x",null,{"role":7},{"role":"assistant","content":"nope"}]}"#,
        r#"{"transcript":[{"role":"tool","content":[{"type":"text","text":"\u0000\u001b[31m"}]}],"followUps":[7]}"#,
    ] {
        let _ = draw(&m, &state(json), now, 40, 10);
    }
}
