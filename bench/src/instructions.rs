//! `--instructions unary|fanout IMP N`: a fixed amount of work on a current-thread runtime,
//! for counting instructions where the machine has no hardware counters. `bench/instructions`
//! runs it under `valgrind --tool=callgrind` at N and 2N and prints (Ir(2N) − Ir(N)) / N:
//! process start-up, server start and connection set-up are the same in both runs and
//! cancel, so what is left is the cost of N operations in steady state. One thread runs both
//! ends, so the figure covers client and server, like the CPU figures of the report.
//!
//! * `unary ours|tarpc|floor N`: N echo calls of 64 bytes on one TCP connection, pipelined
//!   [`WINDOW`] deep (the report's pipelined workload, counted instead of timed).
//! * `fanout ours|floor N`: N one-op updates to each of [`SUBSCRIBERS`] subscribers (N ×
//!   [`SUBSCRIBERS`] deliveries): ours through `Publisher::publish_shared_many` to
//!   `baton_client` subscriptions over Unix sockets, the floor through `tokio::sync::broadcast`
//!   to loopback TCP, as in the fan-out table. The publisher keeps at most [`LEAD`] updates
//!   ahead of the slowest subscriber, yielding (not sleeping: no clock in the count) while it
//!   waits.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use baton_client::{Client, ClientConfig, Endpoint};
use baton_protocol::chord::ServiceMode;
use bytes::Bytes;
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

use crate::fanout::{self, BATCH};
use crate::ours;
use crate::unary::{self, Handle, PAYLOAD};

/// Calls in flight on the one connection (the report's window).
pub const WINDOW: usize = 64;
/// Subscribers of the fan-out workload.
pub const SUBSCRIBERS: usize = 10;
/// How far the publisher may run ahead of the slowest subscriber (well under the server's
/// 4,096-frame subscriber queue, so nobody is reset).
pub const LEAD: u64 = 512;

/// Runs `workload` for `imp` with `n` operations and prints what it did.
pub fn run(workload: &str, imp: &str, n: usize) -> Result<(), Box<dyn Error>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let done = rt.block_on(async {
        match (workload, imp) {
            ("unary", "floor") => unary_floor(n).await,
            ("unary", _) => unary_handle(imp, n).await,
            ("fanout", "ours") => fanout_ours(n).await,
            ("fanout", "floor") => fanout_floor(n).await,
            _ => Err(format!("unknown workload {workload} {imp}").into()),
        }
    })?;
    println!("{workload} {imp}: {done} operations");
    Ok(())
}

async fn unary_handle(imp: &str, n: usize) -> Result<u64, Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("baton-bench-instr-{}", std::process::id()));
    let (h, srv) = match imp {
        "ours" => {
            let srv = ours::start(dir.clone()).await?;
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], srv.tcp_port));
            (unary::connect_ours_tcp(addr).await?, Some(srv))
        }
        "tarpc" => (
            unary::connect_tarpc(unary::start_tarpc().await?).await?,
            None,
        ),
        _ => return Err(format!("unknown unary implementation {imp}").into()),
    };
    let count = Arc::new(AtomicU64::new(0));
    let loops = (0..WINDOW).map(|i| {
        let (h, count) = (h.clone(), Arc::clone(&count));
        // The first `n % WINDOW` loops take one call more, so exactly `n` are made.
        let calls = n / WINDOW + usize::from(i < n % WINDOW);
        async move {
            for _ in 0..calls {
                h.call().await;
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    futures::future::join_all(loops).await;
    if let Handle::Ours(c, ..) = h {
        c.close().await;
    }
    if let Some(srv) = srv {
        let _ = srv.server.close().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(count.load(Ordering::Relaxed))
}

async fn unary_floor(n: usize) -> Result<u64, Box<dyn Error>> {
    let mut f = unary::connect_floor_tcp(unary::start_floor_tcp().await?).await?;
    let payload = Bytes::from_static(PAYLOAD.as_bytes());
    let (mut sent, mut done) = (0usize, 0u64);
    while sent < n.min(WINDOW) {
        f.feed(payload.clone()).await?;
        sent += 1;
    }
    SinkExt::<Bytes>::flush(&mut f).await?;
    while (done as usize) < n {
        // One response awaited, then whatever else is readable; one request fed for each,
        // one flush per batch (as the timed floor client).
        let mut ready = vec![f.next().await.ok_or("floor eof")??];
        while let Some(Some(r)) = f.next().now_or_never() {
            ready.push(r?);
        }
        for _ in ready {
            done += 1;
            if sent < n {
                f.feed(payload.clone()).await?;
                sent += 1;
            }
        }
        SinkExt::<Bytes>::flush(&mut f).await?;
    }
    Ok(done)
}

/// Publishes batches while `slowest() + LEAD` allows, until `n` are published and seen.
async fn paced(n: u64, slowest: impl Fn() -> u64, mut publish: impl FnMut() -> u64) {
    let mut published = 0;
    while slowest() < n {
        if published < n && published < slowest() + LEAD {
            published = publish();
        } else {
            tokio::task::yield_now().await;
        }
    }
}

fn slowest_of(counts: &[Arc<AtomicU64>]) -> u64 {
    counts
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .min()
        .unwrap_or(0)
}

async fn fanout_ours(n: usize) -> Result<u64, Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("baton-bench-instr-{}", std::process::id()));
    let srv = ours::start(dir.clone()).await?;
    let (key, service) = ("instr", "bench.stream.instr");
    let lost = Arc::new(AtomicU64::new(0));
    let (mut clients, mut counts, mut tasks) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SUBSCRIBERS {
        let c = Client::connect(ClientConfig::new(Endpoint::Unix(srv.unix.clone()))).await?;
        let sub = c.subscribe(service, ServiceMode::Singleton).await?;
        let seen = Arc::new(AtomicU64::new(0));
        tasks.push(tokio::spawn(fanout::count_deliveries(
            sub,
            Arc::clone(&seen),
            Arc::clone(&lost),
        )));
        counts.push(seen);
        clients.push(c);
    }
    while srv.host.subscribers(key) < SUBSCRIBERS {
        tokio::task::yield_now().await;
    }
    let n = n as u64;
    let mut seq = 0u64;
    paced(
        n,
        || slowest_of(&counts),
        || {
            seq = srv.host.publish(key, BATCH.min((n - seq) as usize)).1;
            seq
        },
    )
    .await;
    for c in &clients {
        c.close().await;
    }
    for t in tasks {
        t.abort();
    }
    let _ = srv.server.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    if lost.load(Ordering::Relaxed) > 0 {
        return Err("a subscriber was reset: the count includes a resync".into());
    }
    Ok(n * SUBSCRIBERS as u64)
}

async fn fanout_floor(n: usize) -> Result<u64, Box<dyn Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, _) = broadcast::channel::<Bytes>(16_384);
    let lost = Arc::new(AtomicU64::new(0));
    let frame_len = fanout::frame_len()?;
    let (mut counts, mut tasks) = (Vec::new(), Vec::new());
    for _ in 0..SUBSCRIBERS {
        let client = TcpStream::connect(addr).await?;
        let (server, _) = listener.accept().await?;
        client.set_nodelay(true)?;
        server.set_nodelay(true)?;
        tasks.push(tokio::spawn(fanout::floor_writer(
            server,
            tx.subscribe(),
            Arc::clone(&lost),
        )));
        let seen = Arc::new(AtomicU64::new(0));
        tasks.push(tokio::spawn(fanout::count_floor_frames(
            client,
            frame_len,
            Arc::clone(&seen),
        )));
        counts.push(seen);
    }
    let frame = Bytes::from(vec![b'x'; frame_len]);
    let n = n as u64;
    let mut sent = 0u64;
    paced(
        n,
        || slowest_of(&counts),
        || {
            for _ in 0..BATCH.min((n - sent) as usize) {
                let _ = tx.send(frame.clone());
                sent += 1;
            }
            sent
        },
    )
    .await;
    for t in tasks {
        t.abort();
    }
    if lost.load(Ordering::Relaxed) > 0 {
        return Err("a floor subscriber lagged".into());
    }
    Ok(n * SUBSCRIBERS as u64)
}
