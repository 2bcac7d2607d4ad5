//! `baton-host serve --cluster` against a real etcd (Debian's `etcd`, started per test on
//! loopback by `baton_testkit::etcd`; without it these tests report SKIPPED unless
//! `BATON_REQUIRE_ETCD=1`): the member record, the refusal of a second owner of a server id,
//! the lease expiring with a killed host, and a clean shutdown revoking it.
//!
//! etcd is read here as another party would, with etcd-client. Waiting is on etcd's own
//! events (a watch from the revision read); timeouts only guard against hangs.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::path::Path;
use std::time::Duration;

use baton_host::cluster::keys::{host_key, owner_key};
use baton_host::cluster::record::{self, HolderRecord, MemberRecord};
use baton_protocol::ServerId;
use baton_testkit::etcd::Etcd;
use common::fleet::{CALM_TTL_SECS, deleted, etcd_client as client, get, serve_in_fleet};
use common::state::{guard, guard_within};
use common::{HOST, HostProcess, run};
use tokio::process::Command;

/// The lease TTL of the expiry test, the shortest accepted.
const TTL_SECS: u64 = 2;
/// A host on a Unix socket in `dir` with its sessions in `dir/sessions`, in the fleet of
/// `etcd`, with `extra` flags.
async fn serve(dir: &Path, etcd: &Etcd, extra: &[&str]) -> HostProcess {
    serve_with_ttl(dir, etcd, CALM_TTL_SECS, extra).await
}

/// As [`serve`], with a lease of `ttl` seconds.
async fn serve_with_ttl(dir: &Path, etcd: &Etcd, ttl: u64, extra: &[&str]) -> HostProcess {
    serve_in_fleet(dir, "sock", etcd, ttl, extra).await
}

fn id_of(host: &HostProcess) -> ServerId {
    ServerId::parse(&host.server_id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_cluster_registers_its_member_record_with_its_id_endpoints_and_labels() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host = serve(
        dir.path(),
        &etcd,
        &["--label", "gpu=a100", "--label", "zone=eu-1"],
    )
    .await;
    let id = id_of(&host);
    let mut etcd_client = client(&etcd).await;

    let (value, _) = get(&mut etcd_client, &host_key(&id)).await;
    let member: MemberRecord = record::decode(&value.expect("no member record")).unwrap();
    assert_eq!(member.v, 1);
    assert_eq!(member.server_id, host.server_id);
    assert_eq!(
        member.advertise,
        std::slice::from_ref(&host.url),
        "defaults to the bound listener"
    );
    assert_eq!(
        member.labels.iter().collect::<Vec<_>>(),
        [
            (&"gpu".to_owned(), &"a100".to_owned()),
            (&"zone".to_owned(), &"eu-1".to_owned())
        ]
    );

    let (value, _) = get(&mut etcd_client, &owner_key(&id)).await;
    let holder: HolderRecord = record::decode(&value.expect("no owner record")).unwrap();
    assert_eq!(holder.pid, host.child.id().unwrap());
    assert_eq!(holder.server_id, host.server_id);

    // Both under one lease, of the TTL asked for.
    let response = guard("etcd get", Box::pin(etcd_client.get(host_key(&id), None)))
        .await
        .unwrap();
    let lease = response.kvs()[0].lease();
    let response = guard("etcd get", Box::pin(etcd_client.get(owner_key(&id), None)))
        .await
        .unwrap();
    assert_eq!(response.kvs()[0].lease(), lease);
    let ttl = guard(
        "lease ttl",
        Box::pin(etcd_client.lease_time_to_live(lease, None)),
    )
    .await
    .unwrap();
    assert_eq!(ttl.granted_ttl(), i64::try_from(CALM_TTL_SECS).unwrap());
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_on_the_same_server_id_is_refused_with_one_line_naming_the_first() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let first = serve(dir.path(), &etcd, &[]).await;
    let pid = first.child.id().unwrap();

    // The same directory, and a copy of it elsewhere (its server-id file with it).
    let copy = tempfile::tempdir().unwrap();
    std::fs::create_dir(copy.path().join("sessions")).unwrap();
    std::fs::copy(
        dir.path().join("sessions/server-id"),
        copy.path().join("sessions/server-id"),
    )
    .unwrap();
    for (what, sessions) in [("same directory", dir.path()), ("a copy", copy.path())] {
        let sock = format!("unix://{}", copy.path().join("sock2").display());
        let sessions = sessions.join("sessions").display().to_string();
        let (status, out, err) = run(
            what,
            Command::new(HOST).env("RUST_LOG", "warn").args([
                "serve",
                "--listen",
                &sock,
                "--sessions-dir",
                &sessions,
                "--cluster",
                etcd.url(),
            ]),
        )
        .await;
        assert_eq!(status.code(), Some(1), "{what}: {err}");
        assert!(out.is_empty(), "{what}: nothing listened: {out:?}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(
            err.contains(&format!(
                "server id {} is already served by pid {pid} on ",
                first.server_id
            )),
            "{what}: {err}"
        );
        assert!(
            err.contains(
                &format!("({})", dir.path().join("sock").display()).replace('(', "(unix://")
            ),
            "{what}: names its endpoints: {err}"
        );
    }

    // Refused before the directory was opened: the copy was never locked.
    assert!(!copy.path().join("sessions/.lock").exists());

    // The first is untouched: still the owner, still serving.
    let mut etcd_client = client(&etcd).await;
    let (value, _) = get(&mut etcd_client, &owner_key(&id_of(&first))).await;
    let holder: HolderRecord = record::decode(&value.unwrap()).unwrap();
    assert_eq!(holder.pid, pid);
    let (status, _, err) = common::cli(&first.url, &["sessions"]).await;
    assert!(status.success(), "{err}");
    assert!(first.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_host_makes_its_keys_vanish_within_the_ttl_plus_2_s() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut host = serve_with_ttl(dir.path(), &etcd, TTL_SECS, &[]).await;
    let id = id_of(&host);
    let mut etcd_client = client(&etcd).await;
    assert!(get(&mut etcd_client, &host_key(&id)).await.0.is_some());

    host.signal(rustix::process::Signal::KILL);
    guard("host exit", host.child.wait()).await.unwrap();
    let killed = tokio::time::Instant::now();
    let limit = Duration::from_secs(TTL_SECS + 2);
    guard_within(
        limit,
        "member record expiry",
        Box::pin(deleted(&mut etcd_client, &host_key(&id))),
    )
    .await;
    guard_within(
        limit,
        "owner record expiry",
        Box::pin(deleted(&mut etcd_client, &owner_key(&id))),
    )
    .await;
    println!(
        "keys gone {:?} after kill -9 (TTL {TTL_SECS} s)",
        killed.elapsed()
    );

    // The id is free again: the same directory serves at once.
    let again = serve(dir.path(), &etcd, &[]).await;
    assert_eq!(again.server_id, id.to_string());
    assert!(again.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_revokes_the_lease_so_the_keys_are_gone_at_once() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A long TTL: keys still there after the exit could only be the lease not revoked.
    let host = serve_with_ttl(dir.path(), &etcd, 600, &[]).await;
    let id = id_of(&host);
    let mut etcd_client = client(&etcd).await;
    assert!(get(&mut etcd_client, &owner_key(&id)).await.0.is_some());

    assert!(host.terminate().await.success());
    assert_eq!(get(&mut etcd_client, &host_key(&id)).await.0, None);
    assert_eq!(get(&mut etcd_client, &owner_key(&id)).await.0, None);
}

/// Reads the host's log until a line contains `text`.
async fn logged(host: &mut HostProcess, text: &str) {
    let log = host.log.as_mut().unwrap();
    guard(text, async {
        while let Some(line) = log.next_line().await.unwrap() {
            if line.contains(text) {
                return;
            }
        }
        panic!("the host's log ended before {text:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_renew_stops_taking_new_work_and_resumes_when_etcd_is_back() {
    let Some(mut etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = format!("unix://{}", dir.path().join("sock").display());
    let sessions = dir.path().join("sessions").display().to_string();
    let mut host = Box::pin(HostProcess::start_logged(
        &[
            "--listen",
            &sock,
            "--sessions-dir",
            &sessions,
            "--cluster",
            etcd.url(),
            "--cluster-lease-secs",
            "3",
        ],
        "warn,baton_host::cluster=info",
    ))
    .await;
    let id = common::create(&host.url, "open-before").await;

    etcd.kill();
    logged(&mut host, "taking no new connections or sessions").await;
    let (status, _, err) = common::cli(&host.url, &["sessions"]).await;
    assert!(
        !status.success(),
        "a new connection is refused while paused"
    );
    assert!(err.contains("not taking new work"), "{err}");

    tokio::task::block_in_place(|| etcd.restart()).unwrap();
    logged(&mut host, "taking new work again").await;
    let (status, out, err) = common::cli(&host.url, &["sessions"]).await;
    assert!(status.success(), "{err}");
    assert!(out.contains(&id[..8]), "{out}");
    let mut etcd_client = client(&etcd).await;
    let (value, _) = get(&mut etcd_client, &owner_key(&id_of(&host))).await;
    assert!(value.is_some(), "the lease survived etcd's restart");
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_joins_an_etcd_that_requires_client_certificates_and_one_without_is_refused() {
    let pki = tempfile::tempdir().unwrap();
    let out = pki.path().join("pki");
    let out_arg = out.display().to_string();
    let (status, _, err) = run(
        "certs",
        Command::new(HOST).args(["certs", "--out", &out_arg]),
    )
    .await;
    assert!(status.success(), "{err}");
    let tls = baton_testkit::etcd::EtcdTls {
        cert: out.join("server.pem"),
        key: out.join("server.key"),
        ca: out.join("ca.pem"),
    };
    let Some(etcd) = Etcd::start_or_skip_with(Some(&tls)) else {
        return;
    };
    assert!(etcd.url().starts_with("https://127.0.0.1:"));
    let path = |name: &str| out.join(name).display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let host = serve(
        dir.path(),
        &etcd,
        &[
            "--cluster-ca",
            &path("ca.pem"),
            "--cluster-cert",
            &path("client.pem"),
            "--cluster-key",
            &path("client.key"),
        ],
    )
    .await;

    // Without a client certificate etcd refuses the handshake: one line, exit 1.
    let other = tempfile::tempdir().unwrap();
    let sock = format!("unix://{}", other.path().join("sock").display());
    let sessions = other.path().join("sessions").display().to_string();
    let (status, out, err) = run(
        "host without a client certificate",
        Command::new(HOST).env("RUST_LOG", "off").args([
            "serve",
            "--listen",
            &sock,
            "--sessions-dir",
            &sessions,
            "--cluster",
            etcd.url(),
            "--cluster-ca",
            &path("ca.pem"),
        ]),
    )
    .await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("cannot reach etcd at {}", etcd.url())),
        "{err}"
    );
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_lease_is_revoked_under_it_stops_with_one_line_and_exit_1() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = format!("unix://{}", dir.path().join("sock").display());
    let sessions = dir.path().join("sessions").display().to_string();
    let mut host = Box::pin(HostProcess::start_logged(
        &[
            "--listen",
            &sock,
            "--sessions-dir",
            &sessions,
            "--cluster",
            etcd.url(),
            "--cluster-lease-secs",
            "3",
        ],
        "off",
    ))
    .await;
    let id = id_of(&host);
    let mut etcd_client = client(&etcd).await;
    let response = guard("etcd get", Box::pin(etcd_client.get(owner_key(&id), None)))
        .await
        .unwrap();
    let lease = response.kvs()[0].lease();
    // Another party (an operator, an expiry during a partition) takes the lease away.
    guard("revoke", Box::pin(etcd_client.lease_revoke(lease)))
        .await
        .unwrap();

    let status = guard("host exit", host.child.wait()).await.unwrap();
    assert_eq!(status.code(), Some(1));
    let mut lines = Vec::new();
    let log = host.log.as_mut().unwrap();
    while let Some(line) = guard("host log", log.next_line()).await.unwrap() {
        lines.push(line);
    }
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("the fleet lease of server id {id} is gone")),
        "{lines:?}"
    );
}
