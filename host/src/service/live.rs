//! One hosted session's published `pi.session` state and the pump that feeds it.
//!
//! The pump reads the runtime's [`SessionEvent`] stream, takes every event already queued
//! as one batch, maps the batch to ops ([`super::wire::event_ops`]) and publishes **one**
//! state update per batch, so each subscriber sees contiguous sequences. The published value
//! and sequence live under one lock together with the subscriber list: a new subscriber's
//! snapshot and the updates after it can never overlap or leave a gap.
//!
//! Re-baselining: when the pump falls more than the runtime's event capacity behind
//! (`RecvError::Lagged`), the events it missed are gone, so it takes a fresh runtime
//! snapshot (and a fresh receiver, atomically) and publishes, at the next sequence, the
//! [`diff`] from the value every subscriber holds to the fresh one. That is the smallest
//! correct re-baseline: no client has to drop its replica, and a client the server had to
//! collapse into a `reset` gets it from [`session_snapshot`] of the current value. If a batch ever
//! fails to map (a bug), the value may be half-applied, so the re-baseline is a whole-value
//! `r` instead.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_protocol::Value;
use baton_protocol::chord::{Op, apply, diff};
use baton_server::Publisher;
use baton_server::chord::SubscriptionSnapshot;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::directory::Directory;
use super::publish::{Owner, Subscribers, snapshot};
use super::wire::{MapError, event_ops, push_coalesced, session_state_value};
use crate::session::{Session, SessionEvent, SessionEventKind, Snapshot};

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
];
/// Its state member.
pub(crate) const MEMBER: &str = "state";
/// Most events folded into one update.
const MAX_BATCH: usize = 256;

#[derive(Debug)]
struct Published {
    value: Value,
    sequence: u64,
    subscribers: Subscribers,
}

/// A hosted session: the runtime session, its published state, its pump.
#[derive(Debug)]
pub(crate) struct LiveSession {
    pub(crate) id: String,
    pub(crate) session: Session,
    pub(crate) directory: Arc<Directory>,
    published: Mutex<Published>,
    /// The runtime event sequence the published value reflects.
    flushed: watch::Sender<u64>,
    /// Stops the pump.
    pub(crate) stop: CancellationToken,
    /// Fired when the host ends the handle by itself (the session was removed under it).
    pub(crate) terminated: CancellationToken,
    pump: Mutex<Option<JoinHandle<()>>>,
}

impl LiveSession {
    /// Wraps `session` and returns the live session plus the event receiver for its pump.
    ///
    /// # Errors
    /// The session's state has no protocol form.
    pub(crate) fn new(
        session: Session,
        directory: Arc<Directory>,
        stop: CancellationToken,
    ) -> Result<(Arc<Self>, broadcast::Receiver<SessionEvent>), MapError> {
        let (snap, rx) = session.subscribe();
        let value = session_state_value(&snap.state)?;
        let live = Arc::new(Self {
            id: session.id().to_owned(),
            session,
            directory,
            published: Mutex::new(Published {
                value,
                sequence: 0,
                subscribers: Subscribers::default(),
            }),
            flushed: watch::Sender::new(snap.seq),
            stop,
            terminated: CancellationToken::new(),
            pump: Mutex::new(None),
        });
        Ok((live, rx))
    }

    fn lock(&self) -> MutexGuard<'_, Published> {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the pump's task so [`LiveSession::stop_pump`] can wait for it.
    pub(crate) fn set_pump(&self, handle: JoinHandle<()>) {
        *self.pump.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
    }

    /// Stops the pump and waits until it has ended.
    pub(crate) async fn stop_pump(&self) {
        self.stop.cancel();
        let handle = self
            .pump
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            let _ = h.await;
        }
    }

    /// Registers a subscriber and returns its snapshot (at the current sequence).
    pub(crate) fn subscribe(
        &self,
        owner: Owner,
        id: String,
        publisher: Publisher,
    ) -> SubscriptionSnapshot {
        let mut p = self.lock();
        p.subscribers.add(owner, id, publisher);
        session_snapshot(&p.value, p.sequence)
    }

    /// Forgets one subscriber.
    pub(crate) fn unsubscribe(&self, owner: Owner, id: &str) {
        self.lock().subscribers.remove(owner, id);
    }

    /// Forgets every subscriber of `owner`.
    pub(crate) fn drop_owner(&self, owner: Owner) {
        self.lock().subscribers.remove_owner(owner);
    }

    /// The published value and its sequence.
    #[cfg(test)]
    pub(crate) fn current(&self) -> (Value, u64) {
        let p = self.lock();
        (p.value.clone(), p.sequence)
    }

    /// Waits until every runtime event up to `seq` is published (so a call's response
    /// never overtakes the updates describing its effect), or the pump stopped.
    pub(crate) async fn wait_flushed(&self, seq: u64) {
        let mut rx = self.flushed.subscribe();
        tokio::select! {
            _ = rx.wait_for(|s| *s >= seq) => {}
            () = self.stop.cancelled() => {}
        }
    }

    /// Maps and publishes one batch. Returns whether the directory entry may have changed.
    fn publish_batch(&self, events: &[SessionEvent]) -> Result<bool, MapError> {
        let mut p = self.lock();
        let mut ops = Vec::new();
        let mut meta = false;
        let mut last = None;
        for event in events {
            let event_ops = event_ops(&event.kind, &p.value)?;
            apply(&mut p.value, &event_ops).map_err(|_| MapError::Shape("op does not apply"))?;
            for op in event_ops {
                push_coalesced(&mut ops, op);
            }
            meta |= touches_directory(&event.kind);
            last = Some(event.seq);
        }
        if !ops.is_empty() {
            publish(&mut p, ops);
        }
        drop(p);
        if let Some(seq) = last {
            self.flushed.send_replace(seq);
        }
        Ok(meta)
    }

    /// Re-baselines on `snap` (see the module docs); `whole` publishes an `r` of the value.
    fn rebaseline(&self, snap: &Snapshot, whole: bool) {
        match session_state_value(&snap.state) {
            Ok(new) => {
                let mut p = self.lock();
                let ops = if whole {
                    vec![Op::Replace(new.clone())]
                } else {
                    diff(&p.value, &new)
                };
                p.value = new;
                if !ops.is_empty() {
                    publish(&mut p, ops);
                }
            }
            Err(error) => {
                tracing::error!(session_id = %self.id, %error, "session state has no protocol form");
            }
        }
        self.flushed.send_replace(snap.seq);
    }
}

fn publish(p: &mut Published, ops: Vec<Op>) {
    p.sequence += 1;
    let Published {
        value,
        sequence,
        subscribers,
    } = p;
    let (value, sequence) = (&*value, *sequence);
    subscribers.publish(MEMBER, sequence, ops, &|| session_snapshot(value, sequence));
}

/// The `pi.session` snapshot for `value` at `sequence`.
pub(crate) fn session_snapshot(value: &Value, sequence: u64) -> SubscriptionSnapshot {
    snapshot(SERVICE, METHODS, vec![(MEMBER, sequence, value.clone())])
}

/// Events after which the directory entry (phase, model, `updatedAt`) may differ.
fn touches_directory(kind: &SessionEventKind) -> bool {
    matches!(
        kind,
        SessionEventKind::Phase(_)
            | SessionEventKind::Model(_)
            | SessionEventKind::ItemAdded { .. }
            | SessionEventKind::ItemReplaced { .. }
    )
}

/// Feeds `live`'s published state from the runtime until stopped.
pub(crate) async fn pump(live: Arc<LiveSession>, mut rx: broadcast::Receiver<SessionEvent>) {
    use broadcast::error::{RecvError, TryRecvError};
    let mut batch = Vec::new();
    loop {
        let first = tokio::select! {
            biased;
            () = live.stop.cancelled() => return,
            r = rx.recv() => r,
        };
        let mut lagged = false;
        match first {
            Ok(event) => {
                batch.push(event);
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(event) => batch.push(event),
                        Err(TryRecvError::Lagged(_)) => {
                            lagged = true;
                            break;
                        }
                        Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                    }
                }
            }
            Err(RecvError::Lagged(_)) => lagged = true,
            Err(RecvError::Closed) => return,
        }
        // After a lag the batch is stale: the fresh snapshot covers it.
        let outcome = if lagged {
            tracing::debug!(session_id = %live.id, "event stream lagged; re-baselining");
            Err(false)
        } else {
            live.publish_batch(&batch).map_err(|error| {
                tracing::error!(session_id = %live.id, %error, "could not map session events; re-baselining");
                true
            })
        };
        batch.clear();
        let touched = match outcome {
            Ok(touched) => touched,
            Err(whole) => {
                let (snap, fresh) = live.session.subscribe();
                rx = fresh;
                live.rebaseline(&snap, whole);
                true
            }
        };
        if touched {
            live.directory.upsert(live.session.meta());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::models::ModelRegistry;
    use crate::provider::scripted::ScriptedConfig;
    use crate::session::{CreateOptions, FsyncPolicy, HostConfig, SessionManager};
    use crate::spawn::spawn_tracked;
    use std::time::Duration;
    use tokio_util::task::TaskTracker;

    fn manager(dir: &std::path::Path, capacity: usize) -> SessionManager {
        let mut config = HostConfig::new(dir.join("sessions"));
        config.default_cwd = dir.to_path_buf();
        config.fsync = FsyncPolicy::Never;
        config.session.event_capacity = capacity;
        SessionManager::new(
            config,
            ModelRegistry::scripted(ScriptedConfig {
                token_delay: Duration::ZERO,
            }),
            Arc::new(ManualClock::new(1_748_568_000_000, 1)),
        )
        .unwrap()
    }

    async fn converged(capacity: usize, start_pump_first: bool) -> (Value, u64) {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path(), capacity);
        let id = m.create(CreateOptions::default()).unwrap();
        let session = m.open(&id).unwrap();
        let (live, rx) = LiveSession::new(
            session.clone(),
            Arc::new(Directory::new(Vec::new())),
            CancellationToken::new(),
        )
        .unwrap();
        let tracker = TaskTracker::new();
        let start = |rx| live.set_pump(spawn_tracked(&tracker, pump(Arc::clone(&live), rx)));
        let rx = if start_pump_first {
            start(rx);
            None
        } else {
            Some(rx)
        };
        session.prompt("run `echo hi`").await.unwrap();
        if let Some(rx) = rx {
            start(rx);
        }
        tokio::time::timeout(
            Duration::from_secs(30),
            live.wait_flushed(session.event_seq()),
        )
        .await
        .unwrap();
        let (value, sequence) = live.current();
        assert_eq!(
            value,
            session_state_value(&session.snapshot().state).unwrap()
        );
        live.stop_pump().await;
        m.shutdown().await;
        (value, sequence)
    }

    #[tokio::test]
    async fn the_published_value_follows_the_runtime() {
        let (_, sequence) = converged(1024, true).await;
        assert!(sequence >= 1);
    }

    #[tokio::test]
    async fn a_pump_that_lagged_rebaselines_with_one_diff() {
        // The pump starts only after the whole turn overflowed its 2-event channel: it
        // sees `Lagged`, takes a fresh snapshot and publishes one re-baselining update.
        let (_, sequence) = converged(2, false).await;
        assert_eq!(sequence, 1);
    }
}
