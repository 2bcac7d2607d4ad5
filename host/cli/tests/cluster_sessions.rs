//! The fleet's session directory and `baton.cluster` against a real etcd (Debian's `etcd`,
//! started per test on loopback by `baton_testkit::etcd`; without it these tests report
//! SKIPPED unless `BATON_REQUIRE_ETCD=1`): records written with the create and deleted with
//! the remove, a name unique per owner fleet-wide, reconciling at start, `locate` and `list`
//! through another host, what a caller may not see, and a killed host's sessions.
//!
//! Hosts are driven with the `baton` client library and CLI; etcd is read as another party
//! would. Waiting is on etcd's own events; timeouts only guard against hangs.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::path::Path;
use std::time::Duration;

use baton_client::{Client as BatonClient, ClientConfig, Endpoint, RequestError};
use baton_host::cluster::keys::{host_key, session_key};
use baton_host::cluster::record::{self, SessionRecord};
use baton_protocol::chord::ServiceCall;
use baton_protocol::{Map, ServerId, Value};
use baton_testkit::etcd::Etcd;
use common::fleet::{CALM_TTL_SECS, deleted, etcd_client, get, serve_in_fleet};
use common::state::{guard, guard_within};
use common::{HostProcess, cli};
use etcd_client::Client;

/// The lease TTL of the host killed in the expiry test, the shortest accepted.
const TTL_SECS: u64 = 2;
/// A host on a Unix socket in `dir` with its sessions in `dir/sessions`, in the fleet of
/// `etcd`, with a lease of `ttl` seconds and `extra` flags.
async fn serve(dir: &Path, etcd: &Etcd, ttl: u64, extra: &[&str]) -> HostProcess {
    serve_in_fleet(dir, "sock", etcd, ttl, extra).await
}

async fn connect(endpoint: Endpoint) -> BatonClient {
    guard("connect", BatonClient::connect(ClientConfig::new(endpoint)))
        .await
        .unwrap()
}

async fn connect_unix(host: &HostProcess) -> BatonClient {
    connect(Endpoint::Unix(host.socket())).await
}

/// `service.member(args)` on the host `client` is connected to.
async fn call(
    client: &BatonClient,
    service: &str,
    member: &str,
    args: Vec<Value>,
) -> Result<Value, RequestError> {
    guard(
        member,
        client.request(
            client.server_target(),
            ServiceCall::new(service, member, args).into_value(),
        ),
    )
    .await
    .map(baton_client::Reply::into_value)
}

/// `baton.cluster` `list`: the sessions and the stale flag.
async fn list(client: &BatonClient) -> (Vec<Map>, bool) {
    let v = call(client, "baton.cluster", "list", vec![]).await.unwrap();
    let m = v.as_map().unwrap();
    let sessions = m
        .get("sessions")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|s| s.as_map().unwrap().clone())
        .collect();
    (sessions, m.get("stale") == Some(&Value::from(true)))
}

async fn locate(client: &BatonClient, query: &str) -> Result<Map, RequestError> {
    call(client, "baton.cluster", "locate", vec![Value::from(query)])
        .await
        .map(|v| v.as_map().unwrap().clone())
}

/// `pi.session-management` `create` named `name` → the new id.
async fn create(client: &BatonClient, name: &str) -> Result<String, RequestError> {
    let mut options = Map::new();
    options.insert("name", Value::from(name));
    let v = call(
        client,
        "pi.session-management",
        "create",
        vec![Value::Map(options)],
    )
    .await?;
    Ok(text(v.as_map().unwrap(), "sessionId"))
}

fn text(m: &Map, key: &str) -> String {
    m.get(key).and_then(Value::as_str).unwrap().to_owned()
}

fn strings(m: &Map, key: &str) -> Vec<String> {
    m.get(key)
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

fn entry<'a>(sessions: &'a [Map], id: &str) -> Option<&'a Map> {
    sessions.iter().find(|s| text(s, "sessionId") == id)
}

async fn record_of(etcd: &mut Client, server_id: &str, id: &str) -> Option<SessionRecord> {
    get(etcd, &session_key(server_id, id))
        .await
        .0
        .map(|v| record::decode(&v).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_created_on_b_is_listed_and_located_through_a_its_name_is_taken_fleet_wide_and_remove_deletes_its_record()
 {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve(dir_a.path(), &etcd, CALM_TTL_SECS, &[]).await;
    let b = serve(dir_b.path(), &etcd, CALM_TTL_SECS, &[]).await;
    let (via_a, via_b) = (connect_unix(&a).await, connect_unix(&b).await);

    let id = create(&via_b, "build-42").await.unwrap();
    let mut etcd = etcd_client(&etcd).await;
    let rec = record_of(&mut etcd, &b.server_id, &id).await.unwrap();
    assert_eq!(
        (rec.server_id.as_str(), rec.name.as_deref()),
        (b.server_id.as_str(), Some("build-42"))
    );
    assert!(rec.owner.is_some(), "the creating identity is recorded");

    let (sessions, stale) = list(&via_a).await;
    assert!(!stale);
    let listed = entry(&sessions, &id).expect("B's session listed through A");
    assert_eq!(text(listed, "serverId"), b.server_id);
    assert_eq!(strings(listed, "endpoints"), std::slice::from_ref(&b.url));
    assert_eq!(listed.get("live"), Some(&Value::from(true)));

    let found = locate(&via_a, "build-42").await.unwrap();
    assert_eq!(
        (text(&found, "sessionId"), text(&found, "serverId")),
        (id.clone(), b.server_id.clone())
    );
    assert_eq!(strings(&found, "endpoints"), std::slice::from_ref(&b.url));
    assert_eq!(
        text(&locate(&via_a, &id[..8]).await.unwrap(), "sessionId"),
        id,
        "by prefix"
    );

    // The same owner (this uid) on A: refused, and no file was written there.
    let refused = create(&via_a, "build-42").await.unwrap_err();
    assert_eq!(refused.code(), Some("invalid_request"), "{refused}");
    assert!(refused.to_string().contains("is taken"), "{refused}");
    let (status, out, err) = cli(&a.url, &["sessions"]).await;
    assert!(status.success(), "{err}");
    // The fleet's table through A: B's one session of that name, nothing created on A.
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("build-42")).collect();
    assert_eq!(rows.len(), 1, "nothing created on A: {out}");
    assert!(rows[0].contains(&b.server_id[..8]), "B's: {out}");

    // The catalogue names the service.
    let catalogue = call(&via_a, "$chord.service", "catalogue", vec![])
        .await
        .unwrap();
    assert!(format!("{catalogue:?}").contains("baton.cluster"));

    let (status, _, err) = cli(&b.url, &["remove", &id]).await;
    assert!(status.success(), "{err}");
    assert_eq!(record_of(&mut etcd, &b.server_id, &id).await, None);
    let (sessions, _) = list(&via_a).await;
    assert!(entry(&sessions, &id).is_none(), "gone from the fleet list");
    // The name is free again, fleet-wide.
    create(&via_a, "build-42").await.unwrap();

    via_a.close().await;
    via_b.close().await;
    assert!(a.terminate().await.success());
    assert!(b.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_after_its_journals_changed_offline_reconciles_its_records() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let host = serve(dir.path(), &etcd, CALM_TTL_SECS, &[]).await;
    let client = connect_unix(&host).await;
    let (kept, gone, unrecorded) = (
        create(&client, "kept").await.unwrap(),
        create(&client, "gone").await.unwrap(),
        create(&client, "unrecorded").await.unwrap(),
    );
    client.close().await;
    let server_id = host.server_id.clone();
    assert!(host.terminate().await.success());

    // Offline: one journal deleted (its record is now an orphan), one record deleted (its
    // journal is now missing from etcd). Another host's record is not this host's to touch.
    std::fs::remove_file(dir.path().join(format!("sessions/{gone}.jsonl"))).unwrap();
    let mut etcd_c = etcd_client(&etcd).await;
    guard(
        "etcd delete",
        Box::pin(etcd_c.delete(session_key(&server_id, &unrecorded), None)),
    )
    .await
    .unwrap();
    let other = ServerId::from_random_bytes([9; 16]).to_string();
    let foreign = format!(
        "{{\"v\":1,\"server_id\":\"{other}\",\"session_id\":\"x\",\"created\":\"2026-12-02T00:00:00.000Z\"}}"
    );
    guard(
        "etcd put",
        Box::pin(etcd_c.put(session_key(&other, "x"), foreign, None)),
    )
    .await
    .unwrap();

    let host = Box::pin(HostProcess::start_logged(
        &[
            "--listen",
            &format!("unix://{}", dir.path().join("sock").display()),
            "--sessions-dir",
            &dir.path().join("sessions").display().to_string(),
            "--cluster",
            etcd.url(),
            "--cluster-lease-secs",
            &CALM_TTL_SECS.to_string(),
        ],
        "warn,baton_host_cli=info,baton_host=info",
    ))
    .await;
    assert!(record_of(&mut etcd_c, &server_id, &kept).await.is_some());
    assert_eq!(
        record_of(&mut etcd_c, &server_id, &gone).await,
        None,
        "orphan deleted"
    );
    let added = record_of(&mut etcd_c, &server_id, &unrecorded)
        .await
        .expect("missing record added");
    assert_eq!(added.name.as_deref(), Some("unrecorded"));
    assert!(
        get(&mut etcd_c, &session_key(&other, "x"))
            .await
            .0
            .is_some(),
        "another server id's record is left alone"
    );
    // The orphan's name is free again; the re-added one's is held.
    let client = connect_unix(&host).await;
    create(&client, "gone").await.unwrap();
    assert!(create(&client, "unrecorded").await.is_err());
    client.close().await;
    let mut host = host;
    let log = host.log.take().unwrap();
    assert!(host.terminate().await.success());
    let mut log = log;
    let mut counted = false;
    while let Some(line) = log.next_line().await.unwrap() {
        if line.contains("reconciled") {
            assert!(
                line.contains("added=1") && line.contains("deleted=1"),
                "{line}"
            );
            counted = true;
        }
    }
    assert!(counted, "the start logs its counts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_caller_may_not_see_is_not_found_by_locate_and_absent_from_list() {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The TCP listener's peers may create (and see what they create) and see one session
    // that does not exist: nothing of anyone else's.
    let policy = dir.path().join("access.toml");
    std::fs::write(
        &policy,
        "[[grant]]\nrole = \"operator\"\ntcp = true\nsessions = [\"00000000-0000-4000-8000-000000000000\"]\n",
    )
    .unwrap();
    let mut host = serve(
        dir.path(),
        &etcd,
        CALM_TTL_SECS,
        &[
            "--listen",
            "tcp://127.0.0.1:0",
            "--access",
            &policy.display().to_string(),
        ],
    )
    .await;
    let tcp_line = guard("second listening line", host.lines.next_line())
        .await
        .unwrap()
        .unwrap();
    let tcp_url = tcp_line.split(' ').nth(1).unwrap().to_owned();
    let owner = connect_unix(&host).await;
    let secret = create(&owner, "secret").await.unwrap();

    let stranger = connect(tcp_url.parse().unwrap()).await;
    let own = create(&stranger, "mine").await.unwrap();
    let (sessions, _) = list(&stranger).await;
    assert!(entry(&sessions, &secret).is_none(), "invisible: not listed");
    assert!(entry(&sessions, &own).is_some(), "its own: listed");
    for query in [secret.as_str(), "secret", &secret[..8]] {
        let e = locate(&stranger, query).await.unwrap_err();
        assert_eq!(e.code(), Some("session_not_found"), "{query}: {e}");
    }
    assert_eq!(
        text(&locate(&stranger, "mine").await.unwrap(), "sessionId"),
        own
    );
    // The host's own account sees both.
    let (sessions, _) = list(&owner).await;
    assert!(entry(&sessions, &secret).is_some() && entry(&sessions, &own).is_some());

    stranger.close().await;
    owner.close().await;
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_of_b_its_sessions_are_listed_not_live_and_locate_answers_busy_within_the_ttl_plus_2_s()
 {
    let Some(etcd) = Etcd::start_or_skip() else {
        return;
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve(dir_a.path(), &etcd, CALM_TTL_SECS, &[]).await;
    let mut b = serve(dir_b.path(), &etcd, TTL_SECS, &[]).await;
    let via_b = connect_unix(&b).await;
    let id = create(&via_b, "on-b").await.unwrap();
    via_b.close().await;
    let b_id = ServerId::parse(&b.server_id).unwrap();
    let mut etcd_c = etcd_client(&etcd).await;

    b.signal(rustix::process::Signal::KILL);
    guard("host exit", b.child.wait()).await.unwrap();
    let killed = tokio::time::Instant::now();
    guard_within(
        Duration::from_secs(TTL_SECS + 2),
        "member record expiry",
        Box::pin(deleted(&mut etcd_c, &host_key(&b_id))),
    )
    .await;
    let via_a = connect_unix(&a).await;
    let (sessions, _) = list(&via_a).await;
    let listed = entry(&sessions, &id).expect("a dead host's sessions stay listed");
    assert_eq!(listed.get("live"), Some(&Value::from(false)));
    assert_eq!(text(listed, "serverId"), b.server_id);
    let e = locate(&via_a, "on-b").await.unwrap_err();
    assert_eq!(e.code(), Some("busy"), "retryable: {e}");
    assert!(e.to_string().contains("not live"), "{e}");
    println!(
        "B's sessions not live {:?} after kill -9 (TTL {TTL_SECS} s)",
        killed.elapsed()
    );
    via_a.close().await;
    assert!(a.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_etcd_is_down_list_answers_the_last_view_marked_stale_and_fresh_again_once_it_is_back()
 {
    let Some(mut etcd) = Etcd::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut host = Box::pin(HostProcess::start_logged(
        &[
            "--listen",
            &format!("unix://{}", dir.path().join("sock").display()),
            "--sessions-dir",
            &dir.path().join("sessions").display().to_string(),
            "--cluster",
            etcd.url(),
            "--cluster-lease-secs",
            "3",
        ],
        "warn,baton_host::cluster=info",
    ))
    .await;
    // A connection opened before: a paused host refuses new ones, not this one.
    let client = connect_unix(&host).await;
    let id = create(&client, "before").await.unwrap();
    let (sessions, stale) = list(&client).await;
    assert!(!stale && entry(&sessions, &id).is_some());

    etcd.kill();
    logged(&mut host, "taking no new connections or sessions").await;
    let (sessions, stale) = list(&client).await;
    assert!(stale, "etcd unreachable: the view may be old");
    assert!(entry(&sessions, &id).is_some(), "the last view read");

    etcd.restart().unwrap();
    logged(&mut host, "taking new work again").await;
    let (sessions, stale) = list(&client).await;
    assert!(!stale && entry(&sessions, &id).is_some());
    client.close().await;
    assert!(host.terminate().await.success());
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
