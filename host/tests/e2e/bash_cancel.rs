//! `pi.session.bash` and the end of its request: an explicit cancel kills the command, a
//! disconnect does not. The commands talk to the test through FIFOs, so every step waits on
//! an event (a FIFO opened, written or closed), never on time.

use std::fmt::Debug;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_protocol::chord::ServiceMode;
use baton_protocol::{Outcome, Value, WireError};
use tokio::sync::{Notify, oneshot};

use crate::common::until;
use crate::state::*;
use crate::support::*;

fn mkfifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
    path
}

/// Reads `fifo` on a thread: the first line as soon as a writer sent it, then a signal once
/// every writer has closed it (end of file: the processes holding it have exited).
fn read_fifo(fifo: PathBuf) -> (oneshot::Receiver<String>, oneshot::Receiver<()>) {
    let (line_tx, line_rx) = oneshot::channel();
    let (eof_tx, eof_rx) = oneshot::channel();
    std::thread::spawn(move || {
        // Blocks until the command opens the FIFO for writing.
        let mut reader = BufReader::new(std::fs::File::open(&fifo).unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let _ = line_tx.send(line.trim().to_owned());
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
        let _ = eof_tx.send(());
    });
    (line_rx, eof_rx)
}

/// Writes `text` into `fifo` on a thread (opening blocks until the command reads it).
fn write_fifo(fifo: PathBuf, text: &'static str) {
    std::thread::spawn(move || {
        let mut file = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        file.write_all(text.as_bytes()).unwrap();
    });
}

/// Whether `pid` is a live process (a zombie has already exited).
/// Resolves once process `pid` has exited: a pidfd becomes readable then. The FIFO's end of
/// file can come a moment before (descriptors close early in the kernel's exit path).
fn exit_watch(pid: u32) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
    tokio::task::spawn_blocking(move || {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        // A hang guard: a blocking task is waited for when the runtime shuts down.
        let limit = rustix::event::Timespec {
            tv_sec: 120,
            tv_nsec: 0,
        };
        match rustix::event::poll(&mut fds, Some(&limit))? {
            0 => Err(std::io::Error::other(
                "the process did not exit within 120 s",
            )),
            _ => Ok(()),
        }
    })
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

fn last_bash_record(state: &Value) -> Option<Value> {
    transcript(state)
        .into_iter()
        .rev()
        .find(|i| get(i, "role").as_str() == Some("bashExecution"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_bash_request_kills_its_process_group_and_answers_cancelled() {
    let h = Harness::start().await;
    let client = h.client().await;
    let id = h.create(&client, "{}").await;
    let mut raw = h.raw().await;
    let session = raw.attach(&id).await;
    let fifo = mkfifo(&h.project, "pid");
    let (pid, gone) = read_fifo(fifo.clone());
    // The shell forks the inner `sh`, which becomes `sleep`: a grandchild of the host that
    // only a kill of the whole process group reaches. It holds the FIFO's write end.
    let command = format!(
        "sh -c 'echo $$; exec sleep 1000' > '{}'; echo unreachable",
        fifo.display()
    );
    let request = raw
        .request(
            &session,
            call("pi.session", "bash", vec![Value::from(command.as_str())]),
        )
        .await;
    let pid: u32 = guard("the command starts", pid)
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(alive(pid), "the command runs until cancelled");
    let exit = exit_watch(pid);

    raw.cancel(&request, &session).await;
    assert_eq!(
        guard("the cancelled answer", raw.response(&request)).await,
        Outcome::Error(WireError::new("cancelled", "RPC request cancelled"))
    );
    guard("every process holding the FIFO exits", gone)
        .await
        .unwrap();
    guard("the command's process exits", exit)
        .await
        .unwrap()
        .unwrap();
    assert!(!alive(pid), "process {pid} survived the cancel");

    // The run is still recorded, as cancelled.
    let record = last_bash_record(&h.runtime_state(&id)).expect("a bashExecution record");
    assert_eq!(
        get(&record, "cancelled"),
        &Value::Bool(true),
        "{}",
        record.to_json()
    );
    assert_eq!(get(&record, "exitCode"), &Value::Null);
    assert!(
        !get(&record, "output")
            .as_str()
            .unwrap()
            .contains("unreachable")
    );

    // The session still runs commands.
    let done = raw
        .call(
            &session,
            call("pi.session", "bash", vec![Value::from("echo after")]),
        )
        .await;
    let Outcome::Value(done) = done else {
        panic!("{done:?}")
    };
    assert_eq!(get(&done, "exitCode"), &Value::from(0u32));
    client.close().await;
    h.stop().await;
}

/// A tracing subscriber that only signals when an event with `message` is logged: the one
/// observable sign that the host saw the client leave while its command ran (the server
/// releases the attachment only after the request ends).
struct OnEvent {
    message: &'static str,
    seen: Arc<Notify>,
}

impl tracing::Subscriber for OnEvent {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(Option<String>);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn Debug) {
                if field.name() == "message" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut m = Message(None);
        event.record(&mut m);
        if m.0.as_deref() == Some(self.message) {
            self.seen.notify_one();
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// Current-thread runtime: every task runs on the test thread, where the subscriber is set.
#[tokio::test]
async fn a_bash_command_outlives_the_client_that_started_it() {
    let left = Arc::new(Notify::new());
    let _subscriber = tracing::subscriber::set_default(OnEvent {
        message: "the client left; its bash command runs on",
        seen: Arc::clone(&left),
    });
    let h = Harness::start().await;
    let watcher = h.client().await;
    let id = h.create(&watcher, "{}").await;
    let attached = guard("attach", watcher.attach(&id)).await.unwrap();
    let state = guard(
        "subscribe state",
        attached.subscribe("pi.session", ServiceMode::Singleton),
    )
    .await
    .unwrap();

    let mut raw = h.raw().await;
    let session = raw.attach(&id).await;
    let started = mkfifo(&h.project, "started");
    let input = mkfifo(&h.project, "input");
    let (started_line, _) = read_fifo(started.clone());
    let command = format!(
        "echo started > '{}'; read x < '{}'; echo \"got $x\"",
        started.display(),
        input.display()
    );
    let _request = raw
        .request(
            &session,
            call("pi.session", "bash", vec![Value::from(command.as_str())]),
        )
        .await;
    assert_eq!(
        guard("the command starts", started_line).await.unwrap(),
        "started"
    );

    // The client that started it goes away, and the host sees it leave.
    drop(raw);
    guard("the host sees the client leave", left.notified()).await;

    // Only now may the command finish: it was not killed, and its record is published.
    write_fifo(input, "go\n");
    let state = until("the command is recorded", &state, "state", |s| {
        last_bash_record(s).is_some()
    })
    .await;
    let record = last_bash_record(&state).unwrap();
    assert_eq!(
        get(&record, "cancelled"),
        &Value::Bool(false),
        "{}",
        record.to_json()
    );
    assert_eq!(get(&record, "exitCode"), &Value::from(0u32));
    assert_eq!(get(&record, "output").as_str(), Some("got go"));
    watcher.close().await;
    h.stop().await;
}
