//! Compacting a live session: the model writing the summary, for `/compact`
//! ([`SessionRuntime::compact_now`], started as a busy stretch by [`super::driver`]) and for
//! the automatic compaction between two turns, with `compaction.running` set meanwhile; and
//! recording a compaction whose summary was written elsewhere ([`SessionRuntime::compact`]).
//! The policy and the pure parts are [`super::compaction`].

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::compaction::{
    CHARS_PER_TOKEN, CompactionOutcome, context_tokens, context_window, cut_point, summarise,
    summary_prompt, summary_request,
};
use super::error::SessionError;
use super::events::Change;
use super::runtime::{Inner, SessionRuntime, State};
use super::transcript::ContextEntry;
use super::view::Phase;
use crate::journal::EntryKind;
use crate::message::{AgentMessage, CompactionSummaryMessage};
use crate::model_ref::ModelRef;
use crate::provider::Provider;

impl SessionRuntime {
    /// Records a compaction with a summary written elsewhere: the model context's history
    /// before `first_kept_entry_id` is replaced by `summary` (the file keeps everything, and
    /// so does the view, which gains the `compactionSummary` item). To have the model write
    /// the summary, use [`SessionRuntime::compact_now`].
    ///
    /// # Errors
    /// [`SessionError::UnknownEntry`] when `first_kept_entry_id` is not a message of the
    /// model context after the summary it starts with (nothing is recorded then);
    /// [`SessionError::Busy`], [`SessionError::Store`].
    pub fn compact(
        &self,
        summary: &str,
        first_kept_entry_id: &str,
        tokens_before: u64,
    ) -> Result<(), SessionError> {
        let mut st = self.inner.lock();
        if st.doc.phase != Phase::Idle {
            return Err(SessionError::Busy);
        }
        let context = st.doc.transcript.context();
        // An earlier summary stands for entries before its own on the active path: keeping
        // from it is not keeping a tail of the live context.
        let after_summary = usize::from(matches!(
            context.first().map(|e| &*e.message),
            Some(AgentMessage::CompactionSummary(_))
        ));
        let cut = context
            .iter()
            .skip(after_summary)
            .position(|e| &*e.id == first_kept_entry_id)
            .ok_or_else(|| SessionError::UnknownEntry(first_kept_entry_id.to_owned()))?
            + after_summary;
        self.inner.record_compaction(
            &mut st,
            summary.to_owned(),
            &context[cut..],
            tokens_before,
        )?;
        Ok(())
    }
}

impl Inner {
    /// Whether the context has crossed the automatic threshold.
    pub(super) fn wants_compaction(&self) -> bool {
        let settings = &self.config.compaction;
        if !settings.enabled || !settings.auto || self.shutdown.is_cancelled() {
            return false;
        }
        let st = self.lock();
        let window = context_window(&self.models, &st.doc.model, settings);
        let context = st.doc.transcript.context();
        settings.should_compact(context_tokens(&context[..]), window)
    }

    /// The automatic compaction between two turns (failures are logged: the turn that
    /// crossed the threshold has settled; the next model call may still fit).
    pub(super) async fn auto_compact(self: &Arc<Self>) {
        match self.compact_busy(None).await {
            Ok(outcome) => tracing::info!(
                tokens_before = outcome.tokens_before,
                tokens_after = outcome.tokens_after,
                "context compacted"
            ),
            Err(SessionError::NothingToCompact) => {}
            Err(error) => tracing::warn!(%error, "automatic compaction failed"),
        }
    }

    /// A compaction while the session is already busy (`phase: turn`).
    pub(super) async fn compact_busy(
        &self,
        instructions: Option<&str>,
    ) -> Result<CompactionOutcome, SessionError> {
        let (provider, model, cancel, context) = {
            let mut st = self.lock();
            let provider = self
                .models
                .resolve(&st.doc.model)
                .ok_or_else(|| SessionError::UnknownModel(st.doc.model.to_string()))?;
            set_running(&mut st, true);
            // The live context with the entry id of each message. Nothing appends to it
            // while the session is busy, so it is still the live context once the summary
            // is written.
            (
                provider,
                st.doc.model.clone(),
                st.abort.child_token(),
                st.doc.transcript.context(),
            )
        };
        let result = self
            .compact_with(provider.as_ref(), &model, instructions, &cancel, &context)
            .await;
        set_running(&mut self.lock(), false);
        result
    }

    async fn compact_with(
        &self,
        provider: &dyn Provider,
        model: &ModelRef,
        instructions: Option<&str>,
        cancel: &CancellationToken,
        context: &[ContextEntry],
    ) -> Result<CompactionOutcome, SessionError> {
        let settings = &self.config.compaction;
        let tokens_before = context_tokens(context);
        let cut = cut_point(context, settings.keep_recent_tokens)
            .ok_or(SessionError::NothingToCompact)?;
        let window = context_window(&self.models, model, settings);
        let budget = usize::try_from(
            window
                .saturating_sub(settings.reserve_tokens)
                .saturating_mul(CHARS_PER_TOKEN),
        )
        .unwrap_or(usize::MAX);
        let request = summary_request(
            &model.id,
            summary_prompt(&context[..cut], instructions, budget),
        );
        let summary = summarise(provider, request, cancel).await?;
        let mut st = self.lock();
        self.record_compaction(&mut st, summary, &context[cut..], tokens_before)
    }

    /// Records a compaction that keeps `kept` (a tail of the live context) after `summary`:
    /// the journal entry, the view's summary item, and the model context (the summary, then
    /// `kept`, whose messages stay the transcript's own).
    ///
    /// # Errors
    /// [`SessionError::NothingToCompact`] when `kept` is empty; [`SessionError::Store`].
    pub(super) fn record_compaction(
        &self,
        st: &mut State,
        summary: String,
        kept: &[ContextEntry],
        tokens_before: u64,
    ) -> Result<CompactionOutcome, SessionError> {
        let first_kept = kept
            .first()
            .ok_or(SessionError::NothingToCompact)?
            .id
            .to_string();
        let now = self.clock.now_ms();
        let id = self.record_entry_at(
            st,
            now,
            EntryKind::Compaction {
                summary: summary.clone(),
                first_kept_entry_id: first_kept.clone(),
                tokens_before,
            },
        )?;
        // The summary's time is its entry's, as a reopened session has it.
        let message = Arc::new(AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: summary.clone(),
            tokens_before,
            timestamp: now,
        }));
        let index = st.doc.transcript.compact(id, message, kept);
        let tokens_after = context_tokens(&st.doc.transcript.context());
        st.emit(|_| Change::ItemAdded { index });
        Ok(CompactionOutcome {
            summary,
            first_kept_entry_id: first_kept,
            tokens_before,
            tokens_after,
        })
    }
}

fn set_running(st: &mut State, running: bool) {
    if st.doc.activity.compaction.running != running {
        st.doc.activity.compaction.running = running;
        st.emit(|d| Change::Compaction(d.activity.compaction));
    }
}
