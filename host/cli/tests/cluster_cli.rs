//! The `baton` CLI on a fleet, through the real binary against two hosts sharing a real etcd
//! (Debian's `etcd`, started per test on loopback by `baton_testkit::etcd`; without it these
//! tests report SKIPPED unless `BATON_REQUIRE_ETCD=1`): `sessions` lists the fleet with each
//! session's host, `prompt`, `watch` and `remove` of a session on B, named through A,
//! reach B, a `watch` through A follows B back at a new address, and `create --on` places
//! by label.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::path::Path;
use std::process::Stdio;

use baton_protocol::Value;
use baton_testkit::etcd::Etcd;
use common::fleet::{CALM_TTL_SECS, serve_in_fleet};
use common::{HostProcess, baton, cli, until};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// A host on a Unix socket in `dir` with its sessions in `dir/sessions`, in `etcd`'s fleet.
async fn serve(dir: &Path, etcd: &Etcd) -> HostProcess {
    serve_at(dir, "sock", etcd).await
}

/// As [`serve`], listening on `dir/socket` (a socket path, or a directory for a socket
/// named `<server-id>.sock` in it).
async fn serve_at(dir: &Path, socket: &str, etcd: &Etcd) -> HostProcess {
    serve_with(dir, socket, etcd, &[]).await
}

/// As [`serve_at`], with `extra` flags.
async fn serve_with(dir: &Path, socket: &str, etcd: &Etcd, extra: &[&str]) -> HostProcess {
    serve_in_fleet(dir, socket, etcd, CALM_TTL_SECS, extra).await
}

/// `baton create --name NAME --cwd CWD` through `url` → the new session id.
async fn create_in(url: &str, name: &str, cwd: &Path) -> String {
    let cwd = cwd.display().to_string();
    let (status, out, err) = cli(url, &["create", "--name", name, "--cwd", &cwd]).await;
    assert!(status.success(), "create: {err}");
    out.trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_through_a_lists_a_session_created_on_b_with_bs_host_and_a_local_one_with_as() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve(dir_a.path(), &etcd).await;
    let b = serve(dir_b.path(), &etcd).await;
    let on_b = create_in(&b.url, "on-b", dir_b.path()).await;
    let on_a = create_in(&a.url, "on-a", dir_a.path()).await;

    let (status, out, err) = cli(&a.url, &["sessions"]).await;
    assert!(status.success(), "{err}");
    assert!(err.is_empty(), "no stale warning: {err}");
    let header = out.lines().next().unwrap();
    assert!(header.contains("HOST"), "{out}");
    let row = |id: &str| {
        out.lines()
            .find(|l| l.starts_with(&id[..8]))
            .unwrap_or_else(|| panic!("{id} listed: {out}"))
            .to_owned()
    };
    assert!(row(&on_b).contains(&b.server_id[..8]), "{out}");
    assert!(row(&on_a).contains(&a.server_id[..8]), "{out}");
    assert!(
        row(&on_a).contains("stored"),
        "A's own row keeps its phase: {out}"
    );
    assert!(!out.contains("unavailable"), "{out}");

    let (status, out, err) = cli(&a.url, &["--json", "sessions"]).await;
    assert!(status.success(), "{err}");
    let rows = Value::from_json(out.trim()).unwrap();
    let rows = rows.as_array().unwrap();
    let b_row = rows
        .iter()
        .find(|r| r.as_map().unwrap().get("id") == Some(&Value::from(on_b.as_str())))
        .expect("B's session in the JSON list");
    let b_row = b_row.as_map().unwrap();
    assert_eq!(
        b_row.get("serverId"),
        Some(&Value::from(b.server_id.as_str()))
    );
    assert_eq!(b_row.get("live"), Some(&Value::from(true)));
    assert_eq!(b_row.get("name"), Some(&Value::from("on-b")));

    assert!(a.terminate().await.success());
    assert!(b.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_watch_and_remove_by_name_through_a_reach_the_session_on_b() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve(dir_a.path(), &etcd).await;
    let b = serve(dir_b.path(), &etcd).await;
    let id = create_in(&b.url, "far", dir_b.path()).await;

    // The turn runs on B: `pwd` answers B's session directory, not A's.
    let (status, out, err) = cli(&a.url, &["prompt", "far", "run `pwd`"]).await;
    assert!(status.success(), "prompt through A: {err}\n{out}");
    let b_cwd = dir_b.path().display().to_string();
    assert!(out.contains(&format!("│ {b_cwd}")), "B's reply: {out}");
    let (status, out, _) = cli(&b.url, &["sessions"]).await;
    assert!(status.success());
    assert!(
        out.lines()
            .any(|l| l.starts_with(&id[..8]) && l.contains("idle")),
        "B opened it for the turn: {out}"
    );

    // `watch` by prefix through A shows B's transcript.
    let mut watch = Command::new(baton())
        .args(["--connect", &a.url, "watch", &id[..8]])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    until(&mut lines, &b_cwd).await;
    watch.kill().await.unwrap();

    let (status, _, err) = cli(&a.url, &["remove", "far"]).await;
    assert!(status.success(), "remove through A: {err}");
    let (status, out, _) = cli(&b.url, &["sessions"]).await;
    assert!(status.success());
    assert!(!out.contains(&id[..8]), "removed on B: {out}");
    assert!(
        !dir_b.path().join(format!("sessions/{id}.jsonl")).exists(),
        "B's journal deleted"
    );

    assert!(a.terminate().await.success());
    assert!(b.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_through_a_follows_b_restarted_at_another_address() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve(dir_a.path(), &etcd).await;
    for d in ["one", "two"] {
        std::fs::create_dir(dir_b.path().join(d)).unwrap();
    }
    let b = serve_at(dir_b.path(), "one", &etcd).await;
    let b_id = b.server_id.clone();
    create_in(&b.url, "roaming", dir_b.path()).await;

    let mut watch = Command::new(baton())
        .args(["--connect", &a.url, "watch", "roaming"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let (status, out, err) = cli(&a.url, &["prompt", "roaming", "run `echo before`"]).await;
    assert!(status.success(), "{err}\n{out}");
    until(&mut lines, "│ before").await;

    // B stops (its lease revoked), then comes back with the same directory (so the same
    // server id) on another socket; the first one is gone.
    let first_socket = b.socket();
    assert!(b.terminate().await.success());
    let b = serve_at(dir_b.path(), "two", &etcd).await;
    assert_eq!(b.server_id, b_id);
    assert_ne!(b.socket(), first_socket);
    assert!(!first_socket.exists(), "nothing answers at the old address");

    // The watch found B again through A: a turn taken now shows in it.
    let (status, out, err) = cli(&a.url, &["prompt", "roaming", "run `echo after`"]).await;
    assert!(
        status.success(),
        "prompt through A after B moved: {err}\n{out}"
    );
    until(&mut lines, "│ after").await;
    watch.kill().await.unwrap();

    assert!(a.terminate().await.success());
    assert!(b.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_on_a_label_through_a_places_the_session_on_the_host_that_carries_it() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve_with(dir_a.path(), "sock", &etcd, &["--label", "zone=eu"]).await;
    let b = serve_with(
        dir_b.path(),
        "sock",
        &etcd,
        &["--label", "gpu=a100", "--label", "zone=eu"],
    )
    .await;

    let cwd = dir_b.path().display().to_string();
    let (status, out, err) = cli(
        &a.url,
        &[
            "create", "--on", "gpu=a100", "--name", "placed", "--cwd", &cwd,
        ],
    )
    .await;
    assert!(status.success(), "create --on through A: {err}");
    let id = out.trim().to_owned();
    assert!(
        dir_b.path().join(format!("sessions/{id}.jsonl")).exists(),
        "the journal is B's"
    );
    let (_, out, _) = cli(&b.url, &["sessions"]).await;
    assert!(out.contains(&id[..8]), "{out}");

    // Both carry zone=eu: either may take it, and it is created there.
    let (status, _, err) = cli(&a.url, &["create", "--on", "zone=eu"]).await;
    assert!(status.success(), "{err}");

    let (status, _, err) = cli(&a.url, &["create", "--on", "gpu=h100"]).await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("no live host") && err.contains("gpu=h100"),
        "{err}"
    );
    let (status, _, err) = cli(&a.url, &["create", "--on", "gpu"]).await;
    assert_eq!(status.code(), Some(2), "{err}");

    assert!(a.terminate().await.success());
    assert!(b.terminate().await.success());
}
