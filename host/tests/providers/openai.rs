//! The OpenAI-compatible provider against the fake server, over HTTPS and plain HTTP.

use std::time::Duration;

use baton_host::ThinkingLevel;
use baton_host::message::{
    AssistantContent, Message, StopReason, ToolResultMessage, UserContent, UserMessage,
};
use baton_host::provider::ModelCost;
use baton_host::provider::config::{ModelSpec, ProviderConfig};
use baton_host::provider::openai::OpenAiProvider;
use baton_host::provider::retry::{BACKOFF_BASE, MAX_ATTEMPTS, MAX_RETRY_AFTER};
use baton_host::provider::transport::Timeouts;
use baton_host::provider::{ModelRequest, Provider, ProviderEvent};
use baton_host::tool::ToolSpec;
use baton_protocol::Value;
use tokio_util::sync::CancellationToken;

use crate::fake::{End, FakeServer, Reply};
use crate::support::{JsonBody, call, call_with, recording_retry, recording_retry_at, stuck_retry};

/// A variable every test process inherits (the crate forbids `unsafe`, so `set_var` is out):
/// its value stands in for an API key.
const KEY_ENV: &str = "PATH";
const UNSET_ENV: &str = "BATON_PROVIDER_TEST_KEY_THAT_IS_NEVER_SET";

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "qwen-test".into(),
        system_prompt: "be brief".into(),
        messages: messages.into(),
        tools: vec![ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: Value::from_json(
                r#"{"type":"object","properties":{"command":{"type":"string"}}}"#,
            )
            .unwrap(),
        }],
        thinking: ThinkingLevel::Off,
    }
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::User(UserMessage::text(text, 1))]
}

fn provider(server: &FakeServer, key_env: Option<&str>) -> OpenAiProvider {
    let mut c = ProviderConfig::openai(&server.base_url);
    c.ca_file = server.ca_file.clone();
    c.api_key_env = key_env.map(str::to_owned);
    OpenAiProvider::new(c).with_retry(recording_retry().0)
}

const TOOL_STREAM: &[&str] = &[
    r#"{"id":"chatcmpl-1","model":"qwen-test-0611","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Let me look."}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"Listing "}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"files."}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"bash","arguments":""}},{"index":1,"id":"call_b","type":"function","function":{"name":"bash","arguments":"{\"comm"}}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"and\":\"pwd\"}"}},{"index":0,"function":{"arguments":"\"ls\"}"}}]},"finish_reason":"tool_calls"}]}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":100}}}"#,
    "[DONE]",
];

#[tokio::test]
async fn https_stream_of_reasoning_text_and_parallel_split_tool_calls_is_assembled() {
    let server = FakeServer::tls(vec![Reply::data(TOOL_STREAM)]).await;
    let cost = ModelCost {
        input: 1.0,
        output: 2.0,
        cache_read: 0.5,
        cache_write: 0.0,
    };
    let mut spec = ModelSpec::new("qwen-test");
    spec.cost = Some(cost);
    let p = provider(&server, Some(KEY_ENV)).with_models(vec![spec]);
    let (m, _) = call(&p, request(user("list files"))).await;

    assert_eq!(m.stop_reason, StopReason::ToolUse, "{m:?}");
    assert_eq!(m.api, "openai-completions");
    assert_eq!(m.provider, "openai");
    assert_eq!(m.response_id.as_deref(), Some("chatcmpl-1"));
    assert_eq!(m.response_model.as_deref(), Some("qwen-test-0611"));
    assert_eq!(m.raw_stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(m.text(), "Listing files.");
    let AssistantContent::Thinking(t) = &m.content[0] else {
        panic!("{m:?}")
    };
    assert_eq!(t.thinking, "Let me look.");
    assert_eq!(t.thinking_signature.as_deref(), Some("reasoning_content"));
    let calls: Vec<_> = m
        .tool_calls()
        .map(|c| (c.id.as_str(), c.arguments.to_json()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("call_a", r#"{"command":"ls"}"#.to_owned()),
            ("call_b", r#"{"command":"pwd"}"#.to_owned()),
        ]
    );
    assert_eq!(
        (
            m.usage.input,
            m.usage.cache_read,
            m.usage.output,
            m.usage.total_tokens
        ),
        (20, 100, 30, 150)
    );
    let expected = (20.0 * 1.0 + 30.0 * 2.0 + 100.0 * 0.5) / 1_000_000.0;
    assert!(
        (m.usage.cost.total - expected).abs() < 1e-12,
        "{:?}",
        m.usage.cost
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].request_line(), "POST /v1/chat/completions HTTP/1.1");
    let key = std::env::var(KEY_ENV).unwrap();
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {key}"))
    );
    let body = &reqs[0].json();
    assert_eq!(body["model"], "qwen-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(
        body["messages"][0],
        serde_json::json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(body["tools"][0]["function"]["name"], "bash");
}

#[tokio::test]
async fn the_next_call_replays_reasoning_and_tool_calls_and_sends_reasoning_effort() {
    let server = FakeServer::plain(vec![
        Reply::data(TOOL_STREAM),
        Reply::data(&[
            r#"{"choices":[{"delta":{"content":"Done."},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]),
    ])
    .await;
    let p = provider(&server, None);
    let (first, _) = call(&p, request(user("list files"))).await;
    let mut history = user("list files");
    history.push(Message::Assistant(first));
    for (id, out) in [("call_a", "a.txt"), ("call_b", "/w")] {
        history.push(Message::ToolResult(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "bash".into(),
            content: vec![UserContent::text(out)],
            details: None,
            is_error: false,
            timestamp: 2,
        }));
    }
    let mut second = request(history);
    second.thinking = ThinkingLevel::Medium;
    let (m, _) = call(&p, second).await;
    assert_eq!(
        (m.stop_reason, m.text().as_str()),
        (StopReason::Stop, "Done.")
    );

    let body = &server.requests()[1].json();
    let assistant = &body["messages"][2];
    assert_eq!(assistant["reasoning_content"], "Let me look.");
    assert_eq!(assistant["content"], "Listing files.");
    assert_eq!(assistant["tool_calls"][1]["id"], "call_b");
    assert_eq!(
        assistant["tool_calls"][1]["function"]["arguments"],
        r#"{"command":"pwd"}"#
    );
    assert_eq!(body["messages"][3]["role"], "tool");
    assert_eq!(body["messages"][4]["tool_call_id"], "call_b");
    assert_eq!(body["reasoning_effort"], "medium");
    assert_eq!(server.requests()[1].header("authorization"), None);
}

#[tokio::test]
async fn length_mid_tool_call_keeps_the_half_streamed_call_for_the_loop_to_fail() {
    let server = FakeServer::plain(vec![Reply::data(&[
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_w","function":{"name":"write","arguments":"{\"path\":\"a\",\"content\":\"hel"}}]},"finish_reason":"length"}]}"#,
        "[DONE]",
    ])])
    .await;
    let (m, _) = call(&provider(&server, None), request(user("write"))).await;
    assert_eq!(m.stop_reason, StopReason::Length);
    let call = m.tool_calls().next().expect("the truncated call is kept");
    assert_eq!(
        call.arguments,
        Value::String(r#"{"path":"a","content":"hel"#.into())
    );
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_an_error_that_keeps_the_partial_text() {
    let server = FakeServer::tls(vec![
        Reply::data(&[
            r#"{"choices":[{"delta":{"content":"Half an "}}]}"#,
            r#"{"choices":[{"delta":{"content":"answer"}}]}"#,
        ])
        .ending(End::Cut),
    ])
    .await;
    let (m, _) = call(&provider(&server, None), request(user("hi"))).await;
    assert_eq!(m.stop_reason, StopReason::Error);
    assert_eq!(m.text(), "Half an answer");
    let err = m.error_message.unwrap();
    assert!(
        err.starts_with(&format!(
            "the stream from {}/chat/completions was interrupted",
            server.base_url
        )),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1, "never retried after a token");
}

#[tokio::test]
async fn malformed_sse_data_is_an_error_naming_the_endpoint() {
    let server = FakeServer::plain(vec![Reply::data(&[
        r#"{"choices":[{"delta":{"content":"ok"}}]}"#,
        "{this is not json",
    ])])
    .await;
    let (m, _) = call(&provider(&server, None), request(user("hi"))).await;
    assert_eq!(m.stop_reason, StopReason::Error);
    assert_eq!(m.text(), "ok");
    let err = m.error_message.unwrap();
    assert!(
        err.starts_with("malformed stream chunk from http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("/v1/chat/completions"), "{err}");
}

#[tokio::test]
async fn unauthorized_is_an_error_in_the_stream_naming_the_endpoint_and_not_retried() {
    let server = FakeServer::tls(vec![Reply::status(
        401,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#,
    )])
    .await;
    let (m, events) = call(&provider(&server, Some(KEY_ENV)), request(user("hi"))).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(m.stop_reason, StopReason::Error);
    let port = server
        .base_url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/v1");
    assert_eq!(
        m.error_message.as_deref(),
        Some(
            format!(
                "https://127.0.0.1:{port}/v1/chat/completions answered HTTP 401 Unauthorized: Incorrect API key provided"
            )
            .as_str()
        )
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_unknown_model_is_an_error_with_the_server_s_message() {
    let server = FakeServer::plain(vec![Reply::status(
        404,
        r#"{"error":{"message":"The model `nope` does not exist"}}"#,
    )])
    .await;
    let (m, _) = call(&provider(&server, None), request(user("hi"))).await;
    let err = m.error_message.unwrap();
    assert!(
        err.ends_with("answered HTTP 404 Not Found: The model `nope` does not exist"),
        "{err}"
    );
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_servers_wait_then_succeed() {
    let server = FakeServer::plain(vec![
        Reply::retry_after(429, 7),
        Reply::data(&[
            r#"{"choices":[{"delta":{"content":"hello"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]),
    ])
    .await;
    let (retry, waits) = recording_retry();
    let p = provider(&server, None).with_retry(retry);
    let (m, _) = call(&p, request(user("hi"))).await;
    assert_eq!(
        (m.stop_reason, m.text().as_str()),
        (StopReason::Stop, "hello")
    );
    assert_eq!(*waits.lock().unwrap(), vec![Duration::from_secs(7)]);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_back_off_exponentially_and_give_up_after_the_attempt_limit() {
    let replies = (0..MAX_ATTEMPTS)
        .map(|_| Reply::status(503, r#"{"error":{"message":"overloaded"}}"#))
        .collect();
    let server = FakeServer::plain(replies).await;
    let (retry, waits) = recording_retry();
    let (m, _) = call(
        &provider(&server, None).with_retry(retry),
        request(user("hi")),
    )
    .await;
    assert_eq!(m.stop_reason, StopReason::Error);
    let err = m.error_message.unwrap();
    assert!(
        err.ends_with(&format!(
            "HTTP 503 Service Unavailable: overloaded (after {MAX_ATTEMPTS} attempts)"
        )),
        "{err}"
    );
    let expected: Vec<Duration> = (0..MAX_ATTEMPTS - 1)
        .map(|i| BACKOFF_BASE * 2u32.pow(i))
        .collect();
    assert_eq!(*waits.lock().unwrap(), expected);
    assert_eq!(server.requests().len(), MAX_ATTEMPTS as usize);
}

#[tokio::test]
async fn a_500_then_success_streams_normally() {
    let server = FakeServer::tls(vec![
        Reply::status(500, "internal error"),
        Reply::data(&[
            r#"{"choices":[{"delta":{"content":"fine"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]),
    ])
    .await;
    let (m, _) = call(&provider(&server, None), request(user("hi"))).await;
    assert_eq!(
        (m.stop_reason, m.text().as_str()),
        (StopReason::Stop, "fine")
    );
}

#[tokio::test]
async fn a_retry_after_beyond_the_limit_fails_at_once() {
    let server =
        FakeServer::plain(vec![Reply::retry_after(429, MAX_RETRY_AFTER.as_secs() + 1)]).await;
    let (retry, waits) = recording_retry();
    let (m, _) = call(
        &provider(&server, None).with_retry(retry),
        request(user("hi")),
    )
    .await;
    let err = m.error_message.unwrap();
    assert!(err.contains("HTTP 429"), "{err}");
    assert!(err.contains("asks to retry after 61 s"), "{err}");
    assert!(waits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn abort_during_a_retry_wait_stops_retrying() {
    let server = FakeServer::plain(vec![Reply::retry_after(503, 5), Reply::status(500, "")]).await;
    let (retry, mut started) = stuck_retry();
    let cancel = CancellationToken::new();
    let p = provider(&server, None).with_retry(retry);
    let canceller = cancel.clone();
    let abort = async move {
        let wait = started.recv().await.expect("a retry wait starts");
        canceller.cancel();
        wait
    };
    let ((m, _), wait) = tokio::join!(call_with(&p, request(user("hi")), cancel), abort);
    assert_eq!(wait, Duration::from_secs(5));
    assert_eq!(m.stop_reason, StopReason::Aborted);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn abort_mid_stream_keeps_the_partial_content() {
    let server = FakeServer::tls(vec![
        Reply::data(&[
            r#"{"choices":[{"delta":{"reasoning":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"content":"partial"}}]}"#,
        ])
        .ending(End::Hang),
    ])
    .await;
    let p = provider(&server, None);
    let cancel = CancellationToken::new();
    let mut stream = p.stream(request(user("hi")), cancel.clone());
    let mut builder = baton_host::provider::AssistantBuilder::new(p.api(), p.id(), "qwen-test", 1);
    loop {
        let ev = tokio::time::timeout(crate::fake::HANG_GUARD, stream.next())
            .await
            .expect("hang guard")
            .expect("events before the hang");
        let is_text = matches!(ev, ProviderEvent::TextDelta(_));
        builder.apply(ev);
        if is_text {
            break;
        }
    }
    cancel.cancel();
    assert_eq!(stream.next().await, None, "a cancelled stream ends");
    let m = builder.finish(true);
    assert_eq!(m.stop_reason, StopReason::Aborted);
    assert_eq!(m.text(), "partial");
    assert!(matches!(&m.content[0], AssistantContent::Thinking(t)
        if t.thinking == "hmm" && t.thinking_signature.as_deref() == Some("reasoning")));
}

#[tokio::test]
async fn a_silent_server_hits_the_read_timeout() {
    let server = FakeServer::plain(vec![
        Reply::data(&[r#"{"choices":[{"delta":{"content":"then nothing"}}]}"#]).ending(End::Hang),
    ])
    .await;
    let timeouts = Timeouts {
        read: Duration::from_millis(300),
        ..Timeouts::default()
    };
    let p = provider(&server, None).with_timeouts(timeouts);
    let (m, _) = call(&p, request(user("hi"))).await;
    assert_eq!(m.stop_reason, StopReason::Error);
    assert_eq!(m.text(), "then nothing");
    let err = m.error_message.unwrap();
    assert!(
        err.contains("(read timeout)") || err.contains("interrupted"),
        "{err}"
    );
}

#[tokio::test]
async fn a_missing_key_variable_fails_inside_the_stream_before_any_request() {
    let server = FakeServer::plain(vec![]).await;
    let (m, _) = call(&provider(&server, Some(UNSET_ENV)), request(user("hi"))).await;
    assert_eq!(m.stop_reason, StopReason::Error);
    let err = m.error_message.unwrap();
    assert!(
        err.starts_with(&format!("API key variable {UNSET_ENV} is not set")),
        "{err}"
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_is_retried_with_backoff_then_an_error_naming_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (retry, waits) = recording_retry();
    let p =
        OpenAiProvider::new(ProviderConfig::openai(format!("http://{addr}/v1"))).with_retry(retry);
    let (m, _) = call(&p, request(user("hi"))).await;
    assert_eq!(m.stop_reason, StopReason::Error);
    let err = m.error_message.unwrap();
    assert!(
        err.starts_with(&format!("cannot reach http://{addr}/v1/chat/completions")),
        "{err}"
    );
    assert!(
        err.ends_with(&format!("(after {MAX_ATTEMPTS} attempts)")),
        "{err}"
    );
    let expected: Vec<Duration> = (0..MAX_ATTEMPTS - 1)
        .map(|i| BACKOFF_BASE * 2u32.pow(i))
        .collect();
    assert_eq!(*waits.lock().unwrap(), expected);
}

#[tokio::test]
async fn connections_closed_or_reset_before_an_answer_are_retried_then_the_answer_streams() {
    let server = FakeServer::tls(vec![
        Reply::Close,
        Reply::Reset,
        Reply::data(&[
            r#"{"choices":[{"delta":{"content":"third time"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]),
    ])
    .await;
    let (retry, waits) = recording_retry();
    let (m, _) = call(
        &provider(&server, None).with_retry(retry),
        request(user("hi")),
    )
    .await;
    assert_eq!(
        (m.stop_reason, m.text().as_str()),
        (StopReason::Stop, "third time"),
        "{:?}",
        m.error_message
    );
    assert_eq!(*waits.lock().unwrap(), vec![BACKOFF_BASE, BACKOFF_BASE * 2]);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_retry_after_http_date_waits_until_that_time_by_the_policys_clock() {
    let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let date = httpdate::fmt_http_date(now + Duration::from_secs(5));
    let server = FakeServer::plain(vec![
        Reply::retry_after_text(429, &date),
        Reply::data(&[
            r#"{"choices":[{"delta":{"content":"later"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]),
    ])
    .await;
    let (retry, waits) = recording_retry_at(now);
    let (m, _) = call(
        &provider(&server, None).with_retry(retry),
        request(user("hi")),
    )
    .await;
    assert_eq!(
        (m.stop_reason, m.text().as_str()),
        (StopReason::Stop, "later")
    );
    assert_eq!(*waits.lock().unwrap(), vec![Duration::from_secs(5)]);
}

#[tokio::test]
async fn a_retry_after_http_date_beyond_the_limit_fails_at_once() {
    let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let date = httpdate::fmt_http_date(now + MAX_RETRY_AFTER + Duration::from_secs(30));
    let server = FakeServer::plain(vec![Reply::retry_after_text(503, &date)]).await;
    let (retry, waits) = recording_retry_at(now);
    let (m, _) = call(
        &provider(&server, None).with_retry(retry),
        request(user("hi")),
    )
    .await;
    let err = m.error_message.unwrap();
    assert!(err.contains("HTTP 503"), "{err}");
    assert!(err.contains("asks to retry after 90 s"), "{err}");
    assert!(waits.lock().unwrap().is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_server_certificate_from_an_unknown_ca_is_a_tls_error() {
    let server = FakeServer::tls(vec![Reply::data(&["[DONE]"])]).await;
    // No CA file: the test CA is not trusted.
    let (retry, waits) = recording_retry();
    let p = OpenAiProvider::new(ProviderConfig::openai(&server.base_url)).with_retry(retry);
    let (m, _) = call(&p, request(user("hi"))).await;
    assert_eq!(m.stop_reason, StopReason::Error);
    let err = m.error_message.unwrap();
    assert!(err.starts_with("cannot reach https://127.0.0.1:"), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(waits.lock().unwrap().is_empty(), "a TLS rejection is final");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_api_key_never_appears_in_an_error_even_when_the_server_echoes_it() {
    let key = std::env::var(KEY_ENV).unwrap();
    let server = FakeServer::plain(vec![Reply::status(
        401,
        &serde_json::json!({"error": {"message": format!("bad key {key}")}}).to_string(),
    )])
    .await;
    let (m, _) = call(&provider(&server, Some(KEY_ENV)), request(user("hi"))).await;
    let err = m.error_message.unwrap();
    assert!(!err.contains(&key), "{err}");
    assert!(err.ends_with("bad key [redacted]"), "{err}");
}
