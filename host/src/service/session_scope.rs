//! One connection's lease on a hosted session: `pi.session` and its `$chord.service` control
//! calls.

use std::sync::Arc;

use baton_protocol::chord::{CatalogueEntry, SERVICE_CONTROL_ID, catalogue_to_value};
use baton_protocol::{Map, Value};
use baton_server::chord::{ControlCall, RemoteServiceError, ServiceCall, ServiceMode};
use baton_server::{CallResult, Context, Publisher, ServiceAttachment, ServiceError};

use super::Shared;
use super::errors::{arity, invalid, service_error, string_arg};
use super::live::{LiveSession, MEMBER, SERVICE};
use super::publish::{Owner, SubscriptionIds};
use crate::provider::{ModelRef, ThinkingLevel};

/// A connection's lease on a hosted session.
#[derive(Debug)]
pub struct SessionLease {
    shared: Arc<Shared>,
    live: Arc<LiveSession>,
    owner: Owner,
    subscriptions: SubscriptionIds,
}

impl SessionLease {
    pub(crate) fn new(shared: Arc<Shared>, live: Arc<LiveSession>) -> Self {
        let owner = shared.owner();
        live.directory.attached(&live.id, true);
        Self {
            shared,
            live,
            owner,
            subscriptions: SubscriptionIds::default(),
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
                self.subscriptions.opened(&subscription_id);
                let snap = self.live.subscribe(self.owner, subscription_id, publisher);
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
        let session = &self.live.session;
        let result = match member {
            "prompt" => {
                arity(args, 1, "[text]")?;
                let text = string_arg(args, 0, "[text]")?;
                self.prompt(text, ctx).await?
            }
            "steer" => {
                arity(args, 1, "[text]")?;
                session
                    .steer(string_arg(args, 0, "[text]")?)
                    .map_err(service_error)?;
                None
            }
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
        // Answer only once the updates describing the call's effect are on their way.
        self.live.wait_flushed(session.event_seq()).await;
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
            self.live.wait_flushed(session.event_seq()).await;
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

/// `{"provider", "id"}`.
fn model_arg(value: &Value) -> Result<ModelRef, ServiceError> {
    let field = |k: &str| {
        value
            .as_map()
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (field("provider"), field("id"), value.as_map().map(Map::len)) {
        (Some(provider), Some(id), Some(2)) => Ok(ModelRef::new(provider, id)),
        _ => Err(invalid(r#"Expected arguments [{"provider", "id"}]"#)),
    }
}

impl ServiceAttachment for SessionLease {
    async fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        ctx: Context,
    ) -> CallResult {
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
        self.live.drop_owner(self.owner);
        self.live.directory.attached(&self.live.id, false);
        Ok(())
    }
}
