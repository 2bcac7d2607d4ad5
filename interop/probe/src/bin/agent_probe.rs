//! `baton-agent-probe`: drives baton-host's agent loop and projection for the interop suite
//! `interop/suites/agent-core.mjs`.
//!
//! Reads one JSON request on stdin and writes one JSON response on stdout:
//! * `{"command":"run","scenario":{…}}` → `{"events":[…],"messages":[…],"requests":[…],"outcome":{…}}`
//!   (the scenario format is documented in `interop/lib/agent-core-scenarios.mjs`);
//! * `{"command":"project","transcripts":[[…],…]}` → `{"results":[{"convert":[…],"project":[…]} | {"error":"…"},…]}`;
//! * a failure → `{"error":"…"}` (exit status 1).

use std::io::{Read, Write};
use std::time::Duration;

#[path = "../agent_probe/mod.rs"]
mod agent_probe;

/// A hang guard only: every scenario finishes on its own gates, far below this.
const HANG_GUARD: Duration = Duration::from_secs(20);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut input = String::new();
    let response = match std::io::stdin().read_to_string(&mut input) {
        Ok(_) => tokio::time::timeout(HANG_GUARD, agent_probe::handle(&input))
            .await
            .unwrap_or_else(
                |_| serde_json::json!({"error": "hang guard: the probe did not finish"}),
            ),
        Err(e) => serde_json::json!({"error": format!("reading stdin: {e}")}),
    };
    let failed = response.get("error").is_some();
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "{response}").and_then(|()| out.flush());
    if written.is_err() || failed {
        std::process::exit(1);
    }
}
