//! End to end, the binaries as processes: `baton-host serve` driven by the `baton` CLI,
//! restart and resume, the default socket, TLS with `baton-host certs`, `baton-host demo`,
//! and the interactive `baton attach` driven through its stdin and signals. The in-process
//! suites are `host/tests/e2e`.
//!
//! Synchronisation is on observed state (replica contents, output lines, exit status);
//! timeouts only guard against hangs.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

use common::gate::Gate;
use common::state::*;
use common::{HOST, HostProcess, baton, cli, create, mode_of, run, session_state};

/// The binaries, the host process and the hang-guarded runner, shared with `remote_tls.rs`.
mod common;

/// Reads lines until one satisfies `f`; returns everything read.
async fn read_until(
    what: &str,
    lines: &mut Lines<BufReader<ChildStdout>>,
    f: impl Fn(&str) -> bool,
) -> Vec<String> {
    guard(what, async {
        let mut seen = Vec::new();
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{what}: output ended after {seen:?}"));
            let done = f(&line);
            seen.push(line);
            if done {
                return seen;
            }
        }
    })
    .await
}

fn assert_streamed_tool_turn(out: &str, command: &str, result: &str) {
    for expected in [
        format!("> run `{command}`"),
        format!("Running `{command}`."),
        format!("→ bash {{\"command\":\"{command}\"}}"),
        "✓ bash".to_owned(),
        format!("  │ {result}"),
        "Here is the result of `bash`:".to_owned(),
    ] {
        assert!(out.contains(&expected), "missing {expected:?} in:\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_prompts_and_watches_a_served_host() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().join("sock");
    let sessions = dir.path().join("sessions");
    let host = HostProcess::start(
        &[
            "--listen",
            &format!("unix://{}", sock_dir.display()),
            "--sessions-dir",
            &sessions.display().to_string(),
        ],
        &[],
    )
    .await;
    assert_eq!(
        host.socket(),
        sock_dir.join(format!("{}.sock", host.server_id))
    );
    let url = host.url.clone();

    let id = create(&url, "cli").await;
    let (status, out, err) = cli(&url, &["prompt", &id, "run `echo hi`"]).await;
    assert!(status.success(), "prompt failed: {err}\n{out}");
    assert_streamed_tool_turn(&out, "echo hi", "hi");

    let (status, out, _) = cli(&url, &["sessions"]).await;
    assert!(status.success());
    // The table shows ids shortened to 8 characters, enough to address them.
    assert!(out.contains(&id[..8]) && out.contains("cli"), "{out}");

    // `watch` shows the transcript so far, then live updates from another client.
    let mut watch = Command::new(baton())
        .args(["--connect", &url, "watch", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    read_until("watch shows the first turn", &mut lines, |l| {
        l.contains("Here is the result of `bash`")
    })
    .await;
    read_until("watch shows the first result", &mut lines, |l| l == "```").await;
    let (status, _, err) = cli(&url, &["prompt", &id, "run `echo second`"]).await;
    assert!(status.success(), "{err}");
    let seen = read_until("watch shows the live turn", &mut lines, |l| {
        l == "  │ second"
    })
    .await;
    assert!(seen.iter().any(|l| l == "> run `echo second`"), "{seen:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(watch.id().unwrap()).unwrap()).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = guard("watch exits", watch.wait()).await.unwrap();
    assert!(status.success(), "watch: {status}");

    // SIGTERM drains and exits 0; the socket is gone.
    let socket = host.socket();
    let status = host.terminate().await;
    assert!(status.success(), "host: {status}");
    assert!(!socket.exists());
}

/// Starts a host on `dir`, settles one turn, starts a second whose tool runs for 20 s, and
/// SIGKILLs the host (no drain) once that tool call is on screen.
struct Killed {
    /// The host's arguments, to restart it.
    args: Vec<String>,
    sessions: PathBuf,
    session_id: String,
    server_id: String,
}

async fn kill_host_mid_turn(dir: &Path) -> Killed {
    let sessions = dir.join("sessions");
    let args = vec![
        "--listen".to_owned(),
        format!("unix://{}", dir.join("sock").display()),
        "--sessions-dir".to_owned(),
        sessions.display().to_string(),
    ];
    let borrowed: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = HostProcess::start(&borrowed, &[]).await;
    let id = create(&first.url, "cli").await;
    let (status, _, err) = cli(&first.url, &["prompt", &id, "run `echo one`"]).await;
    assert!(status.success(), "{err}");
    let mut prompt = Command::new(baton())
        .args(["--connect", &first.url, "prompt", &id, "run `sleep 20`"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(prompt.stdout.take().unwrap()).lines();
    read_until("the second turn calls its tool", &mut lines, |l| {
        l.starts_with("→ bash")
    })
    .await;
    first.child.start_kill().unwrap();
    guard("killed host", first.child.wait()).await.unwrap();
    let status = guard("orphaned prompt", prompt.wait()).await.unwrap();
    assert!(
        !status.success(),
        "the prompt cannot succeed without its host"
    );
    Killed {
        args,
        sessions,
        session_id: id,
        server_id: first.server_id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_resumes_settled_transcripts() {
    let dir = tempfile::tempdir().unwrap();
    let Killed {
        args,
        sessions: _,
        session_id: id,
        server_id: first_id,
    } = kill_host_mid_turn(dir.path()).await;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // Same sessions directory: same server id, and the settled transcript is back.
    let second = HostProcess::start(&args, &[]).await;
    assert_eq!(second.server_id, first_id, "the server id is stable");
    // The directory and the id file are private to the host's user from their creation.
    let sessions = dir.path().join("sessions");
    assert_eq!(mode_of(&sessions), 0o700, "sessions directory mode");
    assert_eq!(
        mode_of(&sessions.join("server-id")),
        0o600,
        "server-id mode"
    );
    let state = session_state(&second.socket(), &id).await;
    assert_eq!(get(&state, "phase").as_str(), Some("idle"));
    let items = transcript(&state);
    let roles: Vec<&str> = items
        .iter()
        .map(|i| get(i, "role").as_str().unwrap())
        .collect();
    assert_eq!(
        roles[..5],
        ["user", "assistant", "tool", "assistant", "user"],
        "{}",
        state.to_json()
    );
    assert_eq!(text_of(&items[0]), "run `echo one`");
    assert!(text_of(&items[2]).contains("one"));
    assert_eq!(text_of(&items[4]), "run `sleep 20`");
    for item in &items {
        let status = get(item, "status").as_str().unwrap_or("");
        assert!(
            !matches!(status, "streaming" | "running"),
            "only settled messages persist: {}",
            item.to_json()
        );
    }
    assert!(second.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_listen_the_host_serves_where_the_cli_looks() {
    let dir = tempfile::tempdir().unwrap();
    let runtime_dir = dir.path().join("xdg-runtime");
    std::fs::create_dir(&runtime_dir).unwrap();
    let server_id = "00000000-0000-4000-8000-00000000d15c";
    let host = HostProcess::start(
        &[
            "--sessions-dir",
            &dir.path().join("sessions").display().to_string(),
            "--server-id",
            server_id,
        ],
        &[("XDG_RUNTIME_DIR", &runtime_dir)],
    )
    .await;
    assert_eq!(host.server_id, server_id);
    assert_eq!(
        host.socket(),
        runtime_dir.join("baton").join(format!("{server_id}.sock"))
    );
    // No --connect: the CLI discovers the socket in the same per-user directory.
    let (status, stdout, stderr) = run(
        "baton models",
        Command::new(baton())
            .arg("models")
            .env("XDG_RUNTIME_DIR", &runtime_dir)
            .env_remove("BATON_CONNECT"),
    )
    .await;
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("scripted/default"), "{stdout}");
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certs_give_a_working_mutual_tls_setup() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let (status, _, stderr) = run(
        "certs",
        Command::new(HOST).args(["certs", "--out"]).arg(&pki),
    )
    .await;
    assert!(status.success(), "{stderr}");
    let file = |name: &str| pki.join(name).display().to_string();
    let host = HostProcess::start(
        &[
            "--listen",
            "tls://127.0.0.1:0",
            "--sessions-dir",
            &dir.path().join("sessions").display().to_string(),
            "--tls-cert",
            &file("server.pem"),
            "--tls-key",
            &file("server.key"),
            "--client-ca",
            &file("ca.pem"),
        ],
        &[],
    )
    .await;
    assert!(host.url.starts_with("tls://127.0.0.1:"), "{}", host.url);
    let url = host.url.replace("127.0.0.1", "localhost");
    let tls = |with_cert: bool| {
        let mut a = vec!["--ca".to_owned(), file("ca.pem")];
        if with_cert {
            a.extend(["--cert".to_owned(), file("client.pem")]);
            a.extend(["--key".to_owned(), file("client.key")]);
        }
        a.push("models".to_owned());
        a
    };
    let args = tls(true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, stdout, err) = cli(&url, &args).await;
    assert!(status.success(), "{err}");
    assert!(stdout.contains("scripted/default"), "{stdout}");
    // Without a client certificate the handshake fails.
    let args = tls(false);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (status, _, _) = cli(&url, &args).await;
    assert!(!status.success());
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_streams_a_tool_call_and_exits_zero() {
    let (status, stdout, stderr) = run("demo", Command::new(HOST).arg("demo")).await;
    assert!(status.success(), "{stdout}\n{stderr}");
    for expected in [
        "→ bash {\"command\":\"ls\"}",
        "✓ bash",
        "  │ README.md",
        "  │ hello.txt",
        "Here is the result of `bash`:",
        "[turn settled (stop)",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

/// Fault suite, "client killed mid-turn" at process level: a `baton prompt` is SIGKILLed
/// while its turn's tool is blocked (no `cancel`, the socket just dies), the host finishes
/// the turn anyway, and a later `baton watch` shows it completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_outlives_a_sigkilled_prompt_process() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostProcess::in_dir(dir.path()).await;
    let url = host.url.clone();
    // The tool blocks reading a FIFO until the test writes to it, so the turn is certainly
    // mid-tool when its client dies.
    let gate = Gate::new(dir.path());
    let id = create(&url, "cli").await;
    let command = gate.command();
    let mut prompt = Command::new(baton())
        .args([
            "--connect",
            &url,
            "prompt",
            &id,
            &format!("run `{command}`"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(prompt.stdout.take().unwrap()).lines();
    read_until("the turn calls its tool", &mut lines, |l| {
        l.starts_with("→ bash")
    })
    .await;
    prompt.start_kill().unwrap();
    let status = guard("killed prompt", prompt.wait()).await.unwrap();
    assert!(!status.success(), "SIGKILL ends the prompt: {status}");

    // A new client watches the same session: the turn is still there, and it completes
    // once the tool can.
    let mut watch = Command::new(baton())
        .args(["--connect", &url, "watch", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut seen = read_until("watch shows the running tool call", &mut lines, |l| {
        l.starts_with("→ bash")
    })
    .await;
    gate.open("released").await;
    seen.extend(
        read_until("watch shows the turn complete", &mut lines, |l| {
            l.contains("Here is the result of `bash`")
        })
        .await,
    );
    let out = seen.join("\n");
    assert_streamed_tool_turn(&out, &command, "released");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(watch.id().unwrap()).unwrap()).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = guard("watch exits", watch.wait()).await.unwrap();
    assert!(status.success(), "watch: {status}");
    assert!(host.terminate().await.success());
}

/// The interactive `attach` as a terminal user drives it: prompts and commands on stdin, a
/// Ctrl-C (SIGINT) that aborts the running turn instead of exiting, and `/detach`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_attach_prompts_aborts_on_ctrl_c_and_detaches() {
    use tokio::io::AsyncWriteExt;

    let dir = tempfile::tempdir().unwrap();
    let host = HostProcess::in_dir(dir.path()).await;
    let url = host.url.clone();
    // The tool blocks on a FIFO nobody writes: the turn runs until it is aborted.
    let gate = Gate::new(dir.path());
    let id = create(&url, "cli").await;
    let mut attach = Command::new(baton())
        .args(["--connect", &url, "attach", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = attach.stdin.take().unwrap();
    let mut lines = BufReader::new(attach.stdout.take().unwrap()).lines();
    let pid = rustix::process::Pid::from_raw(i32::try_from(attach.id().unwrap()).unwrap()).unwrap();
    read_until("the attach banner", &mut lines, |l| {
        l.starts_with(&format!("[attached to {id}; phase idle"))
    })
    .await;

    stdin.write_all(b"/bogus\n").await.unwrap();
    read_until("unknown commands are named", &mut lines, |l| {
        l == "[unknown command /bogus; /help lists them]"
    })
    .await;

    let command = gate.command();
    stdin
        .write_all(format!("run `{command}`\n").as_bytes())
        .await
        .unwrap();
    read_until("the turn calls its tool", &mut lines, |l| {
        l.starts_with("→ bash")
    })
    .await;
    stdin.write_all(b"another prompt\n").await.unwrap();
    read_until(
        "a second prompt is refused while a turn runs",
        &mut lines,
        |l| l == "[a turn is running: use /steer, or /abort]",
    )
    .await;

    // Ctrl-C aborts the turn and keeps the session attached.
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let seen = read_until("the turn settles aborted", &mut lines, |l| {
        l == "[the turn ended with aborted]"
    })
    .await;
    assert!(
        seen.iter().any(|l| l == "[aborting; Ctrl-C again to exit]"),
        "{seen:?}"
    );
    stdin.write_all(b"/help\n").await.unwrap();
    read_until("still interactive after the abort", &mut lines, |l| {
        l.starts_with("/steer TEXT  /abort")
    })
    .await;

    stdin.write_all(b"/detach\n").await.unwrap();
    let status = guard("attach exits on /detach", attach.wait())
        .await
        .unwrap();
    assert!(status.success(), "attach: {status}");
    // The session outlives the terminal that detached from it.
    let (status, out, err) = cli(&url, &["sessions"]).await;
    assert!(status.success(), "sessions: {err}");
    assert!(out.contains(&id[..8]), "{out}");
    assert!(host.terminate().await.success());
}

/// Fault suite, "host SIGKILL mid-turn with a torn tail": the host dies mid-turn and its
/// session file ends in half a line (as a write cut by the kill leaves it). The restarted
/// host skips the torn line, serves every settled message, takes a new turn, and that turn
/// survives another restart (it was not glued onto the torn line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_sigkilled_mid_turn_restarts_past_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let Killed {
        args,
        sessions,
        session_id: id,
        server_id: first_id,
    } = kill_host_mid_turn(dir.path()).await;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // The kill cut a write short: the file ends in half a line.
    let file = find_file(&sessions, &format!("{id}.jsonl"));
    let settled = std::fs::read(&file).unwrap();
    assert!(settled.ends_with(b"\n"), "settled lines are whole");
    let mut torn = settled.clone();
    torn.extend_from_slice(
        br#"{"type":"message","id":"000000ff","parentId":"00000004","timestamp":"2025-05-30T01:2"#,
    );
    std::fs::write(&file, &torn).unwrap();

    let second = HostProcess::start(&args, &[]).await;
    assert_eq!(second.server_id, first_id);
    let roles = settled_roles(&second, &id).await;
    assert_eq!(
        roles[..5],
        ["user", "assistant", "tool", "assistant", "user"]
    );
    let before = roles.len();
    let (status, out, err) = cli(&second.url, &["prompt", &id, "run `echo two`"]).await;
    assert!(status.success(), "a turn after the torn tail: {err}\n{out}");
    assert_streamed_tool_turn(&out, "echo two", "two");
    assert!(second.terminate().await.success());

    // Another restart reads the new turn back whole.
    let third = HostProcess::start(&args, &[]).await;
    let roles = settled_roles(&third, &id).await;
    assert_eq!(
        roles[before..],
        ["user", "assistant", "tool", "assistant"],
        "the turn taken after the torn tail persisted"
    );
    assert!(third.terminate().await.success());
}

/// The path of the file called `name` somewhere under `dir`.
fn find_file(dir: &Path, name: &str) -> PathBuf {
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                return path;
            }
        }
    }
    panic!("no {name} under {}", dir.display());
}

/// Attaches to `id` on `host`: the session is idle, every item settled; their roles.
async fn settled_roles(host: &HostProcess, id: &str) -> Vec<String> {
    let state = session_state(&host.socket(), id).await;
    assert_eq!(get(&state, "phase").as_str(), Some("idle"));
    let items = transcript(&state);
    for item in &items {
        let status = get(item, "status").as_str().unwrap_or("");
        assert!(
            !matches!(status, "streaming" | "running"),
            "only settled messages persist: {}",
            item.to_json()
        );
    }
    items
        .iter()
        .map(|i| get(i, "role").as_str().unwrap().to_owned())
        .collect()
}
