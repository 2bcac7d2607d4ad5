//! The `pi.session` members and methods for clients that live in a session, over a real
//! server: presence, the follow-up queue seen by every attached client, steering that names
//! its turn, `compact` and `completePath`. The running turn waits on a FIFO the test
//! writes, so every step waits on observed state, never on time.

use std::io::Write;
use std::path::{Path, PathBuf};

use baton_protocol::Value;
use baton_protocol::chord::ServiceMode;

use crate::common::until;
use crate::state::*;
use crate::support::*;

fn mkfifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
    path
}

/// Writes a line into `fifo` on a thread (opening blocks until the command reads it).
fn release(fifo: PathBuf) {
    std::thread::spawn(move || {
        let mut file = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        file.write_all(b"go\n").unwrap();
    });
}

fn session_call(member: &str, args: Vec<Value>) -> Value {
    call("pi.session", member, args)
}

fn attached(state: &Value) -> Vec<String> {
    get(state, "attached")
        .as_array()
        .unwrap()
        .iter()
        .map(|a| get(a, "identity").as_str().unwrap().to_owned())
        .collect()
}

fn follow_up_texts(state: &Value) -> Vec<String> {
    get(state, "followUps")
        .as_array()
        .unwrap()
        .iter()
        .map(|f| get(f, "text").as_str().unwrap().to_owned())
        .collect()
}

fn user_texts(state: &Value) -> Vec<String> {
    transcript(state)
        .iter()
        .filter(|i| get(i, "role").as_str() == Some("user"))
        .map(text_of)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_see_each_other_and_a_follow_up_queued_by_one_runs_for_both() {
    let h = Harness::start().await;
    let gate = mkfifo(&h.project, "gate");
    let alice = h.client().await;
    let id = h.create(&alice, r#"{"name":"together"}"#).await;
    let a = guard("attach a", alice.attach(&id)).await.unwrap();
    let a_sub = guard(
        "subscribe a",
        a.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let bob = h.client().await;
    let b = guard("attach b", bob.attach(&id)).await.unwrap();
    let b_sub = guard(
        "subscribe b",
        b.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    // Presence: both replicas list both clients.
    let both = until("two attached", &a_sub, "state", |s| attached(s).len() == 2).await;
    assert!(
        attached(&both).iter().all(|i| i.starts_with("uid ")),
        "{both:?}"
    );
    until("b sees two", &b_sub, "state", |s| attached(s).len() == 2).await;

    // Alice's turn waits on the FIFO; Bob queues a follow-up meanwhile.
    let prompt = a.request(session_call(
        "prompt",
        vec![Value::from("run `read line < gate; echo released`")],
    ));
    let (reply, ()) = tokio::join!(prompt, async {
        let running = until("turn running", &b_sub, "state", |s| {
            get(s, "turnId").as_str().is_some()
                && transcript(s)
                    .iter()
                    .any(|i| get(i, "role").as_str() == Some("tool"))
        })
        .await;
        let turn = get(&running, "turnId").as_str().unwrap().to_owned();
        let queued = b
            .request(session_call("followUp", vec![Value::from("and then this")]))
            .await
            .unwrap()
            .into_value();
        assert_eq!(get(&queued, "started"), &Value::Bool(false));
        // The answer follows the update: Bob's replica already lists it, and Alice's does.
        assert_eq!(follow_up_texts(&member(&b_sub, "state")), ["and then this"]);
        until("a sees the follow-up", &a_sub, "state", |s| {
            follow_up_texts(s) == ["and then this"]
        })
        .await;
        // A steer naming another turn is refused; one naming this turn is queued.
        let stale = b
            .request(session_call(
                "steer",
                vec![Value::from("late"), v(r#"{"turnId":"turn-00000000"}"#)],
            ))
            .await
            .unwrap_err();
        assert_eq!(stale.code(), Some("invalid_request"), "{stale}");
        assert!(stale.to_string().contains("turn-00000000"), "{stale}");
        let mut options = baton_protocol::Map::new();
        options.insert("turnId", Value::from(turn.as_str()));
        b.request(session_call(
            "steer",
            vec![Value::from("on time"), Value::Map(options)],
        ))
        .await
        .unwrap();
        release(gate.clone());
    });
    let reply = reply.unwrap().into_value();
    assert_eq!(get(&reply, "stopReason").as_str(), Some("stop"));
    // The follow-up ran as the next prompt; both replicas end idle and equal.
    let done = until("follow-up ran", &a_sub, "state", |s| {
        get(s, "phase").as_str() == Some("idle") && user_texts(s).contains(&"and then this".into())
    })
    .await;
    assert!(follow_up_texts(&done).is_empty());
    assert_eq!(get(&done, "turnId"), &Value::Null);
    let texts = user_texts(&done);
    assert_eq!(
        texts.first().map(String::as_str),
        Some("run `read line < gate; echo released`")
    );
    assert!(texts.contains(&"on time".to_owned()), "{texts:?}");
    assert!(!texts.iter().any(|t| t == "late"), "{texts:?}");
    until("b converges", &b_sub, "state", |s| *s == done).await;
    assert_eq!(done, h.runtime_state(&id));

    // Bob leaves: Alice's replica lists one client again.
    drop(b_sub);
    drop(b);
    bob.close().await;
    until("one attached", &a_sub, "state", |s| attached(s).len() == 1).await;
    drop(a_sub);
    alice.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_editing_compact_and_path_completion_answer_with_documented_errors() {
    let h = Harness::start().await;
    std::fs::create_dir(h.project.join("src")).unwrap();
    std::fs::write(h.project.join("src/main.rs"), "fn main() {}\n").unwrap();
    let client = h.client().await;
    let id = h.create(&client, r#"{"name":"methods"}"#).await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let state = member(&sub, "state");
    assert_eq!(
        get(&state, "compaction").to_json(),
        r#"{"offered":true,"running":false}"#
    );

    let err = |member: &str, args: Vec<Value>| {
        let request = session.request(session_call(member, args));
        async move { request.await.unwrap_err() }
    };
    let e = err("editFollowUp", vec![Value::from("f9"), Value::from("x")]).await;
    assert_eq!(e.code(), Some("invalid_request"), "{e}");
    let e = err("removeFollowUp", vec![Value::from("f9")]).await;
    assert_eq!(e.code(), Some("invalid_request"), "{e}");
    let e = err(
        "followUp",
        vec![Value::from(
            "x".repeat(baton_host::session::MAX_PROMPT_BYTES + 1),
        )],
    )
    .await;
    assert_eq!(e.code(), Some("invalid_request"), "{e}");
    let cleared = session
        .request(session_call("clearFollowUps", vec![]))
        .await
        .unwrap()
        .into_value();
    assert_eq!(cleared.to_json(), r#"{"removed":0}"#);
    // An empty session has nothing to compact.
    let e = err("compact", vec![]).await;
    assert_eq!(e.code(), Some("invalid_request"), "{e}");
    assert!(e.to_string().contains("Nothing to compact"), "{e}");
    let e = err("compact", vec![Value::from(1u32)]).await;
    assert_eq!(e.code(), Some("invalid_request"), "{e}");

    let found = session
        .request(session_call("completePath", vec![Value::from("src/m")]))
        .await
        .unwrap()
        .into_value();
    assert_eq!(
        found.to_json(),
        r#"{"entries":[{"path":"src/main.rs","dir":false}],"truncated":false}"#
    );
    let found = session
        .request(session_call("completePath", vec![Value::from("s")]))
        .await
        .unwrap()
        .into_value();
    assert_eq!(
        found.to_json(),
        r#"{"entries":[{"path":"src/","dir":true}],"truncated":false}"#
    );
    for bad in ["../", "/etc/"] {
        let e = err("completePath", vec![Value::from(bad)]).await;
        assert_eq!(e.code(), Some("invalid_request"), "{bad}: {e}");
    }
    // While idle, a follow-up starts a turn at once.
    let started = session
        .request(session_call("followUp", vec![Value::from("hello")]))
        .await
        .unwrap()
        .into_value();
    assert_eq!(get(&started, "started"), &Value::Bool(true));
    until("idle after the follow-up", &sub, "state", |s| {
        get(s, "phase").as_str() == Some("idle") && user_texts(s) == ["hello"]
    })
    .await;
    drop(sub);
    client.close().await;
    h.stop().await;
}
