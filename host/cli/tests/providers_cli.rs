//! `baton-host serve` with each real model provider kind (OpenAI-compatible Chat Completions,
//! Anthropic Messages), driven through the real `baton` CLI against fake model servers on
//! 127.0.0.1 over HTTPS (a CA made at test start): a prompt, a tool call, an error naming the
//! endpoint, and Ctrl-C aborting a turn mid-reply.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use common::state::guard;
use common::{HostProcess, baton, cli};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The variable the host reads the API key from, and the key.
const KEY_ENV: &str = "BATON_PROVIDERS_CLI_TEST_KEY";
const KEY: &str = "sk-test-0123456789-secret";

/// One scripted answer of the fake model server.
enum Reply {
    /// 200 `text/event-stream` with these SSE pieces, then the end of the body.
    Stream(Vec<String>),
    /// 200 `text/event-stream` with these pieces, then the connection stays open (until the
    /// client closes it); the server reports on `held` once the pieces are written.
    Hold(Vec<String>, mpsc::UnboundedSender<()>),
    /// A JSON error answer.
    Status(u16, &'static str),
}

/// `data:` events (Chat Completions).
fn data(payloads: &[&str]) -> Vec<String> {
    payloads.iter().map(|p| format!("data: {p}\n\n")).collect()
}

/// Named events (Messages: `event: <type>` + `data:`); `ty` is each payload's `type`.
fn events(payloads: &[(&str, &str)]) -> Vec<String> {
    payloads
        .iter()
        .map(|(ty, p)| format!("event: {ty}\ndata: {p}\n\n"))
        .collect()
}

/// One request the fake server received.
#[derive(Debug, Clone)]
struct Recorded {
    head: String,
    body: String,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }
}

/// An HTTPS model server on 127.0.0.1 answering each connection with the next reply.
struct FakeModel {
    /// `https://127.0.0.1:PORT/v1`.
    base_url: String,
    ca_file: PathBuf,
    requests: Arc<Mutex<Vec<Recorded>>>,
    /// The accept loop; dropping the set aborts it, and with it every connection it serves.
    _task: JoinSet<()>,
}

impl FakeModel {
    async fn start(dir: &Path, replies: Vec<Reply>) -> Self {
        let (config, ca_pem) = tls_config();
        let ca_file = dir.join("model-ca.pem");
        std::fs::write(&ca_file, ca_pem).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&requests);
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let mut task = JoinSet::new();
        task.spawn(async move {
            let mut connections = JoinSet::new();
            let mut replies = replies.into_iter();
            while let Ok((tcp, _)) = listener.accept().await {
                let reply = replies.next();
                let record = Arc::clone(&record);
                let acceptor = acceptor.clone();
                connections.spawn(async move {
                    // A connection that is not TLS never reaches `serve`, so is never recorded.
                    if let Ok(conn) = acceptor.accept(tcp).await {
                        serve(conn, reply, &record).await;
                    }
                });
            }
        });
        Self {
            base_url: format!("https://{addr}/v1"),
            ca_file,
            requests,
            _task: task,
        }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    reply: Option<Reply>,
    record: &Mutex<Vec<Recorded>>,
) {
    let Some((head, body)) = read_request(&mut conn).await else {
        return;
    };
    record.lock().unwrap().push(Recorded { head, body });
    let (pieces, held) = match reply {
        None => return,
        Some(Reply::Status(code, body)) => {
            let head = format!(
                "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.flush().await;
            let _ = conn.shutdown().await;
            return;
        }
        Some(Reply::Stream(pieces)) => (pieces, None),
        Some(Reply::Hold(pieces, held)) => (pieces, Some(held)),
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    if conn.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for p in pieces {
        let chunk = format!("{:x}\r\n{p}\r\n", p.len());
        if conn.write_all(chunk.as_bytes()).await.is_err() {
            return;
        }
        let _ = conn.flush().await;
    }
    match held {
        None => {
            let _ = conn.write_all(b"0\r\n\r\n").await;
            let _ = conn.flush().await;
            let _ = conn.shutdown().await;
        }
        Some(held) => {
            let _ = held.send(());
            // Mid-reply until the client goes away.
            let mut sink = [0u8; 1024];
            while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {}
        }
    }
}

async fn read_request<S: AsyncRead + Unpin>(conn: &mut S) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())
                .flatten()
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + len]).into_owned();
    Some((head, body))
}

/// A server config for 127.0.0.1 signed by a fresh CA, and the CA's PEM.
fn tls_config() -> (Arc<rustls::ServerConfig>, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "baton providers_cli test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut server = CertificateParams::default();
    server.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().unwrap();
    let server_cert = server.signed_by(&server_key, &issuer).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(server_cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )
        .unwrap();
    (Arc::new(config), ca_cert.pem())
}

/// `baton-host serve --model KIND:MODEL --base-url … --api-key-env … --ca-file …` in `dir`.
async fn host(dir: &Path, model: &str, server: &FakeModel) -> HostProcess {
    HostProcess::start(
        &[
            "--listen",
            &format!("unix://{}", dir.join("sock").display()),
            "--sessions-dir",
            &dir.join("sessions").display().to_string(),
            "--model",
            model,
            "--base-url",
            &server.base_url,
            "--api-key-env",
            KEY_ENV,
            "--ca-file",
            &server.ca_file.display().to_string(),
        ],
        &[(KEY_ENV, Path::new(KEY))],
    )
    .await
}

/// `baton create --cwd DIR` → the new id.
async fn create(url: &str, cwd: &Path) -> String {
    let (status, out, err) = cli(url, &["create", "--cwd", &cwd.display().to_string()]).await;
    assert!(status.success(), "create: {err}");
    let id = out.trim().to_owned();
    assert_eq!(id.len(), 36, "{out:?}");
    id
}

/// A working directory for the session, inside `dir`.
fn workdir(dir: &Path) -> PathBuf {
    let cwd = dir.join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    cwd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_over_https_prompt_streams_the_models_text_with_the_key_as_bearer() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeModel::start(
        dir.path(),
        vec![Reply::Stream(data(&[
            r#"{"id":"chatcmpl-1","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"from the fake model."},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#,
            "[DONE]",
        ]))],
    )
    .await;
    let host = host(dir.path(), "openai:fake-model", &server).await;
    let session = create(&host.url, &workdir(dir.path())).await;

    let (status, out, err) = cli(&host.url, &["prompt", &session, "say", "hello"]).await;
    assert!(status.success(), "prompt: {err}\n{out}");
    assert!(out.contains("Hello from the fake model."), "{out}");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].request_line(), "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(
        reqs[0].header("authorization").as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(
        reqs[0].body.contains(r#""model":"fake-model""#),
        "{}",
        reqs[0].body
    );
    assert!(reqs[0].body.contains("say hello"), "{}", reqs[0].body);
    assert!(!out.contains(KEY) && !err.contains(KEY));
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_tool_call_runs_the_tool_and_the_model_sees_its_result_before_answering() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = workdir(dir.path());
    std::fs::write(cwd.join("note.txt"), "the secret word is pelican\n").unwrap();
    let server = FakeModel::start(
        dir.path(),
        vec![
            Reply::Stream(data(&[
                r#"{"id":"chatcmpl-1","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Reading it."}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"note.txt\"}"}}]},"finish_reason":"tool_calls"}]}"#,
                "[DONE]",
            ])),
            Reply::Stream(data(&[
                r#"{"id":"chatcmpl-2","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"The word is pelican."},"finish_reason":"stop"}]}"#,
                "[DONE]",
            ])),
        ],
    )
    .await;
    let host = host(dir.path(), "openai:fake-model", &server).await;
    let session = create(&host.url, &cwd).await;

    let (status, out, err) = cli(&host.url, &["prompt", &session, "read note.txt"]).await;
    assert!(status.success(), "prompt: {err}\n{out}");
    assert!(out.contains("The word is pelican."), "{out}");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    let second = &reqs[1].body;
    assert!(second.contains(r#""tool_call_id":"call_1""#), "{second}");
    assert!(second.contains("the secret word is pelican"), "{second}");
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_over_https_prompt_runs_a_tool_use_round_and_streams_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = workdir(dir.path());
    std::fs::write(cwd.join("note.txt"), "the secret word is heron\n").unwrap();
    let start = r#"{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-fake","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}"#;
    let server = FakeModel::start(
        dir.path(),
        vec![
            Reply::Stream(events(&[
                ("message_start", start),
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"note.txt\"}"}}"#,
                ),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":0}"#,
                ),
                (
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}"#,
                ),
                ("message_stop", r#"{"type":"message_stop"}"#),
            ])),
            Reply::Stream(events(&[
                ("message_start", start),
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The word "}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"is heron."}}"#,
                ),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":0}"#,
                ),
                (
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}"#,
                ),
                ("message_stop", r#"{"type":"message_stop"}"#),
            ])),
        ],
    )
    .await;
    let host = host(dir.path(), "anthropic:claude-fake", &server).await;
    let session = create(&host.url, &cwd).await;

    let (status, out, err) = cli(&host.url, &["prompt", &session, "read note.txt"]).await;
    assert!(status.success(), "prompt: {err}\n{out}");
    assert!(out.contains("The word is heron."), "{out}");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0].request_line(), "POST /v1/messages HTTP/1.1");
    assert_eq!(reqs[0].header("x-api-key").as_deref(), Some(KEY));
    assert_eq!(
        reqs[0].header("anthropic-version").as_deref(),
        Some("2023-06-01")
    );
    let second = &reqs[1].body;
    assert!(second.contains(r#""tool_use_id":"toolu_1""#), "{second}");
    assert!(second.contains("the secret word is heron"), "{second}");
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_fails_the_prompt_with_a_message_naming_the_endpoint_but_not_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeModel::start(
        dir.path(),
        vec![Reply::Status(
            401,
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#,
        )],
    )
    .await;
    let host = host(dir.path(), "openai:fake-model", &server).await;
    let session = create(&host.url, &workdir(dir.path())).await;

    let (status, out, err) = cli(&host.url, &["prompt", &session, "hello"]).await;
    // docs/cli.md: the turn ended in error → status 1.
    assert_eq!(status.code(), Some(1), "{err}\n{out}");
    let endpoint = format!("{}/chat/completions", server.base_url);
    let shown = format!("{out}{err}");
    assert!(shown.contains(&endpoint), "{endpoint} not in:\n{shown}");
    assert!(shown.contains("401"), "{shown}");
    assert!(!shown.contains(KEY), "the key leaked:\n{shown}");
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_to_baton_prompt_aborts_the_turn_while_the_model_is_mid_reply() {
    let dir = tempfile::tempdir().unwrap();
    let (held_tx, mut held) = mpsc::unbounded_channel();
    let server = FakeModel::start(
        dir.path(),
        vec![
            Reply::Hold(
                data(&[
                    r#"{"id":"chatcmpl-1","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Thinking about it"}}]}"#,
                ]),
                held_tx,
            ),
            Reply::Stream(data(&[
                r#"{"id":"chatcmpl-2","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Second answer."},"finish_reason":"stop"}]}"#,
                "[DONE]",
            ])),
        ],
    )
    .await;
    let host = host(dir.path(), "openai:fake-model", &server).await;
    let session = create(&host.url, &workdir(dir.path())).await;

    let child = Command::new(baton())
        .arg("--connect")
        .arg(&host.url)
        .args(["prompt", &session, "take your time"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The model has started replying and holds the stream open: the prompt request reached
    // the host, so `baton prompt` has its SIGINT handler installed (it is set up before the
    // request is sent).
    guard("the model server mid-reply", held.recv())
        .await
        .unwrap();
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = guard("baton prompt after SIGINT", child.wait_with_output())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // docs/cli.md: the turn was aborted → status 1.
    assert_eq!(out.status.code(), Some(1), "{stderr}\n{stdout}");
    assert!(stderr.contains("aborted"), "{stderr}");

    // The session is idle again: a second prompt runs to the end.
    let (status, out2, err2) = cli(&host.url, &["prompt", &session, "again"]).await;
    assert!(status.success(), "second prompt: {err2}\n{out2}");
    assert!(out2.contains("Second answer."), "{out2}");
    assert_eq!(server.requests().len(), 2);
    assert!(host.terminate().await.success());
}
