//! Helpers the integration suites of this crate share: the hang guard and state readers
//! (`state`), a host configuration over a temporary directory with the scripted model,
//! serving a host, connecting to it and creating a session, waiting on a subscription, and
//! one call of a tool.
//! A suite includes it with `mod common;` (a suite in a directory, by its path).

#![allow(
    dead_code,
    reason = "each test binary that includes this module uses its own subset of it"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, ClientConfig, Endpoint, RequestError, Subscription};
use baton_host::clock::ManualClock;
use baton_host::journal::FsyncPolicy;
use baton_host::provider::scripted::ScriptedConfig;
use baton_host::provider::{ModelInfo, ModelRegistry, Provider};
use baton_host::service::ServiceHost;
use baton_host::session::{HostConfig, SUMMARY_REQUEST_OPENING};
use baton_host::tool::{Tool, ToolContext, ToolOutput};
use baton_protocol::chord::ServiceCall;
use baton_protocol::{ServerId, Value};
use baton_server::{Listener, Server, ServerConfig};

use state::{get, guard, member};

/// The hang guard and `pi.session` state readers (the `baton-host` command's suites include
/// the same file).
#[path = "../e2e/state.rs"]
pub(crate) mod state;

/// A host configuration with its sessions in `dir/sessions`, working in `cwd`, never syncing
/// (the tests do not cut power).
pub(crate) fn host_config(dir: &Path, cwd: &Path) -> HostConfig {
    let mut config = HostConfig::new(dir.join("sessions"));
    config.default_cwd = cwd.to_path_buf();
    config.fsync = FsyncPolicy::Never;
    config
}

/// The scripted model alone, streaming one token per `delay`.
pub(crate) fn scripted(delay: Duration) -> ModelRegistry {
    ModelRegistry::scripted(ScriptedConfig::new(delay, SUMMARY_REQUEST_OPENING))
}

/// The scripted model (answering at once) plus `fake`, if any, as `fake/fake-model`.
pub(crate) fn scripted_and(fake: Option<Arc<dyn Provider>>) -> ModelRegistry {
    let mut registry = scripted(Duration::ZERO);
    if let Some(fake) = fake {
        registry.register(fake_model_info(), fake);
    }
    registry
}

/// How a test's fake provider is offered: `fake/fake-model`, named `Fake`.
pub(crate) fn fake_model_info() -> ModelInfo {
    ModelInfo {
        provider: "fake".into(),
        id: "fake-model".into(),
        name: "Fake".into(),
    }
}

/// A clock that starts at a fixed instant and moves one millisecond per reading.
pub(crate) fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_748_568_000_000, 1))
}

/// Serves `host` as server `server_id` on a Unix socket in `dir/run`, then on `more`; returns
/// the server and the socket's path.
pub(crate) async fn serve(
    host: &ServiceHost,
    server_id: &str,
    dir: &Path,
    more: Vec<Listener>,
) -> (Server<ServiceHost>, PathBuf) {
    let mut listeners = vec![Listener::unix(dir.join("run"))];
    listeners.extend(more);
    let server = Server::start(
        ServerConfig::new(ServerId::parse(server_id).unwrap()),
        host.clone(),
        listeners,
    )
    .await
    .unwrap();
    let socket = server.local_addrs()[0].unix_path().unwrap().to_path_buf();
    (server, socket)
}

/// A client connected to `endpoint`.
pub(crate) async fn connect(endpoint: Endpoint) -> Client {
    guard("connect", Client::connect(ClientConfig::new(endpoint)))
        .await
        .unwrap()
}

/// Creates a session through `client` (`pi.session-management` `create` with `args`) and
/// returns its id.
pub(crate) async fn try_create(client: &Client, args: Vec<Value>) -> Result<String, RequestError> {
    let call = ServiceCall::new("pi.session-management", "create", args).into_value();
    let created = guard("create", client.request(client.server_target(), call))
        .await?
        .into_value();
    Ok(get(&created, "sessionId").as_str().unwrap().to_owned())
}

/// Shuts a served host down: refuse new work, close the server (drain), stop the host.
pub(crate) async fn stop(host: &ServiceHost, server: &Server<ServiceHost>) {
    host.begin_shutdown();
    guard("server close", server.close()).await.unwrap();
    guard("host shutdown", host.shutdown()).await;
}

/// Waits until the subscription's member `name` satisfies `f` (checked after every change).
pub(crate) async fn until(
    what: &str,
    sub: &Subscription,
    name: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    let mut watch = sub.watch();
    guard(what, async {
        loop {
            let current = member(sub, name);
            if f(&current) {
                return current;
            }
            watch.changed().await.expect("subscription ended");
        }
    })
    .await
}

/// One call of `tool` with `json` as its arguments; (is_error, its text).
pub(crate) async fn call_tool(
    tool: &Arc<dyn Tool>,
    json: &str,
    ctx: &ToolContext,
) -> (bool, String) {
    let args = tool
        .parameters()
        .parse(&Value::from_json(json).unwrap())
        .unwrap();
    match guard("a tool call", tool.execute(&args, ctx)).await {
        Ok(ToolOutput {
            content, is_error, ..
        }) => (
            is_error,
            content
                .iter()
                .filter_map(|c| c.as_text())
                .collect::<Vec<_>>()
                .join(""),
        ),
        Err(e) => (true, e.message),
    }
}
