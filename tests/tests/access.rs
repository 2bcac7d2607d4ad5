//! Access suite, over real sockets against the real service host
//! (`baton-host`'s `ServiceHost`): who may see, attach to, change and remove which session.
//!
//! * Two client certificates from one CA: B neither lists, attaches to (by id or prefix)
//!   nor removes A's session (`session_not_found`: its existence is not leaked).
//! * A viewer watches a live turn; every mutating call is `forbidden`, reads are served.
//! * A policy reload (the function `SIGHUP` calls) disconnects a revoked fingerprint, and
//!   the listener then refuses it before any protocol byte; a bad file keeps the old policy.
//! * The plain-TCP identity is restricted by a policy, and refused without a grant.
//! * Another Unix uid is refused at the listener before the handshake (needs root to run a
//!   child as uid 65534; SKIPPED otherwise, required with `BATON_REQUIRE_ROOT_TESTS=1`).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton_host::clock::SystemClock;
use baton_host::journal::FsyncPolicy;
use baton_host::provider::ModelRegistry;
use baton_host::provider::scripted::ScriptedConfig;
use baton_host::service::{AccessPolicy, ServiceHost};
use baton_host::session::{HostConfig, SUMMARY_REQUEST_OPENING, SessionManager};
use baton_protocol::codec::ServerMessageDecoder;
use baton_protocol::{
    Id, Outcome, Response, ServerMessage, ServiceUpdate, SessionTarget, Target, Value, WireError,
};
use baton_server::{ClientAuth, Listener, Server, ServerConfig, TlsConfig};
use baton_tests::certs::{Identity, TestCa};
use baton_tests::peer::{Event, RawPeer, call, id};
use baton_tests::{TempDir, guard, server_id};

const MANAGEMENT: &str = "pi.session-management";
const DIRECTORY: &str = "pi.session-directory";
/// The environment variable that names the socket to the child-process probe.
const PROBE_SOCKET: &str = "BATON_ACCESS_PROBE_SOCKET";

struct Harness {
    host: ServiceHost,
    server: Server<ServiceHost>,
    ca: TestCa,
    unix: PathBuf,
    tcp: SocketAddr,
    tls: SocketAddr,
    policy: PathBuf,
    dir: TempDir,
}

impl Harness {
    /// A host on Unix, loopback TCP and mutual TLS, under `policy` (TOML) if given.
    async fn start(policy: Option<&str>) -> Self {
        let dir = TempDir::new();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        let mut config = HostConfig::new(dir.path().join("sessions"));
        config.default_cwd = project;
        config.fsync = FsyncPolicy::Never;
        let manager = SessionManager::new(
            config,
            ModelRegistry::scripted(ScriptedConfig::new(
                Duration::from_millis(1),
                SUMMARY_REQUEST_OPENING,
            )),
            Arc::new(SystemClock),
        )
        .unwrap();
        let host = ServiceHost::new(manager).unwrap();
        let policy_path = dir.path().join("access.toml");
        if let Some(text) = policy {
            std::fs::write(&policy_path, text).unwrap();
            let _ = host.set_access_policy(Some(AccessPolicy::load(&policy_path).unwrap()));
        }
        let ca = TestCa::new("Baton Access CA");
        let server_cert = ca.server();
        let tls = TlsConfig::with_client_ca(
            server_cert.cert_pem.as_bytes(),
            server_cert.key_pem.as_bytes(),
            ca.cert_pem().as_bytes(),
            ClientAuth::Required,
        )
        .unwrap();
        let loopback: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let server = Server::start(
            ServerConfig::new(server_id()),
            host.clone(),
            vec![
                Listener::unix(dir.path().join("run")),
                Listener::tcp(loopback),
                Listener::tls(loopback, tls),
            ],
        )
        .await
        .unwrap();
        let addrs = server.local_addrs();
        let unix = addrs[0].unix_path().unwrap().to_path_buf();
        let tcp = addrs[1].socket_addr().unwrap();
        let tls = addrs[2].socket_addr().unwrap();
        Self {
            host,
            server,
            ca,
            unix,
            tcp,
            tls,
            policy: policy_path,
            dir,
        }
    }

    /// A TLS peer presenting `who`, past the hello.
    async fn tls_peer(&self, who: &Identity) -> RawPeer {
        let mut p = self.tls_connect(who).await;
        guard("tls hello", p.handshake()).await;
        p
    }

    async fn tls_connect(&self, who: &Identity) -> RawPeer {
        RawPeer::tls(self.tls, server_id(), self.ca.cert_pem(), Some(who))
            .await
            .unwrap()
    }

    /// A Unix peer (this process's uid: the host's own, hence admin).
    async fn unix_peer(&self) -> RawPeer {
        let mut p = RawPeer::unix(&self.unix, server_id()).await;
        guard("unix hello", p.handshake()).await;
        p
    }

    /// Writes `text` as the policy file and reloads it as `SIGHUP` does.
    fn reload(&self, text: &str) -> Result<usize, baton_host::service::PolicyError> {
        std::fs::write(&self.policy, text).unwrap();
        self.host.reload_access(&self.server, &self.policy)
    }

    async fn stop(self) {
        self.host.begin_shutdown();
        guard("server close", self.server.close()).await.unwrap();
        guard("host shutdown", self.host.shutdown()).await;
        drop(self.dir);
    }
}

fn fingerprint(who: &Identity) -> String {
    ring::digest::digest(&ring::digest::SHA256, &who.cert_der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The response to `rid`, skipping the updates and attachment frames that may come first.
async fn response(p: &mut RawPeer, rid: &Id) -> Outcome {
    guard("response", async {
        loop {
            match p.recv().await {
                ServerMessage::Response(Response { id, outcome }) if &id == rid => return outcome,
                ServerMessage::ServiceUpdate(_) | ServerMessage::Attachment(_) => {}
                other => panic!("expected response to {rid}, got {other:?}"),
            }
        }
    })
    .await
}

async fn server_call(p: &mut RawPeer, service: &str, member: &str, args: Vec<Value>) -> Outcome {
    let target = p.server_target();
    let rid = p.request(target, call(service, member, args)).await;
    response(p, &rid).await
}

/// An error outcome's code, or `ok` for a value or a void answer.
fn code(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Error(e) => e.code.as_str(),
        _ => "ok",
    }
}

async fn create(p: &mut RawPeer) -> String {
    match server_call(p, MANAGEMENT, "create", Vec::new()).await {
        Outcome::Value(v) => v
            .as_map()
            .and_then(|m| m.get("sessionId"))
            .and_then(Value::as_str)
            .unwrap()
            .to_owned(),
        other => panic!("create failed: {other:?}"),
    }
}

/// The ids `pi.session-directory.list` gives `p`.
async fn listed(p: &mut RawPeer) -> Vec<String> {
    match server_call(p, DIRECTORY, "list", Vec::new()).await {
        Outcome::Value(Value::Array(items)) => items
            .iter()
            .filter_map(|e| e.as_map()?.get("id")?.as_str().map(str::to_owned))
            .collect(),
        other => panic!("list failed: {other:?}"),
    }
}

/// Attaches `p` to `session`; the route, or the error outcome.
async fn attach(p: &mut RawPeer, session: &str) -> Result<SessionTarget, Outcome> {
    let target = p.server_target();
    let rid = p
        .request(
            target,
            call(MANAGEMENT, "attach", vec![Value::from(session)]),
        )
        .await;
    let mut route = None;
    guard("attach", async {
        loop {
            match p.recv().await {
                ServerMessage::Attachment(a) => route = a,
                ServerMessage::Response(Response { id, outcome }) if id == rid => {
                    return match outcome {
                        Outcome::Error(_) => Err(outcome),
                        _ => Ok(route.take().expect("an attachment frame before the answer")),
                    };
                }
                ServerMessage::ServiceUpdate(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await
}

async fn session_call(
    p: &mut RawPeer,
    route: &SessionTarget,
    member: &str,
    args: Vec<Value>,
) -> Outcome {
    let rid = p
        .request(
            Target::Session(route.clone()),
            call("pi.session", member, args),
        )
        .await;
    response(p, &rid).await
}

fn forbidden(message: String) -> Outcome {
    Outcome::Error(WireError::new("forbidden", message))
}

#[tokio::test]
async fn a_tls_identity_cannot_see_attach_to_or_remove_another_identitys_session() {
    let h = Harness::start(None).await;
    let alice = h.ca.client("alice");
    let bob = h.ca.client("bob");
    let mut a = h.tls_peer(&alice).await;
    let mut b = h.tls_peer(&bob).await;

    let session = create(&mut a).await;
    assert_eq!(listed(&mut a).await, std::slice::from_ref(&session));
    assert!(
        listed(&mut b).await.is_empty(),
        "B's list leaks A's session"
    );
    let not_found = Outcome::Error(WireError::new("session_not_found", "Session was not found"));
    assert_eq!(attach(&mut b, &session).await.unwrap_err(), not_found);
    assert_eq!(
        attach(&mut b, &session[..8]).await.unwrap_err(),
        not_found,
        "a prefix reveals nothing either"
    );
    assert_eq!(
        server_call(
            &mut b,
            MANAGEMENT,
            "remove",
            vec![Value::from(session.as_str())]
        )
        .await,
        not_found
    );
    // B cannot prompt it: there is no route to address, and a made-up one is refused.
    let made_up = SessionTarget {
        server_id: server_id(),
        session_id: id(&session),
        attachment_id: id("00000000-0000-4000-8000-000000000000"),
    };
    assert_eq!(
        code(&session_call(&mut b, &made_up, "prompt", vec![Value::from("hi")]).await),
        "session_not_attached"
    );
    // B's own session is B's alone; the host's own Unix account (admin) sees both.
    let bobs = create(&mut b).await;
    assert_eq!(listed(&mut b).await, std::slice::from_ref(&bobs));
    assert_eq!(listed(&mut a).await, std::slice::from_ref(&session));
    let mut admin = h.unix_peer().await;
    let mut all = listed(&mut admin).await;
    all.sort();
    let mut expected = vec![session.clone(), bobs];
    expected.sort();
    assert_eq!(all, expected);
    // The owner attaches and removes its own session.
    let route = attach(&mut a, &session).await.unwrap();
    assert_eq!(route.session_id, id(&session));
    assert_eq!(
        code(&server_call(&mut a, MANAGEMENT, "detach", Vec::new()).await),
        "ok"
    );
    assert_eq!(
        code(
            &server_call(
                &mut a,
                MANAGEMENT,
                "remove",
                vec![Value::from(session.as_str())]
            )
            .await
        ),
        "ok"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_viewer_watches_a_live_turn_but_every_mutating_call_is_forbidden() {
    let h = Harness::start(None).await;
    let alice = h.ca.client("alice");
    let carol = h.ca.client("carol");
    let fp = fingerprint(&carol);
    h.reload(&format!(
        "[[grant]]\nrole = \"viewer\"\ntls_fingerprint = \"{fp}\"\n"
    ))
    .unwrap();
    let mut a = h.tls_peer(&alice).await;
    let mut v = h.tls_peer(&carol).await;
    let session = create(&mut a).await;
    assert_eq!(
        listed(&mut v).await,
        std::slice::from_ref(&session),
        "a viewer of all sessions"
    );

    let owner_route = attach(&mut a, &session).await.unwrap();
    let route = attach(&mut v, &session).await.unwrap();
    let subscribe = call(
        "$chord.service",
        "subscribe",
        vec![
            Value::from("watch"),
            Value::from("pi.session"),
            Value::from("singleton"),
        ],
    );
    let rid = v.request(Target::Session(route.clone()), subscribe).await;
    assert_eq!(code(&response(&mut v, &rid).await), "ok");

    // The owner starts a turn; the viewer sees it happen.
    let prompt = a
        .request(
            Target::Session(owner_route.clone()),
            call("pi.session", "prompt", vec![Value::from("hello")]),
        )
        .await;
    guard("the viewer sees the turn", async {
        loop {
            if let ServerMessage::ServiceUpdate(ServiceUpdate {
                subscription_id, ..
            }) = v.recv().await
                && subscription_id == id("watch")
            {
                return;
            }
        }
    })
    .await;

    let refused = forbidden(format!(
        "Identity tls:sha256={fp} may only view session {session}"
    ));
    let model = {
        let mut m = baton_protocol::Map::new();
        m.insert("provider", Value::from("scripted"));
        m.insert("id", Value::from("default"));
        Value::Map(m)
    };
    for (member, args) in [
        ("prompt", vec![Value::from("mine now")]),
        ("steer", vec![Value::from("left")]),
        ("abort", Vec::new()),
        ("bash", vec![Value::from("id")]),
        ("setModel", vec![model]),
        ("setThinking", vec![Value::from("high")]),
    ] {
        assert_eq!(
            session_call(&mut v, &route, member, args).await,
            refused,
            "{member}"
        );
    }
    assert_eq!(
        code(
            &session_call(
                &mut v,
                &route,
                "listItems",
                vec![Value::from(0u32), Value::from(10u32)]
            )
            .await
        ),
        "ok",
        "reading is viewing"
    );
    assert_eq!(
        server_call(
            &mut v,
            MANAGEMENT,
            "remove",
            vec![Value::from(session.as_str())]
        )
        .await,
        forbidden(format!(
            "Identity tls:sha256={fp} may not remove session {session}"
        ))
    );
    assert_eq!(
        server_call(&mut v, MANAGEMENT, "create", Vec::new()).await,
        forbidden(format!("Identity tls:sha256={fp} may not create sessions"))
    );
    // The owner's turn was not disturbed.
    match response(&mut a, &prompt).await {
        Outcome::Value(v) => assert_eq!(
            v.as_map()
                .and_then(|m| m.get("stopReason"))
                .and_then(Value::as_str),
            Some("stop")
        ),
        other => panic!("the owner's prompt failed: {other:?}"),
    }
    h.stop().await;
}

#[tokio::test]
async fn a_reload_disconnects_a_revoked_fingerprint_and_a_bad_file_keeps_the_old_policy() {
    let h = Harness::start(None).await;
    let mallory = h.ca.client("mallory");
    let alice = h.ca.client("alice");
    let fp = fingerprint(&mallory);
    let mut m = h.tls_peer(&mallory).await;
    let mut a = h.tls_peer(&alice).await;
    let _ = create(&mut m).await;

    // A bad file is refused with a one-line error naming it; nothing changes.
    let error = h
        .reload("[[grant]]\nrole = \"admin\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("access.toml") && error.contains("names no identity"),
        "{error}"
    );
    assert!(!error.contains('\n'));
    assert_eq!(
        listed(&mut m).await.len(),
        1,
        "still connected after a bad reload"
    );

    let closed = h
        .reload(&format!("[[deny]]\ntls_fingerprint = \"{fp}\"\n"))
        .unwrap();
    assert_eq!(closed, 1, "only the revoked identity's connection closes");
    assert_eq!(m.next_event().await, Event::Closed);
    // Everyone else is still served.
    assert!(listed(&mut a).await.is_empty());
    // And the listener refuses the revoked certificate before any protocol byte.
    let mut again = h.tls_connect(&mallory).await;
    assert_eq!(
        again.recv().await,
        ServerMessage::HelloError(WireError::new(
            "forbidden",
            format!("Identity tls:sha256={fp} is not admitted by the access policy")
        ))
    );
    again.expect_closed().await;
    h.stop().await;
}

#[tokio::test]
async fn the_tcp_identity_is_restricted_by_a_policy() {
    // Without a policy the loopback TCP identity is an admin.
    let h = Harness::start(None).await;
    let mut t = RawPeer::tcp(h.tcp, server_id()).await;
    t.handshake().await;
    let session = create(&mut t).await;
    h.stop().await;
    drop(session);

    let h = Harness::start(Some("[[grant]]\nrole = \"viewer\"\ntcp = true\n")).await;
    let mut admin = h.unix_peer().await;
    let session = create(&mut admin).await;
    let mut t = RawPeer::tcp(h.tcp, server_id()).await;
    t.handshake().await;
    assert_eq!(listed(&mut t).await, std::slice::from_ref(&session));
    let route = attach(&mut t, &session).await.unwrap();
    assert_eq!(
        session_call(&mut t, &route, "bash", vec![Value::from("id")]).await,
        forbidden(format!("Identity tcp may only view session {session}"))
    );
    assert_eq!(
        server_call(&mut t, MANAGEMENT, "create", Vec::new()).await,
        forbidden("Identity tcp may not create sessions".to_owned())
    );
    // A policy that does not name tcp refuses it at the listener, and closes its connection.
    assert_eq!(
        h.reload("[[grant]]\nrole = \"admin\"\nunix_uid = 4242\n")
            .unwrap(),
        1
    );
    assert_eq!(t.next_event().await, Event::Closed);
    let mut refused = RawPeer::tcp(h.tcp, server_id()).await;
    refused
        .expect_hello_error(
            "forbidden",
            "Identity tcp is not admitted by the access policy",
        )
        .await;
    h.stop().await;
}

/// Run as root: a child process with uid and gid 65534 connects to the host's socket and
/// must be refused before the handshake. Elsewhere: SKIPPED, unless
/// `BATON_REQUIRE_ROOT_TESTS=1` makes it required.
#[tokio::test]
async fn another_unix_uid_is_refused_at_the_listener_before_any_protocol_byte() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    if rustix::process::getuid().as_raw() != 0 {
        baton_testkit::Need::Root.skip("running a child as another uid needs root");
        return;
    }
    let h = Harness::start(None).await;
    // Let the throwaway account reach the socket: only the listener stands in its way.
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    open(h.dir.path(), 0o755).unwrap();
    open(h.unix.parent().unwrap(), 0o755).unwrap();
    open(&h.unix, 0o666).unwrap();
    // The probe runs as that account, so it must reach the executable too: a checkout under
    // a private directory (a 0700 temporary clone) would refuse it. Run a copy from a
    // directory anyone may enter.
    let exe_dir = TempDir::new();
    open(exe_dir.path(), 0o755).unwrap();
    let me = exe_dir.path().join("access-probe");
    std::fs::copy(std::env::current_exe().unwrap(), &me).unwrap();
    open(&me, 0o755).unwrap();
    let socket = h.unix.clone();
    let output = guard(
        "the probe as uid 65534",
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(me)
                .args([
                    "--exact",
                    "unix_probe_child",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(PROBE_SOCKET, socket)
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap()
        }),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "probe failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("1 passed"),
        "the probe ran no test: {stdout}"
    );
    assert!(
        stdout.contains("PROBE forbidden: Unix user 65534 may not connect to this host"),
        "{stdout}"
    );
    // The host's own account is still served.
    let mut me = h.unix_peer().await;
    assert!(listed(&mut me).await.is_empty());
    h.stop().await;
}

/// The child half of the test above, run by it as uid 65534 on the socket [`PROBE_SOCKET`]
/// names: connects, writes nothing, and reports the one frame the server sends.
#[test]
#[ignore = "run by another_unix_uid_is_refused_at_the_listener_before_any_protocol_byte"]
fn unix_probe_child() {
    use std::io::Read;
    let socket = std::env::var_os(PROBE_SOCKET).expect(PROBE_SOCKET);
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let frames = ServerMessageDecoder::new(u32::MAX).push(&bytes).unwrap();
    match frames.as_slice() {
        [ServerMessage::HelloError(e)] => println!("PROBE {}: {}", e.code, e.message),
        other => panic!("expected one hello_error, got {other:?}"),
    }
}
