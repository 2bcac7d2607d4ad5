//! The file tools over both of `path`'s resolvers (test builds only): the kernel's `openat2`
//! and the fallback walk answer every call alike, and the walk keeps every call inside while a
//! directory of the workspace is swapped for a symlink. These drive `read`, `write` and `edit`
//! themselves, so they sit above the tools rather than in `path`, which the tools use.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use baton_protocol::Value;
use rustix::fs::{FileType, Mode};
use tokio_util::sync::CancellationToken;

use super::contract::{Tool, ToolContext};
use super::edit::EditTool;
use super::path::FileAccess;
use super::read::ReadTool;
use super::write::WriteTool;

/// `read`, `write` and `edit` over one access.
fn tools(access: &FileAccess) -> [Arc<dyn Tool>; 3] {
    [
        Arc::new(ReadTool::new(access.clone())),
        Arc::new(WriteTool::new(access.clone())),
        Arc::new(EditTool::new(access.clone())),
    ]
}

/// One call of `tool` (`read`, `write` or `edit`); (is_error, text).
async fn call(tools: &[Arc<dyn Tool>; 3], tool: &str, json: &str, cwd: &Path) -> (bool, String) {
    let tool = tools.iter().find(|t| t.name() == tool).unwrap();
    let args = tool
        .parameters()
        .parse(&Value::from_json(json).unwrap())
        .unwrap();
    let ctx = ToolContext {
        cwd: cwd.to_path_buf(),
        artifacts_dir: cwd.join("unused-artifacts"),
        cancel: CancellationToken::new(),
        tool_call_id: "call".into(),
    };
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tool.execute(&args, &ctx),
    )
    .await
    .expect("a tool call hung");
    match out {
        Ok(out) => (
            out.is_error,
            out.content.iter().filter_map(|c| c.as_text()).collect(),
        ),
        Err(e) => (true, e.message),
    }
}

/// A workspace `ws` and a directory `out` beside it, with the links the cases use.
fn workspace(top: &Path) -> PathBuf {
    let ws = top.join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir(top.join("out")).unwrap();
    std::fs::write(top.join("out/secret"), "outside\n").unwrap();
    std::fs::write(ws.join("a.txt"), "a old\n").unwrap();
    std::fs::write(ws.join("sub/b.txt"), "b old\n").unwrap();
    let link =
        |target: &Path, name: &str| std::os::unix::fs::symlink(target, ws.join(name)).unwrap();
    link(Path::new("../a.txt"), "sub/up");
    link(&ws.join("a.txt"), "abs-in");
    link(&ws.join("sub"), "abs-in-dir");
    link(Path::new("../out/secret"), "rel-out");
    link(&top.join("out/secret"), "abs-out");
    link(Path::new("../out"), "out-dir");
    link(Path::new("nowhere"), "dangling");
    link(Path::new("/dev/zero"), "zero");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        ws.join("pipe"),
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    ws
}

/// Every file under `dir` with its content (symlinks as their targets).
fn contents(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let what = if meta.is_symlink() {
            format!("-> {}", std::fs::read_link(&path).unwrap().display())
        } else if meta.is_dir() {
            contents(&path, out);
            "dir".to_owned()
        } else if meta.is_file() {
            std::fs::read_to_string(&path).unwrap()
        } else {
            "special".to_owned()
        };
        out.push((path, what));
    }
}

#[tokio::test]
async fn the_walk_answers_every_call_as_openat2_does() {
    let cases: &[(&str, &str)] = &[
        ("read", r#"{"path":"a.txt"}"#),
        ("read", r#"{"path":"sub/up"}"#),
        ("read", r#"{"path":"sub/../a.txt"}"#),
        ("read", r#"{"path":"abs-in"}"#),
        ("read", r#"{"path":"abs-in-dir/b.txt"}"#),
        ("read", r#"{"path":"../ws/a.txt"}"#),
        ("read", r#"{"path":"rel-out"}"#),
        ("read", r#"{"path":"abs-out"}"#),
        ("read", r#"{"path":"out-dir/secret"}"#),
        ("read", r#"{"path":"zero"}"#),
        ("read", r#"{"path":"pipe"}"#),
        ("read", r#"{"path":"sub"}"#),
        ("read", r#"{"path":"dangling"}"#),
        ("read", r#"{"path":"missing/../../x"}"#),
        (
            "edit",
            r#"{"path":"sub/up","oldText":"old","newText":"new"}"#,
        ),
        (
            "edit",
            r#"{"path":"abs-in-dir/b.txt","oldText":"old","newText":"new"}"#,
        ),
        (
            "edit",
            r#"{"path":"rel-out","oldText":"outside","newText":"pwned"}"#,
        ),
        ("edit", r#"{"path":"pipe","oldText":"a","newText":"b"}"#),
        ("write", r#"{"path":"new/dirs/c.txt","content":"c"}"#),
        ("write", r#"{"path":"sub/../d.txt","content":"d"}"#),
        ("write", r#"{"path":"abs-in-dir/e.txt","content":"e"}"#),
        ("write", r#"{"path":"out-dir/new.txt","content":"pwned"}"#),
        (
            "write",
            r#"{"path":"out-dir/deeper/new.txt","content":"pwned"}"#,
        ),
        (
            "write",
            r#"{"path":"missing/../../escape.txt","content":"pwned"}"#,
        ),
        ("write", r#"{"path":"dangling","content":"x"}"#),
        ("write", r#"{"path":"pipe","content":"x"}"#),
        ("write", r#"{"path":".","content":"x"}"#),
    ];
    let mut answers = Vec::new();
    for access in [FileAccess::confined(), FileAccess::confined().walking()] {
        let top = tempfile::tempdir().unwrap();
        let top_path = std::fs::canonicalize(top.path()).unwrap();
        let ws = workspace(&top_path);
        let tools = tools(&access);
        let mut seen = Vec::new();
        for (tool, json) in cases {
            let (is_error, text) = call(&tools, tool, json, &ws).await;
            let text = text.replace(&top_path.display().to_string(), "<top>");
            seen.push(format!("{tool} {json} -> {is_error} {text}"));
        }
        let mut files = Vec::new();
        contents(&top_path, &mut files);
        let files: Vec<_> = files
            .into_iter()
            .map(|(p, c)| {
                (
                    p.strip_prefix(&top_path).unwrap().to_path_buf(),
                    c.replace(&top_path.display().to_string(), "<top>"),
                )
            })
            .collect();
        answers.push((seen, files));
    }
    let (kernel, walk) = (&answers[0], &answers[1]);
    for (k, w) in kernel.0.iter().zip(&walk.0) {
        assert_eq!(k, w);
    }
    assert_eq!(kernel.1, walk.1, "the two left different trees");
    // And what they answered is right: inside works, outside is refused, nothing leaked.
    let answer = |i: usize| walk.0[i].split_once(" -> ").unwrap().1.to_owned();
    assert_eq!(answer(3), "false a old\n");
    assert_eq!(answer(4), "false b old\n");
    assert_eq!(
        answer(6),
        "true refused: rel-out resolves to <top>/out/secret, which is outside the workspace \
         <top>/ws"
    );
    assert!(
        answer(10).ends_with("is a FIFO, not a regular file"),
        "{}",
        answer(10)
    );
    assert_eq!(
        answer(24),
        "true refused: dangling is a symlink to nothing, not a regular file"
    );
    assert!(
        walk.0.iter().all(|a| !a.contains("false outside")),
        "{:?}",
        walk.0
    );
    let out: Vec<_> = walk
        .1
        .iter()
        .filter(|(p, _)| p.starts_with("out"))
        .collect();
    let expected = [
        (PathBuf::from("out/secret"), "outside\n".to_owned()),
        (PathBuf::from("out"), "dir".to_owned()),
    ];
    assert_eq!(out, expected.iter().collect::<Vec<_>>());
    assert!(
        walk.1
            .contains(&(PathBuf::from("ws/a.txt"), "a new\n".to_owned()))
    );
    assert!(
        walk.1
            .contains(&(PathBuf::from("ws/sub/e.txt"), "e".to_owned()))
    );
    // A refused `..` after a missing directory made no directory on the way.
    assert!(!walk.1.iter().any(|(p, _)| p.starts_with("ws/missing")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_walk_keeps_every_call_inside_while_a_directory_is_swapped_for_a_symlink() {
    let top = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(top.path()).unwrap();
    let (ws, out) = (top.join("ws"), top.join("out"));
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("a.txt"), "SECRET keep\n").unwrap();
    std::fs::write(ws.join("sub/a.txt"), "inside keep\n").unwrap();
    std::os::unix::fs::symlink("../out", ws.join("alt")).unwrap();
    let outside = |dir: &Path| {
        let mut all = Vec::new();
        contents(dir, &mut all);
        let meta = std::fs::metadata(dir).unwrap();
        (all, meta.mtime(), meta.mtime_nsec())
    };
    let before = outside(&out);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps, ws) = (Arc::clone(&stop), Arc::clone(&swaps), ws.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (sub, alt) = (ws.join("sub"), ws.join("alt"));
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &sub,
                    rustix::fs::CWD,
                    &alt,
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let tools = tools(&FileAccess::confined().walking());
    let (mut ok, mut refused) = (0, 0);
    for i in 0..1_000 {
        let seen = swaps.load(Ordering::Relaxed);
        while swaps.load(Ordering::Relaxed) == seen {
            assert!(!swapper.is_finished(), "the swapper stopped");
            tokio::task::yield_now().await;
        }
        let (tool, json) = match i % 4 {
            0 => ("read", r#"{"path":"sub/a.txt"}"#.to_owned()),
            1 => (
                "edit",
                r#"{"path":"sub/a.txt","oldText":"keep","newText":"keep"}"#.to_owned(),
            ),
            2 => (
                "write",
                format!(r#"{{"path":"sub/n{i}.txt","content":"n"}}"#),
            ),
            _ => (
                "write",
                format!(r#"{{"path":"sub/d{i}/x.txt","content":"x"}}"#),
            ),
        };
        let (is_error, text) = call(&tools, tool, &json, &ws).await;
        assert!(!text.contains("SECRET"), "{json} read outside: {text}");
        if is_error {
            assert!(text.starts_with("refused: sub/"), "{json}: {text}");
            refused += 1;
        } else {
            ok += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(outside(&out), before, "something outside was written");
    assert!(ok > 0 && refused > 0, "{ok} succeeded, {refused} refused");
}
