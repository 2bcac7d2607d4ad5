//! `baton-host serve` with a web listener, as a process: the page and the checks over real
//! HTTP, a guessed code and cookie refused by the link store, plain http off loopback
//! refused, and the connection limit flag.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

use std::path::Path;

use baton_protocol::codec::{ServerMessageDecoder, encode_frame};
use baton_protocol::{ClientMessage, ServerMessage};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::process::Command;

use common::state::guard;
use common::{HOST, HostProcess, run};

/// The binaries, the host process and the hang-guarded runner.
mod common;

/// One raw HTTP exchange (`Connection: close`): the status line, headers and body as text.
async fn http(base: &str, request: &str) -> String {
    let addr = base.strip_prefix("http://").unwrap();
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    guard("http response", tcp.read_to_string(&mut out))
        .await
        .unwrap();
    out
}

async fn serve_web(dir: &Path, extra: &[&str]) -> (HostProcess, String) {
    let sock = format!("unix://{}", dir.join("sock").display());
    let sessions = dir.join("sessions").display().to_string();
    let mut args = vec![
        "--listen",
        &sock,
        "--listen",
        "http://127.0.0.1:0",
        "--sessions-dir",
        &sessions,
    ];
    args.extend(extra);
    let mut host = HostProcess::start(&args, &[]).await;
    let line = guard("web listener line", host.lines.next_line())
        .await
        .unwrap()
        .unwrap();
    let base = line
        .strip_prefix("web listener on ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    (host, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_web_listener_serves_the_page_and_refuses_a_guessed_code_and_cookie() {
    let dir = tempfile::tempdir().unwrap();
    let (host, base) = serve_web(dir.path(), &[]).await;
    let authority = base.strip_prefix("http://").unwrap();
    let page = http(
        &base,
        &format!("GET / HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("content-security-policy: default-src 'none'; script-src 'self'"));
    assert!(page.contains("referrer-policy: no-referrer"));
    let body = r#"{"code":"anything"}"#;
    let pair = http(
        &base,
        &format!(
            "POST /pair HTTP/1.1\r\nHost: {authority}\r\nOrigin: {base}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(pair.starts_with("HTTP/1.1 403"), "{pair}");
    assert!(pair.ends_with(r#"{"error":"unknown link"}"#), "{pair}");
    let ws = http(
        &base,
        &format!(
            "GET /ws HTTP/1.1\r\nHost: {authority}\r\nOrigin: {base}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nCookie: baton_web=guess\r\n\r\n"
        ),
    )
    .await;
    assert!(ws.starts_with("HTTP/1.1 403"), "{ws}");
    assert!(host.terminate().await.success());
}

#[tokio::test]
async fn plain_http_off_loopback_is_refused_without_allow_insecure_remote() {
    let dir = tempfile::tempdir().unwrap();
    let (status, out, err) = run(
        "serve",
        Command::new(HOST).args([
            "serve",
            "--listen",
            "http://0.0.0.0:0",
            "--sessions-dir",
            &dir.path().join("sessions").display().to_string(),
        ]),
    )
    .await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(out, "");
    assert!(
        err.contains(
            "http://0.0.0.0:0: plain http off loopback sends browser cookies in the clear"
        ),
        "{err}"
    );
}

async fn send_hello(sock: &mut UnixStream) {
    let frame = encode_frame(&ClientMessage::hello(), u32::MAX).unwrap();
    sock.write_all(&frame).await.unwrap();
}

async fn recv(sock: &mut UnixStream) -> ServerMessage {
    let mut decoder = ServerMessageDecoder::new(u32::MAX);
    let mut buf = vec![0u8; 4096];
    loop {
        let n = guard("server frame", sock.read(&mut buf)).await.unwrap();
        assert_ne!(n, 0, "closed before a frame");
        if let Some(m) = decoder.push(&buf[..n]).unwrap().into_iter().next() {
            return m;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_refuses_the_connection_beyond_it_with_busy() {
    let dir = tempfile::tempdir().unwrap();
    let (host, _base) = serve_web(dir.path(), &["--max-connections", "1"]).await;
    let mut first = UnixStream::connect(host.socket()).await.unwrap();
    send_hello(&mut first).await;
    assert!(matches!(
        recv(&mut first).await,
        ServerMessage::Hello { .. }
    ));
    let mut second = UnixStream::connect(host.socket()).await.unwrap();
    send_hello(&mut second).await;
    match recv(&mut second).await {
        ServerMessage::HelloError(e) => {
            assert_eq!(e.code.as_str(), "busy");
            assert_eq!(e.message, "Server connection limit of 1 reached");
        }
        other => panic!("expected busy, got {other:?}"),
    }
    drop(first);
    assert!(host.terminate().await.success());
}

#[tokio::test]
async fn a_malformed_web_host_is_refused_in_one_line_before_anything_listens() {
    let dir = tempfile::tempdir().unwrap();
    let sock_dir = dir.path().join("sock");
    let (status, out, err) = run(
        "serve",
        Command::new(HOST).args([
            "serve",
            "--listen",
            &format!("unix://{}", sock_dir.display()),
            "--listen",
            "http://127.0.0.1:0",
            "--web-host",
            "a b",
            "--sessions-dir",
            &dir.path().join("sessions").display().to_string(),
        ]),
    )
    .await;
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(out, "");
    assert_eq!(
        err.trim_end(),
        "baton-host: --web-host \"a b\": expected a host name or IP address with an optional :PORT",
        "one line, nothing else"
    );
    assert!(
        !sock_dir.exists(),
        "refused before the server made its socket directory"
    );
}
