//! Memory: resident bytes per idle connection (server side) and per subscription.
//!
//! Idle connections: a child process (this binary with `--mem-child`) opens the connections
//! over Unix sockets with blocking std sockets and completes the handshake with raw frames,
//! so this process holds only the server's end of each connection (1 fd each) and its `VmRSS`
//! growth is the server's cost alone. The full run holds as many as the fd limit allows (the
//! hard limit here is 20,000 per process, less the fds already open and [`FD_MARGIN`]); the
//! child opens them in two halves, so the growth over the second half gives the marginal
//! cost of one more connection (free of fixed costs such as the first slab of a table), from
//! which the report projects 100,000.
//!
//! Subscriptions: `sub_clients` baton clients in this process, `subs_per_client` subscriptions
//! each to `bench.static`; the RSS growth while subscribing is client replica + server
//! encoder/subscription state, both ends together.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use baton_client::{Client, ClientConfig, Endpoint};
use baton_protocol::chord::ServiceMode;
use baton_protocol::{ClientMessage, encode_frame};

use crate::ours::OursServer;
use crate::util::{Plan, rss_bytes};

/// Fds left unused below the limit (the runtime, listeners and the child's own stdio).
pub const FD_MARGIN: u64 = 64;

/// Memory figures.
#[derive(Debug, Clone, Default)]
pub struct MemResult {
    /// Idle connections held.
    pub connections: usize,
    /// Server RSS growth per idle connection, bytes.
    pub per_connection: f64,
    /// Server RSS growth per idle connection over the second half only, bytes.
    pub per_connection_marginal: f64,
    /// The fd limit in force (soft, after raising it to the hard limit).
    pub fd_limit: u64,
    /// Subscriptions held.
    pub subscriptions: usize,
    /// RSS growth per subscription (client + server), bytes.
    pub per_subscription: f64,
    /// RSS growth per connected baton client (client + server ends), bytes.
    pub per_client_both_ends: f64,
}

/// Child process body: `n / 2` raw handshaken connections, "half" on stdout, wait for a line
/// on stdin, the rest, "ready" on stdout, hold until stdin closes.
pub fn child(path: &Path, n: usize) -> std::io::Result<()> {
    let hello = encode_frame(&ClientMessage::hello(), 1 << 24).map_err(std::io::Error::other)?;
    let mut conns = Vec::with_capacity(n);
    let mut out = std::io::stdout();
    let mut stdin = BufReader::new(std::io::stdin());
    for i in 0..n {
        if i == n / 2 {
            writeln!(out, "half {i}")?;
            out.flush()?;
            stdin.read_line(&mut String::new())?;
        }
        let mut s = UnixStream::connect(path)?;
        s.write_all(&hello)?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut payload)?;
        conns.push(s);
    }
    writeln!(out, "ready {}", conns.len())?;
    out.flush()?;
    let mut sink = Vec::new();
    let _ = stdin.read_to_end(&mut sink);
    Ok(())
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Runs both memory measurements (call first, before other workloads grow the heap).
pub async fn run(srv: &OursServer, plan: &Plan) -> Result<MemResult, Box<dyn std::error::Error>> {
    // Idle connections, server side only: as many as the fd limit leaves room for.
    let mut r = MemResult {
        fd_limit: crate::util::raise_fd_limit(),
        ..MemResult::default()
    };
    let room = r
        .fd_limit
        .saturating_sub(crate::util::open_fds() + FD_MARGIN);
    let n = plan
        .idle_connections
        .min(usize::try_from(room).unwrap_or(usize::MAX));
    if n < plan.idle_connections && !plan.quick {
        eprintln!(
            "memory: {n} idle connections (the fd limit {} allows no more)",
            r.fd_limit
        );
    }
    let base_conns = srv.server.connection_count();
    settle().await;
    let before = rss_bytes();
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--mem-child")
        .arg(&srv.unix)
        .arg(n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("child stdout")?);
    let mut stdin = child.stdin.take().ok_or("child stdin")?;
    let (line, back) = tokio::task::spawn_blocking(move || {
        let mut l = String::new();
        let _ = stdout.read_line(&mut l);
        (l, stdout)
    })
    .await?;
    stdout = back;
    if !line.starts_with("half") {
        return Err(format!("memory child failed: {line:?}").into());
    }
    while srv.server.connection_count() < base_conns + n / 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    settle().await;
    let half = rss_bytes();
    stdin.write_all(b"go\n")?;
    stdin.flush()?;
    let line = tokio::task::spawn_blocking(move || {
        let mut l = String::new();
        let _ = stdout.read_line(&mut l);
        l
    })
    .await?;
    if !line.starts_with("ready") {
        return Err(format!("memory child failed: {line:?}").into());
    }
    while srv.server.connection_count() < base_conns + n {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    settle().await;
    let after = rss_bytes();
    r.connections = srv.server.connection_count() - base_conns;
    r.per_connection = (after.saturating_sub(before)) as f64 / r.connections as f64;
    r.per_connection_marginal =
        after.saturating_sub(half) as f64 / (r.connections - n / 2).max(1) as f64;
    drop(stdin);
    let _ = tokio::task::spawn_blocking(move || child.wait()).await?;
    while srv.server.connection_count() > base_conns {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Subscriptions (both ends in this process).
    settle().await;
    let before_clients = rss_bytes();
    let mut clients = Vec::with_capacity(plan.sub_clients);
    for _ in 0..plan.sub_clients {
        clients.push(Client::connect(ClientConfig::new(Endpoint::Unix(srv.unix.clone()))).await?);
    }
    settle().await;
    let before_subs = rss_bytes();
    let mut subs = Vec::with_capacity(plan.sub_clients * plan.subs_per_client);
    for c in &clients {
        for _ in 0..plan.subs_per_client {
            subs.push(c.subscribe("bench.static", ServiceMode::Singleton).await?);
        }
    }
    settle().await;
    let after_subs = rss_bytes();
    r.per_client_both_ends =
        before_subs.saturating_sub(before_clients) as f64 / plan.sub_clients as f64;
    r.subscriptions = subs.len();
    r.per_subscription = after_subs.saturating_sub(before_subs) as f64 / subs.len() as f64;
    drop(subs);
    for c in &clients {
        c.close().await;
    }
    Ok(r)
}
