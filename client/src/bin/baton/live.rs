//! What `prompt`, `watch` and `attach` share: calls, opening a session's subscription, and
//! printing what changed in its replica.

use std::io::Write;

use baton_client::{Client, ClientConfig, Relocate, Reply, Session, Subscription};
use baton_protocol::chord::{ServiceCall, ServiceMode};
use baton_protocol::{ErrorCode, Value};

use crate::failure::{EXIT_NOT_FOUND, Failure};
use crate::line_view::{Printer, TranscriptProgress, piece_json};
use crate::resolve::Entry;

/// What `attach` and `watch` are given: a connected client and the resolved session.
#[derive(Debug, Clone)]
pub(crate) struct Target<'a> {
    /// The connected client (no reconnect policy: `config` can open one that has it).
    pub(crate) client: &'a Client,
    /// The configuration `client` was connected with (endpoint, TLS, expected server id), for
    /// the reconnecting client of `attach` and `watch`.
    pub(crate) config: &'a ClientConfig,
    /// The session, already resolved from its id, name or prefix.
    pub(crate) session: &'a Entry,
    /// For a session of another fleet host: where to dial on each reconnect (located again
    /// through the host `baton` first connected to).
    pub(crate) relocate: Option<Relocate>,
    /// `--json`: machine-readable output.
    pub(crate) json: bool,
}

/// A service call value.
pub(crate) fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new(service, member, args).into_value()
}

/// Writes `v` as one JSON line.
pub(crate) fn print_json(out: &mut impl Write, v: &Value) -> Result<(), Failure> {
    writeln!(out, "{}", v.to_json())?;
    Ok(())
}

/// `v[k]`, or null.
pub(crate) fn field<'a>(v: &'a Value, k: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    v.as_map().and_then(|m| m.get(k)).unwrap_or(&NULL)
}

/// A value as display text (`-` for null).
pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_json(),
    }
}

/// Attaches to `session` and subscribes to its `pi.session` service.
pub(crate) async fn open_session(
    client: &Client,
    session: &str,
) -> Result<(Session, Subscription), Failure> {
    let session = client.attach(session).await.map_err(|e| match e.kind() {
        Some(ErrorCode::SessionNotFound) => Failure::new(
            EXIT_NOT_FOUND,
            ErrorCode::SessionNotFound.as_str(),
            format!("unknown session {session:?}"),
        ),
        _ => Failure::from(e),
    })?;
    let sub = session
        .subscribe("pi.session", ServiceMode::Singleton)
        .await?;
    Ok((session, sub))
}

/// The replica's `state` value.
pub(crate) fn session_state(sub: &Subscription) -> Value {
    sub.state()
        .value(None, "state")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Prints what changed; returns the current state.
pub(crate) fn render(
    sub: &Subscription,
    progress: &mut TranscriptProgress,
    printer: &mut Printer,
    json: bool,
    out: &mut impl Write,
) -> Result<Value, Failure> {
    let state = session_state(sub);
    for piece in progress.advance(&state) {
        if json {
            print_json(out, &piece_json(&piece))?;
        } else {
            printer.print(out, &piece)?;
        }
    }
    Ok(state)
}

/// A prompt's reply as its stop reason; a turn that ended in error or was aborted fails.
pub(crate) fn stop_reason_result(reply: Reply) -> Result<String, Failure> {
    let v = reply.into_value();
    let reason = text(field(&v, "stopReason"));
    match reason.as_str() {
        "stop" | "toolUse" | "-" => Ok(reason),
        other => Err(Failure::op(format!("the turn ended with {other}"))),
    }
}
