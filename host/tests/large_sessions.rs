//! Sessions of any size stay watchable: a 100,000-item transcript and a 50 MiB tool output
//! attach, subscribe and stream under the server's default 16 MiB frame limit, with older
//! items paged (`listItems`) and long text read by range (`readItem`); over-long prompts are
//! refused by name.
//!
//! The long histories are built through the runtime's import API (one journal entry per
//! message), not through 100,000 model turns.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helpers unwrap like the tests they serve"
)]

mod common;

use std::time::Duration;

use baton_client::{Client, Endpoint, Subscription};
use baton_host::message::{
    AgentMessage, AssistantContent, AssistantMessage, StopReason, TextContent, ToolCall,
    ToolResultMessage, Usage, UserContent, UserMessage,
};
use baton_host::service::ServiceHost;
use baton_host::session::{
    DEFAULT_TRANSCRIPT_WINDOW, MAX_PROMPT_BYTES, MAX_PUBLISHED_ITEM_BYTES, SessionManager,
};
use baton_protocol::chord::{ServiceCall, ServiceMode};
use baton_protocol::{ErrorCode, Value};
use baton_server::Server;
use tempfile::TempDir;

use common::state::{get, guard_within, member};
use common::{connect, host_config, manual_clock, scripted, serve, stop, try_create};

const SERVER_ID: &str = "00000000-0000-4000-8000-00000000001a";
/// How long anything may take before the test is declared hung (not a performance bound).
const HANG: Duration = Duration::from_secs(300);

async fn guard<T>(what: &str, f: impl Future<Output = T>) -> T {
    guard_within(HANG, what, f).await
}

fn items(state: &Value) -> &[Value] {
    get(state, "transcript")
        .as_array()
        .map_or(&[], Vec::as_slice)
}

fn call(member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new("pi.session", member, args).into_value()
}

fn state(sub: &Subscription) -> Value {
    member(sub, "state")
}

fn n(v: usize) -> Value {
    Value::try_from(v).unwrap()
}

/// A host with the default server configuration (16 MiB frames) on a Unix socket.
struct Harness {
    host: ServiceHost,
    server: Server<ServiceHost>,
    socket: std::path::PathBuf,
    _dir: TempDir,
}

impl Harness {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = host_config(dir.path(), dir.path());
        // These sessions are far past any context window on purpose: they test publishing,
        // not compaction (tests/session_features/compaction.rs), which would add a summary
        // after every turn.
        config.session.compaction.auto = false;
        let manager =
            SessionManager::new(config, scripted(Duration::ZERO), manual_clock()).unwrap();
        let host = ServiceHost::new(manager).unwrap();
        let (server, socket) = serve(&host, SERVER_ID, dir.path(), Vec::new()).await;
        Self {
            host,
            server,
            socket,
            _dir: dir,
        }
    }

    /// A session created through `client`, holding `history` (imported before anyone
    /// attaches).
    async fn session_with(&self, client: &Client, history: Vec<AgentMessage>) -> String {
        let id = try_create(client, vec![]).await.unwrap();
        self.host
            .manager()
            .open(&id)
            .unwrap()
            .import_history(history)
            .unwrap();
        id
    }

    async fn client(&self) -> Client {
        connect(Endpoint::Unix(self.socket.clone())).await
    }

    async fn stop(self) {
        stop(&self.host, &self.server).await;
    }
}

fn assistant(text: &str, content: Vec<AssistantContent>, stop: StopReason) -> AgentMessage {
    let mut content = content;
    if !text.is_empty() {
        content.insert(0, AssistantContent::Text(TextContent::new(text)));
    }
    AgentMessage::Assistant(AssistantMessage {
        content,
        api: "scripted".into(),
        provider: "scripted".into(),
        model: "default".into(),
        response_model: None,
        response_id: None,
        usage: Usage::default(),
        stop_reason: stop,
        error_message: None,
        raw_stop_reason: None,
        timestamp: 1,
    })
}

/// `n` alternating user and assistant messages.
fn conversation(count: usize) -> Vec<AgentMessage> {
    (0..count)
        .map(|i| {
            if i % 2 == 0 {
                AgentMessage::User(UserMessage::text(format!("question {i}"), 1))
            } else {
                assistant(&format!("answer {i}"), Vec::new(), StopReason::Stop)
            }
        })
        .collect()
}

/// Prompts and waits for the reply and for the replica to show the turn settled.
async fn prompt_and_settle(session: &baton_client::Session, sub: &Subscription) {
    let reply = guard(
        "prompt",
        session.request(call("prompt", vec![Value::from("hello")])),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(get(&reply, "stopReason").as_str(), Some("stop"));
    // Updates precede the response: the replica already shows the settled reply.
    let s = state(sub);
    assert_eq!(get(&s, "phase").as_str(), Some("idle"));
    let last = items(&s).last().unwrap();
    assert_eq!(get(last, "role").as_str(), Some("assistant"));
    assert_eq!(get(last, "status").as_str(), Some("complete"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_000_item_session_attaches_subscribes_and_streams_a_window() {
    let h = Harness::start().await;
    let total = 100_000;
    let client = h.client().await;
    let id = h.session_with(&client, conversation(total)).await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let s = state(&sub);
    assert_eq!(items(&s).len(), DEFAULT_TRANSCRIPT_WINDOW);
    assert_eq!(
        get(&s, "transcriptStart").as_u64(),
        Some((total - DEFAULT_TRANSCRIPT_WINDOW) as u64)
    );
    assert_eq!(
        get(items(&s).last().unwrap(), "content").to_json(),
        format!(r#"[{{"type":"text","text":"answer {}"}}]"#, total - 1)
    );

    prompt_and_settle(&session, &sub).await;
    // The window slid by the two new items and still holds the last ones.
    let s = state(&sub);
    assert_eq!(items(&s).len(), DEFAULT_TRANSCRIPT_WINDOW);
    assert_eq!(
        get(&s, "transcriptStart").as_u64(),
        Some((total + 2 - DEFAULT_TRANSCRIPT_WINDOW) as u64)
    );
    // A second subscriber's snapshot equals the first one's replica.
    let fresh = guard(
        "subscribe again",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    assert_eq!(state(&fresh), s);

    // Older items are paged.
    let page = guard(
        "listItems",
        session.request(call("listItems", vec![n(0), n(3)])),
    )
    .await
    .unwrap()
    .into_value();
    assert_eq!(get(&page, "total").as_u64(), Some(total as u64 + 2));
    assert_eq!(get(&page, "start").as_u64(), Some(0));
    let first = get(&page, "items").as_array().unwrap();
    assert_eq!(first.len(), 3);
    assert_eq!(
        get(&first[0], "content").to_json(),
        r#"[{"type":"text","text":"question 0"}]"#
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_50_mib_tool_output_is_published_clipped_and_read_back_by_range() {
    let h = Harness::start().await;
    let size = 50 << 20;
    // A multi-byte character every 7 bytes, so cuts must find character boundaries.
    let output: String = "abcdé\n".repeat(size / 7 + 1);
    let output = output[..output.floor_char_boundary(size)].to_owned();
    let call_block = ToolCall::new(
        "c1",
        "bash",
        Value::from_json(r#"{"command":"cat big"}"#).unwrap(),
    );
    let history = vec![
        AgentMessage::User(UserMessage::text("cat the big file", 1)),
        assistant(
            "",
            vec![AssistantContent::ToolCall(call_block.clone())],
            StopReason::ToolUse,
        ),
        AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: "c1".into(),
            tool_name: "bash".into(),
            content: vec![UserContent::text(output.clone())],
            details: None,
            is_error: false,
            timestamp: 2,
        }),
    ];
    let client = h.client().await;
    let id = h.session_with(&client, history).await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let s = state(&sub);
    let tool = &items(&s)[2];
    assert_eq!(get(tool, "role").as_str(), Some("tool"));
    assert_eq!(get(tool, "clipped").to_json(), r#"[["content",0,"text"]]"#);
    let shown = get(&get(tool, "content").as_array().unwrap()[0], "text")
        .as_str()
        .unwrap()
        .to_owned();
    assert!(shown.len() <= MAX_PUBLISHED_ITEM_BYTES);
    assert!(output.starts_with(&shown));

    // The whole text is read by range, from the journal-backed transcript.
    let item_id = get(tool, "id").as_str().unwrap().to_owned();
    let path = Value::from_json(r#"["content",0,"text"]"#).unwrap();
    let read = |offset: usize, length: usize| {
        session.request(call(
            "readItem",
            vec![
                Value::from(item_id.as_str()),
                path.clone(),
                n(offset),
                n(length),
            ],
        ))
    };
    let head = guard("read head", read(0, 1 << 20))
        .await
        .unwrap()
        .into_value();
    assert_eq!(get(&head, "total").as_u64(), Some(output.len() as u64));
    let end = get(&head, "end").as_u64().unwrap() as usize;
    assert_eq!(get(&head, "text").as_str(), Some(&output[..end]));
    let tail = guard("read tail", read(output.len() - 10, 1 << 20))
        .await
        .unwrap()
        .into_value();
    let from = get(&tail, "offset").as_u64().unwrap() as usize;
    assert_eq!(get(&tail, "text").as_str(), Some(&output[from..]));
    assert_eq!(get(&tail, "end").as_u64(), Some(output.len() as u64));

    prompt_and_settle(&session, &sub).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_over_the_limit_is_refused_naming_the_limit() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.session_with(&client, Vec::new()).await;
    let session = guard("attach", client.attach(&id)).await.unwrap();
    let text = "x".repeat(MAX_PROMPT_BYTES + 1);
    let err = guard(
        "prompt",
        session.request(call("prompt", vec![Value::from(text.as_str())])),
    )
    .await
    .unwrap_err();
    let wire = err.to_string();
    assert!(
        err.is(ErrorCode::InvalidRequest),
        "expected invalid_request, got {wire}"
    );
    assert!(wire.contains(&MAX_PROMPT_BYTES.to_string()), "{wire}");
    // Nothing was recorded.
    assert!(h.host.manager().open(&id).unwrap().is_empty());
    h.stop().await;
}
