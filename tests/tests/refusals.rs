//! Refusals arrive: a connection the server refuses before serving it (over `max_connections`)
//! reads its `hello_error` and then a clean end of stream, even when it had already written
//! its hello (and more) — never a reset because the server closed with unread input.
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io;

use baton_protocol::codec::ServerMessageDecoder;
use baton_protocol::{ClientMessage, ServerMessage, WireError};
use baton_tests::host::TestHost;
use baton_tests::peer::RawPeer;
use baton_tests::server::{TestServer, config};
use baton_tests::{HANG_GUARD, guard};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;

/// What one refused client saw.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// `hello_error` frames, then a clean end of stream.
    Refused(Vec<ServerMessage>),
    /// A write or read failed (a reset, a broken pipe), after these frames.
    Failed(io::ErrorKind, Vec<ServerMessage>),
}

/// Writes the hello and `extra` more bytes at once (without waiting for the server), then
/// reads to the end.
async fn refused_client<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, extra: usize) -> Seen {
    let mut out = RawPeer::frame(&ClientMessage::hello());
    // More hellos: well-formed input a client might still be sending when it is refused.
    let more = RawPeer::frame(&ClientMessage::hello());
    while out.len() < extra {
        out.extend_from_slice(&more);
    }
    let mut decoder = ServerMessageDecoder::new(u32::MAX);
    let mut frames = Vec::new();
    if let Err(e) = s.write_all(&out).await {
        return Seen::Failed(e.kind(), frames);
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match tokio::time::timeout(HANG_GUARD, s.read(&mut buf)).await {
            Err(_) => panic!("refused client hung"),
            Ok(Err(e)) => return Seen::Failed(e.kind(), frames),
            Ok(Ok(n)) => n,
        };
        if n == 0 {
            return Seen::Refused(frames);
        }
        frames.extend(decoder.push(&buf[..n]).unwrap());
    }
}

fn busy(limit: usize) -> Seen {
    Seen::Refused(vec![ServerMessage::HelloError(WireError::new(
        "busy",
        format!("Server connection limit of {limit} reached"),
    ))])
}

/// Fills the server to `limit`, then opens `over` more connections at once; every third one
/// writes 32 KiB of hellos behind its first. Returns what each refused client saw.
async fn flood(s: &TestServer, limit: usize, over: usize) -> Vec<Seen> {
    let mut admitted = Vec::new();
    for _ in 0..limit {
        admitted.push(s.ready_peer().await);
    }
    let path = s.socket_path();
    let mut clients = JoinSet::new();
    for i in 0..over {
        let path = path.clone();
        clients.spawn(async move {
            let extra = if i % 3 == 0 { 32 * 1024 } else { 0 };
            match tokio::net::UnixStream::connect(&path).await {
                Ok(stream) => refused_client(stream, extra).await,
                Err(e) => Seen::Failed(e.kind(), Vec::new()),
            }
        });
    }
    let seen = guard("refused clients", clients.join_all()).await;
    drop(admitted);
    seen
}

fn failures(seen: &[Seen], limit: usize) -> Vec<&Seen> {
    let busy = busy(limit);
    seen.iter().filter(|s| **s != busy).collect()
}

/// A small limit and 200 refused clients at once (within the 256 refusals the server carries
/// out at a time): each one reads `busy` and a clean close. Before refusals read and
/// discarded the client's input, every one of them saw `ECONNRESET` or `EPIPE` (300 of 300).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_over_the_limit_reads_busy_and_a_clean_close() {
    let limit = 4;
    let mut c = config();
    c.max_connections = limit;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let seen = flood(&s, limit, 200).await;
    let failed = failures(&seen, limit);
    assert!(
        failed.is_empty(),
        "{} of {} refused clients did not read busy and a clean close; first: {:?}",
        failed.len(),
        seen.len(),
        failed.first()
    );
}

/// The figure: 1,200 concurrent Unix connections against the default limit of 1,024.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_hundred_connections_against_the_default_limit_of_1024() {
    let c = config();
    let limit = c.max_connections;
    assert_eq!(limit, 1024);
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let seen = flood(&s, limit, 1200 - limit).await;
    let failed = failures(&seen, limit);
    assert!(
        failed.is_empty(),
        "{} of {} refused clients did not read busy and a clean close; first: {:?}",
        failed.len(),
        seen.len(),
        failed.first()
    );
}

/// A client that writes far more than the server discards is still told `busy` first; what
/// it sees after the frame may be a reset (the server stops reading at its bound), but the
/// refusal is never lost and the server keeps serving.
#[tokio::test]
async fn a_refused_client_that_keeps_writing_cannot_hold_the_server() {
    let mut c = config();
    c.max_connections = 1;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let first = s.ready_peer().await;
    let mut hog = tokio::net::UnixStream::connect(s.socket_path())
        .await
        .unwrap();
    hog.write_all(&RawPeer::frame(&ClientMessage::hello()))
        .await
        .unwrap();
    // Keep writing until the server stops taking it; the refusal must still be readable.
    let chunk = vec![0u8; 64 * 1024];
    let writing = async {
        loop {
            if hog.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    guard("the server to stop reading the refused client", writing).await;
    let mut buf = vec![0u8; 1024];
    let n = hog.read(&mut buf).await.unwrap();
    let frames = ServerMessageDecoder::new(u32::MAX).push(&buf[..n]).unwrap();
    assert_eq!(
        frames,
        [ServerMessage::HelloError(WireError::new(
            "busy",
            "Server connection limit of 1 reached"
        ))]
    );
    drop(first);
    let mut next = guard("a slot", async {
        loop {
            let mut p = s.connect().await;
            p.send(&ClientMessage::hello()).await;
            if let ServerMessage::Hello { .. } = p.recv().await {
                return p;
            }
        }
    })
    .await;
    next.shutdown().await;
}

/// Over plain TCP too: a reset there is an RST that can destroy the frame in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_every_refused_connection_reads_busy_and_a_clean_close() {
    let limit = 2;
    let mut c = config();
    c.max_connections = limit;
    let s = TestServer::tcp(TestHost::new(&[]), c).await;
    let mut admitted = Vec::new();
    for _ in 0..limit {
        admitted.push(s.ready_peer().await);
    }
    let addr = s.addr();
    let mut clients = JoinSet::new();
    for i in 0..100 {
        clients.spawn(async move {
            let extra = if i % 3 == 0 { 32 * 1024 } else { 0 };
            match tokio::net::TcpStream::connect(addr).await {
                Ok(stream) => refused_client(stream, extra).await,
                Err(e) => Seen::Failed(e.kind(), Vec::new()),
            }
        });
    }
    let seen = guard("refused clients", clients.join_all()).await;
    let failed = failures(&seen, limit);
    assert!(
        failed.is_empty(),
        "{} of {}: {:?}",
        failed.len(),
        seen.len(),
        failed.first()
    );
}

/// A `hello_error` after a protocol error (here: a first message that is not `hello`, with
/// 32 KiB more behind it) also arrives, followed by a clean close.
#[tokio::test]
async fn a_protocol_error_with_more_input_behind_it_reads_its_hello_error_and_a_clean_close() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    for transport in ["unix", "tcp"] {
        let request = ClientMessage::Request(baton_protocol::Request {
            id: baton_tests::peer::id("r1"),
            target: baton_protocol::Target::Server(baton_tests::server_id()),
            call: baton_tests::peer::call("test", "echo", vec![]),
        });
        let mut out = RawPeer::frame(&request);
        while out.len() < 32 * 1024 {
            out.extend_from_slice(&RawPeer::frame(&request));
        }
        let seen = match transport {
            "unix" => {
                let stream = tokio::net::UnixStream::connect(s.socket_path())
                    .await
                    .unwrap();
                written_then_read(stream, &out).await
            }
            _ => {
                let t = TestServer::tcp(TestHost::new(&[]), config()).await;
                let stream = tokio::net::TcpStream::connect(t.addr()).await.unwrap();
                written_then_read(stream, &out).await
            }
        };
        assert_eq!(
            seen,
            Seen::Refused(vec![ServerMessage::HelloError(WireError::new(
                "invalid_request",
                "The first client message must be hello"
            ))]),
            "{transport}"
        );
    }
}

async fn written_then_read<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, out: &[u8]) -> Seen {
    if let Err(e) = s.write_all(out).await {
        return Seen::Failed(e.kind(), Vec::new());
    }
    let mut decoder = ServerMessageDecoder::new(u32::MAX);
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match guard("the server's answer", s.read(&mut buf)).await {
            Err(e) => return Seen::Failed(e.kind(), frames),
            Ok(0) => return Seen::Refused(frames),
            Ok(n) => frames.extend(decoder.push(&buf[..n]).unwrap()),
        }
    }
}
