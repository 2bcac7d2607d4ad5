//! Load suite: a thousand concurrent `baton-client`s over one Unix socket against one
//! in-process server, each making many pipelined `test.echo` requests with a unique payload
//! while holding a `test.counter` subscription that the host keeps publishing to.
//!
//! Asserted: every request is answered exactly once with its own payload (none lost,
//! duplicated or misrouted; the host saw each call exactly once), no client sees an error or
//! loses its connection, and every replica converges to the host's final state. Reported
//! (never asserted): requests/s from wall time and peak memory (`VmHWM`).
//!
//! CI mode (default): 1,000 clients × 8 requests. Full mode:
//! `BATON_LOAD_FULL=1 cargo test -p baton-tests --test load -- --nocapture`
//! (1,000 clients × 200 requests); `BATON_LOAD_CLIENTS` / `BATON_LOAD_REQUESTS` override
//! either figure.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baton_client::{Client, ClientConfig, Endpoint, Reply, SubscriptionEvent};
use baton_protocol::chord::{ServiceCall, ServiceMode};
use baton_protocol::{Map, Value};
use baton_tests::host::TestHost;
use baton_tests::server::{TestServer, config};
use baton_tests::{server_id, vm_hwm_bytes, vm_rss_bytes};
use tokio::sync::{Barrier, Semaphore, mpsc, watch};
use tokio::task::JoinSet;

const MIB: f64 = 1024.0 * 1024.0;
/// Requests each client keeps in flight at once.
const LANES: usize = 4;
/// Connects (and handshakes) in progress at once, so the connection storm stays within the
/// listen backlog; every client stays connected once it is in.
const CONNECTING: usize = 128;
/// Guard for phases whose length grows with the number of clients (all connected, all
/// requests done).
const PHASE_GUARD: Duration = Duration::from_secs(300);
/// Guard for one wait (a connect, a reply, a convergence). Thousands of requests are in
/// flight at once, so on a starved machine one can queue for seconds: this only catches
/// hangs, and is well above any latency seen (the harness's 10 s guard is not).
const OP_GUARD: Duration = Duration::from_secs(120);

struct Plan {
    clients: usize,
    requests: usize,
    updates: usize,
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

impl Plan {
    fn from_env() -> Self {
        let full = std::env::var("BATON_LOAD_FULL").is_ok_and(|v| !v.is_empty() && v != "0");
        let (clients, requests, updates) = if full {
            (1000, 200, 400)
        } else {
            (1000, 8, 40)
        };
        let clients = env_usize("BATON_LOAD_CLIENTS").unwrap_or(clients);
        let requests = env_usize("BATON_LOAD_REQUESTS").unwrap_or(requests);
        assert!(
            clients >= 1 && requests >= LANES,
            "at least one client and {LANES} requests"
        );
        Self {
            clients,
            requests,
            updates,
        }
    }

    fn total(&self) -> usize {
        self.clients * self.requests
    }
}

/// Awaits `fut` (phase-guarded), failing at once with a client's panic if one fails first
/// (it would never reach the barrier or end its lanes).
async fn unless_a_client_fails<T: 'static, F: Future>(
    what: &str,
    clients: &mut JoinSet<T>,
    fut: F,
) -> F::Output {
    phase(what, async {
        tokio::select! {
            v = fut => v,
            Some(r) = clients.join_next(), if !clients.is_empty() => match r {
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("a client task failed: {e}"),
                Ok(_) => panic!("a client finished before the final state was published"),
            },
        }
    })
    .await
}

async fn phase<F: Future>(what: &str, fut: F) -> F::Output {
    within(PHASE_GUARD, what, fut).await
}

async fn guard<F: Future>(what: &str, fut: F) -> F::Output {
    within(OP_GUARD, what, fut).await
}

async fn within<F: Future>(limit: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("hung for {limit:?} waiting for {what}"),
    }
}

fn payload(client: usize, request: usize) -> Value {
    let mut m = Map::new();
    m.insert("client", Value::try_from(client as u64).unwrap());
    m.insert("request", Value::try_from(request as u64).unwrap());
    m.insert("tag", Value::from(format!("c{client}-r{request}")));
    Value::Map(m)
}

/// The `n`th state the host publishes: the first half as counter bumps (a 64-byte blob
/// each), the rest as whole-state replacements shaped like a growing session.
fn publish(host: &TestHost, n: usize, total: usize) {
    if n < total / 2 {
        host.bump();
    } else {
        let mut m = Map::new();
        m.insert("round", Value::try_from(n as u64).unwrap());
        m.insert("log", Value::from("x".repeat(n % 97)));
        m.insert(
            "list",
            Value::Array(
                (0..n % 7)
                    .map(|i| Value::try_from(i as u64).unwrap())
                    .collect(),
            ),
        );
        host.set_counter_state(Value::Map(m));
    }
}

/// What one client observed.
#[derive(Default)]
struct Seen {
    replies: usize,
    updates: usize,
    resyncs: usize,
    lagged: usize,
}

impl Seen {
    fn note(&mut self, client: usize, event: Option<SubscriptionEvent>) {
        match event {
            Some(SubscriptionEvent::Updates(batch)) => self.updates += batch.len(),
            Some(SubscriptionEvent::Snapshot { resynced: true }) => self.resyncs += 1,
            Some(SubscriptionEvent::Lagged) => self.lagged += 1,
            Some(SubscriptionEvent::Ended { reason }) => {
                panic!("client {client}: subscription ended: {reason}")
            }
            None => panic!("client {client}: subscription ended"),
            Some(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_lose_duplicate_and_misroute_nothing_and_all_replicas_converge() {
    let plan = Arc::new(Plan::from_env());
    let host = TestHost::new(&[]);
    host.with(|i| i.blob_len = 64);
    let mut cfg = config();
    cfg.max_connections = plan.clients + 64;
    let s = TestServer::unix(host.clone(), cfg).await;
    let endpoint = Endpoint::Unix(s.socket_path());
    let rss_before = vm_rss_bytes();

    // The publisher streams `updates` states while the requests run: one each time another
    // `total / updates` requests have been answered, so the stream spans the whole phase.
    let (progress_tx, mut progress_rx) = mpsc::unbounded_channel::<()>();
    let mut publisher = JoinSet::new();
    {
        let host = host.clone();
        let updates = plan.updates;
        publisher.spawn(async move {
            let mut n = 0;
            while progress_rx.recv().await.is_some() {
                publish(&host, n, updates);
                n += 1;
            }
            n
        });
    }
    let step = (plan.total() / plan.updates.max(1)).max(1);
    let answered = Arc::new(AtomicUsize::new(0));

    let connecting = Arc::new(Semaphore::new(CONNECTING));
    // Every client connected and subscribed before the first request; the test body is the
    // last party and starts the clock.
    let start = Arc::new(Barrier::new(plan.clients + 1));
    // Once every request is answered and the publisher has stopped: the host's final state,
    // which every replica must reach.
    let (final_tx, final_rx) = watch::channel(None::<Value>);
    let mut clients = JoinSet::new();
    for c in 0..plan.clients {
        let (endpoint, connecting, start, mut final_rx, plan, answered) = (
            endpoint.clone(),
            connecting.clone(),
            start.clone(),
            final_rx.clone(),
            plan.clone(),
            answered.clone(),
        );
        // One sender per lane, so the publisher ends when the last lane does.
        let mut lane_txs: Vec<_> = (0..LANES).map(|_| progress_tx.clone()).collect();
        clients.spawn(async move {
            let mut config = ClientConfig::new(endpoint);
            config.expected_server_id = Some(server_id());
            config.connect_timeout = OP_GUARD;
            let permit = connecting.acquire().await.unwrap();
            let client = guard("connect", Client::connect(config)).await.unwrap();
            let mut sub = guard(
                "subscribe",
                client.subscribe("test.counter", ServiceMode::Singleton),
            )
            .await
            .unwrap();
            drop(permit);
            start.wait().await;

            // LANES pipelined request streams on one connection.
            let mut lanes = JoinSet::new();
            for lane in 0..LANES {
                let (client, plan, answered, progress_tx) = (
                    client.clone(),
                    plan.clone(),
                    answered.clone(),
                    lane_txs.pop().unwrap(),
                );
                lanes.spawn(async move {
                    let mut replies = 0;
                    for r in (lane..plan.requests).step_by(LANES) {
                        let sent = payload(c, r);
                        let call =
                            ServiceCall::new("test", "echo", vec![sent.clone()]).into_value();
                        let reply = guard("an echo", client.request(client.server_target(), call))
                            .await
                            .unwrap_or_else(|e| panic!("client {c} request {r}: {e}"));
                        let Reply::Value(got) = reply else {
                            panic!("client {c} request {r}: void reply");
                        };
                        assert_eq!(got, sent, "client {c} request {r}: misrouted reply");
                        replies += 1;
                        let done = answered.fetch_add(1, Ordering::Relaxed) + 1;
                        if done % step == 0 {
                            let _ = progress_tx.send(());
                        }
                    }
                    replies
                });
            }
            // Meanwhile the consumer reads its subscription's events as they come.
            let mut seen = Seen::default();
            let answers = async {
                let mut replies = 0;
                while let Some(r) = lanes.join_next().await {
                    replies += r.unwrap();
                }
                replies
            };
            tokio::pin!(answers);
            loop {
                tokio::select! {
                    n = &mut answers => {
                        seen.replies = n;
                        break;
                    }
                    e = sub.next_event() => seen.note(c, e),
                }
            }
            assert_eq!(seen.replies, plan.requests, "client {c}: replies");
            // Converge on the host's final state.
            let expected = phase("the final state", final_rx.wait_for(Option::is_some))
                .await
                .unwrap()
                .clone()
                .unwrap();
            let mut watch = sub.watch();
            guard(
                "the replica to converge",
                watch.wait_for(|r| r.value(None, "state") == Some(&expected)),
            )
            .await
            .unwrap_or_else(|_| panic!("client {c}: subscription ended"));
            while let Some(e) = sub.try_next_event() {
                seen.note(c, Some(e));
            }
            assert_eq!(
                client.status(),
                baton_client::Status::Connected,
                "client {c}: connection"
            );
            drop(sub);
            (client, seen)
        });
    }
    drop(progress_tx);

    unless_a_client_fails(
        "every client to connect and subscribe",
        &mut clients,
        start.wait(),
    )
    .await;
    let connected_at = tokio::time::Instant::now();
    let rss_connected = vm_rss_bytes();
    // The publisher ends when the last lane has its last answer.
    let published = unless_a_client_fails(
        "every request to be answered",
        &mut clients,
        publisher.join_next(),
    )
    .await
    .unwrap()
    .unwrap();
    let elapsed = connected_at.elapsed();
    final_tx.send_replace(Some(host.counter_value()));
    let mut all = Vec::new();
    while let Some(r) = phase("every replica to converge", clients.join_next()).await {
        all.push(r.unwrap());
    }
    let total = plan.total();
    let replies: usize = all.iter().map(|(_, s)| s.replies).sum();
    let resyncs: usize = all.iter().map(|(_, s)| s.resyncs).sum();
    let lagged: usize = all.iter().map(|(_, s)| s.lagged).sum();
    let updates: usize = all.iter().map(|(_, s)| s.updates).sum();
    let echo_calls = host.count("call test.echo");
    let final_sequence = host.counter_sequence();
    let hwm = vm_hwm_bytes();
    for (client, _) in &all {
        client.close().await;
    }
    println!(
        "load: {} clients × {} requests = {total} echoes ({LANES} in flight per client) in {:.2} s \
         = {:.0} requests/s; {published} states published to {} subscribers (final sequence {final_sequence}), \
         {updates} updates read; {resyncs} resyncs, {lagged} lagged event streams; VmRSS {:.1} MiB before connecting, \
         {:.1} MiB with all connected; peak VmHWM {:.1} MiB",
        plan.clients,
        plan.requests,
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        plan.clients,
        rss_before as f64 / MIB,
        rss_connected as f64 / MIB,
        hwm as f64 / MIB,
    );
    assert_eq!(all.len(), plan.clients);
    assert_eq!(replies, total, "replies received");
    assert_eq!(
        echo_calls, total,
        "echo calls the host ran (each exactly once)"
    );
    assert_eq!(published, total / step, "states published");
    assert!(
        updates <= published * plan.clients,
        "{updates} update events for {published} states × {} subscribers: some delivered twice",
        plan.clients
    );
    if resyncs == 0 && lagged == 0 {
        assert_eq!(
            updates,
            published * plan.clients,
            "every update reached every replica"
        );
    }
}
