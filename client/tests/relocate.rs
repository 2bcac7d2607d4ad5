//! `ClientConfig::relocate` against scripted servers: a reconnect dials where the lookup
//! says (a host back at another address), and a lookup with no answer keeps the endpoint.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_client::{Client, Endpoint, ReconnectPolicy, Relocate};
use support::Listener;

/// Short exact delays (no jitter), so the test is quick in real time.
fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(10),
        multiplier: 1.0,
        jitter: 0.0,
        ..ReconnectPolicy::default()
    }
}

/// A lookup answering whatever `answer` holds at the time of each attempt.
fn lookup(answer: &Arc<Mutex<Option<Endpoint>>>) -> Relocate {
    let answer = Arc::clone(answer);
    Relocate::new(move || {
        let found = answer.lock().unwrap().clone();
        async move { found }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_dials_the_endpoint_the_lookup_answers_and_no_answer_keeps_the_last() {
    let (first, second) = (Listener::bind(), Listener::bind());
    let answer = Arc::new(Mutex::new(None));
    let mut config = first.config();
    config.reconnect = Some(policy());
    config.relocate = Some(lookup(&answer));
    let (client, peer) = tokio::join!(Client::connect(config), first.accept_ready());
    let client = client.unwrap();

    // No answer: the reconnect goes back to the first endpoint.
    drop(peer);
    let peer = first.accept_ready().await;

    // An answer: the next reconnect goes there, and stays there.
    *answer.lock().unwrap() = Some(second.endpoint());
    drop(peer);
    let peer = second.accept_ready().await;
    *answer.lock().unwrap() = None;
    drop(peer);
    let _peer = second.accept_ready().await;
    client.close().await;
}
