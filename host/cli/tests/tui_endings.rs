//! How `baton attach` and `baton watch` end when retrying cannot help, as a person sees it:
//! the real binaries against a real `baton-host serve`, `attach` in a real terminal (tmux).
//! A host restarted at the same (loopback TCP) address with another server id, an identity
//! the access policy revokes (`SIGHUP`), and a host restarted with a client CA that no
//! longer admits the client's certificate (another CA of the same name: `decrypt_error`):
//! each ends the client at once, without a keystroke, with one line on stderr and exit
//! status 3 (docs/cli.md).
//!
//! Every wait polls the screen or the process output under the generous hang guard; nothing
//! waits for a fixed time. Without `tmux` the terminal tests print SKIPPED, unless
//! `BATON_REQUIRE_TMUX` is set (CI), where a missing tmux fails.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::state::guard;
use common::tmux::{Pane, Setup, Tmux, have_tmux};
use common::{HOST, HostProcess, baton, run};

/// The binaries, the host process and the tmux harness, shared with the other process
/// suites.
mod common;

/// The exit status of a client whose reconnect was refused (docs/cli.md).
const EXIT_REFUSED: i32 = 3;

/// The `baton: …` lines a finished `baton` wrote to its stderr `file`.
fn said(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("baton:"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_with_another_server_id_under_attach_ends_it_at_once_with_one_line() {
    if !have_tmux() {
        return;
    }
    // On loopback TCP, so the other host can answer at the very same address (a Unix
    // listener names its socket after its server id, so another id is another path).
    let dir = tempfile::tempdir().unwrap();
    let sessions = |name: &str| dir.path().join(name).display().to_string();
    let host = HostProcess::start(
        &[
            "--listen",
            "tcp://127.0.0.1:0",
            "--sessions-dir",
            &sessions("sessions"),
        ],
        &[],
    )
    .await;
    let s = Setup::with_host(dir, host).await;
    let tmux = Tmux::new();
    let pane = s.attach(&tmux, "main");
    pane.wait_for("● connected").await;

    let Setup { dir, host, url, .. } = s;
    let first_id = host.server_id.clone();
    assert!(host.terminate().await.success());
    pane.wait_for("reconnecting").await;
    assert_eq!(
        pane.dead(),
        None,
        "attach keeps trying while the host is down"
    );

    // Another host at the same address: its own sessions directory, so its own server id.
    let other = HostProcess::start(
        &[
            "--listen",
            &url,
            "--sessions-dir",
            &dir.path().join("other-sessions").display().to_string(),
        ],
        &[],
    )
    .await;
    assert_eq!(other.url, url);
    assert_ne!(other.server_id, first_id);

    // No keystroke: the refused reconnect ends the client by itself.
    assert_eq!(pane.exit_status().await, EXIT_REFUSED);
    assert_eq!(
        said(&pane.stderr),
        [format!(
            "baton: a different host answers now: its server id is {}, not {first_id}; \
             not reconnecting",
            other.server_id
        )]
    );
    assert!(other.terminate().await.success());
}

/// A PKI from `baton-host certs` in `dir` (server certificate for localhost and 127.0.0.1,
/// CA, a first client) with one more client, bob.
async fn make_pki(dir: &Path) {
    let out = dir.display().to_string();
    for args in [vec!["--out", &out], vec!["--out", &out, "--client", "bob"]] {
        let (status, _, err) = run(
            &format!("certs {args:?}"),
            Command::new(HOST).arg("certs").args(&args),
        )
        .await;
        assert!(status.success(), "certs: {err}");
    }
}

/// `baton-host serve` on TLS at `listen`, with `pki`'s server certificate, requiring client
/// certificates signed by `client_ca`, sessions in `<dir>/sessions`, and `more` flags.
async fn serve_tls(
    dir: &Path,
    listen: &str,
    pki: &Path,
    client_ca: &Path,
    more: &[&str],
) -> HostProcess {
    let file = |p: PathBuf| p.display().to_string();
    let mut args = vec![
        "--listen".to_owned(),
        listen.to_owned(),
        "--sessions-dir".to_owned(),
        file(dir.join("sessions")),
        "--tls-cert".to_owned(),
        file(pki.join("server.pem")),
        "--tls-key".to_owned(),
        file(pki.join("server.key")),
        "--client-ca".to_owned(),
        file(client_ca.to_owned()),
    ];
    args.extend(more.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let host = HostProcess::start(&args, &[]).await;
    assert!(host.url.starts_with("tls://127.0.0.1:"), "{}", host.url);
    host
}

/// `baton`'s TLS flags for bob.
fn as_bob(pki: &Path) -> Vec<String> {
    let file = |name: &str| pki.join(name).display().to_string();
    vec![
        "--ca".to_owned(),
        file("ca.pem"),
        "--cert".to_owned(),
        file("bob.pem"),
        "--key".to_owned(),
        file("bob.key"),
    ]
}

/// `baton --connect <url> <bob's TLS flags> args…` to completion.
async fn bob(pki: &Path, url: &str, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    run(
        &format!("baton as bob {args:?}"),
        Command::new(baton())
            .args(["--connect", url])
            .args(as_bob(pki))
            .args(args),
    )
    .await
}

/// Bob creates a session named `tui`; its id.
async fn bobs_session(pki: &Path, url: &str) -> String {
    let (status, out, err) = bob(pki, url, &["create", "--name", "tui"]).await;
    assert!(status.success(), "create: {err}");
    let id = out.trim().to_owned();
    assert_eq!(id.len(), 36, "a session id: {out:?}");
    id
}

/// `baton attach` as bob in a new tmux window.
fn attach_as_bob<'t>(tmux: &'t Tmux, dir: &Path, pki: &Path, url: &str, id: &str) -> Pane<'t> {
    let state = dir.join("state");
    let mut args = vec!["--connect".to_owned(), url.to_owned()];
    args.extend(as_bob(pki));
    args.extend(["attach".to_owned(), id.to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    tmux.attach(
        "main",
        &[
            ("XDG_STATE_HOME", state.as_path()),
            ("EDITOR", Path::new("true")),
        ],
        &args,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_the_access_policy_revokes_under_attach_ends_it_at_once_with_one_line() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    make_pki(&pki).await;
    let policy = dir.path().join("access.toml");
    std::fs::write(&policy, "ungranted_tls = \"own\"\n").unwrap();
    let host = serve_tls(
        dir.path(),
        "tls://127.0.0.1:0",
        &pki,
        &pki.join("ca.pem"),
        &["--access", policy.to_str().unwrap()],
    )
    .await;
    let id = bobs_session(&pki, &host.url).await;
    let tmux = Tmux::new();
    let pane = attach_as_bob(&tmux, dir.path(), &pki, &host.url, &id);
    pane.wait_for("● connected").await;

    // Revoked on SIGHUP: the host closes bob's connection, and refuses the reconnect.
    std::fs::write(&policy, "[[deny]]\ntls_cn = \"bob\"\n").unwrap();
    host.signal(rustix::process::Signal::HUP);

    assert_eq!(pane.exit_status().await, EXIT_REFUSED);
    let lines = said(&pane.stderr);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("baton: this identity is no longer admitted by the host: ")
            && lines[0].contains("is not admitted by the access policy")
            && lines[0].ends_with("; not reconnecting"),
        "{lines:?}"
    );
    assert!(host.terminate().await.success());
}

/// `watch` needs no terminal: it runs whether or not tmux is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_with_a_client_ca_that_refuses_the_certificate_ends_watch_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    make_pki(&pki).await;
    let host = serve_tls(
        dir.path(),
        "tls://127.0.0.1:0",
        &pki,
        &pki.join("ca.pem"),
        &[],
    )
    .await;
    let url = host.url.clone();
    let id = bobs_session(&pki, &url).await;
    let mut watch = Command::new(baton())
        .args(["--connect", &url])
        .args(as_bob(&pki))
        .args(["watch", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let (status, _, err) = bob(&pki, &url, &["prompt", &id, "first"]).await;
    assert!(status.success(), "prompt: {err}");
    common::until(&mut lines, "You said: first.").await;

    // The same host (server certificate, sessions, address) now trusts another CA for
    // clients: bob's certificate is refused in the TLS handshake.
    let other_ca = dir.path().join("other-pki");
    make_pki(&other_ca).await;
    assert!(host.terminate().await.success());
    let host = serve_tls(dir.path(), &url, &pki, &other_ca.join("ca.pem"), &[]).await;
    assert_eq!(host.url, url);

    let out = guard("watch to end", watch.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(EXIT_REFUSED));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("baton:")).collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].starts_with("baton: this identity is no longer admitted by the host: ")
            && said[0].contains("the TLS handshake refused its certificate")
            && said[0].ends_with("; not reconnecting"),
        "{stderr}"
    );
    assert!(stderr.contains("reconnecting in"), "{stderr}");
    assert!(host.terminate().await.success());
}
