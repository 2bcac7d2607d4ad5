//! Finding the local host without `--connect`: probe the sockets in the per-user directory
//! (`$XDG_RUNTIME_DIR/baton`, else `/tmp/baton-<uid>`). One live host is used; several are
//! listed and the user asked to choose, never picked silently.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_client::{Client, ClientConfig, ConnectError, Endpoint};
use baton_protocol::{ServerId, unix};

use crate::failure::{EXIT_CONNECT, Failure};

/// Time allowed per socket when probing.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The per-user socket directory the host listens in by default.
pub(crate) fn socket_dir() -> PathBuf {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    unix::default_socket_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid)
}

/// The sockets in `dir` named `<server-id>.sock`, sorted; only `server_id`'s when given.
fn candidates(dir: &Path, server_id: Option<&str>) -> std::io::Result<Vec<PathBuf>> {
    let mut sockets: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(unix::server_id_of_socket)
                .is_some()
        })
        .collect();
    sockets.sort();
    if let Some(id) = server_id {
        sockets.retain(|p| p.file_stem().and_then(|s| s.to_str()) == Some(id));
    }
    sockets.truncate(unix::MAX_DISCOVERY_PROBES);
    Ok(sockets)
}

/// Probes the local sockets and returns the configuration for the one live host
/// (`config_for` builds a configuration for an endpoint; the returned one also expects the
/// probed server id, so a host replaced in between is refused).
///
/// # Errors
/// Status 3: no live host (the last connect error, if any), or several.
pub(crate) async fn discover(
    config_for: impl Fn(Endpoint) -> Result<ClientConfig, Failure>,
    server_id: Option<&str>,
) -> Result<ClientConfig, Failure> {
    let dir = socket_dir();
    let not_found = || {
        Failure::new(
            EXIT_CONNECT,
            "no_host",
            format!(
                "no baton host found in {} (start one with `baton-host serve`, or pass --connect)",
                dir.display()
            ),
        )
    };
    let sockets = candidates(&dir, server_id).map_err(|_| not_found())?;
    let mut probes = Vec::with_capacity(sockets.len());
    for path in &sockets {
        let mut config = config_for(Endpoint::Unix(path.clone()))?;
        config.connect_timeout = PROBE_TIMEOUT;
        config.reconnect = None;
        probes.push(probe(config));
    }
    let results = futures::future::join_all(probes).await;
    let mut live: Vec<(PathBuf, ServerId)> = Vec::new();
    let mut last: Option<ConnectError> = None;
    for (path, result) in sockets.into_iter().zip(results) {
        match result {
            Ok(id) => live.push((path, id)),
            Err(e) => last = Some(e),
        }
    }
    match live.as_slice() {
        [] => Err(last.map(Failure::from).unwrap_or_else(not_found)),
        [(path, id)] => {
            let mut config = config_for(Endpoint::Unix(path.clone()))?;
            config.expected_server_id = Some(id.clone());
            Ok(config)
        }
        many => Err(several_hosts(many)),
    }
}

/// Connects, notes the server id, and closes.
async fn probe(config: ClientConfig) -> Result<ServerId, ConnectError> {
    let client = Client::connect(config).await?;
    let id = client.server_id().clone();
    client.close().await;
    Ok(id)
}

fn several_hosts(live: &[(PathBuf, ServerId)]) -> Failure {
    let list: Vec<String> = live
        .iter()
        .map(|(path, id)| format!("{id} (unix://{})", path.display()))
        .collect();
    Failure::new(
        EXIT_CONNECT,
        "several_hosts",
        format!(
            "{} baton hosts are running here: {}; choose one with --server-id ID or --connect URL",
            live.len(),
            list.join(", ")
        ),
    )
}
