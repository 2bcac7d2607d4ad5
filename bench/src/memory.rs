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
//!
//! Every growth is signed: RSS that falls while things are added is reported as it is (and
//! judged against no goal), not as 0. A `/proc` reading that fails fails the run.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use baton_client::{Client, ClientConfig, Endpoint};
use baton_protocol::chord::ServiceMode;
use baton_protocol::{ClientMessage, encode_frame};

use crate::figure::Measured;
use crate::ours::OursServer;
use crate::procfs::{self, ProcError, Process};
use crate::util::Plan;

/// Fds left unused below the limit (the runtime, listeners and the child's own stdio).
pub const FD_MARGIN: u64 = 64;

/// The RSS growth (signed: RSS can fall) while `count` things were added.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// `VmRSS` after less `VmRSS` before, bytes.
    pub bytes: i64,
    /// Things added.
    pub count: usize,
}

impl Growth {
    /// The growth from `before` to `after` bytes over `count` things.
    pub fn between(before: u64, after: u64, count: usize) -> Self {
        let signed = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
        Self {
            bytes: signed(after) - signed(before),
            count,
        }
    }

    /// Bytes per thing (negative if RSS fell).
    pub fn per_item(self) -> f64 {
        self.bytes as f64 / self.count as f64
    }
}

/// The idle-connection figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleMemory {
    /// The fd limit in force (soft, after raising it to the hard limit).
    pub fd_limit: u64,
    /// Server RSS growth over every idle connection.
    pub all: Growth,
    /// Server RSS growth over the second half only (the marginal cost of one more).
    pub second_half: Growth,
}

/// Memory figures; [`MemResult::default`] is "not measured" throughout.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemResult {
    /// Idle connections: not measured when the fd limit leaves room for fewer than two.
    pub idle: Measured<IdleMemory>,
    /// RSS growth over the connected baton clients (client and server ends).
    pub clients: Measured<Growth>,
    /// RSS growth over the subscriptions (client replica + server state).
    pub subscriptions: Measured<Growth>,
}

fn rss() -> Result<u64, ProcError> {
    procfs::rss_bytes(Process::This)
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
    let idle = idle(srv, plan).await?;
    let (clients, subscriptions) = subscriptions(srv, plan).await?;
    Ok(MemResult {
        idle,
        clients: Measured::Value(clients),
        subscriptions: Measured::Value(subscriptions),
    })
}

/// Idle connections, server side only: as many as the fd limit leaves room for.
async fn idle(
    srv: &OursServer,
    plan: &Plan,
) -> Result<Measured<IdleMemory>, Box<dyn std::error::Error>> {
    let fd_limit = crate::util::raise_fd_limit();
    let room = fd_limit.saturating_sub(procfs::open_fds()? + FD_MARGIN);
    let n = plan
        .idle_connections
        .min(usize::try_from(room).unwrap_or(usize::MAX));
    if n < 2 {
        eprintln!(
            "memory: idle connections not measured (the fd limit {fd_limit} leaves room for {n})"
        );
        return Ok(Measured::NotMeasured);
    }
    if n < plan.idle_connections && !plan.quick {
        eprintln!("memory: {n} idle connections (the fd limit {fd_limit} allows no more)");
    }
    let base_conns = srv.server.connection_count();
    settle().await;
    let before = rss()?;
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
    let half = rss()?;
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
    let after = rss()?;
    let connections = srv.server.connection_count() - base_conns;
    let figures = IdleMemory {
        fd_limit,
        all: Growth::between(before, after, connections),
        second_half: Growth::between(half, after, connections - n / 2),
    };
    drop(stdin);
    let _ = tokio::task::spawn_blocking(move || child.wait()).await?;
    while srv.server.connection_count() > base_conns {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Measured::Value(figures))
}

/// The growth over the clients and over their subscriptions, both ends in this process.
async fn subscriptions(
    srv: &OursServer,
    plan: &Plan,
) -> Result<(Growth, Growth), Box<dyn std::error::Error>> {
    settle().await;
    let before_clients = rss()?;
    let mut clients = Vec::with_capacity(plan.sub_clients);
    for _ in 0..plan.sub_clients {
        clients.push(Client::connect(ClientConfig::new(Endpoint::Unix(srv.unix.clone()))).await?);
    }
    settle().await;
    let before_subs = rss()?;
    let mut subs = Vec::with_capacity(plan.sub_clients * plan.subs_per_client);
    for c in &clients {
        for _ in 0..plan.subs_per_client {
            subs.push(c.subscribe("bench.static", ServiceMode::Singleton).await?);
        }
    }
    settle().await;
    let after_subs = rss()?;
    let r = (
        Growth::between(before_clients, before_subs, clients.len()),
        Growth::between(before_subs, after_subs, subs.len()),
    );
    drop(subs);
    for c in &clients {
        c.close().await;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rss_drop_is_a_negative_growth_not_zero() {
        let g = Growth::between(10_000, 6_000, 2);
        assert_eq!(g.bytes, -4_000);
        assert_eq!(g.per_item(), -2_000.0);
    }

    #[test]
    fn growth_per_item() {
        assert_eq!(Growth::between(4_096, 12_288, 4).per_item(), 2_048.0);
    }

    #[test]
    fn a_memory_section_that_did_not_run_is_not_measured() {
        let r = MemResult::default();
        assert_eq!(r.idle, Measured::NotMeasured);
        assert_eq!(r.clients, Measured::NotMeasured);
        assert_eq!(r.subscriptions, Measured::NotMeasured);
    }
}
