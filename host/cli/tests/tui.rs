//! `baton attach` as a person uses it: the real binary in a real terminal (tmux), typed at
//! with `send-keys` and read with `capture-pane`, against a real `baton-host serve` with
//! the scripted model. Also `baton watch` across a host restart.
//!
//! Every wait polls the screen (or the process) for what a person would look for, under a
//! generous hang guard; nothing waits for a fixed time. Without `tmux` the terminal tests
//! print SKIPPED, unless `BATON_REQUIRE_TMUX` is set (CI), where a missing tmux fails.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "test binary: helpers unwrap like the tests they serve; SKIPPED is printed"
)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::state::guard;
use common::{HostProcess, baton, cli};

/// The binaries and the host process, shared with the other process suites.
mod common;

/// Between two looks at the screen while waiting for something to appear.
const POLL: Duration = Duration::from_millis(50);

/// Whether tmux can be used; prints SKIPPED (or fails under `BATON_REQUIRE_TMUX`) if not.
fn have_tmux() -> bool {
    let found = std::process::Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("BATON_REQUIRE_TMUX").is_none(),
            "BATON_REQUIRE_TMUX is set but tmux is not installed"
        );
        println!("SKIPPED: tmux is not installed");
    }
    found
}

/// A private tmux server (its own socket) running one command per window.
struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Dead panes stay so the exit status and the last words can be read.
        let conf = dir.path().join("tmux.conf");
        std::fs::write(&conf, "set -g remain-on-exit on\nset -g status off\n").unwrap();
        let socket = dir.path().join("tmux.sock");
        let t = Self { socket, _dir: dir };
        // The server starts with a placeholder session and this configuration.
        t.tmux(&[
            "-f",
            conf.to_str().unwrap(),
            "new-session",
            "-d",
            "-s",
            "idle",
            "cat",
        ]);
        t
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `baton args…` in a new 120×40 window named `name`, with `env`.
    fn attach(&self, name: &str, env: &[(&str, &Path)], args: &[&str]) -> Pane<'_> {
        // One shell command that prints the exit status: a person reads the program's last
        // words on the terminal it leaves, and so does the test.
        let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
        let mut words = vec!["env".to_owned()];
        words.extend(
            env.iter()
                .map(|(k, v)| quote(&format!("{k}={}", v.display()))),
        );
        words.push(quote(&baton().display().to_string()));
        words.extend(args.iter().map(|a| quote(a)));
        // Its stderr (the one line a lost session ends with) goes to a file beside the socket.
        let stderr = self._dir.path().join(format!("{name}.stderr"));
        // The shell then stays (reading nothing) rather than exit: tmux 3.3 can drop what a
        // pane printed just before its process ended, and the exit line would be lost.
        let line = format!(
            "{} 2>{}; echo \"[exited $?]\"; exec sleep 86400",
            words.join(" "),
            quote(&stderr.display().to_string())
        );
        let argv = [
            "new-session",
            "-d",
            "-x",
            "120",
            "-y",
            "40",
            "-s",
            name,
            &line,
        ];
        self.tmux(&argv);
        Pane {
            tmux: self,
            name: name.to_owned(),
            stderr,
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}

/// One terminal window.
struct Pane<'a> {
    tmux: &'a Tmux,
    name: String,
    /// Where the program's stderr goes.
    stderr: PathBuf,
}

impl Pane<'_> {
    /// Types `text` literally.
    fn type_text(&self, text: &str) {
        self.tmux.tmux(&["send-keys", "-t", &self.name, "-l", text]);
    }

    /// Presses keys by tmux name (`Enter`, `C-c`, `Up`, `M-Enter`).
    fn keys(&self, keys: &[&str]) {
        let mut argv = vec!["send-keys", "-t", &self.name];
        argv.extend(keys);
        self.tmux.tmux(&argv);
    }

    /// Types `text` and presses Enter.
    fn submit(&self, text: &str) {
        self.type_text(text);
        self.keys(&["Enter"]);
    }

    fn screen(&self) -> String {
        self.tmux.tmux(&["capture-pane", "-p", "-t", &self.name])
    }

    /// The program's exit status once it has exited.
    fn dead(&self) -> Option<i32> {
        exited(&self.screen())
    }

    /// Waits until the screen satisfies `f`; returns it.
    async fn wait(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = tokio::time::timeout(common::state::HANG, async {
            loop {
                last = self.screen();
                if f(&last) {
                    return last.clone();
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("hung waiting for {what}; the screen:\n{last}"))
    }

    /// Waits until the screen shows `text`.
    async fn wait_for(&self, text: &str) -> String {
        self.wait(&format!("{text:?} on screen"), |s| s.contains(text))
            .await
    }

    /// Waits for the program to exit; its status.
    async fn exit_status(&self) -> i32 {
        let screen = self
            .wait("the program to exit", |s| exited(s).is_some())
            .await;
        exited(&screen).unwrap()
    }

    /// Waits until the status line says the session is idle.
    async fn wait_idle(&self) {
        self.wait("the session to be idle", |s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.contains(" · idle · "))
        })
        .await;
    }

    /// The status line (the screen's last non-empty row).
    fn status_line(&self) -> String {
        self.screen()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .to_owned()
    }
}

/// The status in the `[exited N]` line the wrapping shell prints.
fn exited(screen: &str) -> Option<i32> {
    screen.lines().find_map(|l| {
        l.trim()
            .strip_prefix("[exited ")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
}

/// A FIFO at `<dir>/gate`: a tool running `cat` on it blocks until the test writes to it.
fn make_fifo(dir: &Path) -> PathBuf {
    let fifo = dir.join("gate");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    fifo
}

/// Lets the tool blocked on `fifo` finish, printing `text`.
async fn open_gate(fifo: &Path, text: &str) {
    let fifo = fifo.to_owned();
    let text = text.to_owned();
    guard(
        "writing the gate",
        tokio::task::spawn_blocking(move || std::fs::write(fifo, format!("{text}\n"))),
    )
    .await
    .unwrap()
    .unwrap();
}

async fn create(url: &str, name: &str) -> String {
    let (status, out, err) = cli(url, &["create", "--name", name]).await;
    assert!(status.success(), "create: {err}");
    out.trim().to_owned()
}

/// A host in `dir`, a session, and the environment for `baton` (history in `dir/state`).
struct Setup {
    dir: tempfile::TempDir,
    host: HostProcess,
    url: String,
    id: String,
    state_home: PathBuf,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let host = HostProcess::in_dir(dir.path()).await;
    let url = host.url.clone();
    let id = create(&url, "tui").await;
    let state_home = dir.path().join("state");
    Setup {
        dir,
        host,
        url,
        id,
        state_home,
    }
}

impl Setup {
    fn attach<'t>(&self, tmux: &'t Tmux, name: &str) -> Pane<'t> {
        tmux.attach(
            name,
            &[
                ("XDG_STATE_HOME", &self.state_home),
                ("EDITOR", Path::new("true")),
            ],
            &["--connect", &self.url, "attach", &self.id],
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_streams_into_view_and_the_input_edits_and_recalls_history() {
    if !have_tmux() {
        return;
    }
    let s = setup().await;
    let fifo = make_fifo(s.dir.path());
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    assert!(pane.status_line().contains("tui"), "{}", pane.status_line());

    // Mid-reply: the text before the tool call is on screen while the turn still runs.
    let command = format!("cat {}", fifo.display());
    pane.submit(&format!("run `{command}`"));
    let screen = pane.wait_for("running bash").await;
    assert!(screen.contains(&format!("Running {command}.")), "{screen}");
    assert!(screen.contains("→ bash"), "{screen}");
    open_gate(&fifo, "gate opened").await;
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
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
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
    let s = setup().await;
    let fifo = make_fifo(s.dir.path());
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    let command = format!("cat {}", fifo.display());
    pane.submit(&format!("run `{command}`"));
    pane.wait_for("running bash").await;

    pane.submit("/steer also say steered");
    let screen = pane.wait_for("✓ steer").await;
    assert!(
        screen.contains("queued (delivered at its next tool boundary): also say steered"),
        "{screen}"
    );
    open_gate(&fifo, "done").await;
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
    let s = setup().await;
    let fifo = make_fifo(s.dir.path());
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    pane.submit(&format!("run `cat {}`", fifo.display()));
    pane.wait_for("running bash").await;
    pane.keys(&["C-c"]);
    let screen = pane.wait_for("■ turn aborted").await;
    assert!(screen.contains("aborting the turn"), "{screen}");
    pane.wait_idle().await;
    assert_eq!(pane.dead(), None, "one Ctrl-C during a turn only aborts it");

    pane.type_text("draft");
    pane.keys(&["C-c"]);
    let screen = pane.wait_for("Ctrl-C again to exit").await;
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
    let s = setup().await;
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
    let s = setup().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    let long = "wide ".repeat(30);
    pane.submit(long.trim());
    pane.wait_for("I am the scripted model").await;
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
async fn a_host_restarted_under_a_running_attach_is_reconnected_without_a_keystroke() {
    if !have_tmux() {
        return;
    }
    let s = setup().await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;
    pane.submit("before the restart");
    pane.wait_for("You said: before the restart.").await;

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
    let s = setup().await;
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

/// Reads `watch`'s output until a line contains `what`; the lines before it.
async fn until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    what: &str,
) -> Vec<String> {
    guard(what, async {
        let mut seen = Vec::new();
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("watch ended after {seen:?}"));
            if line.contains(what) {
                return seen;
            }
            seen.push(line);
        }
    })
    .await
}

/// `baton watch` follows a session across a host restart instead of claiming it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reconnects_after_a_host_restart_and_keeps_following() {
    let s = setup().await;
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
    until(&mut lines, "You said: first.").await;
    let Setup { dir, host, id, .. } = s;
    assert!(host.terminate().await.success());
    let host = HostProcess::in_dir(dir.path()).await;
    let (status, _, err) = cli(&host.url, &["prompt", &id, "second"]).await;
    assert!(status.success(), "prompt: {err}");
    let seen = until(&mut lines, "You said: second.").await;
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
    let s = setup().await;
    let fifo = make_fifo(s.dir.path());
    let tmux = Tmux::new();
    let first = s.attach(&tmux, "first");
    first.wait_for("● connected").await;
    let second = s.attach(&tmux, "second");
    second.wait_for("● connected").await;
    // Presence: each sees the other.
    first.wait_for("+1 other here").await;
    first.submit(&format!("run `cat {}`", fifo.display()));
    second.wait_for("running bash").await;

    // Alt-Enter while the turn runs queues a follow-up in the host.
    first.type_text("then say bye");
    first.keys(&["M-Enter"]);
    first.wait_for("✓ follow-up queued").await;
    second.wait_for("queued 1. then say bye").await;
    open_gate(&fifo, "released").await;
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
