//! `baton attach` in a real terminal (tmux) against a real `baton-host serve` with the
//! scripted model: what a person does with the input and the commands beyond prompting —
//! `@path` completion against the host's workspace, `/compact`, editing the host's follow-up
//! queue from two terminals, a steer that arrives after its turn, `/model`, `/thinking` and
//! `/help`, Ctrl-G, a large paste, long tool output and Ctrl-O, and Ctrl-D detaching.
//!
//! Every wait is on the screen (or on the host's state through the client library or the
//! `baton` CLI), under a generous hang guard; nothing waits for a fixed time. Without `tmux`
//! each test prints SKIPPED, unless `BATON_REQUIRE_TMUX` is set (CI). The harness is
//! `common/tmux.rs`.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

use std::path::Path;
use std::process::Stdio;

use baton_client::{Client, ClientConfig, Endpoint};
use baton_protocol::Value;
use baton_protocol::chord::ServiceMode;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::gate::Gate;
use common::relay::Relay;
use common::state::{get, guard, member, text_of, transcript};
use common::tmux::{Setup, Tmux, have_tmux};
use common::{baton, cli, session_state};

/// The binaries, the host process, the FIFO gates, the relay and the tmux harness, shared
/// with the other process suites.
mod common;

/// The texts of the user messages in a `pi.session` state, in order.
fn user_texts(state: &Value) -> Vec<String> {
    transcript(state)
        .iter()
        .filter(|i| get(i, "role").as_str() == Some("user"))
        .map(text_of)
        .collect()
}

/// Waits until session `id` on the host at `socket` has a state satisfying `f` (watched
/// through a subscription, update by update); that state.
async fn wait_state(socket: &Path, id: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let client = guard(
        "connect",
        Client::connect(ClientConfig::new(Endpoint::Unix(socket.to_owned()))),
    )
    .await
    .unwrap();
    let session = guard("attach", client.attach(id)).await.unwrap();
    let mut sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let state = guard(what, async {
        loop {
            let state = member(&sub, "state");
            if f(&state) {
                return state;
            }
            sub.next_event()
                .await
                .unwrap_or_else(|| panic!("the subscription ended waiting for {what}"));
        }
    })
    .await;
    drop(sub);
    client.close().await;
    state
}

fn phase(state: &Value) -> &str {
    get(state, "phase").as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_path_completion_offers_the_hosts_workspace_files_and_nothing_outside_it() {
    if !have_tmux() {
        return;
    }
    let s = Setup::in_workspace(&[
        ("src/main.rs", "fn main() {}\n"),
        ("src/lib.rs", "\n"),
        ("README.md", "# demo\n"),
    ])
    .await;
    // Beside the workspace, and reachable from it only through a symlink.
    std::fs::write(s.dir.path().join("secret.txt"), "not yours\n").unwrap();
    std::os::unix::fs::symlink(s.dir.path(), s.dir.path().join("project/escape")).unwrap();
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;

    // One directory matches: Tab completes it (and waits for more, no space).
    pane.type_text("look at @sr");
    pane.keys(&["Tab"]);
    pane.wait_for("› look at @src/").await;
    // Two files in it: Tab lists both, from the host's disk.
    pane.keys(&["Tab"]);
    let screen = pane.wait_for("  @src/main.rs").await;
    assert!(screen.contains("  @src/lib.rs"), "{screen}");
    // A letter more narrows it to one, which completes with a space after it.
    pane.type_text("m");
    pane.keys(&["Tab"]);
    pane.wait_for("› look at @src/main.rs").await;
    pane.type_text("please");
    pane.wait_for("› look at @src/main.rs please").await;
    pane.keys(&["Enter"]);
    pane.wait_for("You said: look at @src/main.rs please.")
        .await;
    pane.wait_idle().await;

    // Outside the workspace nothing is offered: `..`, an absolute path and a symlink out
    // are each refused by the host with a line saying why.
    for (typed, why) in [
        ("@../", "may not contain `..`"),
        ("@/", "must be relative to the workspace"),
        ("@escape/", "outside the workspace"),
    ] {
        pane.keys(&["C-u"]);
        pane.type_text(typed);
        pane.keys(&["Tab"]);
        let screen = pane.wait_for(why).await;
        assert!(screen.contains("✗ @ completion"), "{screen}");
        assert!(
            screen.contains(&format!("› {typed}")),
            "input kept: {screen}"
        );
    }
    let screen = pane.screen();
    assert!(
        !screen.contains("secret.txt"),
        "nothing outside the workspace is offered: {screen}"
    );
    pane.keys(&["C-u", "C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_summarises_older_context_and_a_reattached_client_shows_it() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    // The host offers compaction (the state says so), so Tab offers the command …
    pane.type_text("/comp");
    pane.keys(&["Tab"]);
    pane.wait_for("› /compact").await;
    pane.keys(&["C-u"]);
    // … and with nothing to summarise yet, the host's refusal is one clear line.
    pane.submit("/compact");
    pane.wait_for("✗ /compact").await;
    pane.wait_for("Nothing to compact").await;

    pane.submit("remember the plan");
    pane.wait_for("You said: remember the plan.").await;
    pane.wait_idle().await;
    // More history than the kept recent tail (20k estimated tokens), from another client.
    let bulk = format!("bulk\n{}", "x".repeat(88_000));
    let (status, _, err) = cli(&s.url, &["prompt", &s.id, &bulk]).await;
    assert!(status.success(), "prompt: {err}");
    pane.wait_idle().await;

    pane.submit("/compact keep the plan");
    pane.wait_for("✓ context compacted").await;
    // The answer and the state's update travel apart: the item may follow a frame later.
    let screen = pane.wait_for("── context compacted ──").await;
    assert!(
        screen.contains("The user asked: remember the plan / bulk"),
        "{screen}"
    );
    let state = session_state(&s.host.socket(), &s.id).await;
    let summaries = transcript(&state)
        .iter()
        .filter(|i| get(i, "role").as_str() == Some("compactionSummary"))
        .count();
    assert_eq!(summaries, 1, "{}", state.to_json());
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);

    // A client attaching afterwards sees the compaction in the transcript.
    let again = s.attach(&tmux, "again");
    let screen = again.wait_for("── context compacted ──").await;
    assert!(
        screen.contains("The user asked: remember the plan / bulk"),
        "{screen}"
    );
    again.keys(&["C-d"]);
    assert_eq!(again.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_edits_removals_and_clears_show_in_a_second_client_and_the_edited_queue_is_sent() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let gate = Gate::new(s.dir.path());
    let tmux = Tmux::new();
    let first = s.attach(&tmux, "first");
    first.wait_for("● connected").await;
    let second = s.attach(&tmux, "second");
    second.wait_for("● connected").await;
    first.submit(&gate.prompt());
    second.wait_for("running bash").await;

    for text in ["one", "two", "three"] {
        first.submit(&format!("/queue {text}"));
        first
            .wait_for(&format!(
                "✓ follow-up queued (sent when the turn settles): {text}"
            ))
            .await;
    }
    second.wait_for("queued 3. three").await;
    first.submit("/queue edit 2 two, edited");
    first.wait_for("✓ follow-up edited").await;
    second.wait_for("queued 2. two, edited").await;
    first.submit("/queue rm 1");
    first.wait_for("✓ follow-up removed").await;
    let screen = second
        .wait("the first entry gone", |s| {
            s.contains("queued 1. two, edited")
        })
        .await;
    assert!(screen.contains("queued 2. three"), "{screen}");
    assert!(!screen.contains("queued 3."), "{screen}");
    assert!(!screen.contains("queued 1. one"), "{screen}");
    first.submit("/queue clear");
    first.wait_for("✓ follow-up queue cleared").await;
    second
        .wait("the queue to empty", |s| !s.contains("queued 1."))
        .await;
    // The second client reads the host's queue, not its own.
    second.submit("/queue");
    second.wait_for("the follow-up queue is empty").await;

    // Queued again, edited and shortened from the second client this time.
    for text in ["alpha", "beta"] {
        first.submit(&format!("/queue {text}"));
        first
            .wait_for(&format!(
                "✓ follow-up queued (sent when the turn settles): {text}"
            ))
            .await;
    }
    second.wait_for("queued 2. beta").await;
    second.submit("/queue edit 1 alpha, edited");
    first.wait_for("queued 1. alpha, edited").await;
    second.submit("/queue rm 2");
    first
        .wait("beta to leave the queue", |s| !s.contains("queued 2."))
        .await;

    gate.open("released").await;
    for pane in [&first, &second] {
        pane.wait_for("You said: alpha, edited.").await;
        pane.wait_idle().await;
    }
    let state = session_state(&s.host.socket(), &s.id).await;
    assert_eq!(
        user_texts(&state),
        [gate.prompt(), "alpha, edited".to_owned()],
        "what was sent is the queue as edited"
    );
    assert_eq!(get(&state, "followUps").as_array().map(Vec::len), Some(0));
    for pane in [&first, &second] {
        pane.keys(&["C-d"]);
        assert_eq!(pane.exit_status().await, 0);
    }
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_that_arrives_after_its_turn_ended_is_refused_and_not_given_to_the_next_turn() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let first_turn = Gate::named(s.dir.path(), "first");
    let next_turn = Gate::named(s.dir.path(), "next");
    // The terminal reaches the host through a relay whose host→terminal direction the test
    // holds: the screen keeps showing the first turn running after it ended.
    let relay = Relay::start(s.dir.path(), &s.host.socket());
    let tmux = Tmux::new();
    let pane = s.attach_via(&tmux, "main", &relay.url(), &[]);
    pane.wait_for("● connected").await;
    pane.submit(&first_turn.prompt());
    pane.wait_for("running bash").await;
    let held = relay.hold().await;

    // The first turn ends and the next one (from another client) runs, unseen by the pane.
    first_turn.open("first done").await;
    wait_state(&s.host.socket(), &s.id, "the first turn to end", |st| {
        phase(st) == "idle"
    })
    .await;
    let mut next = Command::new(baton())
        .args(["--connect", &s.url, "prompt", &s.id, &next_turn.prompt()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(next.stdout.take().unwrap()).lines();
    guard("the next turn calls its tool", async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.starts_with("→ bash") {
                return;
            }
        }
        panic!("the next turn's prompt ended before its tool call");
    })
    .await;

    // The pane still shows the first turn running: Enter steers it, naming that turn.
    assert!(
        pane.status_line().contains("running bash"),
        "{}",
        pane.status_line()
    );
    // The text shows in the input, and once Enter is handled it leaves it: the steer was
    // made from the frozen screen.
    pane.type_text("/steer for the first turn only");
    pane.wait_for("› /steer for the first turn only").await;
    pane.keys(&["Enter"]);
    pane.wait("Enter to be handled", |s| {
        !s.contains("› /steer for the first turn only")
    })
    .await;
    drop(held);
    let screen = pane
        .wait_for("has ended; the steering text was not delivered")
        .await;
    assert!(screen.contains("✗ /steer"), "{screen}");
    // The refused text is not lost: it comes back into the input, ready to send as a prompt.
    pane.wait_for("› for the first turn only").await;
    pane.keys(&["C-u"]);
    pane.wait("the restored text to be cleared", |s| {
        !s.contains("› for the first turn only")
    })
    .await;

    next_turn.open("next done").await;
    let rest = guard("the next turn's output", async {
        let mut rest = Vec::new();
        while let Some(l) = lines.next_line().await.unwrap() {
            rest.push(l);
        }
        rest
    })
    .await;
    let status = guard("the next prompt exits", next.wait()).await.unwrap();
    assert!(status.success(), "{rest:?}");
    pane.wait_idle().await;
    let state = session_state(&s.host.socket(), &s.id).await;
    let said = state.to_json();
    assert!(
        !said.contains("for the first turn only"),
        "the stale steer reached no turn: {said}"
    );
    assert_eq!(
        user_texts(&state),
        [first_turn.prompt(), next_turn.prompt()],
        "no turn was started by it"
    );
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_and_thinking_are_acknowledged_and_shown_and_help_lists_the_commands() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    let status = pane.status_line();
    assert!(
        status.contains("scripted/default") && status.contains("thinking off"),
        "{status}"
    );

    pane.submit("/thinking high");
    pane.wait_for("✓ thinking level is now high").await;
    pane.wait("the status line to show it", |s| {
        common::tmux::status_line(s).contains("thinking high")
    })
    .await;
    let state = session_state(&s.host.socket(), &s.id).await;
    assert_eq!(get(&state, "thinkingLevel").as_str(), Some("high"));
    pane.submit("/thinking lots");
    pane.wait_for("/thinking needs one of off, minimal").await;

    pane.submit("/model nowhere/none");
    let screen = pane.wait_for("✗ /model").await;
    assert!(
        common::tmux::status_line(&screen).contains("scripted/default"),
        "{screen}"
    );
    pane.submit("/model scripted/default");
    pane.wait_for("✓ model is now scripted/default").await;

    pane.submit("/help");
    let screen = pane.wait_for("keys: Enter send").await;
    for command in [
        "/steer TEXT",
        "/queue [TEXT",
        "/abort",
        "/model PROVIDER/ID",
        "/thinking LEVEL",
        "/compact [INSTRUCTIONS]",
        "/expand",
        "/detach",
        "/help",
    ] {
        assert!(screen.contains(command), "{command} missing: {screen}");
    }
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_g_hands_the_input_to_the_editor_and_its_text_becomes_the_input() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    // An editor that keeps what it was given and adds to it.
    let editor = s.dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nprintf '%s + from the editor\\n' \"$(cat \"$1\")\" > \"$1.new\" && mv \"$1.new\" \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let tmux = Tmux::new();
    let pane = s.attach_with(&tmux, "main", &[("EDITOR", &editor), ("VISUAL", &editor)]);
    pane.wait_for("● connected").await;
    pane.type_text("draft");
    pane.keys(&["C-g"]);
    // The editor was given the input and its text is the input now.
    let screen = pane.wait_for("› draft + from the editor").await;
    assert!(!screen.contains("$EDITOR:"), "no editor error: {screen}");
    // The very next key is read (a stale wake of the event reader must not swallow it).
    pane.keys(&["Enter"]);
    pane.wait_for("You said: draft + from the editor.").await;
    pane.wait_idle().await;
    // The host drains with the terminal still attached.
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_paste_shows_as_one_marker_and_is_sent_whole() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    let pasted: String = (1..=20).map(|i| format!("pasted line {i}\n")).collect();
    pane.type_text("before ");
    pane.paste(&pasted);
    let screen = pane.wait_for("› before [paste #1 +20 lines]").await;
    assert!(
        !screen.contains("pasted line 2"),
        "the paste is one marker: {screen}"
    );
    pane.keys(&["Enter"]);
    pane.wait_for("> before pasted line 1").await;
    pane.wait_idle().await;
    let state = session_state(&s.host.socket(), &s.id).await;
    assert_eq!(user_texts(&state), [format!("before {pasted}")]);
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_tool_output_is_cut_to_a_preview_and_ctrl_o_shows_it_whole() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    // Room for the whole output and the model's quote of it.
    tmux.tmux(&["resize-window", "-t", pane.name(), "-x", "120", "-y", "100"]);
    // Typing only once the resize is handled (the status line redrawn at the new bottom row)
    // and Enter only once the text shows: keys typed into the redraw were seen lost in CI.
    pane.wait("the status line at the new bottom", |s| {
        s.lines().count() >= 100 && s.lines().nth(99).is_some_and(|l| l.contains("● connected"))
    })
    .await;
    pane.type_text("run `seq 101 130`");
    pane.wait_for("› run `seq 101 130`").await;
    pane.keys(&["Enter"]);
    pane.wait_for("Here is the result of bash").await;
    pane.wait_idle().await;
    let screen = pane.wait_for("  │ … 22 more lines (Ctrl-O expands)").await;
    assert!(screen.contains("  │ 108"), "{screen}");
    assert!(!screen.contains("  │ 109"), "cut after 8 lines: {screen}");
    pane.keys(&["C-o"]);
    let screen = pane.wait_for("  │ 130").await;
    assert!(!screen.contains("more lines (Ctrl-O expands)"), "{screen}");
    pane.keys(&["C-o"]);
    pane.wait("the preview again", |s| !s.contains("  │ 130"))
        .await;
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_d_on_an_empty_input_detaches_and_exits_zero_while_the_turn_runs_on() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let gate = Gate::new(s.dir.path());
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    pane.submit(&gate.prompt());
    pane.wait_for("running bash").await;

    // With text in the input Ctrl-D edits (deletes under the cursor), it does not leave.
    pane.type_text("draft");
    pane.keys(&["Home", "C-d"]);
    pane.wait_for("› raft").await;
    assert_eq!(pane.dead(), None);
    pane.keys(&["C-u", "C-k", "C-d"]);
    assert_eq!(pane.exit_status().await, 0);

    // The session is still there, its turn still running, and it finishes unattended.
    let (status, out, err) = cli(&s.url, &["sessions"]).await;
    assert!(status.success(), "sessions: {err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&s.id[..8]))
        .unwrap_or_else(|| panic!("no row for the session: {out}"));
    assert!(!row.contains("idle"), "the turn runs on: {row}");
    gate.open("finished unattended").await;
    let state = wait_state(&s.host.socket(), &s.id, "the turn to finish", |st| {
        phase(st) == "idle" && transcript(st).len() >= 4
    })
    .await;
    let items = transcript(&state);
    let last = text_of(items.last().unwrap());
    assert!(last.contains("finished unattended"), "{}", state.to_json());
    assert!(s.host.terminate().await.success());
}
