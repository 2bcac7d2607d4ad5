//! Compaction through a real provider: a long session on an OpenAI-compatible model with a
//! small context window (from its models-file entry) is summarised by that model over HTTPS
//! after the turn that crossed the threshold, and the next call starts from the summary.

use std::path::Path;
use std::time::Duration;

use baton_host::ModelRef;
use baton_host::message::{AgentMessage, UserMessage};
use baton_host::provider::models_file::ModelsFile;
use baton_host::session::{
    CompactionSettings, CreateOptions, SUMMARIZATION_SYSTEM_PROMPT, SessionManager,
};

use crate::common::{host_config, manual_clock, scripted};
use crate::fake::{FakeServer, HANG_GUARD, Reply};
use crate::support::JsonBody;

/// A streamed answer whose usage says the prompt was `prompt_tokens` long (what a server
/// reports, and what the host measures the context by).
fn answer(text: &str, prompt_tokens: u64) -> Reply {
    Reply::data(&[
        &format!(
            r#"{{"choices":[{{"delta":{{"content":"{text}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":5,"total_tokens":{}}}}}"#,
            prompt_tokens + 5
        ),
        "[DONE]",
    ])
}

#[tokio::test]
async fn a_long_session_on_a_small_window_model_is_compacted_by_that_model_over_https() {
    let server = FakeServer::tls(vec![
        answer("the answer", 4100),
        answer("SUMMARY FROM THE MODEL", 4100),
        answer("after the summary", 300),
    ])
    .await;
    let models = format!(
        "[providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\nca_file = \"{}\"\n\n[[providers.local.models]]\nid = \"small\"\ncontext_window = 4000\nmax_output = 500\n",
        server.base_url,
        server.ca_file.as_ref().unwrap().display()
    );
    let file = ModelsFile::parse(&models, Path::new("models.toml")).unwrap();
    let mut registry = scripted(Duration::ZERO);
    file.register(&mut registry);

    let dir = tempfile::tempdir().unwrap();
    let mut config = host_config(dir.path(), dir.path());
    // The default window is far away; the model's own 4,000 tokens (minus 1,000 reserved)
    // are what the long history crosses.
    config.session.compaction = CompactionSettings {
        keep_recent_tokens: 200,
        default_context_window: 1_000_000,
        reserve_tokens: 1000,
        ..CompactionSettings::default()
    };
    let m = SessionManager::new(config, registry, manual_clock()).unwrap();
    let id = m
        .create(CreateOptions {
            model: Some(ModelRef::new("local", "small")),
            ..CreateOptions::default()
        })
        .unwrap();
    let s = m.open(&id).unwrap();
    let history: Vec<AgentMessage> = (0..8)
        .map(|i| {
            AgentMessage::User(UserMessage::text(
                format!("old message {i} {}", "x".repeat(2000)),
                1,
            ))
        })
        .collect();
    s.import_history(history).unwrap();

    s.prompt("one more").await.unwrap();
    tokio::time::timeout(HANG_GUARD, s.wait_idle())
        .await
        .expect("the session never went idle");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "the turn, then the summary request");
    let summary_request = reqs[1].json();
    assert_eq!(
        summary_request["messages"][0]["content"],
        SUMMARIZATION_SYSTEM_PROMPT
    );
    assert_eq!(summary_request["model"], "small");
    assert!(matches!(
        s.messages().first(),
        Some(AgentMessage::CompactionSummary(c)) if c.summary == "SUMMARY FROM THE MODEL"
    ));

    // The next call starts from the summary, not the old messages.
    s.prompt("next").await.unwrap();
    let next = server.requests()[2].body.clone();
    assert!(next.contains("SUMMARY FROM THE MODEL"), "{next}");
    assert!(!next.contains("old message 0"), "{next}");
    m.shutdown().await;
}
