//! JSON forms for the client probe: command fields, errors and replicas.

use baton_client::RequestError;
use baton_protocol::Value;
use baton_protocol::chord::{MemberKind, Replica};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value as Json, json};

/// Why a command failed.
#[derive(Debug)]
pub(crate) enum ProbeError {
    /// The command itself was wrong (missing field, unknown name, no connection).
    Input(String),
    /// `Client::connect` failed.
    Connect {
        code: Option<String>,
        message: String,
    },
    /// The client answered a request with an error.
    Request(RequestError),
}

impl ProbeError {
    pub(crate) fn input(message: impl Into<String>) -> Self {
        Self::Input(message.into())
    }
}

impl From<RequestError> for ProbeError {
    fn from(e: RequestError) -> Self {
        Self::Request(e)
    }
}

/// `{"kind", "code"?, "message"}`: `kind` names the client's error variant.
pub(crate) fn error_json(error: &ProbeError) -> Json {
    match error {
        ProbeError::Input(message) => json!({ "kind": "probe", "message": message }),
        ProbeError::Connect { code, message } => {
            json!({ "kind": "connect", "code": code, "message": message })
        }
        ProbeError::Request(e) => {
            let kind = match e {
                RequestError::Server(_) => "server",
                RequestError::Cancelled => "cancelled",
                RequestError::TimedOut => "timed_out",
                RequestError::NotSent(_) => "not_sent",
                RequestError::OutcomeUnknown(_) => "outcome_unknown",
                RequestError::NotAttached(_) => "not_attached",
                RequestError::Encode(_) => "encode",
                RequestError::Closed => "closed",
                _ => "other",
            };
            let message = match e {
                RequestError::Server(wire) => wire.message.clone(),
                other => other.to_string(),
            };
            json!({ "kind": kind, "code": e.code(), "message": message })
        }
    }
}

/// A required field of a command.
pub(crate) fn field<T: DeserializeOwned>(cmd: &Json, key: &str) -> Result<T, ProbeError> {
    opt_field(cmd, key)?.ok_or_else(|| ProbeError::input(format!("missing field {key:?}")))
}

/// An optional field of a command (`null` counts as absent).
pub(crate) fn opt_field<T: DeserializeOwned>(
    cmd: &Json,
    key: &str,
) -> Result<Option<T>, ProbeError> {
    match cmd.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| ProbeError::input(format!("field {key:?}: {e}"))),
    }
}

/// A wire value as JSON.
pub(crate) fn to_json(value: &Value) -> Json {
    // A Value is strict JSON, so this cannot fail; null keeps the line well-formed anyway.
    serde_json::to_value(value).unwrap_or(Json::Null)
}

/// The replica as the client rebuilt it:
/// `{"serviceId","mode","hydrated","instances":[{"instance","members","states"}]}`, where
/// `states` maps each state member to `{"sequence","value"}` or `null` (not hydrated).
pub(crate) fn replica_json(replica: &Replica) -> Json {
    let instances: Vec<Json> = replica
        .instances()
        .iter()
        .map(|instance| {
            let mut members = Vec::new();
            let mut states = Map::new();
            for (name, kind) in instance.members() {
                members.push(json!({ "name": name, "kind": kind.as_str() }));
                if kind == MemberKind::State {
                    let state = match (instance.sequence(name), instance.value(name)) {
                        (Some(sequence), Some(value)) => {
                            json!({ "sequence": sequence, "value": to_json(value) })
                        }
                        _ => Json::Null,
                    };
                    states.insert(name.to_owned(), state);
                }
            }
            json!({
                "instance": instance.address().map_or(Json::Null, |a| to_json(&a.to_value())),
                "members": members,
                "states": states,
            })
        })
        .collect();
    json!({
        "serviceId": replica.service_id(),
        "mode": replica.mode().as_str(),
        "hydrated": replica.is_hydrated(),
        "instances": instances,
    })
}
