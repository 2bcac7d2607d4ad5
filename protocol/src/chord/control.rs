//! Control calls to the reserved `$chord.service`: catalogue, subscribe, unsubscribe.

use crate::chord::call::ServiceCall;
use crate::chord::mode::ServiceMode;
use crate::value::Value;

/// The reserved service id of the control calls.
pub const SERVICE_CONTROL_ID: &str = "$chord.service";

/// The member name of the catalogue control call.
pub const CATALOGUE_MEMBER: &str = "catalogue";
/// The member name of the subscribe control call.
pub const SUBSCRIBE_MEMBER: &str = "subscribe";
/// The member name of the unsubscribe control call.
pub const UNSUBSCRIBE_MEMBER: &str = "unsubscribe";

/// A decoded control call (upstream `ServiceControlCall`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlCall {
    /// `catalogue()`: list the remotable services.
    Catalogue,
    /// `subscribe(subscriptionId, serviceId, mode)`: answer with a subscription snapshot.
    Subscribe {
        /// The client-chosen subscription id (non-empty).
        subscription_id: String,
        /// The service to subscribe to (non-empty).
        service_id: String,
        /// The mode the client expects.
        mode: ServiceMode,
    },
    /// `unsubscribe(subscriptionId)`.
    Unsubscribe {
        /// The subscription to end (non-empty).
        subscription_id: String,
    },
}

impl ControlCall {
    /// `subscribe(subscription_id, service_id, mode)`.
    pub fn subscribe(
        subscription_id: impl Into<String>,
        service_id: impl Into<String>,
        mode: ServiceMode,
    ) -> Self {
        Self::Subscribe {
            subscription_id: subscription_id.into(),
            service_id: service_id.into(),
            mode,
        }
    }

    /// `unsubscribe(subscription_id)`.
    pub fn unsubscribe(subscription_id: impl Into<String>) -> Self {
        Self::Unsubscribe {
            subscription_id: subscription_id.into(),
        }
    }

    /// Recognises a control call (upstream `decodeServiceControlCall`).
    ///
    /// `None` means "an ordinary call to whatever service it names", which for
    /// `$chord.service` a provider refuses as not allowlisted. Recognised only when the
    /// service is `$chord.service` with no instance and: `catalogue` has no args; `subscribe`
    /// has exactly a non-empty string, a non-empty string and `"singleton"`/`"keyed"`;
    /// `unsubscribe` has exactly one non-empty string.
    pub fn decode(call: &ServiceCall) -> Option<Self> {
        if call.service_id != SERVICE_CONTROL_ID || call.instance.is_some() {
            return None;
        }
        let non_empty = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        match (call.member.as_str(), call.args.as_slice()) {
            (CATALOGUE_MEMBER, []) => Some(Self::Catalogue),
            (SUBSCRIBE_MEMBER, [subscription_id, service_id, mode]) => Some(Self::Subscribe {
                subscription_id: non_empty(subscription_id)?,
                service_id: non_empty(service_id)?,
                mode: mode.as_str().and_then(ServiceMode::parse)?,
            }),
            (UNSUBSCRIBE_MEMBER, [subscription_id]) => Some(Self::Unsubscribe {
                subscription_id: non_empty(subscription_id)?,
            }),
            _ => None,
        }
    }

    /// The call upstream's `createService*Call` builds: `{serviceId, member, args}`, with
    /// subscribe args `[subscriptionId, serviceId, mode]`.
    pub fn to_call(&self) -> ServiceCall {
        match self {
            Self::Catalogue => ServiceCall::new(SERVICE_CONTROL_ID, CATALOGUE_MEMBER, Vec::new()),
            Self::Subscribe {
                subscription_id,
                service_id,
                mode,
            } => ServiceCall::new(
                SERVICE_CONTROL_ID,
                SUBSCRIBE_MEMBER,
                vec![
                    Value::from(subscription_id.as_str()),
                    Value::from(service_id.as_str()),
                    Value::from(mode.as_str()),
                ],
            ),
            Self::Unsubscribe { subscription_id } => ServiceCall::new(
                SERVICE_CONTROL_ID,
                UNSUBSCRIBE_MEMBER,
                vec![Value::from(subscription_id.as_str())],
            ),
        }
    }

    /// The call as a wire value (`to_call().into_value()`).
    pub fn to_value(&self) -> Value {
        self.to_call().into_value()
    }
}

impl From<&ControlCall> for ServiceCall {
    fn from(call: &ControlCall) -> Self {
        call.to_call()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(json: &str) -> ServiceCall {
        ServiceCall::parse(&Value::from_json(json).unwrap()).unwrap()
    }

    #[test]
    fn control_calls_encode_exactly_as_upstream_builds_them() {
        assert_eq!(
            ControlCall::Catalogue.to_value().to_json(),
            r#"{"serviceId":"$chord.service","member":"catalogue","args":[]}"#
        );
        assert_eq!(
            ControlCall::subscribe("subscription-1", "pi.models", ServiceMode::Singleton)
                .to_value()
                .to_json(),
            r#"{"serviceId":"$chord.service","member":"subscribe","args":["subscription-1","pi.models","singleton"]}"#
        );
        assert_eq!(
            ControlCall::unsubscribe("subscription-1")
                .to_value()
                .to_json(),
            r#"{"serviceId":"$chord.service","member":"unsubscribe","args":["subscription-1"]}"#
        );
    }

    #[test]
    fn control_calls_decode_back_to_themselves() {
        for control in [
            ControlCall::Catalogue,
            ControlCall::subscribe("service-1", "pi.dialogs", ServiceMode::Keyed),
            ControlCall::unsubscribe("service-1"),
        ] {
            assert_eq!(ControlCall::decode(&control.to_call()), Some(control));
        }
    }

    #[test]
    fn malformed_control_calls_are_ordinary_calls() {
        for json in [
            r#"{"serviceId":"$chord.service","member":"catalogue","args":[1]}"#,
            r#"{"serviceId":"$chord.service","member":"subscribe","args":["s","pi.models"]}"#,
            r#"{"serviceId":"$chord.service","member":"subscribe","args":["","pi.models","singleton"]}"#,
            r#"{"serviceId":"$chord.service","member":"subscribe","args":["s","","keyed"]}"#,
            r#"{"serviceId":"$chord.service","member":"subscribe","args":["s","pi.models","other"]}"#,
            r#"{"serviceId":"$chord.service","member":"subscribe","args":["pi.models","singleton","s"]}"#,
            r#"{"serviceId":"$chord.service","member":"unsubscribe","args":[]}"#,
            r#"{"serviceId":"$chord.service","member":"unsubscribe","args":[1]}"#,
            r#"{"serviceId":"$chord.service","member":"list","args":[]}"#,
            r#"{"serviceId":"$chord.service","instance":{"key":"k","generation":1},"member":"catalogue","args":[]}"#,
            r#"{"serviceId":"pi.models","member":"catalogue","args":[]}"#,
        ] {
            assert_eq!(ControlCall::decode(&call(json)), None, "{json}");
        }
    }
}
