//! The server-scope services of one connection: `pi.session-management`,
//! `pi.session-directory`, `pi.models` and their `$chord.service` control calls, and
//! baton's own `baton.links` (callable, not catalogued: see `super::links`).

use std::path::PathBuf;
use std::sync::Arc;

use baton_protocol::chord::{CatalogueEntry, catalogue_to_value};
use baton_protocol::{Map, Value};
use baton_server::chord::{ControlCall, RemoteServiceError, ServiceCall, ServiceMode};
use baton_server::{CallResult, Context, Presentation, Publisher, ServiceError, ServiceScope};

use super::args::{arity, string_arg};
use super::errors::{busy, invalid, service_error};
use super::publish::{Owner, SubscriptionIds, snapshot};
use super::shared::Shared;
use super::wire::parse_model;
use super::{directory, links};
use crate::model_ref::ThinkingLevel;
use crate::session::{CreateOptions, Phase};

/// The session-management service id.
pub(crate) const MANAGEMENT: &str = "pi.session-management";
const MANAGEMENT_METHODS: &[&str] = &["create", "attach", "detach", "remove"];
/// The models service id.
pub(crate) const MODELS: &str = "pi.models";
/// The server-scope services, in catalogue order (upstream's catalogue keeps its
/// definitions' order; it does not sort).
const SERVICES: [&str; 3] = [MANAGEMENT, directory::SERVICE, MODELS];
const MODELS_METHODS: &[&str] = &["list"];
/// `baton.cluster`, catalogued after [`SERVICES`] when the host is in a fleet.
const CLUSTER: &str = "baton.cluster";
const CLUSTER_METHODS: &[&str] = &["hosts", "locate", "list"];
const MODELS_MEMBER: &str = "models";

/// One connection's server-scope services.
#[derive(Debug)]
pub struct ServerServices {
    shared: Arc<Shared>,
    presentation: Presentation,
    owner: Owner,
    subscriptions: SubscriptionIds,
}

impl ServerServices {
    pub(crate) fn new(shared: Arc<Shared>, presentation: Presentation) -> Self {
        let owner = shared.owner();
        Self {
            shared,
            presentation,
            owner,
            subscriptions: SubscriptionIds::default(),
        }
    }

    /// Whether this host serves `baton.cluster` (it joined a fleet's directory).
    fn in_fleet(&self) -> bool {
        #[cfg(feature = "cluster")]
        return self.shared.fleet().is_some();
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// The server-scope services served, in catalogue order.
    fn services(&self) -> Vec<&'static str> {
        SERVICES
            .into_iter()
            .chain(self.in_fleet().then_some(CLUSTER))
            .collect()
    }

    fn control(&self, call: &ServiceCall, publisher: Publisher, ctx: &Context) -> CallResult {
        match ControlCall::decode(call) {
            Some(ControlCall::Catalogue) => Ok(Some(catalogue_to_value(
                &self
                    .services()
                    .into_iter()
                    .map(|id| CatalogueEntry::new(id, ServiceMode::Singleton))
                    .collect::<Vec<_>>(),
            ))),
            Some(ControlCall::Subscribe {
                subscription_id,
                service_id,
                mode,
            }) => {
                if !self.services().contains(&service_id.as_str()) {
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
                let snap = match service_id.as_str() {
                    directory::SERVICE => self.shared.directory.subscribe(
                        self.owner,
                        subscription_id,
                        publisher,
                        self.shared.access.rights(ctx.identity()).sight(),
                    ),
                    // Fixed for the host's lifetime: nothing will ever be published.
                    MODELS => snapshot(
                        MODELS,
                        MODELS_METHODS,
                        vec![(MODELS_MEMBER, 0, self.shared.models.clone())],
                    ),
                    // Methods only: nothing to publish.
                    CLUSTER => snapshot(CLUSTER, CLUSTER_METHODS, Vec::new()),
                    _ => snapshot(MANAGEMENT, MANAGEMENT_METHODS, Vec::new()),
                };
                Ok(Some(snap.to_value()))
            }
            Some(ControlCall::Unsubscribe { subscription_id }) => {
                self.subscriptions.close(&subscription_id)?;
                self.shared
                    .directory
                    .unsubscribe(self.owner, &subscription_id);
                Ok(None)
            }
            None => Err(RemoteServiceError::not_allowlisted(&call.service_id).into()),
        }
    }

    /// `create`, counted against the calling identity's session limit.
    async fn create(&self, args: &[Value], ctx: &Context) -> CallResult {
        if self.shared.closing.is_cancelled() {
            return Err(ServiceError::server_draining());
        }
        self.shared.check_taking_work()?;
        let rights = self.shared.access.rights(ctx.identity());
        rights.check_create()?;
        let mut options = create_options(args)?;
        options.owner = Some(rights.key.clone());
        let claim = self
            .shared
            .directory
            .claim(rights.key, self.shared.limits.max_sessions_per_owner)?;
        let manager = &self.shared.manager;
        #[cfg(feature = "cluster")]
        let id = self.shared.create_session(options).await?;
        #[cfg(not(feature = "cluster"))]
        let id = manager.create_async(options).await.map_err(service_error)?;
        let meta = manager.meta(&id).map_err(service_error)?;
        claim.commit(meta);
        let mut m = Map::new();
        m.insert("sessionId", Value::from(id));
        Ok(Some(Value::Map(m)))
    }

    async fn remove(&self, args: &[Value], ctx: Context) -> CallResult {
        const USAGE: &str = "[sessionId]";
        arity(args, 1, USAGE)?;
        let rights = self.shared.access.rights(ctx.identity());
        let id = self
            .shared
            .directory
            .resolve(string_arg(args, 0, USAGE)?, &rights)?;
        rights.check_remove(&id, self.shared.directory.owner_of(&id).as_deref())?;
        if self
            .shared
            .live_session(&id)
            .is_some_and(|l| l.session.meta().phase == Phase::Turn)
        {
            return Err(busy("Session is busy: a turn is running"));
        }
        let Some(removal) = self.shared.residency.begin_removal(&id) else {
            // Another removal of it is under way: it is gone as far as this one is concerned.
            return Err(ServiceError::session_not_found());
        };
        self.presentation
            .prepare_session_removal(&id, ctx.clone())
            .await?;
        self.shared.remove(&removal).await.map(|()| None)
    }
}

/// `[{"name"?, "cwd"?, "model"?, "thinkingLevel"?}]` (or `[]`).
fn create_options(args: &[Value]) -> Result<CreateOptions, ServiceError> {
    const USAGE: &str = r#"[{"name"?, "cwd"?, "model"?, "thinkingLevel"?}]"#;
    let mut options = CreateOptions::default();
    let map = match args {
        [] => return Ok(options),
        [Value::Map(m)] => m,
        _ => return Err(invalid(format!("Expected arguments {USAGE}"))),
    };
    for (key, value) in map.iter() {
        let text = value
            .as_str()
            .ok_or_else(|| invalid(format!("create option {key} must be a string")))?;
        match key {
            "name" => options.name = Some(text.to_owned()),
            // Interpreted on the host; made absolute so listings show where it really is.
            "cwd" => {
                options.cwd =
                    Some(std::fs::canonicalize(text).unwrap_or_else(|_| PathBuf::from(text)));
            }
            "model" => {
                options.model = Some(parse_model(text).ok_or_else(|| {
                    invalid(format!("Model {text:?} is not \"<provider>/<id>\""))
                })?);
            }
            "thinkingLevel" => {
                options.thinking_level = Some(
                    ThinkingLevel::parse(text)
                        .ok_or_else(|| invalid(format!("Unknown thinking level {text:?}")))?,
                );
            }
            other => return Err(invalid(format!("Unknown create option {other}"))),
        }
    }
    Ok(options)
}

impl ServiceScope for ServerServices {
    async fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        ctx: Context,
    ) -> CallResult {
        let args = call.args.as_slice();
        let service = call.service_id.as_str();
        if service == baton_protocol::chord::SERVICE_CONTROL_ID {
            return self.control(&call, publish, &ctx);
        }
        if service == links::SERVICE {
            if call.instance.is_some() {
                return Err(RemoteServiceError::singleton_addressed(service).into());
            }
            return links::invoke(&self.shared, &call.member, args, &ctx);
        }
        #[cfg(feature = "cluster")]
        if service == CLUSTER && self.in_fleet() {
            if call.instance.is_some() {
                return Err(RemoteServiceError::singleton_addressed(service).into());
            }
            return super::cluster::invoke(&self.shared, &call.member, args, &ctx).await;
        }
        // Upstream's `RemoteServiceProvider.invoke` order: allowlist, instance address, member.
        if !SERVICES.contains(&service) {
            return Err(RemoteServiceError::not_allowlisted(service).into());
        }
        if call.instance.is_some() {
            return Err(RemoteServiceError::singleton_addressed(service).into());
        }
        match (service, call.member.as_str()) {
            (MANAGEMENT, "create") => self.create(args, &ctx).await,
            (MANAGEMENT, "attach") => {
                arity(args, 1, "[sessionId]")?;
                let id = string_arg(args, 0, "[sessionId]")?;
                self.presentation.attach_session(id, ctx).await?;
                Ok(None)
            }
            (MANAGEMENT, "detach") => {
                arity(args, 0, "[]")?;
                self.presentation.detach_session(ctx).await?;
                Ok(None)
            }
            (MANAGEMENT, "remove") => self.remove(args, ctx).await,
            (directory::SERVICE, "list") => {
                arity(args, 0, "[]")?;
                let sight = self.shared.access.rights(ctx.identity()).sight();
                Ok(Some(self.shared.directory.value_for(&sight)))
            }
            (MODELS, "list") => {
                arity(args, 0, "[]")?;
                Ok(Some(self.shared.models.clone()))
            }
            (directory::SERVICE, member @ directory::MEMBER) | (MODELS, member @ MODELS_MEMBER) => {
                Err(RemoteServiceError::not_a_method(service, member).into())
            }
            (service, member) => Err(RemoteServiceError::unknown_member(service, member).into()),
        }
    }

    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        self.shared.directory.drop_owner(self.owner);
        Ok(())
    }
}
