//! Property: whatever the server's state does, and however the connection and the
//! subscription are interrupted, the client's replica converges to the server's value.

use std::net::SocketAddr;
use std::time::Duration;

use baton_client::{Client, ClientConfig, Endpoint, ReconnectPolicy, Subscription};
use baton_protocol::chord::ServiceMode;
use baton_protocol::{Map, Number, Value};
use baton_tests::guard;
use baton_tests::host::TestHost;
use baton_tests::server::{TestServer, config};
use proptest::prelude::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// A loopback TCP proxy whose live connections can be cut, to drop a client's connection
/// the way a network would, while the server keeps running.
struct Proxy {
    addr: SocketAddr,
    accept: JoinSet<()>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, cut_rx) = tokio::sync::watch::channel(0u64);
        let mut accept = JoinSet::new();
        accept.spawn(async move {
            let mut links = JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let mut cut_rx = cut_rx.clone();
                cut_rx.mark_unchanged();
                links.spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Self { addr, accept, cut }
    }

    /// Drops every live connection (both directions, at once).
    fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort_all();
    }
}

#[derive(Debug, Clone)]
enum Action {
    /// The host moves to a new state.
    Set(Value),
    /// Many states in a row without waiting (overflows the subscriber queue).
    Burst(Vec<Value>),
    /// The network drops the connection.
    Cut,
    /// The consumer drops its subscription and subscribes again.
    Resubscribe,
}

fn text() -> impl Strategy<Value = String> {
    "[a-c ]{0,12}"
}

/// States shaped like a session: a growing log, a list, counters, nested maps.
fn state() -> impl Strategy<Value = Value> {
    (
        text(),
        prop::collection::vec(0i64..50, 0..6),
        0i64..1000,
        prop::option::of(text()),
        prop::collection::vec(("[a-d]", text()), 0..4),
    )
        .prop_map(|(log, list, n, maybe, extra)| {
            let mut m = Map::new();
            m.insert("log", Value::from(log));
            m.insert(
                "list",
                Value::Array(
                    list.into_iter()
                        .map(|i| Value::Number(Number::from_i64(i).unwrap()))
                        .collect(),
                ),
            );
            m.insert("n", Value::Number(Number::from_i64(n).unwrap()));
            if let Some(s) = maybe {
                m.insert("maybe", Value::from(s));
            }
            let nested: Map = extra
                .into_iter()
                .map(|(k, v)| (k, Value::from(v)))
                .collect();
            m.insert("nested", Value::Map(nested));
            Value::Map(m)
        })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => state().prop_map(Action::Set),
        1 => prop::collection::vec(state(), 101..160).prop_map(Action::Burst),
        2 => Just(Action::Cut),
        1 => Just(Action::Resubscribe),
    ]
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

async fn run(actions: Vec<Action>) {
    let s = TestServer::tcp(TestHost::new(&[]), config()).await;
    let proxy = Proxy::start(s.addr()).await;
    let mut c = ClientConfig::new(Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port: proxy.addr.port(),
    });
    c.reconnect = Some(ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(10),
        ..ReconnectPolicy::default()
    });
    let client = Client::connect(c).await.unwrap();
    let mut sub = client
        .subscribe("test.counter", ServiceMode::Singleton)
        .await
        .unwrap();
    converged(&s.host, &sub).await;
    for action in actions {
        match action {
            Action::Set(v) => s.host.set_counter_state(v),
            Action::Burst(vs) => {
                for v in vs {
                    s.host.set_counter_state(v);
                }
            }
            Action::Cut => proxy.cut(),
            Action::Resubscribe => {
                drop(sub);
                sub = guard(
                    "resubscribe",
                    client.subscribe("test.counter", ServiceMode::Singleton),
                )
                .await
                .unwrap();
            }
        }
        converged(&s.host, &sub).await;
    }
    client.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn replicas_converge_through_random_streams_drops_and_resubscriptions(
        actions in prop::collection::vec(action(), 1..16)
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run(actions));
    }
}
