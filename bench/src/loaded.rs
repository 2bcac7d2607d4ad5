//! Latency under load: sequential round trips on one TCP connection while [`Plan::busy`]
//! other TCP connections of the *same implementation*, to the same server, each keep
//! [`BUSY_WINDOW`] calls in flight without pause. Ours is measured against ours under load,
//! tarpc against tarpc: each figure is what one caller of that implementation sees while its
//! server is saturated by its own kind, so the ratio compares how the two share one loaded
//! server (and its 2 worker threads) between a busy crowd and a lone sequential caller. The
//! crowd's request rate is reported beside the latencies, because the same load in
//! connections and windows is not the same load in requests per second.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::unary::{self, Addrs, Handle};
use crate::util::{Plan, quantile};

/// Calls each busy connection keeps in flight (the scale curve's is 8; at 1,000 connections
/// 2 each is already 2,000 outstanding ahead of the measured call).
pub const BUSY_WINDOW: usize = 2;

/// The implementations measured, in table order.
pub const IMPS: [&str; 2] = ["ours tcp", "tarpc"];

/// One run under load.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadedResult {
    /// Sequential p50 µs of the measured connection.
    pub p50: f64,
    /// Sequential p99 µs.
    pub p99: f64,
    /// Round trips timed (the window is a duration: under load a round trip takes
    /// milliseconds).
    pub samples: usize,
    /// Requests per second completed by the busy connections over the same window.
    pub busy_rps: f64,
}

async fn connect(imp: &str, addrs: &Addrs) -> Result<Handle, Box<dyn std::error::Error>> {
    if imp == "ours tcp" {
        unary::connect_ours_tcp(addrs.ours_tcp).await
    } else {
        unary::connect_tarpc(addrs.tarpc).await
    }
}

/// Opens `plan.busy` busy connections of `imp` and one more, times sequential round trips on
/// the latter over `plan.loaded_window` (after `plan.pipe_warmup` and `plan.seq_warmup`
/// calls), then stops and closes everything.
pub async fn run(
    imp: &str,
    addrs: &Addrs,
    plan: &Plan,
) -> Result<LoadedResult, Box<dyn std::error::Error>> {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut busy = Vec::with_capacity(plan.busy);
    for _ in 0..plan.busy {
        busy.push(connect(imp, addrs).await?);
    }
    let measured = connect(imp, addrs).await?;
    let tasks: Vec<_> = busy
        .iter()
        .map(|h| unary::spawn_call_loops(h, BUSY_WINDOW, &count, &stop))
        .collect();
    tokio::time::sleep(plan.pipe_warmup).await;
    for _ in 0..plan.seq_warmup.min(100) {
        measured.call().await;
    }
    let mut lat = Vec::new();
    let (c0, t0) = (count.load(Ordering::Relaxed), Instant::now());
    while t0.elapsed() < plan.loaded_window {
        let t = Instant::now();
        measured.call().await;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (c1, dt) = (count.load(Ordering::Relaxed), t0.elapsed());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    for h in busy.into_iter().chain([measured]) {
        if let Handle::Ours(c, ..) = h {
            c.close().await;
        }
    }
    // Let the server see the closes before the next run.
    tokio::time::sleep(Duration::from_millis(50)).await;
    lat.sort_by(f64::total_cmp);
    Ok(LoadedResult {
        p50: quantile(&lat, 0.5),
        p99: quantile(&lat, 0.99),
        samples: lat.len(),
        busy_rps: (c1 - c0) as f64 / dt.as_secs_f64(),
    })
}
