//! Embedding baton-server: a minimal host with one session service, served over a Unix
//! socket and mutual TLS. The same code is shown in `docs/server.md`.
//!
//! Run: `cargo run -p baton-server --example embed` (expects `server.pem`, `server.key` and
//! `clients-ca.pem` in the working directory and a writable `/run/baton`).

use baton_server::chord::{ControlCall, ServiceCall};
use baton_server::*;

struct Host; // owns your sessions
struct Services {
    presentation: Presentation,
}
struct Session; // one hosted session
struct Lease; // one connection's lease on it
struct Meta(String);

impl SessionMetadata for Meta {
    fn session_id(&self) -> &str {
        &self.0
    }
}

impl ServerHost for Host {
    type Services = Services;
    type Metadata = Meta;
    type Session = Session;
    async fn connect_services(
        &self,
        presentation: Presentation,
        ctx: Context,
    ) -> Result<Services, ServiceError> {
        // Unix credentials, the verified client certificate, or the TCP address.
        tracing::info!(peer = ?ctx.identity(), "client attached");
        Ok(Services { presentation })
    }
    async fn resolve_session(&self, id: &str, _ctx: Context) -> Result<Meta, ServiceError> {
        if id == "demo" {
            Ok(Meta(id.into()))
        } else {
            Err(ServiceError::session_not_found())
        }
    }
    async fn open_session(&self, _m: Meta, _ctx: Context) -> Result<Session, ServiceError> {
        Ok(Session)
    }
}

impl ServiceScope for Services {
    async fn invoke_service(
        &self,
        call: ServiceCall,
        _publish: Publisher,
        ctx: Context,
    ) -> CallResult {
        match (call.service_id.as_str(), call.member.as_str()) {
            ("pi.session-management", "attach") => {
                let id = call
                    .args
                    .first()
                    .and_then(|v| v.as_str())
                    .unwrap_or_default();
                self.presentation.attach_session(id, ctx).await?;
                Ok(Some(baton_protocol::Value::Null))
            }
            ("pi.session-management", "detach") => {
                self.presentation.detach_session(ctx).await?;
                Ok(Some(baton_protocol::Value::Null))
            }
            (service, _) => Err(chord::RemoteServiceError::unknown_service(service).into()),
        }
    }
    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        Ok(())
    }
}

impl SessionHandle for Session {
    type Lease = Lease;
    async fn lease(&self, _ctx: Context) -> Result<Lease, ServiceError> {
        Ok(Lease)
    }
    async fn close(&self, _ctx: Context) -> Result<(), ServiceError> {
        Ok(())
    }
}

impl ServiceScope for Lease {
    async fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        _ctx: Context,
    ) -> CallResult {
        if let Some(ControlCall::Subscribe {
            subscription_id, ..
        }) = ControlCall::decode(&call)
        {
            // Keep (publish, subscription_id); on every change:
            //   publish.publish(&subscription_id, update, || current_snapshot());
            // and answer with the current snapshot's value.
            let _ = (publish, subscription_id);
        }
        Ok(None)
    }
    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        Ok(())
    }
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = ServerConfig::new("00000000-0000-4000-8000-000000000001".parse()?);
    config.max_active_requests = 64;
    let tls = TlsConfig::with_client_ca(
        &std::fs::read("server.pem")?,
        &std::fs::read("server.key")?,
        &std::fs::read("clients-ca.pem")?,
        ClientAuth::Required,
    )?;
    let server = Server::start(
        config,
        Host,
        vec![
            Listener::unix("/run/baton"),
            Listener::tls("0.0.0.0:7400".parse()?, tls),
        ],
    )
    .await?;
    // ... on shutdown:
    server.close().await?;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    serve().await
}
