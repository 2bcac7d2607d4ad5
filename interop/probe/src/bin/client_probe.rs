//! `baton-client-probe`: drives baton-client from line-JSON commands, for the interop suites.
//!
//! Reads one JSON command per line on stdin and writes one JSON object per line on stdout:
//! answers carry the command's `id`, events carry `event`. Only baton-client's public API is
//! used. Bad input is answered with `{"id", "error": {"kind": "probe", "message"}}`; the
//! probe never panics on it.
//!
//! Commands (`id` is echoed; any JSON value):
//!
//! * `{"cmd":"connect","socket":path,"serverId":uuid,"reconnect"?:{"initialMs","maxMs"}}`
//! * `{"cmd":"request","target":"server"|"session","service","member","args"?,"instance"?,
//!   "call"?}`: answers `{"ok":true,"result"}` (`"void":true` without a result); `call`
//!   sends a raw call value instead.
//! * `{"cmd":"cancel","request":<id of a request command>}`
//! * `{"cmd":"subscribe","name","target","service","mode":"singleton"|"keyed"}`: answers with
//!   the replica; then `{"event":"subscription","name","kind",…}` for every change.
//! * `{"cmd":"state","name"}`: the replica now. `{"cmd":"unsubscribe","name"}`.
//! * `{"cmd":"attach","session"}`, `{"cmd":"detach"}`, `{"cmd":"close"}`.
//!
//! Events: `subscription` (`snapshot`/`update`/`lagged`/`resyncing`/`ended` with its
//! `endReason`, then `closed` when the stream finishes; the replica stays readable with
//! `state` until `unsubscribe`), `attachment` and `status` (on every change the watches show).

#[path = "../client_probe/json.rs"]
mod json;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use baton_client::{
    Client, ClientConfig, EndReason, Endpoint, ReconnectPolicy, Reply, RequestOptions, Session,
    Status, Subscription, SubscriptionEvent,
};
use baton_protocol::chord::{InstanceAddress, Replica, ServiceCall, ServiceMode};
use baton_protocol::{ServerId, Value};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use json::{ProbeError, error_json, field, opt_field, replica_json, to_json};

/// Lines for the writer task.
type Out = mpsc::UnboundedSender<Json>;

/// Replica watches of subscriptions, by the suite's name for them (kept after a subscription
/// ends, until `unsubscribe`).
type Replicas = Arc<Mutex<HashMap<String, watch::Receiver<Arc<Replica>>>>>;

/// Cancellation tokens of requests in flight, by the command id that started them.
type Requests = Arc<Mutex<HashMap<String, CancellationToken>>>;

/// Runs a request to completion and answers it, forgetting its cancellation token.
async fn finish_request(
    out: Out,
    id: Json,
    requests: Requests,
    request: impl Future<Output = Result<Reply, baton_client::RequestError>>,
) {
    let result = request.await;
    requests.lock().remove(&id.to_string());
    answer(&out, &id, result.map(reply_json).map_err(ProbeError::from));
}

struct Probe {
    out: Out,
    client: Option<Client>,
    session: Option<Session>,
    replicas: Replicas,
    subscriptions: HashMap<String, AbortHandle>,
    requests: Requests,
    tasks: JoinSet<()>,
}

fn emit(out: &Out, line: Json) {
    // The writer only goes away when the probe is exiting.
    let _ = out.send(line);
}

fn answer(out: &Out, id: &Json, result: Result<Json, ProbeError>) {
    let line = match result {
        Ok(Json::Object(mut map)) => {
            map.insert("id".to_owned(), id.clone());
            map.entry("ok").or_insert(Json::Bool(true));
            Json::Object(map)
        }
        Ok(other) => json!({ "id": id, "ok": true, "result": other }),
        Err(e) => json!({ "id": id, "error": error_json(&e) }),
    };
    emit(out, line);
}

#[derive(Clone, Copy)]
enum Scope {
    Server,
    Session,
}

fn scope(cmd: &Json) -> Result<Scope, ProbeError> {
    match opt_field::<String>(cmd, "target")?.as_deref() {
        None | Some("server") => Ok(Scope::Server),
        Some("session") => Ok(Scope::Session),
        Some(other) => Err(ProbeError::input(format!("unknown target {other:?}"))),
    }
}

fn mode(cmd: &Json) -> Result<ServiceMode, ProbeError> {
    let name: String = field(cmd, "mode")?;
    ServiceMode::parse(&name).ok_or_else(|| ProbeError::input(format!("unknown mode {name:?}")))
}

/// The call of a `request` command: a raw `call`, or `service`/`member`/`args`/`instance`.
fn call_value(cmd: &Json) -> Result<Value, ProbeError> {
    if let Some(raw) = opt_field::<Value>(cmd, "call")? {
        return Ok(raw);
    }
    let args: Vec<Value> = opt_field(cmd, "args")?.unwrap_or_default();
    let mut call = ServiceCall::new(
        field::<String>(cmd, "service")?,
        field::<String>(cmd, "member")?,
        args,
    );
    if let Some(instance) = opt_field::<Value>(cmd, "instance")? {
        let address = InstanceAddress::parse(&instance)
            .map_err(|e| ProbeError::input(format!("instance: {e}")))?;
        call = call.with_instance(address);
    }
    Ok(call.into_value())
}

fn status_json(status: &Status) -> Json {
    match status {
        Status::Connected => json!({ "status": "connected" }),
        Status::Reconnecting {
            attempt, reason, ..
        } => {
            json!({ "status": "reconnecting", "attempt": attempt, "reason": reason })
        }
        Status::Closed { reason } => {
            json!({ "status": "closed", "reason": reason.to_string() })
        }
    }
}

/// The output lines for one event: one per update of a batch (so a suite sees the same lines
/// however the reads batched them), one for any other event.
fn event_lines(name: &str, event: &SubscriptionEvent) -> Vec<Json> {
    let line = |extra: Json| {
        let mut line = json!({ "event": "subscription", "name": name });
        if let (Json::Object(line), Json::Object(extra)) = (&mut line, extra) {
            line.extend(extra);
        }
        line
    };
    match event {
        SubscriptionEvent::Snapshot { resynced } => {
            vec![line(json!({ "kind": "snapshot", "resynced": resynced }))]
        }
        SubscriptionEvent::Updates(updates) => updates
            .iter()
            .map(|update| {
                line(json!({ "kind": "update", "type": update.type_name(), "update": to_json(&update.to_value()) }))
            })
            .collect(),
        SubscriptionEvent::Lagged => vec![line(json!({ "kind": "lagged" }))],
        SubscriptionEvent::Resyncing { reason } => {
            vec![line(json!({ "kind": "resyncing", "reason": reason }))]
        }
        SubscriptionEvent::Ended { reason } => {
            vec![line(json!({ "kind": "ended", "reason": reason }))]
        }
    }
}

/// `{"kind", "message", "sessionId"?}` for why a subscription ended.
fn end_reason_json(reason: &EndReason) -> Json {
    let mut line = json!({ "message": reason.to_string() });
    let kind = match reason {
        EndReason::Released => "released",
        EndReason::Detached => "detached",
        EndReason::AttachedElsewhere { session_id } => {
            line["sessionId"] = json!(session_id);
            "attached_elsewhere"
        }
        EndReason::ReattachFailed(e) | EndReason::ResubscribeFailed(e) => {
            line["error"] = error_json(&ProbeError::Request(e.clone()));
            if matches!(reason, EndReason::ReattachFailed(_)) {
                "reattach_failed"
            } else {
                "resubscribe_failed"
            }
        }
        EndReason::Closed(_) => "closed",
        _ => "other",
    };
    line["kind"] = json!(kind);
    line
}

/// Forwards a subscription's events until its stream ends (or the task is aborted, which
/// drops the subscription and so unsubscribes). The replica watch stays readable after the
/// end, so a suite can check what an ended subscription shows.
async fn forward_events(out: Out, name: String, mut sub: Subscription) {
    while let Some(event) = sub.next_event().await {
        for mut line in event_lines(&name, &event) {
            if matches!(event, SubscriptionEvent::Ended { .. })
                && let Some(reason) = sub.end_reason()
            {
                line["endReason"] = end_reason_json(&reason);
            }
            emit(&out, line);
        }
    }
    let reason = sub.end_reason().map_or(Json::Null, |r| end_reason_json(&r));
    emit(
        &out,
        json!({ "event": "subscription", "name": name, "kind": "closed", "endReason": reason }),
    );
}

/// Reports every change of the client's connection status and attachment.
async fn watch_client(out: Out, client: Client) {
    let mut status = client.watch_status();
    let mut attachment = client.watch_attachment();
    loop {
        tokio::select! {
            changed = status.changed() => {
                if changed.is_err() {
                    return;
                }
                let mut line = status_json(&status.borrow_and_update());
                line["event"] = json!("status");
                emit(&out, line);
            }
            changed = attachment.changed() => {
                if changed.is_err() {
                    return;
                }
                let current = attachment.borrow_and_update().clone();
                let value = current.map_or(Json::Null, |a| {
                    json!({
                        "serverId": a.server_id.as_str(),
                        "sessionId": a.session_id.as_str(),
                        "attachmentId": a.attachment_id.as_str(),
                    })
                });
                emit(&out, json!({ "event": "attachment", "attachment": value }));
            }
        }
    }
}

fn reply_json(reply: Reply) -> Json {
    match reply {
        Reply::Void => json!({ "void": true }),
        Reply::Value(v) => json!({ "result": to_json(&v) }),
    }
}

impl Probe {
    fn client(&self) -> Result<Client, ProbeError> {
        self.client
            .clone()
            .ok_or_else(|| ProbeError::input("not connected"))
    }

    fn session(&self) -> Result<Session, ProbeError> {
        self.session
            .clone()
            .ok_or_else(|| ProbeError::input("no session attached by this probe"))
    }

    async fn connect(&mut self, cmd: &Json) -> Result<Json, ProbeError> {
        if self.client.is_some() {
            return Err(ProbeError::input("already connected"));
        }
        let socket: String = field(cmd, "socket")?;
        let server_id: String = field(cmd, "serverId")?;
        let server_id =
            ServerId::parse(&server_id).map_err(|e| ProbeError::input(format!("serverId: {e}")))?;
        let mut config = ClientConfig::new(Endpoint::Unix(socket.into()));
        config.expected_server_id = Some(server_id);
        if let Some(policy) = opt_field::<Json>(cmd, "reconnect")? {
            let ms = |key: &str, default: u64| -> Result<Duration, ProbeError> {
                Ok(Duration::from_millis(
                    opt_field::<u64>(&policy, key)?.unwrap_or(default),
                ))
            };
            config.reconnect = Some(ReconnectPolicy {
                initial_delay: ms("initialMs", 20)?,
                max_delay: ms("maxMs", 200)?,
                ..ReconnectPolicy::default()
            });
        }
        let client = Client::connect(config)
            .await
            .map_err(|e| ProbeError::Connect {
                code: e.server_code().map(str::to_owned),
                message: e.to_string(),
            })?;
        self.tasks
            .spawn(watch_client(self.out.clone(), client.clone()));
        let server_id = client.server_id().as_str().to_owned();
        self.client = Some(client);
        Ok(json!({ "serverId": server_id }))
    }

    fn request(&mut self, id: &Json, cmd: &Json) -> Result<(), ProbeError> {
        let call = call_value(cmd)?;
        let cancel = CancellationToken::new();
        let options = RequestOptions {
            cancel: Some(cancel.clone()),
            timeout: opt_field::<u64>(cmd, "timeoutMs")?.map(Duration::from_millis),
        };
        let out = self.out.clone();
        let id = id.clone();
        let requests = Arc::clone(&self.requests);
        let key = id.to_string();
        match scope(cmd)? {
            Scope::Server => {
                let client = self.client()?;
                let target = client.server_target();
                self.requests.lock().insert(key, cancel);
                self.tasks.spawn(async move {
                    let request = client.request_with_options(target, call, options);
                    finish_request(out, id, requests, request).await;
                });
            }
            Scope::Session => {
                let session = self.session()?;
                self.requests.lock().insert(key, cancel);
                self.tasks.spawn(async move {
                    let request = session.request_with_options(call, options);
                    finish_request(out, id, requests, request).await;
                });
            }
        }
        Ok(())
    }

    fn cancel(&mut self, cmd: &Json) -> Result<Json, ProbeError> {
        let request: Json = field(cmd, "request")?;
        let token = self
            .requests
            .lock()
            .remove(&request.to_string())
            .ok_or_else(|| ProbeError::input(format!("no request {request}")))?;
        token.cancel();
        Ok(json!({}))
    }

    fn subscribe(&mut self, id: &Json, cmd: &Json) -> Result<(), ProbeError> {
        let name: String = field(cmd, "name")?;
        if self.subscriptions.contains_key(&name) {
            return Err(ProbeError::input(format!("subscription {name:?} exists")));
        }
        let service: String = field(cmd, "service")?;
        let mode = mode(cmd)?;
        let scope = scope(cmd)?;
        let (client, session) = match scope {
            Scope::Server => (Some(self.client()?), None),
            Scope::Session => (None, Some(self.session()?)),
        };
        let out = self.out.clone();
        let replicas = Arc::clone(&self.replicas);
        let id = id.clone();
        let task_name = name.clone();
        let handle = self.tasks.spawn(async move {
            let subscribed = match (client, session) {
                (Some(client), _) => client.subscribe(&service, mode).await,
                (None, Some(session)) => session.subscribe(&service, mode).await,
                (None, None) => return,
            };
            match subscribed {
                Ok(sub) => {
                    let state = sub.watch();
                    let replica = replica_json(&state.borrow());
                    replicas.lock().insert(task_name.clone(), state);
                    answer(&out, &id, Ok(json!({ "state": replica })));
                    forward_events(out, task_name, sub).await;
                }
                Err(e) => answer(&out, &id, Err(e.into())),
            }
        });
        self.subscriptions.insert(name, handle);
        Ok(())
    }

    fn state(&self, cmd: &Json) -> Result<Json, ProbeError> {
        let name: String = field(cmd, "name")?;
        let replicas = self.replicas.lock();
        let watch = replicas
            .get(&name)
            .ok_or_else(|| ProbeError::input(format!("no live subscription {name:?}")))?;
        Ok(json!({ "state": replica_json(&watch.borrow()) }))
    }

    fn unsubscribe(&mut self, cmd: &Json) -> Result<Json, ProbeError> {
        let name: String = field(cmd, "name")?;
        let handle = self
            .subscriptions
            .remove(&name)
            .ok_or_else(|| ProbeError::input(format!("no subscription {name:?}")))?;
        // Dropping the task's Subscription unsubscribes.
        handle.abort();
        self.replicas.lock().remove(&name);
        Ok(json!({}))
    }

    async fn attach(&mut self, cmd: &Json) -> Result<Json, ProbeError> {
        let session_id: String = field(cmd, "session")?;
        let session = self.client()?.attach(&session_id).await?;
        let target = session.initial_target();
        let line = json!({
            "target": {
                "serverId": target.server_id.as_str(),
                "sessionId": target.session_id.as_str(),
                "attachmentId": target.attachment_id.as_str(),
            }
        });
        self.session = Some(session);
        Ok(line)
    }

    async fn detach(&mut self) -> Result<Json, ProbeError> {
        self.client()?.detach().await?;
        Ok(json!({}))
    }

    /// Handles one command line; returns false after `close`.
    async fn handle(&mut self, line: &str) -> bool {
        let cmd: Json = match serde_json::from_str(line) {
            Ok(cmd) => cmd,
            Err(e) => {
                answer(
                    &self.out,
                    &Json::Null,
                    Err(ProbeError::input(format!("bad JSON: {e}"))),
                );
                return true;
            }
        };
        let id = cmd.get("id").cloned().unwrap_or(Json::Null);
        let name = cmd.get("cmd").and_then(Json::as_str).unwrap_or_default();
        let result = match name {
            "connect" => self.connect(&cmd).await,
            // Answered by their tasks.
            "request" => match self.request(&id, &cmd) {
                Ok(()) => return true,
                Err(e) => Err(e),
            },
            "subscribe" => match self.subscribe(&id, &cmd) {
                Ok(()) => return true,
                Err(e) => Err(e),
            },
            "cancel" => self.cancel(&cmd),
            "state" => self.state(&cmd),
            "unsubscribe" => self.unsubscribe(&cmd),
            "attach" => self.attach(&cmd).await,
            "detach" => self.detach().await,
            "close" => {
                if let Some(client) = self.client.take() {
                    client.close().await;
                }
                answer(&self.out, &id, Ok(json!({})));
                return false;
            }
            other => Err(ProbeError::input(format!("unknown cmd {other:?}"))),
        };
        answer(&self.out, &id, result);
        true
    }
}

async fn run(out: Out) {
    let mut probe = Probe {
        out,
        client: None,
        session: None,
        replicas: Replicas::default(),
        subscriptions: HashMap::new(),
        requests: Requests::default(),
        tasks: JoinSet::new(),
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) if line.trim().is_empty() => {}
                Ok(Some(line)) => {
                    if !probe.handle(&line).await {
                        break;
                    }
                }
                Ok(None) | Err(_) => break,
            },
            // Reaps finished tasks; a panic in one is a probe bug worth surfacing.
            Some(joined) = probe.tasks.join_next() => {
                if let Err(e) = joined
                    && e.is_panic()
                {
                    emit(&probe.out, json!({ "event": "probe_panic", "message": e.to_string() }));
                }
            }
        }
    }
    if let Some(client) = probe.client.take() {
        client.close().await;
    }
    probe.tasks.shutdown().await;
}

async fn write_lines(mut rx: mpsc::UnboundedReceiver<Json>) -> std::io::Result<()> {
    let mut stdout = tokio::io::stdout();
    while let Some(line) = rx.recv().await {
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        stdout.write_all(&bytes).await?;
        stdout.flush().await?;
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let (out, rx) = mpsc::unbounded_channel();
    let ((), written) = tokio::join!(run(out), write_lines(rx));
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
