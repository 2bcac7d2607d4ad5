//! The file tools stay in their workspace while another process of the workspace swaps one of
//! its directories for a symlink to the outside in a tight loop: nothing outside is ever read,
//! written, created or modified, and every call succeeds inside or is refused.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helper functions unwrap like the tests they serve"
)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use baton_host::tool::{BashConfig, ToolContext, ToolSet};
use rustix::fs::{CWD, RenameFlags, renameat_with};
use tokio_util::sync::CancellationToken;

use common::call_tool;

/// Tool calls made while the swapper runs.
const CALLS: usize = 1_000;
/// Marks the content of the file outside; no tool result may contain it.
const SECRET: &str = "SECRET-outside-the-workspace";

/// What a directory tree looks like: per entry its kind, size, mtime, inode and (for files)
/// content.
type Snapshot = BTreeMap<PathBuf, (bool, u64, i64, i64, u64, Option<String>)>;

/// Every entry under `dir` except `skip`, with `dir` itself.
fn snapshot(dir: &Path, skip: &Path, out: &mut Snapshot) {
    let meta = std::fs::symlink_metadata(dir).unwrap();
    let content = meta
        .is_file()
        .then(|| std::fs::read_to_string(dir).unwrap());
    out.insert(
        dir.to_path_buf(),
        (
            meta.is_dir(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ino(),
            content,
        ),
    );
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path != skip {
                snapshot(&path, skip, out);
            }
        }
    }
}

/// The entries that were added, removed or changed between two snapshots.
fn differences(before: &Snapshot, after: &Snapshot) -> String {
    let mut out = Vec::new();
    for (path, was) in before {
        match after.get(path) {
            None => out.push(format!("removed {}", path.display())),
            Some(is) if is != was => out.push(format!("changed {}", path.display())),
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        out.push(format!("created {}", path.display()));
    }
    out.join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_never_lets_a_file_tool_out() {
    let top = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(top.path()).unwrap();
    let ws = top.join("ws");
    let outside = top.join("outside");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&outside).unwrap();
    // Outside: the same names the calls use inside, so an escaped call finds something.
    std::fs::write(outside.join("a.txt"), format!("{SECRET} keep\n")).unwrap();
    std::fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).unwrap();
    // Inside: `sub` is a real directory and `alt` a symlink out; the swapper exchanges them.
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/a.txt"), "inside keep\n").unwrap();
    std::os::unix::fs::symlink("../outside", ws.join("alt")).unwrap();

    let mut before = Snapshot::new();
    snapshot(&top, &ws, &mut before);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps, ws) = (Arc::clone(&stop), Arc::clone(&swaps), ws.clone());
        std::thread::spawn(move || {
            let (sub, alt) = (ws.join("sub"), ws.join("alt"));
            while !stop.load(Ordering::Relaxed) {
                renameat_with(CWD, &sub, CWD, &alt, RenameFlags::EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let tools = ToolSet::coding(BashConfig::default());
    let artifacts = tempfile::tempdir().unwrap();
    let ctx = ToolContext {
        cwd: ws.clone(),
        artifacts_dir: artifacts.path().to_path_buf(),
        cancel: CancellationToken::new(),
        tool_call_id: "call_race".into(),
    };
    let (read, write, edit) = (
        tools.get("read").unwrap(),
        tools.get("write").unwrap(),
        tools.get("edit").unwrap(),
    );
    let mut leaked = Vec::new();
    let mut changed_outside = Vec::new();
    let mut abnormal = Vec::new();
    let mut written = Vec::new();
    let (mut succeeded, mut refused) = (0usize, 0usize);
    for i in 0..CALLS {
        // At least one swap between two calls, so every call races a swapper that is running.
        let seen = swaps.load(Ordering::Relaxed);
        while swaps.load(Ordering::Relaxed) == seen {
            assert!(!swapper.is_finished(), "the swapper stopped");
            tokio::task::yield_now().await;
        }
        let (tool, json, made) = match i % 5 {
            0 => (read, r#"{"path":"sub/a.txt"}"#.to_owned(), None),
            1 => (
                edit,
                r#"{"path":"sub/a.txt","oldText":"keep","newText":"keep"}"#.to_owned(),
                None,
            ),
            2 => (
                write,
                r#"{"path":"sub/a.txt","content":"inside keep\n"}"#.to_owned(),
                None,
            ),
            3 => (
                write,
                format!(r#"{{"path":"sub/new-{i}.txt","content":"new {i}"}}"#),
                Some(format!("new-{i}.txt")),
            ),
            _ => (
                write,
                format!(r#"{{"path":"sub/d{i}/x.txt","content":"deep {i}"}}"#),
                Some(format!("d{i}/x.txt")),
            ),
        };
        let (is_error, text) = call_tool(tool, &json, &ctx).await;
        if text.contains(SECRET) {
            leaked.push(format!("{json} -> {text}"));
        }
        if is_error {
            refused += 1;
            if !(text.starts_with("refused: ") && text.contains("sub/") && !text.contains('\n')) {
                abnormal.push(format!("{json} -> {text}"));
            }
        } else {
            succeeded += 1;
            if tool.name() == "read" && text != "inside keep\n" {
                abnormal.push(format!("{json} -> {text}"));
            }
            if let Some(made) = made {
                written.push((made, i));
            }
        }
        let mut now = Snapshot::new();
        snapshot(&top, &ws, &mut now);
        if now != before {
            changed_outside.push(format!("{json}: {}", differences(&before, &now)));
            // Put the outside back as it was, so later escapes are counted too.
            std::fs::remove_dir_all(&outside).unwrap();
            std::fs::create_dir(&outside).unwrap();
            std::fs::write(outside.join("a.txt"), format!("{SECRET} keep\n")).unwrap();
            std::fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).unwrap();
            before = Snapshot::new();
            snapshot(&top, &ws, &mut before);
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();

    let escapes = leaked.len() + changed_outside.len();
    assert!(
        escapes == 0,
        "{escapes} of {CALLS} calls escaped the workspace ({} leaked the secret, {} changed the \
         outside):\n{}",
        leaked.len(),
        changed_outside.len(),
        leaked
            .iter()
            .chain(&changed_outside)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
    );
    assert!(
        abnormal.is_empty(),
        "{} calls neither succeeded inside nor were refused; first: {:?}",
        abnormal.len(),
        abnormal.first()
    );
    // Whatever a successful write created is in the real directory, under `sub` or `alt`.
    let real = if std::fs::symlink_metadata(ws.join("sub")).unwrap().is_dir() {
        ws.join("sub")
    } else {
        ws.join("alt")
    };
    for (made, i) in &written {
        let body = std::fs::read_to_string(real.join(made));
        assert!(
            body.as_ref().is_ok_and(|b| b.ends_with(&format!(" {i}"))),
            "a write of {made} succeeded, but it is not in the workspace: {body:?}"
        );
    }
    assert_eq!(succeeded + refused, CALLS);
    assert!(
        succeeded > 0 && refused > 0,
        "the swapper never changed what a call saw: {succeeded} succeeded, {refused} refused"
    );
}
