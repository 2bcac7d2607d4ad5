//! Fault suite: slow subscribers (memory stays bounded, the backlog collapses into one
//! `replaced` that every upstream client accepts, other connections are unaffected, a stalled `baton-client` replica converges once
//! it reads again), host calls that panic (answered `internal_error`, isolated), and a
//! graceful drain under load (every request answered: its result or `server_draining`).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashMap;
use std::net::SocketAddr;

use baton_client::{Client, ClientConfig, Endpoint, Subscription};
use baton_protocol::chord::ServiceMode;
use baton_protocol::{ClientMessage, Id, Outcome, Request, ServerMessage, Target, Value};
use baton_server::Published;
use baton_tests::host::{TestHost, hooks};
use baton_tests::mirror::Mirror;
use baton_tests::peer::{RawPeer, call, error, id};
use baton_tests::server::{TestServer, config};
use baton_tests::{guard, vm_rss_bytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

const MIB: u64 = 1024 * 1024;

/// The tests of this binary run one at a time, so the resident-memory figures of one are not
/// inflated by another running in the same process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn subscribe(sid: &str) -> Value {
    call(
        "$chord.service",
        "subscribe",
        vec![
            Value::from(sid),
            Value::from("test.counter"),
            Value::from("singleton"),
        ],
    )
}

fn echo(v: Value) -> Value {
    call("test", "echo", vec![v])
}

/// Subscribes `p` to `test.counter` at server scope and mirrors it.
async fn subscribe_mirror(p: &mut RawPeer, sid: &str) -> Mirror {
    let Outcome::Value(snapshot) = p.call(p.server_target(), subscribe(sid)).await else {
        panic!("subscribe failed");
    };
    Mirror::new(&snapshot)
}

/// Reads until the response to `ping`, applying every update on the way.
async fn drain_updates(p: &mut RawPeer, mirror: &mut Mirror) {
    let ping = p.request(p.server_target(), echo(Value::Null)).await;
    loop {
        match p.recv().await {
            ServerMessage::ServiceUpdate(u) => mirror.apply(&u.update),
            ServerMessage::Response(r) if r.id == ping => return,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_costs_bounded_memory_and_others_are_unaffected() {
    let _serial = SERIAL.lock().await;
    const BLOB: usize = 128 * 1024;
    const BUMPS: usize = 600;
    let host = TestHost::new(&[]);
    host.with(|i| i.blob_len = BLOB);
    // Defaults: 100 queued updates per subscriber, max_pending_bytes 64 MiB.
    let s = TestServer::unix(host.clone(), config()).await;
    let mut idle = s.ready_peer().await;
    let mut stalled = s.ready_peer().await;
    let mut stalled_mirror = subscribe_mirror(&mut stalled, "slow").await;
    let mut healthy = s.ready_peer().await;
    let mut healthy_mirror = subscribe_mirror(&mut healthy, "fast").await;

    let before = vm_rss_bytes();
    let mut peak = before;
    // The stalled client never reads while the host publishes BUMPS × 128 KiB (75 MiB);
    // the healthy one reads every update as it comes.
    for k in 0..BUMPS {
        host.bump();
        match healthy.recv().await {
            ServerMessage::ServiceUpdate(u) => healthy_mirror.apply(&u.update),
            other => panic!("unexpected {other:?}"),
        }
        if k % 50 == 0 {
            peak = peak.max(vm_rss_bytes());
        }
    }
    let after = vm_rss_bytes();
    peak = peak.max(after);
    let published: Vec<Published> = host.lock().published.clone();
    let resets = published.iter().filter(|r| **r == Published::Reset).count();
    println!(
        "slow subscriber: {BUMPS} updates of {} KiB published, {resets} backlog collapses into a resync; \
         VmRSS {:.1} MiB before, peak {:.1} MiB, {:.1} MiB after",
        BLOB / 1024,
        before as f64 / MIB as f64,
        peak as f64 / MIB as f64,
        after as f64 / MIB as f64
    );
    // As docs/server.md promises below max_pending_bytes: the backlog collapses into a resync
    // and the connection is kept (never Closed), and memory does not grow with the stream.
    assert!(resets >= 1, "the stalled backlog collapsed into a resync");
    assert!(!published.contains(&Published::Closed));
    assert!(
        peak.saturating_sub(before) < 48 * MIB,
        "resident memory grew by {:.1} MiB",
        peak.saturating_sub(before) as f64 / MIB as f64
    );
    // The healthy subscriber saw every update in order, with no reset.
    assert_eq!(healthy_mirror.resets, 0);
    assert_eq!(healthy_mirror.updates, BUMPS);
    assert_eq!(healthy_mirror.value(), Some(&host.counter_value()));
    // An unrelated idle connection is served.
    assert_eq!(
        idle.call(idle.server_target(), echo(Value::from(1))).await,
        Outcome::Value(Value::from(1))
    );
    // The stalled client reads again: it gets a `replaced` (never a `reset`, which chord
    // 0.85.1 refuses) and converges.
    drain_updates(&mut stalled, &mut stalled_mirror).await;
    assert!(stalled_mirror.resets >= 1);
    assert!(
        stalled_mirror
            .types
            .get("replaced")
            .is_some_and(|n| *n >= 1)
    );
    assert_eq!(stalled_mirror.types.get("reset"), None);
    assert!(stalled_mirror.updates < BUMPS);
    assert_eq!(stalled_mirror.value(), Some(&host.counter_value()));
}

/// A loopback TCP proxy whose server-to-client direction can be paused: a client that stops
/// reading, as a phone on a stalled network looks to the server.
struct StallProxy {
    addr: SocketAddr,
    tasks: JoinSet<()>,
    paused: tokio::sync::watch::Sender<bool>,
}

impl StallProxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (paused, paused_rx) = tokio::sync::watch::channel(false);
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut links = JoinSet::new();
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                let Ok(outbound) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut in_r, mut in_w) = inbound.into_split();
                let (mut out_r, mut out_w) = outbound.into_split();
                links.spawn(async move {
                    let _ = tokio::io::copy(&mut in_r, &mut out_w).await;
                    let _ = out_w.shutdown().await;
                });
                let mut paused = paused_rx.clone();
                links.spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        if paused.wait_for(|p| !*p).await.is_err() {
                            return;
                        }
                        let n = match out_r.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if in_w.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = in_w.shutdown().await;
                });
            }
        });
        Self {
            addr,
            tasks,
            paused,
        }
    }

    fn pause(&self, on: bool) {
        self.paused.send_replace(on);
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

async fn converged(host: &TestHost, sub: &Subscription) {
    let expected = host.counter_value();
    let mut watch = sub.watch();
    guard(
        "the replica to converge",
        watch.wait_for(|r| r.value(None, "state") == Some(&expected)),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_stalled_client_replica_converges_once_it_reads_again() {
    let _serial = SERIAL.lock().await;
    let host = TestHost::new(&[]);
    host.with(|i| i.blob_len = 64 * 1024);
    let mut c = config();
    c.subscriber_queue_length = 8;
    let s = TestServer::tcp(host.clone(), c).await;
    let proxy = StallProxy::start(s.addr()).await;
    let client = Client::connect(ClientConfig::new(Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port: proxy.addr.port(),
    }))
    .await
    .unwrap();
    let sub = client
        .subscribe("test.counter", ServiceMode::Singleton)
        .await
        .unwrap();
    host.bump();
    converged(&host, &sub).await;

    // The network stalls: the server's socket fills, then the subscriber queue, then the
    // backlog collapses into a resync.
    proxy.pause(true);
    let mut bumps = 0;
    while !host.lock().published.contains(&Published::Reset) {
        host.bump();
        bumps += 1;
        assert!(bumps < 5_000, "no resync after {bumps} updates");
    }
    for _ in 0..20 {
        host.bump();
    }
    assert!(!host.lock().published.contains(&Published::Closed));
    proxy.pause(false);
    converged(&host, &sub).await;
    // The connection survived: requests still work.
    let reply = client
        .request(
            Target::Server(baton_tests::server_id()),
            echo(Value::from(5)),
        )
        .await
        .unwrap();
    assert_eq!(reply.into_value(), Value::from(5));
    client.close().await;
}

#[tokio::test]
async fn a_panicking_host_call_is_answered_internal_error_and_isolated() {
    let _serial = SERIAL.lock().await;
    let host = TestHost::new(&["s1"]);
    let mut c = config();
    // One active request per connection: a panic that leaked its slot would make the next
    // request `busy`.
    c.max_active_requests = 1;
    let s = TestServer::unix(host.clone(), c).await;
    let mut other = s.ready_peer().await;
    let other_route = other.attach("s1").await;
    let mut p = s.ready_peer().await;
    let route = p.attach("s1").await;
    let internal = error("internal_error", "Internal server error");
    let panic = |msg: &str| call("test", "panic", vec![Value::from(msg)]);

    assert_eq!(
        p.call(p.server_target(), panic("server scope")).await,
        internal
    );
    assert_eq!(
        p.call(Target::Session(route.clone()), panic("session scope"))
            .await,
        internal
    );
    // The same connection, session and attachment keep working.
    for target in [p.server_target(), Target::Session(route.clone())] {
        assert_eq!(
            p.call(target, echo(Value::from(1))).await,
            Outcome::Value(Value::from(1))
        );
    }
    // Detach waits for the attachment's admitted calls: the panicked one is settled.
    let rid = p
        .request(
            p.server_target(),
            call("pi.session-management", "detach", vec![]),
        )
        .await;
    assert_eq!(p.expect_attachment().await, None);
    assert_eq!(p.expect_response(&rid).await, Outcome::Value(Value::Null));
    // Another connection on the same session is unaffected.
    assert_eq!(
        other
            .call(Target::Session(other_route), echo(Value::from(2)))
            .await,
        Outcome::Value(Value::from(2))
    );
    // Nothing is left hanging: the server closes promptly.
    guard("close", s.server.close()).await.unwrap();
}

#[tokio::test]
async fn a_host_panicking_in_a_lifecycle_hook_costs_only_that_operation() {
    let _serial = SERIAL.lock().await;
    let host = TestHost::new(&["s1"]);
    let mut c = config();
    // Two connection slots: a connection whose teardown panicked and leaked its slot would
    // make the next one `busy`.
    c.max_connections = 2;
    let s = TestServer::unix(host.clone(), c).await;
    let internal = error("internal_error", "Internal server error");
    let attach = |sid: &str| call("pi.session-management", "attach", vec![Value::from(sid)]);
    let panic_in = |hook: &'static str, on: bool| {
        host.with(|i| {
            if on {
                i.panic_in.insert(hook);
            } else {
                i.panic_in.remove(hook);
            }
        });
    };

    // open_session: the attach fails sanitised; the next attach opens the session afresh.
    let mut p = s.ready_peer().await;
    panic_in(hooks::OPEN, true);
    assert_eq!(p.call(p.server_target(), attach("s1")).await, internal);
    panic_in(hooks::OPEN, false);
    let route = p.attach("s1").await;
    assert_eq!(host.lock().opens["s1"], 2);

    // The session's `lease`: only this attach fails; the session stays hosted.
    let mut q = s.ready_peer().await;
    panic_in(hooks::SESSION_ATTACH, true);
    assert_eq!(q.call(q.server_target(), attach("s1")).await, internal);
    panic_in(hooks::SESSION_ATTACH, false);
    let q_route = q.attach("s1").await;
    assert_eq!(host.lock().opens["s1"], 2, "the hosted session was reused");

    // Both releases panic while p disconnects: its teardown still completes (slot freed,
    // session attachment forgotten) and q is unaffected.
    panic_in(hooks::LEASE_RELEASE, true);
    panic_in(hooks::SERVICES_RELEASE, true);
    p.shutdown().await;
    drop(p);
    host.until("both releases panicked", |i| {
        i.events.iter().any(|e| e == "panic lease release")
            && i.events.iter().any(|e| e == "panic services release")
    })
    .await;
    panic_in(hooks::LEASE_RELEASE, false);
    panic_in(hooks::SERVICES_RELEASE, false);
    assert_eq!(
        s.server.connection_count(),
        1,
        "the panicked teardown freed its slot"
    );
    let mut r = s.ready_peer().await;
    let r_route = r.attach("s1").await;
    assert_ne!(r_route.attachment_id, route.attachment_id);
    assert_eq!(
        q.call(Target::Session(q_route), echo(Value::from(3))).await,
        Outcome::Value(Value::from(3))
    );
    drop(q);
    drop(r);

    // The handshake's connect_services: that client gets a sanitised hello_error.
    host.until("connections closed", |_| s.server.connection_count() == 0)
        .await;
    panic_in(hooks::CONNECT_SERVICES, true);
    let mut h = s.connect().await;
    h.send(&ClientMessage::hello()).await;
    h.expect_hello_error("internal_error", "Internal server error")
        .await;
    panic_in(hooks::CONNECT_SERVICES, false);

    // close at shutdown: reported as a close failure, not a panic in the caller.
    panic_in(hooks::CLOSE, true);
    let closed = guard("close", s.server.close()).await;
    let failure = closed.expect_err("the panicked close is reported");
    assert!(failure.to_string().contains("s1"), "{failure}");
    assert_eq!(host.lock().closes["s1"], 1);
}

/// Reads messages, recording every response, until `until` has been answered (or, with
/// `None`, until the end of the stream).
async fn collect(p: &mut RawPeer, got: &mut HashMap<Id, Vec<Outcome>>, until: Option<&Id>) {
    loop {
        let m = match p.next_event().await {
            baton_tests::peer::Event::Message(m) => m,
            baton_tests::peer::Event::Closed => {
                assert!(until.is_none(), "closed before {until:?} was answered");
                return;
            }
        };
        match m {
            ServerMessage::Response(r) => {
                let done = Some(&r.id) == until;
                got.entry(r.id).or_default().push(r.outcome);
                if done {
                    return;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn drain_under_load_answers_every_request() {
    let _serial = SERIAL.lock().await;
    const CONNS: usize = 8;
    const PIPELINED: usize = 64;
    const LATE: usize = 16;
    let host = TestHost::new(&[]);
    host.close_gate("drain");
    let s = TestServer::unix(host.clone(), config()).await;
    let draining = error("server_draining", "Server is draining");

    let mut peers = Vec::new();
    let mut sent: Vec<HashMap<Id, Value>> = Vec::new();
    for c in 0..CONNS {
        let mut p = s.ready_peer().await;
        let mut bytes = Vec::new();
        let mut expected = HashMap::new();
        for k in 0..PIPELINED {
            let rid = id(&format!("c{c}-e{k}"));
            let v = Value::from(format!("{c}/{k}"));
            bytes.extend(RawPeer::frame(&ClientMessage::Request(Request {
                id: rid.clone(),
                target: p.server_target(),
                call: echo(v.clone()),
            })));
            expected.insert(rid, v);
        }
        // Last: a request held by the host, so the drain has something in flight.
        let held = id(&format!("c{c}-held"));
        bytes.extend(RawPeer::frame(&ClientMessage::Request(Request {
            id: held.clone(),
            target: p.server_target(),
            call: call(
                "test",
                "wait",
                vec![Value::from("drain"), Value::from("ignore")],
            ),
        })));
        expected.insert(held, Value::from("drain"));
        p.send_bytes(&bytes).await;
        peers.push(p);
        sent.push(expected);
    }
    host.until("every connection's held call", |i| {
        i.events.iter().filter(|e| *e == "waiting drain").count() == CONNS
    })
    .await;

    let mut got: Vec<HashMap<Id, Vec<Outcome>>> = vec![HashMap::new(); CONNS];
    let clients = async {
        for (c, p) in peers.iter_mut().enumerate() {
            // Probe until the server says it is draining.
            let mut j = 0;
            loop {
                let rid = id(&format!("c{c}-probe{j}"));
                let v = Value::from(j);
                p.request_with_id(&rid, p.server_target(), echo(v.clone()))
                    .await;
                sent[c].insert(rid.clone(), v);
                collect(p, &mut got[c], Some(&rid)).await;
                j += 1;
                if got[c][&rid] == [draining.clone()] {
                    break;
                }
            }
            // Requests sent once draining: all refused, none lost.
            let mut bytes = Vec::new();
            for k in 0..LATE {
                let rid = id(&format!("c{c}-late{k}"));
                bytes.extend(RawPeer::frame(&ClientMessage::Request(Request {
                    id: rid.clone(),
                    target: p.server_target(),
                    call: echo(Value::Null),
                })));
                sent[c].insert(rid, Value::Null);
            }
            p.send_bytes(&bytes).await;
            collect(p, &mut got[c], Some(&id(&format!("c{c}-late{}", LATE - 1)))).await;
        }
        host.open_gate("drain");
        for (c, p) in peers.iter_mut().enumerate() {
            collect(p, &mut got[c], None).await;
        }
    };
    let (closed, ()) = guard("drain", async { tokio::join!(s.server.close(), clients) }).await;
    closed.unwrap();

    let mut normal = 0;
    let mut refused = 0;
    for c in 0..CONNS {
        for (rid, value) in &sent[c] {
            let outcomes = got[c]
                .get(rid)
                .unwrap_or_else(|| panic!("{rid} was never answered"));
            assert_eq!(outcomes.len(), 1, "{rid} answered {outcomes:?}");
            let o = &outcomes[0];
            if *o == draining {
                assert!(!rid.as_str().ends_with("-held"), "{rid} was abandoned");
                refused += 1;
            } else {
                assert!(!rid.as_str().contains("-late"), "{rid} ran while draining");
                assert_eq!(*o, Outcome::Value(value.clone()), "{rid}");
                normal += 1;
            }
        }
        assert_eq!(got[c].len(), sent[c].len(), "no response without a request");
    }
    println!(
        "drain under load: {CONNS} connections, {} requests: {normal} answered normally, \
         {refused} server_draining, 0 lost",
        normal + refused
    );
}
