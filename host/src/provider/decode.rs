//! What both network decoders share (sans-IO): settling once, pricing usage, the response's
//! identity, tool-call arguments, and the events that end a stream cut short.

use baton_protocol::{Map, Value};
use serde_json::Value as Json;

use super::ProviderEvent;
use super::cost::ModelCost;
use crate::message::Usage;

/// The part of a decoder's state every API has: the endpoint its errors name, the model's
/// prices, and whether a terminal event was produced.
#[derive(Debug, Default)]
pub(crate) struct Settle {
    /// `scheme://host:port/path`, for error messages.
    pub endpoint: String,
    cost: Option<ModelCost>,
    finished: bool,
}

impl Settle {
    /// State for a stream from `endpoint` priced by `cost`.
    pub(crate) fn new(endpoint: String, cost: Option<ModelCost>) -> Self {
        Self {
            endpoint,
            cost,
            finished: false,
        }
    }

    /// True once a terminal event was produced.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// Marks the stream settled.
    pub(crate) fn finish(&mut self) {
        self.finished = true;
    }

    /// The terminal error event (the stream is settled).
    pub(crate) fn fail(&mut self, message: String) -> ProviderEvent {
        self.finished = true;
        ProviderEvent::Error(message)
    }

    /// `usage` with its cost filled in from the model's prices.
    pub(crate) fn priced(&self, mut usage: Usage) -> ProviderEvent {
        if let Some(c) = &self.cost {
            c.apply(&mut usage);
        }
        ProviderEvent::Usage(usage)
    }

    /// The end of a stream cut short: what was complete (`flushed`), the usage so far, then
    /// the error.
    pub(crate) fn cut(
        &mut self,
        mut flushed: Vec<ProviderEvent>,
        usage: Option<Usage>,
        message: String,
    ) -> Vec<ProviderEvent> {
        flushed.extend(usage.map(|u| self.priced(u)));
        flushed.push(self.fail(message));
        flushed
    }
}

/// The response identity of an object with `id` and `model` fields, if it has either.
pub(crate) fn metadata(object: &Json) -> Option<ProviderEvent> {
    let text = |k: &str| object.get(k).and_then(Json::as_str).map(str::to_owned);
    let (response_id, response_model) = (text("id"), text("model"));
    (response_id.is_some() || response_model.is_some()).then_some(ProviderEvent::Metadata {
        response_id,
        response_model,
    })
}

/// A tool call's streamed argument text as a value: `{}` when empty, the parsed JSON when
/// `complete` and valid, else the text itself (so the loop marks the call failed).
pub(crate) fn arguments(text: String, complete: bool) -> Value {
    if !complete {
        return Value::String(text);
    }
    if text.trim().is_empty() {
        return Value::Map(Map::new());
    }
    Value::from_json(&text).unwrap_or(Value::String(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_when_complete_and_stay_text_otherwise() {
        assert_eq!(arguments(String::new(), true), Value::Map(Map::new()));
        assert_eq!(
            arguments(r#"{"a":1}"#.into(), true),
            Value::from_json(r#"{"a":1}"#).unwrap()
        );
        assert_eq!(
            arguments(r#"{"a":"#.into(), true),
            Value::String(r#"{"a":"#.into())
        );
        assert_eq!(
            arguments(r#"{"a":1}"#.into(), false),
            Value::String(r#"{"a":1}"#.into())
        );
    }

    #[test]
    fn metadata_needs_an_id_or_a_model() {
        assert_eq!(metadata(&serde_json::json!({"x": 1})), None);
        assert_eq!(
            metadata(&serde_json::json!({"model": "m"})),
            Some(ProviderEvent::Metadata {
                response_id: None,
                response_model: Some("m".into())
            })
        );
    }

    #[test]
    fn a_cut_stream_ends_with_the_usage_then_the_error_and_is_settled() {
        let mut s = Settle::new("e".into(), None);
        let out = s.cut(
            vec![ProviderEvent::BlockEnd],
            Some(Usage::default()),
            "gone".into(),
        );
        assert_eq!(
            out,
            vec![
                ProviderEvent::BlockEnd,
                ProviderEvent::Usage(Usage::default()),
                ProviderEvent::Error("gone".into())
            ]
        );
        assert!(s.is_finished());
    }
}
