//! `baton-host serve` with each real model provider kind (OpenAI-compatible Chat Completions,
//! Anthropic Messages), driven through the real `baton` CLI against fake model servers on
//! 127.0.0.1 over HTTPS (a CA made at test start): a prompt, a tool call, an error naming the
//! endpoint, Ctrl-C aborting a turn mid-reply, and the start-up reachability probe (a warning
//! naming an unreachable endpoint or proxy, none for a reachable one).

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;
/// The fake model server the providers suite uses too.
#[path = "../../tests/providers/fake.rs"]
mod fake;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::state::guard;
use common::{HOST, HostProcess, baton, cli};
use fake::{End, FakeServer, Reply};
use tokio::process::Command;

/// The variable the host reads the API key from, and the key.
const KEY_ENV: &str = "BATON_PROVIDERS_CLI_TEST_KEY";
const KEY: &str = "sk-test-0123456789-secret";

/// The proxy variables reqwest (and so the probe) reads; cleared for every host started here
/// so the machine's own settings never route the loopback fakes.
const PROXY_VARS: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// `baton-host serve --model KIND:MODEL --base-url … --api-key-env … --ca-file …` in `dir`.
async fn host(dir: &Path, model: &str, server: &FakeServer) -> HostProcess {
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
            &server.ca_file.as_ref().unwrap().display().to_string(),
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
    let server = FakeServer::tls(
        vec![Reply::data(&[
            r#"{"id":"chatcmpl-1","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"from the fake model."},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#,
            "[DONE]",
        ])],
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
    let server = FakeServer::tls(
        vec![
            Reply::data(&[
                r#"{"id":"chatcmpl-1","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Reading it."}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"note.txt\"}"}}]},"finish_reason":"tool_calls"}]}"#,
                "[DONE]",
            ]),
            Reply::data(&[
                r#"{"id":"chatcmpl-2","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"The word is pelican."},"finish_reason":"stop"}]}"#,
                "[DONE]",
            ]),
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
    let server = FakeServer::tls(
        vec![
            Reply::events(&[
                start,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"note.txt\"}"}}"#,
                r#"{"type":"content_block_stop","index":0}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}"#,
                r#"{"type":"message_stop"}"#,
            ]),
            Reply::events(&[
                start,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The word "}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"is heron."}}"#,
                r#"{"type":"content_block_stop","index":0}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}"#,
                r#"{"type":"message_stop"}"#,
            ]),
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
    let server = FakeServer::tls(vec![Reply::status(
        401,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#,
    )])
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

/// `baton prompt` is sent SIGINT while `model` (served by `hang`, then `second`) is mid-reply:
/// the turn ends aborted, and a second prompt runs to the end.
async fn sigint_aborts_mid_reply(model: &str, hang: Reply, second: Reply, answer: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut server = FakeServer::tls(vec![hang.ending(End::Hang), second]).await;
    let host = host(dir.path(), model, &server).await;
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
    server.hanging().await;
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
    assert!(out2.contains(answer), "{out2}");
    assert_eq!(server.requests().len(), 2);
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_to_baton_prompt_aborts_an_openai_turn_while_the_model_is_mid_reply() {
    sigint_aborts_mid_reply(
        "openai:fake-model",
        Reply::data(&[
            r#"{"id":"chatcmpl-1","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Thinking about it"}}]}"#,
        ]),
        Reply::data(&[
            r#"{"id":"chatcmpl-2","model":"fake-model","choices":[{"index":0,"delta":{"role":"assistant","content":"Second answer."},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]),
        "Second answer.",
    )
    .await;
}

const CLAUDE_START: &str = r#"{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-fake","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_to_baton_prompt_aborts_an_anthropic_turn_while_the_model_is_mid_reply() {
    sigint_aborts_mid_reply(
        "anthropic:claude-fake",
        Reply::events(&[
            CLAUDE_START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Thinking about it"}}"#,
        ]),
        Reply::events(&[
            CLAUDE_START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Second answer."}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
            r#"{"type":"message_stop"}"#,
        ]),
        "Second answer.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_401_fails_the_prompt_naming_the_messages_endpoint_but_not_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::tls(vec![Reply::status(
        401,
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
    )])
    .await;
    let host = host(dir.path(), "anthropic:claude-fake", &server).await;
    let session = create(&host.url, &workdir(dir.path())).await;

    let (status, out, err) = cli(&host.url, &["prompt", &session, "hello"]).await;
    assert_eq!(status.code(), Some(1), "{err}\n{out}");
    let shown = format!("{out}{err}");
    let endpoint = format!("{}/messages", server.base_url);
    assert!(shown.contains(&endpoint), "{endpoint} not in:\n{shown}");
    assert!(shown.contains("invalid x-api-key"), "{shown}");
    assert!(!shown.contains(KEY), "the key leaked:\n{shown}");
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
    assert!(host.terminate().await.success());
}

/// `baton-host serve args…` with `env` (the proxy variables cleared first), `RUST_LOG=filter`
/// and stderr captured in `log`.
async fn host_logged(args: &[&str], env: &[(&str, &str)], filter: &str) -> HostProcess {
    let mut cmd = Command::new(HOST);
    cmd.arg("serve")
        .args(args)
        .env("RUST_LOG", filter)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    HostProcess::from_command(cmd).await
}

/// The host's log lines up to and including the first that contains `needle`.
async fn log_until(host: &mut HostProcess, needle: &str) -> Vec<String> {
    let log = host.log.as_mut().unwrap();
    let mut seen = Vec::new();
    guard(&format!("a log line with {needle:?}"), async {
        while let Some(line) = log.next_line().await.unwrap() {
            let done = line.contains(needle);
            seen.push(line);
            if done {
                return;
            }
        }
        panic!("the host's log ended without {needle:?}: {seen:?}");
    })
    .await;
    seen
}

/// A port on 127.0.0.1 nothing listens on (bound, then released).
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

fn serve_args(dir: &Path, base_url: &str) -> Vec<String> {
    vec![
        "--listen".into(),
        format!("unix://{}", dir.join("sock").display()),
        "--sessions-dir".into(),
        dir.join("sessions").display().to_string(),
        "--model".into(),
        "openai:fake-model".into(),
        "--base-url".into(),
        base_url.into(),
        "--api-key-env".into(),
        KEY_ENV.into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_a_start_up_warning_naming_it_and_the_host_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    let base_url = format!("https://127.0.0.1:{}/v1", closed_port().await);
    let args = serve_args(dir.path(), &base_url);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut host = host_logged(&args, &[(KEY_ENV, KEY)], "warn").await;

    let log = log_until(&mut host, "cannot reach").await;
    let warning = log.last().unwrap();
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.contains(&format!("cannot reach {base_url}: connection refused")),
        "{warning}"
    );
    assert!(warning.contains("provider=openai"), "{warning}");
    assert!(
        !log.iter().any(|l| l.contains(KEY)),
        "the key leaked: {log:?}"
    );

    // Serving started regardless; a prompt fails naming the endpoint (after the connection
    // retries' real backoff: 1 + 2 + 4 s).
    let session = create(&host.url, &workdir(dir.path())).await;
    let (status, out, err) = cli(&host.url, &["prompt", &session, "hello"]).await;
    assert_eq!(status.code(), Some(1), "{err}\n{out}");
    let shown = format!("{out}{err}");
    assert!(
        shown.contains(&format!("cannot reach {base_url}/chat/completions")),
        "{shown}"
    );
    assert!(!shown.contains(KEY), "the key leaked:\n{shown}");
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reachable_endpoint_passes_the_probe_without_a_warning_or_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::tls(vec![Reply::data(&[
        r#"{"id":"chatcmpl-1","model":"fake-model","choices":[{"index":0,"delta":{"content":"first reply"},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ])])
    .await;
    let mut args = serve_args(dir.path(), &server.base_url);
    args.push("--ca-file".into());
    args.push(server.ca_file.as_ref().unwrap().display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut host = host_logged(
        &args,
        &[(KEY_ENV, KEY)],
        "warn,baton_host::provider::probe=debug",
    )
    .await;

    let log = log_until(&mut host, "provider endpoint reachable").await;
    assert!(
        !log.iter().any(|l| l.contains("cannot reach")),
        "unexpected warning: {log:?}"
    );
    assert!(server.requests().is_empty(), "the probe sent a request");
    // The probe took no reply: the first prompt gets the first one.
    let session = create(&host.url, &workdir(dir.path())).await;
    let (status, out, err) = cli(&host.url, &["prompt", &session, "hello"]).await;
    assert!(status.success(), "prompt: {err}\n{out}");
    assert!(out.contains("first reply"), "{out}");
    assert_eq!(server.requests().len(), 1);
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_https_proxy_set_the_probe_names_the_unreachable_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::tls(Vec::new()).await;
    let proxy = format!("http://127.0.0.1:{}", closed_port().await);
    let args = serve_args(dir.path(), &server.base_url);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut host = host_logged(&args, &[(KEY_ENV, KEY), ("HTTPS_PROXY", &proxy)], "warn").await;

    let log = log_until(&mut host, "cannot reach").await;
    let warning = log.last().unwrap();
    assert!(
        warning.contains(&format!(
            "cannot reach the proxy {proxy} (from the environment's *_PROXY variables) for {}: connection refused",
            server.base_url
        )),
        "{warning}"
    );
    assert!(server.requests().is_empty());
    assert!(host.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_file_entry_is_listed_by_baton_models_and_serves_a_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::tls(vec![Reply::data(&[
        r#"{"id":"chatcmpl-1","model":"qwen-fake","choices":[{"index":0,"delta":{"content":"from the models file"},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ])])
    .await;
    let models = dir.path().join("models.toml");
    std::fs::write(
        &models,
        format!(
            r#"[providers.local]
kind = "openai"
base_url = "{0}"
api_key_env = "{KEY_ENV}"
ca_file = "{1}"

[[providers.local.models]]
id = "qwen-fake"
name = "Qwen (fake server)"
context_window = 32768
max_output = 4096

[providers.claude]
kind = "anthropic"
base_url = "{0}"
api_key_env = "{KEY_ENV}"
ca_file = "{1}"

[[providers.claude.models]]
id = "claude-fake"
name = "Claude (never called)"
"#,
            server.base_url,
            server.ca_file.as_ref().unwrap().display()
        ),
    )
    .unwrap();
    let host = HostProcess::start(
        &[
            "--listen",
            &format!("unix://{}", dir.path().join("sock").display()),
            "--sessions-dir",
            &dir.path().join("sessions").display().to_string(),
            "--models",
            &models.display().to_string(),
            "--model",
            "local:qwen-fake",
        ],
        &[(KEY_ENV, Path::new(KEY))],
    )
    .await;

    let (status, out, err) = cli(&host.url, &["models"]).await;
    assert!(status.success(), "{err}");
    let row = |model: &str| {
        out.lines()
            .find(|l| l.starts_with(model))
            .unwrap_or_else(|| panic!("{model} not listed:\n{out}"))
            .to_owned()
    };
    assert!(
        row("local/qwen-fake").contains("Qwen (fake server)"),
        "{out}"
    );
    assert!(row("local/qwen-fake").contains("yes"), "the default: {out}");
    assert!(
        row("claude/claude-fake").contains("Claude (never called)"),
        "{out}"
    );
    row("scripted/default");

    let session = create(&host.url, &workdir(dir.path())).await;
    let (status, out, err) = cli(&host.url, &["prompt", &session, "hi"]).await;
    assert!(status.success(), "prompt: {err}\n{out}");
    assert!(out.contains("from the models file"), "{out}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].body.contains(r#""model":"qwen-fake""#),
        "{}",
        reqs[0].body
    );
    assert_eq!(
        reqs[0].header("authorization").as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(host.terminate().await.success());
}
