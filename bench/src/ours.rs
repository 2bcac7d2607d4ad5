//! A minimal baton host: `bench.echo` (server scope, returns its first argument),
//! `bench.stream.<key>` (a chord singleton whose state `reply` is `{"text": …}`, grown by one
//! `a` op per published token, fanned out in batches with `Publisher::publish_shared_many`) and `bench.static`
//! (a subscription that never changes, for the per-subscription memory figure).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use baton_protocol::chord::{Op, PathSegment};
use baton_protocol::{Map, Value};
use baton_server::chord::{
    ControlCall, InstanceSnapshot, MemberSnapshot, ProviderUpdate, RemoteServiceError, ServiceCall,
    ServiceMode, SubscriptionSnapshot,
};
use baton_server::{
    CallResult, Context, Listener, Presentation, Published, Publisher, Server, ServerConfig,
    ServerHost, ServiceError, ServiceScope, SessionHandle, SessionMetadata, SharedUpdate,
    TlsConfig,
};
use parking_lot::Mutex;

/// The token every streamed update appends (4 bytes, like an average LLM token).
pub const TOKEN: &str = "tok ";

/// One streamed reply and its subscribers.
#[derive(Debug, Default)]
struct Stream {
    text: String,
    sequence: u64,
    subscribers: Vec<(Publisher, String)>,
}

impl Stream {
    fn snapshot(&self, service_id: &str) -> SubscriptionSnapshot {
        reply_snapshot(service_id, self.sequence, &self.text)
    }
}

/// The snapshot of a `bench.stream.*` service whose reply text is `text`.
pub fn reply_snapshot(service_id: &str, sequence: u64, text: &str) -> SubscriptionSnapshot {
    let mut m = Map::new();
    m.insert("text", Value::from(text));
    SubscriptionSnapshot::new(
        service_id,
        ServiceMode::Singleton,
        vec![InstanceSnapshot::new(
            None,
            vec![MemberSnapshot::state("reply", sequence, Value::Map(m))],
        )],
    )
}

/// The update that appends `token` to the reply text.
pub fn append_update(sequence: u64, token: &str) -> ProviderUpdate {
    ProviderUpdate::State {
        instance: None,
        member: "reply".into(),
        sequence,
        ops: vec![Op::Append {
            path: vec![PathSegment::key("text")],
            text: token.to_owned(),
        }],
    }
}

/// `BENCH_PUBLISH_EACH=1`: publish update by update with `publish_shared` (one lock and
/// wake per subscriber per update) instead of in batches with `publish_shared_many`.
fn publish_each() -> bool {
    static EACH: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *EACH.get_or_init(|| std::env::var("BENCH_PUBLISH_EACH").is_ok_and(|v| v == "1"))
}

/// Outcome counts of [`BenchHost::publish`].
#[derive(Debug, Default, Clone, Copy)]
pub struct PublishCounts {
    /// Queued normally.
    pub queued: u64,
    /// Collapsed into a `reset` (the subscriber was a full queue behind).
    pub reset: u64,
}

/// The host; clones share state.
#[derive(Debug, Clone, Default)]
pub struct BenchHost {
    streams: Arc<Mutex<HashMap<String, Stream>>>,
}

impl BenchHost {
    /// Publishes `n` tokens to every subscriber of `bench.stream.<key>`; each update is
    /// encoded once per distinct encoder state, and each subscriber gets the `n` updates as
    /// one batch (`publish_shared_many`: one lock and one writer wake per subscriber per
    /// batch). Returns the outcomes and the stream's sequence afterwards.
    pub fn publish(&self, key: &str, n: usize) -> (PublishCounts, u64) {
        let service_id = format!("bench.stream.{key}");
        let mut streams = self.streams.lock();
        let stream = streams.entry(service_id.clone()).or_default();
        let mut counts = PublishCounts::default();
        let mut updates = Vec::with_capacity(n);
        for _ in 0..n {
            stream.sequence += 1;
            stream.text.push_str(TOKEN);
            updates.push(SharedUpdate::new(append_update(stream.sequence, TOKEN)));
        }
        let subscribers = std::mem::take(&mut stream.subscribers);
        let mut keep = Vec::with_capacity(subscribers.len());
        if publish_each() {
            for update in &updates {
                for (publisher, sid) in &subscribers {
                    match publisher.publish_shared(sid, update, || stream.snapshot(&service_id)) {
                        Published::Queued => counts.queued += 1,
                        Published::Reset => counts.reset += 1,
                        _ => {}
                    }
                }
            }
            stream.subscribers = subscribers;
            return (counts, stream.sequence);
        }
        for (publisher, sid) in subscribers {
            // The snapshot is the state after the whole batch, as the batch API requires.
            match publisher.publish_shared_many(&sid, &updates, || stream.snapshot(&service_id)) {
                Published::Queued => counts.queued += n as u64,
                Published::Reset => counts.reset += 1,
                _ => continue,
            }
            keep.push((publisher, sid));
        }
        stream.subscribers = keep;
        (counts, stream.sequence)
    }

    /// Current subscriber count of `bench.stream.<key>`.
    pub fn subscribers(&self, key: &str) -> usize {
        self.streams
            .lock()
            .get(&format!("bench.stream.{key}"))
            .map_or(0, |s| s.subscribers.len())
    }

    /// Forgets `bench.stream.<key>` (its text and subscribers).
    pub fn forget(&self, key: &str) {
        self.streams.lock().remove(&format!("bench.stream.{key}"));
    }

    fn control(&self, call: &ServiceCall, publisher: Publisher) -> CallResult {
        match ControlCall::decode(call) {
            Some(ControlCall::Subscribe {
                subscription_id,
                service_id,
                ..
            }) if service_id.starts_with("bench.stream.") => {
                let mut streams = self.streams.lock();
                let stream = streams.entry(service_id.clone()).or_default();
                stream.subscribers.push((publisher, subscription_id));
                Ok(Some(stream.snapshot(&service_id).to_value()))
            }
            Some(ControlCall::Subscribe { service_id, .. }) if service_id == "bench.static" => {
                Ok(Some(reply_snapshot(&service_id, 0, "static").to_value()))
            }
            Some(ControlCall::Subscribe { service_id, .. }) => {
                Err(RemoteServiceError::unknown_service(&service_id).into())
            }
            Some(ControlCall::Unsubscribe { subscription_id }) => {
                for s in self.streams.lock().values_mut() {
                    s.subscribers.retain(|(_, id)| *id != subscription_id);
                }
                Ok(None)
            }
            Some(ControlCall::Catalogue) => Ok(Some(Value::Array(vec![]))),
            None => Err(RemoteServiceError::not_allowlisted(&call.service_id).into()),
        }
    }
}

/// One connection's server-scope services.
#[derive(Debug)]
pub struct Services {
    host: BenchHost,
}

impl ServiceScope for Services {
    async fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        _ctx: Context,
    ) -> CallResult {
        match (call.service_id.as_str(), call.member.as_str()) {
            ("bench", "echo") => {
                if let Some(Value::String(s)) = call.args.first() {
                    crate::loaded::seen(s.as_bytes());
                }
                Ok(Some(call.args.into_iter().next().unwrap_or(Value::Null)))
            }
            ("$chord.service", _) => self.host.control(&call, publish),
            (service, _) => Err(RemoteServiceError::unknown_service(service).into()),
        }
    }

    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        Ok(())
    }
}

/// Sessions are not used by the benchmark; every resolve fails.
#[derive(Debug)]
pub struct NoSession;

/// Never constructed.
#[derive(Debug)]
pub struct NoMeta;

impl SessionMetadata for NoMeta {
    fn session_id(&self) -> &str {
        ""
    }
}

impl ServiceScope for NoSession {
    async fn invoke_service(&self, call: ServiceCall, _p: Publisher, _c: Context) -> CallResult {
        Err(RemoteServiceError::unknown_service(&call.service_id).into())
    }

    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        Ok(())
    }
}

impl SessionHandle for NoSession {
    type Lease = NoSession;

    async fn lease(&self, _ctx: Context) -> Result<NoSession, ServiceError> {
        Ok(NoSession)
    }

    async fn close(&self, _ctx: Context) -> Result<(), ServiceError> {
        Ok(())
    }
}

impl ServerHost for BenchHost {
    type Services = Services;
    type Metadata = NoMeta;
    type Session = NoSession;

    async fn connect_services(
        &self,
        _p: Presentation,
        _ctx: Context,
    ) -> Result<Services, ServiceError> {
        Ok(Services { host: self.clone() })
    }

    async fn resolve_session(&self, _id: &str, _ctx: Context) -> Result<NoMeta, ServiceError> {
        Err(ServiceError::session_not_found())
    }

    async fn open_session(&self, _m: NoMeta, _ctx: Context) -> Result<NoSession, ServiceError> {
        Err(ServiceError::session_not_found())
    }
}

/// A running baton server with Unix, TCP and TLS listeners, and what clients need.
#[derive(Debug)]
pub struct OursServer {
    /// The server.
    pub server: Server<BenchHost>,
    /// The host.
    pub host: BenchHost,
    /// Unix socket path.
    pub unix: PathBuf,
    /// TCP port on 127.0.0.1.
    pub tcp_port: u16,
    /// TLS port on 127.0.0.1.
    pub tls_port: u16,
    /// CA file (the self-signed server certificate) for TLS clients.
    pub ca_file: PathBuf,
}

/// Starts the server; `subscriber_queue_length` is raised so the paced fan-out never resets.
pub async fn start(dir: PathBuf) -> Result<OursServer, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&dir)?;
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
    let cert_pem = cert.cert.pem();
    let key_pem = cert.signing_key.serialize_pem();
    let ca_file = dir.join("server.pem");
    std::fs::write(&ca_file, &cert_pem)?;
    let tls = TlsConfig::from_pem(cert_pem.as_bytes(), key_pem.as_bytes())?;
    let mut config = ServerConfig::new("00000000-0000-4000-8000-00000000be7c".parse()?);
    config.max_connections = 20_000;
    config.subscriber_queue_length = 4_096;
    config.handshake_timeout = std::time::Duration::from_secs(60);
    let host = BenchHost::default();
    let sock_dir = dir.join("sock");
    let server = Server::start(
        config,
        host.clone(),
        vec![
            Listener::unix(&sock_dir),
            Listener::tcp("127.0.0.1:0".parse()?),
            Listener::tls("127.0.0.1:0".parse()?, tls),
        ],
    )
    .await?;
    let (mut unix, mut tcp_port, mut tls_port) = (PathBuf::new(), 0, 0);
    for a in server.local_addrs() {
        match a {
            baton_server::ListenAddr::Unix(p) => unix = p.clone(),
            baton_server::ListenAddr::Tcp(s) => tcp_port = s.port(),
            baton_server::ListenAddr::Tls(s) => tls_port = s.port(),
            _ => {}
        }
    }
    Ok(OursServer {
        server,
        host,
        unix,
        tcp_port,
        tls_port,
        ca_file,
    })
}
