//! The Anthropic Messages provider against the fake server, over HTTPS and plain HTTP.

use std::time::Duration;

use baton_host::ThinkingLevel;
use baton_host::message::{
    AssistantContent, Message, StopReason, ToolResultMessage, UserContent, UserMessage,
};
use baton_host::provider::ModelCost;
use baton_host::provider::anthropic::{ANTHROPIC_VERSION, AnthropicProvider};
use baton_host::provider::config::{ModelSpec, ProviderConfig, ProviderKind};
use baton_host::provider::retry::BACKOFF_BASE;
use baton_host::provider::{AssistantBuilder, ModelRequest, Provider, ProviderEvent};
use baton_host::tool::ToolSpec;
use baton_protocol::Value;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::fake::{End, FakeServer, HANG_GUARD, Reply};
use crate::support::{JsonBody, call, recording_retry};

const KEY_ENV: &str = "PATH";
const UNSET_ENV: &str = "BATON_PROVIDER_TEST_KEY_THAT_IS_NEVER_SET";

fn request(messages: Vec<Message>, thinking: ThinkingLevel) -> ModelRequest {
    ModelRequest {
        model: "claude-test".into(),
        system_prompt: "be brief".into(),
        messages: messages.into(),
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "read a file".into(),
            parameters: Value::from_json(
                r#"{"type":"object","properties":{"path":{"type":"string"}}}"#,
            )
            .unwrap(),
        }],
        thinking,
    }
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::User(UserMessage::text(text, 1))]
}

fn provider(server: &FakeServer, key_env: Option<&str>) -> AnthropicProvider {
    let mut c = ProviderConfig::new("anthropic", ProviderKind::Anthropic, &server.base_url);
    c.ca_file = server.ca_file.clone();
    c.api_key_env = key_env.map(str::to_owned);
    AnthropicProvider::new(c).with_retry(recording_retry().0)
}

const START: &str = r#"{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-test-20250101","content":[],"stop_reason":null,"usage":{"input_tokens":50,"cache_creation_input_tokens":200,"cache_read_input_tokens":1000,"output_tokens":1}}}"#;

const THINK_AND_TOOLS: &[&str] = &[
    START,
    r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Two files; "}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"read both."}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"ErUBCkYIBRgCIkA="}}"#,
    r#"{"type":"content_block_stop","index":0}"#,
    r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4a"}}"#,
    r#"{"type":"content_block_stop","index":1}"#,
    r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
    r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Reading "}}"#,
    r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"them."}}"#,
    r#"{"type":"content_block_stop","index":2}"#,
    r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_a","name":"read","input":{}}}"#,
    r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}"#,
    r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}"#,
    r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":".txt\"}"}}"#,
    r#"{"type":"content_block_stop","index":3}"#,
    r#"{"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_b","name":"read","input":{}}}"#,
    r#"{"type":"content_block_delta","index":4,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"b.txt\"}"}}"#,
    r#"{"type":"content_block_stop","index":4}"#,
    r#"{"type":"ping"}"#,
    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":90}}"#,
    r#"{"type":"message_stop"}"#,
];

#[tokio::test]
async fn https_stream_of_signed_and_redacted_thinking_text_and_tool_uses_is_assembled() {
    let server = FakeServer::tls(vec![Reply::events(THINK_AND_TOOLS)]).await;
    let mut spec = ModelSpec::new("claude-test");
    spec.max_output = Some(32_000);
    spec.cost = Some(ModelCost {
        input: 3.0,
        output: 15.0,
        cache_read: 0.3,
        cache_write: 3.75,
    });
    let p = provider(&server, Some(KEY_ENV)).with_models(vec![spec]);
    let (m, _) = call(&p, request(user("read a and b"), ThinkingLevel::High)).await;

    assert_eq!(m.stop_reason, StopReason::ToolUse, "{m:?}");
    assert_eq!(m.api, "anthropic-messages");
    assert_eq!(m.response_id.as_deref(), Some("msg_01"));
    assert_eq!(m.response_model.as_deref(), Some("claude-test-20250101"));
    assert_eq!(m.raw_stop_reason.as_deref(), Some("tool_use"));
    let AssistantContent::Thinking(t) = &m.content[0] else {
        panic!("{m:?}")
    };
    assert_eq!(t.thinking, "Two files; read both.");
    assert_eq!(t.thinking_signature.as_deref(), Some("ErUBCkYIBRgCIkA="));
    let AssistantContent::Thinking(r) = &m.content[1] else {
        panic!("{m:?}")
    };
    assert_eq!(r.redacted, Some(true));
    assert_eq!(
        r.thinking_signature.as_deref(),
        Some("EmwKAhgBEgy3va3pzix/LafPsn4a")
    );
    assert_eq!(m.text(), "Reading them.");
    let calls: Vec<_> = m
        .tool_calls()
        .map(|c| (c.id.as_str(), c.arguments.to_json()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("toolu_a", r#"{"path":"a.txt"}"#.to_owned()),
            ("toolu_b", r#"{"path":"b.txt"}"#.to_owned()),
        ]
    );
    let u = m.usage;
    assert_eq!(
        (
            u.input,
            u.output,
            u.cache_read,
            u.cache_write,
            u.total_tokens
        ),
        (50, 90, 1000, 200, 1340)
    );
    let expected = (50.0 * 3.0 + 90.0 * 15.0 + 1000.0 * 0.3 + 200.0 * 3.75) / 1_000_000.0;
    assert!((u.cost.total - expected).abs() < 1e-12, "{:?}", u.cost);

    let req = &server.requests()[0];
    assert_eq!(req.request_line(), "POST /v1/messages HTTP/1.1");
    assert_eq!(
        req.header("x-api-key"),
        Some(std::env::var(KEY_ENV).unwrap())
    );
    assert_eq!(req.header("authorization"), None);
    assert_eq!(
        req.header("anthropic-version").as_deref(),
        Some(ANTHROPIC_VERSION)
    );
    assert_eq!(req.json()["max_tokens"], 32_000);
    assert_eq!(
        req.json()["thinking"],
        json!({"type": "enabled", "budget_tokens": 16384})
    );
    assert_eq!(req.json()["system"][0]["text"], "be brief");
    assert_eq!(req.json()["tools"][0]["name"], "read");
    assert_eq!(req.json()["stream"], true);
}

#[tokio::test]
async fn the_next_call_replays_signatures_redacted_thinking_and_tool_results() {
    let server = FakeServer::plain(vec![
        Reply::events(THINK_AND_TOOLS),
        Reply::events(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Both read."}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
            r#"{"type":"message_stop"}"#,
        ]),
    ])
    .await;
    let p = provider(&server, None);
    let (first, _) = call(&p, request(user("read a and b"), ThinkingLevel::Low)).await;
    let mut history = user("read a and b");
    history.push(Message::Assistant(first));
    for (id, out, is_error) in [("toolu_a", "A", false), ("toolu_b", "no such file", true)] {
        history.push(Message::ToolResult(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "read".into(),
            content: vec![UserContent::text(out)],
            details: None,
            is_error,
            timestamp: 2,
        }));
    }
    let (m, _) = call(&p, request(history, ThinkingLevel::Low)).await;
    assert_eq!(
        (m.stop_reason, m.text().as_str()),
        (StopReason::Stop, "Both read.")
    );
    assert_eq!(m.raw_stop_reason.as_deref(), Some("end_turn"));

    let body = &server.requests()[1].json();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    let a = &messages[1]["content"];
    assert_eq!(
        a[0],
        json!({"type": "thinking", "thinking": "Two files; read both.", "signature": "ErUBCkYIBRgCIkA="})
    );
    assert_eq!(
        a[1],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"})
    );
    assert_eq!(a[2], json!({"type": "text", "text": "Reading them."}));
    assert_eq!(
        a[3],
        json!({"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.txt"}})
    );
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "toolu_a");
    assert_eq!(results[1]["tool_use_id"], "toolu_b");
    assert_eq!(results[1]["is_error"], true);
    assert_eq!(body["thinking"]["budget_tokens"], 2048);
    assert_eq!(server.requests()[1].header("x-api-key"), None);
}

#[tokio::test]
async fn max_tokens_mid_tool_use_is_length_with_the_partial_call() {
    let server = FakeServer::plain(vec![Reply::events(&[
        START,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_w","name":"write","input":{}}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"a\",\"content\":\"hel"}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":4096}}"#,
        r#"{"type":"message_stop"}"#,
    ])])
    .await;
    let (m, _) = call(
        &provider(&server, None),
        request(user("write"), ThinkingLevel::Off),
    )
    .await;
    assert_eq!(m.stop_reason, StopReason::Length);
    assert_eq!(m.raw_stop_reason.as_deref(), Some("max_tokens"));
    let call = m.tool_calls().next().expect("the truncated call is kept");
    assert_eq!(
        call.arguments,
        Value::String(r#"{"path":"a","content":"hel"#.into())
    );
}

#[tokio::test]
async fn a_disconnect_mid_stream_is_an_error_keeping_the_partial_text() {
    let server = FakeServer::tls(vec![
        Reply::events(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Half"}}"#,
        ])
        .ending(End::Cut),
    ])
    .await;
    let (m, _) = call(
        &provider(&server, None),
        request(user("hi"), ThinkingLevel::Off),
    )
    .await;
    assert_eq!(m.stop_reason, StopReason::Error);
    assert_eq!(m.text(), "Half");
    let err = m.error_message.unwrap();
    assert!(
        err.starts_with(&format!(
            "the stream from {}/messages was interrupted",
            server.base_url
        )),
        "{err}"
    );
    assert_eq!(m.usage.input, 50, "usage so far is kept");
}

#[tokio::test]
async fn an_overloaded_error_event_mid_stream_is_an_error_and_not_retried() {
    let server = FakeServer::plain(vec![Reply::events(&[
        START,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ])])
    .await;
    let (m, _) = call(
        &provider(&server, None),
        request(user("hi"), ThinkingLevel::Off),
    )
    .await;
    let err = m.error_message.unwrap();
    assert!(
        err.ends_with("/v1/messages reported overloaded_error mid-stream: Overloaded"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn status_errors_name_the_endpoint_and_overloaded_529_is_retried() {
    let server = FakeServer::tls(vec![
        Reply::retry_after(529, 2),
        Reply::status(
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        ),
    ])
    .await;
    let (retry, waits) = recording_retry();
    let p = provider(&server, Some(KEY_ENV)).with_retry(retry);
    let (m, _) = call(&p, request(user("hi"), ThinkingLevel::Off)).await;
    assert_eq!(m.stop_reason, StopReason::Error);
    assert_eq!(
        m.error_message.as_deref(),
        Some(
            format!(
                "{}/messages answered HTTP 401 Unauthorized: invalid x-api-key (after 2 attempts)",
                server.base_url
            )
            .as_str()
        )
    );
    assert_eq!(*waits.lock().unwrap(), vec![Duration::from_secs(2)]);
}

#[tokio::test]
async fn a_connection_closed_before_an_answer_is_retried_and_the_retry_streams() {
    let server = FakeServer::tls(vec![
        Reply::Close,
        Reply::events(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"retried"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
            r#"{"type":"message_stop"}"#,
        ]),
    ])
    .await;
    let (retry, waits) = recording_retry();
    let p = provider(&server, None).with_retry(retry);
    let (m, _) = call(&p, request(user("hi"), ThinkingLevel::Off)).await;
    assert_eq!(
        (m.stop_reason, m.text().as_str()),
        (StopReason::Stop, "retried"),
        "{:?}",
        m.error_message
    );
    assert_eq!(*waits.lock().unwrap(), vec![BACKOFF_BASE]);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_unknown_model_404_is_an_error_with_the_api_s_message() {
    let server = FakeServer::plain(vec![Reply::status(
        404,
        r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}"#,
    )])
    .await;
    let (m, _) = call(
        &provider(&server, None),
        request(user("hi"), ThinkingLevel::Off),
    )
    .await;
    assert!(
        m.error_message
            .unwrap()
            .ends_with("answered HTTP 404 Not Found: model: claude-nope")
    );
}

#[tokio::test]
async fn a_missing_key_variable_fails_inside_the_stream() {
    let server = FakeServer::plain(vec![]).await;
    let (m, events) = call(
        &provider(&server, Some(UNSET_ENV)),
        request(user("hi"), ThinkingLevel::Off),
    )
    .await;
    assert_eq!(events.len(), 1);
    assert_eq!(m.stop_reason, StopReason::Error);
    assert!(
        m.error_message
            .unwrap()
            .starts_with(&format!("API key variable {UNSET_ENV} is not set"))
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn malformed_event_data_is_an_error() {
    let server = FakeServer::plain(vec![Reply::Stream {
        pieces: vec![
            format!("event: message_start\ndata: {START}\n\n"),
            "event: content_block_start\ndata: {nope\n\n".into(),
        ],
        end: End::Finish,
    }])
    .await;
    let (m, _) = call(
        &provider(&server, None),
        request(user("hi"), ThinkingLevel::Off),
    )
    .await;
    assert_eq!(m.stop_reason, StopReason::Error);
    assert!(
        m.error_message
            .unwrap()
            .starts_with("malformed stream event from http://127.0.0.1:")
    );
}

#[tokio::test]
async fn abort_mid_stream_settles_as_aborted_with_the_partial_text() {
    let server = FakeServer::tls(vec![
        Reply::events(&[
            START,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Some"}}"#,
        ])
        .ending(End::Hang),
    ])
    .await;
    let p = provider(&server, None);
    let cancel = CancellationToken::new();
    let mut stream = p.stream(request(user("hi"), ThinkingLevel::Off), cancel.clone());
    let mut builder = AssistantBuilder::new(p.api(), p.id(), "claude-test", 1);
    loop {
        let ev = tokio::time::timeout(HANG_GUARD, stream.next())
            .await
            .expect("hang guard")
            .expect("events before the hang");
        let text = matches!(&ev, ProviderEvent::TextDelta(t) if !t.is_empty());
        builder.apply(ev);
        if text {
            break;
        }
    }
    cancel.cancel();
    assert_eq!(stream.next().await, None, "a cancelled stream ends");
    let m = builder.finish(true);
    assert_eq!(m.stop_reason, StopReason::Aborted);
    assert_eq!(m.error_message.as_deref(), Some("Request was aborted"));
    assert_eq!(m.text(), "Some");
    assert_eq!(m.response_id.as_deref(), Some("msg_01"));
}
