//! Hostile-input catalogue: every row of `hostile/catalogue.rs` is sent over a real Unix
//! socket to a running server, and the documented outcome is checked (the exact
//! `hello_error` or error response, the connection closed with EOF right after the final
//! frame, or kept and still answering a ping). Around the allocation bombs the process's
//! resident memory is measured (the server runs in-process); at the end idle connections
//! opened before the catalogue must still be served.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

#[path = "hostile/catalogue.rs"]
mod catalogue;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use baton_protocol::{Id, Outcome, ServerMessage, Value};
use baton_tests::host::TestHost;
use baton_tests::notation::{encode, frame};
use baton_tests::peer::{RawPeer, call, error, id};
use baton_tests::server::{TestServer, config};
use baton_tests::{server_id, vm_hwm_bytes, vm_rss_bytes};
use catalogue::{CATALOGUE, Class, Entry, Expect, Input, Script, Srv, Stage};

const IR: &str = "invalid_request";
/// Generous bound on resident-memory growth across the allocation bombs.
const RSS_BOUND: u64 = 64 * 1024 * 1024;

struct Servers {
    default: TestServer,
    small: TestServer,
    timeout: TestServer,
}

impl Servers {
    async fn start() -> Self {
        let mut d = config();
        d.max_active_requests = 8;
        d.max_subscriptions = 4;
        let mut s = config();
        s.max_frame_length = 1024;
        let mut t = config();
        t.handshake_timeout = Duration::from_millis(1000);
        Self {
            default: TestServer::unix(TestHost::new(&["s1"]), d).await,
            small: TestServer::unix(TestHost::new(&["s1"]), s).await,
            timeout: TestServer::unix(TestHost::new(&["s1"]), t).await,
        }
    }

    fn get(&self, srv: Srv) -> &TestServer {
        match srv {
            Srv::Default => &self.default,
            Srv::Small => &self.small,
            Srv::Timeout => &self.timeout,
        }
    }
}

fn expand(text: &str) -> String {
    text.replace("$T", r#"{"serverId":"$SID"}"#).replace(
        "$ECHO",
        r#"{"serviceId":"test","member":"echo","args":[42]}"#,
    )
}

fn payload(text: &str) -> Vec<u8> {
    encode(&expand(text))
}

/// The payload of `text` with `$PAD` sized so it is exactly `len` bytes.
fn padded(text: &str, len: usize) -> Vec<u8> {
    let base = payload(&text.replace("$PAD", "")).len();
    let start = len.saturating_sub(base + 8);
    (start..len)
        .map(|k| payload(&text.replace("$PAD", &"x".repeat(k))))
        .find(|p| p.len() == len)
        .expect("a padding that hits the length")
}

fn echo(n: i64) -> Value {
    call("test", "echo", vec![Value::try_from(n).unwrap()])
}

async fn ping(p: &mut RawPeer, n: i64) {
    let rid = id(&format!("ping-{n}"));
    p.request_with_id(&rid, p.server_target(), echo(n)).await;
    assert_eq!(
        p.expect_response(&rid).await,
        Outcome::Value(Value::try_from(n).unwrap()),
        "ping {n} after the entry"
    );
}

/// Runs one entry; returns whether the connection was kept.
async fn run(servers: &Servers, entry: &Entry, n: i64) -> bool {
    let s = servers.get(entry.srv);
    if let Input::Script(script) = entry.input {
        return run_script(s, script, n).await;
    }
    let mut p = s.connect().await;
    if entry.stage == Stage::Ready {
        p.handshake().await;
    }
    match entry.input {
        Input::Frame(text) => p.send_bytes(&frame(&payload(text))).await,
        Input::Frames(texts) => {
            let bytes: Vec<u8> = texts.iter().flat_map(|t| frame(&payload(t))).collect();
            p.send_bytes(&bytes).await;
        }
        Input::Stream(text) => p.send_bytes(&payload(text)).await,
        Input::StreamThenEof(text) => {
            p.send_bytes(&payload(text)).await;
            p.shutdown().await;
        }
        Input::FrameOfLen(text, len) => p.send_bytes(&frame(&padded(text, len))).await,
        Input::Script(_) => unreachable!("handled above"),
    }
    match entry.expect {
        Expect::FrameError(text) => {
            p.expect_hello_error(IR, &format!("Invalid client protocol frame: {text}"))
                .await;
            false
        }
        Expect::BadMessage => {
            p.expect_hello_error(IR, "Invalid client protocol message")
                .await;
            false
        }
        Expect::Fatal(code, message) => {
            p.expect_hello_error(code, message).await;
            false
        }
        Expect::Answer(code, message) => {
            assert_eq!(p.expect_response(&id("h")).await, error(code, message));
            ping(&mut p, n).await;
            true
        }
        Expect::Answered => {
            let out = p.expect_response(&id("h")).await;
            assert!(!matches!(out, Outcome::Error(_)), "{out:?}");
            ping(&mut p, n).await;
            true
        }
        Expect::Hello => {
            assert_eq!(
                p.recv().await,
                ServerMessage::Hello {
                    server_id: server_id()
                }
            );
            ping(&mut p, n).await;
            true
        }
        Expect::Silent => {
            p.expect_closed().await;
            false
        }
        Expect::Scripted { .. } => unreachable!("scripts only"),
    }
}

fn wait(gate: &str) -> Value {
    call(
        "test",
        "wait",
        vec![Value::from(gate), Value::from("ignore")],
    )
}

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

async fn run_script(s: &TestServer, script: Script, n: i64) -> bool {
    let hello = RawPeer::frame(&baton_protocol::ClientMessage::hello());
    match script {
        Script::OneByteAtATime => {
            let mut p = s.connect().await;
            let mut bytes = hello.clone();
            bytes.extend(RawPeer::frame(&baton_protocol::ClientMessage::Request(
                baton_protocol::Request {
                    id: id("h"),
                    target: p.server_target(),
                    call: echo(7),
                },
            )));
            for b in bytes {
                p.send_bytes(&[b]).await;
            }
            assert_eq!(
                p.recv().await,
                ServerMessage::Hello {
                    server_id: server_id()
                }
            );
            assert_eq!(
                p.expect_response(&id("h")).await,
                Outcome::Value(Value::from(7))
            );
            ping(&mut p, n).await;
            true
        }
        Script::Silence => {
            let mut p = s.connect().await;
            p.expect_hello_error(IR, "Handshake timeout").await;
            false
        }
        Script::HalfHeader => {
            let mut p = s.connect().await;
            p.send_bytes(&[0, 0]).await;
            p.expect_hello_error(IR, "Handshake timeout").await;
            false
        }
        Script::HelloFlood(count) => {
            let mut p = s.connect().await;
            p.send_bytes(&hello.repeat(count + 1)).await;
            // A second hello is fatal "at any time" (server.md), also while the first is
            // still being attached: the server hello is never sent.
            p.expect_hello_error(IR, "hello may only be sent as the first message")
                .await;
            false
        }
        Script::IdReuse => {
            let mut p = s.ready_peer().await;
            let dup = id("dup");
            s.host.close_gate("reuse");
            p.request_with_id(&dup, p.server_target(), wait("reuse"))
                .await;
            s.host
                .until("the held call", |i| {
                    i.events.iter().any(|e| e == "waiting reuse")
                })
                .await;
            p.request_with_id(&dup, p.server_target(), echo(1)).await;
            assert_eq!(
                p.expect_response(&dup).await,
                error(IR, "Request ID is already active")
            );
            s.host.open_gate("reuse");
            assert_eq!(
                p.expect_response(&dup).await,
                Outcome::Value(Value::from("reuse"))
            );
            // Finished: the id is free again.
            p.request_with_id(&dup, p.server_target(), echo(2)).await;
            assert_eq!(
                p.expect_response(&dup).await,
                Outcome::Value(Value::from(2))
            );
            ping(&mut p, n).await;
            true
        }
        Script::UnknownCancels(count) => {
            let mut p = s.ready_peer().await;
            let mut bytes = Vec::new();
            for k in 0..count {
                bytes.extend(RawPeer::frame(&baton_protocol::ClientMessage::Cancel(
                    baton_protocol::Cancel {
                        id: id(&format!("ghost-{k}")),
                        target: p.server_target(),
                    },
                )));
            }
            bytes.extend(RawPeer::frame(&baton_protocol::ClientMessage::Cancel(
                baton_protocol::Cancel {
                    id: id("ghost-0"),
                    target: baton_protocol::Target::Server(
                        baton_protocol::ServerId::parse(baton_tests::OTHER_SERVER_ID).unwrap(),
                    ),
                },
            )));
            p.send_bytes(&bytes).await;
            // Cancels are never answered: the next frame is the ping's response.
            ping(&mut p, n).await;
            true
        }
        Script::SubscribeStorm(count) => {
            let mut p = s.ready_peer().await;
            let mut bytes = Vec::new();
            for k in 0..count {
                bytes.extend(RawPeer::frame(&baton_protocol::ClientMessage::Request(
                    baton_protocol::Request {
                        id: id(&format!("sub-{k}")),
                        target: p.server_target(),
                        call: subscribe(&format!("storm-{k}")),
                    },
                )));
            }
            p.send_bytes(&bytes).await;
            let mut ok = HashSet::new();
            for _ in 0..count {
                match p.recv().await {
                    ServerMessage::Response(r) => match r.outcome {
                        Outcome::Value(_) => assert!(ok.insert(r.id.as_str().to_owned())),
                        other => assert_eq!(
                            other,
                            error(
                                "busy",
                                "Too many subscriptions on this connection (limit 4)"
                            ),
                            "{}",
                            r.id
                        ),
                    },
                    other => panic!("unexpected {other:?}"),
                }
            }
            let first: HashSet<String> = (0..4).map(|k| format!("sub-{k}")).collect();
            assert_eq!(ok, first, "the first four subscribes are admitted");
            let rid = p.next_id();
            p.request_with_id(&rid, p.server_target(), subscribe("storm-0"))
                .await;
            assert_eq!(
                p.expect_response(&rid).await,
                error(IR, "Duplicate service subscription storm-0")
            );
            ping(&mut p, n).await;
            true
        }
        Script::RequestFlood(count) => {
            let mut p = s.ready_peer().await;
            let gate = format!("flood-{n}");
            let waiting = format!("waiting {gate}");
            s.host.close_gate(&gate);
            let mut held = Vec::new();
            for _ in 0..8 {
                held.push(p.request(p.server_target(), wait(&gate)).await);
            }
            s.host
                .until("8 held calls", |i| {
                    i.events.iter().filter(|e| **e == waiting).count() == 8
                })
                .await;
            let mut bytes = Vec::new();
            let mut flood = Vec::new();
            for _ in 0..count {
                let rid = p.next_id();
                bytes.extend(RawPeer::frame(&baton_protocol::ClientMessage::Request(
                    baton_protocol::Request {
                        id: rid.clone(),
                        target: p.server_target(),
                        call: echo(1),
                    },
                )));
                flood.push(rid);
            }
            p.send_bytes(&bytes).await;
            for rid in &flood {
                assert_eq!(
                    p.expect_response(rid).await,
                    error(
                        "busy",
                        "Too many active requests on this connection (limit 8)"
                    )
                );
            }
            s.host.open_gate(&gate);
            let mut answered = HashSet::new();
            for _ in 0..8 {
                match p.recv().await {
                    ServerMessage::Response(r) => {
                        assert_eq!(r.outcome, Outcome::Value(Value::from(gate.as_str())));
                        answered.insert(r.id);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(answered, held.into_iter().collect::<HashSet<Id>>());
            ping(&mut p, n).await;
            true
        }
        Script::DeclaredFrames(count) => {
            let mut peers = Vec::new();
            for _ in 0..count {
                let mut p = s.connect().await;
                let mut bytes = hello.clone();
                bytes.extend([1, 0, 0, 0, b'a']);
                p.send_bytes(&bytes).await;
                assert_eq!(
                    p.recv().await,
                    ServerMessage::Hello {
                        server_id: server_id()
                    }
                );
                peers.push(p);
            }
            for mut p in peers {
                p.shutdown().await;
                p.expect_closed().await;
            }
            false
        }
    }
}

#[tokio::test]
async fn hostile_input_catalogue() {
    let names: HashSet<&str> = CATALOGUE.iter().map(|e| e.name).collect();
    assert_eq!(names.len(), CATALOGUE.len(), "entry names are unique");
    assert!(CATALOGUE.len() >= 50);

    let servers = Servers::start().await;
    // Idle connections opened before the catalogue; they must still be served at the end.
    let mut idle_default = servers.default.ready_peer().await;
    let mut idle_small = servers.small.ready_peer().await;

    let mut kept = 0;
    let mut closed = 0;
    let mut per_class: BTreeMap<String, usize> = BTreeMap::new();
    let mut n = 0;
    let mut run_all = async |filter: &dyn Fn(&Entry) -> bool| {
        for entry in CATALOGUE.iter().filter(|e| filter(e)) {
            n += 1;
            println!("entry {n}: {}", entry.name);
            let was_kept = baton_tests::guard(entry.name, run(&servers, entry, n)).await;
            if let Expect::Scripted { closed } = entry.expect {
                assert_eq!(was_kept, !closed, "{}", entry.name);
            }
            if was_kept {
                kept += 1;
            } else {
                closed += 1;
            }
            *per_class.entry(format!("{:?}", entry.class)).or_default() += 1;
        }
    };

    let before = vm_rss_bytes();
    let peak_before = vm_hwm_bytes();
    run_all(&|e| e.class == Class::Bomb).await;
    let after_bombs = vm_rss_bytes();
    let peak_bombs = vm_hwm_bytes();
    run_all(&|e| e.class != Class::Bomb).await;
    let after_all = vm_rss_bytes();

    ping(&mut idle_default, -1).await;
    ping(&mut idle_small, -2).await;
    let mut fresh = servers.timeout.ready_peer().await;
    ping(&mut fresh, -3).await;

    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "hostile catalogue: {} entries ({kept} kept, {closed} closed) by class {per_class:?}",
        CATALOGUE.len()
    );
    println!(
        "VmRSS: {:.1} MiB before, {:.1} MiB after the bombs (+{:.1} MiB), {:.1} MiB after all",
        mib(before),
        mib(after_bombs),
        mib(after_bombs.saturating_sub(before)),
        mib(after_all)
    );
    println!(
        "VmHWM (peak): {:.1} MiB before the bombs, {:.1} MiB after them",
        mib(peak_before),
        mib(peak_bombs)
    );
    assert!(
        after_bombs.saturating_sub(before) < RSS_BOUND,
        "resident memory grew by {:.1} MiB across the allocation bombs",
        mib(after_bombs.saturating_sub(before))
    );
    // The peak includes the transient decode of the 1,000,000-null inputs (about 34 bytes of
    // `Value` per one-byte null): bounded by the container limit, not by trusting lengths.
    assert!(
        peak_bombs.saturating_sub(peak_before) < RSS_BOUND,
        "peak resident memory grew by {:.1} MiB across the allocation bombs",
        mib(peak_bombs.saturating_sub(peak_before))
    );
    assert_eq!(kept + closed, CATALOGUE.len());
}
