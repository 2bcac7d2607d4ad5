//! The journal you can trust: one host per sessions directory, private modes, exclusive
//! creation, and appends that a full disk cannot glue together.
//!
//! The full-disk test needs root: it re-runs this binary inside a private mount namespace
//! (`unshare -m`) with a 64 KiB tmpfs as the sessions directory. Without root it prints
//! SKIPPED, unless `BATON_REQUIRE_TMPFS=1` (set by `.ci/run` when it runs as root), which
//! turns the skip into a failure.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: helper functions unwrap like the tests they serve"
)]

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use baton_host::agent::RunError;
use baton_host::journal::{FsyncPolicy, LOCK_FILE, SessionFile, SessionsDir, StoreError};
use baton_host::message::{AgentMessage, UserContent};
use baton_host::session::{CreateOptions, HostConfig, SessionError, SessionManager};
use baton_testkit::Need;

use common::{manual_clock, scripted};

/// Where the child run finds its tmpfs.
const TMPFS_ENV: &str = "BATON_JOURNAL_TMPFS";
const ENOSPC: i32 = 28;

fn manager(sessions: &Path, cwd: &Path, fsync: FsyncPolicy) -> Result<SessionManager, StoreError> {
    let mut config = HostConfig::new(sessions);
    config.default_cwd = cwd.to_path_buf();
    config.fsync = fsync;
    SessionManager::new(config, scripted(Duration::ZERO), manual_clock())
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[tokio::test]
async fn a_second_host_on_the_same_directory_refuses_with_one_line_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let sessions = tmp.path().join("sessions");
    let first = manager(&sessions, tmp.path(), FsyncPolicy::EveryEntry).unwrap();
    let id = first.create(CreateOptions::default()).unwrap();

    let err = manager(&sessions, tmp.path(), FsyncPolicy::EveryEntry).unwrap_err();
    let program = std::env::current_exe().unwrap();
    let program = program.file_name().unwrap().to_string_lossy();
    assert_eq!(
        err.to_string(),
        format!(
            "sessions directory {} is in use by {program} pid {} (started 2025-05-30T01:20:00.000Z)",
            sessions.display(),
            std::process::id()
        )
    );
    assert!(!err.to_string().contains('\n'));
    // The refused host changed nothing: the first one's session is intact and writable.
    let s = first.open(&id).unwrap();
    s.prompt("still mine").await.unwrap();

    // Once the first host shuts down, the directory is free and holds everything it wrote.
    first.shutdown().await;
    let written = s.messages();
    assert!(matches!(
        s.set_name(Some("too late".into())),
        Err(SessionError::Store(StoreError::Released { .. }))
    ));
    let second = manager(&sessions, tmp.path(), FsyncPolicy::EveryEntry).unwrap();
    assert_eq!(second.open(&id).unwrap().messages(), written);
    drop(second);
    // Dropping a manager releases it too.
    manager(&sessions, tmp.path(), FsyncPolicy::EveryEntry).unwrap();
}

#[test]
fn the_sessions_directory_is_0700_and_its_files_0600_from_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let sessions = tmp.path().join("data/baton/sessions");
    let m = manager(&sessions, tmp.path(), FsyncPolicy::Never).unwrap();
    let id = m.create(CreateOptions::default()).unwrap();
    assert_eq!(mode(&sessions), 0o700);
    assert_eq!(mode(&sessions.join(LOCK_FILE)), 0o600);
    let file = sessions.join(format!("{id}.jsonl"));
    assert_eq!(mode(&file), 0o600);
    drop(m);

    // An existing directory and file with wider modes (an older host's) are tightened.
    std::fs::set_permissions(&sessions, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let m = manager(&sessions, tmp.path(), FsyncPolicy::Never).unwrap();
    assert_eq!(mode(&sessions), 0o700);
    m.open(&id).unwrap();
    assert_eq!(mode(&file), 0o600);
}

#[test]
fn creating_a_session_never_overwrites_an_existing_file() {
    const ID: &str = "6f1c2b7e-1d2a-4c3b-8a9d-0e1f2a3b4c5d";
    let tmp = tempfile::tempdir().unwrap();
    let dir = SessionsDir::open(tmp.path(), FsyncPolicy::EveryEntry, 0).unwrap();
    let path = tmp.path().join(format!("{ID}.jsonl"));
    // Not even a file that is not a session (and was not written by this host).
    std::fs::write(&path, b"precious\n").unwrap();
    assert!(matches!(
        SessionFile::create(&dir, ID, tmp.path(), 0),
        Err(StoreError::Exists(_))
    ));
    assert_eq!(std::fs::read(&path).unwrap(), b"precious\n");
    assert!(!tmp.path().join(format!("{ID}.jsonl.tmp")).exists());
}

/// Runs [`full_disk_inside_a_tmpfs`] in a private mount namespace over a 64 KiB tmpfs.
#[test]
fn a_full_disk_rolls_back_the_torn_append_and_loses_nothing_committed() {
    let root = rustix::process::geteuid().is_root();
    let tools = ["unshare", "mount"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !(root && tools) {
        let why = if root {
            "unshare/mount (util-linux) are not installed"
        } else {
            "mounting a tmpfs needs root"
        };
        Need::Tmpfs.skip(why);
        return;
    }
    let mountpoint = tempfile::tempdir().unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount -t tmpfs -o size=64k,mode=0700 baton-journal "$0" && exec "$1" --exact full_disk_inside_a_tmpfs --ignored --nocapture --test-threads=1"#)
        .arg(mountpoint.path())
        .arg(std::env::current_exe().unwrap())
        .env(TMPFS_ENV, mountpoint.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test: {stdout}\n{stderr}"
    );
}

/// Fills `dir`'s file system; returns the filler's path.
fn fill_disk(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = [0u8; 1024];
    loop {
        if let Err(e) = f.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(ENOSPC), "{e}");
            return path;
        }
    }
}

fn is_enospc(err: &StoreError) -> bool {
    matches!(err, StoreError::Io { source, .. } if source.raw_os_error() == Some(ENOSPC))
}

/// The child half of the full-disk test (needs the tmpfs its parent mounted).
#[tokio::test]
#[ignore = "run by a_full_disk_rolls_back_the_torn_append_and_loses_nothing_committed"]
async fn full_disk_inside_a_tmpfs() {
    let tmpfs = std::path::PathBuf::from(std::env::var_os(TMPFS_ENV).expect(TMPFS_ENV));
    let sessions = tmpfs.join("sessions");
    let cwd = tmpfs.join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let big = "x".repeat(20_000);

    // Through a session: the turn reports the failure, the next turn lands on a clean line.
    let m = manager(&sessions, &cwd, FsyncPolicy::EveryEntry).unwrap();
    let id = m.create(CreateOptions::default()).unwrap();
    let s = m.open(&id).unwrap();
    s.prompt("before").await.unwrap();
    let before = s.messages();
    let file = sessions.join(format!("{id}.jsonl"));
    let committed = std::fs::read(&file).unwrap();

    let filler = fill_disk(&tmpfs);
    let err = s.prompt(big.as_str()).await.unwrap_err();
    let SessionError::Run(RunError::Persist(store)) = &err else {
        panic!("not a persistence failure: {err:?}");
    };
    assert!(is_enospc(store), "{store:?}");
    let after = std::fs::read(&file).unwrap();
    assert!(
        after == committed,
        "the partial line was not cut off: {} bytes, {} committed",
        after.len(),
        committed.len()
    );
    println!(
        "full disk: a {}-byte prompt failed with ENOSPC; the file is back at its {} committed bytes",
        big.len(),
        committed.len()
    );
    assert_eq!(s.messages(), before, "nothing unpersisted was kept");
    // A second failure on the same handle is cut back just the same.
    assert!(s.prompt(big.as_str()).await.is_err());
    assert!(std::fs::read(&file).unwrap() == committed);

    std::fs::remove_file(&filler).unwrap();
    s.prompt("after").await.unwrap();
    let written = s.messages();
    assert_eq!(written.len(), before.len() + 2);
    assert!(
        matches!(&written[before.len()], AgentMessage::User(u) if u.content == vec![UserContent::text("after")])
    );
    m.shutdown().await;
    drop(m);

    // Reopened by a new host: every committed entry, nothing skipped, nothing torn.
    let loaded = SessionFile::read(&file).unwrap();
    assert!(
        loaded.skipped_lines.is_empty(),
        "{:?}",
        loaded.skipped_lines
    );
    assert_eq!(loaded.torn_tail_bytes, 0);
    let m = manager(&sessions, &cwd, FsyncPolicy::EveryEntry).unwrap();
    assert_eq!(m.open(&id).unwrap().messages(), written);
    m.shutdown().await;
    drop(m);

    // Straight through the journal, with an entry far larger than the space left.
    let dir = SessionsDir::open(&tmpfs.join("raw"), FsyncPolicy::EveryEntry, 0).unwrap();
    let mut f = SessionFile::create(&dir, "6f1c2b7e-1d2a-4c3b-8a9d-0e1f2a3b4c5d", &cwd, 0).unwrap();
    let kind = |text: &str| baton_host::journal::EntryKind::Custom {
        custom_type: "t".into(),
        data: baton_protocol::Value::from(text),
    };
    let a = f.append_new(None, 1, kind("a")).unwrap();
    let len = std::fs::metadata(f.path()).unwrap().len();
    let filler = fill_disk(&tmpfs);
    let err = f.append_new(Some(&a.id), 2, kind(&big)).unwrap_err();
    assert!(is_enospc(&err), "{err:?}");
    assert_eq!(std::fs::metadata(f.path()).unwrap().len(), len);
    std::fs::remove_file(&filler).unwrap();
    let b = f.append_new(Some(&a.id), 3, kind("b")).unwrap();
    f.durable_handle().wait().await.unwrap();
    let loaded = SessionFile::read(f.path()).unwrap();
    assert_eq!(loaded.entries, vec![a, b]);
    assert!(loaded.skipped_lines.is_empty());
    assert_eq!(loaded.torn_tail_bytes, 0);
}

#[tokio::test]
async fn closing_a_session_through_the_manager_forgets_it_and_the_next_open_reads_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let host = manager(
        &tmp.path().join("sessions"),
        tmp.path(),
        FsyncPolicy::EveryEntry,
    )
    .unwrap();
    let id = host.create(CreateOptions::default()).unwrap();
    let first = host.open(&id).unwrap();
    first.prompt("hello").await.unwrap();
    let settled = first.messages();
    assert!(host.is_open(&id));

    host.close(&first).await;
    assert!(
        !host.is_open(&id),
        "a closed session is no longer held in memory"
    );
    let again = host.open(&id).unwrap();
    assert!(host.is_open(&id));
    assert_eq!(
        again.messages(),
        settled,
        "the reopened transcript is read back whole"
    );

    // Closing a session the manager no longer holds leaves the newer one alone.
    host.close(&first).await;
    assert!(host.is_open(&id), "the newer open is not forgotten");
}
