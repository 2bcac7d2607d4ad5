//! Subscription fan-out: one publisher streams small text appends to N subscribers, each on
//! its own connection.
//!
//! * **ours**: the host publishes `service_update`s with one `a` op (`"tok "`) through
//!   `Publisher::publish_shared_many` (batches of 64, encoded once per distinct encoder state) to N
//!   `baton_client` subscriptions over Unix sockets. Counted at the client: the replica's
//!   sequence as seen through subscription events. The publisher backs off (1 ms sleeps)
//!   while the slowest subscriber is ≥ [`lead`] updates behind (1,024, less above 1,024
//!   subscribers), so no subscriber is reset (resets are counted and reported); the window
//!   opens once that lead is published.
//! * **jsonrpsee**: each subscription task of [`JsonServer`] sends a pre-built result in a
//!   loop with `SubscriptionSink::send` (the sink awaits capacity), so jsonrpsee pays no
//!   publisher at all: an upper bound for it. Each subscriber is its own `WsClient`.
//! * **floor**: `tokio::sync::broadcast` of pre-framed `Bytes` (same length as our frame);
//!   each receiver task writes to its own loopback TCP connection, coalescing whatever is
//!   queued (≤ 32 KiB) into one write; a reader per connection counts bytes / frame length.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use baton_client::{Client, ClientConfig, Endpoint, SubscriptionEvent};
use baton_protocol::chord::ServiceMode;
use bytes::{Bytes, BytesMut};
use jsonrpsee::core::client::SubscriptionClientT;
use jsonrpsee::core::params::ArrayParams;
use jsonrpsee_ws_client::WsClientBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

use crate::counters;
use crate::figure::Measured;
use crate::jsonrpc::{Delta, JsonServer};
use crate::ours::OursServer;
use crate::procfs::{self, ProcError, Process};
use crate::util::Plan;

/// One fan-out run.
#[derive(Debug, Clone, Default)]
pub struct FanResult {
    /// Deliveries per second (summed over subscribers).
    pub per_sec: f64,
    /// CPU seconds (whole process: publisher, server, clients) per million deliveries.
    pub cpu_per_m: f64,
    /// Subscribers reset / lagged / closed during the run.
    pub lost: u64,
    /// Instructions (whole process) per delivery, from hardware counters.
    pub instr_per_delivery: Measured<f64>,
}

/// Measures `counts` (summed delivered counters) over warm-up + window: deliveries/s, CPU
/// s per million deliveries and instructions per delivery (hardware counters, where there
/// are any).
async fn window(counts: &[Arc<AtomicU64>], plan: &Plan) -> Result<Counted, ProcError> {
    let sum = || {
        counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    tokio::time::sleep(plan.fan_warmup).await;
    let instr = counters::Window::open();
    let (c0, cpu0, t0) = (sum(), procfs::cpu_secs(Process::This)?, Instant::now());
    tokio::time::sleep(plan.fan_window).await;
    let (c1, cpu1, dt) = (sum(), procfs::cpu_secs(Process::This)?, t0.elapsed());
    let n = (c1 - c0) as f64;
    Ok((
        n / dt.as_secs_f64(),
        (cpu1 - cpu0) / n * 1e6,
        instr.close().map(|i| i / n),
    ))
}

/// Deliveries/s, CPU s per million deliveries, instructions per delivery.
type Counted = (f64, f64, Measured<f64>);

/// Counts what one `baton_client` subscription receives: `seen` follows the replica's
/// sequence (also through `Lagged`, after which the replica is still exact), `lost` counts
/// resyncs. The one subscriber loop of both fan-out tables (`fanscale` runs it in its child).
pub async fn count_deliveries(
    mut sub: baton_client::Subscription,
    seen: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
) {
    let watch = sub.watch();
    while let Some(ev) = sub.next_event().await {
        match ev {
            SubscriptionEvent::Updates(batch) => {
                // Counted without decoding, as a consumer that only follows sequences does.
                if let Some(sequence) = batch.last_sequence() {
                    seen.store(sequence, Ordering::Relaxed);
                }
            }
            SubscriptionEvent::Lagged => {
                // Events were dropped; the replica is still exact.
                let seq = watch.borrow().sequence(None, "reply").unwrap_or(0);
                seen.store(seq, Ordering::Relaxed);
            }
            SubscriptionEvent::Snapshot { resynced: true } => {
                lost.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// The length of our one-op update frame (`"tok "` appended), which the floor's frames copy.
pub fn frame_len() -> Result<usize, Box<dyn std::error::Error>> {
    let mut enc = baton_protocol::chord::StateEncoder::new();
    enc.encode_snapshot(&crate::ours::reply_snapshot("bench.stream.1", 0, ""))?;
    let wire = enc.encode_update(&crate::ours::append_update(1, crate::ours::TOKEN))?;
    let msg = baton_protocol::ServerMessage::ServiceUpdate(baton_protocol::ServiceUpdate {
        subscription_id: baton_protocol::Id::new("1")?,
        update: wire,
    });
    Ok(baton_protocol::encode_frame(&msg, 16 << 20)?.len())
}

/// Updates per published batch.
pub const BATCH: usize = 64;
/// The publisher pauses (1 ms sleeps) while the slowest subscriber is this many updates
/// behind, so nobody is reset.
pub const MAX_AHEAD: u64 = 1_024;
/// ... and while more than about this many deliveries could be queued across all
/// subscribers: at 10,000 subscribers 1,024 updates each would be 10 M queued frames (1 GB)
/// published in a burst before and into the first counting window, not a steady state.
pub const MAX_IN_FLIGHT: u64 = 2 << 20;

/// How far ahead of the slowest of `n` subscribers the publisher may run: [`MAX_AHEAD`],
/// less when [`MAX_IN_FLIGHT`] shared by `n` is smaller, but never under two batches.
pub fn lead(n: usize) -> u64 {
    (MAX_IN_FLIGHT / n.max(1) as u64).clamp(2 * BATCH as u64, MAX_AHEAD)
}

/// A running [`paced_publisher`].
pub struct Paced {
    /// Ends when `stop` is set; returns the resets the publisher saw (none, if the pacing
    /// works).
    pub task: tokio::task::JoinHandle<u64>,
    /// Set once the publisher's whole lead is published, i.e. the pipeline is full and what
    /// the publisher does from then on is what subscribers take: counting windows start after
    /// this, so the initial burst is not charged to the deliveries of the window.
    pub primed: Arc<AtomicBool>,
}

impl Paced {
    /// Waits until [`Self::primed`] (hang guard: a minute, then measures anyway).
    pub async fn until_primed(&self) {
        let t0 = Instant::now();
        while !self.primed.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The one paced publisher of both fan-out tables: batches of [`BATCH`] appends to
/// `bench.stream.<key>` until `stop`, pausing while `slowest()` is [`lead`]`(n)` or more
/// behind.
pub fn paced_publisher(
    srv: &OursServer,
    key: &str,
    n: usize,
    stop: &Arc<AtomicBool>,
    slowest: impl Fn() -> u64 + Send + 'static,
) -> Paced {
    let (host, stop) = (srv.host.clone(), Arc::clone(stop));
    let key = key.to_owned();
    let primed = Arc::new(AtomicBool::new(false));
    let ahead = lead(n);
    let p = Arc::clone(&primed);
    let task = tokio::spawn(async move {
        let mut resets = 0;
        while !stop.load(Ordering::Relaxed) {
            let (c, seq) = host.publish(&key, BATCH);
            resets += c.reset;
            if seq >= ahead {
                p.store(true, Ordering::Release);
            }
            while seq.saturating_sub(slowest()) >= ahead && !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::task::yield_now().await;
        }
        resets
    });
    Paced { task, primed }
}

/// Waits for `n` subscribers of `key`, runs the [`paced_publisher`] on the slowest counter
/// in `counts`, measures over the window once it is primed, then stops the publisher and aborts the
/// subscriber `tasks`. Returns deliveries/s, CPU s per million and the resets the publisher
/// saw.
async fn publish_paced(
    srv: &OursServer,
    key: &str,
    n: usize,
    counts: &[Arc<AtomicU64>],
    tasks: &[tokio::task::JoinHandle<()>],
    plan: &Plan,
) -> Result<(Counted, u64), ProcError> {
    while srv.host.subscribers(key) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let slowest = {
        let counts = counts.to_vec();
        move || {
            counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .min()
                .unwrap_or(u64::MAX)
        }
    };
    let publisher = paced_publisher(srv, key, n, &stop, slowest);
    publisher.until_primed().await;
    let measured = window(counts, plan).await;
    stop.store(true, Ordering::Relaxed);
    let resets = publisher.task.await.unwrap_or(0);
    for t in tasks {
        t.abort();
    }
    Ok((measured?, resets))
}

/// Ours: `n` baton clients over Unix, one subscription each, one publisher.
pub async fn ours(
    srv: &OursServer,
    n: usize,
    run: u64,
    plan: &Plan,
) -> Result<FanResult, ProcError> {
    let key = run.to_string();
    let service = format!("bench.stream.{key}");
    let mut clients = Vec::with_capacity(n);
    let mut tasks = Vec::with_capacity(n);
    let mut counts = Vec::with_capacity(n);
    let lost = Arc::new(AtomicU64::new(0));
    for _ in 0..n {
        let c = Client::connect(ClientConfig::new(Endpoint::Unix(srv.unix.clone())))
            .await
            .expect("connect");
        let sub = c
            .subscribe(&service, ServiceMode::Singleton)
            .await
            .expect("subscribe");
        let seen = Arc::new(AtomicU64::new(0));
        tasks.push(tokio::spawn(count_deliveries(
            sub,
            Arc::clone(&seen),
            Arc::clone(&lost),
        )));
        counts.push(seen);
        clients.push(c);
    }
    let measured = publish_paced(srv, &key, n, &counts, &tasks, plan).await;
    for c in &clients {
        c.close().await;
    }
    srv.host.forget(&key);
    let ((per_sec, cpu_per_m, instr_per_delivery), resets) = measured?;
    Ok(FanResult {
        per_sec,
        cpu_per_m,
        lost: resets + lost.load(Ordering::Relaxed),
        instr_per_delivery,
    })
}

/// jsonrpsee: `n` WebSocket clients of `json`, one subscription each.
pub async fn jsonrpsee(
    json: &JsonServer,
    n: usize,
    run: u64,
    plan: &Plan,
) -> Result<FanResult, ProcError> {
    let addr = json.addr();
    let mut tasks = Vec::with_capacity(n);
    let mut counts = Vec::with_capacity(n);
    let lost = Arc::new(AtomicU64::new(0));
    for _ in 0..n {
        let c = WsClientBuilder::default()
            .set_tcp_no_delay(true)
            .max_buffer_capacity_per_subscription(1 << 20)
            .build(format!("ws://{addr}"))
            .await
            .expect("ws connect");
        let mut p = ArrayParams::new();
        p.insert(run).expect("params");
        let mut sub = c
            .subscribe::<Delta, _>("sub", p, "unsub")
            .await
            .expect("ws subscribe");
        let seen = Arc::new(AtomicU64::new(0));
        let (s, lost) = (Arc::clone(&seen), Arc::clone(&lost));
        tasks.push(tokio::spawn(async move {
            let _client = c;
            while let Some(r) = sub.next().await {
                if r.is_err() {
                    break;
                }
                s.fetch_add(1, Ordering::Relaxed);
            }
            // Ended early: closed by the client for lagging.
            lost.fetch_add(1, Ordering::Relaxed);
        }));
        counts.push(seen);
    }
    json.release(run);
    let measured = window(&counts, plan).await;
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = t.await;
    }
    // Aborted tasks drop their clients; give the server a moment to see the closes.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (per_sec, cpu_per_m, instr_per_delivery) = measured?;
    Ok(FanResult {
        per_sec,
        cpu_per_m,
        lost: lost.load(Ordering::Relaxed),
        instr_per_delivery,
    })
}

/// Floor: tokio broadcast → per-receiver coalesced writes to loopback TCP.
pub async fn floor(n: usize, frame_len: usize, plan: &Plan) -> Result<FanResult, ProcError> {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, _) = broadcast::channel::<Bytes>(16_384);
    let mut counts = Vec::with_capacity(n);
    let mut tasks = Vec::new();
    let lost = Arc::new(AtomicU64::new(0));
    for _ in 0..n {
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        client.set_nodelay(true).expect("nodelay");
        server.set_nodelay(true).expect("nodelay");
        let seen = Arc::new(AtomicU64::new(0));
        tasks.push(tokio::spawn(floor_writer(
            server,
            tx.subscribe(),
            Arc::clone(&lost),
        )));
        tasks.push(tokio::spawn(count_floor_frames(
            client,
            frame_len,
            Arc::clone(&seen),
        )));
        counts.push(seen);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (stop, counts) = (Arc::clone(&stop), counts.clone());
        let frame = Bytes::from(vec![b'x'; frame_len]);
        tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    let _ = tx.send(frame.clone());
                }
                sent += 256;
                loop {
                    let slowest = counts.iter().map(|c| c.load(Ordering::Relaxed)).min();
                    if sent - slowest.unwrap_or(sent) < 8_192 || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                tokio::task::yield_now().await;
            }
            drop(tx);
        })
    };
    let measured = window(&counts, plan).await;
    stop.store(true, Ordering::Relaxed);
    let _ = producer.await;
    for t in &tasks {
        t.abort();
    }
    let (per_sec, cpu_per_m, instr_per_delivery) = measured?;
    Ok(FanResult {
        per_sec,
        cpu_per_m,
        lost: lost.load(Ordering::Relaxed),
        instr_per_delivery,
    })
}

/// A floor subscriber: reads the raw stream until it ends and stores how many whole frames of
/// `frame_len` bytes it has seen so far (every floor frame has that length).
pub async fn count_floor_frames<R: tokio::io::AsyncRead + Unpin>(
    mut stream: R,
    frame_len: usize,
    seen: Arc<AtomicU64>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0usize;
    while let Ok(k) = stream.read(&mut buf).await {
        if k == 0 {
            break;
        }
        total += k;
        seen.store((total / frame_len) as u64, Ordering::Relaxed);
    }
}

/// The floor's writer for one subscriber: whatever is queued (≤ 32 KiB) leaves in one write;
/// a receiver that lags counts as lost and stops.
pub async fn floor_writer(
    mut server: TcpStream,
    mut rx: broadcast::Receiver<Bytes>,
    lost: Arc<AtomicU64>,
) {
    let mut buf = BytesMut::with_capacity(32 * 1024);
    loop {
        match rx.recv().await {
            Ok(b) => buf.extend_from_slice(&b),
            Err(broadcast::error::RecvError::Lagged(_)) => {
                lost.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
        while buf.len() < 32 * 1024 {
            match rx.try_recv() {
                Ok(b) => buf.extend_from_slice(&b),
                Err(_) => break,
            }
        }
        if server.write_all(&buf).await.is_err() {
            return;
        }
        buf.clear();
    }
}

/// Ours, server side only: `n` raw Unix-socket subscribers that send `hello` and one
/// `subscribe` request by hand and then only count frames (length headers), without
/// decoding. Isolates what the server (and kernel) spend per delivery from client decoding.
pub async fn ours_raw(
    srv: &OursServer,
    n: usize,
    run: u64,
    plan: &Plan,
) -> Result<FanResult, ProcError> {
    use baton_protocol::chord::ControlCall;
    use baton_protocol::{ClientMessage, Id, Request, Target, encode_frame};
    use tokio::net::UnixStream;

    let key = run.to_string();
    let service = format!("bench.stream.{key}");
    let server_id = srv.server.server_id().clone();
    let mut tasks = Vec::with_capacity(n);
    let mut counts = Vec::with_capacity(n);
    for i in 0..n {
        let mut s = UnixStream::connect(&srv.unix).await.expect("connect");
        let hello = encode_frame(&ClientMessage::hello(), 1 << 24).expect("hello");
        let sub = ClientMessage::Request(Request {
            id: Id::new(format!("r{i}")).expect("id"),
            target: Target::Server(server_id.clone()),
            call: ControlCall::subscribe(format!("s{i}"), service.clone(), ServiceMode::Singleton)
                .to_value(),
        });
        let sub = encode_frame(&sub, 1 << 24).expect("subscribe");
        s.write_all(&hello).await.expect("write");
        s.write_all(&sub).await.expect("write");
        let seen = Arc::new(AtomicU64::new(0));
        let c = Arc::clone(&seen);
        tasks.push(tokio::spawn(async move {
            // Frames: hello, subscribe response, then updates. Count updates.
            let mut buf = vec![0u8; 64 * 1024];
            let (mut have, mut frames) = (0usize, 0u64);
            loop {
                let k = match s.read(&mut buf[have..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => k,
                };
                have += k;
                let mut at = 0;
                while have - at >= 4 {
                    let len = u32::from_be_bytes(buf[at..at + 4].try_into().expect("4")) as usize;
                    if have - at < 4 + len {
                        break;
                    }
                    at += 4 + len;
                    frames += 1;
                }
                if at == 0 && have == buf.len() {
                    buf.resize(buf.len() * 2, 0);
                }
                buf.copy_within(at..have, 0);
                have -= at;
                c.store(frames.saturating_sub(2), Ordering::Relaxed);
            }
        }));
        counts.push(seen);
    }
    let measured = publish_paced(srv, &key, n, &counts, &tasks, plan).await;
    srv.host.forget(&key);
    let ((per_sec, cpu_per_m, instr_per_delivery), resets) = measured?;
    Ok(FanResult {
        per_sec,
        cpu_per_m,
        lost: resets,
        instr_per_delivery,
    })
}
