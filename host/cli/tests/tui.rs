//! `baton attach` as a person uses it: the real binary in a real terminal (tmux), typed at
//! with `send-keys` and read with `capture-pane`, against a real `baton-host serve` with
//! the scripted model. Also `baton watch` across a host restart.
//!
//! Every wait polls the screen (or the process) for what a person would look for, under a
//! generous hang guard; nothing waits for a fixed time. Without `tmux` the terminal tests
//! print SKIPPED, unless `BATON_REQUIRE_TMUX` is set (CI), where a missing tmux fails. The
//! harness is `common/tmux.rs`.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::gate::Gate;
use common::tmux::{Setup, Tmux, have_tmux};
use common::{HostProcess, baton, cli, mode_of};

/// The binaries, the host process, the FIFO gates and the tmux harness, shared with the
/// other process suites.
mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_streams_into_view_and_the_input_edits_and_recalls_history() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let gate = Gate::new(s.dir.path());
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    assert!(pane.status_line().contains("tui"), "{}", pane.status_line());

    // Mid-reply: the text before the tool call is on screen while the turn still runs.
    let command = gate.command();
    pane.submit(&format!("run `{command}`"));
    let screen = pane.wait_for("running bash").await;
    assert!(screen.contains(&format!("Running {command}.")), "{screen}");
    assert!(screen.contains("→ bash"), "{screen}");
    gate.open("gate opened").await;
    let screen = pane.wait_for("Here is the result of bash").await;
    assert!(screen.contains("│ gate opened"), "{screen}");
    pane.wait_idle().await;

    // Line editing: the cursor moves, inserts land where it is.
    pane.type_text("hello wrld");
    pane.keys(&["Left", "Left", "Left"]);
    pane.type_text("o");
    pane.keys(&["C-a"]);
    pane.type_text("say: ");
    pane.keys(&["Enter"]);
    pane.wait_for("You said: say: hello world.").await;

    // History: Up recalls the last prompts, newest first.
    pane.keys(&["Up"]);
    pane.wait_for("› say: hello world").await;
    pane.keys(&["Up"]);
    pane.wait_for(&format!("› run `{command}`")).await;
    pane.keys(&["Down", "Down"]);
    pane.wait_for("type a prompt").await;

    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    // The history is kept, privately, for the next run.
    let file = s.state_home.join("baton/history");
    assert_eq!(mode_of(&file), 0o600);
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(kept.contains("say: hello world"), "{kept}");
    let pane = s.attach(&tmux, "again");
    pane.wait_for("● connected").await;
    pane.keys(&["Up"]);
    pane.wait_for("› say: hello world").await;
    pane.keys(&["C-c", "C-c"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_is_acknowledged_for_its_turn_and_delivered_and_abort_stops_a_turn() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let gate = Gate::new(s.dir.path());
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    let command = gate.command();
    pane.submit(&format!("run `{command}`"));
    pane.wait_for("running bash").await;

    pane.submit("/steer also say steered");
    let screen = pane.wait_for("✓ steer").await;
    assert!(
        screen.contains("queued (delivered at its next tool boundary): also say steered"),
        "{screen}"
    );
    gate.open("done").await;
    // Delivered at the tool boundary: the model answers it.
    pane.wait_for("You said: also say steered.").await;
    pane.wait_idle().await;

    // /abort stops a running turn.
    pane.submit(&format!("run `{command}`"));
    pane.wait_for("running bash").await;
    pane.submit("/abort");
    let screen = pane.wait_for("■ turn aborted").await;
    assert!(screen.contains("✓ abort requested"), "{screen}");
    pane.wait_idle().await;
    // Plain text while idle after that is a prompt again.
    pane.submit("still here");
    pane.wait_for("You said: still here.").await;
    pane.submit("/detach");
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_aborts_a_running_turn_and_pressed_twice_while_idle_exits_at_once() {
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
    pane.keys(&["C-c"]);
    let screen = pane.wait_for("■ turn aborted").await;
    assert!(screen.contains("aborting the turn"), "{screen}");
    pane.wait_idle().await;
    assert_eq!(pane.dead(), None, "one Ctrl-C during a turn only aborts it");

    pane.type_text("draft");
    pane.keys(&["C-c"]);
    // Not the notice of the Ctrl-C during the turn ("aborting the turn; Ctrl-C again to
    // exit"), which is on screen already: the idle one.
    let screen = pane
        .wait_for("Ctrl-C again to exit (Ctrl-D detaches)")
        .await;
    assert!(
        !screen.contains("› draft"),
        "the first Ctrl-C clears the input: {screen}"
    );
    assert_eq!(pane.dead(), None);
    pane.keys(&["C-c"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bang_commands_run_on_the_host_and_bang_bang_stays_out_of_the_context() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    pane.submit("!echo from-the-host");
    let screen = pane.wait_for("│ from-the-host").await;
    assert!(screen.contains("$ echo from-the-host"), "{screen}");
    pane.submit("!!echo private-note");
    let screen = pane.wait_for("│ private-note").await;
    assert!(
        screen.contains("$ echo private-note  (not in the model's context)"),
        "{screen}"
    );
    pane.submit("!exit 3");
    pane.wait_for("exit 3").await;
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resized_terminal_is_redrawn_to_its_new_size() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    let long = "wide ".repeat(30);
    pane.submit(long.trim());
    pane.wait_for("I am the scripted model").await;
    // The reply is on screen before its turn ends, and Enter while a turn runs steers it:
    // the next prompt waits for idle. Idle, nothing redraws on its own (no spinner), so
    // the new size shows only if the resize itself is handled.
    pane.wait_idle().await;
    tmux.tmux(&["resize-window", "-t", "main", "-x", "60", "-y", "20"]);
    let screen = pane
        .wait("the status line at the new bottom", |s| {
            s.lines().count() <= 20 && s.lines().any(|l| l.contains("● connected"))
        })
        .await;
    for line in screen.lines() {
        assert!(
            line.chars().count() <= 60,
            "{line:?} is wider than the window"
        );
    }
    // The long prompt wrapped instead of being cut.
    let wide_rows = screen.lines().filter(|l| l.contains("wide wide")).count();
    assert!(wide_rows >= 2, "{screen}");
    pane.submit("after the resize");
    pane.wait_for("You said: after the resize.").await;
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_typed_as_the_window_resizes_reaches_the_input_at_once() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    // Each round resizes and types in one tmux command, so the resize signal and the key
    // reach the program together; the key must show without another keystroke after it.
    // (An edge-triggered reader that returns the resize first drops the key's readiness.)
    let mut typed = String::new();
    for round in 0..24 {
        let (x, y) = if round % 2 == 0 { (100, 30) } else { (90, 26) };
        let (x, y) = (x.to_string(), y.to_string());
        tmux.tmux(&[
            "resize-window",
            "-t",
            pane.name(),
            "-x",
            &x,
            "-y",
            &y,
            ";",
            "send-keys",
            "-t",
            pane.name(),
            "-l",
            "k",
        ]);
        typed.push('k');
        let shown = format!("› {typed}");
        pane.wait(
            &format!("round {round}: {typed:?} in the input"),
            |screen| screen.lines().any(|l| l.trim_end() == shown),
        )
        .await;
    }
    pane.keys(&["C-u", "C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_under_a_running_attach_is_reconnected_without_a_keystroke() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    pane.submit("before the restart");
    pane.wait_for("You said: before the restart.").await;
    // The turn ends before the restart, so the prompt after it is not taken for a steer.
    pane.wait_idle().await;

    let Setup { dir, host, id, .. } = s;
    assert!(host.terminate().await.success());
    let screen = pane.wait_for("reconnecting").await;
    assert!(screen.contains("connection lost"), "{screen}");
    assert_eq!(
        pane.dead(),
        None,
        "attach keeps running while the host is down"
    );

    // The same sessions directory: the same server id, at the same socket.
    let host = HostProcess::in_dir(dir.path()).await;
    let screen = pane
        .wait_for("reconnected; the session is live again")
        .await;
    assert!(
        screen.contains("You said: before the restart."),
        "the replica is back: {screen}"
    );
    pane.wait_for("● connected").await;
    pane.submit("after the restart");
    pane.wait_for("You said: after the restart.").await;
    let (status, out, _) = cli(&host.url, &["sessions"]).await;
    assert!(status.success());
    assert!(out.contains(&id[..8]), "{out}");
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_removed_under_attach_ends_it_at_once_with_one_clear_line() {
    if !have_tmux() {
        return;
    }
    let s = Setup::new().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    let (status, _, err) = cli(&s.url, &["remove", &s.id]).await;
    assert!(status.success(), "remove: {err}");
    // No keystroke: the client notices by itself.
    assert_eq!(pane.exit_status().await, 1);
    let stderr = std::fs::read_to_string(&pane.stderr).unwrap();
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("baton:")).collect();
    assert_eq!(
        said,
        ["baton: the session ended or was removed on the host"],
        "{stderr}"
    );
    assert!(s.host.terminate().await.success());
}

/// `baton watch` follows a session across a host restart instead of claiming it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reconnects_after_a_host_restart_and_keeps_following() {
    let s = Setup::new().await;
    let mut watch = Command::new(baton())
        .args(["--connect", &s.url, "watch", &s.id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let (status, _, err) = cli(&s.url, &["prompt", &s.id, "first"]).await;
    assert!(status.success(), "prompt: {err}");
    common::until(&mut lines, "You said: first.").await;
    let Setup { dir, host, id, .. } = s;
    assert!(host.terminate().await.success());
    let host = HostProcess::in_dir(dir.path()).await;
    let (status, _, err) = cli(&host.url, &["prompt", &id, "second"]).await;
    assert!(status.success(), "prompt: {err}");
    let seen = common::until(&mut lines, "You said: second.").await;
    assert!(
        !seen.iter().any(|l| l.contains("ended or was removed")),
        "a lost connection is not a removed session: {seen:?}"
    );
    assert_eq!(watch.try_wait().unwrap(), None, "watch is still following");
    watch.start_kill().unwrap();
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_follow_up_is_seen_by_a_second_client_and_sent_when_the_turn_settles() {
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
    // Presence: each sees the other.
    first.wait_for("+1 other here").await;
    first.submit(&gate.prompt());
    second.wait_for("running bash").await;

    // Alt-Enter while the turn runs queues a follow-up in the host.
    first.type_text("then say bye");
    first.keys(&["M-Enter"]);
    first.wait_for("✓ follow-up queued").await;
    second.wait_for("queued 1. then say bye").await;
    gate.open("released").await;
    // The host sends it as the next prompt once the turn settles; both clients see it.
    for pane in [&first, &second] {
        pane.wait_for("You said: then say bye.").await;
    }
    second
        .wait("the queue to empty", |s| !s.contains("queued 1."))
        .await;
    first.keys(&["C-d"]);
    second.keys(&["C-d"]);
    assert_eq!(first.exit_status().await, 0);
    assert_eq!(second.exit_status().await, 0);
    assert!(s.host.terminate().await.success());
}
