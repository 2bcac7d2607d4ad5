//! Shared helpers of the in-process suites: an in-process host and calls (the hang guard and
//! state readers are in `state.rs`, waits on state in `tests/common`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton_client::{Client, Endpoint};
use baton_host::clock::SystemClock;
use baton_host::service::ServiceHost;
use baton_host::session::SessionManager;
use baton_protocol::chord::ServiceCall;
use baton_protocol::{ServerId, Value};
use baton_server::Server;
use tempfile::TempDir;

use crate::common::{connect, host_config, scripted, serve, stop, try_create};
use crate::state::guard;

/// The server id every harness serves.
pub(crate) const SERVER_ID: &str = "00000000-0000-4000-8000-0000000000e2";

/// A chord call value.
pub(crate) fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new(service, member, args).into_value()
}

/// JSON text as a value.
pub(crate) fn v(json: &str) -> Value {
    Value::from_json(json).unwrap()
}

/// An in-process host serving a temporary sessions directory on a Unix socket.
pub(crate) struct Harness {
    pub(crate) host: ServiceHost,
    pub(crate) server: Server<ServiceHost>,
    pub(crate) socket: PathBuf,
    pub(crate) project: PathBuf,
    pub(crate) _dir: TempDir,
}

impl Harness {
    /// A host whose scripted model streams one token per millisecond.
    pub(crate) async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        let manager = SessionManager::new(
            host_config(dir.path(), &project),
            scripted(Duration::from_millis(1)),
            Arc::new(SystemClock),
        )
        .unwrap();
        let host = ServiceHost::new(manager).unwrap();
        let (server, socket) = serve(&host, SERVER_ID, dir.path(), Vec::new()).await;
        Self {
            host,
            server,
            socket,
            project,
            _dir: dir,
        }
    }

    /// A connected client.
    pub(crate) async fn client(&self) -> Client {
        connect(Endpoint::Unix(self.socket.clone())).await
    }

    /// A connected frame-level client.
    pub(crate) async fn raw(&self) -> crate::raw::RawPeer {
        guard(
            "raw connect",
            crate::raw::RawPeer::connect(&self.socket, ServerId::parse(SERVER_ID).unwrap()),
        )
        .await
    }

    /// Creates a session (through `client`) and returns its id.
    pub(crate) async fn create(&self, client: &Client, options: &str) -> String {
        try_create(client, vec![v(options)]).await.unwrap()
    }

    /// The runtime's own view of a session, in its published form.
    pub(crate) fn runtime_state(&self, id: &str) -> Value {
        let session = self.host.manager().open(id).unwrap();
        baton_host::service::session_state_value(&session.snapshot().state).unwrap()
    }

    /// Drains and stops.
    pub(crate) async fn stop(self) {
        stop(&self.host, &self.server).await;
    }
}

/// The project directory of a harness, as text.
pub(crate) fn display(p: &Path) -> String {
    p.display().to_string()
}
