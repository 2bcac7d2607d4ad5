//! `ServiceCall`: the `call` of a request, `{serviceId, instance?, member, args}`.

use crate::chord::address::InstanceAddress;
use crate::chord::error::{ChordError, Subject};
use crate::chord::fields::{assert_keys, id, record};
use crate::value::{Map, Value};

/// A call to one member of one service (upstream `ServiceCall`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCall {
    /// The service (non-empty).
    pub service_id: String,
    /// The keyed instance addressed, if any.
    pub instance: Option<InstanceAddress>,
    /// The member (non-empty).
    pub member: String,
    /// The positional arguments.
    pub args: Vec<Value>,
}

impl ServiceCall {
    /// A call without an instance address.
    pub fn new(service_id: impl Into<String>, member: impl Into<String>, args: Vec<Value>) -> Self {
        Self {
            service_id: service_id.into(),
            instance: None,
            member: member.into(),
            args,
        }
    }

    /// The same call addressed to one keyed instance.
    #[must_use]
    pub fn with_instance(mut self, instance: InstanceAddress) -> Self {
        self.instance = Some(instance);
        self
    }

    /// Parses a call (upstream `parseServiceCall`): a strict map with `serviceId`, `member`,
    /// `args` and optionally `instance`; key order does not matter.
    ///
    /// # Errors
    /// `Invalid service call` for a bad shape, id, member or args;
    /// `Invalid service instance address` for a bad `instance`.
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        const SUBJECT: Subject = Subject::ServiceCall;
        let map = record(value, SUBJECT)?;
        assert_keys(
            map,
            &["serviceId", "member", "args"],
            &["instance"],
            SUBJECT,
        )?;
        let (Some(service_id), Some(member), Some(Value::Array(args))) = (
            id(map.get("serviceId")),
            id(map.get("member")),
            map.get("args"),
        ) else {
            return Err(ChordError::Invalid(SUBJECT));
        };
        let instance = map
            .get("instance")
            .map(InstanceAddress::parse)
            .transpose()?;
        Ok(Self {
            service_id: service_id.to_owned(),
            instance,
            member: member.to_owned(),
            args: args.clone(),
        })
    }

    /// The wire map, keys in upstream order: `serviceId`, `instance`?, `member`, `args`.
    pub fn to_value(&self) -> Value {
        self.clone().into_value()
    }

    /// Like [`ServiceCall::to_value`], without cloning the arguments.
    pub fn into_value(self) -> Value {
        let mut map = Map::with_capacity(4);
        map.insert("serviceId", Value::String(self.service_id));
        if let Some(instance) = &self.instance {
            map.insert("instance", instance.to_value());
        }
        map.insert("member", Value::String(self.member));
        map.insert("args", Value::Array(self.args));
        Value::Map(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn addressed_call_parses_in_any_key_order_and_emits_upstream_order() {
        let call = ServiceCall::parse(&v(
            r#"{"args":[{"outcome":"selected","index":0}],"member":"submit","instance":{"key":"invocation-1","generation":2},"serviceId":"pi.question-dialog"}"#,
        ))
        .unwrap();
        assert_eq!(call.member, "submit");
        assert_eq!(call.instance, Some(InstanceAddress::new("invocation-1", 2)));
        assert_eq!(
            call.to_value().to_json(),
            r#"{"serviceId":"pi.question-dialog","instance":{"key":"invocation-1","generation":2},"member":"submit","args":[{"outcome":"selected","index":0}]}"#
        );
    }

    #[test]
    fn call_with_an_extra_key_is_invalid() {
        let err = ServiceCall::parse(&v(
            r#"{"serviceId":"pi.models","member":"list","args":[],"extra":true}"#,
        ))
        .unwrap_err();
        assert_eq!(err.to_string(), "Invalid service call");
    }

    #[test]
    fn call_with_bad_fields_is_invalid() {
        for bad in [
            r#"{"serviceId":"","member":"m","args":[]}"#,
            r#"{"serviceId":"s","member":"","args":[]}"#,
            r#"{"serviceId":"s","member":"m","args":{}}"#,
            r#"{"serviceId":"s","member":"m"}"#,
            r#"{"arbitrary":"string"}"#,
            r#"["s","m",[]]"#,
        ] {
            assert_eq!(
                ServiceCall::parse(&v(bad)).unwrap_err().to_string(),
                "Invalid service call",
                "{bad}"
            );
        }
    }

    #[test]
    fn call_with_a_bad_instance_reports_the_address() {
        let err = ServiceCall::parse(&v(
            r#"{"serviceId":"s","instance":{"key":"k","generation":0},"member":"m","args":[]}"#,
        ))
        .unwrap_err();
        assert_eq!(err.to_string(), "Invalid service instance address");
        let err = ServiceCall::parse(&v(
            r#"{"serviceId":"s","instance":null,"member":"m","args":[]}"#,
        ))
        .unwrap_err();
        assert_eq!(err.to_string(), "Invalid service instance address");
    }
}
