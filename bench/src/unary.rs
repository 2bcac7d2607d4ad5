//! Unary round trips: ours (Unix, TCP, TLS via `baton_client::Client::request`), the floor
//! (bare tokio `LengthDelimitedCodec` echo over TCP and Unix), tarpc (bincode over TCP),
//! jsonrpsee (WebSocket over TCP) and tonic (gRPC over HTTP/2 on TCP, `grpc.rs`). 64-byte
//! payload; TCP_NODELAY on every TCP socket.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use baton_client::{Client, ClientConfig, Endpoint, TlsOptions};
use baton_protocol::chord::ServiceCall;
use baton_protocol::{Target, Value};
use bytes::Bytes;
use futures::{FutureExt, SinkExt, StreamExt};
use jsonrpsee::core::client::ClientT;
use jsonrpsee::core::params::ArrayParams;
use jsonrpsee_ws_client::{WsClient, WsClientBuilder};
use tarpc::tokio_serde::formats::Bincode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::counters;
use crate::figure::Measured;
use crate::grpc::{EchoRequest as GrpcEchoRequest, GrpcClient};
use crate::jsonrpc::JsonServer;
use crate::ours::OursServer;
use crate::procfs::{self, ProcError, Process};
use crate::util::{Plan, quantile};

/// The 64-byte payload (a 64-character string for the string-typed peers).
pub const PAYLOAD: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// tarpc's echo service.
#[tarpc::service]
pub trait Echo {
    /// Returns `payload`.
    async fn echo(payload: Vec<u8>) -> Vec<u8>;
}

#[derive(Clone)]
struct EchoServer;

impl Echo for EchoServer {
    async fn echo(self, _: tarpc::context::Context, payload: Vec<u8>) -> Vec<u8> {
        crate::loaded::seen(&payload);
        payload
    }
}

/// One sequential run: latencies in µs, sorted.
#[derive(Debug, Clone, Default)]
pub struct SeqResult {
    /// p50 µs.
    pub p50: f64,
    /// p99 µs.
    pub p99: f64,
}

/// One pipelined run.
#[derive(Debug, Clone, Default)]
pub struct PipeResult {
    /// Requests per second.
    pub rps: f64,
    /// CPU µs (client + server, whole process) per request.
    pub cpu_us: f64,
    /// Instructions (whole process) per request, from hardware counters.
    pub instr: Measured<f64>,
}

/// A client handle of one implementation (cheap to clone for pipelining, except the floor).
#[derive(Clone)]
pub enum Handle {
    /// baton over any transport.
    Ours(Client, Target, Value),
    /// tarpc client.
    Tarpc(EchoClient, Vec<u8>),
    /// jsonrpsee WebSocket client.
    Json(Arc<WsClient>),
    /// tonic client (clones share its one HTTP/2 connection).
    Tonic(GrpcClient, Vec<u8>),
}

impl Handle {
    /// One echo round trip.
    pub async fn call(&self) {
        match self {
            Self::Ours(c, t, v) => {
                let r = c.request(t.clone(), v.clone()).await.expect("baton echo");
                debug_assert!(matches!(r, baton_client::Reply::Value(_)));
            }
            Self::Tarpc(c, p) => {
                let r = c
                    .echo(tarpc::context::current(), p.clone())
                    .await
                    .expect("tarpc echo");
                debug_assert_eq!(r.len(), 64);
            }
            Self::Json(c) => {
                let mut p = ArrayParams::new();
                p.insert(PAYLOAD).expect("params");
                let r: String = c.request("echo", p).await.expect("jsonrpsee echo");
                debug_assert_eq!(r.len(), 64);
            }
            Self::Tonic(c, p) => {
                // The generated client takes `&mut self`; a clone is the documented way to
                // issue concurrent calls on one channel.
                let r = c
                    .clone()
                    .echo(GrpcEchoRequest { payload: p.clone() })
                    .await
                    .expect("tonic echo");
                debug_assert_eq!(r.into_inner().payload.len(), 64);
            }
        }
    }
}

/// Every implementation's client, connected once and reused across rounds.
pub struct Clients {
    /// (name, handle) for the request/response peers, in table order.
    pub handles: Vec<(&'static str, Handle)>,
    /// Floor over TCP (sequential connection, pipelined connection).
    pub floor_tcp: (
        Framed<TcpStream, LengthDelimitedCodec>,
        Option<Framed<TcpStream, LengthDelimitedCodec>>,
    ),
    /// Floor over Unix.
    pub floor_unix: (
        Framed<UnixStream, LengthDelimitedCodec>,
        Option<Framed<UnixStream, LengthDelimitedCodec>>,
    ),
    /// Where the TCP servers listen (the scale curve opens connections of its own).
    pub addrs: Addrs,
}

/// The TCP addresses of the unary servers.
#[derive(Debug, Clone, Copy)]
pub struct Addrs {
    /// ours (baton over TCP).
    pub ours_tcp: SocketAddr,
    /// The floor echo.
    pub floor_tcp: SocketAddr,
    /// tarpc.
    pub tarpc: SocketAddr,
    /// tonic.
    pub tonic: SocketAddr,
}

/// A baton client over TCP to `addr`, set up for `bench.echo`.
pub async fn connect_ours_tcp(addr: SocketAddr) -> Result<Handle, Box<dyn std::error::Error>> {
    let config = ClientConfig::new(Endpoint::Tcp {
        host: addr.ip().to_string(),
        port: addr.port(),
    });
    let c = Client::connect(config).await?;
    let t = c.server_target();
    Ok(Handle::Ours(c, t, ours_call()))
}

/// A tarpc client on its own TCP connection to `addr`.
pub async fn connect_tarpc(addr: SocketAddr) -> Result<Handle, Box<dyn std::error::Error>> {
    let ts = TcpStream::connect(addr).await?;
    ts.set_nodelay(true)?;
    let t = tarpc::serde_transport::new(Framed::new(ts, codec()), Bincode::default());
    let tc = EchoClient::new(tarpc::client::Config::default(), t).spawn();
    Ok(Handle::Tarpc(tc, PAYLOAD.as_bytes().to_vec()))
}

/// A tonic client on its own HTTP/2 connection to `addr`.
pub async fn connect_tonic(addr: SocketAddr) -> Result<Handle, Box<dyn std::error::Error>> {
    Ok(Handle::Tonic(
        crate::grpc::connect(addr).await?,
        PAYLOAD.as_bytes().to_vec(),
    ))
}

/// A floor connection over TCP to `addr`.
pub async fn connect_floor_tcp(
    addr: SocketAddr,
) -> std::io::Result<Framed<TcpStream, LengthDelimitedCodec>> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(Framed::new(s, codec()))
}

fn ours_call() -> Value {
    ServiceCall::new("bench", "echo", vec![Value::from(PAYLOAD)]).into_value()
}

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(16 << 20)
        .new_codec()
}

async fn floor_serve<S: AsyncRead + AsyncWrite + Unpin>(s: S) {
    let (mut sink, mut stream) = Framed::new(s, codec()).split();
    // Feeds while requests are ready, flushes when the reader would block.
    let mut echoes = stream.by_ref().map(|r| r.map(bytes::BytesMut::freeze));
    let _ = sink.send_all(&mut echoes).await;
}

/// Starts the floor's TCP echo server on a loopback port.
pub async fn start_floor_tcp() -> std::io::Result<SocketAddr> {
    let floor_l = TcpListener::bind("127.0.0.1:0").await?;
    let floor_addr = floor_l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = floor_l.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(floor_serve(s));
        }
    });
    Ok(floor_addr)
}

/// Starts tarpc's echo server on a loopback port: one task per request, the idiomatic
/// `execute(..).for_each(spawn)`.
pub async fn start_tarpc() -> std::io::Result<SocketAddr> {
    let tarpc_l = TcpListener::bind("127.0.0.1:0").await?;
    let tarpc_addr = tarpc_l.local_addr()?;
    tokio::spawn(async move {
        use tarpc::server::Channel;
        while let Ok((s, _)) = tarpc_l.accept().await {
            let _ = s.set_nodelay(true);
            let t = tarpc::serde_transport::new(Framed::new(s, codec()), Bincode::default());
            let ch = tarpc::server::BaseChannel::with_defaults(t);
            tokio::spawn(ch.execute(EchoServer.serve()).for_each(|f| async move {
                tokio::spawn(f);
            }));
        }
    });
    Ok(tarpc_addr)
}

/// Starts the floor servers (TCP, Unix), tarpc and tonic; connects every client (to `ours`
/// and `json` too).
pub async fn setup(
    ours: &OursServer,
    json: &JsonServer,
    dir: &Path,
) -> Result<Clients, Box<dyn std::error::Error>> {
    let floor_addr = start_floor_tcp().await?;
    // Floor, Unix.
    let floor_path = dir.join("floor.sock");
    let _ = std::fs::remove_file(&floor_path);
    let floor_ul = UnixListener::bind(&floor_path)?;
    tokio::spawn(async move {
        while let Ok((s, _)) = floor_ul.accept().await {
            tokio::spawn(floor_serve(s));
        }
    });
    let tarpc_addr = start_tarpc().await?;
    let tonic_addr = crate::grpc::start()?;

    let ours_call = ours_call();
    let mut handles = Vec::new();
    for (name, endpoint) in [
        ("ours unix", Endpoint::Unix(ours.unix.clone())),
        (
            "ours tcp",
            Endpoint::Tcp {
                host: "127.0.0.1".into(),
                port: ours.tcp_port,
            },
        ),
        (
            "ours tls",
            Endpoint::Tls {
                host: "localhost".into(),
                port: ours.tls_port,
            },
        ),
    ] {
        let mut config = ClientConfig::new(endpoint);
        config.tls = TlsOptions {
            ca_file: Some(ours.ca_file.clone()),
            ..TlsOptions::default()
        };
        let c = Client::connect(config).await?;
        let t = c.server_target();
        handles.push((name, Handle::Ours(c, t, ours_call.clone())));
    }
    handles.push(("tarpc", connect_tarpc(tarpc_addr).await?));
    handles.push(("tonic", connect_tonic(tonic_addr).await?));
    let jc = WsClientBuilder::default()
        .set_tcp_no_delay(true)
        .build(format!("ws://{}", json.addr()))
        .await?;
    handles.push(("jsonrpsee", Handle::Json(Arc::new(jc))));

    let tcp = connect_floor_tcp;
    let unix = |p: std::path::PathBuf| async move {
        Ok::<_, std::io::Error>(Framed::new(UnixStream::connect(p).await?, codec()))
    };
    Ok(Clients {
        handles,
        floor_tcp: (tcp(floor_addr).await?, Some(tcp(floor_addr).await?)),
        floor_unix: (
            unix(floor_path.clone()).await?,
            Some(unix(floor_path).await?),
        ),
        addrs: Addrs {
            ours_tcp: SocketAddr::from(([127, 0, 0, 1], ours.tcp_port)),
            floor_tcp: floor_addr,
            tarpc: tarpc_addr,
            tonic: tonic_addr,
        },
    })
}

/// Sequential round trips with a peer handle.
pub async fn seq_handle(h: &Handle, plan: &Plan) -> SeqResult {
    for _ in 0..plan.seq_warmup {
        h.call().await;
    }
    let mut lat = Vec::with_capacity(plan.seq_requests);
    for _ in 0..plan.seq_requests {
        let t = Instant::now();
        h.call().await;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    summarize(lat)
}

/// Sequential round trips on the floor.
pub async fn seq_floor<S: AsyncRead + AsyncWrite + Unpin>(
    f: &mut Framed<S, LengthDelimitedCodec>,
    plan: &Plan,
) -> SeqResult {
    let payload = Bytes::from_static(PAYLOAD.as_bytes());
    let once = async |f: &mut Framed<S, LengthDelimitedCodec>| {
        f.send(payload.clone()).await.expect("floor send");
        let r = f.next().await.expect("floor eof").expect("floor read");
        debug_assert_eq!(r.len(), 64);
    };
    for _ in 0..plan.seq_warmup {
        once(f).await;
    }
    let mut lat = Vec::with_capacity(plan.seq_requests);
    for _ in 0..plan.seq_requests {
        let t = Instant::now();
        once(f).await;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    summarize(lat)
}

fn summarize(mut lat: Vec<f64>) -> SeqResult {
    lat.sort_by(f64::total_cmp);
    SeqResult {
        p50: quantile(&lat, 0.5),
        p99: quantile(&lat, 0.99),
    }
}

/// Counts completions of running work over the plan's warm-up + window; then sets `stop`
/// (also when a CPU reading fails, so the work ends either way).
async fn window(
    count: &AtomicU64,
    stop: &AtomicBool,
    plan: &Plan,
) -> Result<PipeResult, ProcError> {
    tokio::time::sleep(plan.pipe_warmup).await;
    let instr = counters::Window::open();
    let first = procfs::cpu_secs(Process::This);
    let (c0, t0) = (count.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(plan.pipe_window).await;
    let (c1, dt) = (count.load(Ordering::Relaxed), t0.elapsed());
    let last = procfs::cpu_secs(Process::This);
    let instr = instr.close();
    stop.store(true, Ordering::Relaxed);
    let (cpu0, cpu1) = (first?, last?);
    let n = (c1 - c0) as f64;
    Ok(PipeResult {
        rps: n / dt.as_secs_f64(),
        cpu_us: (cpu1 - cpu0) / n * 1e6,
        instr: instr.map(|i| i / n),
    })
}

/// Pipelined: `plan.window` call loops joined in one task on the one connection.
pub async fn pipe_handle(h: &Handle, plan: &Plan) -> Result<PipeResult, ProcError> {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let task = spawn_call_loops(h, plan.window, &count, &stop);
    let r = window(&count, &stop, plan).await;
    let _ = task.await;
    r
}

/// `n` call loops on `h`, joined in one task, counting into `count` until `stop`.
pub fn spawn_call_loops(
    h: &Handle,
    n: usize,
    count: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let loops: Vec<_> = (0..n)
        .map(|_| {
            let (h, count, stop) = (h.clone(), Arc::clone(count), Arc::clone(stop));
            async move {
                while !stop.load(Ordering::Relaxed) {
                    h.call().await;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .collect();
    tokio::spawn(async move {
        futures::future::join_all(loops).await;
    })
}

/// Pipelined floor: one task keeps `plan.window` requests outstanding, feeds one request per
/// response and flushes only when no further response is immediately readable.
pub async fn pipe_floor<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    f: Framed<S, LengthDelimitedCodec>,
    plan: &Plan,
) -> (
    Result<PipeResult, ProcError>,
    Framed<S, LengthDelimitedCodec>,
) {
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let task = spawn_floor_loop(f, plan.window, &count, &stop);
    let r = window(&count, &stop, plan).await;
    let f = task.await.expect("floor task");
    tokio::time::sleep(Duration::from_millis(1)).await;
    (r, f)
}

/// The floor's pipelining client on `f`: one task keeps `n` requests outstanding, counting
/// into `count` until `stop`; returns the connection when every response is in.
pub fn spawn_floor_loop<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut f: Framed<S, LengthDelimitedCodec>,
    n: usize,
    count: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Framed<S, LengthDelimitedCodec>> {
    {
        let (count, stop) = (Arc::clone(count), Arc::clone(stop));
        tokio::spawn(async move {
            let payload = Bytes::from_static(PAYLOAD.as_bytes());
            for _ in 0..n {
                f.feed(payload.clone()).await.expect("feed");
            }
            SinkExt::<Bytes>::flush(&mut f).await.expect("flush");
            let mut outstanding = n;
            while outstanding > 0 {
                let _ = f.next().await.expect("eof").expect("read");
                outstanding -= 1;
                count.fetch_add(1, Ordering::Relaxed);
                if !stop.load(Ordering::Relaxed) {
                    f.feed(payload.clone()).await.expect("feed");
                    outstanding += 1;
                }
                // Drain whatever is already readable before flushing.
                while outstanding > 0 {
                    match f.next().now_or_never() {
                        Some(Some(Ok(_))) => {
                            outstanding -= 1;
                            count.fetch_add(1, Ordering::Relaxed);
                            if !stop.load(Ordering::Relaxed) {
                                f.feed(payload.clone()).await.expect("feed");
                                outstanding += 1;
                            }
                        }
                        _ => break,
                    }
                }
                SinkExt::<Bytes>::flush(&mut f).await.expect("flush");
            }
            f
        })
    }
}
