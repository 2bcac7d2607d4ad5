//! `baton`: attach a terminal to agent sessions on a baton host.
//!
//! Exit status (see [`failure`]): 0 success, 1 the operation failed, 2 usage or
//! configuration error, 3 could not connect (or reconnecting was refused), 4 no such session
//! (or an ambiguous address).

#![expect(
    clippy::print_stderr,
    reason = "a command-line tool reports errors on stderr"
)]

mod args;
mod attach;
mod config;
mod discover;
mod ending;
mod failure;
mod fleet;
mod item;
mod line_view;
mod links;
mod live;
mod resolve;
mod sessions;
mod table;
mod tui;
mod watch;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use args::{Cli, Command, Global};
use baton_client::{
    Client, ClientConfig, Endpoint, Reply, RequestOptions, SubscriptionEvent, TlsOptions,
};
use baton_protocol::unix::BaseDir;
use baton_protocol::{ErrorCode, Map, ServerId, Value};
use failure::{EXIT_NOT_FOUND, EXIT_USAGE, Failure};
use fleet::{Backoff, FleetList};
use line_view::{Printer, TranscriptProgress};
use live::{Target, call, field, open_session, print_json, render, session_state, text};
use resolve::Entry;
use table::Column;
use tokio::signal::unix::{SignalKind, signal};

/// Default timeout for calls other than `prompt`.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let cli = match args::parse(argv.iter().cloned()) {
        Ok(c) => c,
        Err(e) if e.exit_code() == 0 => {
            // --help or --version: on stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            if args::wants_json(&argv) {
                eprintln!("{}", Failure::usage(first_line(&e)).to_json());
            } else {
                // clap's short message, the usage line and a hint to try --help.
                let _ = e.print();
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if let Command::Completions { shell } = cli.command {
        // Written whole, so a closed pipe is an error to report, not a panic in the generator.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut args::command(), args::BIN, &mut script);
        return match std::io::stdout().write_all(&script) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => report(&Failure::from(e), false),
        };
    }
    let json = cli.global.json;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report(&Failure::op(format!("cannot start the runtime: {e}")), json),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => report(&f, json),
    }
}

/// A clap error's message without its `error: ` prefix, usage and hint.
fn first_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let line = rendered.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

fn report(f: &Failure, json: bool) -> ExitCode {
    if !f.message.is_empty() {
        if json {
            eprintln!("{}", f.to_json());
        } else {
            eprintln!("baton: {}", f.message);
        }
    }
    ExitCode::from(f.status)
}

/// The connection settings after merging flags, environment and the profile.
#[derive(Debug, Clone, Default)]
struct Settings {
    connect: Option<String>,
    tls: TlsOptions,
    /// `--server-name` was given as a flag: an error on endpoints other than tls://
    /// (from the environment or a profile it is ignored there, like `--ca`).
    server_name_flag: bool,
    server_id: Option<ServerId>,
    timeout: Option<f64>,
    json: bool,
}

fn settings(global: &Global) -> Result<Settings, Failure> {
    let fallback = config::default_path(
        std::env::var_os(BaseDir::Config.variable()).as_deref(),
        std::env::var_os("HOME").as_deref(),
    );
    let profile = config::load(
        global.config.as_deref(),
        fallback.as_deref(),
        global.profile.as_deref(),
    )?;
    let server_id = match global.server_id.clone().or(profile.server_id) {
        Some(id) => Some(ServerId::parse(&id).map_err(|_| {
            Failure::usage(format!(
                "--server-id {id:?} is not a canonical lowercase UUIDv4"
            ))
        })?),
        None => None,
    };
    Ok(Settings {
        connect: global.connect.clone().or(profile.connect),
        tls: TlsOptions {
            ca_file: global.ca.clone().or(profile.ca),
            client_cert: global.cert.clone().or(profile.cert),
            client_key: global.key.clone().or(profile.key),
            server_name: global.server_name.clone().or(profile.server_name),
        },
        server_name_flag: global.server_name.is_some() && !global.server_name_from_env,
        server_id,
        timeout: global.timeout,
        json: global.json,
    })
}

fn client_config(s: &Settings, endpoint: Endpoint) -> Result<ClientConfig, Failure> {
    let tls = matches!(endpoint, Endpoint::Tls { .. });
    if s.server_name_flag && !tls {
        return Err(Failure::usage(format!(
            "--server-name only applies to tls:// endpoints, not {endpoint}"
        )));
    }
    let mut config = ClientConfig::new(endpoint);
    config.tls = s.tls.clone();
    if !tls {
        config.tls.server_name = None;
    }
    config.expected_server_id = s.server_id.clone();
    Ok(config)
}

/// The configuration to connect with: `--connect` (or the profile's), else the one live
/// local host.
async fn connection(s: &Settings) -> Result<ClientConfig, Failure> {
    if let Some(url) = &s.connect {
        let endpoint: Endpoint = url
            .parse()
            .map_err(|e: baton_client::EndpointError| Failure::usage(e.to_string()))?;
        return client_config(s, endpoint);
    }
    let wanted = s.server_id.as_ref().map(ServerId::as_str);
    discover::discover(|endpoint| client_config(s, endpoint), wanted).await
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let s = settings(&cli.global)?;
    let config = connection(&s).await?;
    let client = Client::connect(config.clone()).await?;
    let result = execute(&client, &config, &s, cli.command).await;
    client.close().await;
    result
}

fn timeout(s: &Settings) -> Duration {
    s.timeout.map_or(CALL_TIMEOUT, Duration::from_secs_f64)
}

async fn server_call(
    client: &Client,
    s: &Settings,
    service: &str,
    member: &str,
    a: Vec<Value>,
) -> Result<Reply, Failure> {
    let options = RequestOptions {
        cancel: None,
        timeout: Some(timeout(s)),
    };
    Ok(client
        .request_with_options(client.server_target(), call(service, member, a), options)
        .await?)
}

/// The `pi.session-directory` rows.
async fn session_rows(client: &Client, s: &Settings) -> Result<Vec<Value>, Failure> {
    let list = server_call(client, s, "pi.session-directory", "list", vec![])
        .await?
        .into_value();
    Ok(list.as_array().cloned().unwrap_or_default())
}

/// Resolves a `<SESSION>` argument (id, name or unique id prefix) to its entry.
async fn resolve_session(client: &Client, s: &Settings, input: &str) -> Result<Entry, Failure> {
    let entries: Vec<Entry> = session_rows(client, s)
        .await?
        .iter()
        .filter_map(Entry::from_row)
        .collect();
    Ok(resolve::resolve(input, &entries)?.clone())
}

/// The session a `<SESSION>` argument names and the client that reaches it.
struct Routed {
    entry: Entry,
    /// A connection to the session's owner when it is another host of the fleet (with the
    /// configuration it was made with); `None`: the connected host holds it.
    owner: Option<(Client, ClientConfig)>,
}

impl Routed {
    /// The client and configuration to use for the session.
    fn via<'a>(
        &'a self,
        client: &'a Client,
        config: &'a ClientConfig,
    ) -> (&'a Client, &'a ClientConfig) {
        self.owner
            .as_ref()
            .map_or((client, config), |(c, cfg)| (c, cfg))
    }

    /// For a session of another host: the lookup that finds it again, through the first
    /// host (`first`), before each reconnect.
    fn relocate(&self, first: &ClientConfig, s: &Settings) -> Option<baton_client::Relocate> {
        let (owner, _) = self.owner.as_ref()?;
        Some(fleet::relocate(
            first.clone(),
            self.entry.id.clone(),
            owner.server_id().clone(),
            timeout(s),
        ))
    }

    async fn close(self) {
        if let Some((c, _)) = self.owner {
            c.close().await;
        }
    }
}

/// The settings for dialing a fleet member's advertised endpoint: the CLI's TLS and
/// identity options, without `--server-name` (it names the first host, not the owner) and
/// pinned to the owner's server id by [`fleet::dial`].
fn owner_config(s: &Settings, endpoint: Endpoint) -> Result<ClientConfig, Failure> {
    let mut s = s.clone();
    s.server_name_flag = false;
    s.tls.server_name = None;
    client_config(&s, endpoint)
}

/// Resolves a `<SESSION>` argument where it lives: through `baton.cluster` `locate` on a
/// host in a fleet (dialing the owner when it is another host), else against the local
/// directory. The owner not being live is retried with the reconnect backoff under
/// [`OnBusy::Retry`], else it is the host's one-line `busy`; a session the local directory
/// resolves is served locally whatever etcd says.
async fn route(
    client: &Client,
    s: &Settings,
    input: &str,
    on_busy: OnBusy,
) -> Result<Routed, Failure> {
    let mut backoff = Backoff::default();
    loop {
        match fleet::locate(client, timeout(s), input).await {
            Ok(Some(owner)) if &owner.server_id == client.server_id() => {
                return Ok(Routed {
                    entry: owner.entry,
                    owner: None,
                });
            }
            Ok(Some(owner)) => {
                let dialed = fleet::dial(&owner, |e| owner_config(s, e)).await?;
                return Ok(Routed {
                    entry: owner.entry,
                    owner: Some(dialed),
                });
            }
            Ok(None) => break,
            Err(e) if e.kind() == Some(ErrorCode::SessionAmbiguous) => {
                return Err(Failure::new(
                    EXIT_NOT_FOUND,
                    ErrorCode::SessionAmbiguous.as_str(),
                    e.to_string(),
                ));
            }
            Err(e) if e.kind() == Some(ErrorCode::Busy) => {
                if let Ok(entry) = resolve_session(client, s, input).await {
                    return Ok(Routed { entry, owner: None });
                }
                match on_busy {
                    OnBusy::Fail => return Err(e.into()),
                    OnBusy::Retry => backoff.wait(&e).await?,
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Routed {
        entry: resolve_session(client, s, input).await?,
        owner: None,
    })
}

/// How [`route`] meets a `busy` from `locate` (the owner not live).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnBusy {
    /// A one-line error (`prompt`, `remove`).
    Fail,
    /// Retried with the reconnect backoff, saying "reconnecting" (`attach`, `watch`).
    Retry,
}

/// `baton sessions`' rows: the fleet's when the host is in one (with a warning on stderr
/// when its view is stale), else the local directory's. `true` when they are the fleet's.
async fn listed_sessions(client: &Client, s: &Settings) -> Result<(Vec<Value>, bool), Failure> {
    let local = session_rows(client, s).await?;
    let listed = fleet::offered(
        client
            .request_with_options(
                client.server_target(),
                call(fleet::SERVICE, "list", vec![]),
                RequestOptions {
                    cancel: None,
                    timeout: Some(timeout(s)),
                },
            )
            .await,
    )?;
    let Some(reply) = listed else {
        return Ok((local, false));
    };
    let fleet = FleetList::from_value(&reply.into_value());
    if fleet.stale {
        eprintln!("baton: {}", fleet::STALE_WARNING);
    }
    Ok((
        fleet::merge(&fleet, &local, client.server_id().as_str()),
        true,
    ))
}

/// `create --on`: a connection to the least-loaded live host carrying every label of `on`
/// (`None`: the connected host is that host).
async fn placement(
    client: &Client,
    s: &Settings,
    on: &[String],
) -> Result<Option<(Client, ClientConfig)>, Failure> {
    let wanted = on
        .iter()
        .map(|a| fleet::label_arg(a))
        .collect::<Result<Vec<_>, _>>()?;
    let reply = fleet::offered(
        client
            .request_with_options(
                client.server_target(),
                call(fleet::SERVICE, "hosts", vec![]),
                RequestOptions {
                    cancel: None,
                    timeout: Some(timeout(s)),
                },
            )
            .await,
    )?
    .ok_or_else(|| Failure::usage("--on places in a fleet; this host is not in one"))?;
    let hosts = fleet::hosts_of(&reply.into_value());
    let Some(host) = fleet::place(&hosts, &wanted) else {
        return Err(Failure::op(format!(
            "no live host of the fleet has the labels {}",
            on.join(", ")
        )));
    };
    if &host.server_id == client.server_id() {
        return Ok(None);
    }
    let what = format!(
        "--on {} placed the session on server {}",
        on.join(" "),
        host.server_id
    );
    fleet::dial_host(&host.server_id, &host.endpoints, &what, |e| {
        owner_config(s, e)
    })
    .await
    .map(Some)
}

const MODEL_COLUMNS: [Column; 3] = [
    Column::flexible("MODEL"),
    Column::fixed("DEFAULT"),
    Column::flexible("NAME"),
];

fn model_row(v: &Value) -> Vec<String> {
    let default = if field(v, "default").as_bool() == Some(true) {
        "yes"
    } else {
        ""
    };
    vec![
        format!("{}/{}", text(field(v, "provider")), text(field(v, "id"))),
        default.to_owned(),
        text(field(v, "name")),
    ]
}

async fn execute(
    client: &Client,
    config: &ClientConfig,
    s: &Settings,
    command: Command,
) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match command {
        Command::Sessions => {
            let (rows, in_fleet) = listed_sessions(client, s).await?;
            if s.json {
                return print_json(&mut out, &Value::Array(rows));
            }
            if rows.is_empty() {
                writeln!(out, "no sessions")?;
                return Ok(());
            }
            let t = if in_fleet {
                sessions::render_fleet(&rows, table::output_width())
            } else {
                sessions::render(&rows, table::output_width())
            };
            out.write_all(t.as_bytes())?;
            Ok(())
        }
        Command::Models => {
            let list = server_call(client, s, "pi.models", "list", vec![])
                .await?
                .into_value();
            if s.json {
                return print_json(&mut out, &list);
            }
            let rows = list.as_array().cloned().unwrap_or_default();
            let cells: Vec<Vec<String>> = rows.iter().map(model_row).collect();
            let t = table::render(&MODEL_COLUMNS, &cells, table::output_width());
            out.write_all(t.as_bytes())?;
            Ok(())
        }
        Command::Create {
            name,
            cwd,
            model,
            thinking,
            on,
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
            let placed = if on.is_empty() {
                None
            } else {
                placement(client, s, &on).await?
            };
            let via = placed.as_ref().map_or(client, |(c, _)| c);
            let created = server_call(
                via,
                s,
                "pi.session-management",
                "create",
                vec![Value::Map(opts)],
            )
            .await;
            if let Some((c, _)) = placed {
                c.close().await;
            }
            let created = created?.into_value();
            if s.json {
                return print_json(&mut out, &created);
            }
            writeln!(out, "{}", text(field(&created, "sessionId")))?;
            Ok(())
        }
        Command::Remove { session } => {
            let routed = route(client, s, &session, OnBusy::Fail).await?;
            let (via, _) = routed.via(client, config);
            let result = server_call(
                via,
                s,
                "pi.session-management",
                "remove",
                vec![Value::from(routed.entry.id.as_str())],
            )
            .await;
            routed.close().await;
            result.map(drop)
        }
        Command::Prompt { session, text } => {
            drop(out);
            let routed = route(client, s, &session, OnBusy::Fail).await?;
            let (via, _) = routed.via(client, config);
            let result = prompt(via, s, &routed.entry.id, &text.join(" ")).await;
            routed.close().await;
            result
        }
        Command::Watch { session } => {
            drop(out);
            let routed = route(client, s, &session, OnBusy::Retry).await?;
            let (via, via_config) = routed.via(client, config);
            let result = watch::run(Target {
                client: via,
                config: via_config,
                session: &routed.entry,
                json: s.json,
                relocate: routed.relocate(config, s),
            })
            .await;
            routed.close().await;
            result
        }
        Command::Attach { session } => {
            drop(out);
            let routed = route(client, s, &session, OnBusy::Retry).await?;
            let (via, via_config) = routed.via(client, config);
            let result = attach::run(Target {
                client: via,
                config: via_config,
                session: &routed.entry,
                json: s.json,
                relocate: routed.relocate(config, s),
            })
            .await;
            routed.close().await;
            result
        }
        Command::Link {
            session,
            viewer,
            ttl,
        } => {
            let mut opts = Map::new();
            if let Some(session) = session {
                let entry = resolve_session(client, s, &session).await?;
                opts.insert("session", Value::from(entry.id));
            }
            if viewer {
                opts.insert("viewer", Value::from(true));
            }
            if let Some(ttl) = ttl {
                let ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
                let ms = Value::try_from(ms)
                    .map_err(|_| Failure::usage("--ttl is longer than the host accepts (24h)"))?;
                opts.insert("ttlMs", ms);
            }
            let minted = server_call(client, s, links::SERVICE, "mint", vec![Value::Map(opts)])
                .await?
                .into_value();
            if s.json {
                return print_json(&mut out, &minted);
            }
            writeln!(out, "{}", text(field(&minted, "url")))?;
            Ok(())
        }
        Command::Links => {
            let list = server_call(client, s, links::SERVICE, "list", vec![])
                .await?
                .into_value();
            if s.json {
                return print_json(&mut out, &list);
            }
            let rows = list.as_array().cloned().unwrap_or_default();
            if rows.is_empty() {
                writeln!(out, "no browser identities or links")?;
                return Ok(());
            }
            out.write_all(links::render(&rows, table::output_width()).as_bytes())?;
            Ok(())
        }
        Command::Unlink { id } => {
            let mut arg = Map::new();
            arg.insert("id", Value::from(id));
            let revoked = server_call(client, s, links::SERVICE, "revoke", vec![Value::Map(arg)])
                .await?
                .into_value();
            if s.json {
                return print_json(&mut out, &revoked);
            }
            Ok(())
        }
        // Answered before connecting.
        Command::Completions { .. } => Ok(()),
    }
}

async fn prompt(client: &Client, s: &Settings, session: &str, text: &str) -> Result<(), Failure> {
    let (session, mut sub) = open_session(client, session).await?;
    let mut progress = TranscriptProgress::default();
    progress.skip_existing(&session_state(&sub));
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    let options = RequestOptions {
        cancel: None,
        timeout: s.timeout.map(Duration::from_secs_f64),
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
                Some(_) => { render(&sub, &mut progress, &mut printer, s.json, &mut out)?; }
                None => return Err(Failure::op("session subscription ended")),
            },
            _ = interrupts.recv() => {
                // Abort the turn; the prompt then settles as aborted.
                let _ = session.request(call("pi.session", "abort", vec![])).await;
            }
        }
    };
    // Updates precede the response on the wire, so the replica already holds the end state.
    render(&sub, &mut progress, &mut printer, s.json, &mut out)?;
    let reason = live::stop_reason_result(reply?)?;
    if s.json {
        let mut m = Map::new();
        m.insert("type", Value::from("done"));
        m.insert("stopReason", Value::from(reason));
        print_json(&mut out, &Value::Map(m))?;
    }
    Ok(())
}
