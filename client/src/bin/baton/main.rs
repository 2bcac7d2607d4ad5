//! `baton`: attach a terminal to agent sessions on a baton host.
//!
//! Exit status: 0 success, 1 the operation failed (server error, turn ended in error or was
//! aborted), 2 usage error, 3 could not connect.

#![expect(
    clippy::print_stderr,
    reason = "a command-line tool reports errors on stderr"
)]

mod args;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use args::{Args, Command, USAGE, UsageError};
use baton_client::view::{Printer, Tracker, phase, piece_json};
use baton_client::{
    Client, ClientConfig, ConnectError, Endpoint, Reply, RequestError, RequestOptions, Session,
    Subscription, SubscriptionEvent, TlsOptions,
};
use baton_protocol::chord::{ServiceCall, ServiceMode};
use baton_protocol::{ErrorCode, Map, ServerId, Value, unix};
use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{SignalKind, signal};

/// Default timeout for calls other than `prompt`.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed per socket when discovering a local host.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A failure with its exit status and one-line message.
struct Failure {
    status: u8,
    message: String,
}

impl Failure {
    fn op(message: impl Into<String>) -> Self {
        Self {
            status: 1,
            message: message.into(),
        }
    }
}

impl From<RequestError> for Failure {
    fn from(e: RequestError) -> Self {
        Self::op(e.to_string())
    }
}

impl From<ConnectError> for Failure {
    fn from(e: ConnectError) -> Self {
        let mut message = e.to_string();
        if matches!(&e, ConnectError::Tls { reason, .. } if reason.contains("not valid for name")) {
            message.push_str(
                " (reaching the host by address or through a tunnel? pass --server-name with a \
                 name its certificate lists)",
            );
        }
        Self { status: 3, message }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        // The reader went away (`baton … | head`): stop quietly, as Unix tools do.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Self {
                status: 0,
                message: String::new(),
            };
        }
        Self::op(format!("output error: {e}"))
    }
}

fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(UsageError(msg)) => {
            if msg.is_empty() {
                eprintln!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("baton: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("baton: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) if f.message.is_empty() => ExitCode::from(f.status),
        Err(f) => {
            eprintln!("baton: {}", f.message);
            ExitCode::from(f.status)
        }
    }
}

async fn run(args: Args) -> Result<(), Failure> {
    let Some(command) = args.command.clone() else {
        return Err(Failure {
            status: 2,
            message: "a command is required".to_owned(),
        });
    };
    let client = connect(&args).await?;
    let result = execute(&client, &args, command).await;
    client.close().await;
    result
}

fn base_config(args: &Args, endpoint: Endpoint) -> Result<ClientConfig, Failure> {
    let tls = matches!(endpoint, Endpoint::Tls { .. });
    if args.server_name.is_some() && !tls {
        return Err(Failure {
            status: 2,
            message: format!("--server-name only applies to tls:// endpoints, not {endpoint}"),
        });
    }
    // The environment fallback is ignored for other endpoints, like --ca.
    let server_name = args
        .server_name
        .clone()
        .or_else(|| std::env::var("BATON_SERVER_NAME").ok().filter(|_| tls));
    let mut config = ClientConfig::new(endpoint);
    config.tls = TlsOptions {
        ca_file: args.ca.clone(),
        client_cert: args.cert.clone(),
        client_key: args.key.clone(),
        server_name,
    };
    if let Some(id) = &args.server_id {
        config.expected_server_id = Some(ServerId::parse(id).map_err(|_| Failure {
            status: 2,
            message: format!("--server-id {id:?} is not a canonical lowercase UUIDv4"),
        })?);
    }
    Ok(config)
}

async fn connect(args: &Args) -> Result<Client, Failure> {
    let url = args
        .connect
        .clone()
        .or_else(|| std::env::var("BATON_CONNECT").ok());
    if let Some(url) = url {
        let endpoint: Endpoint = url
            .parse()
            .map_err(|e: baton_client::EndpointError| Failure {
                status: 2,
                message: e.to_string(),
            })?;
        return Ok(Client::connect(base_config(args, endpoint)?).await?);
    }
    discover(args).await
}

fn socket_dir() -> PathBuf {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    unix::default_socket_dir(std::env::var_os("XDG_RUNTIME_DIR").as_deref(), uid)
}

/// Probes the local socket directory in sorted order (at most 16 sockets, 1 s each).
async fn discover(args: &Args) -> Result<Client, Failure> {
    let dir = socket_dir();
    let not_found = || Failure {
        status: 3,
        message: format!(
            "no baton host found in {} (start one with `baton-host serve`, or pass --connect)",
            dir.display()
        ),
    };
    let mut sockets: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|_| not_found())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(unix::server_id_of_socket)
                .is_some()
        })
        .collect();
    sockets.sort();
    if let Some(id) = &args.server_id {
        sockets.retain(|p| p.file_stem().and_then(|s| s.to_str()) == Some(id.as_str()));
    }
    let mut last: Option<ConnectError> = None;
    for path in sockets.iter().take(unix::MAX_DISCOVERY_PROBES) {
        let mut config = base_config(args, Endpoint::Unix(path.clone()))?;
        config.connect_timeout = PROBE_TIMEOUT;
        match Client::connect(config).await {
            Ok(client) => return Ok(client),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map(Failure::from).unwrap_or_else(not_found))
}

fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new(service, member, args).into_value()
}

fn timeout(args: &Args) -> Duration {
    args.timeout_secs
        .map_or(CALL_TIMEOUT, Duration::from_secs_f64)
}

async fn server_call(
    client: &Client,
    args: &Args,
    service: &str,
    member: &str,
    a: Vec<Value>,
) -> Result<Reply, Failure> {
    let options = RequestOptions {
        cancel: None,
        timeout: Some(timeout(args)),
    };
    Ok(client
        .request_with_options(client.server_target(), call(service, member, a), options)
        .await?)
}

fn print_json(out: &mut impl Write, v: &Value) -> Result<(), Failure> {
    writeln!(out, "{}", v.to_json())?;
    Ok(())
}

fn field<'a>(v: &'a Value, k: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    v.as_map().and_then(|m| m.get(k)).unwrap_or(&NULL)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_json(),
    }
}

async fn execute(client: &Client, args: &Args, command: Command) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match command {
        Command::Sessions => {
            let list = server_call(client, args, "pi.session-directory", "list", vec![])
                .await?
                .into_value();
            if args.json {
                return print_json(&mut out, &list);
            }
            let rows = list.as_array().cloned().unwrap_or_default();
            if rows.is_empty() {
                writeln!(out, "no sessions")?;
            }
            for s in rows {
                writeln!(
                    out,
                    "{}  {:<16} {:<6} {:<20} clients {}  updated {}",
                    text(field(&s, "id")),
                    text(field(&s, "name")),
                    text(field(&s, "phase")),
                    text(field(&s, "model")),
                    text(field(&s, "attachedClients")),
                    text(field(&s, "updatedAt")),
                )?;
            }
            Ok(())
        }
        Command::Models => {
            let list = server_call(client, args, "pi.models", "list", vec![])
                .await?
                .into_value();
            if args.json {
                return print_json(&mut out, &list);
            }
            for m in list.as_array().cloned().unwrap_or_default() {
                let default = if field(&m, "default").as_bool() == Some(true) {
                    "  (default)"
                } else {
                    ""
                };
                writeln!(
                    out,
                    "{}/{}  {}{default}",
                    text(field(&m, "provider")),
                    text(field(&m, "id")),
                    text(field(&m, "name"))
                )?;
            }
            Ok(())
        }
        Command::Create {
            name,
            cwd,
            model,
            thinking,
        } => {
            let mut opts = Map::new();
            for (k, v) in [
                ("name", name),
                ("cwd", cwd),
                ("model", model),
                ("thinkingLevel", thinking),
            ] {
                if let Some(v) = v {
                    opts.insert(k, Value::from(v));
                }
            }
            let created = server_call(
                client,
                args,
                "pi.session-management",
                "create",
                vec![Value::Map(opts)],
            )
            .await?
            .into_value();
            if args.json {
                return print_json(&mut out, &created);
            }
            writeln!(out, "{}", text(field(&created, "sessionId")))?;
            Ok(())
        }
        Command::Remove { session } => {
            server_call(
                client,
                args,
                "pi.session-management",
                "remove",
                vec![Value::from(session)],
            )
            .await?;
            Ok(())
        }
        Command::Prompt { session, text } => prompt(client, args, &session, &text).await,
        Command::Watch { session } => watch(client, args, &session).await,
        Command::Attach { session } => interactive(client, args, &session).await,
    }
}

async fn open_session(client: &Client, session: &str) -> Result<(Session, Subscription), Failure> {
    let session = client.attach(session).await.map_err(|e| match e.kind() {
        Some(ErrorCode::SessionNotFound) => Failure::op(format!("unknown session {session:?}")),
        _ => Failure::from(e),
    })?;
    let sub = session
        .subscribe("pi.session", ServiceMode::Singleton)
        .await?;
    Ok((session, sub))
}

fn session_state(sub: &Subscription) -> Value {
    sub.state()
        .value(None, "state")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Prints what changed; returns the current state.
fn render(
    sub: &Subscription,
    tracker: &mut Tracker,
    printer: &mut Printer,
    json: bool,
    out: &mut impl Write,
) -> Result<Value, Failure> {
    let state = session_state(sub);
    for piece in tracker.advance(&state) {
        if json {
            print_json(out, &piece_json(&piece))?;
        } else {
            printer.print(out, &piece)?;
        }
    }
    Ok(state)
}

fn stop_reason_result(reply: Reply) -> Result<String, Failure> {
    let v = reply.into_value();
    let reason = text(field(&v, "stopReason"));
    match reason.as_str() {
        "stop" | "toolUse" | "-" => Ok(reason),
        other => Err(Failure::op(format!("the turn ended with {other}"))),
    }
}

async fn prompt(client: &Client, args: &Args, session: &str, text: &str) -> Result<(), Failure> {
    let (session, mut sub) = open_session(client, session).await?;
    let mut tracker = Tracker::default();
    tracker.skip_existing(&session_state(&sub));
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    let options = RequestOptions {
        cancel: None,
        timeout: args.timeout_secs.map(Duration::from_secs_f64),
    };
    let request = session.request_with_options(
        call("pi.session", "prompt", vec![Value::from(text)]),
        options,
    );
    tokio::pin!(request);
    let mut interrupts = signal(SignalKind::interrupt())?;
    let reply = loop {
        tokio::select! {
            reply = &mut request => break reply,
            event = sub.next_event() => match event {
                Some(SubscriptionEvent::Ended { reason }) => return Err(Failure::op(format!("session subscription ended: {reason}"))),
                Some(_) => { render(&sub, &mut tracker, &mut printer, args.json, &mut out)?; }
                None => return Err(Failure::op("session subscription ended")),
            },
            _ = interrupts.recv() => {
                // Abort the turn; the prompt then settles as aborted.
                let _ = session.request(call("pi.session", "abort", vec![])).await;
            }
        }
    };
    // Updates precede the response on the wire, so the replica already holds the end state.
    render(&sub, &mut tracker, &mut printer, args.json, &mut out)?;
    let reason = stop_reason_result(reply?)?;
    if args.json {
        let mut m = Map::new();
        m.insert("type", Value::from("done"));
        m.insert("stopReason", Value::from(reason));
        print_json(&mut out, &Value::Map(m))?;
    }
    Ok(())
}

async fn watch(client: &Client, args: &Args, session: &str) -> Result<(), Failure> {
    let (_session, mut sub) = open_session(client, session).await?;
    let mut tracker = Tracker::default();
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    render(&sub, &mut tracker, &mut printer, args.json, &mut out)?;
    let mut attachment = client.watch_attachment();
    let mut interrupts = signal(SignalKind::interrupt())?;
    loop {
        tokio::select! {
            event = sub.next_event() => match event {
                Some(SubscriptionEvent::Ended { reason }) => return Err(Failure::op(format!("session subscription ended: {reason}"))),
                Some(_) => { render(&sub, &mut tracker, &mut printer, args.json, &mut out)?; }
                None => return Ok(()),
            },
            changed = attachment.changed() => {
                if changed.is_err() || attachment.borrow().is_none() {
                    writeln!(out, "[detached: the session ended or was removed]")?;
                    return Ok(());
                }
            }
            _ = interrupts.recv() => return Ok(()),
        }
    }
}

/// A prompt running in the background of the interactive loop.
type PendingPrompt = std::pin::Pin<Box<dyn Future<Output = Result<Reply, RequestError>> + Send>>;

async fn interactive(client: &Client, args: &Args, session_id: &str) -> Result<(), Failure> {
    let (session, mut sub) = open_session(client, session_id).await?;
    let mut tracker = Tracker::default();
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    let state = render(&sub, &mut tracker, &mut printer, args.json, &mut out)?;
    if !args.json {
        writeln!(
            out,
            "[attached to {session_id}; phase {}; /help for commands]",
            phase(&state)
        )?;
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut interrupts = signal(SignalKind::interrupt())?;
    let mut running: Option<PendingPrompt> = None;
    let mut interrupted_once = false;
    // At end of input (e.g. prompts piped in), a running turn still finishes before we exit.
    let mut input_done = false;
    loop {
        if input_done && running.is_none() {
            return Ok(());
        }
        tokio::select! {
            reply = async { running.as_mut().expect("guarded by the if").await }, if running.is_some() => {
                running = None;
                interrupted_once = false;
                render(&sub, &mut tracker, &mut printer, args.json, &mut out)?;
                if let Err(e) = reply.map_err(Failure::from).and_then(stop_reason_result) {
                    writeln!(out, "[{}]", e.message)?;
                }
            }
            event = sub.next_event() => match event {
                Some(SubscriptionEvent::Ended { reason }) => return Err(Failure::op(format!("session subscription ended: {reason}"))),
                Some(_) => { render(&sub, &mut tracker, &mut printer, args.json, &mut out)?; }
                None => return Ok(()),
            },
            _ = interrupts.recv() => {
                if running.is_some() && !interrupted_once {
                    interrupted_once = true;
                    writeln!(out, "[aborting; Ctrl-C again to exit]")?;
                    let _ = session.request(call("pi.session", "abort", vec![])).await;
                } else {
                    return Ok(());
                }
            }
            line = lines.next_line(), if !input_done => {
                let Some(line) = line? else {
                    input_done = true;
                    continue;
                };
                let line = line.trim().to_owned();
                if line.is_empty() {
                    continue;
                }
                let command = line.split_once(' ').map_or((line.as_str(), ""), |(c, r)| (c, r.trim()));
                let result = match command {
                    ("/help", _) => {
                        writeln!(out, "/steer TEXT  /abort  /model PROVIDER/ID  /thinking LEVEL  /detach  (anything else is a prompt)")?;
                        Ok(None)
                    }
                    ("/detach", _) => {
                        client.detach().await?;
                        return Ok(());
                    }
                    ("/abort", _) => session.request(call("pi.session", "abort", vec![])).await.map(Some),
                    ("/steer", text) => session.request(call("pi.session", "steer", vec![Value::from(text)])).await.map(Some),
                    ("/thinking", level) => session.request(call("pi.session", "setThinking", vec![Value::from(level)])).await.map(Some),
                    ("/model", spec) => {
                        let (provider, id) = spec.split_once('/').unwrap_or(("", spec));
                        let mut m = Map::new();
                        m.insert("provider", Value::from(provider));
                        m.insert("id", Value::from(id));
                        session.request(call("pi.session", "setModel", vec![Value::Map(m)])).await.map(Some)
                    }
                    (c, _) if c.starts_with('/') => {
                        writeln!(out, "[unknown command {c}; /help lists them]")?;
                        Ok(None)
                    }
                    _ if running.is_some() => {
                        writeln!(out, "[a turn is running: use /steer, or /abort]")?;
                        Ok(None)
                    }
                    _ => {
                        let session = session.clone();
                        let text = line.clone();
                        running = Some(Box::pin(async move {
                            session.request(call("pi.session", "prompt", vec![Value::from(text)])).await
                        }));
                        Ok(None)
                    }
                };
                if let Err(e) = result {
                    writeln!(out, "[{e}]")?;
                }
            }
        }
    }
}
