//! The follow-up queue: prompts written while a turn runs, sent one by one as the next
//! prompt each time a turn settles.
//!
//! Rules (upstream's `followUp` queue is the reference):
//! * When a turn settles normally (any stop reason but `error` or `aborted`), the oldest
//!   follow-up is taken off the queue and starts the next turn at once: the phase stays
//!   `turn` and only `turnId` changes.
//! * A turn that ends `aborted` or `error` sends nothing: the queue stays as it is (the user
//!   stopped for a reason), visible and editable, until the next turn settles normally or a
//!   `followUp` arrives while the session is idle.
//! * [`SessionRuntime::follow_up`] while idle starts a turn at once with the oldest queued
//!   text (the new text itself when the queue is empty), so a follow-up written just as a
//!   turn ended is never stranded.

use super::activity::{FollowUp, MAX_QUEUED_FOLLOW_UPS};
use super::error::SessionError;
use super::events::Change;
use super::runtime::SessionRuntime;
use super::view::Phase;

/// What [`SessionRuntime::follow_up`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowUpOutcome {
    /// The follow-up's id (listed in `followUps` while it waits).
    pub id: String,
    /// True when the session was idle, so a turn started at once (with this text when the
    /// queue was empty, else with the oldest queued one while this one waits).
    pub started: bool,
}

impl SessionRuntime {
    /// Queues `text` to be sent as the next prompt when the running turn settles (see the
    /// module rules); while idle, starts a turn at once.
    ///
    /// # Errors
    /// [`SessionError::FollowUpQueueFull`]; while idle, as
    /// [`SessionRuntime::start_prompt`] (nothing is queued then).
    pub fn follow_up(&self, text: impl Into<String>) -> Result<FollowUpOutcome, SessionError> {
        let inner = &self.inner;
        let mut st = inner.lock();
        let st = &mut *st;
        if inner.shutdown.is_cancelled() {
            return Err(SessionError::Closed);
        }
        if st.doc.activity.follow_ups.len() >= MAX_QUEUED_FOLLOW_UPS {
            return Err(SessionError::FollowUpQueueFull);
        }
        let id = st.doc.activity.follow_up_id();
        let text = text.into();
        if st.doc.phase == Phase::Turn {
            st.doc.activity.follow_ups.push(FollowUp {
                id: id.clone(),
                text,
            });
            st.emit(|d| Change::FollowUps(&d.activity.follow_ups));
            return Ok(FollowUpOutcome { id, started: false });
        }
        // Idle: the oldest waiting text goes first.
        let turn = if st.doc.activity.follow_ups.is_empty() {
            inner.begin_turn(st, text)?
        } else {
            let oldest = st.doc.activity.follow_ups[0].text.clone();
            let turn = inner.begin_turn(st, oldest)?;
            st.doc.activity.follow_ups.remove(0);
            st.doc.activity.follow_ups.push(FollowUp {
                id: id.clone(),
                text,
            });
            st.emit(|d| Change::FollowUps(&d.activity.follow_ups));
            turn
        };
        inner.spawn_driver(turn, None);
        Ok(FollowUpOutcome { id, started: true })
    }

    /// Replaces the text of queued follow-up `id`.
    ///
    /// # Errors
    /// [`SessionError::UnknownFollowUp`] when it was already sent or removed.
    pub fn edit_follow_up(&self, id: &str, text: impl Into<String>) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        let Some(f) = st.doc.activity.follow_ups.iter_mut().find(|f| f.id == id) else {
            return Err(SessionError::UnknownFollowUp(id.to_owned()));
        };
        f.text = text.into();
        st.emit(|d| Change::FollowUps(&d.activity.follow_ups));
        Ok(())
    }

    /// Removes queued follow-up `id`; returns its text.
    ///
    /// # Errors
    /// [`SessionError::UnknownFollowUp`] when it was already sent or removed.
    pub fn remove_follow_up(&self, id: &str) -> Result<String, SessionError> {
        let mut st = self.inner.lock();
        let Some(i) = st.doc.activity.follow_ups.iter().position(|f| f.id == id) else {
            return Err(SessionError::UnknownFollowUp(id.to_owned()));
        };
        let removed = st.doc.activity.follow_ups.remove(i);
        st.emit(|d| Change::FollowUps(&d.activity.follow_ups));
        Ok(removed.text)
    }

    /// Removes every queued follow-up; returns how many there were.
    pub fn clear_follow_ups(&self) -> usize {
        let mut st = self.inner.lock();
        let n = st.doc.activity.follow_ups.len();
        if n > 0 {
            st.doc.activity.follow_ups.clear();
            st.emit(|d| Change::FollowUps(&d.activity.follow_ups));
        }
        n
    }

    /// The queued follow-ups, oldest first.
    pub fn follow_ups(&self) -> Vec<FollowUp> {
        self.inner.lock().doc.activity.follow_ups.clone()
    }
}
