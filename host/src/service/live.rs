//! One hosted session's published `pi.session` state.
//!
//! The published state is derived from the runtime's one transcript as it changes: the
//! [`LiveSession`]'s observer is called by the session under its lock for every change,
//! maps the change to ops over the published window ([`Window::ops`]) and publishes them.
//! Only streamed text waits: its appends are folded into one update until the pump runs (or
//! any other change, or a new subscriber, comes first), because a subscriber's backlog is
//! counted in updates; everything else is published before the session lock is released, so a
//! method's answer never overtakes its effect. The published state can neither fall behind by
//! more than those appends nor need re-baselining, and no copy of the state is kept here: a subscriber's snapshot is built from the runtime's transcript (the window
//! only, under the same lock), so a snapshot and the updates after it can never overlap or
//! leave a gap.
//!
//! What is kept per session: the window position, the subscriber list, and the published
//! form of the one response being streamed (bounded by the item limit).
//!
//! Lock order: the session's lock, then [`SessionFeed`]'s. Directory refreshes (which read
//! the session) run on the session's pump task, never under either lock.

use std::sync::Arc;

use baton_protocol::Value;
use baton_protocol::chord::Op;
use baton_server::Publisher;
use baton_server::chord::SubscriptionSnapshot;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::directory::Directory;
use super::publish::{Owner, Subscribers, snapshot};
use super::wire::{MapError, Window};
use crate::session::{Change, ObserverId, SessionObserver, SessionRuntime, TranscriptView};

/// The session service id.
pub(crate) const SERVICE: &str = "pi.session";
/// Its methods.
pub(crate) const METHODS: &[&str] = &[
    "prompt",
    "steer",
    "abort",
    "setModel",
    "setThinking",
    "bash",
    "listItems",
    "readItem",
    "followUp",
    "editFollowUp",
    "removeFollowUp",
    "clearFollowUps",
    "compact",
    "completePath",
];
/// Its state member.
pub(crate) const MEMBER: &str = "state";

/// The published side of one session: the session calls it under its lock.
#[derive(Debug)]
pub(crate) struct SessionFeed {
    state: Mutex<FeedState>,
    /// Set when the directory entry (phase, model, `updatedAt`) may have changed.
    meta_changed: Notify,
    /// Set when streamed text is waiting in `pending`.
    flush_wanted: Notify,
    session_id: String,
}

#[derive(Debug)]
struct FeedState {
    window: Window,
    sequence: u64,
    subscribers: Subscribers,
    /// Ops of streamed text not yet published: appends wait for the pump (or the next other
    /// change, or a new subscriber) so that tokens arriving faster than the pump runs fold
    /// into one update, as a subscriber's backlog counts updates, not bytes.
    pending: Vec<Op>,
}

impl FeedState {
    /// Publishes `pending` as one update; `view` is the state it leads to.
    fn flush(&mut self, view: &TranscriptView<'_>) {
        if self.pending.is_empty() {
            return;
        }
        let ops = std::mem::take(&mut self.pending);
        self.sequence += 1;
        let (window, sequence) = (&self.window, self.sequence);
        self.subscribers.publish(MEMBER, sequence, ops, &|| {
            session_snapshot(window, view, sequence)
        });
    }
}

impl SessionFeed {
    fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.state.lock()
    }
}

impl SessionObserver for SessionFeed {
    fn on_change(&self, _seq: u64, change: Change<'_>, view: &TranscriptView<'_>) {
        let mut p = self.lock();
        let p = &mut *p;
        let ops = match p.window.ops(change, view) {
            Ok(ops) => ops,
            Err(error) => {
                // A bug or a value the wire cannot carry: republish the whole window so every
                // subscriber converges on what a fresh snapshot shows.
                tracing::error!(session_id = %self.session_id, %error, "could not map a session change; replacing the state");
                match Window::new(view).and_then(|w| {
                    let value = w.state_value(view)?;
                    p.window = w;
                    Ok(value)
                }) {
                    Ok(value) => vec![Op::Replace(value)],
                    Err(error) => {
                        tracing::error!(session_id = %self.session_id, %error, "session state has no protocol form");
                        Vec::new()
                    }
                }
            }
        };
        let streamed_text = matches!(
            change,
            Change::TextAppended { .. } | Change::ThinkingAppended { .. }
        );
        let was_empty = p.pending.is_empty();
        for op in ops {
            push_coalesced(&mut p.pending, op);
        }
        if !streamed_text {
            // Every other change (and so every method's effect) is published before the
            // session lock is released: a call's answer never overtakes it.
            p.flush(view);
        } else if was_empty && !p.pending.is_empty() {
            self.flush_wanted.notify_one();
        }
        if touches_directory(change) {
            self.meta_changed.notify_one();
        }
    }
}

/// A hosted session: the runtime session, its published state, its pump.
#[derive(Debug)]
pub(crate) struct LiveSession {
    pub(crate) id: String,
    pub(crate) session: SessionRuntime,
    published: Arc<SessionFeed>,
    observer: ObserverId,
    /// Stops the pump.
    pub(crate) stop: CancellationToken,
    pump: Mutex<Option<JoinHandle<()>>>,
}

/// What the pump waits on: directory-relevant changes of one session.
#[derive(Debug)]
pub(crate) struct MetaChanges(Arc<SessionFeed>);

impl LiveSession {
    /// Wraps `session` and starts publishing its changes; returns the live session and what
    /// its pump waits on.
    ///
    /// # Errors
    /// The session's state has no protocol form.
    pub(crate) fn new(
        session: SessionRuntime,
        stop: CancellationToken,
    ) -> Result<(Arc<Self>, MetaChanges), MapError> {
        let session_id = session.id().to_owned();
        let (observer, published) = session.observe(|view, _| -> Result<_, MapError> {
            let window = Window::new(view)?;
            // Check once that the state has a protocol form.
            window.state_value(view)?;
            Ok(Arc::new(SessionFeed {
                state: Mutex::new(FeedState {
                    window,
                    sequence: 0,
                    subscribers: Subscribers::default(),
                    pending: Vec::new(),
                }),
                meta_changed: Notify::new(),
                flush_wanted: Notify::new(),
                session_id,
            }))
        })?;
        let live = Arc::new(Self {
            id: session.id().to_owned(),
            session,
            published: Arc::clone(&published),
            observer,
            stop,
            pump: Mutex::new(None),
        });
        Ok((live, MetaChanges(published)))
    }

    /// Keeps the pump's task so [`LiveSession::stop_pump`] can wait for it.
    pub(crate) fn set_pump(&self, handle: JoinHandle<()>) {
        *self.pump.lock() = Some(handle);
    }

    /// Stops publishing and the pump, and waits until the pump has ended.
    pub(crate) async fn stop_pump(&self) {
        self.session.unobserve(self.observer);
        self.stop.cancel();
        let handle = self.pump.lock().take();
        if let Some(h) = handle {
            let _ = h.await;
        }
    }

    /// Registers a subscriber and returns its snapshot (at the current sequence).
    ///
    /// # Errors
    /// The state has no protocol form (a bug: changes to it are logged as they happen).
    pub(crate) fn subscribe(
        &self,
        owner: Owner,
        id: String,
        publisher: Publisher,
    ) -> Result<SubscriptionSnapshot, MapError> {
        self.session.with_view(|view| {
            let mut p = self.published.lock();
            // The snapshot shows the pending text: publish it to the others first, so the
            // new subscriber's updates start after it.
            p.flush(view);
            let snap = session_snapshot_checked(&p.window, view, p.sequence)?;
            p.subscribers.add(owner, id, publisher);
            Ok(snap)
        })
    }

    /// Forgets one subscriber.
    pub(crate) fn unsubscribe(&self, owner: Owner, id: &str) {
        self.published.lock().subscribers.remove(owner, id);
    }

    /// Forgets every subscriber of `owner`.
    pub(crate) fn drop_owner(&self, owner: Owner) {
        self.published.lock().subscribers.remove_owner(owner);
    }

    /// The published value and its sequence (built now, as a new subscriber would get it).
    #[cfg(test)]
    pub(crate) fn current(&self) -> (Value, u64) {
        self.session.with_view(|view| {
            let p = self.published.lock();
            (
                p.window.state_value(view).unwrap_or(Value::Null),
                p.sequence,
            )
        })
    }
}

/// The `pi.session` snapshot of `view` through `window` at `sequence`.
fn session_snapshot_checked(
    window: &Window,
    view: &TranscriptView<'_>,
    sequence: u64,
) -> Result<SubscriptionSnapshot, MapError> {
    let value = window.state_value(view)?;
    Ok(snapshot(SERVICE, METHODS, vec![(MEMBER, sequence, value)]))
}

/// As [`session_snapshot_checked`], for the server's resync of a subscriber that fell behind
/// (which cannot fail: a state without protocol form is logged and published as `null`).
fn session_snapshot(
    window: &Window,
    view: &TranscriptView<'_>,
    sequence: u64,
) -> SubscriptionSnapshot {
    let value = window.state_value(view).unwrap_or_else(|error| {
        tracing::error!(%error, "session state has no protocol form");
        Value::Null
    });
    snapshot(SERVICE, METHODS, vec![(MEMBER, sequence, value)])
}

/// Changes after which the directory entry (phase, model, `updatedAt`) may differ.
fn touches_directory(change: Change<'_>) -> bool {
    matches!(
        change,
        Change::Phase(_)
            | Change::Model(_)
            | Change::ItemAdded { .. }
            | Change::ItemReplaced { .. }
    )
}

/// Until stopped: publishes streamed text that is waiting (everything queued since it last
/// ran, as one update), and keeps `live`'s entry in `directory` current.
pub(crate) async fn pump(live: Arc<LiveSession>, changes: MetaChanges, directory: Arc<Directory>) {
    let published = &changes.0;
    loop {
        tokio::select! {
            biased;
            () = live.stop.cancelled() => return,
            () = published.flush_wanted.notified() => {
                live.session.with_view(|view| published.lock().flush(view));
            }
            () = published.meta_changed.notified() => {
                directory.upsert(live.session.meta());
            }
        }
    }
}

/// Appends `op` to `ops`, merging it into the previous op when both append to the same
/// string (a run of deltas to one block becomes one `a`).
fn push_coalesced(ops: &mut Vec<Op>, op: Op) {
    if let Op::Append { path, text } = &op
        && let Some(Op::Append {
            path: last_path,
            text: last_text,
        }) = ops.last_mut()
        && last_path == path
    {
        last_text.push_str(text);
        return;
    }
    ops.push(op);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::directory::OpenIds;
    use crate::service::test_support::manager;
    use crate::service::wire::session_state_value;
    use crate::session::CreateOptions;
    use crate::spawn::spawn_tracked;
    use tokio_util::task::TaskTracker;

    #[tokio::test]
    async fn the_published_value_follows_the_runtime_without_a_queue() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let id = m.create(CreateOptions::default()).unwrap();
        let session = m.open(&id).unwrap();
        let (live, changes) = LiveSession::new(session.clone(), CancellationToken::new()).unwrap();
        let directory = Arc::new(Directory::new(Vec::new(), Arc::new(OpenIds::default())));
        let tracker = TaskTracker::new();
        live.set_pump(spawn_tracked(
            &tracker,
            pump(Arc::clone(&live), changes, directory),
        ));
        session.prompt("run `echo hi`").await.unwrap();
        // SessionFeed synchronously: as soon as the turn has settled, so has the state.
        let (value, sequence) = live.current();
        assert_eq!(
            value,
            session_state_value(&session.snapshot().state).unwrap()
        );
        assert!(sequence >= 1);
        live.stop_pump().await;
        m.shutdown().await;
    }
}
