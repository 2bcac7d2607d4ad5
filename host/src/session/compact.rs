//! Compacting a live session: `/compact` ([`SessionRuntime::compact_now`]) and the automatic
//! compaction between two turns, holding the session busy (`phase: turn`,
//! `compaction.running`) while the model writes the summary. The policy and the pure parts
//! are [`super::compaction`].

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::compaction::{
    CHARS_PER_TOKEN, CompactionOutcome, context_tokens, context_window, cut_point, summarise,
    summary_prompt, summary_request,
};
use super::error::SessionError;
use super::events::Change;
use super::runtime::{Inner, SessionRuntime, State};
use super::view::Phase;
use crate::journal::{EntryKind, SessionFile, rebuild};
use crate::message::{AgentMessage, CompactionSummaryMessage};
use crate::model_ref::ModelRef;
use crate::provider::Provider;

impl SessionRuntime {
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
    async fn compact_busy(
        &self,
        instructions: Option<&str>,
    ) -> Result<CompactionOutcome, SessionError> {
        let (provider, model, cancel, path) = {
            let mut st = self.lock();
            let provider = self
                .models
                .resolve(&st.doc.model)
                .ok_or_else(|| SessionError::UnknownModel(st.doc.model.to_string()))?;
            set_running(&mut st, true);
            (
                provider,
                st.doc.model.clone(),
                st.abort.child_token(),
                st.file.path().to_owned(),
            )
        };
        let result = self
            .compact_with(provider.as_ref(), &model, instructions, &cancel, &path)
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
        path: &std::path::Path,
    ) -> Result<CompactionOutcome, SessionError> {
        let settings = &self.config.compaction;
        // The context with the entry id of each message, as the journal rebuilds it (nothing
        // appends messages while the session is busy, so it is the live context).
        let path = path.to_owned();
        let loaded = tokio::task::spawn_blocking(move || SessionFile::read(&path))
            .await
            .map_err(|_| SessionError::Closed)??;
        let messages = rebuild(&loaded.entries).messages;
        let plain: Vec<&AgentMessage> = messages.iter().map(|(_, m)| m).collect();
        let tokens_before = context_tokens(&plain);
        let cut =
            cut_point(&plain, settings.keep_recent_tokens).ok_or(SessionError::NothingToCompact)?;
        let window = context_window(&self.models, model, settings);
        let budget = usize::try_from(
            window
                .saturating_sub(settings.reserve_tokens)
                .saturating_mul(CHARS_PER_TOKEN),
        )
        .unwrap_or(usize::MAX);
        let request = summary_request(
            &model.id,
            summary_prompt(&plain[..cut], instructions, budget),
        );
        let summary = summarise(provider, request, cancel).await?;
        let first_kept = messages[cut].0.clone();
        let mut st = self.lock();
        let st = &mut *st;
        let id = self.record_entry(
            st,
            EntryKind::Compaction {
                summary: summary.clone(),
                first_kept_entry_id: first_kept.clone(),
                tokens_before,
            },
        )?;
        let message = AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: summary.clone(),
            tokens_before,
            timestamp: self.clock.now_ms(),
        });
        let mut context = vec![(id.clone(), message.clone())];
        context.extend(messages.into_iter().skip(cut));
        let kept: Vec<&AgentMessage> = context.iter().map(|(_, m)| m).collect();
        let tokens_after = context_tokens(&kept);
        let index = st.doc.transcript.push_settled(id, Arc::new(message));
        st.doc.transcript.replace_context(context);
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
