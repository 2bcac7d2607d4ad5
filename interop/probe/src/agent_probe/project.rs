//! The projection command: baton's per-role conversion and its full projection (conversion
//! plus pairing repair) of transcripts given as upstream-shaped JSON. The projection reported
//! is the incremental one the runtime uses ([`projection::ContextProjector`], messages
//! appended one by one); a transcript where it differs from the whole-list reference
//! ([`projection::project`]) is reported as an error in its slot.

use std::sync::Arc;

use baton_host::message::AgentMessage;
use baton_host::projection;
use baton_protocol::Value;
use serde_json::json;

/// `transcripts` (array of transcripts) → `{results: [{convert, project} | {error}]}`: one
/// transcript that does not parse is reported in its slot, not for the whole batch.
pub(crate) fn project_all(transcripts: &Value) -> Result<serde_json::Value, String> {
    let list = transcripts
        .as_array()
        .ok_or("transcripts is not an array")?;
    let results: Vec<serde_json::Value> = list
        .iter()
        .map(|t| project(t).unwrap_or_else(|e| json!({ "error": e })))
        .collect();
    Ok(json!({ "results": results }))
}

/// `messages` (JSON array of `AgentMessage`s) → `{convert, project}`.
pub(crate) fn project(messages: &Value) -> Result<serde_json::Value, String> {
    let list = messages.as_array().ok_or("messages is not an array")?;
    let mut parsed = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        // Through text so the key order of the stored value is kept.
        let msg: AgentMessage = serde_json::from_str(&m.to_json())
            .map_err(|e| format!("message {i} does not parse as an AgentMessage: {e}"))?;
        parsed.push(msg);
    }
    let converted = projection::convert(&parsed);
    let reference = projection::project(&parsed);
    let projected = projection::ContextProjector::from_messages(parsed.into_iter().map(Arc::new))
        .context()
        .clone();
    if projected != reference {
        return Err(format!(
            "the incremental projection differs from the whole-list one: {projected:?} vs {reference:?}"
        ));
    }
    Ok(json!({
        "convert": serde_json::to_value(&converted).unwrap_or_default(),
        "project": serde_json::to_value(&projected).unwrap_or_default(),
    }))
}
