//! Bounded hosts: idle sessions close and reopen on attach, the open session cap, the
//! per-owner session cap, and every place that shows whether a session is open agreeing
//! through all of it. Idle time is virtual: each test pauses tokio's clock only to jump it
//! past the timeout, then waits for the effect as an event (the directory publishing
//! `closed`), never for real time.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, Endpoint, Subscription};
use baton_host::clock::SystemClock;
use baton_host::service::{ServiceHost, ServiceLimits};
use baton_host::session::SessionManager;
use baton_protocol::chord::{ServiceCall, ServiceMode};
use baton_protocol::{ErrorCode, Value};
use baton_server::{Listener, Server};
use tempfile::TempDir;

use common::state::{get, guard, member, transcript};
use common::{connect, host_config, scripted, serve, stop};

const SERVER_ID: &str = "00000000-0000-4000-8000-00000000b0dd";
const IDLE: Duration = Duration::from_secs(60);

fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new(service, member, args).into_value()
}

/// Waits until the subscription's member `name` satisfies `f`.
async fn until(sub: &Subscription, name: &str, f: impl Fn(&Value) -> bool) -> Value {
    common::until(name, sub, name, f).await
}

/// The directory entry of `id`.
fn entry<'a>(sessions: &'a Value, id: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    sessions
        .as_array()
        .and_then(|a| a.iter().find(|e| get(e, "id").as_str() == Some(id)))
        .unwrap_or(&NULL)
}

fn phase<'a>(sessions: &'a Value, id: &str) -> &'a str {
    get(entry(sessions, id), "phase").as_str().unwrap_or("")
}

fn attached(sessions: &Value, id: &str) -> Option<i64> {
    get(entry(sessions, id), "attachedClients").as_i64()
}

/// Whether each of `ids` is open reads the same wherever it shows: the directory lists it
/// `closed` exactly when the host has it closed (and a removed one not at all), the manager
/// has its runtime loaded exactly then, and the server holds a handle for exactly the open
/// sessions (once a released handle's `terminated` has reached it).
async fn assert_agree(h: &Harness, ids: &[&String], when: &str) {
    let list = h.host.directory();
    let mut open = 0;
    for id in ids {
        let is_open = h.host.is_open(id);
        open += usize::from(is_open);
        if entry(&list, id).is_null() {
            assert!(!is_open, "{when}: {id} is open but not listed");
        } else {
            assert_eq!(
                phase(&list, id) != "closed",
                is_open,
                "{when}: the directory's phase of {id}"
            );
        }
        assert_eq!(
            h.host.manager().is_open(id),
            is_open,
            "{when}: the manager's runtime of {id}"
        );
    }
    assert_eq!(h.host.open_sessions(), open, "{when}: the open count");
    guard(when, async {
        while h.server.hosted_session_count() != open {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

async fn remove(client: &Client, id: &str) {
    guard(
        "remove",
        client.request(
            client.server_target(),
            call("pi.session-management", "remove", vec![Value::from(id)]),
        ),
    )
    .await
    .unwrap();
}

/// Moves tokio's clock past `by` in one jump (timers due by then fire), then lets real time
/// run again for the sockets.
async fn jump(by: Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}

struct Harness {
    host: ServiceHost,
    server: Server<ServiceHost>,
    socket: PathBuf,
    tcp: SocketAddr,
    project: PathBuf,
    _dir: TempDir,
}

impl Harness {
    async fn start(limits: ServiceLimits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        let manager = SessionManager::new(
            host_config(dir.path(), &project),
            scripted(Duration::ZERO),
            Arc::new(SystemClock),
        )
        .unwrap();
        let host = ServiceHost::with_limits(Arc::new(manager), limits).unwrap();
        let (server, socket) = serve(
            &host,
            SERVER_ID,
            dir.path(),
            vec![Listener::tcp(SocketAddr::from(([127, 0, 0, 1], 0)))],
        )
        .await;
        let tcp = server.local_addrs()[1].socket_addr().unwrap();
        Self {
            host,
            server,
            socket,
            tcp,
            project,
            _dir: dir,
        }
    }

    async fn client(&self) -> Client {
        connect(Endpoint::Unix(self.socket.clone())).await
    }

    async fn tcp_client(&self) -> Client {
        connect(Endpoint::Tcp {
            host: self.tcp.ip().to_string(),
            port: self.tcp.port(),
        })
        .await
    }

    async fn try_create(&self, client: &Client) -> Result<String, baton_client::RequestError> {
        common::try_create(client, vec![Value::from_json("{}").unwrap()]).await
    }

    async fn create(&self, client: &Client) -> String {
        self.try_create(client).await.unwrap()
    }

    async fn stop(self) {
        stop(&self.host, &self.server).await;
    }
}

fn idle_after(timeout: Duration) -> ServiceLimits {
    let mut limits = ServiceLimits::default();
    limits.idle_timeout = Some(timeout);
    limits
}

fn at_most_open(n: usize) -> ServiceLimits {
    let mut limits = ServiceLimits::default();
    limits.idle_timeout = None;
    limits.max_open_sessions = n;
    limits
}

fn at_most_owned(n: usize) -> ServiceLimits {
    let mut limits = ServiceLimits::default();
    limits.max_sessions_per_owner = n;
    limits
}

async fn directory(client: &Client) -> Subscription {
    guard(
        "directory",
        client.subscribe("pi.session-directory", ServiceMode::Singleton),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_idle_session_closes_after_the_timeout_and_reopens_on_attach_with_its_transcript() {
    let h = Harness::start(idle_after(IDLE)).await;
    let client = h.client().await;
    let dir = directory(&client).await;
    let id = h.create(&client).await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let reply = guard(
        "prompt",
        session.request(call(
            "pi.session",
            "prompt",
            vec![Value::from("run `echo hi`")],
        )),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(reply.to_json(), r#"{"stopReason":"stop"}"#);
    let before = transcript(&member(&sub, "state"));
    assert_eq!(before.len(), 4, "user, tool call, tool result, answer");
    drop(sub);
    guard("detach", client.detach()).await.unwrap();
    until(&dir, "sessions", |s| attached(s, &id) == Some(0)).await;
    assert!(h.host.is_open(&id), "detaching alone closes nothing");
    assert_eq!(h.server.hosted_session_count(), 1);

    jump(IDLE - Duration::from_secs(1)).await;
    assert!(h.host.is_open(&id), "closed before its timeout");
    jump(Duration::from_secs(2)).await;
    until(&dir, "sessions", |s| phase(s, &id) == "closed").await;
    assert!(!h.host.is_open(&id));
    assert_eq!(h.host.open_sessions(), 0);
    // Its server handle is released too: the server keeps nothing for a closed session.
    guard("the server forgets the released handle", async {
        while h.server.hosted_session_count() != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;

    // The next attach reopens it from its file, transcript intact.
    let session = guard("re-attach", client.attach(&id)).await.unwrap();
    assert!(h.host.is_open(&id));
    let sub = guard(
        "re-subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let state = member(&sub, "state");
    assert_eq!(get(&state, "phase").as_str(), Some("idle"));
    assert_eq!(transcript(&state), before);
    until(&dir, "sessions", |s| {
        phase(s, &id) == "idle" && attached(s, &id) == Some(1)
    })
    .await;
    drop(sub);
    h.stop().await;
}

#[tokio::test]
async fn an_attach_racing_the_idle_close_gets_an_open_session_never_an_error() {
    let h = Harness::start(idle_after(IDLE)).await;
    let client = h.client().await;
    let dir = directory(&client).await;
    let id = h.create(&client).await;
    for round in 0..20 {
        guard("detach", client.detach()).await.unwrap();
        until(&dir, "sessions", |s| attached(s, &id) == Some(0)).await;
        // Even rounds: the attach is on its way when the close falls due (it takes its lease
        // first, so the old session stays). Odd rounds: the close runs first and the attach
        // starts some scheduler turns later (it gets the reopened session). Either way: an
        // open session, never an error.
        let turns = round / 2;
        let delayed = |first: bool| async move {
            if !first {
                for _ in 0..=turns {
                    tokio::task::yield_now().await;
                }
            }
        };
        let attach_first = round % 2 == 0;
        let attach = async {
            delayed(attach_first).await;
            client.attach(&id).await
        };
        let clock = async {
            delayed(!attach_first).await;
            jump(IDLE + Duration::from_secs(1)).await;
        };
        let (attached_to, ()) = tokio::join!(attach, clock);
        let session = attached_to.unwrap_or_else(|e| panic!("round {round}: {e}"));
        let sub = guard(
            "subscribe",
            session.subscribe("pi.session", ServiceMode::Singleton),
        )
        .await
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(get(&member(&sub, "state"), "phase").as_str(), Some("idle"));
        assert!(h.host.is_open(&id), "round {round}: attached but closed");
        until(&dir, "sessions", |s| {
            phase(s, &id) == "idle" && attached(s, &id) == Some(1)
        })
        .await;
        assert_agree(&h, &[&id], &format!("round {round}")).await;
    }
    h.stop().await;
}

#[tokio::test]
async fn a_session_with_an_attached_client_a_running_turn_or_a_running_command_is_not_closed() {
    let h = Harness::start(idle_after(IDLE)).await;
    let admin = h.client().await;
    let dir = directory(&admin).await;
    let held = h.create(&admin).await;
    let turning = h.create(&admin).await;
    let commanding = h.create(&admin).await;
    let control = h.create(&admin).await;

    let holder = h.client().await;
    guard("attach held", holder.attach(&held)).await.unwrap();

    // A turn whose tool runs far longer than the test; its client leaves without cancelling,
    // so the turn runs on with no client attached.
    let prompter = h.client().await;
    let session = guard("attach turning", prompter.attach(&turning))
        .await
        .unwrap();
    let prompt = session.request(call(
        "pi.session",
        "prompt",
        vec![Value::from("run `sleep 600`")],
    ));
    tokio::pin!(prompt);
    tokio::select! {
        r = &mut prompt => panic!("the turn cannot finish: {r:?}"),
        _ = until(&dir, "sessions", |s| phase(s, &turning) == "turn") => {}
    }
    prompter.close().await;
    let _ = prompt.await;

    // A user command, likewise left running by its client.
    let fifo = h.project.join("started");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let reader = fifo.clone();
    std::thread::spawn(move || {
        let _ = started_tx.send(std::fs::read_to_string(reader));
    });
    let commander = h.client().await;
    let session = guard("attach commanding", commander.attach(&commanding))
        .await
        .unwrap();
    let command = format!("echo started > '{}'; sleep 600", fifo.display());
    let bash = session.request(call(
        "pi.session",
        "bash",
        vec![Value::from(command.as_str())],
    ));
    tokio::pin!(bash);
    tokio::select! {
        r = &mut bash => panic!("the command cannot finish: {r:?}"),
        line = started => assert_eq!(line.unwrap().unwrap().trim(), "started"),
    }
    commander.close().await;
    let _ = bash.await;

    let visitor = h.client().await;
    guard("attach control", visitor.attach(&control))
        .await
        .unwrap();
    guard("detach control", visitor.detach()).await.unwrap();
    until(&dir, "sessions", |s| {
        attached(s, &held) == Some(1)
            && attached(s, &turning) == Some(0)
            && attached(s, &control) == Some(0)
    })
    .await;

    jump(IDLE + Duration::from_secs(1)).await;
    // The control session, idle as long, closes: the reaper has run.
    let sessions = until(&dir, "sessions", |s| phase(s, &control) == "closed").await;
    assert_eq!(phase(&sessions, &held), "idle");
    assert_eq!(phase(&sessions, &turning), "turn");
    assert!(h.host.is_open(&held));
    assert!(h.host.is_open(&turning));
    assert!(
        h.host.is_open(&commanding),
        "a running command keeps it open"
    );
    assert!(!h.host.is_open(&control));
    h.stop().await;
}

#[tokio::test]
async fn an_open_over_the_open_session_limit_closes_the_least_recently_used_idle_session() {
    let h = Harness::start(at_most_open(2)).await;
    let client = h.client().await;
    let dir = directory(&client).await;
    let first = h.create(&client).await;
    let second = h.create(&client).await;
    let third = h.create(&client).await;
    for id in [&first, &second] {
        guard("attach", client.attach(id)).await.unwrap();
        guard("detach", client.detach()).await.unwrap();
    }
    assert_eq!(h.host.open_sessions(), 2);

    guard("attach third", client.attach(&third)).await.unwrap();
    assert!(!h.host.is_open(&first), "the least recently used idle one");
    assert!(h.host.is_open(&second));
    assert!(h.host.is_open(&third));
    until(&dir, "sessions", |s| phase(s, &first) == "closed").await;

    // Reopening a closed session makes room the same way (now `second` is the oldest idle).
    guard("detach third", client.detach()).await.unwrap();
    guard("re-attach first", client.attach(&first))
        .await
        .unwrap();
    assert!(h.host.is_open(&first));
    assert!(!h.host.is_open(&second));
    assert!(h.host.is_open(&third));
    assert_eq!(h.host.open_sessions(), 2);
    h.stop().await;
}

#[tokio::test]
async fn an_open_over_the_open_session_limit_answers_busy_when_no_session_is_idle() {
    let h = Harness::start(at_most_open(2)).await;
    let a = h.client().await;
    let b = h.client().await;
    let c = h.client().await;
    let first = h.create(&a).await;
    let second = h.create(&a).await;
    let third = h.create(&a).await;
    guard("attach a", a.attach(&first)).await.unwrap();
    guard("attach b", b.attach(&second)).await.unwrap();

    let refused = guard("attach c", c.attach(&third)).await.unwrap_err();
    assert!(refused.is(ErrorCode::Busy), "{refused}");
    assert!(refused.to_string().contains("limit 2"), "{refused}");
    assert!(!h.host.is_open(&third));

    // Once one is left idle, the same attach succeeds by closing it.
    guard("detach b", b.detach()).await.unwrap();
    guard("attach c again", c.attach(&third)).await.unwrap();
    assert!(h.host.is_open(&first));
    assert!(!h.host.is_open(&second));
    assert!(h.host.is_open(&third));
    h.stop().await;
}

#[tokio::test]
async fn create_over_the_per_owner_limit_answers_busy_and_counts_each_identity_apart() {
    let h = Harness::start(at_most_owned(2)).await;
    let unix = h.client().await;
    let first = h.create(&unix).await;
    h.create(&unix).await;
    let refused = h.try_create(&unix).await.unwrap_err();
    assert!(refused.is(ErrorCode::Busy), "{refused}");
    assert!(refused.to_string().contains("limit 2"), "{refused}");

    // Another identity (plain TCP) has its own allowance.
    let tcp = h.tcp_client().await;
    h.create(&tcp).await;
    h.create(&tcp).await;
    assert!(h.try_create(&tcp).await.unwrap_err().is(ErrorCode::Busy));

    // Removing a session gives its owner the place back.
    remove(&unix, &first).await;
    h.create(&unix).await;
    h.stop().await;
}

#[tokio::test]
async fn the_directory_lists_a_session_closed_exactly_when_the_host_has_it_closed() {
    let mut limits = idle_after(IDLE);
    limits.max_open_sessions = 2;
    let h = Harness::start(limits).await;
    let client = h.client().await;
    let dir = directory(&client).await;
    let (a, b, c) = (
        h.create(&client).await,
        h.create(&client).await,
        h.create(&client).await,
    );
    let all = [&a, &b, &c];
    assert_agree(&h, &all, "created").await;

    for id in [&a, &b] {
        guard("attach", client.attach(id)).await.unwrap();
        assert_agree(&h, &all, "attached").await;
        guard("detach", client.detach()).await.unwrap();
        assert_agree(&h, &all, "detached").await;
    }
    // At the cap: c's open closes a, the least recently used idle session.
    guard("attach c", client.attach(&c)).await.unwrap();
    assert_agree(&h, &all, "a evicted").await;
    until(&dir, "sessions", |s| phase(s, &a) == "closed").await;

    // Removing an open session and a closed one.
    remove(&client, &b).await;
    assert_agree(&h, &all, "open b removed").await;
    remove(&client, &a).await;
    assert_agree(&h, &all, "closed a removed").await;

    // Idle close, then the reopen.
    guard("detach c", client.detach()).await.unwrap();
    until(&dir, "sessions", |s| attached(s, &c) == Some(0)).await;
    jump(IDLE + Duration::from_secs(1)).await;
    // Wait for the host's own answer, then the directory must already say the same (the
    // reaper forgets the session and tells the directory without yielding in between).
    guard("the idle close", async {
        while h.host.is_open(&c) {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_agree(&h, &all, "c closed idle").await;
    until(&dir, "sessions", |s| phase(s, &c) == "closed").await;
    guard("re-attach c", client.attach(&c)).await.unwrap();
    assert_agree(&h, &all, "c reopened").await;
    h.stop().await;
}
