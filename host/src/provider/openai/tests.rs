//! The provider against a fake model server on 127.0.0.1:0 (never the network).

use baton_protocol::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::message::{Message, StopReason, UserMessage};
use crate::provider::{AssistantBuilder, ThinkingLevel};
use crate::tool::ToolSpec;

/// Accepts one connection, returns the request (head, body) after writing `response` in the
/// given pieces.
async fn serve_once(listener: TcpListener, pieces: Vec<Vec<u8>>) -> (String, String) {
    let (mut conn, _) = listener.accept().await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = conn.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).await.unwrap();
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8(buf[head_end..head_end + len].to_vec()).unwrap();
    for piece in pieces {
        conn.write_all(&piece).await.unwrap();
        conn.flush().await.unwrap();
    }
    conn.shutdown().await.unwrap();
    (head, body)
}

fn chunked(payloads: &[&str]) -> Vec<Vec<u8>> {
    let mut pieces = vec![
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec(),
    ];
    for p in payloads {
        let event = format!("data: {p}\n\n");
        pieces.push(format!("{:x}\r\n{event}\r\n", event.len()).into_bytes());
    }
    pieces.push(b"0\r\n\r\n".to_vec());
    pieces
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "qwen-test".into(),
        system_prompt: "be brief".into(),
        messages: vec![Message::User(UserMessage::text("list files", 1))].into(),
        tools: vec![ToolSpec {
            name: "bash".into(),
            description: "run".into(),
            parameters: Value::from_json(r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#).unwrap(),
        }],
        thinking: ThinkingLevel::Off,
    }
}

async fn collect(mut s: Box<dyn ProviderStream>) -> Vec<ProviderEvent> {
    let mut out = Vec::new();
    while let Some(ev) = s.next().await {
        out.push(ev);
    }
    out
}

async fn bound() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    (listener, url)
}

#[tokio::test]
async fn streamed_text_thinking_and_tool_call_are_assembled() {
    let (listener, url) = bound().await;
    let pieces = chunked(&[
        r#"{"id":"chatcmpl-1","model":"qwen-test","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Let me look."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Listing "}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"files."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"bash","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}"#,
        "[DONE]",
    ]);
    let mut config = OpenAiConfig::new(url);
    config.api_key_env = Some("BATON_TEST_OPENAI_KEY_THAT_IS_NOT_SET".into());
    let provider = OpenAiProvider::new(config);
    let stream = provider.stream(request(), CancellationToken::new());
    let ((head, body), events) = tokio::join!(serve_once(listener, pieces), collect(stream));

    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        !head.contains("Authorization"),
        "no key configured → no header"
    );
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["model"], "qwen-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "list files");
    assert_eq!(body["tools"][0]["function"]["name"], "bash");

    let mut b = AssistantBuilder::new(provider.api(), provider.id(), "qwen-test", 5);
    for ev in events {
        b.apply(ev);
    }
    let m = b.finish(false);
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    assert_eq!(m.text(), "Listing files.");
    assert_eq!(m.response_id.as_deref(), Some("chatcmpl-1"));
    assert_eq!(m.usage.total_tokens, 19);
    let call = m.tool_calls().next().unwrap();
    assert_eq!((call.id.as_str(), call.name.as_str()), ("call_x", "bash"));
    assert_eq!(call.arguments.to_json(), r#"{"command":"ls"}"#);
    assert!(
        matches!(&m.content[0], crate::message::AssistantContent::Thinking(t) if t.thinking == "Let me look.")
    );
}

#[tokio::test]
async fn api_key_from_the_named_environment_variable_is_sent_as_bearer() {
    let (listener, url) = bound().await;
    // `set_var` is unsafe in edition 2024 (and the crate forbids unsafe), so the "key" is an
    // inherited variable that is always set.
    let mut config = OpenAiConfig::new(url);
    config.api_key_env = Some("PATH".into());
    let expected = std::env::var("PATH").unwrap();
    let stream = OpenAiProvider::new(config).stream(request(), CancellationToken::new());
    let pieces = chunked(&[
        r#"{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]);
    let ((head, _), events) = tokio::join!(serve_once(listener, pieces), collect(stream));
    assert!(head.contains(&format!("Authorization: Bearer {expected}\r\n")));
    assert!(matches!(
        events.last(),
        Some(ProviderEvent::Done {
            stop_reason: StopReason::Stop,
            ..
        })
    ));
}

#[tokio::test]
async fn http_error_status_becomes_an_error_event_with_the_body() {
    let (listener, url) = bound().await;
    let body = r#"{"error":{"message":"model not found"}}"#;
    let resp = format!(
        "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let stream =
        OpenAiProvider::new(OpenAiConfig::new(url)).stream(request(), CancellationToken::new());
    let (_, events) = tokio::join!(
        serve_once(listener, vec![resp.into_bytes()]),
        collect(stream)
    );
    assert_eq!(
        events,
        vec![ProviderEvent::Error(format!(
            "model server answered HTTP 404: {body}"
        ))]
    );
}

#[tokio::test]
async fn stream_cut_before_finish_is_an_error() {
    let (listener, url) = bound().await;
    let pieces = vec![
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n".to_vec(),
        b"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n".to_vec(),
    ];
    let stream =
        OpenAiProvider::new(OpenAiConfig::new(url)).stream(request(), CancellationToken::new());
    let (_, events) = tokio::join!(serve_once(listener, pieces), collect(stream));
    assert_eq!(events[0], ProviderEvent::TextDelta("par".into()));
    assert!(
        matches!(events.last(), Some(ProviderEvent::Error(m)) if m.contains("closed the stream"))
    );
}

#[tokio::test]
async fn refused_connection_is_an_error_event_not_a_panic() {
    // Bind then drop: the port is closed for the duration of the test.
    let (listener, url) = bound().await;
    drop(listener);
    let events = collect(
        OpenAiProvider::new(OpenAiConfig::new(url)).stream(request(), CancellationToken::new()),
    )
    .await;
    assert!(
        matches!(events.as_slice(), [ProviderEvent::Error(_)]),
        "{events:?}"
    );
}

#[tokio::test]
async fn https_base_url_is_refused_with_a_typed_error() {
    let config = OpenAiConfig::new("https://api.example.com/v1");
    assert!(matches!(
        OpenAiProvider::validate(&config),
        Err(HttpError::UnsupportedScheme(_))
    ));
    let events =
        collect(OpenAiProvider::new(config).stream(request(), CancellationToken::new())).await;
    assert!(matches!(events.as_slice(), [ProviderEvent::Error(m)] if m.contains("only http://")));
}

#[tokio::test]
async fn cancelled_token_ends_the_stream() {
    let (listener, url) = bound().await;
    let cancel = CancellationToken::new();
    let mut stream = OpenAiProvider::new(OpenAiConfig::new(url)).stream(request(), cancel.clone());
    let server = async {
        let (_conn, _) = listener.accept().await.unwrap();
        // Hold the connection open without answering until the client gives up.
        cancel.cancel();
        _conn
    };
    let (_conn, ev) = tokio::join!(server, stream.next());
    assert_eq!(ev, None);
}
