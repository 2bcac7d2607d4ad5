//! One connection's lease on a hosted session: `pi.session` and its `$chord.service` control
//! calls.

use std::sync::Arc;

use baton_protocol::chord::{CatalogueEntry, SERVICE_CONTROL_ID, catalogue_to_value};
use baton_protocol::{Map, Value};
use baton_server::chord::{ControlCall, RemoteServiceError, ServiceCall, ServiceMode};
use baton_server::{CallResult, Context, PeerIdentity, Publisher, ServiceError, ServiceScope};

use super::args::{arity, check_text_len, index_arg, model_arg, path_arg, string_arg, text_arg};
use super::errors::{invalid, service_error};
use super::live::{LiveSession, MEMBER, SERVICE};
use super::publish::{Owner, SubscriptionIds};
use super::shared::Shared;
use super::wire::{count_value, published_item};
use crate::model_ref::ThinkingLevel;
use crate::session::{
    MAX_COMPACT_INSTRUCTIONS_BYTES, MAX_PAGE_ITEMS, MAX_PUBLISHED_ITEM_BYTES, MAX_READ_BYTES,
};
use crate::value::read_string;

/// The `pi.session` methods that need operator rights (a viewer may call none of them):
/// every method that changes the session, and `completePath`, which lists the host's files
/// for composing a prompt only an operator could send.
const MUTATING: &[&str] = &[
    "prompt",
    "steer",
    "abort",
    "setModel",
    "setThinking",
    "bash",
    "followUp",
    "editFollowUp",
    "removeFollowUp",
    "clearFollowUps",
    "compact",
    "completePath",
];

/// A connection's lease on a hosted session.
#[derive(Debug)]
pub struct SessionLease {
    shared: Arc<Shared>,
    live: Arc<LiveSession>,
    owner: Owner,
    subscriptions: SubscriptionIds,
    /// This lease's entry in the session's presence list, made at its first call (the
    /// first call carries the connection's identity; every client subscribes at once).
    presence: std::sync::OnceLock<u64>,
}

impl SessionLease {
    pub(crate) fn new(shared: Arc<Shared>, live: Arc<LiveSession>) -> Self {
        let owner = shared.owner();
        shared.directory.attached(&live.id, true);
        Self {
            shared,
            live,
            owner,
            subscriptions: SubscriptionIds::default(),
            presence: std::sync::OnceLock::new(),
        }
    }

    fn control(&self, call: &ServiceCall, publisher: Publisher) -> CallResult {
        match ControlCall::decode(call) {
            Some(ControlCall::Catalogue) => Ok(Some(catalogue_to_value(&[CatalogueEntry::new(
                SERVICE,
                ServiceMode::Singleton,
            )]))),
            Some(ControlCall::Subscribe {
                subscription_id,
                service_id,
                mode,
            }) => {
                if service_id != SERVICE {
                    return Err(RemoteServiceError::not_allowlisted(&service_id).into());
                }
                if mode != ServiceMode::Singleton {
                    return Err(RemoteServiceError::mode_mismatch(
                        &service_id,
                        ServiceMode::Singleton,
                        mode,
                    )
                    .into());
                }
                let snap = self
                    .live
                    .subscribe(self.owner, subscription_id.clone(), publisher)
                    .map_err(ServiceError::internal)?;
                self.subscriptions.opened(&subscription_id);
                Ok(Some(snap.to_value()))
            }
            Some(ControlCall::Unsubscribe { subscription_id }) => {
                self.subscriptions.close(&subscription_id)?;
                self.live.unsubscribe(self.owner, &subscription_id);
                Ok(None)
            }
            None => Err(RemoteServiceError::not_allowlisted(&call.service_id).into()),
        }
    }

    async fn method(&self, member: &str, args: &[Value], ctx: &Context) -> CallResult {
        // Access (`super::access`): reading needs only sight of the session, which attaching
        // required; everything that changes it needs operator rights or ownership.
        if MUTATING.contains(&member) {
            let owner = self.shared.directory.owner_of(&self.live.id);
            self.shared
                .access
                .rights(ctx.identity())
                .check_operate(&self.live.id, owner.as_deref())?;
        }
        let session = &self.live.session;
        let result = match member {
            "prompt" => {
                arity(args, 1, "[text]")?;
                let text = text_arg(args, "Prompt")?;
                self.prompt(text, ctx).await?
            }
            "steer" => {
                const USAGE: &str = r#"[text, {"turnId"?}]"#;
                let turn_id = match args {
                    [_] => None,
                    [_, Value::Map(m)] => {
                        let mut turn_id = None;
                        for (key, value) in m.iter() {
                            match (key, value) {
                                ("turnId", Value::String(id)) => turn_id = Some(id.as_str()),
                                _ => {
                                    return Err(invalid(format!(
                                        "Unknown or invalid steer option {key}"
                                    )));
                                }
                            }
                        }
                        turn_id
                    }
                    _ => return Err(invalid(format!("Expected arguments {USAGE}"))),
                };
                session
                    .steer_turn(text_arg(args, "Steering")?, turn_id)
                    .map_err(service_error)?;
                None
            }
            "followUp" => {
                arity(args, 1, "[text]")?;
                if self.shared.closing.is_cancelled() {
                    return Err(ServiceError::server_draining());
                }
                let outcome = session
                    .follow_up(text_arg(args, "Follow-up")?)
                    .map_err(service_error)?;
                let mut m = Map::with_capacity(2);
                m.insert("id", Value::from(outcome.id));
                m.insert("started", Value::Bool(outcome.started));
                Some(Value::Map(m))
            }
            "editFollowUp" => {
                const USAGE: &str = "[id, text]";
                arity(args, 2, USAGE)?;
                let id = string_arg(args, 0, USAGE)?;
                let text = string_arg(args, 1, USAGE)?;
                check_text_len(text, "Follow-up")?;
                session.edit_follow_up(id, text).map_err(service_error)?;
                None
            }
            "removeFollowUp" => {
                arity(args, 1, "[id]")?;
                let id = string_arg(args, 0, "[id]")?;
                let text = session.remove_follow_up(id).map_err(service_error)?;
                let mut m = Map::with_capacity(1);
                m.insert("text", Value::from(text));
                Some(Value::Map(m))
            }
            "clearFollowUps" => {
                arity(args, 0, "[]")?;
                let mut m = Map::with_capacity(1);
                m.insert("removed", count_value(session.clear_follow_ups()));
                Some(Value::Map(m))
            }
            "compact" => Some(self.compact(args, ctx).await?),
            "completePath" => {
                arity(args, 1, "[prefix]")?;
                let prefix = string_arg(args, 0, "[prefix]")?;
                let found = session.complete_path(prefix).await.map_err(service_error)?;
                let entries = found
                    .entries
                    .into_iter()
                    .map(|e| {
                        let mut m = Map::with_capacity(2);
                        m.insert("path", Value::from(e.path));
                        m.insert("dir", Value::Bool(e.dir));
                        Value::Map(m)
                    })
                    .collect();
                let mut m = Map::with_capacity(2);
                m.insert("entries", Value::Array(entries));
                m.insert("truncated", Value::Bool(found.truncated));
                Some(Value::Map(m))
            }
            "listItems" => Some(self.list_items(args)?),
            "readItem" => Some(self.read_item(args)?),
            "abort" => {
                arity(args, 0, "[]")?;
                session.abort();
                None
            }
            "setModel" => {
                arity(args, 1, r#"[{"provider", "id"}]"#)?;
                session
                    .set_model(model_arg(&args[0])?)
                    .map_err(service_error)?;
                None
            }
            "setThinking" => {
                arity(args, 1, "[level]")?;
                let text = string_arg(args, 0, "[level]")?;
                let level = ThinkingLevel::parse(text)
                    .ok_or_else(|| invalid(format!("Unknown thinking level {text:?}")))?;
                session.set_thinking(level).map_err(service_error)?;
                None
            }
            "bash" => Some(self.bash(args, ctx).await?),
            MEMBER => return Err(RemoteServiceError::not_a_method(SERVICE, MEMBER).into()),
            other => return Err(RemoteServiceError::unknown_member(SERVICE, other).into()),
        };
        // The updates describing the call's effect were published as it happened (under the
        // session lock), so they are already queued ahead of this answer.
        Ok(result)
    }

    async fn prompt(&self, text: &str, ctx: &Context) -> Result<Option<Value>, ServiceError> {
        if self.shared.closing.is_cancelled() {
            return Err(ServiceError::server_draining());
        }
        let session = &self.live.session;
        let run = session.start_prompt(text).map_err(service_error)?;
        let wait = run.wait();
        tokio::pin!(wait);
        let outcome = tokio::select! {
            biased;
            outcome = &mut wait => outcome,
            () = ctx.cancelled() => {
                if !ctx.cancel_requested() {
                    // The client left (or the server is closing, which aborts turns itself).
                    // The turn belongs to the session, not to this request: it runs on, and a
                    // client that attaches later sees its result.
                    return Err(ServiceError::internal("the prompting client disconnected"));
                }
                // An explicit cancel stops the turn like `abort`. Wait for it to settle so the
                // aborted message is recorded before the call ends.
                session.abort();
                let _ = wait.await;
                return Err(ServiceError::internal("prompt cancelled by the client"));
            }
        };
        let outcome = outcome.map_err(service_error)?;
        let mut m = Map::new();
        m.insert("stopReason", Value::from(outcome.run.stop_reason.as_str()));
        if let Some(message) = outcome.run.error_message {
            m.insert("errorMessage", Value::from(message));
        }
        Ok(Some(Value::Map(m)))
    }

    /// `compact [instructions?]`: summarises the history before the kept recent tail. An
    /// explicit cancel of the request aborts the compaction (as `abort` would).
    async fn compact(&self, args: &[Value], ctx: &Context) -> Result<Value, ServiceError> {
        const USAGE: &str = "[instructions?]";
        let instructions = match args {
            [] => None,
            [Value::Null] => None,
            [Value::String(s)] => Some(s.as_str()),
            _ => return Err(invalid(format!("Expected arguments {USAGE}"))),
        };
        if let Some(text) = instructions
            && text.len() > MAX_COMPACT_INSTRUCTIONS_BYTES
        {
            return Err(invalid(format!(
                "Compaction instructions are {} bytes; the limit is {MAX_COMPACT_INSTRUCTIONS_BYTES} bytes",
                text.len()
            )));
        }
        if self.shared.closing.is_cancelled() {
            return Err(ServiceError::server_draining());
        }
        let session = &self.live.session;
        let run = session.compact_now(instructions);
        tokio::pin!(run);
        let outcome = tokio::select! {
            biased;
            outcome = &mut run => outcome,
            () = explicit_cancel(ctx) => {
                session.abort();
                let _ = run.await;
                return Err(ServiceError::internal("compaction cancelled by the client"));
            }
        };
        let outcome = outcome.map_err(service_error)?;
        let mut m = Map::with_capacity(3);
        m.insert("firstKeptEntryId", Value::from(outcome.first_kept_entry_id));
        m.insert("tokensBefore", count_value_u64(outcome.tokens_before));
        m.insert("tokensAfter", count_value_u64(outcome.tokens_after));
        Ok(Value::Map(m))
    }

    /// A user `!command`. An explicit cancel of the request kills the command (its process
    /// group) and answers `cancelled`; the record, marked cancelled, is still published. A
    /// client that merely disconnects does not stop it: like a turn, the command belongs to
    /// the session, runs to completion and is recorded for whoever attaches next.
    async fn bash(&self, args: &[Value], ctx: &Context) -> Result<Value, ServiceError> {
        const USAGE: &str = r#"[command, {"excludeFromContext"?}]"#;
        let command = string_arg(args, 0, USAGE)?;
        let exclude = match args.get(1) {
            None if args.len() == 1 => false,
            Some(Value::Map(m)) if args.len() == 2 => {
                let mut exclude = false;
                for (key, value) in m.iter() {
                    match (key, value) {
                        ("excludeFromContext", Value::Bool(b)) => exclude = *b,
                        _ => return Err(invalid(format!("Unknown or invalid bash option {key}"))),
                    }
                }
                exclude
            }
            _ => return Err(invalid(format!("Expected arguments {USAGE}"))),
        };
        let session = &self.live.session;
        let outcome = session
            .bash_until(command, exclude, explicit_cancel(ctx))
            .await
            .map_err(service_error)?;
        let message = outcome.message;
        if message.cancelled && ctx.cancel_requested() {
            // The server answers `cancelled` for an error once the request was cancelled.
            return Err(ServiceError::internal("bash cancelled by the client"));
        }
        let mut m = Map::new();
        m.insert(
            "exitCode",
            message.exit_code.map_or(Value::Null, Value::from),
        );
        m.insert("output", Value::from(message.output));
        m.insert("truncated", Value::Bool(message.truncated));
        m.insert("cancelled", Value::Bool(message.cancelled));
        if let Some(path) = message.full_output_path {
            m.insert("fullOutputPath", Value::from(path));
        }
        Ok(Value::Map(m))
    }
}

impl SessionLease {
    /// `listItems [start, count]`: up to `count` (at most [`MAX_PAGE_ITEMS`]) transcript
    /// items from absolute index `start`, as published (clipped).
    fn list_items(&self, args: &[Value]) -> Result<Value, ServiceError> {
        const USAGE: &str = "[start, count]";
        arity(args, 2, USAGE)?;
        let start = index_arg(&args[0], USAGE)?;
        let count = index_arg(&args[1], USAGE)?.min(MAX_PAGE_ITEMS);
        self.live.session.with_view(|view| {
            let total = view.len();
            let start = start.min(total);
            let end = start.saturating_add(count).min(total);
            let items = (start..end)
                .map(|i| {
                    let item = view.item(i).ok_or_else(|| invalid("No such item"))?;
                    published_item(&item, MAX_PUBLISHED_ITEM_BYTES)
                        .map(|c| c.value)
                        .map_err(ServiceError::internal)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut m = Map::with_capacity(3);
            m.insert("start", count_value(start));
            m.insert("total", count_value(total));
            m.insert("items", Value::Array(items));
            Ok(Value::Map(m))
        })
    }

    /// `readItem [itemId, path, offset, length]`: bytes `offset..offset+length` (at most
    /// [`MAX_READ_BYTES`], moved to character boundaries) of the string at `path` in the
    /// item's full, unclipped form.
    fn read_item(&self, args: &[Value]) -> Result<Value, ServiceError> {
        const USAGE: &str = "[itemId, path, offset, length]";
        arity(args, 4, USAGE)?;
        let id = string_arg(args, 0, USAGE)?;
        let path = path_arg(&args[1], USAGE)?;
        let offset = index_arg(&args[2], USAGE)?;
        let length = index_arg(&args[3], USAGE)?.min(MAX_READ_BYTES);
        self.live.session.with_view(|view| {
            let item = view
                .position(id)
                .and_then(|i| view.item(i))
                .ok_or_else(|| invalid(format!("No transcript item {id}")))?;
            let slice = read_string(&item, &path, offset, length)
                .map_err(ServiceError::internal)?
                .ok_or_else(|| invalid("The path names no text in this item"))?;
            let mut m = Map::with_capacity(4);
            m.insert("text", Value::from(slice.text));
            m.insert("offset", count_value(slice.offset));
            m.insert("end", count_value(slice.end));
            m.insert("total", count_value(slice.total));
            Ok(Value::Map(m))
        })
    }
}

fn count_value_u64(n: u64) -> Value {
    Value::try_from(n).unwrap_or(Value::Null)
}

/// How an attached client is shown to the others (`attached` in the state): who its
/// transport verified, never a secret (no fingerprint, no key material).
pub(crate) fn presence_name(identity: Option<&PeerIdentity>) -> String {
    match identity {
        None => "local (in-process)".to_owned(),
        Some(PeerIdentity::Unix { uid, user_name, .. }) => match user_name {
            Some(name) => format!("uid {uid} ({name})"),
            None => format!("uid {uid}"),
        },
        Some(PeerIdentity::Tls {
            client_certificate, ..
        }) => match client_certificate.common_name() {
            Some(cn) => format!("certificate {cn}"),
            None => format!("certificate {}", client_certificate.subject()),
        },
        Some(PeerIdentity::AnonymousTls { .. }) => "anonymous (tls)".to_owned(),
        Some(PeerIdentity::Tcp { addr, .. }) => format!("anonymous (tcp {})", addr.ip()),
        // The token's public id, as `baton links` names it (the secret is the cookie).
        Some(PeerIdentity::Web { token_id, .. }) => format!("browser web:{token_id}"),
        Some(_) => "anonymous".to_owned(),
    }
}

/// Completes when the client explicitly cancels the request; never on a disconnect or a
/// server shutdown (a shutdown aborts the session's commands itself).
async fn explicit_cancel(ctx: &Context) {
    ctx.cancelled().await;
    if !ctx.cancel_requested() {
        // host/tests/e2e/bash_cancel.rs waits for this event.
        tracing::debug!("the client left; its bash command runs on");
        std::future::pending::<()>().await;
    }
}

impl ServiceScope for SessionLease {
    async fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        ctx: Context,
    ) -> CallResult {
        self.presence.get_or_init(|| {
            self.live
                .session
                .attach_client(&presence_name(ctx.identity()))
        });
        // Upstream's `RemoteServiceProvider.invoke` order: allowlist, instance address, member.
        match call.service_id.as_str() {
            SERVICE_CONTROL_ID => self.control(&call, publish),
            SERVICE if call.instance.is_some() => {
                Err(RemoteServiceError::singleton_addressed(SERVICE).into())
            }
            SERVICE => self.method(&call.member, &call.args, &ctx).await,
            other => Err(RemoteServiceError::not_allowlisted(other).into()),
        }
    }

    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        self.leave();
        self.live.drop_owner(self.owner);
        self.shared.directory.attached(&self.live.id, false);
        Ok(())
    }
}

impl SessionLease {
    /// Removes this lease from the presence list (a second call is quiet).
    fn leave(&self) {
        if let Some(id) = self.presence.get() {
            self.live.session.detach_client(*id);
        }
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        // A lease dropped without `release` (the connection went away) leaves too.
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use baton_server::ClientCertificate;
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    #[test]
    fn presence_names_say_who_the_transport_verified_and_never_a_fingerprint() {
        let unix = |name: Option<&str>| PeerIdentity::Unix {
            uid: 1000,
            user_name: name.map(str::to_owned),
            gid: 1000,
            pid: Some(42),
        };
        assert_eq!(
            presence_name(Some(&unix(Some("alice")))),
            "uid 1000 (alice)"
        );
        assert_eq!(presence_name(Some(&unix(None))), "uid 1000");
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "bob");
        let cert = ClientCertificate::from_der(params.self_signed(&key).unwrap().der().clone());
        let fingerprint = cert.sha256_fingerprint_hex();
        let tls = PeerIdentity::Tls {
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            client_certificate: Arc::new(cert),
        };
        let shown = presence_name(Some(&tls));
        assert_eq!(shown, "certificate bob");
        assert!(!shown.contains(&fingerprint));
        let tcp = PeerIdentity::Tcp {
            addr: SocketAddr::from(([127, 0, 0, 1], 9)),
            loopback: true,
        };
        assert_eq!(presence_name(Some(&tcp)), "anonymous (tcp 127.0.0.1)");
        let web = PeerIdentity::Web {
            token_id: "k3f9a2".to_owned(),
            addr: SocketAddr::from(([127, 0, 0, 1], 7880)),
        };
        assert_eq!(presence_name(Some(&web)), "browser web:k3f9a2");
        assert_eq!(presence_name(None), "local (in-process)");
    }
}
