//! The chord error answers of the services, as upstream's provider gives them (chord 0.85.1
//! `services/provider.ts`: `RemoteServiceProvider.invoke`/`subscribe` and
//! `createRemoteServiceEndpoint`; pi-server's `toProtocolError` for everything else).

use baton_protocol::chord::{InstanceAddress, ServiceCall};
use baton_protocol::{Outcome, Value, WireError};

use crate::state::*;
use crate::support::*;

fn error(code: &str, message: &str) -> Outcome {
    Outcome::Error(WireError::new(code, message))
}

fn subscribe(id: &str, service: &str, mode: &str) -> Value {
    call(
        "$chord.service",
        "subscribe",
        vec![Value::from(id), Value::from(service), Value::from(mode)],
    )
}

fn unsubscribe(id: &str) -> Value {
    call("$chord.service", "unsubscribe", vec![Value::from(id)])
}

fn addressed(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall {
        service_id: service.to_owned(),
        instance: Some(InstanceAddress::new("k", 1)),
        member: member.to_owned(),
        args,
    }
    .into_value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_services_are_not_allowlisted_on_both_scopes() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, "{}").await;
    let mut raw = h.raw().await;
    let server = raw.server();
    let not_allowed = |s: &str| {
        error(
            "service_not_allowed",
            &format!("Remote service {s} is not allowlisted"),
        )
    };
    assert_eq!(
        raw.call(&server, call("pi.nope", "list", vec![])).await,
        not_allowed("pi.nope")
    );
    assert_eq!(
        raw.call(&server, subscribe("s1", "pi.nope", "singleton"))
            .await,
        not_allowed("pi.nope")
    );
    // `pi.session` is a session service: the server scope does not offer it.
    assert_eq!(
        raw.call(&server, call("pi.session", "abort", vec![])).await,
        not_allowed("pi.session")
    );
    // A malformed control call is a call on `$chord.service` itself, which is not listed.
    assert_eq!(
        raw.call(
            &server,
            call("$chord.service", "catalogue", vec![Value::Null])
        )
        .await,
        not_allowed("$chord.service")
    );
    let session = raw.attach(&id).await;
    assert_eq!(
        raw.call(&session, call("pi.models", "list", vec![])).await,
        not_allowed("pi.models")
    );
    assert_eq!(
        raw.call(
            &session,
            subscribe("s2", "pi.session-directory", "singleton")
        )
        .await,
        not_allowed("pi.session-directory")
    );
    client.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_members_called_as_methods_are_member_mismatches() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, "{}").await;
    let mut raw = h.raw().await;
    let server = raw.server();
    for (service, member) in [
        ("pi.session-directory", "sessions"),
        ("pi.models", "models"),
    ] {
        assert_eq!(
            raw.call(&server, call(service, member, vec![])).await,
            error(
                "service_member_mismatch",
                &format!("Remote service member {service}.{member} is not a method"),
            )
        );
    }
    // Unknown members stay `service_member_not_found`.
    assert_eq!(
        raw.call(&server, call("pi.models", "nope", vec![])).await,
        error(
            "service_member_not_found",
            "Unknown remote service member pi.models.nope"
        )
    );
    let session = raw.attach(&id).await;
    assert_eq!(
        raw.call(&session, call("pi.session", "state", vec![]))
            .await,
        error(
            "service_member_mismatch",
            "Remote service member pi.session.state is not a method"
        )
    );
    assert_eq!(
        raw.call(&session, call("pi.session", "nope", vec![])).await,
        error(
            "service_member_not_found",
            "Unknown remote service member pi.session.nope"
        )
    );
    client.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_address_on_a_singleton_is_a_mode_mismatch_and_does_not_run() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, "{}").await;
    let mut raw = h.raw().await;
    let server = raw.server();
    assert_eq!(
        raw.call(&server, addressed("pi.models", "list", vec![]))
            .await,
        error(
            "service_mode_mismatch",
            "Remote service pi.models is singleton"
        )
    );
    // The allowlist is checked before the address.
    assert_eq!(
        raw.call(&server, addressed("pi.nope", "list", vec![]))
            .await,
        error(
            "service_not_allowed",
            "Remote service pi.nope is not allowlisted"
        )
    );
    let session = raw.attach(&id).await;
    assert_eq!(
        raw.call(
            &session,
            addressed("pi.session", "setThinking", vec![Value::from("high")])
        )
        .await,
        error(
            "service_mode_mismatch",
            "Remote service pi.session is singleton"
        )
    );
    assert_eq!(
        get(&h.runtime_state(&id), "thinkingLevel").as_str(),
        Some("off")
    );
    // Subscribing in the wrong mode is the other mode mismatch.
    assert_eq!(
        raw.call(&session, subscribe("s1", "pi.session", "keyed"))
            .await,
        error(
            "service_mode_mismatch",
            "Remote service pi.session is singleton, not keyed"
        )
    );
    client.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_a_subscription_that_is_not_open_is_an_internal_error() {
    // Upstream's endpoint throws a plain `Error("Service subscription was not found")`,
    // which pi-server sanitises.
    let not_found = error("internal_error", "Internal server error");
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, "{}").await;
    let mut raw = h.raw().await;
    let server = raw.server();
    assert_eq!(raw.call(&server, unsubscribe("never")).await, not_found);
    let snapshot = raw
        .call(&server, subscribe("models", "pi.models", "singleton"))
        .await;
    assert!(matches!(snapshot, Outcome::Value(_)), "{snapshot:?}");
    assert_eq!(
        raw.call(&server, unsubscribe("models")).await,
        Outcome::Void
    );
    assert_eq!(raw.call(&server, unsubscribe("models")).await, not_found);

    let session = raw.attach(&id).await;
    assert_eq!(raw.call(&session, unsubscribe("never")).await, not_found);
    let snapshot = raw
        .call(&session, subscribe("state", "pi.session", "singleton"))
        .await;
    assert!(matches!(snapshot, Outcome::Value(_)), "{snapshot:?}");
    // A subscription belongs to the scope that opened it.
    let directory = raw
        .call(
            &server,
            subscribe("dir", "pi.session-directory", "singleton"),
        )
        .await;
    assert!(matches!(directory, Outcome::Value(_)), "{directory:?}");
    assert_eq!(raw.call(&session, unsubscribe("dir")).await, not_found);
    assert_eq!(
        raw.call(&session, unsubscribe("state")).await,
        Outcome::Void
    );
    assert_eq!(raw.call(&session, unsubscribe("state")).await, not_found);
    assert_eq!(raw.call(&server, unsubscribe("dir")).await, Outcome::Void);
    client.close().await;
    h.stop().await;
}
