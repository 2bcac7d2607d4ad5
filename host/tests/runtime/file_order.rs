//! Calls of one parallel batch that touch the same file run in call order; calls on different
//! files still run at once.

use std::sync::Arc;
use std::time::Duration;

use baton_host::agent::{LoopEvent, run};
use baton_host::message::StopReason;
use baton_host::tool::{
    EditTool, FileAccess, ObjectSchema, Tool, ToolContext, ToolError, ToolOutput, ToolSet,
    WriteTool,
};
use baton_host::{BoxFuture, RunOutcome};
use baton_protocol::Value;
use tokio::sync::{Barrier, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::support::*;

/// What a [`Gated`] call does before handing over to the real tool.
#[derive(Debug)]
enum Before {
    /// Waits for the notify.
    Notify(Arc<Notify>),
    /// Waits at the barrier (opens only when every party has started).
    Barrier(Arc<Barrier>),
    /// Panics.
    Panic,
    /// Waits for the abort, then fails without running the tool.
    UntilCancelled,
}

/// A real file tool with a gate in front: same schema and touched paths, under another name.
#[derive(Debug)]
struct Gated {
    name: String,
    inner: Arc<dyn Tool>,
    before: Before,
}

impl Gated {
    fn new(name: &str, inner: Arc<dyn Tool>, before: Before) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            inner,
            before,
        })
    }
}

impl Tool for Gated {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "gated file tool"
    }
    fn parameters(&self) -> &ObjectSchema {
        self.inner.parameters()
    }
    fn execute<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            match &self.before {
                Before::Notify(gate) => gate.notified().await,
                Before::Barrier(barrier) => {
                    barrier.wait().await;
                }
                Before::Panic => panic!("gated tool panicked on purpose"),
                Before::UntilCancelled => {
                    ctx.cancel.cancelled().await;
                    return Err(ToolError::new("cancelled"));
                }
            }
            self.inner.execute(arguments, ctx).await
        })
    }
    fn touched_paths<'a>(
        &'a self,
        arguments: &'a Value,
        cwd: &'a std::path::Path,
    ) -> BoxFuture<'a, Option<Vec<std::path::PathBuf>>> {
        self.inner.touched_paths(arguments, cwd)
    }
}

/// The session's file tools, sharing one access, plus `extra`.
fn file_tools(access: &FileAccess, extra: Vec<Arc<dyn Tool>>) -> ToolSet {
    let set = ToolSet::new()
        .with(Arc::new(EditTool::new(access.clone())))
        .with(Arc::new(WriteTool::new(access.clone())));
    extra.into_iter().fold(set, ToolSet::with)
}

fn edit_args(path: &str, old: &str, new: &str) -> String {
    format!(r#"{{"path":"{path}","oldText":"{old}","newText":"{new}"}}"#)
}

async fn go(
    dir: &std::path::Path,
    tools: ToolSet,
    steps: Vec<Step>,
    ctx: &TestCtx,
    cancel: &CancellationToken,
) -> RunOutcome {
    let mut steps = steps;
    steps.push(done(StopReason::ToolUse));
    let p = FakeProvider::new(vec![steps, vec![text("ok"), done(StopReason::Stop)]]);
    let mut cfg = config(p, tools);
    cfg.cwd = dir.to_path_buf();
    // A guard against a hang (a regression would deadlock a gate), not a synchronisation.
    tokio::time::timeout(
        Duration::from_secs(60),
        run(&cfg, ctx, vec![user("go")], cancel, &TaskTracker::new()),
    )
    .await
    .expect("the batch hung")
    .unwrap()
}

fn ended(ctx: &TestCtx) -> Vec<String> {
    ctx.events()
        .into_iter()
        .filter_map(|e| match e {
            LoopEvent::ToolEnd { result } => Some(result.tool_call_id),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn same_file_edits_in_one_parallel_batch_apply_in_call_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "one\n").unwrap();
    let access = FileAccess::confined();
    let gate = Arc::new(Notify::new());
    // c1 is held until c3 (another tool, no file) has run; c2's oldText exists only after c1.
    let tools = file_tools(
        &access,
        vec![
            Gated::new(
                "held_edit",
                Arc::new(EditTool::new(access.clone())),
                Before::Notify(gate.clone()),
            ),
            TestTool::new("release", Behaviour::Signal(gate)),
        ],
    );
    let ctx = TestCtx::new();
    go(
        dir.path(),
        tools,
        vec![
            call("c1", "held_edit", &edit_args("f.txt", "one", "two")),
            call("c2", "edit", &edit_args("./f.txt", "two", "three")),
            call("c3", "release", "{}"),
        ],
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    let r = results(&ctx.messages());
    assert!(r.iter().all(|(_, err, _)| !err), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "three\n"
    );
    let ends = ended(&ctx);
    let at = |id: &str| ends.iter().position(|e| e == id).unwrap();
    assert!(
        at("c3") < at("c1"),
        "the file-less call was not held: {ends:?}"
    );
    assert!(
        at("c1") < at("c2"),
        "same-file results follow call order: {ends:?}"
    );
}

#[tokio::test]
async fn calls_on_different_files_in_one_batch_still_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let access = FileAccess::confined();
    // Opens only when both calls are inside their tool at once.
    let barrier = Arc::new(Barrier::new(2));
    let meet = Gated::new(
        "meet_write",
        Arc::new(WriteTool::new(access.clone())),
        Before::Barrier(barrier),
    );
    let ctx = TestCtx::new();
    go(
        dir.path(),
        file_tools(&access, vec![meet]),
        vec![
            call("c1", "meet_write", r#"{"path":"a.txt","content":"A"}"#),
            call("c2", "meet_write", r#"{"path":"sub/b.txt","content":"B"}"#),
        ],
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    let r = results(&ctx.messages());
    assert!(r.iter().all(|(_, err, _)| !err), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "A"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sub/b.txt")).unwrap(),
        "B"
    );
}

#[tokio::test]
async fn a_panicking_or_failing_call_still_releases_the_next_call_on_its_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "one\n").unwrap();
    let access = FileAccess::confined();
    let tools = file_tools(
        &access,
        vec![Gated::new(
            "panic_edit",
            Arc::new(EditTool::new(access.clone())),
            Before::Panic,
        )],
    );
    let ctx = TestCtx::new();
    go(
        dir.path(),
        tools,
        vec![
            call("c1", "panic_edit", &edit_args("f.txt", "one", "x")),
            call("c2", "edit", &edit_args("f.txt", "absent", "x")),
            call("c3", "edit", &edit_args("f.txt", "one", "two")),
        ],
        &ctx,
        &CancellationToken::new(),
    )
    .await;
    let r = results(&ctx.messages());
    assert!(r[0].1 && r[0].2.contains("panicked"), "{r:?}");
    assert!(r[1].1 && r[1].2.contains("Could not find"), "{r:?}");
    assert!(!r[2].1, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "two\n"
    );
    // A panicked call's result is reported once the batch is over, like any other.
    assert_eq!(ended(&ctx), vec!["c2", "c3", "c1"]);
}

#[tokio::test]
async fn an_abort_skips_calls_still_waiting_for_their_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "one\n").unwrap();
    let access = FileAccess::confined();
    let tools = file_tools(
        &access,
        vec![Gated::new(
            "stuck_edit",
            Arc::new(EditTool::new(access.clone())),
            Before::UntilCancelled,
        )],
    );
    let ctx = TestCtx::new();
    let cancel = CancellationToken::new();
    let aborter = async {
        ctx.wait_for(|evs| {
            evs.iter()
                .filter(|e| matches!(e, LoopEvent::ToolStart { .. }))
                .count()
                == 2
        })
        .await;
        cancel.cancel();
    };
    let (out, ()) = tokio::join!(
        go(
            dir.path(),
            tools,
            vec![
                call("c1", "stuck_edit", &edit_args("f.txt", "one", "x")),
                call("c2", "edit", &edit_args("f.txt", "one", "two")),
            ],
            &ctx,
            &cancel,
        ),
        aborter
    );
    assert_eq!(out.stop_reason, StopReason::Aborted);
    let r = results(&ctx.messages());
    assert_eq!(r[0], ("c1".into(), true, "cancelled".into()));
    assert!(r[1].1 && r[1].2.contains("skipped"), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "one\n"
    );
}
