//! The coding tools stay in their workspace: path escapes, non-regular files, read bounds,
//! same-file locking, bash's environment and its Landlock confinement.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helper functions unwrap like the tests they serve"
)]

mod common;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_host::tool::{
    BashConfig, Confinement, FileAccess, MAX_READ_BYTES, ParentEnv, ReadTool, Tool, ToolContext,
    ToolSet, confinement_status,
};
use baton_protocol::Value;
use baton_testkit::Need;
use tokio_util::sync::CancellationToken;

use common::call_tool;

/// A workspace and a separate artefact directory, both temporary.
struct Fixture {
    workspace: tempfile::TempDir,
    artifacts: tempfile::TempDir,
    outside: tempfile::TempDir,
    tools: ToolSet,
}

impl Fixture {
    fn new() -> Self {
        Self::with(BashConfig::default())
    }

    fn with(bash: BashConfig) -> Self {
        Self {
            workspace: tempfile::tempdir().unwrap(),
            artifacts: tempfile::tempdir().unwrap(),
            outside: tempfile::tempdir().unwrap(),
            tools: ToolSet::coding(bash),
        }
    }

    fn ws(&self) -> &Path {
        self.workspace.path()
    }

    fn ctx(&self) -> ToolContext {
        ToolContext {
            cwd: self.ws().to_path_buf(),
            artifacts_dir: self.artifacts.path().to_path_buf(),
            cancel: CancellationToken::new(),
            tool_call_id: "call_1".into(),
        }
    }

    /// Runs one call (arguments as JSON) and returns (is_error, text). Nothing may take long.
    async fn call(&self, tool: &str, json: &str) -> (bool, String) {
        call_tool(self.tools.get(tool).unwrap(), json, &self.ctx()).await
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo failed");
}

/// Asserts an error result that names the path and the workspace on one line.
fn assert_refused_outside(result: &(bool, String), path: &str, fixture: &Fixture) {
    let (is_error, text) = result;
    assert!(*is_error, "not refused: {text}");
    let root = std::fs::canonicalize(fixture.ws()).unwrap();
    assert!(text.starts_with("refused: "), "{text}");
    assert!(text.contains(path), "{text}");
    assert!(text.contains(&root.display().to_string()), "{text}");
    assert!(!text.contains('\n'), "{text}");
}

#[tokio::test]
async fn dot_dot_absolute_paths_and_symlinks_out_are_refused_by_every_file_tool() {
    let f = Fixture::new();
    let secret = f.outside.path().join("secret.txt");
    std::fs::write(&secret, "outside\n").unwrap();
    std::os::unix::fs::symlink(f.outside.path(), f.ws().join("out-dir")).unwrap();
    std::os::unix::fs::symlink(&secret, f.ws().join("out-file")).unwrap();
    let up = format!(
        "{}{}",
        "../".repeat(f.ws().components().count()),
        secret.strip_prefix("/").unwrap().display()
    );
    let paths = [
        up.clone(),
        secret.display().to_string(),
        "out-file".to_owned(),
        "out-dir/secret.txt".to_owned(),
    ];
    for path in &paths {
        let p = json_str(path);
        let read = f.call("read", &format!(r#"{{"path":{p}}}"#)).await;
        assert_refused_outside(&read, path, &f);
        let edit = f
            .call(
                "edit",
                &format!(r#"{{"path":{p},"oldText":"outside","newText":"pwned"}}"#),
            )
            .await;
        assert_refused_outside(&edit, path, &f);
        let write = f
            .call("write", &format!(r#"{{"path":{p},"content":"pwned"}}"#))
            .await;
        assert_refused_outside(&write, path, &f);
    }
    // New files outside, through `..`, an absolute path or a symlinked directory.
    for path in [
        "../new-outside.txt".to_owned(),
        f.outside.path().join("new.txt").display().to_string(),
        "out-dir/new.txt".to_owned(),
        "out-dir/deeper/new.txt".to_owned(),
    ] {
        let p = json_str(&path);
        let write = f
            .call("write", &format!(r#"{{"path":{p},"content":"pwned"}}"#))
            .await;
        assert_refused_outside(&write, &path, &f);
    }
    let (is_error, text) = f
        .call(
            "write",
            r#"{"path":"missing/../../escape.txt","content":"x"}"#,
        )
        .await;
    assert!(is_error, "{text}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "outside\n");
    assert_eq!(
        std::fs::read_dir(f.outside.path()).unwrap().count(),
        1,
        "something was created outside"
    );
    assert!(!f.ws().parent().unwrap().join("new-outside.txt").exists());
}

#[tokio::test]
async fn paths_inside_the_workspace_still_work_absolute_or_through_symlinks() {
    let f = Fixture::new();
    let abs = f.ws().join("a.txt").display().to_string();
    let (err, text) = f
        .call(
            "write",
            &format!(r#"{{"path":{},"content":"one\n"}}"#, json_str(&abs)),
        )
        .await;
    assert!(!err, "{text}");
    std::fs::create_dir(f.ws().join("sub")).unwrap();
    std::os::unix::fs::symlink("../a.txt", f.ws().join("sub/link")).unwrap();
    let (err, text) = f.call("read", r#"{"path":"sub/link"}"#).await;
    assert_eq!((err, text.as_str()), (false, "one\n"));
    let (err, text) = f
        .call(
            "edit",
            r#"{"path":"sub/link","oldText":"one","newText":"two"}"#,
        )
        .await;
    assert!(!err, "{text}");
    // The edit went to the target and left the symlink a symlink.
    assert_eq!(
        std::fs::read_to_string(f.ws().join("a.txt")).unwrap(),
        "two\n"
    );
    assert!(
        std::fs::symlink_metadata(f.ws().join("sub/link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let (err, text) = f
        .call("write", r#"{"path":"new/dirs/b.txt","content":"b"}"#)
        .await;
    assert!(!err, "{text}");
    assert_eq!(
        std::fs::read_to_string(f.ws().join("new/dirs/b.txt")).unwrap(),
        "b"
    );
}

#[tokio::test]
async fn devices_and_fifos_are_refused_without_blocking() {
    let f = Fixture::new();
    mkfifo(&f.ws().join("pipe"));
    std::os::unix::fs::symlink("/dev/zero", f.ws().join("zero")).unwrap();
    for tool in ["read", "edit"] {
        let args = |p: &str| {
            if tool == "read" {
                format!(r#"{{"path":{}}}"#, json_str(p))
            } else {
                format!(r#"{{"path":{},"oldText":"a","newText":"b"}}"#, json_str(p))
            }
        };
        let (err, text) = f.call(tool, &args("pipe")).await;
        assert!(err, "{text}");
        assert!(text.contains("is a FIFO, not a regular file"), "{text}");
        for dev in ["/dev/zero", "zero"] {
            let result = f.call(tool, &args(dev)).await;
            assert_refused_outside(&result, dev, &f);
        }
    }
    let (err, text) = f.call("write", r#"{"path":"pipe","content":"x"}"#).await;
    assert!(err, "{text}");
    assert!(text.contains("is a FIFO"), "{text}");
    assert!(
        std::fs::symlink_metadata(f.ws().join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    // Unconfined, /dev/zero is still not read: it is not a regular file.
    let read: Arc<dyn Tool> = Arc::new(ReadTool::new(FileAccess::unconfined()));
    let (err, text) = call_tool(&read, r#"{"path":"/dev/zero"}"#, &f.ctx()).await;
    assert!(err, "{text}");
    assert!(text.contains("is a device, not a regular file"), "{text}");
}

#[tokio::test]
async fn read_holds_at_most_max_read_bytes_and_says_where_to_continue() {
    let f = Fixture::new();
    // One 1 MiB line: shown up to the cap, with a marker.
    std::fs::write(f.ws().join("long"), "z".repeat(4 * MAX_READ_BYTES)).unwrap();
    let (err, text) = f.call("read", r#"{"path":"long"}"#).await;
    assert!(!err);
    assert!(text.len() < MAX_READ_BYTES + 300, "{}", text.len());
    assert!(
        text.ends_with(&format!(
            "[Line 1 is longer than {MAX_READ_BYTES} bytes and was cut there. Showing lines 1-1 of 1. Use offset=2 to continue.]"
        )),
        "{}",
        &text[text.len() - 200..]
    );
    // Many lines: offset pages on, the total is counted.
    let body: String = (1..=50_000).map(|n| format!("line {n}\n")).collect();
    std::fs::write(f.ws().join("many"), &body).unwrap();
    let (err, text) = f
        .call("read", r#"{"path":"many","offset":40000,"limit":2}"#)
        .await;
    assert!(!err);
    assert_eq!(
        text,
        "line 40000\nline 40001\n\n[Showing lines 40000-40001 of 50000. Use offset=40002 to continue.]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_edits_of_one_file_all_land() {
    let f = Fixture::new();
    let n = 24;
    let body: String = (0..n).map(|i| format!("item {i} todo\n")).collect();
    std::fs::write(f.ws().join("list.txt"), &body).unwrap();
    std::fs::write(f.ws().join("other.txt"), "other todo\n").unwrap();
    let edit = Arc::clone(f.tools.get("edit").unwrap());
    let read = Arc::clone(f.tools.get("read").unwrap());
    // As the batch runner does: one task per call, all started before any finishes.
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (edit, ctx) = (Arc::clone(&edit), f.ctx());
        set.spawn(async move {
            let json = format!(
                r#"{{"path":"list.txt","oldText":"item {i} todo","newText":"item {i} done"}}"#
            );
            call_tool(&edit, &json, &ctx).await
        });
        let (read, ctx) = (Arc::clone(&read), f.ctx());
        set.spawn(async move { call_tool(&read, r#"{"path":"list.txt"}"#, &ctx).await });
    }
    let (other, ctx) = (Arc::clone(&edit), f.ctx());
    set.spawn(async move {
        call_tool(
            &other,
            r#"{"path":"other.txt","oldText":"todo","newText":"done"}"#,
            &ctx,
        )
        .await
    });
    while let Some(result) = set.join_next().await {
        let (err, text) = result.unwrap();
        assert!(!err, "{text}");
        // A read sees whole files only (atomic replacement): every line is intact.
        assert!(
            text.lines().all(|l| l.ends_with(" todo")
                || l.ends_with(" done")
                || l.starts_with("Successfully")),
            "{text}"
        );
    }
    let expected: String = (0..n).map(|i| format!("item {i} done\n")).collect();
    assert_eq!(
        std::fs::read_to_string(f.ws().join("list.txt")).unwrap(),
        expected
    );
    assert_eq!(
        std::fs::read_to_string(f.ws().join("other.txt")).unwrap(),
        "other done\n"
    );
    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(f.ws())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test]
async fn edit_keeps_the_file_mode() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let script = f.ws().join("run.sh");
    std::fs::write(&script, "echo old\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
    let (err, text) = f
        .call(
            "edit",
            r#"{"path":"run.sh","oldText":"old","newText":"new"}"#,
        )
        .await;
    assert!(!err, "{text}");
    let mode = std::fs::metadata(&script).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750);
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "echo new\n");
}

/// Env lines of `env` run by the bash tool.
async fn bash_env(f: &Fixture) -> Vec<String> {
    let (err, text) = f.call("bash", r#"{"command":"env"}"#).await;
    assert!(!err, "{text}");
    text.lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn bash_sees_only_the_allowlisted_environment() {
    let given = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/home/tester"),
        ("LANG", "C.UTF-8"),
        ("LC_CTYPE", "C.UTF-8"),
        ("OPENAI_API_KEY", "sk-test-not-for-bash"),
        ("ANTHROPIC_API_KEY", "sk-ant-test"),
        ("GITHUB_TOKEN", "ghp_test"),
        ("AWS_ACCESS_KEY_ID", "AKIATEST"),
        ("MY_SECRET", "hush"),
        ("LD_PRELOAD", "/evil.so"),
    ];
    let f = Fixture::with(BashConfig {
        parent_env: ParentEnv::Given(
            given
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        ),
        ..BashConfig::default()
    });
    let env = bash_env(&f).await;
    let names: std::collections::BTreeSet<&str> = env
        .iter()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    let expected_tmp = format!("TMPDIR={}", f.artifacts.path().join("tmp").display());
    assert!(env.contains(&expected_tmp), "{env:?}");
    assert!(env.contains(&"HOME=/home/tester".to_owned()), "{env:?}");
    for secret in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "MY_SECRET",
        "LD_PRELOAD",
    ] {
        assert!(!names.contains(secret), "{secret} reached bash: {env:?}");
    }
    assert!(!env.iter().any(|l| l.contains("sk-")), "{env:?}");
}

/// Set on the re-executed copy of this test binary.
const CHILD_MARK: &str = "BATON_TOOLS_TEST_CHILD";

#[tokio::test]
async fn an_api_key_in_the_hosts_environment_does_not_reach_bash() {
    if std::env::var_os(CHILD_MARK).is_some() {
        // The child: the variable is really in this process's environment.
        assert_eq!(
            std::env::var("OPENAI_API_KEY").as_deref(),
            Ok("sk-host-key-for-test")
        );
        let env = bash_env(&Fixture::new()).await;
        assert!(
            !env.iter().any(|l| l.starts_with("OPENAI_API_KEY=")),
            "{env:?}"
        );
        assert!(env.iter().any(|l| l.starts_with("PATH=")), "{env:?}");
        return;
    }
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_api_key_in_the_hosts_environment_does_not_reach_bash",
            "--test-threads=1",
        ])
        .env(CHILD_MARK, "1")
        .env("OPENAI_API_KEY", "sk-host-key-for-test")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}

/// The Landlock status, or `None` (after printing SKIPPED) when the kernel lacks it and
/// `BATON_REQUIRE_LANDLOCK=1` is not set.
fn landlock_or_skip() -> Option<u32> {
    match confinement_status(&BashConfig::default()) {
        Confinement::Active { abi } => Some(abi),
        other => {
            Need::Landlock.skip(format_args!("confinement is {other}"));
            None
        }
    }
}

fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_under_landlock_writes_only_inside_the_workspace_and_its_tmpdir() {
    let Some(abi) = landlock_or_skip() else {
        return;
    };
    assert!(abi >= 1);
    let f = Fixture::new();
    let outside: PathBuf = std::env::temp_dir().join(unique("baton-outside"));
    let beside = f.outside.path().join("beside");
    let command = format!(
        "touch ./inside && mkdir -p sub && echo x > sub/file && t=$(mktemp) && echo y > \"$t\" \
         && echo ok > /dev/null && echo out > /dev/stdout && echo err > /dev/stderr \
         && cat /etc/passwd >/dev/null; \
         touch {o} 2>/dev/null && echo WROTE-OUTSIDE; \
         echo z > {b} 2>/dev/null && echo WROTE-BESIDE; \
         echo done",
        o = outside.display(),
        b = beside.display(),
    );
    let (err, text) = f
        .call("bash", &format!(r#"{{"command":{}}}"#, json_str(&command)))
        .await;
    assert!(!err, "{text}");
    assert!(text.contains("done"), "{text}");
    assert!(text.contains("out") && text.contains("err"), "{text}");
    assert!(!text.contains("WROTE-OUTSIDE"), "{text}");
    assert!(!text.contains("WROTE-BESIDE"), "{text}");
    assert!(!outside.exists(), "{} was created", outside.display());
    assert!(!beside.exists());
    assert!(f.ws().join("inside").exists());
    assert_eq!(
        std::fs::read_to_string(f.ws().join("sub/file")).unwrap(),
        "x\n"
    );
    // The bash result says it was confined.
    let (err, text) = f
        .call("bash", r#"{"command":"touch /tmp/x-$$ || echo denied"}"#)
        .await;
    assert!(!err, "{text}");
    assert!(
        text.contains("Permission denied") && text.contains("denied"),
        "{text}"
    );
    // The host's own threads stay free: tokio's workers and blocking pool still write anywhere.
    for i in 0..8 {
        let p = std::env::temp_dir().join(unique(&format!("baton-host-free-{i}")));
        tokio::fs::write(&p, "free").await.unwrap();
        tokio::fs::remove_file(&p).await.unwrap();
    }
    std::fs::write(&outside, "host").unwrap();
    std::fs::remove_file(&outside).unwrap();
}

#[tokio::test]
async fn bash_details_say_whether_the_command_was_confined() {
    let active = confinement_status(&BashConfig::default()).is_active();
    let f = Fixture::new();
    let tool = f.tools.get("bash").unwrap();
    let args = tool
        .parameters()
        .parse(&Value::from_json(r#"{"command":"true"}"#).unwrap())
        .unwrap();
    let out = tool.execute(&args, &f.ctx()).await.unwrap();
    let confined = out
        .details
        .as_ref()
        .and_then(Value::as_map)
        .and_then(|m| m.get("confined"))
        .cloned();
    assert_eq!(confined, Some(Value::Bool(active)));
}

#[tokio::test]
async fn confinement_can_be_turned_off_and_the_status_says_so() {
    let config = BashConfig {
        confine: false,
        ..BashConfig::default()
    };
    assert_eq!(confinement_status(&config), Confinement::Disabled);
    let f = Fixture::with(config);
    let target = f.outside.path().join("allowed.txt");
    let p = json_str(&target.display().to_string());
    let (err, text) = f
        .call("write", &format!(r#"{{"path":{p},"content":"ok"}}"#))
        .await;
    assert!(!err, "{text}");
    let (err, text) = f
        .call(
            "bash",
            &format!(
                r#"{{"command":{}}}"#,
                json_str(&format!("echo more >> {}", target.display()))
            ),
        )
        .await;
    assert!(!err, "{text}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "okmore\n");
}
