//! `baton-host demo`: an embedded host on a temporary Unix socket, driven through the real
//! protocol by `baton-client`, streaming a scripted conversation with a tool call.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use baton_client::{Client, ClientConfig, Endpoint, SubscriptionEvent};
use baton_host::clock::SystemClock;
use baton_host::provider::ModelRegistry;
use baton_host::provider::scripted::{DEFAULT_TOKEN_DELAY, ScriptedConfig};
use baton_host::service::ServiceHost;
use baton_host::session::{HostConfig, SUMMARY_REQUEST_OPENING, SessionManager};
use baton_protocol::chord::{Op, ProviderUpdate, ServiceCall, ServiceMode};
use baton_protocol::{Map, Value};
use baton_server::{Listener, Server, ServerConfig};

use crate::Failure;
use crate::serve::random_server_id;

const PROMPT: &str = "Please run `ls` in the project directory.";

fn io(context: &str) -> impl FnOnce(std::io::Error) -> Failure + '_ {
    move |e| Failure::from_error(context, &e)
}

fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new(service, member, args).into_value()
}

/// Prints a `pi.session` transcript (see `docs/services.md`) as it grows: the prompt, the
/// assistant's reply text as it streams, each tool call once, each tool's result once it has
/// settled. It works from whole states, remembering how much of each item it has shown.
#[derive(Debug, Default)]
struct Progress {
    /// Per item id: bytes of reply text printed, and how many content blocks are done with.
    items: HashMap<String, (usize, usize)>,
}

impl Progress {
    fn print(&mut self, out: &mut impl Write, state: &Value) -> std::io::Result<()> {
        let str_of = |m: &Map, k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let items = state
            .as_map()
            .and_then(|m| m.get("transcript"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for item in items.iter().filter_map(Value::as_map) {
            let (role, status) = (str_of(item, "role"), str_of(item, "status"));
            // A tool's result is shown whole, once it has settled.
            if role == "tool" && status == "running" {
                continue;
            }
            let (text_shown, blocks_done) = self.items.entry(str_of(item, "id")).or_default();
            let blocks = item
                .get("content")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            if role == "tool" && *blocks_done == 0 {
                let failed = item.get("isError").and_then(Value::as_bool) == Some(true);
                writeln!(
                    out,
                    "{} {}",
                    if failed { "✗" } else { "✓" },
                    str_of(item, "toolName")
                )?;
            }
            for (index, block) in blocks.iter().enumerate().skip(*blocks_done) {
                let Some(block) = block.as_map() else {
                    continue;
                };
                let last = index + 1 == blocks.len();
                match (role.as_str(), str_of(block, "type").as_str()) {
                    ("user", "text") => writeln!(out, "> {}", str_of(block, "text"))?,
                    ("assistant", "text") => {
                        // The streaming block grows: print what is new; a later block means
                        // this one is complete.
                        let text = str_of(block, "text");
                        let new = text.get(*text_shown..).unwrap_or("");
                        write!(out, "{new}")?;
                        *text_shown = text.len();
                        if last && status == "streaming" {
                            break;
                        }
                        writeln!(out)?;
                    }
                    ("assistant", "toolCall") => {
                        if last && status == "streaming" {
                            break;
                        }
                        let arguments = block.get("arguments").unwrap_or(&Value::Null);
                        writeln!(out, "→ {} {arguments}", str_of(block, "name"))?;
                    }
                    ("tool", "text") => {
                        for line in str_of(block, "text").lines() {
                            writeln!(out, "  │ {line}")?;
                        }
                    }
                    _ => {}
                }
                *text_shown = 0;
                *blocks_done = index + 1;
            }
        }
        out.flush()
    }
}

pub(crate) async fn run() -> Result<(), Failure> {
    let tmp = tempfile::Builder::new()
        .prefix("baton-demo-")
        .tempdir()
        .map_err(io("cannot create a temporary directory"))?;
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).map_err(io("cannot create the demo project"))?;
    for (name, text) in [
        ("README.md", "# A demo project\n"),
        ("hello.txt", "hello from baton\n"),
    ] {
        std::fs::write(project.join(name), text).map_err(io("cannot write the demo project"))?;
    }

    // The host: the runtime behind the service adapter, behind a real server.
    let mut config = HostConfig::new(tmp.path().join("sessions"));
    config.default_cwd = project;
    let manager = SessionManager::new(
        config,
        ModelRegistry::scripted(ScriptedConfig::new(
            DEFAULT_TOKEN_DELAY,
            SUMMARY_REQUEST_OPENING,
        )),
        Arc::new(SystemClock),
    )
    .map_err(|e| Failure::from_error("cannot create the sessions directory", &e))?;
    let host = ServiceHost::new(manager).map_err(|e| Failure::from_error("host", &e))?;
    let server = Server::start(
        ServerConfig::new(random_server_id()?),
        host.clone(),
        vec![Listener::unix(tmp.path().join("run"))],
    )
    .await
    .map_err(|e| Failure::from_error("cannot start the embedded host", &e))?;
    let socket = server
        .local_addrs()
        .iter()
        .find_map(|a| a.unix_path().map(std::path::Path::to_path_buf))
        .ok_or_else(|| Failure::new("the embedded host has no Unix socket"))?;

    let result = converse(&socket).await;

    host.begin_shutdown();
    if let Err(error) = server.close().await {
        tracing::warn!(%error, "embedded host closed with errors");
    }
    host.shutdown().await;
    result
}

/// The client side: everything below goes through the socket.
async fn converse(socket: &std::path::Path) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "baton demo: an embedded host on unix://{} (offline scripted model)",
        socket.display()
    );
    let client = Client::connect(ClientConfig::new(Endpoint::Unix(socket.to_path_buf())))
        .await
        .map_err(|e| Failure::from_error("cannot connect", &e))?;
    let result = async {
        let mut options = Map::new();
        options.insert("name", Value::from("demo"));
        let created = client
            .request(
                client.server_target(),
                call("pi.session-management", "create", vec![Value::Map(options)]),
            )
            .await
            .map_err(|e| Failure::from_error("create failed", &e))?
            .into_value();
        let id = created
            .as_map()
            .and_then(|m| m.get("sessionId"))
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::new("create returned no sessionId"))?
            .to_owned();
        let _ = writeln!(out, "created session {id}; attaching and subscribing to pi.session\n");
        let session = client
            .attach(&id)
            .await
            .map_err(|e| Failure::from_error("attach failed", &e))?;
        let mut sub = session
            .subscribe("pi.session", ServiceMode::Singleton)
            .await
            .map_err(|e| Failure::from_error("subscribe failed", &e))?;

        let mut progress = Progress::default();
        let (mut updates, mut appends) = (0usize, 0usize);
        let request = session.request(call("pi.session", "prompt", vec![Value::from(PROMPT)]));
        tokio::pin!(request);
        let reply = loop {
            tokio::select! {
                reply = &mut request => break reply,
                event = sub.next_event() => match event {
                    Some(SubscriptionEvent::Updates(batch)) => {
                        updates += batch.len();
                        for update in &batch {
                            if let ProviderUpdate::State { ops, .. } = &update {
                                appends += ops.iter().filter(|o| matches!(o, Op::Append { .. })).count();
                            }
                        }
                    }
                    Some(SubscriptionEvent::Ended { reason }) => {
                        return Err(Failure::new(format!("subscription ended: {reason}")));
                    }
                    Some(_) => {}
                    None => return Err(Failure::new("subscription ended")),
                },
            }
            let state = sub.state().value(None, "state").cloned().unwrap_or(Value::Null);
            progress.print(&mut out, &state).map_err(io("output error"))?;
        };
        // Updates precede the response on the wire: the replica holds the final state.
        let state = sub.state().value(None, "state").cloned().unwrap_or(Value::Null);
        progress.print(&mut out, &state).map_err(io("output error"))?;
        let reply = reply
            .map_err(|e| Failure::from_error("prompt failed", &e))?
            .into_value();
        let stop = reply
            .as_map()
            .and_then(|m| m.get("stopReason"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let _ = writeln!(
            out,
            "\n[turn settled ({stop}): {updates} state updates carried {appends} text appends]\n\n\
             Try it against a long-running host:\n  \
             cargo run -p baton-host-cli -- serve\n  \
             cargo run -p baton-client --bin baton -- create\n  \
             cargo run -p baton-client --bin baton -- prompt <session-id> 'run `ls`'"
        );
        let _ = out.flush();
        Ok(())
    }
    .await;
    client.close().await;
    result
}
