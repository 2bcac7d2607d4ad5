//! What the etcd suites share: a `baton-host serve --cluster` process, and etcd read as
//! another party would (etcd-client), waiting on etcd's own events.

use std::path::Path;

use baton_testkit::etcd::Etcd;
use etcd_client::{Client, EventType, WatchOptions};

use super::HostProcess;
use super::state::guard;

/// A lease long enough that a loaded machine never misses a renewal by the safety margin
/// (which would pause the host and refuse the test's own connections).
pub(crate) const CALM_TTL_SECS: u64 = 10;

/// A host listening on `dir/socket` (a socket path, or a directory for a socket named
/// `<server-id>.sock` in it) with its sessions in `dir/sessions`, in the fleet of `etcd`, with
/// a lease of `ttl` seconds and `extra` flags.
pub(crate) async fn serve_in_fleet(
    dir: &Path,
    socket: &str,
    etcd: &Etcd,
    ttl: u64,
    extra: &[&str],
) -> HostProcess {
    let sock = format!("unix://{}", dir.join(socket).display());
    let sessions = dir.join("sessions").display().to_string();
    let ttl = ttl.to_string();
    let mut args = vec![
        "--listen",
        &sock,
        "--sessions-dir",
        &sessions,
        "--cluster",
        etcd.url(),
        "--cluster-lease-secs",
        &ttl,
    ];
    args.extend_from_slice(extra);
    // Boxed: the host's start-up future is large.
    Box::pin(HostProcess::start(&args, &[])).await
}

/// An etcd client of `etcd`.
pub(crate) async fn etcd_client(etcd: &Etcd) -> Client {
    guard(
        "connect to etcd",
        Box::pin(Client::connect([etcd.url()], None)),
    )
    .await
    .unwrap()
}

/// The value of `key`, if any, and the revision it was read at.
pub(crate) async fn get(client: &mut Client, key: &str) -> (Option<Vec<u8>>, i64) {
    let response = guard("etcd get", Box::pin(client.get(key, None)))
        .await
        .unwrap();
    let revision = response.header().unwrap().revision();
    (
        response.kvs().first().map(|kv| kv.value().to_vec()),
        revision,
    )
}

/// Waits, on a watch from the revision read, until `key` is deleted.
pub(crate) async fn deleted(client: &mut Client, key: &str) {
    let (value, revision) = get(client, key).await;
    if value.is_none() {
        return;
    }
    let mut events = Box::pin(client.watch(
        key,
        Some(WatchOptions::new().with_start_revision(revision + 1)),
    ))
    .await
    .unwrap();
    while let Some(response) = events.message().await.unwrap() {
        if response
            .events()
            .iter()
            .any(|e| e.event_type() == EventType::Delete)
        {
            return;
        }
    }
    panic!("the watch of {key} ended");
}
