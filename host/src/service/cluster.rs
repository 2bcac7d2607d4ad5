//! `baton.cluster` (feature `cluster`, served once the host joined a fleet's directory):
//! `locate` a session by id, name or id prefix → its host; `list` the fleet's sessions with
//! their hosts; `hosts` the live hosts with their labels and load, for placement
//! (docs/services.md).
//!
//! Both filter by the same sight as `pi.session-directory` (`super::access`): a session the
//! caller may not see is never listed and never located (`session_not_found`), so neither a
//! name nor a prefix reveals it.

use baton_protocol::{Map, Value};
use baton_server::chord::RemoteServiceError;
use baton_server::{CallResult, Context, ServiceError};

use super::access::Sight;
use super::args::{arity, string_arg};
use super::directory::MIN_PREFIX;
use super::errors::busy;
use super::fleet::{FleetSession, FleetView};
use super::shared::Shared;

/// The service id.
pub(crate) const SERVICE: &str = "baton.cluster";

/// Answers `member` of `baton.cluster`.
pub(crate) async fn invoke(
    shared: &Shared,
    member: &str,
    args: &[Value],
    ctx: &Context,
) -> CallResult {
    let Some(fleet) = shared.fleet() else {
        return Err(RemoteServiceError::not_allowlisted(SERVICE).into());
    };
    let sight = shared.access.rights(ctx.identity()).sight();
    match member {
        "list" => {
            arity(args, 0, "[]")?;
            let view = fleet.fleet().await.map_err(|e| e.to_service_error())?;
            Ok(Some(list_value(&view, &sight)))
        }
        "hosts" => {
            arity(args, 0, "[]")?;
            let view = fleet.fleet().await.map_err(|e| e.to_service_error())?;
            Ok(Some(hosts_value(&view)))
        }
        "locate" => {
            const USAGE: &str = "[sessionIdOrNameOrPrefix]";
            arity(args, 1, USAGE)?;
            let query = string_arg(args, 0, USAGE)?;
            let view = fleet.fleet().await.map_err(|e| e.to_service_error())?;
            let found = locate(&view, &sight, query)?;
            if !found.live {
                return Err(busy(format!(
                    "The host of session {} (server {}) is not live: its fleet lease expired; try again",
                    found.record.session_id, found.record.server_id
                )));
            }
            Ok(Some(session_value(found, view.stale)))
        }
        other => Err(RemoteServiceError::unknown_member(SERVICE, other).into()),
    }
}

/// The one visible session `query` names: an exact id, else an exact name, else a unique id
/// prefix of at least [`MIN_PREFIX`] characters.
fn locate<'a>(
    view: &'a FleetView,
    sight: &Sight,
    query: &str,
) -> Result<&'a FleetSession, ServiceError> {
    let visible = || {
        view.sessions
            .iter()
            .filter(|s| sight.sees(&s.record.session_id, s.record.owner.as_deref()))
    };
    if let Some(s) = visible().find(|s| s.record.session_id == query) {
        return Ok(s);
    }
    let one = |mut matches: Box<dyn Iterator<Item = &'a FleetSession> + '_>| match (
        matches.next(),
        matches.next(),
    ) {
        (Some(s), None) => Ok(Some(s)),
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(ServiceError::session_ambiguous()),
    };
    if let Some(s) = one(Box::new(
        visible().filter(|s| s.record.name.as_deref() == Some(query)),
    ))? {
        return Ok(s);
    }
    if query.len() < MIN_PREFIX {
        return Err(ServiceError::session_not_found());
    }
    one(Box::new(
        visible().filter(|s| s.record.session_id.starts_with(query)),
    ))?
    .ok_or_else(ServiceError::session_not_found)
}

/// `{"sessions": [session…], "stale": bool}`, the visible sessions only.
fn list_value(view: &FleetView, sight: &Sight) -> Value {
    let sessions = view
        .sessions
        .iter()
        .filter(|s| sight.sees(&s.record.session_id, s.record.owner.as_deref()))
        .map(|s| session_value(s, view.stale))
        .collect::<Vec<_>>();
    let mut m = Map::new();
    m.insert("sessions", Value::Array(sessions));
    m.insert("stale", Value::from(view.stale));
    Value::Map(m)
}

/// `{"hosts": [{"serverId", "endpoints", "labels", "load": {"openSessions",
/// "attachedClients"}, "since"}…], "stale": bool}`: every live host (what any caller may
/// already dial; no session is named).
fn hosts_value(view: &FleetView) -> Value {
    let hosts = view
        .hosts
        .iter()
        .map(|h| {
            let mut labels = Map::new();
            for (k, v) in &h.labels {
                labels.insert(k.as_str(), Value::from(v.clone()));
            }
            let mut load = Map::new();
            load.insert("openSessions", count(h.load.open_sessions));
            load.insert("attachedClients", count(h.load.attached_clients));
            let mut m = Map::new();
            m.insert("serverId", Value::from(h.server_id.clone()));
            m.insert(
                "endpoints",
                Value::Array(h.advertise.iter().cloned().map(Value::from).collect()),
            );
            m.insert("labels", Value::Map(labels));
            m.insert("load", Value::Map(load));
            m.insert("since", Value::from(h.since.clone()));
            Value::Map(m)
        })
        .collect();
    let mut m = Map::new();
    m.insert("hosts", Value::Array(hosts));
    m.insert("stale", Value::from(view.stale));
    Value::Map(m)
}

/// A count as a protocol integer (saturating at the largest one).
fn count(n: u64) -> Value {
    Value::try_from(i64::try_from(n).unwrap_or(i64::MAX)).unwrap_or(Value::Null)
}

/// `{"sessionId", "name"?, "createdAt", "serverId", "endpoints": [..], "live", "stale"}`.
fn session_value(s: &FleetSession, stale: bool) -> Value {
    let mut m = Map::new();
    m.insert("sessionId", Value::from(s.record.session_id.clone()));
    if let Some(name) = &s.record.name {
        m.insert("name", Value::from(name.clone()));
    }
    m.insert("createdAt", Value::from(s.record.created.clone()));
    m.insert("serverId", Value::from(s.record.server_id.clone()));
    m.insert(
        "endpoints",
        Value::Array(s.endpoints.iter().cloned().map(Value::from).collect()),
    );
    m.insert("live", Value::from(s.live));
    m.insert("stale", Value::from(stale));
    Value::Map(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::record::{RECORD_VERSION, SessionRecord};

    fn session(id: &str, owner: &str, name: &str, live: bool) -> FleetSession {
        FleetSession {
            record: SessionRecord {
                v: RECORD_VERSION,
                server_id: "srv".into(),
                session_id: id.into(),
                owner: Some(owner.into()),
                name: Some(name.into()),
                created: "2026-12-02T00:00:00.000Z".into(),
            },
            endpoints: vec!["tcp://127.0.0.1:1".into()],
            live,
        }
    }

    fn view() -> FleetView {
        FleetView {
            sessions: vec![
                session("aaaaaaaa-1", "unix:uid=1", "mine", true),
                session("aaaaaaaa-2", "unix:uid=2", "theirs", true),
                session("bbbbbbbb-3", "unix:uid=2", "mine", false),
            ],
            hosts: Vec::new(),
            stale: false,
        }
    }

    fn sight_of(key: &str) -> Sight {
        Sight::own(key.to_owned())
    }

    #[test]
    fn locate_finds_by_id_name_or_prefix_among_the_visible_only() {
        let v = view();
        let me = sight_of("unix:uid=1");
        assert_eq!(
            locate(&v, &me, "aaaaaaaa-1")
                .unwrap()
                .record
                .name
                .as_deref(),
            Some("mine")
        );
        assert_eq!(
            locate(&v, &me, "mine").unwrap().record.session_id,
            "aaaaaaaa-1"
        );
        assert_eq!(
            locate(&v, &me, "aaaaaaaa").unwrap().record.session_id,
            "aaaaaaaa-1",
            "the other match is invisible"
        );
        for hidden in ["aaaaaaaa-2", "theirs", "bbbbbbbb"] {
            let e = locate(&v, &me, hidden).unwrap_err();
            assert_eq!(e.code(), "session_not_found", "{hidden}");
        }
        let all = Sight::all();
        let e = locate(&v, &all, "mine").unwrap_err();
        assert_eq!(e.code(), "session_ambiguous", "two owners' names");
    }

    #[test]
    fn list_shows_only_the_visible_sessions_with_the_stale_flag() {
        let mut v = view();
        v.stale = true;
        let listed = list_value(&v, &sight_of("unix:uid=2"));
        let m = listed.as_map().unwrap();
        assert_eq!(m.get("stale"), Some(&Value::from(true)));
        let ids: Vec<_> = m
            .get("sessions")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .map(|s| {
                s.as_map()
                    .unwrap()
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(ids, ["aaaaaaaa-2", "bbbbbbbb-3"]);
    }
}
