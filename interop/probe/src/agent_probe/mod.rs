//! The agent probe's commands: `run` (a scenario through the real agent loop) and `project`
//! (a transcript through the real projection).

mod project;
mod run;
mod scenario;

use baton_protocol::Value;

/// Handles one request document; returns the response document.
pub(crate) async fn handle(input: &str) -> serde_json::Value {
    match dispatch(input).await {
        Ok(v) => v,
        Err(e) => serde_json::json!({ "error": e }),
    }
}

async fn dispatch(input: &str) -> Result<serde_json::Value, String> {
    let doc = Value::from_json(input).map_err(|e| format!("input is not JSON: {e}"))?;
    let m = doc.as_map().ok_or("input is not an object")?;
    match m.get("command").and_then(Value::as_str) {
        Some("run") => {
            let s = scenario::Scenario::parse(m.get("scenario").ok_or("run without scenario")?)?;
            run::run(s).await
        }
        Some("project") => {
            project::project_all(m.get("transcripts").ok_or("project without transcripts")?)
        }
        other => Err(format!("unknown command {other:?}")),
    }
}
