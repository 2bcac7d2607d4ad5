//! The `baton` command line against a real `baton-host serve`: sessions addressed by id,
//! prefix or name; the `sessions` table (and, against a host serving only a directory, the
//! ids a baton host never makes); profiles from the config file; and discovery with two local
//! hosts.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::path::Path;
use std::process::ExitStatus;

use baton_protocol::Value;
use common::directory::DirectoryHost;
use common::{HostProcess, baton, cli, create, run};
use tokio::process::Command;

/// `baton attach ADDRESS` with stdin closed: attaches, says to which session, and exits.
async fn attach(url: &str, address: &str, json: bool) -> (ExitStatus, String, String) {
    let mut args = vec!["attach", address];
    if json {
        args.insert(0, "--json");
    }
    cli(url, &args).await
}

/// `baton` isolated from the user's config and runtime directories.
fn isolated(config_home: &Path) -> Command {
    let mut cmd = Command::new(baton());
    cmd.env("XDG_CONFIG_HOME", config_home)
        .env("XDG_RUNTIME_DIR", config_home.join("no-runtime"))
        .env_remove("BATON_CONNECT")
        .env_remove("BATON_PROFILE")
        .env_remove("BATON_CONFIG")
        .env_remove("BATON_SERVER_ID");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_addressed_by_id_unique_prefix_or_name() {
    let (_dir, host) = HostProcess::in_temp_dir().await;
    let url = host.url.clone();
    let alpha = create(&url, "alpha").await;
    let twin1 = create(&url, "twin").await;
    let twin2 = create(&url, "twin").await;

    for address in [alpha.as_str(), "alpha", &alpha[..8], &alpha[..4]] {
        // Random ids: a 4-digit prefix may be shared by chance; skip that case then.
        if address.len() == 4 && [&twin1, &twin2].iter().any(|t| t.starts_with(address)) {
            continue;
        }
        let (status, out, err) = attach(&url, address, false).await;
        assert!(status.success(), "{address}: {err}");
        assert!(
            out.contains(&format!("[attached to {alpha};")),
            "{address} resolves to alpha: {out}"
        );
    }

    // Two sessions share a name: the error lists both, with exit status 4.
    let (status, _, err) = attach(&url, "twin", false).await;
    assert_eq!(status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("{twin1} (twin)")) && err.contains(&format!("{twin2} (twin)")),
        "{err}"
    );
    let (status, _, err) = attach(&url, "twin", true).await;
    assert_eq!(status.code(), Some(4));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(r#""code":"session_ambiguous""#), "{err}");

    // Too short to be a prefix, and nothing at all.
    let (status, _, err) = attach(&url, &alpha[..3], false).await;
    assert_eq!(status.code(), Some(4), "{err}");
    assert!(err.contains("at least 4 hex digits"), "{err}");
    let (status, _, err) = attach(&url, "nobody", false).await;
    assert_eq!(status.code(), Some(4), "{err}");
    assert!(err.contains("no session has"), "{err}");

    // `remove` resolves too: by name.
    let (status, _, err) = cli(&url, &["remove", "alpha"]).await;
    assert!(status.success(), "{err}");
    let (status, out, _) = cli(&url, &["--json", "sessions"]).await;
    assert!(status.success());
    assert!(!out.contains(&alpha) && out.contains(&twin1), "{out}");
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_table_has_a_header_short_ids_and_fits_100_columns() {
    let (_dir, host) = HostProcess::in_temp_dir().await;
    let url = host.url.clone();
    let long_name =
        "a-session-name-long-enough-to-push-every-other-column-off-the-edge-of-a-terminal";
    let id = create(&url, long_name).await;

    let (status, out, err) = cli(&url, &["sessions"]).await;
    assert!(status.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["ID", "NAME", "PHASE", "MODEL", "UPDATED", "CWD"]);
    for line in &lines {
        assert!(line.chars().count() <= 100, "wider than 100: {line:?}");
    }
    let row = lines[1];
    assert!(row.starts_with(&format!("{}  ", &id[..8])), "{row}");
    assert!(!row.contains(&id), "the id is shortened: {row}");
    assert!(row.contains("a-session-name") && row.contains('…'), "{row}");

    // --json: one array with the full entries.
    let (status, out, _) = cli(&url, &["--json", "sessions"]).await;
    assert!(status.success());
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with('[') && out.contains(&id) && out.contains(long_name),
        "{out}"
    );

    let (status, out, _) = cli(&url, &["models"]).await;
    assert!(status.success());
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["MODEL", "DEFAULT", "NAME"], "{out}");
    assert!(out.contains("scripted/default"), "{out}");
    assert!(host.terminate().await.success());
}

/// The cells of the `sessions` table's rows (the header dropped), split at runs of spaces.
fn table_rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_session_not_yet_opened_is_listed_as_stored_and_json_keeps_the_wire_phase() {
    let (_dir, host) = HostProcess::in_temp_dir().await;
    let url = host.url.clone();
    let id = create(&url, "fresh").await;

    let (status, out, err) = cli(&url, &["sessions"]).await;
    assert!(status.success(), "{err}");
    let rows = table_rows(&out);
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0][..3], [&id[..8], "fresh", "stored"], "{out}");
    let (status, out, _) = cli(&url, &["--json", "sessions"]).await;
    assert!(status.success());
    assert!(out.contains(r#""phase":"closed""#), "{out}");

    // Once opened (an attach that exits at once leaves it open until its idle timeout), it
    // is idle.
    let (status, _, err) = attach(&url, &id, false).await;
    assert!(status.success(), "{err}");
    let (_, out, _) = cli(&url, &["sessions"]).await;
    assert_eq!(table_rows(&out)[0][2], "idle", "{out}");
    assert!(host.terminate().await.success());
}

/// A directory row as a host lists it.
fn directory_row(id: &str, phase: &str) -> Value {
    Value::from_json(&format!(
        r#"{{"id":"{id}","name":null,"cwd":"/w","createdAt":"2026-01-02T03:04:05.000Z",
            "updatedAt":"2026-01-02T03:04:05.000Z","phase":"{phase}","model":"m","attachedClients":0}}"#
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_table_shows_other_ids_whole_and_uuids_to_their_shortest_unique_prefix() {
    let dir = tempfile::tempdir().unwrap();
    // Upstream pi's test host names its sessions `session-1`, `session-2`; pi's own ids are
    // time-ordered UUIDs, which sessions made close together share most of.
    let ids = [
        "session-1",
        "session-2",
        "0197a3f2-1c4e-7000-8000-000000000001",
        "0197a3f2-1c4f-7000-8000-000000000002",
        "fedcba98-0000-4000-8000-000000000003",
    ];
    let rows = ids.iter().map(|id| directory_row(id, "closed")).collect();
    let (server, url) = DirectoryHost::serve(rows, dir.path()).await;

    let (status, out, err) = cli(&url, &["sessions"]).await;
    assert!(status.success(), "{err}");
    let shown: Vec<&str> = table_rows(&out).iter().map(|r| r[0]).collect();
    assert_eq!(
        shown,
        [
            "session-1",
            "session-2",
            "0197a3f2-1c4e",
            "0197a3f2-1c4f",
            "fedcba98"
        ],
        "{out}"
    );
    assert!(table_rows(&out).iter().all(|r| r[2] == "stored"), "{out}");
    // Each shown id addresses its own session: `attach` resolves it to the full id (and then
    // finds nothing to attach to on this host).
    for (shown, id) in shown.iter().zip(ids) {
        let (status, _, err) = cli(&url, &["attach", shown]).await;
        assert_eq!(status.code(), Some(4), "{shown}: {err}");
        assert!(
            err.contains(&format!("unknown session {id:?}")),
            "{shown}: {err}"
        );
    }
    server.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_are_chosen_by_flag_env_or_default_and_flags_override_them() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostProcess::in_dir(dir.path()).await;
    let config_home = dir.path().join("config");
    std::fs::create_dir_all(config_home.join("baton")).unwrap();
    let dead = format!("unix://{}", dir.path().join("dead.sock").display());
    std::fs::write(
        config_home.join("baton/config.toml"),
        format!(
            "default_profile = \"good\"\n\
             [profiles.good]\nconnect = \"{}\"\n\
             [profiles.dead]\nconnect = \"{dead}\"\n",
            host.url
        ),
    )
    .unwrap();
    let models = |extra: &[&str], env: Option<(&str, &str)>| {
        let mut cmd = isolated(&config_home);
        cmd.args(extra).arg("models");
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        cmd
    };

    // The default profile (from $XDG_CONFIG_HOME/baton/config.toml) reaches the host.
    let (status, out, err) = run("default profile", &mut models(&[], None)).await;
    assert!(status.success(), "{err}");
    assert!(out.contains("scripted/default"), "{out}");
    // --profile and BATON_PROFILE select another: it cannot connect (exit 3, its socket named).
    for (what, mut cmd) in [
        ("--profile", models(&["--profile", "dead"], None)),
        (
            "BATON_PROFILE",
            models(&[], Some(("BATON_PROFILE", "dead"))),
        ),
    ] {
        let (status, _, err) = run(what, &mut cmd).await;
        assert_eq!(status.code(), Some(3), "{what}: {err}");
        assert!(err.contains("dead.sock"), "{what}: {err}");
    }
    // A flag overrides the profile's value.
    let (status, out, err) = run(
        "--connect over a profile",
        &mut models(&["--profile", "dead", "--connect", &host.url], None),
    )
    .await;
    assert!(status.success(), "{err}");
    assert!(out.contains("scripted/default"), "{out}");
    // An unknown profile names the known ones.
    let (status, _, err) = run("unknown profile", &mut models(&["--profile", "nope"], None)).await;
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("\"nope\"") && err.contains("dead, good"),
        "{err}"
    );
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_local_hosts_discovery_asks_which_one() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let start = |name: &'static str| {
        let sessions = dir.path().join(name).display().to_string();
        let runtime = runtime.clone();
        async move {
            HostProcess::start(
                &["--sessions-dir", &sessions],
                &[("XDG_RUNTIME_DIR", &runtime)],
            )
            .await
        }
    };
    let first = start("one").await;
    let second = start("two").await;
    assert_ne!(first.server_id, second.server_id);
    let config_home = dir.path().join("config");
    let discover = |extra: &[&str]| {
        let mut cmd = isolated(&config_home);
        cmd.env("XDG_RUNTIME_DIR", &runtime)
            .args(extra)
            .arg("models");
        cmd
    };

    let (status, out, err) = run("two hosts", &mut discover(&[])).await;
    assert_eq!(status.code(), Some(3), "{out}\n{err}");
    assert!(
        err.contains("2 baton hosts")
            && err.contains(&first.server_id)
            && err.contains(&second.server_id)
            && err.contains("--server-id")
            && err.contains("--connect"),
        "{err}"
    );
    let (status, _, err) = run("two hosts, --json", &mut discover(&["--json"])).await;
    assert_eq!(status.code(), Some(3));
    assert!(err.contains(r#""code":"several_hosts""#), "{err}");

    // --server-id picks one.
    let (status, out, err) = run(
        "--server-id",
        &mut discover(&["--server-id", &second.server_id]),
    )
    .await;
    assert!(status.success(), "{err}");
    assert!(out.contains("scripted/default"), "{out}");

    // With one of them gone, the other is found without asking.
    assert!(first.terminate().await.success());
    let (status, out, err) = run("one host left", &mut discover(&[])).await;
    assert!(status.success(), "{err}");
    assert!(out.contains("scripted/default"), "{out}");
    assert!(second.terminate().await.success());
}
