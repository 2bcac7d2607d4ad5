//! Long sessions: CPU per streamed token, CPU per model call and resident bytes
//! of `baton-host` sessions holding 10, 1,000 and 100,000 transcript items.
//!
//! Each session's history is imported through the runtime (`SessionRuntime::import_history`, one
//! journal entry per message), then a real server and one `baton_client` subscriber attach
//! and the session is prompted repeatedly. The model is a bench provider that streams a
//! fixed number of one-word tokens and ignores its context, so the figures are the host's
//! own costs: transcript bookkeeping, publishing, the server and the subscriber's replica
//! (both ends run in this process), not a model's prompt processing.
//!
//! CPU is summed over every thread's `schedstat` (nanoseconds). CPU per streamed token is
//! measured by the provider itself, from its first token to its last (median over the
//! replies): everything the token causes — the transcript append, the ops, the server, the
//! subscriber's replica. CPU per model call is the rest of a reply's cost: recording the
//! prompt, taking the context for the model, settling the reply; it is a difference of two
//! large figures, so noisy. CPU up to the model call is measured directly, from just before
//! the client sends the prompt to the provider's `stream` call (median over the replies):
//! the request, recording the prompt and taking the projected context, without the
//! streaming. Resident bytes per session are the RSS growth while the session is built and
//! attached, next to the growth for building the same messages once as a plain
//! `Vec<AgentMessage>` ("one copy").

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use baton_client::{Client, ClientConfig, Endpoint};
use baton_host::BoxFuture;
use baton_host::clock::SystemClock;
use baton_host::journal::FsyncPolicy;
use baton_host::message::{
    AgentMessage, AssistantMessage, StopReason, TextContent, Usage, UserMessage,
};
use baton_host::provider::scripted::{DEFAULT_TOKEN_DELAY, ScriptedConfig};
use baton_host::provider::{ModelInfo, ModelRegistry};
use baton_host::provider::{ModelRequest, Provider, ProviderEvent, ProviderStream};
use baton_host::service::ServiceHost;
use baton_host::session::{HostConfig, SUMMARY_REQUEST_OPENING, SessionManager};
use baton_protocol::chord::{ServiceCall, ServiceMode};
use baton_protocol::{ServerId, Value};
use baton_server::{Listener, Server, ServerConfig};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::memory::Growth;
use crate::procfs::{self, ProcError, Process};
use crate::util::{Plan, median};

/// Figures for one transcript size.
#[derive(Debug, Clone, Default)]
pub struct SessionFigures {
    /// Items the session held before the measured replies.
    pub items: usize,
    /// CPU per streamed token while a reply streams, ns (median over the long replies).
    pub ns_per_token: f64,
    /// CPU per reply beyond its streaming (the model call's setup and settling), µs.
    pub us_per_call: f64,
    /// CPU from sending the prompt to the provider's `stream` call, µs (median).
    pub us_to_call: f64,
    /// CPU per token of the long replies, all costs included, ns.
    pub ns_per_token_all_in: f64,
    /// RSS growth for the session (built, opened, attached, subscribed), bytes (signed).
    pub session_bytes: f64,
    /// RSS growth for one plain copy of its messages, bytes (signed).
    pub one_copy_bytes: f64,
}

/// Results for every size.
#[derive(Debug, Clone, Default)]
pub struct SessionResult {
    /// One row per size.
    pub rows: Vec<SessionFigures>,
    /// Tokens of the short and the long replies.
    pub tokens: (usize, usize),
    /// Replies timed per length and size.
    pub replies: usize,
}

/// Sizes and counts for `plan`.
fn sizes(plan: &Plan) -> (Vec<usize>, (usize, usize), usize) {
    if plan.quick {
        (vec![10, 100, 1_000], (8, 64), 3)
    } else {
        (vec![10, 1_000, 100_000], (32, 512), 20)
    }
}

/// Runs the long-session benchmark.
pub async fn run(dir: &Path, plan: &Plan) -> Result<SessionResult, Box<dyn std::error::Error>> {
    let (levels, tokens, replies) = sizes(plan);
    // A discarded first run: the first session also pays for the heap's and the runtime's
    // growth, which would inflate the smallest size's figures.
    eprintln!("session warm-up …");
    one(&dir.join("session-warm-up"), levels[0], tokens, replies).await?;
    let mut rows = Vec::new();
    for (k, &items) in levels.iter().enumerate() {
        eprintln!("session × {items} items …");
        rows.push(one(&dir.join(format!("session-{k}")), items, tokens, replies).await?);
    }
    Ok(SessionResult {
        rows,
        tokens,
        replies,
    })
}

fn conversation(count: usize) -> Vec<AgentMessage> {
    (0..count)
        .map(|i| {
            if i % 2 == 0 {
                AgentMessage::User(UserMessage::text(format!("question number {i}"), 1))
            } else {
                AgentMessage::Assistant(AssistantMessage {
                    content: vec![baton_host::message::AssistantContent::Text(
                        TextContent::new(format!("the answer to question number {}", i - 1)),
                    )],
                    api: "bench".into(),
                    provider: "bench".into(),
                    model: "stream".into(),
                    response_model: None,
                    response_id: None,
                    usage: Usage::default(),
                    stop_reason: StopReason::Stop,
                    error_message: None,
                    raw_stop_reason: None,
                    timestamp: 1,
                })
            }
        })
        .collect()
}

async fn one(
    dir: &Path,
    items: usize,
    tokens: (usize, usize),
    replies: usize,
) -> Result<SessionFigures, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let reply_tokens = Arc::new(AtomicUsize::new(tokens.0));
    let streamed: Arc<Mutex<Vec<f64>>> = Arc::default();
    let clock = Arc::new(CpuClock::default());
    let calls = Arc::new(CallTimer::new(Arc::clone(&clock)));
    let mut models = ModelRegistry::scripted(ScriptedConfig::new(
        DEFAULT_TOKEN_DELAY,
        SUMMARY_REQUEST_OPENING,
    ));
    models.register(
        ModelInfo {
            provider: "bench".into(),
            id: "stream".into(),
            name: "Bench stream".into(),
        },
        Arc::new(BenchProvider {
            tokens: Arc::clone(&reply_tokens),
            streamed: Arc::clone(&streamed),
            calls: Arc::clone(&calls),
            clock: Arc::clone(&clock),
        }),
    );
    let mut config = HostConfig::new(dir.join("sessions"));
    config.default_cwd = dir.to_path_buf();
    config.fsync = FsyncPolicy::Never;
    let manager = SessionManager::new(config, models, Arc::new(SystemClock))?;
    let host = ServiceHost::new(manager)?;
    let server = Server::start(
        ServerConfig::new(ServerId::parse("00000000-0000-4000-8000-0000000000b1")?),
        host.clone(),
        vec![Listener::unix(dir.join("run"))],
    )
    .await?;
    let socket = server.local_addrs()[0]
        .unix_path()
        .ok_or("unix listener")?
        .to_path_buf();

    // One copy of the messages, kept alive while the session is measured.
    let rss = || procfs::rss_bytes(Process::This);
    let rss0 = rss()?;
    let reference = conversation(items);
    let rss1 = rss()?;

    let client = Client::connect(ClientConfig::new(Endpoint::Unix(socket))).await?;
    let created = client
        .request(
            client.server_target(),
            ServiceCall::new(
                "pi.session-management",
                "create",
                vec![Value::from_json(r#"{"model":"bench/stream"}"#)?],
            )
            .into_value(),
        )
        .await?
        .into_value();
    let id = created
        .as_map()
        .and_then(|m| m.get("sessionId"))
        .and_then(Value::as_str)
        .ok_or("create answered no sessionId")?
        .to_owned();
    host.manager()
        .open(&id)?
        .import_history(conversation(items))?;
    let session = client.attach(&id).await?;
    let sub = session
        .subscribe("pi.session", ServiceMode::Singleton)
        .await?;
    let rss2 = rss()?;

    let prompt = || {
        calls.prompted();
        session
            .request(ServiceCall::new("pi.session", "prompt", vec![Value::from("go")]).into_value())
    };
    prompt().await?; // warm-up
    let mut cpu = [0.0f64; 2];
    for (slot, t) in [tokens.0, tokens.1].into_iter().enumerate() {
        reply_tokens.store(t, Ordering::Relaxed);
        let before = procfs::cpu_ns(Process::This)?;
        for _ in 0..replies {
            prompt().await?;
        }
        cpu[slot] = (procfs::cpu_ns(Process::This)? - before) / replies as f64;
    }
    drop(sub);
    // A reading the provider or the timer could not take fails the run here.
    clock.check()?;
    // Per token: the median, over the long replies, of the CPU spent while the reply
    // streamed (first token to done), divided by its tokens.
    let samples = std::mem::take(&mut *streamed.lock());
    let long: Vec<f64> = samples[samples.len().saturating_sub(replies)..].to_vec();
    let per_token = median(&long);
    // Per call: what a reply costs beyond its streaming.
    let per_call = cpu[1] - per_token * tokens.1 as f64;
    let to_call = std::mem::take(&mut *calls.samples.lock());
    let to_call = median(to_call.get(1..).unwrap_or_default()); // without the warm-up prompt
    drop(reference);
    client.close().await;
    host.begin_shutdown();
    let _ = server.close().await;
    host.shutdown().await;
    Ok(SessionFigures {
        items,
        ns_per_token: per_token,
        us_per_call: per_call / 1e3,
        us_to_call: to_call / 1e3,
        ns_per_token_all_in: cpu[1] / tokens.1 as f64,
        session_bytes: Growth::between(rss1, rss2, 1).per_item(),
        one_copy_bytes: Growth::between(rss0, rss1, 1).per_item(),
    })
}

/// [`procfs::cpu_ns`] of this process for code that cannot return its error (the provider's
/// stream, the call timer): a failed reading reads as NaN here and is kept, and
/// [`Self::check`] returns it, failing the run.
#[derive(Debug, Default)]
struct CpuClock {
    failed: Mutex<Option<ProcError>>,
}

impl CpuClock {
    /// CPU nanoseconds of every live thread of this process, or NaN (the error kept).
    fn now(&self) -> f64 {
        procfs::cpu_ns(Process::This).unwrap_or_else(|e| {
            self.failed.lock().get_or_insert(e);
            f64::NAN
        })
    }

    /// The first reading that failed, if any.
    fn check(&self) -> Result<(), ProcError> {
        self.failed.lock().take().map_or(Ok(()), Err)
    }
}

/// CPU from a prompt's send to its model call.
#[derive(Debug)]
struct CallTimer {
    clock: Arc<CpuClock>,
    /// The clock when the last prompt was sent (`f64` bits).
    sent: AtomicU64,
    /// One sample per model call, ns.
    samples: Mutex<Vec<f64>>,
}

impl CallTimer {
    fn new(clock: Arc<CpuClock>) -> Self {
        Self {
            clock,
            sent: AtomicU64::new(0),
            samples: Mutex::default(),
        }
    }

    fn prompted(&self) {
        self.sent
            .store(self.clock.now().to_bits(), Ordering::Relaxed);
    }

    fn called(&self) {
        let spent = self.clock.now() - f64::from_bits(self.sent.load(Ordering::Relaxed));
        self.samples.lock().push(spent);
    }
}

/// Streams `tokens` one-word text deltas, whatever the request, and records the CPU the
/// process spent per token while it streamed, and up to the call.
#[derive(Debug)]
struct BenchProvider {
    tokens: Arc<AtomicUsize>,
    streamed: Arc<Mutex<Vec<f64>>>,
    calls: Arc<CallTimer>,
    clock: Arc<CpuClock>,
}

impl Provider for BenchProvider {
    fn id(&self) -> &str {
        "bench"
    }
    fn api(&self) -> &str {
        "bench"
    }
    fn stream(
        &self,
        _request: ModelRequest,
        _cancel: CancellationToken,
    ) -> Box<dyn ProviderStream> {
        self.calls.called();
        let tokens = self.tokens.load(Ordering::Relaxed);
        Box::new(BenchStream {
            left: tokens,
            tokens,
            done: false,
            started: None,
            streamed: Arc::clone(&self.streamed),
            clock: Arc::clone(&self.clock),
        })
    }
}

struct BenchStream {
    left: usize,
    tokens: usize,
    done: bool,
    started: Option<f64>,
    streamed: Arc<Mutex<Vec<f64>>>,
    clock: Arc<CpuClock>,
}

impl ProviderStream for BenchStream {
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>> {
        Box::pin(async move {
            if self.started.is_none() {
                self.started = Some(self.clock.now());
            }
            if self.left > 0 {
                self.left -= 1;
                // Yield so the stream interleaves with publishing as a network stream would.
                tokio::task::yield_now().await;
                return Some(ProviderEvent::TextDelta("tok ".into()));
            }
            if self.done {
                return None;
            }
            self.done = true;
            if let Some(start) = self.started {
                let spent = self.clock.now() - start;
                self.streamed.lock().push(spent / self.tokens.max(1) as f64);
            }
            Some(ProviderEvent::Done {
                stop_reason: StopReason::Stop,
                raw_stop_reason: None,
            })
        })
    }
}
