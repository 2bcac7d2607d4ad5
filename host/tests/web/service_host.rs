//! The web listener in front of the real `ServiceHost`, its gate the host's own link store:
//! links minted through `baton.links` (what `baton link` calls) by the host's own uid over
//! the Unix socket, traded with `POST /pair`, then `/ws` with the cookie. The browser is
//! `web:<token id>` and has its link's rights, and revoking the token (what `baton unlink`
//! calls) closes its socket at once.

use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, Endpoint};
use baton_host::clock::SystemClock;
use baton_host::service::ServiceHost;
use baton_host::session::SessionManager;
use baton_host::web::{WebConfig, WebGate, WebListener, WsBytes};
use baton_protocol::chord::{ServiceCall, ServiceMode};
use baton_protocol::{Outcome, ServerId, ServerMessage, SessionTarget, Target, Value};
use baton_server::Server;
use baton_tests::SERVER_ID;
use baton_tests::peer::{Event, RawPeer, call};
use tokio::net::TcpStream;

use crate::common::state::get;
use crate::common::{connect, host_config, scripted, serve, stop, try_create, until};
use crate::support::{exchange, pair_request, ws_connect};

/// A `ServiceHost` served on a Unix socket and a loopback web listener, and a client of the
/// host's own uid (an admin) over the socket.
struct Served {
    host: ServiceHost,
    server: Arc<Server<ServiceHost>>,
    web: WebListener,
    admin: Client,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        let manager = SessionManager::new(
            host_config(dir.path(), &project),
            scripted(Duration::ZERO),
            Arc::new(SystemClock),
        )
        .unwrap();
        let host = ServiceHost::new(manager).unwrap();
        let (server, socket) = serve(&host, SERVER_ID, dir.path(), Vec::new()).await;
        let server = Arc::new(server);
        let web = WebListener::start(
            WebConfig::new("127.0.0.1:0".parse().unwrap()),
            Arc::clone(&server),
            Arc::clone(host.links()) as Arc<dyn WebGate>,
        )
        .await
        .unwrap();
        host.set_web_base_urls(web.base_urls().to_vec());
        let admin = connect(Endpoint::Unix(socket)).await;
        Self {
            host,
            server,
            web,
            admin,
            _dir: dir,
        }
    }

    async fn admin_call(&self, service: &str, member: &str, args: Vec<Value>) -> Value {
        let call = ServiceCall::new(service, member, args).into_value();
        self.admin
            .request(self.admin.server_target(), call)
            .await
            .unwrap_or_else(|e| panic!("{service}.{member}: {e}"))
            .into_value()
    }

    async fn create(&self, name: &str) -> String {
        try_create(
            &self.admin,
            vec![Value::from_json(&format!(r#"{{"name":"{name}"}}"#)).unwrap()],
        )
        .await
        .unwrap()
    }

    /// `baton.links.mint` with `options` (JSON), the link's code traded for its cookie:
    /// (the `/pair` answer, the cookie's value).
    async fn pair(&self, options: &str) -> (Value, String) {
        let minted = self
            .admin_call(
                "baton.links",
                "mint",
                vec![Value::from_json(options).unwrap()],
            )
            .await;
        let url = get(&minted, "url").as_str().unwrap().to_owned();
        let origin = format!("http://{}", self.web.local_addr());
        let code = url
            .strip_prefix(&format!("{origin}/#pair="))
            .unwrap_or_else(|| panic!("a link to the listener: {url}"));
        let response = exchange(
            TcpStream::connect(self.web.local_addr()).await.unwrap(),
            &pair_request(
                &self.web.local_addr().to_string(),
                &origin,
                &format!(r#"{{"code":"{code}"}}"#),
            ),
        )
        .await;
        assert_eq!(response.status, 200, "{response:?}");
        let cookie = response.header("set-cookie");
        let value = cookie
            .strip_prefix("baton_web=")
            .and_then(|c| c.split(';').next())
            .unwrap()
            .to_owned();
        (Value::from_json(&response.body).unwrap(), value)
    }

    /// The browser with `cookie` on `/ws`, hello done.
    async fn browser(&self, cookie: &str) -> RawPeer {
        let origin = format!("http://{}", self.web.local_addr());
        let ws = ws_connect(
            self.web.local_addr(),
            &[
                ("Origin", &origin),
                ("Cookie", &format!("baton_web={cookie}")),
            ],
        )
        .await
        .unwrap();
        let mut peer = RawPeer::new(WsBytes::new(ws), ServerId::parse(SERVER_ID).unwrap());
        peer.handshake().await;
        peer
    }

    async fn stop(self) {
        self.web.close().await;
        stop(&self.host, &self.server).await;
    }
}

fn error_code(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Error(e) => e.code.as_str(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn management(member: &str, args: Vec<Value>) -> Value {
    call("pi.session-management", member, args)
}

/// Attaches `peer` to `session`: the attachment frame, then the host's void answer.
async fn attach(peer: &mut RawPeer, session: &str) -> SessionTarget {
    let rid = peer
        .request(
            peer.server_target(),
            management("attach", vec![Value::from(session)]),
        )
        .await;
    let route = peer.expect_attachment().await.expect("attached route");
    assert_eq!(peer.expect_response(&rid).await, Outcome::Void);
    route
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paired_browser_is_web_token_with_its_links_rights_and_unlink_closes_it() {
    let s = Served::start().await;
    let a = s.create("a").await;
    let b = s.create("b").await;

    // An operator link for session A: A only; B does not exist for it.
    let (paired, cookie) = s.pair(&format!(r#"{{"session":"{a}"}}"#)).await;
    assert_eq!(get(&paired, "role").as_str(), Some("operator"));
    assert_eq!(get(&paired, "session").as_str(), Some(a.as_str()));
    let token = get(&paired, "tokenId").as_str().unwrap().to_owned();
    let mut operator = s.browser(&cookie).await;
    let st = operator.server_target();
    let refused = operator
        .call(
            st.clone(),
            management("attach", vec![Value::from(b.as_str())]),
        )
        .await;
    assert_eq!(error_code(&refused), "session_not_found", "{refused:?}");
    assert_eq!(
        error_code(&operator.call(st, management("create", vec![])).await),
        "forbidden",
        "a link for one session creates none"
    );
    let route = attach(&mut operator, &a).await;
    // Listed in presence from its first call on the session: its subscription, as a page's.
    let subscribe = call(
        "$chord.service",
        "subscribe",
        vec![
            Value::from("page"),
            Value::from("pi.session"),
            Value::from("singleton"),
        ],
    );
    let subscribed = operator.call(Target::Session(route), subscribe).await;
    assert!(matches!(subscribed, Outcome::Value(_)), "{subscribed:?}");

    // The admin watching session A sees the browser by its token id.
    let watched = s.admin.attach(&a).await.unwrap();
    let sub = watched
        .subscribe("pi.session", ServiceMode::Singleton)
        .await
        .unwrap();
    let shown = format!("browser web:{token}");
    until("the browser in presence", &sub, "state", |state| {
        get(state, "attached").as_array().is_some_and(|a| {
            a.iter()
                .any(|c| get(c, "identity").as_str() == Some(&shown))
        })
    })
    .await;

    // A viewer link for A: attached, but a prompt is forbidden.
    let (paired, viewer_cookie) = s
        .pair(&format!(r#"{{"session":"{a}","viewer":true}}"#))
        .await;
    assert_eq!(get(&paired, "role").as_str(), Some("viewer"));
    let mut viewer = s.browser(&viewer_cookie).await;
    let route = attach(&mut viewer, &a).await;
    let prompted = viewer
        .call(
            Target::Session(route),
            call("pi.session", "prompt", vec![Value::from("not allowed")]),
        )
        .await;
    assert_eq!(error_code(&prompted), "forbidden", "{prompted:?}");

    // Revoking the operator's token (`baton unlink`) closes its socket at once; the viewer
    // stays.
    let revoke = Value::from_json(&format!(r#"{{"id":"web:{token}"}}"#)).unwrap();
    s.admin_call("baton.links", "revoke", vec![revoke]).await;
    // Its subscription's updates sent before that may still be on the way; nothing else is.
    loop {
        match operator.next_event().await {
            Event::Closed => break,
            Event::Message(ServerMessage::ServiceUpdate(_)) => {}
            Event::Message(other) => panic!("expected the close, got {other:?}"),
        }
    }
    let st = viewer.server_target();
    assert!(matches!(
        viewer.call(st, call("pi.models", "list", vec![])).await,
        Outcome::Value(_)
    ));
    let refused = ws_connect(
        s.web.local_addr(),
        &[
            ("Origin", &format!("http://{}", s.web.local_addr())),
            ("Cookie", &format!("baton_web={cookie}")),
        ],
    )
    .await;
    assert!(refused.is_err(), "a revoked cookie opens no socket");
    drop(sub);
    s.stop().await;
}
