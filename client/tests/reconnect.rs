//! Reconnect backoff against a scripted server, in paused time: when the delays grow, and
//! when a connection has been healthy long enough to start them over.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::time::Duration;

use baton_client::{Client, ReconnectPolicy, Status};
use baton_protocol::{Id, Outcome, ServerMessage, SessionTarget};
use support::{HANG_GUARD, Listener, Peer};
use tokio::time::Instant;

const HEALTHY_AFTER: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 100 ms doubling to 800 ms, no jitter, so every delay is exact in paused time.
fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_delay: ms(100),
        max_delay: ms(800),
        multiplier: 2.0,
        jitter: 0.0,
        healthy_after: HEALTHY_AFTER,
        max_attempts: None,
    }
}

async fn connected(listener: &Listener) -> (Client, Peer) {
    let mut config = listener.config();
    config.reconnect = Some(policy());
    let (client, peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    (client.unwrap(), peer)
}

/// Drops `peer` now and returns how long the client waited before its next handshake.
async fn drop_and_time_the_reconnect(listener: &Listener, peer: Peer) -> (Duration, Peer) {
    let dropped = Instant::now();
    drop(peer);
    let next = listener.accept_ready().await;
    (dropped.elapsed(), next)
}

fn route(attachment: &str) -> SessionTarget {
    SessionTarget {
        server_id: support::server_id(),
        session_id: Id::new("session-1").unwrap(),
        attachment_id: Id::new(attachment).unwrap(),
    }
}

/// Answers the (re-)attach request `peer` receives next.
async fn answer_attach(peer: &mut Peer, attachment: &str) {
    let r = peer.recv_request().await;
    peer.send(ServerMessage::Attachment(Some(route(attachment))))
        .await;
    peer.respond(&r.id, Outcome::Void).await;
}

#[tokio::test(start_paused = true)]
async fn a_server_that_drops_every_connection_right_after_the_handshake_is_retried_with_growing_delays()
 {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let (waited, next) = drop_and_time_the_reconnect(&listener, peer).await;
        waits.push(waited);
        peer = next;
    }
    assert_eq!(waits, [ms(100), ms(200), ms(400), ms(800), ms(800)]);

    // The attempt number counts from the last healthy connection too.
    drop(peer);
    let mut status = client.watch_status();
    tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Reconnecting { attempt: 6, .. })),
    )
    .await
    .unwrap()
    .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_stayed_healthy_resets_the_backoff() {
    let listener = Listener::bind();
    let (_client, peer) = connected(&listener).await;
    let (waited, peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(100));
    let (waited, peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(200));

    // Up for just under `healthy_after`: not yet healthy, the delay keeps growing.
    tokio::time::sleep(HEALTHY_AFTER - ms(1)).await;
    let (waited, peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(400));

    // Up for `healthy_after`: the next loss starts over at the initial delay.
    tokio::time::sleep(HEALTHY_AFTER).await;
    let (waited, peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(100));
    let (waited, _peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(200));
}

#[tokio::test(start_paused = true)]
async fn a_connection_is_healthy_only_once_its_re_attach_was_answered() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let attach = client.attach("session-1");
    let (session, ()) = tokio::join!(attach, answer_attach(&mut peer, "attachment-1"));
    let _session = session.unwrap();

    // The server takes the hello but never answers the re-attach: however long that
    // connection stays up, it was not healthy.
    let (waited, mut peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(100));
    let _unanswered = peer.recv_request().await;
    tokio::time::sleep(HEALTHY_AFTER * 2).await;
    let (waited, mut peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(200));

    // Answered, then up for `healthy_after` from the answer: the backoff starts over.
    tokio::time::sleep(HEALTHY_AFTER).await;
    answer_attach(&mut peer, "attachment-2").await;
    let mut attachment = client.watch_attachment();
    tokio::time::timeout(
        HANG_GUARD,
        attachment.wait_for(|a| a.as_ref() == Some(&route("attachment-2"))),
    )
    .await
    .unwrap()
    .unwrap();
    tokio::time::sleep(HEALTHY_AFTER).await;
    let (waited, _peer) = drop_and_time_the_reconnect(&listener, peer).await;
    assert_eq!(waited, ms(100));
}

/// The delays `client` draws for its first `n` reconnect attempts, as its status reports
/// them.
async fn drawn_delays(client: &Client, n: usize) -> Vec<Duration> {
    let mut status = client.watch_status();
    let mut delays = Vec::new();
    let drawn = async {
        loop {
            if let Status::Reconnecting {
                attempt, retry_in, ..
            } = &*status.borrow_and_update()
                && *attempt as usize == delays.len() + 1
            {
                delays.push(*retry_in);
            }
            if delays.len() == n {
                return;
            }
            status.changed().await.unwrap();
        }
    };
    tokio::time::timeout(HANG_GUARD, drawn).await.unwrap();
    delays
}

#[tokio::test(start_paused = true)]
async fn clients_made_back_to_back_draw_their_own_reconnect_delays() {
    let listener = Listener::bind();
    let jittered = ReconnectPolicy {
        jitter: 0.25,
        ..policy()
    };
    let mut clients = Vec::new();
    for _ in 0..2 {
        let mut config = listener.config();
        config.reconnect = Some(jittered.clone());
        let (client, peer) = tokio::join!(Client::connect(config), listener.accept_ready());
        clients.push((client.unwrap(), peer));
    }
    // The host goes away for good: both clients retry, each with the jitter it draws.
    let (clients, peers): (Vec<Client>, Vec<Peer>) = clients.into_iter().unzip();
    drop(peers);
    drop(listener);
    let (a, b) = tokio::join!(drawn_delays(&clients[0], 4), drawn_delays(&clients[1], 4));
    for (delay, base) in a.iter().chain(&b).zip([100, 200, 400, 800].iter().cycle()) {
        let base = ms(*base);
        assert!(
            *delay >= base.mul_f64(0.75) && *delay < base.mul_f64(1.25),
            "{delay:?} for {base:?}"
        );
    }
    assert_ne!(a, b, "both clients would reconnect in lockstep");
}
