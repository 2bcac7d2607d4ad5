//! Latency under load: sequential round trips on one TCP connection while [`Plan::busy`]
//! other TCP connections of the *same implementation*, to the same server, each keep
//! [`BUSY_WINDOW`] calls in flight without pause. Ours is measured against ours under load,
//! tarpc against tarpc: each figure is what one caller of that implementation sees while its
//! server is saturated by its own kind, so the ratio compares how the two share one loaded
//! server (and its 2 worker threads) between a busy crowd and a lone sequential caller. The
//! crowd's request rate is reported beside the latencies, because the same load in
//! connections and windows is not the same load in requests per second.
//!
//! Where the measured caller's time goes: its payload starts with [`LONE_MARK`] (the crowd's
//! never does), the echo handlers of both implementations note when they see it ([`seen`]),
//! so each round trip splits into the request leg (call → handler) and the answer leg
//! (handler → caller returns). The crowd's own round trips are timed over the same window,
//! and the runtime's global (inject) queue depth is sampled, so the measured caller's
//! latency can be set against the crowd's and against the queue it waits in.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use baton_protocol::Value;
use baton_protocol::chord::ServiceCall;

use crate::unary::{self, Addrs, Handle};
use crate::util::{Plan, quantile};

/// Calls each busy connection keeps in flight (the scale curve's is 8; at 1,000 connections
/// 2 each is already 2,000 outstanding ahead of the measured call).
pub const BUSY_WINDOW: usize = 2;

/// First byte of the measured caller's payload ([`unary::PAYLOAD`] starts otherwise).
pub const LONE_MARK: u8 = b'L';

/// Nanoseconds since [`EPOCH`] when an echo handler last saw the measured caller's payload.
static LONE_SEEN: AtomicU64 = AtomicU64::new(0);
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn since_epoch() -> u64 {
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Called by the echo handlers with the payload: notes when the measured caller's arrives.
pub fn seen(payload: &[u8]) {
    if payload.first() == Some(&LONE_MARK) {
        LONE_SEEN.store(since_epoch(), Ordering::Relaxed);
    }
}

/// The measured caller's payload: as long as the crowd's, marked.
fn lone_payload() -> String {
    let mut p = String::from(char::from(LONE_MARK));
    p.push_str(&unary::PAYLOAD[1..]);
    p
}

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
    /// p50 µs of the measured caller's request leg (call → echo handler).
    pub up_p50: f64,
    /// p50 µs of its answer leg (echo handler → the call returns).
    pub down_p50: f64,
    /// p50 µs of the busy connections' round trips over the window.
    pub crowd_p50: f64,
    /// p99 µs of the same.
    pub crowd_p99: f64,
    /// Median depth of the runtime's global (inject) queue, sampled every 5 ms.
    pub queue_p50: f64,
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
    let timing = Arc::new(AtomicBool::new(false));
    let mut busy = Vec::with_capacity(plan.busy);
    for _ in 0..plan.busy {
        busy.push(connect(imp, addrs).await?);
    }
    let measured = match connect(imp, addrs).await? {
        Handle::Ours(c, t, _) => {
            let call = ServiceCall::new("bench", "echo", vec![Value::from(lone_payload())]);
            Handle::Ours(c, t, call.into_value())
        }
        Handle::Tarpc(c, _) => Handle::Tarpc(c, lone_payload().into_bytes()),
        other => other,
    };
    let tasks: Vec<_> = busy
        .iter()
        .map(|h| spawn_timed_loops(h, &count, &stop, &timing))
        .collect();
    tokio::time::sleep(plan.pipe_warmup).await;
    for _ in 0..plan.seq_warmup.min(100) {
        measured.call().await;
    }
    let sampler = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let metrics = tokio::runtime::Handle::current().metrics();
            let mut depths = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(5)).await;
                depths.push(metrics.global_queue_depth() as f64);
            }
            depths
        })
    };
    timing.store(true, Ordering::Relaxed);
    let (c0, t0) = (count.load(Ordering::Relaxed), Instant::now());
    let window = plan.loaded_window;
    let lone = async move {
        let (mut lat, mut up, mut down) = (Vec::new(), Vec::new(), Vec::new());
        while t0.elapsed() < window {
            let t = Instant::now();
            let called = since_epoch();
            measured.call().await;
            let returned = since_epoch();
            lat.push(t.elapsed().as_secs_f64() * 1e6);
            let at = LONE_SEEN.load(Ordering::Relaxed);
            up.push(at.saturating_sub(called) as f64 / 1e3);
            down.push(returned.saturating_sub(at) as f64 / 1e3);
        }
        (lat, up, down, measured)
    };
    // The figure's caller is the harness's own `block_on` thread, outside the runtime's
    // workers; `BENCH_LOADED_CALLER=worker` runs it in a task instead (a diagnostic: its
    // wake-ups then stay on a worker instead of crossing threads).
    let (mut lat, mut up, mut down, measured) =
        if std::env::var("BENCH_LOADED_CALLER").is_ok_and(|v| v == "worker") {
            tokio::spawn(lone).await?
        } else {
            lone.await
        };
    let (c1, dt) = (count.load(Ordering::Relaxed), t0.elapsed());
    timing.store(false, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let mut crowd = Vec::new();
    for t in tasks {
        crowd.extend(t.await?);
    }
    let mut depths = sampler.await?;
    for h in busy.into_iter().chain([measured]) {
        if let Handle::Ours(c, ..) = h {
            c.close().await;
        }
    }
    // Let the server see the closes before the next run.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for v in [&mut lat, &mut up, &mut down, &mut crowd, &mut depths] {
        v.sort_by(f64::total_cmp);
    }
    Ok(LoadedResult {
        p50: quantile(&lat, 0.5),
        p99: quantile(&lat, 0.99),
        samples: lat.len(),
        busy_rps: (c1 - c0) as f64 / dt.as_secs_f64(),
        up_p50: quantile(&up, 0.5),
        down_p50: quantile(&down, 0.5),
        crowd_p50: quantile(&crowd, 0.5),
        crowd_p99: quantile(&crowd, 0.99),
        queue_p50: quantile(&depths, 0.5),
    })
}

/// [`BUSY_WINDOW`] call loops on `h`, joined in one task (as [`unary::spawn_call_loops`]),
/// counting into `count` until `stop` and timing each round trip while `timing` is set;
/// returns those round trips in µs.
fn spawn_timed_loops(
    h: &Handle,
    count: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
    timing: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<f64>> {
    let loops: Vec<_> = (0..BUSY_WINDOW)
        .map(|_| {
            let h = h.clone();
            let (count, stop, timing) = (Arc::clone(count), Arc::clone(stop), Arc::clone(timing));
            async move {
                let mut lat = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    h.call().await;
                    count.fetch_add(1, Ordering::Relaxed);
                    if timing.load(Ordering::Relaxed) {
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                lat
            }
        })
        .collect();
    tokio::spawn(async move {
        futures::future::join_all(loops)
            .await
            .into_iter()
            .flatten()
            .collect()
    })
}
