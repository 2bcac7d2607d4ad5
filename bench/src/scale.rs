//! Connection scale curve: CPU per request with 1, 10, 100 and 1,000 concurrent
//! TCP connections, each pipelining [`SCALE_WINDOW`] unary calls, for ours, tarpc, tonic and
//! the floor. Clients and servers share this process and its 2 worker threads, so the CPU
//! (every thread's `schedstat`) covers both ends, as in the one-connection table; each
//! connection costs two fds here, well under the 20,000 limit at 1,000 connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::procfs::{self, ProcError, Process};
use crate::unary::{self, Addrs, Handle};
use crate::util::Plan;

/// Calls kept in flight on each connection of the curve (the one-connection table uses 64;
/// at 1,000 connections 8 each is already 8,000 outstanding).
pub const SCALE_WINDOW: usize = 8;

/// The implementations of the curve, in table order.
pub const IMPS: [&str; 4] = ["ours tcp", "tarpc", "tonic", "floor tcp"];

/// One point of the curve.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScalePoint {
    /// Requests per second over all connections.
    pub rps: f64,
    /// CPU µs per request, both ends.
    pub cpu_us: f64,
}

/// Opens `n` connections of `imp`, pipelines on all of them over the plan's window and closes
/// them again.
pub async fn run(
    imp: &str,
    n: usize,
    addrs: &Addrs,
    plan: &Plan,
) -> Result<ScalePoint, Box<dyn std::error::Error>> {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    if imp == "floor tcp" {
        let mut tasks = Vec::with_capacity(n);
        for _ in 0..n {
            let f = unary::connect_floor_tcp(addrs.floor_tcp).await?;
            tasks.push(unary::spawn_floor_loop(f, SCALE_WINDOW, &count, &stop));
        }
        let p = measure(&count, &stop, plan).await;
        for t in tasks {
            drop(t.await?);
        }
        return Ok(p?);
    }
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        handles.push(match imp {
            "ours tcp" => unary::connect_ours_tcp(addrs.ours_tcp).await?,
            "tarpc" => unary::connect_tarpc(addrs.tarpc).await?,
            _ => unary::connect_tonic(addrs.tonic).await?,
        });
    }
    let tasks: Vec<_> = handles
        .iter()
        .map(|h| unary::spawn_call_loops(h, SCALE_WINDOW, &count, &stop))
        .collect();
    let p = measure(&count, &stop, plan).await;
    for t in tasks {
        t.await?;
    }
    for h in handles {
        if let Handle::Ours(c, ..) = h {
            c.close().await;
        }
    }
    // Let the servers see the closes before the next point.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(p?)
}

/// Counts completions over the plan's warm-up + window; then sets `stop` (also when a CPU
/// reading fails, so the work ends either way).
async fn measure(
    count: &AtomicU64,
    stop: &AtomicBool,
    plan: &Plan,
) -> Result<ScalePoint, ProcError> {
    tokio::time::sleep(plan.pipe_warmup).await;
    let first = procfs::cpu_ns(Process::This);
    let (c0, t0) = (count.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(plan.scale_window).await;
    let (c1, dt) = (count.load(Ordering::Relaxed), t0.elapsed());
    let last = procfs::cpu_ns(Process::This);
    stop.store(true, Ordering::Relaxed);
    let (cpu0, cpu1) = (first?, last?);
    let k = (c1 - c0) as f64;
    Ok(ScalePoint {
        rps: k / dt.as_secs_f64(),
        cpu_us: (cpu1 - cpu0) / 1e3 / k,
    })
}
