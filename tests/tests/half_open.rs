//! Half-open connections: the network between a client and the server disappears without a
//! FIN or RST (a laptop lid closes, a NAT forgets the flow). Pi v8 has no ping frame and an
//! idle subscriber of a quiet session is healthy, so neither end may close for silence alone;
//! TCP keepalive finds the dead peer, and the TCP user timeout finds it when data is stuck
//! unacknowledged (where keepalive sends no probes — which includes the moment right after
//! any send whose ACK the peer delayed).
//!
//! The two ends live in their own network namespaces joined by a veth link the test cuts
//! (`baton_tests::netns`); probes are shortened to 1 s + 2 × 1 s so a dead peer is found in
//! about 3 s. Needs root and iproute2; `.ci/run` sets `BATON_REQUIRE_NETNS=1`.
#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use baton_client::{Client, ClientConfig, Status};
use baton_protocol::chord::ServiceMode;
use baton_server::listen::TcpOptions;
use baton_server::{KeepaliveConfig, Listener, Server};
use baton_tests::host::TestHost;
use baton_tests::netns::{NetPair, SERVER_ADDR, Side};
use baton_tests::server::config;
use baton_tests::{HANG_GUARD, guard};

/// Probe after 1 s of silence, every 1 s, twice: a silent peer is dead after 3 s.
fn probes() -> KeepaliveConfig {
    KeepaliveConfig::new(Duration::from_secs(1), Duration::from_secs(1), 2)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What the server side saw after the cut.
#[derive(Debug)]
struct ServerSaw {
    connections_after: usize,
    services_released: usize,
}

/// Serves `test.counter` on the link, waits for the cut, optionally publishes into the dead
/// link, then waits for the connection's teardown.
fn serve(
    pair: &NetPair,
    host: TestHost,
    addr_tx: mpsc::Sender<SocketAddr>,
    cut: tokio::sync::oneshot::Receiver<()>,
    publish_after_cut: bool,
) -> std::thread::JoinHandle<ServerSaw> {
    pair.spawn_in(Side::Server, move || {
        runtime().block_on(async move {
            let mut c = config();
            c.tcp_keepalive = Some(probes());
            let mut tcp = TcpOptions::new(SocketAddr::new(SERVER_ADDR, 0));
            // A veth address is not loopback; the opt-in is what a LAN deployment sets too.
            tcp.allow_plaintext_non_loopback = true;
            let server = Server::start(c, host.clone(), vec![Listener::Tcp(tcp)])
                .await
                .unwrap();
            addr_tx
                .send(server.local_addrs()[0].socket_addr().unwrap())
                .unwrap();
            guard("the cut", cut).await.unwrap();
            if publish_after_cut {
                // Data now sits unacknowledged: keepalive sends no probes in that state.
                host.bump();
            }
            host.until("the dead connection's teardown", |i| {
                i.services_released == 1
            })
            .await;
            let saw = ServerSaw {
                connections_after: server.connection_count(),
                services_released: host.lock().services_released,
            };
            guard("close", server.close()).await.unwrap();
            saw
        })
    })
}

/// Connects over the link, subscribes, reports readiness, then waits for the client to
/// notice the connection is gone.
fn watch(
    pair: &NetPair,
    addr: SocketAddr,
    subscribed: mpsc::Sender<()>,
) -> std::thread::JoinHandle<String> {
    pair.spawn_in(Side::Client, move || {
        runtime().block_on(async move {
            let mut c = ClientConfig::new(format!("tcp://{addr}").parse().unwrap());
            c.tcp_keepalive = Some(probes());
            let client = guard("connect", Client::connect(c)).await.unwrap();
            let sub = guard(
                "subscribe",
                client.subscribe("test.counter", ServiceMode::Singleton),
            )
            .await
            .unwrap();
            subscribed.send(()).unwrap();
            let mut status = client.watch_status();
            let reason = guard("the client to notice the dead link", async {
                loop {
                    if let Status::Closed { reason } = status.borrow_and_update().clone() {
                        return reason.to_string();
                    }
                    status.changed().await.unwrap();
                }
            })
            .await;
            drop(sub);
            reason
        })
    })
}

/// Runs one cut: both ends must find the dead peer on their own within the hang guard.
fn cut_the_link(publish_after_cut: bool) {
    let Some(pair) = NetPair::create() else {
        return;
    };
    let host = TestHost::new(&["s1"]);
    let (addr_tx, addr_rx) = mpsc::channel();
    let (cut_tx, cut_rx) = tokio::sync::oneshot::channel();
    let server = serve(&pair, host, addr_tx, cut_rx, publish_after_cut);
    let addr = addr_rx.recv_timeout(HANG_GUARD).unwrap();
    let (sub_tx, sub_rx) = mpsc::channel();
    let client = watch(&pair, addr, sub_tx);
    sub_rx.recv_timeout(HANG_GUARD).unwrap();

    pair.cut();
    cut_tx.send(()).unwrap();

    let saw = server.join().unwrap();
    assert_eq!(
        saw.services_released, 1,
        "the server tore the connection down"
    );
    assert_eq!(saw.connections_after, 0, "and freed its slot");
    let reason = client.join().unwrap();
    assert!(!reason.is_empty(), "the client reports why it closed");
}

/// Keepalive probes find it; if the last update's ACK was still delayed at the cut, the user
/// timeout does (with neither, this hangs: checked by hand).
#[test]
fn an_idle_subscriber_cut_off_is_dropped_by_both_ends() {
    cut_the_link(false);
}

/// Only the user timeout can find this one: with data unacknowledged the kernel sends no
/// keepalive probes and would retransmit for ~15 minutes (without it, this hangs: checked by
/// hand).
#[test]
fn a_subscriber_cut_off_with_an_update_in_flight_is_dropped_by_both_ends() {
    cut_the_link(true);
}
