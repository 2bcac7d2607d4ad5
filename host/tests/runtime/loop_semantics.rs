//! The agent loop's contract, one behaviour per test.

use std::sync::Arc;

use baton_host::agent::{LENGTH_FAILURE_TEXT, LoopEvent, ToolExecution, run};
use baton_host::message::{AgentMessage, StopReason};
use baton_host::provider::{ProviderEvent, StreamUpdate};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::support::*;

async fn go(
    cfg: &baton_host::AgentConfig,
    ctx: &TestCtx,
    cancel: &CancellationToken,
) -> baton_host::RunOutcome {
    run(cfg, ctx, vec![user("go")], cancel, &TaskTracker::new())
        .await
        .unwrap()
}

#[tokio::test]
async fn stop_ends_the_run_after_one_model_call() {
    let p = FakeProvider::new(vec![vec![text("hello"), done(StopReason::Stop)]]);
    let ctx = TestCtx::new();
    let out = go(
        &config(p.clone(), tools(vec![])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.stop_reason, StopReason::Stop);
    assert_eq!(out.turns, 1);
    assert_eq!(p.calls(), 1);
    assert_eq!(roles(&ctx.messages()), vec!["user", "assistant"]);
}

#[tokio::test]
async fn error_ends_the_run_and_executes_no_tools() {
    let echo = TestTool::new("echo", Behaviour::Echo);
    let p = FakeProvider::new(vec![vec![
        call("c1", "echo", "{}"),
        Step::Event(ProviderEvent::Error("HTTP 500".into())),
    ]]);
    let ctx = TestCtx::new();
    let out = go(
        &config(p.clone(), tools(vec![echo.clone()])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.stop_reason, StopReason::Error);
    assert_eq!(out.error_message.as_deref(), Some("HTTP 500"));
    assert_eq!(echo.runs(), 0);
    assert_eq!(roles(&ctx.messages()), vec!["user", "assistant"]);
    assert_eq!(p.calls(), 1);
}

#[tokio::test]
async fn stream_that_ends_without_a_stop_reason_is_an_error() {
    let p = FakeProvider::new(vec![vec![text("partial")]]);
    let ctx = TestCtx::new();
    let out = go(&config(p, tools(vec![])), &ctx, &CancellationToken::new()).await;
    assert_eq!(out.stop_reason, StopReason::Error);
}

#[tokio::test]
async fn length_marks_every_tool_call_failed_instead_of_executing_it() {
    let echo = TestTool::new("echo", Behaviour::Echo);
    let p = FakeProvider::new(vec![
        vec![
            call("c1", "echo", "{}"),
            call("c2", "echo", "{}"),
            done(StopReason::Length),
        ],
        vec![text("retrying differently"), done(StopReason::Stop)],
    ]);
    let ctx = TestCtx::new();
    let out = go(
        &config(p.clone(), tools(vec![echo.clone()])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(echo.runs(), 0);
    assert_eq!(
        results(&ctx.messages()),
        vec![
            ("c1".into(), true, LENGTH_FAILURE_TEXT.into()),
            ("c2".into(), true, LENGTH_FAILURE_TEXT.into())
        ]
    );
    // The loop continues so the model sees the failures.
    assert_eq!(p.calls(), 2);
    assert_eq!(out.stop_reason, StopReason::Stop);
    assert_eq!(
        model_roles(&p.request(1).messages),
        vec!["user", "assistant", "toolResult", "toolResult"]
    );
}

#[tokio::test]
async fn tool_use_executes_and_the_next_call_sees_the_results() {
    let echo = TestTool::new("echo", Behaviour::Echo);
    let p = FakeProvider::new(vec![
        vec![call("c1", "echo", r#"{"n":1}"#), done(StopReason::ToolUse)],
        vec![text("done"), done(StopReason::Stop)],
    ]);
    let ctx = TestCtx::new();
    let out = go(
        &config(p.clone(), tools(vec![echo.clone()])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.turns, 2);
    assert_eq!(
        results(&ctx.messages()),
        vec![("c1".into(), false, r#"echo:{"n":1}"#.into())]
    );
    let second = p.request(1);
    assert_eq!(
        model_roles(&second.messages),
        vec!["user", "assistant", "toolResult"]
    );
    assert_eq!(second.tools.len(), 1);
}

#[tokio::test]
async fn unknown_tool_gets_an_error_result() {
    let p = FakeProvider::new(vec![vec![
        call("c1", "nope", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    go(&config(p, tools(vec![])), &ctx, &CancellationToken::new()).await;
    assert_eq!(
        results(&ctx.messages()),
        vec![("c1".into(), true, "Tool nope not found".into())]
    );
}

#[tokio::test]
async fn invalid_arguments_get_an_error_result_without_running_the_tool() {
    let echo = TestTool::new("echo", Behaviour::Echo);
    let p = FakeProvider::new(vec![vec![
        call("c1", "echo", r#"{"n":"one"}"#),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    go(
        &config(p, tools(vec![echo.clone()])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(echo.runs(), 0);
    assert_eq!(
        results(&ctx.messages()),
        vec![(
            "c1".into(),
            true,
            "Invalid arguments for tool echo: /n: expected integer, got string".into()
        )]
    );
}

#[tokio::test]
async fn coercible_arguments_run_the_tool_with_the_coerced_values_while_the_transcript_keeps_the_model_s()
 {
    let echo = TestTool::new("echo", Behaviour::Echo);
    let p = FakeProvider::new(vec![
        vec![
            call("c1", "echo", r#"{"n":"42"}"#),
            done(StopReason::ToolUse),
        ],
        vec![text("done"), done(StopReason::Stop)],
    ]);
    let ctx = TestCtx::new();
    go(
        &config(p, tools(vec![echo.clone()])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(echo.runs(), 1);
    assert_eq!(
        results(&ctx.messages()),
        vec![("c1".into(), false, r#"echo:{"n":42}"#.into())]
    );
    let sent: Vec<String> = ctx
        .messages()
        .iter()
        .filter_map(|m| match m {
            AgentMessage::Assistant(a) => Some(a.tool_calls()),
            _ => None,
        })
        .flatten()
        .map(|c| c.arguments.to_json())
        .collect();
    assert_eq!(sent, vec![r#"{"n":"42"}"#.to_owned()]);
    let started: Vec<String> = ctx
        .events()
        .iter()
        .filter_map(|e| match e {
            LoopEvent::ToolStart { call } => Some(call.arguments.to_json()),
            _ => None,
        })
        .collect();
    assert_eq!(started, vec![r#"{"n":"42"}"#.to_owned()]);
}

#[tokio::test]
async fn a_null_optional_argument_is_dropped_before_the_tool_runs() {
    let echo = TestTool::new("echo", Behaviour::Echo);
    let p = FakeProvider::new(vec![
        vec![
            call("c1", "echo", r#"{"n":null}"#),
            done(StopReason::ToolUse),
        ],
        vec![text("done"), done(StopReason::Stop)],
    ]);
    let ctx = TestCtx::new();
    go(
        &config(p, tools(vec![echo.clone()])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(
        results(&ctx.messages()),
        vec![("c1".into(), false, "echo:{}".into())]
    );
}

#[tokio::test]
async fn throwing_tool_gets_an_is_error_result_and_the_run_continues() {
    let p = FakeProvider::new(vec![vec![
        call("c1", "bad", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    let out = go(
        &config(
            p.clone(),
            tools(vec![TestTool::new("bad", Behaviour::Throw)]),
        ),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(
        results(&ctx.messages()),
        vec![("c1".into(), true, "boom".into())]
    );
    assert_eq!(
        p.calls(),
        2,
        "a tool error is recoverable: the model is called again"
    );
    assert_eq!(out.stop_reason, StopReason::Stop);
}

#[tokio::test]
async fn panicking_tool_gets_an_is_error_result() {
    let p = FakeProvider::new(vec![vec![
        call("c1", "oops", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    go(
        &config(p, tools(vec![TestTool::new("oops", Behaviour::Panic)])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    let r = results(&ctx.messages());
    assert_eq!(r.len(), 1);
    assert!(r[0].1);
    assert!(r[0].2.contains("panicked"));
}

#[tokio::test]
async fn parallel_results_are_appended_in_call_order_whatever_the_completion_order() {
    let gate = Arc::new(Notify::new());
    let slow = TestTool::new("slow", Behaviour::WaitFor(gate.clone()));
    let fast = TestTool::new("fast", Behaviour::Signal(gate));
    let p = FakeProvider::new(vec![vec![
        call("c1", "slow", "{}"),
        call("c2", "fast", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    go(
        &config(p, tools(vec![slow, fast])),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    let ended: Vec<String> = ctx
        .events()
        .into_iter()
        .filter_map(|e| match e {
            LoopEvent::ToolEnd { result } => Some(result.tool_call_id),
            _ => None,
        })
        .collect();
    assert_eq!(ended, vec!["c2", "c1"], "fast finished first");
    let appended: Vec<String> = results(&ctx.messages()).into_iter().map(|r| r.0).collect();
    assert_eq!(appended, vec!["c1", "c2"], "results follow the call order");
}

#[tokio::test]
async fn batch_stops_the_run_when_every_result_asks_to_terminate() {
    let p = FakeProvider::new(vec![vec![
        call("c1", "t", "{}"),
        call("c2", "t", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    let out = go(
        &config(
            p.clone(),
            tools(vec![TestTool::new("t", Behaviour::Terminate)]),
        ),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert!(out.terminated_by_tools);
    assert_eq!(p.calls(), 1);
    assert_eq!(
        roles(&ctx.messages()),
        vec!["user", "assistant", "toolResult", "toolResult"]
    );
}

#[tokio::test]
async fn batch_continues_when_only_some_results_ask_to_terminate() {
    let p = FakeProvider::new(vec![vec![
        call("c1", "t", "{}"),
        call("c2", "echo", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    let set = tools(vec![
        TestTool::new("t", Behaviour::Terminate),
        TestTool::new("echo", Behaviour::Echo),
    ]);
    let out = go(&config(p.clone(), set), &ctx, &CancellationToken::new()).await;
    assert!(!out.terminated_by_tools);
    assert_eq!(p.calls(), 2);
}

#[tokio::test]
async fn abort_mid_stream_settles_an_aborted_message_and_runs_no_tools() {
    let echo = TestTool::new("echo", Behaviour::Echo);
    let p = FakeProvider::new(vec![vec![
        text("partial "),
        call("c1", "echo", "{}"),
        Step::Hang,
    ]]);
    let ctx = TestCtx::new();
    let cancel = CancellationToken::new();
    let cfg = config(p.clone(), tools(vec![echo.clone()]));
    let aborter = async {
        ctx.wait_for(|evs| {
            evs.iter().any(|e| {
                matches!(
                    e,
                    LoopEvent::AssistantUpdate(StreamUpdate::BlockStart { index: 1, .. })
                )
            })
        })
        .await;
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(go(&cfg, &ctx, &cancel), aborter);
    assert_eq!(out.stop_reason, StopReason::Aborted);
    assert_eq!(echo.runs(), 0);
    let msgs = ctx.messages();
    assert_eq!(roles(&msgs), vec!["user", "assistant"]);
    let AgentMessage::Assistant(a) = &msgs[1] else {
        panic!()
    };
    assert_eq!(a.stop_reason, StopReason::Aborted);
    assert_eq!(a.text(), "partial ", "partial content is kept");
    assert_eq!(p.calls(), 1);
}

/// The project's CI once saw `error` here: the abort fired on another thread between the
/// loop's look at the token and the stream's, so the stream ended (as it does when
/// cancelled) and the loop took the end for a stream cut short.
#[tokio::test]
async fn an_abort_the_stream_sees_before_the_loop_still_settles_aborted() {
    let p = FakeProvider::new(vec![vec![text("partial "), Step::CancelAndEnd]]);
    let ctx = TestCtx::new();
    let cancel = CancellationToken::new();
    let out = go(&config(p.clone(), tools(vec![])), &ctx, &cancel).await;
    assert!(cancel.is_cancelled());
    assert_eq!(out.stop_reason, StopReason::Aborted);
    let msgs = ctx.messages();
    let AgentMessage::Assistant(a) = &msgs[1] else {
        panic!("{msgs:?}")
    };
    assert_eq!(a.stop_reason, StopReason::Aborted);
    assert_eq!(a.text(), "partial ");
}

#[tokio::test]
async fn abort_mid_tool_reaches_the_running_tool_and_ends_the_run() {
    let p = FakeProvider::new(vec![vec![
        call("c1", "wait", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    let cancel = CancellationToken::new();
    let cfg = config(
        p.clone(),
        tools(vec![TestTool::new("wait", Behaviour::UntilCancelled)]),
    );
    let aborter = async {
        ctx.wait_for(|evs| evs.iter().any(|e| matches!(e, LoopEvent::ToolStart { .. })))
            .await;
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(go(&cfg, &ctx, &cancel), aborter);
    assert_eq!(out.stop_reason, StopReason::Aborted);
    assert_eq!(
        results(&ctx.messages()),
        vec![("c1".into(), true, "cancelled".into())]
    );
    assert_eq!(p.calls(), 1, "no model call after an abort");
}

#[tokio::test]
async fn sequential_batch_skips_calls_not_started_before_an_abort() {
    let p = FakeProvider::new(vec![vec![
        call("c1", "wait", "{}"),
        call("c2", "echo", "{}"),
        done(StopReason::ToolUse),
    ]]);
    let ctx = TestCtx::new();
    let cancel = CancellationToken::new();
    let echo = TestTool::new("echo", Behaviour::Echo);
    let mut cfg = config(
        p,
        tools(vec![
            TestTool::new("wait", Behaviour::UntilCancelled),
            echo.clone(),
        ]),
    );
    cfg.tool_execution = ToolExecution::Sequential;
    let aborter = async {
        ctx.wait_for(|evs| evs.iter().any(|e| matches!(e, LoopEvent::ToolStart { .. })))
            .await;
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(go(&cfg, &ctx, &cancel), aborter);
    assert_eq!(out.stop_reason, StopReason::Aborted);
    assert_eq!(echo.runs(), 0);
    let r = results(&ctx.messages());
    assert_eq!(r.len(), 2, "every call still gets a result");
    assert!(r[1].2.contains("skipped"));
}

#[tokio::test]
async fn steering_is_injected_between_turns_after_the_tool_results() {
    let p = FakeProvider::new(vec![
        vec![call("c1", "echo", "{}"), done(StopReason::ToolUse)],
        vec![text("ok"), done(StopReason::Stop)],
    ]);
    let ctx = TestCtx::new();
    *ctx.steer_on_tool_start.lock().unwrap() = Some("actually, stop".into());
    go(
        &config(
            p.clone(),
            tools(vec![TestTool::new("echo", Behaviour::Echo)]),
        ),
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(
        model_roles(&p.request(1).messages),
        vec!["user", "assistant", "toolResult", "user"]
    );
    assert_eq!(
        roles(&ctx.messages()),
        vec!["user", "assistant", "toolResult", "user", "assistant"]
    );
}

#[tokio::test]
async fn steering_queued_during_a_final_answer_continues_the_run() {
    let gate = Arc::new(Notify::new());
    let p = FakeProvider::new(vec![
        vec![
            text("first"),
            Step::Wait(gate.clone()),
            done(StopReason::Stop),
        ],
        vec![text("second"), done(StopReason::Stop)],
    ]);
    let ctx = TestCtx::new();
    let steer = async {
        ctx.wait_for(|evs| {
            evs.iter().any(|e| {
                matches!(
                    e,
                    LoopEvent::AssistantUpdate(StreamUpdate::TextAppend { .. })
                )
            })
        })
        .await;
        ctx.steering
            .lock()
            .unwrap()
            .push_back("one more thing".into());
        gate.notify_one();
    };
    let cfg = config(p.clone(), tools(vec![]));
    let cancel = CancellationToken::new();
    let (out, ()) = tokio::join!(go(&cfg, &ctx, &cancel), steer);
    assert_eq!(out.turns, 2);
    assert_eq!(
        roles(&ctx.messages()),
        vec!["user", "assistant", "user", "assistant"]
    );
}

#[tokio::test]
async fn streaming_text_is_reported_as_appends() {
    let p = FakeProvider::new(vec![vec![text("Hel"), text("lo"), done(StopReason::Stop)]]);
    let ctx = TestCtx::new();
    go(&config(p, tools(vec![])), &ctx, &CancellationToken::new()).await;
    let appends: Vec<String> = ctx
        .events()
        .into_iter()
        .filter_map(|e| match e {
            LoopEvent::AssistantUpdate(StreamUpdate::TextAppend { delta, .. }) => Some(delta),
            _ => None,
        })
        .collect();
    assert_eq!(appends, vec!["Hel", "lo"]);
}
