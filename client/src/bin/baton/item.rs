//! Reading the fields of `pi.session` transcript items (docs/services.md), as the line view
//! and the terminal UI both show them.

use baton_protocol::{Map, Value};

/// `m[key]` as a string; empty when absent or not a string.
pub(crate) fn str_of<'a>(m: &'a Map, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The text of a message's `content`: its text blocks joined (other blocks skipped).
pub(crate) fn content_text(content: Option<&Value>) -> String {
    content
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(Value::as_map)
                .filter(|b| str_of(b, "type") == "text")
                .map(|b| str_of(b, "text"))
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}
