//! A host whose only service is a fixed `pi.session-directory` list, served by the real
//! server on a Unix socket: what `baton sessions` shows for ids a baton host never makes
//! (upstream pi's `session-1`, time-ordered UUIDs sharing long prefixes).

use std::path::Path;

use baton_protocol::{ServerId, Value};
use baton_server::chord::{RemoteServiceError, ServiceCall};
use baton_server::{
    CallResult, Context, Listener, Presentation, Publisher, Server, ServerConfig, ServerHost,
    ServiceError, ServiceScope, SessionHandle, SessionMetadata,
};

/// The directory's rows, the same to every caller.
#[derive(Debug, Clone)]
pub(crate) struct DirectoryHost {
    rows: Value,
}

/// One connection's server services: the list, and `attach` (which finds no session).
#[derive(Debug)]
pub(crate) struct Services {
    rows: Value,
    presentation: Presentation,
}

/// No session can be attached: the host lists sessions and hosts none.
#[derive(Debug)]
pub(crate) enum NoSession {}

impl DirectoryHost {
    /// Serves `rows` (directory entries) under `dir`; returns the server and its `unix://` URL.
    pub(crate) async fn serve(rows: Vec<Value>, dir: &Path) -> (Server<Self>, String) {
        let id = ServerId::parse("3f8a2c1e-5b7d-4e9f-a1c3-0d2e4f6a8b9c").unwrap();
        let host = Self {
            rows: Value::Array(rows),
        };
        let server = Server::start(ServerConfig::new(id), host, vec![Listener::unix(dir)])
            .await
            .unwrap();
        let path = server.local_addrs()[0].unix_path().unwrap().to_owned();
        (server, format!("unix://{}", path.display()))
    }
}

impl ServerHost for DirectoryHost {
    type Services = Services;
    type Metadata = NoSession;
    type Session = NoSession;

    async fn connect_services(
        &self,
        presentation: Presentation,
        _: Context,
    ) -> Result<Services, ServiceError> {
        Ok(Services {
            rows: self.rows.clone(),
            presentation,
        })
    }

    async fn resolve_session(&self, _: &str, _: Context) -> Result<NoSession, ServiceError> {
        Err(ServiceError::session_not_found())
    }

    async fn open_session(
        &self,
        metadata: NoSession,
        _: Context,
    ) -> Result<NoSession, ServiceError> {
        match metadata {}
    }
}

impl ServiceScope for Services {
    async fn invoke_service(&self, call: ServiceCall, _: Publisher, ctx: Context) -> CallResult {
        match (call.service_id.as_str(), call.member.as_str()) {
            ("pi.session-directory", "list") => Ok(Some(self.rows.clone())),
            ("pi.session-management", "attach") => {
                let id = call
                    .args
                    .first()
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.presentation.attach_session(id, ctx).await?;
                Ok(Some(Value::Null))
            }
            (service, _) => Err(RemoteServiceError::unknown_service(service).into()),
        }
    }

    async fn release(&self, _: Context) -> Result<(), ServiceError> {
        Ok(())
    }
}

impl SessionMetadata for NoSession {
    fn session_id(&self) -> &str {
        match *self {}
    }
}

impl SessionHandle for NoSession {
    type Lease = Self;

    async fn lease(&self, _: Context) -> Result<Self, ServiceError> {
        match *self {}
    }

    async fn close(&self, _: Context) -> Result<(), ServiceError> {
        match *self {}
    }
}

impl ServiceScope for NoSession {
    async fn invoke_service(&self, _: ServiceCall, _: Publisher, _: Context) -> CallResult {
        match *self {}
    }

    async fn release(&self, _: Context) -> Result<(), ServiceError> {
        match *self {}
    }
}
