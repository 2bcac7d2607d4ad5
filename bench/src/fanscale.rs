//! Subscriber scale curve: CPU per delivery with 1 … 10,000 subscribers, ours
//! (real `baton_client` subscriptions over Unix) against the floor (`tokio::sync::broadcast`
//! to loopback TCP), with `fanout.rs`'s subscriber loop ([`count_deliveries`](crate::fanout::count_deliveries)),
//! publisher and pacing ([`paced_publisher`](crate::fanout::paced_publisher)).
//!
//! 10,000 subscribers in one process would need 20,000 fds (both ends), the machine's hard
//! limit, so here the subscribers run in a child process (this binary with `--fan-child`)
//! and this process holds only the server ends, one fd each. The child reports the slowest
//! and the summed delivery counts every millisecond on stdout (the publisher paces on the
//! slowest); CPU is every thread's `schedstat` of both processes, reported whole and for
//! the server process (server + publisher) alone. A child that exits before the window
//! closes fails the run: its CPU and deliveries would stop counting, not fall.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use baton_client::{Client, ClientConfig, Endpoint};
use baton_protocol::chord::ServiceMode;
use bytes::Bytes;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

use crate::ours::OursServer;
use crate::procfs::{self, Process};
use crate::util::Plan;

/// How long the harness waits for the child's subscribers before giving up (a hang guard).
pub const CHILD_READY_TIMEOUT: Duration = Duration::from_secs(300);

/// One point of the curve.
#[derive(Debug, Clone, Copy, Default)]
pub struct FanPoint {
    /// Deliveries per second, summed over subscribers.
    pub per_sec: f64,
    /// CPU seconds per million deliveries, both processes.
    pub cpu_per_m: f64,
    /// CPU seconds per million deliveries, the server process alone (server + publisher).
    pub server_cpu_per_m: f64,
    /// Subscribers reset or lagged.
    pub lost: u64,
}

/// What the child reports.
#[derive(Debug, Default)]
struct Progress {
    ready: AtomicBool,
    min: AtomicU64,
    sum: AtomicU64,
    lost: AtomicU64,
}

/// Child process body: `n` subscribers of `kind` (`ours`: baton clients on the Unix socket
/// `target`, subscribed to `arg`; `floor`: TCP connections to `target` counting
/// `arg`-byte frames), then progress lines until stdin closes.
pub fn child(
    kind: &str,
    target: &str,
    n: usize,
    arg: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let lost = Arc::new(AtomicU64::new(0));
        let mut counts = Vec::with_capacity(n);
        let mut clients = Vec::new();
        for _ in 0..n {
            let seen = Arc::new(AtomicU64::new(0));
            if kind == "ours" {
                let c = Client::connect(ClientConfig::new(Endpoint::Unix(target.into()))).await?;
                let sub = c.subscribe(arg, ServiceMode::Singleton).await?;
                tokio::spawn(crate::fanout::count_deliveries(
                    sub,
                    Arc::clone(&seen),
                    Arc::clone(&lost),
                ));
                clients.push(c);
            } else {
                let frame_len: usize = arg.parse()?;
                let s = TcpStream::connect(target).await?;
                s.set_nodelay(true)?;
                tokio::spawn(crate::fanout::count_floor_frames(
                    s,
                    frame_len,
                    Arc::clone(&seen),
                ));
            }
            counts.push(seen);
        }
        let mut out = std::io::stdout();
        writeln!(out, "ready {n}")?;
        out.flush()?;
        // The parent closes stdin to end the run.
        tokio::task::spawn_blocking(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            std::process::exit(0);
        });
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let (mut min, mut sum) = (u64::MAX, 0u64);
            for c in &counts {
                let v = c.load(Ordering::Relaxed);
                min = min.min(v);
                sum += v;
            }
            writeln!(
                out,
                "{} {sum} {}",
                if n == 0 { 0 } else { min },
                lost.load(Ordering::Relaxed)
            )?;
            out.flush()?;
        }
    })
}

/// The child, its progress and the thread reading it.
type ChildRun = (Child, Arc<Progress>, std::thread::JoinHandle<()>);

/// Starts the child and a thread that keeps `Progress` current from its lines.
fn spawn_child(
    kind: &str,
    target: &str,
    n: usize,
    arg: &str,
) -> Result<ChildRun, Box<dyn std::error::Error>> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--fan-child", kind, target, &n.to_string(), arg])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("child stdout")?;
    let progress = Arc::new(Progress::default());
    let p = Arc::clone(&progress);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if line.starts_with("ready") {
                p.ready.store(true, Ordering::Release);
                continue;
            }
            let mut f = line.split(' ').map(|v| v.parse::<u64>().unwrap_or(0));
            let (min, sum, lost) = (f.next(), f.next(), f.next());
            p.min.store(min.unwrap_or(0), Ordering::Relaxed);
            p.sum.store(sum.unwrap_or(0), Ordering::Relaxed);
            p.lost.store(lost.unwrap_or(0), Ordering::Relaxed);
        }
    });
    Ok((child, progress, reader))
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let t0 = Instant::now();
    while !done() {
        if t0.elapsed() > CHILD_READY_TIMEOUT {
            return Err(format!("fan-out scale: timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Measures over warm-up + window; `stop` is set afterwards. Fails if a CPU reading fails or
/// the child has exited by the end of the window.
async fn measure(
    progress: &Progress,
    child: &mut Child,
    plan: &Plan,
) -> Result<FanPoint, Box<dyn std::error::Error>> {
    let pid = child.id();
    let cpu = || -> Result<(f64, f64), procfs::ProcError> {
        Ok((
            procfs::cpu_ns(Process::This)?,
            procfs::cpu_ns(Process::Other(pid))?,
        ))
    };
    tokio::time::sleep(plan.fan_warmup).await;
    let sum = || progress.sum.load(Ordering::Relaxed);
    let (c0, (s0, k0), t0) = (sum(), cpu()?, Instant::now());
    // For profiling the window alone (`perf record -p` once this line appears).
    eprintln!("  window: {:?} (child pid {pid})", plan.fan_window);
    tokio::time::sleep(plan.fan_window).await;
    let (c1, (s1, k1), dt) = (sum(), cpu()?, t0.elapsed());
    if let Some(status) = child.try_wait()? {
        return Err(format!(
            "the subscriber process (pid {pid}) exited during the counting window ({status})"
        )
        .into());
    }
    let n = (c1 - c0) as f64;
    Ok(FanPoint {
        per_sec: n / dt.as_secs_f64(),
        cpu_per_m: (s1 - s0 + k1 - k0) / 1e9 / n * 1e6,
        server_cpu_per_m: (s1 - s0) / 1e9 / n * 1e6,
        lost: progress.lost.load(Ordering::Relaxed),
    })
}

fn end_child(mut child: Child, reader: std::thread::JoinHandle<()>) {
    drop(child.stdin.take());
    let _ = child.wait();
    let _ = reader.join();
}

/// Ours: `n` `baton_client` subscribers in the child, the bench host publishing batches of
/// 64 appends (paused while the slowest subscriber is [`lead`](crate::fanout::lead) or more
/// behind); the window opens once that lead is published.
pub async fn ours(
    srv: &OursServer,
    n: usize,
    run: u64,
    plan: &Plan,
) -> Result<FanPoint, Box<dyn std::error::Error>> {
    let key = format!("scale{run}");
    let service = format!("bench.stream.{key}");
    let target = srv
        .unix
        .to_str()
        .ok_or("socket path is not UTF-8")?
        .to_owned();
    let (mut child, progress, reader) = spawn_child("ours", &target, n, &service)?;
    let ready = wait_until("the child's subscribers", || {
        progress.ready.load(Ordering::Acquire) && srv.host.subscribers(&key) >= n
    })
    .await;
    if let Err(e) = ready {
        end_child(child, reader);
        return Err(e.into());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let slowest = {
        let progress = Arc::clone(&progress);
        move || progress.min.load(Ordering::Relaxed)
    };
    let publisher = crate::fanout::paced_publisher(srv, &key, n, &stop, slowest);
    publisher.until_primed().await;
    let measured = measure(&progress, &mut child, plan).await;
    stop.store(true, Ordering::Relaxed);
    let resets = publisher.task.await.unwrap_or(0);
    tokio::task::spawn_blocking(move || end_child(child, reader)).await?;
    // The child's exit closes every connection; the server drops them.
    srv.host.forget(&key);
    let mut p = measured?;
    p.lost += resets;
    Ok(p)
}

/// Floor: a broadcast of pre-framed `frame_len`-byte frames, one writer task per accepted
/// connection coalescing what is queued (≤ 32 KiB) into one write; `n` readers in the child.
pub async fn floor(
    n: usize,
    frame_len: usize,
    plan: &Plan,
) -> Result<FanPoint, Box<dyn std::error::Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, _) = broadcast::channel::<Bytes>(16_384);
    let lost = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    // Accept while the child connects (10,000 connections overflow any listen backlog).
    let acceptor = {
        let (tx, lost, accepted) = (tx.clone(), Arc::clone(&lost), Arc::clone(&accepted));
        tokio::spawn(async move {
            let mut writers = Vec::with_capacity(n);
            for _ in 0..n {
                let Ok((server, _)) = listener.accept().await else {
                    break;
                };
                let _ = server.set_nodelay(true);
                writers.push(tokio::spawn(crate::fanout::floor_writer(
                    server,
                    tx.subscribe(),
                    Arc::clone(&lost),
                )));
                accepted.fetch_add(1, Ordering::Relaxed);
            }
            writers
        })
    };
    let (mut child, progress, reader) =
        spawn_child("floor", &addr.to_string(), n, &frame_len.to_string())?;
    let ready = wait_until("the child's readers", || {
        progress.ready.load(Ordering::Acquire) && accepted.load(Ordering::Relaxed) >= n as u64
    })
    .await;
    if let Err(e) = ready {
        acceptor.abort();
        end_child(child, reader);
        return Err(e.into());
    }
    let writers = acceptor.await?;
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (stop, progress) = (Arc::clone(&stop), Arc::clone(&progress));
        let frame = Bytes::from(vec![b'x'; frame_len]);
        tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    let _ = tx.send(frame.clone());
                }
                sent += 256;
                while sent.saturating_sub(progress.min.load(Ordering::Relaxed)) >= 8_192
                    && !stop.load(Ordering::Relaxed)
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let measured = measure(&progress, &mut child, plan).await;
    stop.store(true, Ordering::Relaxed);
    producer.await?;
    for w in &writers {
        w.abort();
    }
    tokio::task::spawn_blocking(move || end_child(child, reader)).await?;
    let mut p = measured?;
    p.lost += lost.load(Ordering::Relaxed);
    Ok(p)
}
