//! The start-up probe against the fake HTTPS server: a trusted handshake passes without a
//! request, an untrusted one names the cause.

use baton_host::provider::config::ProviderConfig;
use baton_host::provider::probe::{PROBE_TIMEOUT, ProbeCause, probe_with};
use hyper_util::client::proxy::matcher::Matcher;

use crate::fake::{FakeServer, Reply};
use crate::support::{call, recording_retry};

fn request() -> baton_host::provider::ModelRequest {
    baton_host::provider::ModelRequest {
        model: "m".into(),
        system_prompt: String::new(),
        messages: vec![baton_host::message::Message::User(
            baton_host::message::UserMessage::text("hi", 1),
        )]
        .into(),
        tools: Vec::new(),
        thinking: baton_host::ThinkingLevel::Off,
    }
}

#[tokio::test]
async fn a_trusted_https_server_passes_the_probe_which_sends_no_request() {
    let server = FakeServer::tls(vec![Reply::data(&[
        r#"{"choices":[{"delta":{"content":"first reply"},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ])])
    .await;
    let mut config = ProviderConfig::openai(&server.base_url);
    config.ca_file = server.ca_file.clone();
    let target = probe_with(&config, &Matcher::builder().build(), PROBE_TIMEOUT)
        .await
        .unwrap()
        .expect("probed");
    assert!(target.tls);
    assert_eq!(target.url, server.base_url);
    assert!(server.requests().is_empty(), "the probe sent a request");
    // The probe used no reply: the first call gets the first one.
    let provider =
        baton_host::provider::openai::OpenAiProvider::new(config).with_retry(recording_retry().0);
    let (m, _) = call(&provider, request()).await;
    assert_eq!(m.text(), "first reply");
}

#[tokio::test]
async fn an_untrusted_certificate_fails_the_probe_as_unknown_issuer() {
    let server = FakeServer::tls(Vec::new()).await;
    let config = ProviderConfig::openai(&server.base_url);
    let failure = probe_with(&config, &Matcher::builder().build(), PROBE_TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(failure.cause, ProbeCause::Tls("unknown issuer".into()));
    assert_eq!(
        failure.to_string(),
        format!("cannot reach {}: tls: unknown issuer", server.base_url)
    );
    assert!(server.requests().is_empty());
}
