//! Subscriptions: response before updates, per-subscription encoders, duplicate ids,
//! unsubscribe, shared encoding, and slow subscribers (spec §5.2 steps 6–10, §5.5, §6.9).

use baton_protocol::{Id, Outcome, ServerMessage, ServiceUpdate, Target, Value};
use baton_server::Published;
use baton_tests::host::TestHost;
use baton_tests::mirror::Mirror;
use baton_tests::peer::{RawPeer, call, error, id};
use baton_tests::server::{TestServer, config};

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

fn unsubscribe(sid: &str) -> Value {
    call("$chord.service", "unsubscribe", vec![Value::from(sid)])
}

async fn subscribe_ok(p: &mut RawPeer, target: Target, sid: &str) -> Mirror {
    match p.call(target, subscribe(sid)).await {
        Outcome::Value(snapshot) => Mirror::new(&snapshot),
        other => panic!("subscribe failed: {other:?}"),
    }
}

async fn subscribe_server(p: &mut RawPeer, sid: &str) -> Mirror {
    let target = p.server_target();
    subscribe_ok(p, target, sid).await
}

async fn expect_update(p: &mut RawPeer, sid: &str) -> Value {
    match p.recv().await {
        ServerMessage::ServiceUpdate(ServiceUpdate {
            subscription_id,
            update,
        }) if subscription_id == id(sid) => update,
        other => panic!("expected an update for {sid}, got {other:?}"),
    }
}

#[tokio::test]
async fn subscribe_response_precedes_updates_published_while_subscribing() {
    let host = TestHost::new(&[]);
    host.bump();
    host.with(|i| i.race_updates = 3);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let rid = p.request(p.server_target(), subscribe("service-1")).await;
    // The response comes first even though 3 updates (and one the snapshot covers) were
    // published before the host returned the snapshot.
    let mut mirror = match p.expect_response(&rid).await {
        Outcome::Value(v) => Mirror::new(&v),
        other => panic!("subscribe failed: {other:?}"),
    };
    assert_eq!(mirror.sequence(), Some(1));
    for _ in 0..3 {
        let u = expect_update(&mut p, "service-1").await;
        mirror.apply(&u);
    }
    assert_eq!(mirror.sequence(), Some(4));
    assert_eq!(mirror.value(), Some(&host.counter_value()));
    // The covered update was accepted by the publisher but never sent.
    let ping = p
        .request(p.server_target(), call("test", "echo", vec![]))
        .await;
    assert_eq!(p.expect_response(&ping).await, Outcome::Value(Value::Null));
}

#[tokio::test]
async fn updates_use_the_subscriptions_own_path_dictionary() {
    let host = TestHost::new(&[]);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let mut mirror = subscribe_server(&mut p, "service-1").await;
    host.bump();
    host.bump();
    let first = expect_update(&mut p, "service-1").await;
    let second = expect_update(&mut p, "service-1").await;
    // Second use of a path defines an id (`#`) before referring to it.
    assert!(!first.to_json().contains("\"#\""), "{first}");
    assert!(
        second.to_json().contains("[\"#\",0,[\"value\"]]"),
        "{second}"
    );
    mirror.apply(&first);
    mirror.apply(&second);
    assert_eq!(mirror.value(), Some(&host.counter_value()));
}

#[tokio::test]
async fn duplicate_subscription_id_is_rejected() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    subscribe_server(&mut p, "service-1").await;
    assert_eq!(
        p.call(p.server_target(), subscribe("service-1")).await,
        error(
            "invalid_request",
            "Duplicate service subscription service-1"
        )
    );
}

#[tokio::test]
async fn unsubscribe_answers_void_and_stops_updates() {
    let host = TestHost::new(&[]);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let mut mirror = subscribe_server(&mut p, "service-1").await;
    host.bump();
    mirror.apply(&expect_update(&mut p, "service-1").await);
    assert_eq!(
        p.call(p.server_target(), unsubscribe("service-1")).await,
        Outcome::Void
    );
    host.bump();
    // Nothing for the old subscription arrives before the next response.
    let ping = p
        .request(p.server_target(), call("test", "echo", vec![]))
        .await;
    assert_eq!(p.expect_response(&ping).await, Outcome::Value(Value::Null));
    // The id can be used again.
    subscribe_server(&mut p, "service-1").await;
}

#[tokio::test]
async fn an_update_shared_by_subscribers_in_the_same_state_is_encoded_once() {
    let host = TestHost::new(&[]);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut a = s.ready_peer().await;
    let mut b = s.ready_peer().await;
    subscribe_server(&mut a, "service-1").await;
    subscribe_server(&mut b, "service-7").await;
    assert_eq!(host.bump(), 1);
    let ua = expect_update(&mut a, "service-1").await;
    let ub = expect_update(&mut b, "service-7").await;
    assert_eq!(ua, ub);
}

#[tokio::test]
async fn session_scoped_subscription_receives_updates() {
    let host = TestHost::new(&["s1"]);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let route = p.attach("s1").await;
    let mut mirror = subscribe_ok(&mut p, Target::Session(route), "service-1").await;
    host.bump();
    mirror.apply(&expect_update(&mut p, "service-1").await);
    assert_eq!(mirror.value(), Some(&host.counter_value()));
}

#[tokio::test]
async fn slow_subscriber_backlog_becomes_one_replaced_and_the_client_converges() {
    let host = TestHost::new(&[]);
    host.with(|i| i.blob_len = 64 * 1024);
    let mut c = config();
    c.subscriber_queue_length = 8;
    let s = TestServer::unix(host.clone(), c).await;
    let mut p = s.ready_peer().await;
    let mut mirror = subscribe_server(&mut p, "service-1").await;
    // The client stops reading; the socket fills, then the queue, then a resync replaces it.
    let mut bumps = 0;
    while !host.lock().published.contains(&Published::Reset) {
        host.bump();
        bumps += 1;
        assert!(bumps < 5_000, "no resync after {bumps} updates");
    }
    for _ in 0..3 {
        host.bump();
    }
    assert!(
        host.lock()
            .published
            .iter()
            .all(|r| *r != Published::Closed)
    );
    // Drain: everything published before the ping's response arrives before it.
    let ping = p
        .request(p.server_target(), call("test", "echo", vec![]))
        .await;
    loop {
        match p.recv().await {
            ServerMessage::ServiceUpdate(u) => {
                assert_eq!(u.subscription_id, Id::new("service-1").unwrap());
                mirror.apply(&u.update);
            }
            ServerMessage::Response(r) if r.id == ping => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(mirror.resets >= 1, "expected a resync");
    // A singleton's resync is one `replaced` (chord 0.85.1 refuses `reset`).
    assert!(mirror.types.get("replaced").is_some_and(|n| *n >= 1));
    assert_eq!(mirror.types.get("reset"), None);
    assert!(
        mirror.updates < bumps + 3,
        "some updates must have been coalesced"
    );
    assert_eq!(mirror.sequence(), Some(host.counter_sequence()));
    assert_eq!(mirror.value(), Some(&host.counter_value()));
}
