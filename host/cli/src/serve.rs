//! `baton-host serve`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton_host::ModelRef;
use baton_host::clock::SystemClock;
use baton_host::cluster::{ClusterConfig, Health, Load, Membership};
use baton_host::provider::ModelRegistry;
use baton_host::provider::config::{ModelSpec, ProviderConfig, ProviderKind};
use baton_host::provider::models_file::{ModelsFile, build_provider, default_models_path};
use baton_host::provider::probe::probe_and_warn;
use baton_host::provider::scripted::{DEFAULT_TOKEN_DELAY, ScriptedConfig};
use baton_host::service::{AccessPolicy, ServiceHost, ServiceLimits};
use baton_host::session::{HostConfig, SUMMARY_REQUEST_OPENING, SessionManager};
use baton_host::tool::confinement_status;
use baton_host::web::{WebConfig, WebGate, WebListener, WebTls, check_web_host};
use baton_protocol::unix::BaseDir;
use baton_protocol::{ServerId, unix};
use baton_server::{ClientAuth, ListenAddr, Listener, Server, ServerConfig, TcpOptions, TlsConfig};
use ring::rand::{SecureRandom, SystemRandom};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::args::{ModelChoice, ServeArgs};
use crate::{Failure, fleet};

/// The file in the sessions directory that keeps the server id stable across restarts.
const SERVER_ID_FILE: &str = "server-id";

pub(crate) async fn run(args: ServeArgs) -> Result<(), Failure> {
    // Signals are watched from the start so a SIGTERM during start-up is not lost.
    let interrupt = signal(SignalKind::interrupt())
        .map_err(|e| Failure::from_error("cannot watch SIGINT", &e))?;
    let terminate = signal(SignalKind::terminate())
        .map_err(|e| Failure::from_error("cannot watch SIGTERM", &e))?;
    let hangup =
        signal(SignalKind::hangup()).map_err(|e| Failure::from_error("cannot watch SIGHUP", &e))?;
    // A bad policy file is a start-up error, before anything listens.
    let policy = match &args.access {
        Some(path) => Some(AccessPolicy::load(path).map_err(|e| Failure::new(e.to_string()))?),
        None => None,
    };

    let sessions_dir = match &args.sessions_dir {
        Some(d) => d.clone(),
        None => default_sessions_dir()?,
    };
    // In a fleet the server id is owned in etcd before the directory is opened: a second
    // process anywhere (this directory, or a copy of it) is refused here, by name.
    let cluster = fleet::config(&args)?;
    let mut claimed = None;
    let membership = match &cluster {
        Some(config) => {
            let id = match &args.server_id {
                Some(id) => id.clone(),
                None => match fleet::existing_server_id(&sessions_dir, SERVER_ID_FILE)? {
                    Some(id) => id,
                    None => random_server_id()?,
                },
            };
            let membership = fleet::join(config, &id, &args).await?;
            claimed = Some(id);
            Some(membership)
        }
        None => None,
    };
    let signals = Signals {
        interrupt,
        terminate,
        hangup,
    };
    let result = serve(
        &args,
        signals,
        policy,
        &sessions_dir,
        claimed.as_ref(),
        membership.as_ref().zip(cluster.as_ref()),
    )
    .await;
    // Drained by now: revoking the lease makes both keys vanish at once (not after a
    // lost lease, which is no longer ours).
    if let Some(membership) = membership {
        membership.leave().await;
    }
    result
}

/// The signals `serve` reacts to, watched from the start.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

/// Serves until a signal or a lost fleet lease.
async fn serve(
    args: &ServeArgs,
    mut signals: Signals,
    policy: Option<AccessPolicy>,
    sessions_dir: &Path,
    claimed: Option<&ServerId>,
    fleet: Option<(&Membership, &ClusterConfig)>,
) -> Result<(), Failure> {
    // The manager creates the directory (0700) and takes its lock; only then is the id file
    // read or written, so two hosts never race for it and it is never created world-readable.
    let (models, default_model, remote) = models(args)?;
    // One bounded connection per remote provider (nothing is sent), beside serving: start-up
    // never waits for the network; an unreachable endpoint is a warning naming it.
    let mut probes = tokio::task::JoinSet::new();
    for config in remote {
        probes.spawn(probe_and_warn(config));
    }
    let mut config = HostConfig::new(sessions_dir);
    config.default_model = default_model;
    config.session.bash.confine = !args.no_confine;
    let confinement = confinement_status(&config.session.bash);
    if !confinement.is_active() {
        tracing::warn!(%confinement, "tools are not confined to their session's working directory");
    }
    let manager = SessionManager::new(config, models, Arc::new(SystemClock))
        .map_err(|e| Failure::from_error("cannot open the sessions directory", &e))?;
    let server_id = match &args.server_id {
        Some(id) => id.clone(),
        None => stable_server_id(sessions_dir, claimed)?,
    };
    let mut limits = ServiceLimits::default();
    if let Some(secs) = args.idle_timeout_secs {
        limits.idle_timeout = (secs > 0).then(|| Duration::from_secs(secs));
    }
    if let Some(n) = args.max_open_sessions {
        limits.max_open_sessions = n;
    }
    if let Some(n) = args.max_sessions_per_owner {
        limits.max_sessions_per_owner = n;
    }
    let host = ServiceHost::with_limits(Arc::new(manager), limits)
        .map_err(|e| Failure::from_error("cannot list sessions", &e))?;
    let has_policy = policy.is_some();
    // Nothing is connected yet: there is nobody to disconnect.
    let _ = host.set_access_policy(policy);
    // Ownership is won and nothing is served yet: this host's records in etcd are made
    // those of its journal files before anyone can create or list through it.
    if let Some((membership, _)) = fleet {
        let reconciled = host
            .join_fleet(Arc::new(membership.sessions()))
            .await
            .map_err(|e| {
                Failure::new(format!("cannot reconcile the fleet's session records: {e}"))
            })?;
        tracing::info!(
            added = reconciled.added,
            deleted = reconciled.deleted,
            "fleet session records reconciled with the journal files"
        );
    }

    let mut server_config = ServerConfig::new(server_id.clone());
    if let Some(ms) = args.handshake_timeout_ms {
        server_config.handshake_timeout = Duration::from_millis(ms);
    }
    if let Some(n) = args.max_frame_length {
        server_config.max_frame_length = n;
    }
    if let Some(n) = args.max_connections {
        server_config.max_connections = n;
    }
    if let Some(n) = args.max_requests_per_connection {
        server_config.max_active_requests = n;
    }
    if let Some(n) = args.max_subscriptions_per_connection {
        server_config.max_subscriptions = n;
    }
    let (listeners, mut webs) = listeners(args, &server_id)?;
    for web in &mut webs {
        web.max_frame_length = server_config.max_frame_length;
        web.timeout = server_config.handshake_timeout;
        web.tcp_keepalive = server_config.tcp_keepalive;
    }
    if !has_policy && listeners.iter().any(|l| matches!(l, Listener::Tcp(_))) {
        tracing::warn!(
            "plain TCP listener without --access: any local account can connect to it and run commands as this user"
        );
    }
    let server = Arc::new(
        Server::start(server_config, host.clone(), listeners)
            .await
            .map_err(|e| Failure::from_error("cannot start the server", &e))?,
    );
    // Browsers pair with, and are recognised by, the host's link store.
    let gate: Arc<dyn WebGate> = Arc::clone(host.links()) as Arc<dyn WebGate>;
    let mut web_listeners = Vec::new();
    for config in webs {
        let addr = config.addr;
        match WebListener::start(config, Arc::clone(&server), Arc::clone(&gate)).await {
            Ok(w) => web_listeners.push(w),
            Err(e) => {
                for w in &web_listeners {
                    w.close().await;
                }
                let _ = server.close().await;
                return Err(Failure::from_error(
                    &format!("cannot start the web listener on {addr}"),
                    &e,
                ));
            }
        }
    }
    // The base URLs links name, preferred first (each listener's `--web-host`s, certificate
    // names, then its address): what the host's link configuration takes.
    let web_base_urls: Vec<String> = web_listeners
        .iter()
        .flat_map(|w| w.base_urls().iter().cloned())
        .collect();
    // Before the addresses are announced, so a link minted by whoever reads them has a URL.
    host.set_web_base_urls(web_base_urls.clone());

    // Registered before the addresses are announced: whoever reads them finds the host in
    // the fleet.
    let mut outcome = Ok(());
    let mut health = None;
    if let Some((membership, config)) = fleet {
        // What clients dial: the --advertise URLs, else the bound listeners (with the ports
        // the system chose).
        let advertise = if config.advertise.is_empty() {
            server.local_addrs().iter().map(url).collect()
        } else {
            config.advertise.clone()
        };
        match membership
            .register(
                advertise,
                config.labels.clone(),
                load(&host, &server),
                fleet::now(),
            )
            .await
        {
            Ok(()) => health = Some(membership.health()),
            Err(e) => outcome = Err(Failure::new(e.to_string())),
        }
    }
    if outcome.is_ok() {
        let mut out = std::io::stdout().lock();
        for addr in server.local_addrs() {
            let _ = writeln!(out, "listening {} server-id {server_id}", url(addr));
        }
        for w in &web_listeners {
            let shown = w
                .base_urls()
                .first()
                .cloned()
                .unwrap_or_else(|| w.local_addr().to_string());
            let _ = writeln!(out, "web listener on {shown}");
        }
        let _ = out.flush();
        drop(out);
    }
    if !web_base_urls.is_empty() {
        tracing::info!(?web_base_urls, "web listener base urls for links");
    }
    tracing::info!(
        sessions_dir = %sessions_dir.display(),
        %server_id,
        tools_confined = %confinement,
        "serving"
    );

    let mut load_tick = tokio::time::interval(baton_host::cluster::load::LOAD_INTERVAL);
    load_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while outcome.is_ok() {
        tokio::select! {
            _ = signals.interrupt.recv() => {
                tracing::info!("SIGINT: draining");
                break;
            }
            _ = signals.terminate.recv() => {
                tracing::info!("SIGTERM: draining");
                break;
            }
            _ = signals.hangup.recv() => reload_access(&host, &server, args.access.as_deref()),
            now = health_changed(&mut health) => match now {
                Health::Serving => host.resume_new_work(),
                Health::Paused => host.pause_new_work(),
                Health::Lost => {
                    outcome = Err(Failure::new(format!(
                        "the fleet lease of server id {server_id} is gone (etcd expired or \
                         revoked it): another process may own the id now, so this one stops"
                    )));
                }
            },
            _ = load_tick.tick(), if health.is_some() => {
                if let Some((membership, _)) = fleet {
                    membership.set_load(load(&host, &server));
                }
            }
        }
    }
    host.begin_shutdown();
    for w in &web_listeners {
        w.close().await;
    }
    if let Err(error) = server.close().await {
        tracing::warn!(%error, "server closed with errors");
    }
    host.shutdown().await;
    probes.shutdown().await;
    tracing::info!("stopped");
    outcome
}

/// The next fleet health; never, outside a fleet.
async fn health_changed(health: &mut Option<watch::Receiver<Health>>) -> Health {
    match health {
        Some(rx) => {
            if rx.changed().await.is_err() {
                // The keep-alive task ended without a verdict: treat as lost, never as fine.
                return Health::Lost;
            }
            *rx.borrow_and_update()
        }
        None => std::future::pending().await,
    }
}

/// The host's load for its member record.
fn load(host: &ServiceHost, server: &Server<ServiceHost>) -> Load {
    Load {
        open_sessions: u64::try_from(host.open_sessions()).unwrap_or(u64::MAX),
        attached_clients: u64::try_from(server.connection_count()).unwrap_or(u64::MAX),
    }
}

/// `SIGHUP`: reads the `--access` file again and puts it in force without dropping anyone
/// but the identities whose rights it changed. A bad file keeps the old policy.
fn reload_access(host: &ServiceHost, server: &Server<ServiceHost>, path: Option<&Path>) {
    let Some(path) = path else {
        tracing::info!("SIGHUP: no --access file to reload");
        return;
    };
    match host.reload_access(server, path) {
        Ok(closed) => tracing::info!(
            path = %path.display(),
            closed_connections = closed,
            "SIGHUP: access policy reloaded"
        ),
        Err(error) => {
            tracing::error!(%error, "SIGHUP: access policy not reloaded; the old one stays in force")
        }
    }
}

/// `baton/sessions` under the XDG data directory (`$XDG_DATA_HOME` when absolute, else
/// `~/.local/share`).
fn default_sessions_dir() -> Result<PathBuf, Failure> {
    let data = BaseDir::Data.from_env().ok_or_else(|| {
        Failure::new("neither XDG_DATA_HOME nor HOME is set: pass --sessions-dir")
    })?;
    Ok(data.join("baton").join("sessions"))
}

/// The id kept in `<dir>/server-id`, created on first start (as `claimed`, the id owned in
/// the fleet, when there is one). Read with the directory locked.
fn stable_server_id(dir: &Path, claimed: Option<&ServerId>) -> Result<ServerId, Failure> {
    let path = dir.join(SERVER_ID_FILE);
    match fleet::existing_server_id(dir, SERVER_ID_FILE)? {
        Some(id) => match claimed {
            Some(claimed) if *claimed != id => Err(Failure::new(format!(
                "{} became {id} while this host claimed {claimed} in the fleet; start again",
                path.display()
            ))),
            Some(_) | None => Ok(id),
        },
        None => {
            let id = match claimed {
                Some(id) => id.clone(),
                None => random_server_id()?,
            };
            // Write then rename, so a crash never leaves a half-written id.
            let tmp = dir.join(format!(".{SERVER_ID_FILE}.tmp"));
            write_private(&tmp, format!("{id}\n").as_bytes())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| {
                    Failure::from_error(&format!("cannot write {}", path.display()), &e)
                })?;
            Ok(id)
        }
    }
}

/// Writes `bytes` to a new file readable by this user only (0600 from creation).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A fresh random server id.
pub(crate) fn random_server_id() -> Result<ServerId, Failure> {
    let mut b = [0u8; 16];
    SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| Failure::new("the system random source failed"))?;
    Ok(ServerId::from_random_bytes(b))
}

/// The registry: the scripted model, the models file's (`--models`, else the default path if
/// it exists), and the `--model` provider's; with the default model and the remote providers
/// to probe. Problems that may be fixed outside the host (an unset key variable, a bad URL, a
/// missing CA file) are warnings naming them; a models file that cannot be used, or a
/// `--model` it does not list, is a start-up error.
fn models(
    args: &ServeArgs,
) -> Result<(ModelRegistry, Option<ModelRef>, Vec<ProviderConfig>), Failure> {
    let mut registry = ModelRegistry::scripted(ScriptedConfig::new(
        DEFAULT_TOKEN_DELAY,
        SUMMARY_REQUEST_OPENING,
    ));
    let env = |name: &str| std::env::var(name).ok();
    let file = match &args.models {
        Some(path) => Some(ModelsFile::load(path).map_err(|e| Failure::new(e.to_string()))?),
        None => match default_models_path().filter(|p| p.exists()) {
            Some(path) => Some(ModelsFile::load(&path).map_err(|e| Failure::new(e.to_string()))?),
            None => None,
        },
    };
    let mut warnings = Vec::new();
    let mut default = None;
    let mut remote = Vec::new();
    let direct = match &args.model {
        ModelChoice::Scripted => None,
        ModelChoice::OpenAi(model) => {
            let mut config = ProviderConfig::openai(args.base_url.clone().unwrap_or_default());
            config.api_key_env = args.api_key_env.clone();
            Some((config, model))
        }
        ModelChoice::Anthropic(model) => {
            let mut config = ProviderConfig::anthropic();
            if let Some(url) = &args.base_url {
                config.base_url.clone_from(url);
            }
            if let Some(name) = &args.api_key_env {
                config.api_key_env = Some(name.clone());
            }
            Some((config, model))
        }
        ModelChoice::Listed { provider, id } => {
            let listed = file.as_ref().is_some_and(|f| {
                f.providers
                    .iter()
                    .any(|p| p.config.id == *provider && p.models.iter().any(|m| m.id == *id))
            });
            if !listed {
                return Err(Failure::new(format!(
                    "--model {provider}:{id}: no such model in the models file{}",
                    if file.is_none() {
                        " (none was given or found)"
                    } else {
                        ""
                    }
                )));
            }
            default = Some(ModelRef::new(provider, id));
            None
        }
    };
    if let Some((mut config, model)) = direct {
        config.ca_file.clone_from(&args.ca_file);
        config.allow_insecure_key = args.allow_insecure_key;
        warnings.extend(config.validate(&env));
        // The models file's entry for the same model lends its limits and prices.
        let spec = file
            .as_ref()
            .and_then(|f| f.providers.iter().find(|p| p.config.kind == config.kind))
            .and_then(|p| p.models.iter().find(|m| m.id == *model))
            .cloned()
            .unwrap_or_else(|| ModelSpec::new(model.clone()));
        let (mut info, meta) = spec.info(&config);
        if spec.name.is_none() {
            let kind = match config.kind {
                ProviderKind::OpenAi => "OpenAI-compatible",
                ProviderKind::Anthropic => "Anthropic",
            };
            info.name = format!("{model} ({kind}, {})", config.base_url);
        }
        default = Some(info.model_ref());
        registry.register_with_meta(info, meta, build_provider(&config, &[spec]));
        remote.push(config);
    }
    if let Some(file) = &file {
        warnings.extend(file.validate(&env));
        file.register(&mut registry);
        remote.extend(file.providers.iter().map(|p| p.config.clone()));
    }
    for w in &warnings {
        tracing::warn!(provider = %w.provider, "{}", w.message);
    }
    Ok((registry, default, remote))
}

/// The socket directory `baton` searches: `$XDG_RUNTIME_DIR/baton` or `/tmp/baton-<uid>`.
fn default_socket_dir() -> PathBuf {
    unix::default_socket_dir(
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        rustix::process::getuid().as_raw(),
    )
}

/// The server's listeners and the web listeners of `--listen`. When every `--listen` is a
/// web one, the default Unix socket is added: links are minted over it.
fn listeners(
    args: &ServeArgs,
    server_id: &ServerId,
) -> Result<(Vec<Listener>, Vec<WebConfig>), Failure> {
    for name in &args.web_host {
        check_web_host(name).map_err(|e| Failure::new(e.to_string()))?;
    }
    if args.listen.is_empty() {
        return Ok((vec![Listener::unix(default_socket_dir())], Vec::new()));
    }
    let mut tls: Option<TlsConfig> = None;
    let mut web_tls: Option<WebTls> = None;
    let mut out = Vec::new();
    let mut webs = Vec::new();
    for url in &args.listen {
        if let Some(rest) = url.strip_prefix("http://") {
            let mut config = WebConfig::new(socket_addr(url, rest)?);
            config.allow_insecure_remote = args.allow_insecure_remote;
            config.web_hosts.clone_from(&args.web_host);
            if !config.addr.ip().is_loopback() && !args.allow_insecure_remote {
                return Err(Failure::new(format!(
                    "{url}: plain http off loopback sends browser cookies in the clear; \
                     use https:// (with --tls-cert/--tls-key) or pass --allow-insecure-remote"
                )));
            }
            webs.push(config);
        } else if let Some(rest) = url.strip_prefix("https://") {
            let mut config = WebConfig::new(socket_addr(url, rest)?);
            if web_tls.is_none() {
                let (cert, key) = read_tls_pem(args, "https://")?;
                web_tls = Some(
                    WebTls::from_pem(&cert, &key)
                        .map_err(|e| Failure::from_error("invalid TLS material", &e))?,
                );
            }
            config.tls.clone_from(&web_tls);
            config.web_hosts.clone_from(&args.web_host);
            webs.push(config);
        } else if let Some(path) = url.strip_prefix("unix://") {
            out.push(Listener::unix(unix_dir(url, Path::new(path), server_id)?));
        } else if let Some(addr) = url.strip_prefix("tcp://") {
            let addr = socket_addr(url, addr)?;
            let mut options = TcpOptions::new(addr);
            options.allow_plaintext_non_loopback = args.allow_insecure_remote;
            out.push(Listener::Tcp(options));
        } else if let Some(addr) = url.strip_prefix("tls://") {
            let addr = socket_addr(url, addr)?;
            if !addr.ip().is_loopback() && args.client_ca.is_none() && !args.allow_insecure_remote {
                return Err(Failure::new(format!(
                    "{url}: TLS on a non-loopback address without --client-ca lets anyone \
                     connect; pass --client-ca (see `baton-host certs`) or \
                     --allow-insecure-remote"
                )));
            }
            if tls.is_none() {
                tls = Some(tls_config(args)?);
            }
            let config = tls
                .clone()
                .ok_or_else(|| Failure::new("TLS configuration"))?;
            out.push(Listener::tls(addr, config));
        } else {
            return Err(Failure::new(format!(
                "--listen {url:?}: expected unix:///DIR, tcp://HOST:PORT, tls://HOST:PORT, \
                 http://IP:PORT or https://IP:PORT"
            )));
        }
    }
    if out.is_empty() {
        out.push(Listener::unix(default_socket_dir()));
    }
    Ok((out, webs))
}

/// The directory of a `unix://` listener. The server names its socket
/// `<dir>/<server-id>.sock` (the discovery convention), so `unix:///DIR` names the
/// directory; `unix:///DIR/<server-id>.sock` is accepted too.
fn unix_dir(url: &str, path: &Path, server_id: &ServerId) -> Result<PathBuf, Failure> {
    if !path.is_absolute() {
        return Err(Failure::new(format!(
            "--listen {url:?}: the path must be absolute"
        )));
    }
    let wanted = unix::socket_file_name(server_id);
    match path.file_name().and_then(|n| n.to_str()) {
        Some(name) if name == wanted => Ok(path.parent().unwrap_or(path).to_path_buf()),
        Some(name) if name.ends_with(".sock") && !path.is_dir() => Err(Failure::new(format!(
            "--listen {url:?}: the socket is always named <server-id>.sock; pass its \
             directory (unix://{}) or unix://{}/{wanted}",
            path.parent().unwrap_or(path).display(),
            path.parent().unwrap_or(path).display(),
        ))),
        _ => Ok(path.to_path_buf()),
    }
}

fn socket_addr(url: &str, text: &str) -> Result<SocketAddr, Failure> {
    text.trim_end_matches('/')
        .parse()
        .map_err(|_| Failure::new(format!("--listen {url:?}: expected IP:PORT")))
}

/// The `--tls-cert` and `--tls-key` files, for listeners of `scheme`.
fn read_tls_pem(args: &ServeArgs, scheme: &str) -> Result<(Vec<u8>, Vec<u8>), Failure> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Err(Failure::new(format!(
            "{scheme} listeners need --tls-cert and --tls-key"
        )));
    };
    Ok((read(cert)?, read(key)?))
}

fn read(p: &PathBuf) -> Result<Vec<u8>, Failure> {
    std::fs::read(p).map_err(|e| Failure::from_error(&format!("cannot read {}", p.display()), &e))
}

fn tls_config(args: &ServeArgs) -> Result<TlsConfig, Failure> {
    let (cert, key) = read_tls_pem(args, "tls://")?;
    let config = match &args.client_ca {
        Some(ca) => TlsConfig::with_client_ca(&cert, &key, &read(ca)?, ClientAuth::Required),
        None => TlsConfig::from_pem(&cert, &key),
    };
    config.map_err(|e| Failure::from_error("invalid TLS material", &e))
}

/// The URL a client connects to.
fn url(addr: &ListenAddr) -> String {
    match addr {
        ListenAddr::Unix(p) => format!("unix://{}", p.display()),
        ListenAddr::Tcp(a) => format!("tcp://{a}"),
        ListenAddr::Tls(a) => format!("tls://{a}"),
        other => other.to_string(),
    }
}
