//! A host in a fleet (`baton.cluster`, docs/services.md): the fleet-wide session list with
//! each session's host, and where a session named by id, name or prefix lives, so the
//! session commands reach its owner whichever host `baton` connected to.

use std::io::Write;
use std::time::Duration;

use baton_client::{Client, Reply, RequestError, RequestOptions};
use baton_protocol::{ErrorCode, ServerId, Value};

use crate::attach::reconnect_policy;
use crate::failure::{EXIT_CONNECT, Failure};
use crate::live::{call, field};
use crate::resolve::Entry;

/// The service a host in a fleet serves; elsewhere it is `service_not_allowed`.
pub(crate) const SERVICE: &str = "baton.cluster";

/// The chord codes of a service the host does not offer: baton's hosts answer the first
/// (as upstream's provider does); other servers speaking the protocol may answer the second.
const NOT_OFFERED: [&str; 2] = ["service_not_allowed", "service_not_found"];

/// Whether `e` says the host does not offer [`SERVICE`].
fn not_offered(e: &RequestError) -> bool {
    e.code().is_some_and(|c| NOT_OFFERED.contains(&c))
}

/// The fleet's answer to `list`, or `None` when the host is not in a fleet.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FleetList {
    /// The session records, each a `baton.cluster` session value.
    pub(crate) sessions: Vec<Value>,
    /// The host's view of etcd may not be current.
    pub(crate) stale: bool,
}

/// `Some(x)` for a reply, `None` when the host does not offer [`SERVICE`].
pub(crate) fn offered<T>(reply: Result<T, RequestError>) -> Result<Option<T>, Failure> {
    match reply {
        Ok(v) => Ok(Some(v)),
        Err(e) if not_offered(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl FleetList {
    /// The `list` result value.
    pub(crate) fn from_value(v: &Value) -> Self {
        Self {
            sessions: field(v, "sessions").as_array().cloned().unwrap_or_default(),
            stale: field(v, "stale").as_bool() == Some(true),
        }
    }
}

/// The rows `baton sessions` shows for a fleet: each fleet session with its host's
/// `serverId` and `live`, and the local directory's fields (`phase`, `model`, `updatedAt`,
/// `cwd`, `attachedClients`) for the sessions of the connected host (`local_id`), whose
/// directory rows are `local`. A local row the fleet list lacks (its record not written
/// yet) is kept, so the fleet table never hides what today's table shows.
pub(crate) fn merge(fleet: &FleetList, local: &[Value], local_id: &str) -> Vec<Value> {
    let mut rows = Vec::with_capacity(fleet.sessions.len());
    let mut seen = std::collections::HashSet::new();
    for s in &fleet.sessions {
        let Some(id) = field(s, "sessionId").as_str() else {
            continue;
        };
        let server = field(s, "serverId").as_str().unwrap_or_default();
        let dir_row = (server == local_id)
            .then(|| local.iter().find(|r| field(r, "id").as_str() == Some(id)))
            .flatten();
        let mut m = dir_row.and_then(Value::as_map).cloned().unwrap_or_default();
        m.insert("id", Value::from(id));
        if !m.contains_key("name") {
            m.insert("name", field(s, "name").clone());
        }
        m.insert("createdAt", field(s, "createdAt").clone());
        m.insert("serverId", Value::from(server));
        m.insert(
            "live",
            Value::from(field(s, "live").as_bool() == Some(true)),
        );
        seen.insert(id.to_owned());
        rows.push(Value::Map(m));
    }
    for r in local {
        let Some(id) = field(r, "id").as_str() else {
            continue;
        };
        if seen.contains(id) {
            continue;
        }
        let mut m = r.as_map().cloned().unwrap_or_default();
        m.insert("serverId", Value::from(local_id));
        m.insert("live", Value::from(true));
        rows.push(Value::Map(m));
    }
    rows
}

/// Where a located session lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The session.
    pub(crate) entry: Entry,
    /// Its host's server id.
    pub(crate) server_id: ServerId,
    /// What its host advertises, in order.
    pub(crate) endpoints: Vec<String>,
}

/// A `locate` result as an [`Owner`] (`None` for a malformed answer).
pub(crate) fn owner_of(v: &Value) -> Option<Owner> {
    let id = field(v, "sessionId").as_str()?;
    let server_id = ServerId::parse(field(v, "serverId").as_str()?).ok()?;
    let endpoints = field(v, "endpoints")
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Some(Owner {
        entry: Entry {
            id: id.to_owned(),
            name: field(v, "name").as_str().map(str::to_owned),
        },
        server_id,
        endpoints,
    })
}

/// `locate(query)` on the connected host: `Ok(None)` when it is not in a fleet or none of
/// its fleet's sessions matches (the caller then resolves against the local directory, with
/// the CLI's own messages and shorter prefixes). A `busy` (the owner is not live, or etcd
/// unreachable) is the caller's to retry or report.
pub(crate) async fn locate(
    client: &Client,
    timeout: Duration,
    query: &str,
) -> Result<Option<Owner>, RequestError> {
    let options = RequestOptions {
        cancel: None,
        timeout: Some(timeout),
    };
    let request = call(SERVICE, "locate", vec![Value::from(query)]);
    match client
        .request_with_options(client.server_target(), request, options)
        .await
        .map(Reply::into_value)
    {
        // A malformed answer is treated as no fleet answer: the local directory decides.
        Ok(v) => Ok(owner_of(&v)),
        Err(e) if not_offered(&e) || e.kind() == Some(ErrorCode::SessionNotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The wait between `locate` attempts while a session's owner is not live: the reconnect
/// policy of `attach` and `watch`, with one "reconnecting" line on stderr when it starts.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// Says why on the first wait, then sleeps the policy's delay for this attempt.
    pub(crate) async fn wait(&mut self, why: &RequestError) -> Result<(), Failure> {
        let delay = reconnect_policy().delay(self.attempt, random_unit());
        if self.attempt == 0 {
            let mut err = std::io::stderr().lock();
            writeln!(err, "[{why}; reconnecting in {:.1}s]", delay.as_secs_f64())?;
        }
        self.attempt = self.attempt.saturating_add(1);
        tokio::time::sleep(delay).await;
        Ok(())
    }
}

/// A number in `[0, 1)` for the backoff's jitter (0.5, no jitter, if the system has none).
fn random_unit() -> f64 {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 4];
    match ring::rand::SystemRandom::new().fill(&mut b) {
        Ok(()) => f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.5,
    }
}

/// Connects to the first of `owner`'s endpoints that answers as `owner.server_id`, with
/// `config_for` giving each endpoint's settings (the CLI's TLS and identity options).
pub(crate) async fn dial(
    owner: &Owner,
    config_for: impl Fn(baton_client::Endpoint) -> Result<baton_client::ClientConfig, Failure>,
) -> Result<(Client, baton_client::ClientConfig), Failure> {
    let what = format!(
        "session {} is on server {}",
        owner.entry.id, owner.server_id
    );
    dial_host(&owner.server_id, &owner.endpoints, &what, config_for).await
}

/// Connects to the first of `endpoints` that answers as `server_id`; `what` says why, in
/// the error when none does.
pub(crate) async fn dial_host(
    server_id: &ServerId,
    endpoints: &[String],
    what: &str,
    config_for: impl Fn(baton_client::Endpoint) -> Result<baton_client::ClientConfig, Failure>,
) -> Result<(Client, baton_client::ClientConfig), Failure> {
    let mut last = None;
    for url in endpoints {
        let Ok(endpoint) = url.parse::<baton_client::Endpoint>() else {
            last = Some(format!("{url}: not an endpoint baton can dial"));
            continue;
        };
        let mut config = config_for(endpoint)?;
        config.expected_server_id = Some(server_id.clone());
        match Client::connect(config.clone()).await {
            Ok(c) => return Ok((c, config)),
            Err(e) => last = Some(format!("{url}: {e}")),
        }
    }
    Err(Failure::new(
        EXIT_CONNECT,
        "connect",
        format!(
            "{what}, which could not be reached ({})",
            last.unwrap_or_else(|| "it advertises no endpoint".to_owned())
        ),
    ))
}

/// Where `session` of `owner` lives now, asked through the first host (`first`, a fresh
/// connection each time, closed again): the owner's first advertised endpoint, or `None`
/// when that host cannot say (not reachable, `busy` while the owner is not live, another
/// server holds it now).
pub(crate) fn relocate(
    first: baton_client::ClientConfig,
    session: String,
    owner: ServerId,
    timeout: Duration,
) -> baton_client::Relocate {
    baton_client::Relocate::new(move || {
        let (first, session, owner) = (first.clone(), session.clone(), owner.clone());
        async move {
            let client = Client::connect(first).await.ok()?;
            let located = locate(&client, timeout, &session).await;
            client.close().await;
            let found = located.ok()??;
            if found.server_id != owner {
                return None;
            }
            found.endpoints.iter().find_map(|url| url.parse().ok())
        }
    })
}

/// A live host as `hosts` answers it: what placement weighs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    /// Its server id.
    pub(crate) server_id: ServerId,
    /// What it advertises.
    pub(crate) endpoints: Vec<String>,
    labels: Vec<(String, String)>,
    /// Open sessions, then attached clients, when last published.
    load: (u64, u64),
}

/// The `hosts` result's hosts (malformed entries left out).
pub(crate) fn hosts_of(v: &Value) -> Vec<Host> {
    let count = |m: &Value, k: &str| {
        field(m, k)
            .as_i64()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(u64::MAX)
    };
    field(v, "hosts")
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|h| {
            let server_id = ServerId::parse(field(h, "serverId").as_str()?).ok()?;
            let endpoints = field(h, "endpoints")
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            let labels = field(h, "labels")
                .as_map()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.to_owned(), v.as_str()?.to_owned())))
                        .collect()
                })
                .unwrap_or_default();
            let load = field(h, "load");
            Some(Host {
                server_id,
                endpoints,
                labels,
                load: (count(load, "openSessions"), count(load, "attachedClients")),
            })
        })
        .collect()
}

/// A `--on KEY=VALUE` as its pair.
pub(crate) fn label_arg(arg: &str) -> Result<(String, String), Failure> {
    match arg.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(Failure::usage(format!(
            "--on {arg:?}: expected KEY=VALUE (a host label)"
        ))),
    }
}

/// The host `create --on` places on: of those carrying every `wanted` label, the one with
/// the fewest open sessions, then the fewest attached clients, then the lowest server id
/// (so the choice is the same for everyone reading the same records).
pub(crate) fn place<'a>(hosts: &'a [Host], wanted: &[(String, String)]) -> Option<&'a Host> {
    hosts
        .iter()
        .filter(|h| wanted.iter().all(|w| h.labels.contains(w)))
        .min_by(|a, b| (a.load, a.server_id.as_str()).cmp(&(b.load, b.server_id.as_str())))
}

/// The HOST cell: `server` cut like the table's ids, with `(unavailable)` when not live.
pub(crate) fn host_cell(shown: &str, live: bool) -> String {
    if live {
        shown.to_owned()
    } else {
        format!("{shown} (unavailable)")
    }
}

/// The warning `baton sessions` prints on stderr for a stale list.
pub(crate) const STALE_WARNING: &str =
    "warning: the host cannot reach the fleet directory (etcd); this list may be out of date";

#[cfg(test)]
mod tests {
    use baton_protocol::Map;

    use super::*;

    fn map(pairs: &[(&str, Value)]) -> Value {
        let mut m = Map::new();
        for (k, v) in pairs {
            m.insert(*k, v.clone());
        }
        Value::Map(m)
    }

    const A: &str = "aaaaaaaa-0000-4000-8000-000000000001";
    const B: &str = "bbbbbbbb-0000-4000-8000-000000000002";

    #[test]
    fn a_local_session_keeps_its_directory_fields_and_a_remote_one_has_its_host() {
        let fleet = FleetList {
            sessions: vec![
                map(&[
                    ("sessionId", Value::from("s-a")),
                    ("name", Value::from("here")),
                    ("serverId", Value::from(A)),
                    ("live", Value::from(true)),
                ]),
                map(&[
                    ("sessionId", Value::from("s-b")),
                    ("serverId", Value::from(B)),
                    ("live", Value::from(false)),
                ]),
            ],
            stale: false,
        };
        let local = [
            map(&[
                ("id", Value::from("s-a")),
                ("name", Value::from("here")),
                ("phase", Value::from("idle")),
            ]),
            map(&[
                ("id", Value::from("s-new")),
                ("phase", Value::from("closed")),
            ]),
        ];
        let rows = merge(&fleet, &local, A);
        let ids: Vec<_> = rows.iter().map(|r| field(r, "id").as_str()).collect();
        assert_eq!(ids, [Some("s-a"), Some("s-b"), Some("s-new")]);
        assert_eq!(field(&rows[0], "phase").as_str(), Some("idle"));
        assert_eq!(field(&rows[1], "phase"), &Value::Null);
        assert_eq!(field(&rows[1], "serverId").as_str(), Some(B));
        assert_eq!(field(&rows[1], "live").as_bool(), Some(false));
        assert_eq!(field(&rows[2], "serverId").as_str(), Some(A));
    }

    #[test]
    fn a_locate_answer_without_a_valid_server_id_is_malformed() {
        let ok = map(&[
            ("sessionId", Value::from("s")),
            ("serverId", Value::from(B)),
            ("endpoints", Value::Array(vec![Value::from("unix:///x")])),
        ]);
        let owner = owner_of(&ok).unwrap();
        assert_eq!(owner.endpoints, ["unix:///x"]);
        assert_eq!(owner.entry.name, None);
        let bad = map(&[
            ("sessionId", Value::from("s")),
            ("serverId", Value::from("not-an-id")),
        ]);
        assert_eq!(owner_of(&bad), None);
    }

    #[test]
    fn placement_takes_the_least_loaded_host_carrying_every_wanted_label() {
        let host = |id: &str, labels: &str, open: i64, clients: i64| {
            Value::from_json(&format!(
                r#"{{"serverId":"{id}","endpoints":["unix:///{id}"],"labels":{labels},"load":{{"openSessions":{open},"attachedClients":{clients}}}}}"#
            ))
            .unwrap()
        };
        let v = map(&[(
            "hosts",
            Value::Array(vec![
                host(A, r#"{"gpu":"a100","zone":"eu"}"#, 3, 0),
                host(B, r#"{"gpu":"a100"}"#, 1, 5),
                host("not-an-id", r#"{"gpu":"a100"}"#, 0, 0),
            ]),
        )]);
        let hosts = hosts_of(&v);
        assert_eq!(hosts.len(), 2, "the malformed entry is left out");
        let want = |pairs: &[&str]| -> Vec<(String, String)> {
            pairs.iter().map(|p| label_arg(p).unwrap()).collect()
        };
        assert_eq!(
            place(&hosts, &want(&["gpu=a100"]))
                .unwrap()
                .server_id
                .as_str(),
            B
        );
        assert_eq!(
            place(&hosts, &want(&["gpu=a100", "zone=eu"]))
                .unwrap()
                .server_id
                .as_str(),
            A
        );
        assert_eq!(place(&hosts, &want(&["gpu=h100"])), None);
        assert!(label_arg("novalue").is_err() && label_arg("=x").is_err());
    }

    #[test]
    fn a_host_not_live_is_marked_unavailable() {
        assert_eq!(host_cell("bbbbbbbb", true), "bbbbbbbb");
        assert_eq!(host_cell("bbbbbbbb", false), "bbbbbbbb (unavailable)");
    }
}
