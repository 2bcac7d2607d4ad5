//! The busy stretch: a prompt's turn, the compaction after it when the context crossed the
//! threshold, then each queued follow-up as the next turn, without the phase going idle in
//! between; `/compact` starts one too. The turn itself is [`super::turn`], the compaction
//! [`super::compact`].

use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::Instrument;

use super::compaction::CompactionOutcome;
use super::error::SessionError;
use super::events::Change;
use super::runtime::{Inner, SessionRuntime};
use super::turn::{PromptOutcome, RunHandle, Turn};
use super::view::Phase;
use crate::message::StopReason;
use crate::spawn::spawn_tracked;

/// Where a turn's outcome goes (the first turn of a driver has a waiter; follow-ups do not).
type Reply = oneshot::Sender<Result<PromptOutcome, SessionError>>;

impl SessionRuntime {
    /// Starts a turn with `text`; returns at once.
    ///
    /// # Errors
    /// [`SessionError::Busy`] while a turn (or a compaction) runs;
    /// [`SessionError::UnknownModel`] if the session's model is no longer offered;
    /// [`SessionError::Closed`] after shutdown.
    pub fn start_prompt(&self, text: impl Into<String>) -> Result<RunHandle, SessionError> {
        let inner = &self.inner;
        let turn = {
            let mut st = inner.lock();
            if st.doc.phase != Phase::Idle {
                if inner.shutdown.is_cancelled() {
                    return Err(SessionError::Closed);
                }
                return Err(SessionError::Busy);
            }
            inner.begin_turn(&mut st, text.into())?
        };
        let (tx, rx) = oneshot::channel();
        inner.spawn_driver(turn, Some(tx));
        Ok(RunHandle { rx })
    }

    /// Runs a turn with `text` and waits until it settles.
    ///
    /// # Errors
    /// As [`SessionRuntime::start_prompt`] and [`RunHandle::wait`].
    pub async fn prompt(&self, text: impl Into<String>) -> Result<PromptOutcome, SessionError> {
        self.start_prompt(text)?.wait().await
    }

    /// Compacts now (`/compact`): summarises the history before the kept recent tail, with
    /// `instructions` added to the request. The session is busy meanwhile (`phase: turn`,
    /// `compaction.running`); a queued follow-up is sent once it ends.
    ///
    /// # Errors
    /// [`SessionError::CompactionNotOffered`], [`SessionError::Busy`],
    /// [`SessionError::NothingToCompact`], [`SessionError::Compaction`],
    /// [`SessionError::CompactionAborted`], [`SessionError::UnknownModel`],
    /// [`SessionError::Store`], [`SessionError::Closed`].
    pub async fn compact_now(
        &self,
        instructions: Option<&str>,
    ) -> Result<CompactionOutcome, SessionError> {
        let inner = &self.inner;
        {
            let mut st = inner.lock();
            if !inner.config.compaction.enabled {
                return Err(SessionError::CompactionNotOffered);
            }
            if inner.shutdown.is_cancelled() {
                return Err(SessionError::Closed);
            }
            if st.doc.phase != Phase::Idle {
                return Err(SessionError::Busy);
            }
            inner.enter_busy(&mut st);
        }
        let result = inner.compact_busy(instructions).await;
        let ok = result.is_ok();
        if let Some(turn) = inner.next_or_idle(ok) {
            inner.spawn_driver(turn, None);
        }
        result
    }
}

impl Inner {
    /// Runs `first` and then, while each turn settles normally, the queued follow-ups, one
    /// turn after another, with an automatic compaction between two turns when the context
    /// has grown past the threshold. `reply` gets the first turn's outcome once the session
    /// has gone idle or started the next turn.
    pub(super) fn spawn_driver(self: &Arc<Self>, first: Turn, reply: Option<Reply>) {
        let inner = Arc::clone(self);
        let span = tracing::info_span!("turn", session_id = %self.id);
        let task = async move {
            let mut turn = first;
            let mut reply = reply;
            loop {
                let outcome = inner.run_turn(turn).await;
                let normal = matches!(
                    &outcome,
                    Ok(o) if !matches!(o.run.stop_reason, StopReason::Error | StopReason::Aborted)
                );
                if normal && inner.wants_compaction() {
                    inner.auto_compact().await;
                }
                let next = inner.next_or_idle(normal);
                if let Some(tx) = reply.take() {
                    let _ = tx.send(outcome);
                }
                match next {
                    Some(t) => turn = t,
                    None => break,
                }
            }
        };
        drop(spawn_tracked(&self.tracker, task.instrument(span)));
    }

    /// After a busy stretch step (a turn, a compaction): starts the oldest queued follow-up
    /// when `send` (the step ended normally), else goes idle.
    pub(super) fn next_or_idle(&self, send: bool) -> Option<Turn> {
        let mut st = self.lock();
        let st = &mut *st;
        self.flush_deferred(st);
        if send && !st.doc.activity.follow_ups.is_empty() && !self.shutdown.is_cancelled() {
            let next = st.doc.activity.follow_ups.remove(0);
            st.emit(|d| Change::FollowUps(&d.activity.follow_ups));
            match self.begin_turn(st, next.text) {
                Ok(turn) => return Some(turn),
                Err(error) => {
                    tracing::warn!(%error, follow_up = %next.id, "could not send a queued follow-up");
                }
            }
        }
        if st.doc.phase != Phase::Idle {
            st.doc.phase = Phase::Idle;
            st.emit(|_| Change::Phase(Phase::Idle));
            self.phase.send_replace(Phase::Idle);
        }
        None
    }
}
