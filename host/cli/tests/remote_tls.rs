//! The README's remote flow, as processes: `baton-host certs --san build-box.example` and
//! `--client bob`, `baton-host serve` on TLS with client certificates required, and the real
//! `baton` reaching it the way a tunnel does (`--connect tls://127.0.0.1:PORT --server-name
//! build-box.example`), for the first client certificate and for bob's. The server name is
//! not `localhost` and the certificate does not list 127.0.0.1, so a connection only
//! verifies if `--server-name` reaches TLS.
//!
//! Only loopback is used. Synchronisation is on output lines and exit status.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use tokio::process::Command;

use common::state::guard;
use common::tmux::{Tmux, have_tmux};
use common::{HOST, HostProcess, baton, mode_of, run};

/// The binaries, the host process and the hang-guarded runner, shared with `process.rs`.
mod common;

const SERVER_NAME: &str = "build-box.example";

/// `baton-host certs args…` to completion.
async fn certs(args: &[&str]) -> (ExitStatus, String, String) {
    run(
        &format!("certs {args:?}"),
        Command::new(HOST).arg("certs").args(args),
    )
    .await
}

/// The lowercase-hex fingerprint on the `sha256 <hex>` line of `certs` output.
fn printed_fingerprint(stdout: &str) -> String {
    let hex = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sha256 "))
        .unwrap_or_else(|| panic!("no fingerprint line in {stdout:?}"));
    assert_eq!(hex.len(), 64, "{hex:?}");
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{hex:?}"
    );
    hex.to_owned()
}

/// A PKI for `build-box.example` in `<dir>/pki` with a second client, bob: bob's fingerprint.
async fn make_pki(pki: &Path) -> String {
    let out = pki.display().to_string();
    let (status, stdout, stderr) = certs(&["--out", &out, "--san", SERVER_NAME]).await;
    assert!(status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("server certificate names: {SERVER_NAME}\n")),
        "only the --san name: {stdout}"
    );
    let (status, stdout, stderr) = certs(&["--out", &out, "--client", "bob"]).await;
    assert!(status.success(), "{stderr}");
    printed_fingerprint(&stdout)
}

/// `baton --connect <url> [--server-name N] --ca … --cert <who>.pem --key <who>.key args…`.
async fn baton_as(
    pki: &Path,
    url: &str,
    server_name: Option<&str>,
    who: &str,
    args: &[&str],
) -> (ExitStatus, String, String) {
    let mut cmd = Command::new(baton());
    cmd.arg("--connect").arg(url);
    if let Some(name) = server_name {
        cmd.args(["--server-name", name]);
    }
    cmd.arg("--ca")
        .arg(pki.join("ca.pem"))
        .arg("--cert")
        .arg(pki.join(format!("{who}.pem")))
        .arg("--key")
        .arg(pki.join(format!("{who}.key")))
        .args(args)
        .env_remove("BATON_SERVER_NAME");
    run(&format!("baton as {who} {args:?}"), &mut cmd).await
}

/// `baton-host serve` on `tls://127.0.0.1:0` with `pki`'s server certificate and client CA,
/// logging connections (`baton_host` at debug) to its captured stderr.
async fn serve(dir: &Path, pki: &Path) -> HostProcess {
    let file = |name: &str| pki.join(name).display().to_string();
    let host = HostProcess::start_logged(
        &[
            "--listen",
            "tls://127.0.0.1:0",
            "--sessions-dir",
            &dir.join("sessions").display().to_string(),
            "--tls-cert",
            &file("server.pem"),
            "--tls-key",
            &file("server.key"),
            "--client-ca",
            &file("ca.pem"),
        ],
        "warn,baton_host=debug",
    )
    .await;
    assert!(host.url.starts_with("tls://127.0.0.1:"), "{}", host.url);
    host
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_reaches_build_box_example_with_server_name_for_each_client() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let bob = make_pki(&pki).await;
    let mut host = serve(dir.path(), &pki).await;
    let url = host.url.clone();

    for who in ["client", "bob"] {
        let (status, stdout, stderr) = baton_as(
            &pki,
            &url,
            Some(SERVER_NAME),
            who,
            &["create", "--name", who],
        )
        .await;
        assert!(status.success(), "{who}: {stderr}");
        let id = stdout.trim().to_owned();
        assert_eq!(id.len(), 36, "{who}: {stdout:?}");
        let (status, stdout, stderr) =
            baton_as(&pki, &url, Some(SERVER_NAME), who, &["sessions"]).await;
        assert!(status.success(), "{who}: {stderr}");
        // The table shows ids shortened to 8 characters.
        assert!(stdout.contains(&id[..8]), "{who}: {stdout}");
    }

    // The host saw bob's certificate under the fingerprint `certs --client` printed.
    let log = host.log.as_mut().unwrap();
    let seen = guard("bob's connection in the host log", async {
        loop {
            let line = log.next_line().await.unwrap().expect("the log ended");
            if line.contains("client connected") && line.contains("CN=bob") {
                return line;
            }
        }
    })
    .await;
    assert!(seen.contains(&bob), "{bob} not in {seen}");

    // BATON_SERVER_NAME does what --server-name does.
    let mut cmd = Command::new(baton());
    cmd.args(["--connect", &url, "--ca"])
        .arg(pki.join("ca.pem"))
        .arg("--cert")
        .arg(pki.join("bob.pem"))
        .arg("--key")
        .arg(pki.join("bob.key"))
        .arg("sessions")
        .env("BATON_SERVER_NAME", SERVER_NAME);
    let (status, _, stderr) = run("baton with BATON_SERVER_NAME", &mut cmd).await;
    assert!(status.success(), "{stderr}");

    // Without --server-name the certificate does not name 127.0.0.1: one clear line.
    for (name, why) in [
        (None, "127.0.0.1"),
        (Some("other-box.example"), "other-box"),
    ] {
        let (status, stdout, stderr) = baton_as(&pki, &url, name, "bob", &["sessions"]).await;
        assert_eq!(status.code(), Some(3), "{stdout}{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
        for part in ["TLS handshake", "not valid for name", why, "--server-name"] {
            assert!(stderr.contains(part), "{part:?} missing: {stderr}");
        }
    }
    assert!(host.terminate().await.success());
}

/// What a newcomer does after the README's remote section: one profile in
/// `$XDG_CONFIG_HOME/baton/config.toml` (paths relative to the file, the tunnel's server name),
/// then plain `baton create` and `baton attach NAME` with no connection flags, and the terminal
/// UI works over mutual TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_alone_attaches_the_terminal_ui_over_mutual_tls() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    make_pki(&pki).await;
    let host = serve(dir.path(), &pki).await;
    let config = dir.path().join("baton");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!(
            "default_profile = \"build-box\"\n\n[profiles.build-box]\nconnect = \"{}\"\n\
             server_name = \"{SERVER_NAME}\"\nca = \"../pki/ca.pem\"\n\
             cert = \"../pki/bob.pem\"\nkey = \"../pki/bob.key\"\n",
            host.url
        ),
    )
    .unwrap();

    let mut create = Command::new(baton());
    create
        .args(["create", "--name", "remote"])
        .env("XDG_CONFIG_HOME", dir.path())
        .env_remove("BATON_CONNECT")
        .env_remove("BATON_PROFILE")
        .env_remove("BATON_SERVER_NAME");
    let (status, stdout, stderr) = run("baton create with the profile", &mut create).await;
    assert!(status.success(), "{stderr}");
    assert_eq!(stdout.trim().len(), 36, "a session id: {stdout:?}");

    let tmux = Tmux::new();
    let state = dir.path().join("state");
    let pane = tmux.attach(
        "remote",
        &[
            ("XDG_CONFIG_HOME", dir.path()),
            ("XDG_STATE_HOME", state.as_path()),
        ],
        &["attach", "remote"],
    );
    pane.wait_for("● connected").await;
    assert!(
        pane.status_line().contains("remote"),
        "{}",
        pane.status_line()
    );
    pane.submit("hello over tls");
    pane.wait_for("You said: hello over tls.").await;
    pane.wait_idle().await;
    pane.keys(&["C-d"]);
    assert_eq!(pane.exit_status().await, 0);
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certs_keep_keys_private_and_never_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    make_pki(&pki).await;
    assert_eq!(mode_of(&pki), 0o700);
    for key in ["ca.key", "server.key", "client.key", "bob.key"] {
        assert_eq!(mode_of(&pki.join(key)), 0o600, "{key}");
    }
    for cert in ["ca.pem", "server.pem", "client.pem", "bob.pem"] {
        assert_eq!(mode_of(&pki.join(cert)), 0o644, "{cert}");
    }
    let out = pki.display().to_string();
    let bob_pem = std::fs::read(pki.join("bob.pem")).unwrap();
    let refusals: [(&[&str], &str); 4] = [
        (
            &["--out", &out, "--client", "bob"],
            "bob.pem already exists",
        ),
        (&["--out", &out, "--client", "ca"], "ca.pem already exists"),
        (
            &["--out", &out, "--san", SERVER_NAME],
            "ca.pem already exists",
        ),
        (
            &[
                "--out",
                &dir.path().join("none").display().to_string(),
                "--client",
                "eve",
            ],
            "ca.pem not found",
        ),
    ];
    for (args, expected) in refusals {
        let (status, _, stderr) = certs(args).await;
        assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read(pki.join("bob.pem")).unwrap(), bob_pem);
    assert!(!PathBuf::from(format!("{out}/eve.pem")).exists());

    // Names that are not plain file names are usage errors, before anything is read.
    for bad in ["../eve", ".eve", "eve/x", ""] {
        let (status, _, stderr) = certs(&["--out", &out, "--client", bad]).await;
        assert_eq!(status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(
            stderr.starts_with("error: invalid value") && stderr.contains("'--client <NAME>'"),
            "{stderr}"
        );
    }

    // A CA key others can read is refused rather than used.
    let ca_key = pki.join("ca.key");
    std::fs::set_permissions(&ca_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (status, _, stderr) = certs(&["--out", &out, "--client", "carol"]).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("chmod 600"), "{stderr}");
}
