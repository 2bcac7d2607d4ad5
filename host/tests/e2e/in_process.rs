//! The adapter behind a real server on a Unix socket, driven by `baton-client`.

use baton_client::{RequestOptions, SubscriptionEvent};
use baton_protocol::Value;
use baton_protocol::chord::{Op, PathSegment, ProviderUpdate, ServiceMode};
use tokio_util::sync::CancellationToken;

use crate::common::until;
use crate::state::*;
use crate::support::*;

fn prompt(text: &str) -> Value {
    call("pi.session", "prompt", vec![Value::from(text)])
}

fn role(item: &Value) -> &str {
    get(item, "role").as_str().unwrap_or("")
}

fn status(item: &Value) -> &str {
    get(item, "status").as_str().unwrap_or("")
}

fn tool_running(state: &Value) -> bool {
    transcript(state)
        .iter()
        .any(|i| role(i) == "tool" && status(i) == "running")
}

fn idle_and_settled(state: &Value) -> bool {
    get(state, "phase").as_str() == Some("idle")
        && transcript(state)
            .iter()
            .all(|i| !matches!(status(i), "running" | "streaming"))
}

fn entry<'a>(sessions: &'a Value, id: &str) -> Option<&'a Value> {
    sessions
        .as_array()?
        .iter()
        .find(|e| get(e, "id").as_str() == Some(id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_text_as_appends_and_replicas_converge() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, r#"{"name":"stream"}"#).await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let mut sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let initial = member(&sub, "state");
    // The default config confines the tools: as far as this kernel can.
    let confinement =
        baton_host::tool::confinement_status(&baton_host::tool::BashConfig::default());
    // Presence lists this client, by its Unix account.
    let identity = get(
        &get(&initial, "attached").as_array().unwrap()[0],
        "identity",
    )
    .clone();
    assert!(
        identity.as_str().unwrap().starts_with("uid "),
        "{identity:?}"
    );
    assert_eq!(
        initial.to_json(),
        format!(
            r#"{{"confinement":{{"active":{},"detail":{}}},"phase":"idle","model":"scripted/default","thinkingLevel":"off","transcript":[],"queuedSteer":[],"turnId":null,"followUps":[],"attached":[{{"id":1,"identity":{}}}],"compaction":{{"offered":true,"running":false}}}}"#,
            confinement.is_active(),
            Value::from(confinement.to_string().as_str()).to_json(),
            identity.to_json()
        )
    );
    // A second connection watches the same session (the update is shared by both).
    let watcher = h.client().await;
    let watched = guard("attach 2", watcher.attach(&id)).await.unwrap();
    let other = guard(
        "subscribe 2",
        watched.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();

    let mut updates = Vec::new();
    let mut clean = true;
    let request = session.request(prompt("run `echo hi`"));
    tokio::pin!(request);
    let reply = guard("prompt", async {
        loop {
            tokio::select! {
                reply = &mut request => break reply,
                event = sub.next_event() => match event {
                    Some(SubscriptionEvent::Updates(batch)) => updates.extend(&batch),
                    Some(SubscriptionEvent::Snapshot { resynced: false }) => {}
                    Some(SubscriptionEvent::Ended { reason }) => panic!("ended: {reason}"),
                    Some(_) => clean = false,
                    None => panic!("subscription closed"),
                },
            }
        }
    })
    .await
    .unwrap()
    .into_value();
    // Updates precede the response: whatever is queued was applied before it.
    while let Some(event) = sub.try_next_event() {
        match event {
            SubscriptionEvent::Updates(batch) => updates.extend(&batch),
            _ => clean = false,
        }
    }
    assert_eq!(reply.to_json(), r#"{"stopReason":"stop"}"#);

    // The replica is exactly the runtime's state, on both connections.
    let state = member(&sub, "state");
    assert_eq!(state, h.runtime_state(&id));
    until("second replica", &other, "state", |s| *s == state).await;

    // user, assistant (tool call), tool (result), assistant (answer).
    let items = transcript(&state);
    let roles: Vec<_> = items.iter().map(role).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    let call_block = get(&items[1], "content")
        .as_array()
        .unwrap()
        .iter()
        .find(|b| get(b, "type").as_str() == Some("toolCall"))
        .cloned()
        .unwrap();
    assert_eq!(get(&call_block, "name").as_str(), Some("bash"));
    assert_eq!(
        get(&call_block, "arguments").to_json(),
        r#"{"command":"echo hi"}"#
    );
    assert_eq!(get(&items[1], "stopReason").as_str(), Some("toolUse"));
    assert_eq!(status(&items[2]), "complete");
    assert_eq!(get(&items[2], "isError"), &Value::Bool(false));
    assert!(text_of(&items[2]).contains("hi"), "{}", items[2].to_json());
    assert_eq!(status(&items[3]), "complete");
    assert!(text_of(&items[3]).starts_with("Here is the result of `bash`"));

    // Every text and thinking block arrived as appends, never as a whole value.
    let ops: Vec<&Op> = updates
        .iter()
        .flat_map(|u| match u {
            ProviderUpdate::State { ops, .. } => ops.iter().collect::<Vec<_>>(),
            _ => {
                clean = false;
                Vec::new()
            }
        })
        .collect();
    for op in &ops {
        assert!(!op.is_replace(), "whole-state replacement: {op:?}");
        if let Op::Set { path, .. } = op {
            let last = path.last().cloned();
            assert!(
                last != Some(PathSegment::key("text"))
                    && last != Some(PathSegment::key("thinking")),
                "a text was set whole: {op:?}"
            );
        }
    }
    let mut checked = 0;
    for (i, item) in items
        .iter()
        .enumerate()
        .filter(|(_, i)| role(i) == "assistant")
    {
        for (j, block) in get(item, "content").as_array().unwrap().iter().enumerate() {
            let field = match get(block, "type").as_str() {
                Some("text") => "text",
                Some("thinking") => "thinking",
                _ => continue,
            };
            let path = vec![
                PathSegment::key("transcript"),
                PathSegment::Index(i as u64),
                PathSegment::key("content"),
                PathSegment::Index(j as u64),
                PathSegment::key(field),
            ];
            let appended: String = ops
                .iter()
                .filter_map(|op| match op {
                    Op::Append { path: p, text } if *p == path => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            assert!(!appended.is_empty(), "no appends for {path:?}");
            // Exact unless the client fell behind and re-baselined (never seen in practice).
            if clean {
                assert_eq!(appended, get(block, field).as_str().unwrap(), "{path:?}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 4, "thinking + text in both responses");

    drop((sub, other));
    client.close().await;
    watcher.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_abort_and_cancel_stop_running_turns() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, "{}").await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();

    // A prompt while a turn runs is refused; abort stops the tool and the turn.
    let (first, ()) = tokio::join!(session.request(prompt("run `sleep 30`")), async {
        until("tool running", &sub, "state", tool_running).await;
        let busy = session.request(prompt("hello")).await.unwrap_err();
        assert_eq!(busy.code(), Some("busy"), "{busy}");
        let busy = session
            .request(call("pi.session", "setThinking", vec![Value::from("low")]))
            .await
            .unwrap_err();
        assert_eq!(busy.code(), Some("busy"), "{busy}");
        session
            .request(call("pi.session", "abort", vec![]))
            .await
            .unwrap();
    });
    let first = first.unwrap().into_value();
    assert_eq!(get(&first, "stopReason").as_str(), Some("aborted"));
    let state = member(&sub, "state");
    assert!(idle_and_settled(&state), "{}", state.to_json());

    // Cancelling the prompt request aborts the turn too.
    let cancel = CancellationToken::new();
    let items_before = transcript(&state).len();
    let (second, ()) = tokio::join!(
        session.request_with_options(
            prompt("run `sleep 30`"),
            RequestOptions {
                cancel: Some(cancel.clone()),
                timeout: None,
            },
        ),
        async {
            until("second tool running", &sub, "state", |s| {
                transcript(s).len() > items_before && tool_running(s)
            })
            .await;
            cancel.cancel();
        }
    );
    assert!(matches!(second, Err(baton_client::RequestError::Cancelled)));
    let state = until("cancelled turn settles", &sub, "state", idle_and_settled).await;
    let last_tool = transcript(&state)
        .into_iter()
        .rev()
        .find(|i| role(i) == "tool")
        .unwrap();
    assert_eq!(status(&last_tool), "error", "{}", last_tool.to_json());
    assert_eq!(state, h.runtime_state(&id));

    // The session still works afterwards.
    let reply = guard("third prompt", session.request(prompt("hello again")))
        .await
        .unwrap()
        .into_value();
    assert_eq!(get(&reply, "stopReason").as_str(), Some("stop"));

    drop(sub);
    client.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_methods_take_effect_before_their_response() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, r#"{"thinkingLevel":"low"}"#).await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let state = || member(&sub, "state");
    let code = |r: Result<baton_client::Reply, baton_client::RequestError>| {
        r.unwrap_err().code().unwrap_or("(none)").to_owned()
    };
    assert_eq!(get(&state(), "thinkingLevel").as_str(), Some("low"));

    let req = |member: &str, args: &str| {
        session.request(call(
            "pi.session",
            member,
            v(args).as_array().unwrap().clone(),
        ))
    };
    guard("setThinking", req("setThinking", r#"["high"]"#))
        .await
        .unwrap();
    // No waiting: the update was on the wire before the response.
    assert_eq!(get(&state(), "thinkingLevel").as_str(), Some("high"));
    assert_eq!(
        code(req("setThinking", r#"["extreme"]"#).await),
        "invalid_request"
    );

    guard(
        "setModel",
        req("setModel", r#"[{"provider":"scripted","id":"default"}]"#),
    )
    .await
    .unwrap();
    assert_eq!(get(&state(), "model").as_str(), Some("scripted/default"));
    assert_eq!(
        code(req("setModel", r#"[{"provider":"nope","id":"x"}]"#).await),
        "invalid_request"
    );
    assert_eq!(
        code(req("setModel", r#"["scripted/default"]"#).await),
        "invalid_request"
    );
    assert_eq!(code(req("prompt", "[]").await), "invalid_request");
    assert_eq!(code(req("steer", r#"["later"]"#).await), "invalid_request");
    assert_eq!(code(req("nope", "[]").await), "service_member_not_found");

    // A user command: recorded at once when idle.
    let out = guard(
        "bash",
        req("bash", r#"["echo direct", {"excludeFromContext": true}]"#),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(get(&out, "exitCode").as_i64(), Some(0));
    assert!(get(&out, "output").as_str().unwrap().contains("direct"));
    assert_eq!(get(&out, "truncated"), &Value::Bool(false));
    let items = transcript(&state());
    let record = items.last().unwrap();
    assert_eq!(role(record), "bashExecution");
    assert_eq!(status(record), "complete");
    assert_eq!(get(record, "excludeFromContext"), &Value::Bool(true));
    assert_eq!(state(), h.runtime_state(&id));

    // Control calls on the session target.
    let catalogue = guard(
        "catalogue",
        session.request(call("$chord.service", "catalogue", vec![])),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(
        catalogue.to_json(),
        r#"[{"serviceId":"pi.session","mode":"singleton"}]"#
    );
    let err = session
        .subscribe("pi.nope", ServiceMode::Singleton)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("service_not_allowed"));
    let err = session
        .subscribe("pi.session", ServiceMode::Keyed)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("service_mode_mismatch"));

    drop(sub);
    client.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_and_models_publish_their_state() {
    let h = Harness::start().await;
    let admin = h.client().await;
    let server = admin.server_target();
    let models = guard(
        "models",
        admin.request(server.clone(), call("pi.models", "list", vec![])),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(
        models.to_json(),
        r#"[{"provider":"scripted","id":"default","name":"Scripted (offline demo)","default":true}]"#
    );
    let models_sub = guard(
        "models sub",
        admin.subscribe("pi.models", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    assert_eq!(member(&models_sub, "models"), models);
    let catalogue = guard(
        "catalogue",
        admin.request(server.clone(), call("$chord.service", "catalogue", vec![])),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(
        catalogue.to_json(),
        r#"[{"serviceId":"pi.session-management","mode":"singleton"},{"serviceId":"pi.session-directory","mode":"singleton"},{"serviceId":"pi.models","mode":"singleton"}]"#
    );

    let dir = guard(
        "directory sub",
        admin.subscribe("pi.session-directory", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    assert_eq!(member(&dir, "sessions").to_json(), "[]");

    let cwd = display(&h.project);
    let id = h
        .create(&admin, &format!(r#"{{"name":"dir","cwd":"{cwd}"}}"#))
        .await;
    // Published before the create response.
    let sessions = member(&dir, "sessions");
    let e = entry(&sessions, &id).unwrap();
    assert_eq!(get(e, "name").as_str(), Some("dir"));
    assert_eq!(get(e, "cwd").as_str(), Some(cwd.as_str()));
    assert_eq!(get(e, "phase").as_str(), Some("closed"));
    assert_eq!(get(e, "model").as_str(), Some("scripted/default"));
    assert_eq!(get(e, "attachedClients").as_i64(), Some(0));
    for key in ["createdAt", "updatedAt"] {
        assert!(get(e, key).as_str().unwrap().ends_with('Z'));
    }

    // A client attaches by unique prefix: the session opens, one client is attached.
    let user = h.client().await;
    let err = user.attach(&id[..7]).await.unwrap_err();
    assert_eq!(err.code(), Some("session_not_found"));
    let session = guard("attach by prefix", user.attach(&id[..8]))
        .await
        .unwrap();
    let sessions = until("attached", &dir, "sessions", |s| {
        entry(s, &id).is_some_and(|e| get(e, "attachedClients").as_i64() == Some(1))
    })
    .await;
    assert_eq!(
        get(entry(&sessions, &id).unwrap(), "phase").as_str(),
        Some("idle")
    );

    // A running turn shows as `turn`.
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let (first, ()) = tokio::join!(session.request(prompt("run `sleep 30`")), async {
        until("turn in directory", &dir, "sessions", |s| {
            entry(s, &id).is_some_and(|e| get(e, "phase").as_str() == Some("turn"))
        })
        .await;
        until("tool running", &sub, "state", tool_running).await;
        session
            .request(call("pi.session", "abort", vec![]))
            .await
            .unwrap();
    });
    first.unwrap();
    until("idle in directory", &dir, "sessions", |s| {
        entry(s, &id).is_some_and(|e| get(e, "phase").as_str() == Some("idle"))
    })
    .await;

    // Detaching drops the count; `list` answers the published list.
    drop(sub);
    guard("detach", user.detach()).await.unwrap();
    let sessions = until("detached", &dir, "sessions", |s| {
        entry(s, &id).is_some_and(|e| get(e, "attachedClients").as_i64() == Some(0))
    })
    .await;
    let listed = guard(
        "list",
        admin.request(server, call("pi.session-directory", "list", vec![])),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(listed, sessions);

    drop((dir, models_sub));
    admin.close().await;
    user.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_detaches_every_client_and_deletes_the_session() {
    let h = Harness::start().await;
    let admin = h.client().await;
    let server = admin.server_target();
    let id = h.create(&admin, "{}").await;
    let user = h.client().await;
    let session = guard("attach", user.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let remove = || {
        admin.request(
            server.clone(),
            call(
                "pi.session-management",
                "remove",
                vec![Value::from(id.as_str())],
            ),
        )
    };

    // Not while a turn runs.
    let (first, ()) = tokio::join!(session.request(prompt("run `sleep 30`")), async {
        until("tool running", &sub, "state", tool_running).await;
        let busy = remove().await.unwrap_err();
        assert_eq!(busy.code(), Some("busy"), "{busy}");
        session
            .request(call("pi.session", "abort", vec![]))
            .await
            .unwrap();
    });
    first.unwrap();

    let mut attachment = user.watch_attachment();
    assert!(attachment.borrow().is_some());
    guard("remove", remove()).await.unwrap();
    guard("attachment null", attachment.wait_for(Option::is_none))
        .await
        .unwrap();
    let listed = guard(
        "list",
        admin.request(server.clone(), call("pi.session-directory", "list", vec![])),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(listed.to_json(), "[]");
    let err = user.attach(&id).await.unwrap_err();
    assert_eq!(err.code(), Some("session_not_found"));
    let err = remove().await.unwrap_err();
    assert_eq!(err.code(), Some("session_not_found"));
    assert!(
        h.host.manager().list().unwrap().is_empty(),
        "the session file is gone"
    );

    drop(sub);
    admin.close().await;
    user.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_outlives_the_client_that_prompted_it() {
    let h = Harness::start().await;
    // The tool blocks on a FIFO until the test writes to it, so the turn is certainly
    // mid-tool when the prompting client goes away.
    let fifo = h.project.join("gate");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let first = h.client().await;
    let id = h.create(&first, "{}").await;
    let session = guard("attach", first.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let text = format!("run `cat {}`", display(&fifo));
    let prompting = session.request(prompt(&text));
    tokio::pin!(prompting);
    tokio::select! {
        r = &mut prompting => panic!("the turn cannot finish before the gate opens: {r:?}"),
        _ = until("tool running", &sub, "state", tool_running) => {}
    }
    // Leave without cancelling: the connection just goes away (dropping the request future
    // instead would send `cancel`, which does stop the turn).
    first.close().await;
    let lost = prompting.await.unwrap_err();
    assert!(
        matches!(lost, baton_client::RequestError::OutcomeUnknown(_)),
        "{lost}"
    );
    drop(sub);

    // Another client attaches and sees the same turn finish normally once the tool can.
    let second = h.client().await;
    let session = guard("re-attach", second.attach(&id)).await.unwrap();
    let sub = guard(
        "re-subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    assert!(
        tool_running(&member(&sub, "state")),
        "the turn was not aborted by the disconnect"
    );
    let writer = std::thread::spawn(move || std::fs::write(&fifo, "released\n"));
    let state = until("turn settles", &sub, "state", idle_and_settled).await;
    writer.join().unwrap().unwrap();
    let items = transcript(&state);
    let tool = items.iter().rev().find(|i| role(i) == "tool").unwrap();
    assert_eq!(status(tool), "complete", "{}", tool.to_json());
    assert!(text_of(tool).contains("released"), "{}", tool.to_json());
    let last = items.last().unwrap();
    assert_eq!(
        (role(last), status(last)),
        ("assistant", "complete"),
        "{}",
        last.to_json()
    );
    drop(sub);
    second.close().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_host_refuses_new_connections_and_creates_but_serves_what_is_open() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, "{}").await;

    // What the fleet's lease does when it cannot be renewed (docs/cluster.md).
    h.host.pause_new_work();
    let refused = crate::common::try_create(&client, vec![v("{}")])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("busy"), "{refused}");
    assert!(
        refused.to_string().contains("not taking new work"),
        "{refused}"
    );
    let hello = guard(
        "connect while paused",
        baton_client::Client::connect(baton_client::ClientConfig::new(
            baton_client::Endpoint::Unix(h.socket.clone()),
        )),
    )
    .await;
    let Err(error) = hello else {
        panic!("a new connection is refused while paused");
    };
    assert!(error.to_string().contains("not taking new work"), "{error}");
    // The connection already open goes on with the session already there.
    let session = guard("attach while paused", client.attach(&id))
        .await
        .unwrap();
    drop(session);

    h.host.resume_new_work();
    let again = h.client().await;
    h.create(&again, "{}").await;
    again.close().await;
    client.close().await;
    h.stop().await;
}
