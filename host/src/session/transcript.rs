//! A session's one authoritative transcript.
//!
//! Every message is held once, behind an [`Arc`]: the entry list (what the view shows, in
//! order, with entry ids) and the model context (what the next model call reads, each message
//! with the id of the journal entry it is recorded in) share the same allocations, ids
//! included, so a compaction takes the messages it keeps, and their ids, from the context
//! itself. View items are never stored; [`TranscriptView::item`] borrows them out of the
//! entries ([`ItemRef`]), so publishing, paging and snapshots read the transcript in place
//! instead of keeping copies of it.
//!
//! The view differs from the model context in the ways `view.rs` describes (a streaming
//! response and running tools are items; a tool call and its result are one `tool` item) and,
//! after a compaction, in length: the context then starts at the summary while the entries
//! keep everything.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Arc;

use super::activity::{Activity, AttachedClient, CompactionStatus, FollowUp};
use super::view::{BodyRef, ItemRef, Phase, SessionState, ToolConfinement, TranscriptItem};
use crate::message::{AgentMessage, AssistantContent, AssistantMessage, ToolCall};
use crate::model_ref::{ModelRef, ThinkingLevel};
use crate::projection::{ContextProjector, ModelContext};

/// A journal entry id, shared by the view entry and the context entry of its message.
pub(crate) type EntryId = Arc<str>;

/// One view entry.
#[derive(Debug)]
struct Entry {
    id: EntryId,
    slot: Slot,
}

/// One message of the model context and the id of the journal entry it is recorded in.
#[derive(Debug, Clone)]
pub(crate) struct ContextEntry {
    /// The entry id (the `firstKeptEntryId` a compaction that keeps it names).
    pub(crate) id: EntryId,
    /// The message, shared with its view entry.
    pub(crate) message: Arc<AgentMessage>,
}

impl Borrow<AgentMessage> for ContextEntry {
    fn borrow(&self) -> &AgentMessage {
        &self.message
    }
}

#[derive(Debug)]
enum Slot {
    /// A settled message (a tool result here is one whose call is unknown).
    Settled(Arc<AgentMessage>),
    /// The response being streamed (at most one).
    Streaming(Box<AssistantMessage>),
    /// A tool call, running or finished.
    Tool {
        /// The call.
        call: CallRef,
        /// When it started (the running item's timestamp).
        started: u64,
        /// Its result once finished: an [`AgentMessage::ToolResult`].
        result: Option<Arc<AgentMessage>>,
    },
}

/// Where a tool item's call is.
#[derive(Debug)]
enum CallRef {
    /// In this assistant message, at this content index (the usual case: shared).
    Shared(Arc<AgentMessage>, usize),
    /// A call the context does not hold (not produced by the loop): a copy.
    Owned(Box<ToolCall>),
}

impl CallRef {
    fn get(&self) -> Option<&ToolCall> {
        match self {
            Self::Shared(m, i) => match &**m {
                AgentMessage::Assistant(a) => match a.content.get(*i) {
                    Some(AssistantContent::ToolCall(c)) => Some(c),
                    _ => None,
                },
                _ => None,
            },
            Self::Owned(c) => Some(c),
        }
    }
}

/// The entries and the model context.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    entries: Vec<Entry>,
    /// The rich model context with entry ids. Behind an `Arc` so a run or a compaction can
    /// take a snapshot without copying the list; appends go through `Arc::make_mut` (in place
    /// while nobody holds a snapshot).
    context: Arc<Vec<ContextEntry>>,
    /// `context` projected for the provider, kept up to date on every append.
    projected: ContextProjector,
    streaming: Option<usize>,
    running_tools: HashMap<String, usize>,
}

impl Transcript {
    /// The transcript rebuilt from a session file's active path.
    pub(crate) fn from_messages(messages: Vec<(String, AgentMessage)>) -> Self {
        let mut t = Self::default();
        let mut calls: HashMap<String, (Arc<AgentMessage>, usize)> = HashMap::new();
        for (id, m) in messages {
            let id = EntryId::from(id);
            let m = Arc::new(m);
            if let AgentMessage::Assistant(a) = &*m {
                for (i, c) in a.content.iter().enumerate() {
                    if let AssistantContent::ToolCall(call) = c {
                        calls.insert(call.id.clone(), (Arc::clone(&m), i));
                    }
                }
            }
            let slot = match &*m {
                AgentMessage::ToolResult(r) => match calls.get(&r.tool_call_id) {
                    Some((assistant, i)) => Slot::Tool {
                        call: CallRef::Shared(Arc::clone(assistant), *i),
                        started: r.timestamp,
                        result: Some(Arc::clone(&m)),
                    },
                    None => Slot::Settled(Arc::clone(&m)),
                },
                _ => Slot::Settled(Arc::clone(&m)),
            };
            t.entries.push(Entry {
                id: Arc::clone(&id),
                slot,
            });
            t.push_context(id, m);
        }
        t
    }

    /// Appends to the model context and its projection.
    fn push_context(&mut self, id: EntryId, message: Arc<AgentMessage>) {
        self.projected.push(&message);
        Arc::make_mut(&mut self.context).push(ContextEntry { id, message });
    }

    /// Number of view items.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The model context with entry ids, a shared snapshot (O(1): the list is not copied).
    pub(crate) fn context(&self) -> Arc<Vec<ContextEntry>> {
        Arc::clone(&self.context)
    }

    /// The model context's messages without their ids (O(n) pointer copies: for a context
    /// transform, which copies the messages anyway).
    pub(crate) fn context_messages(&self) -> Arc<Vec<Arc<AgentMessage>>> {
        Arc::new(
            self.context
                .iter()
                .map(|e| Arc::clone(&e.message))
                .collect(),
        )
    }

    /// The model context projected for the provider, shared (O(1)).
    pub(crate) fn model_context(&self) -> ModelContext {
        self.projected.context().clone()
    }

    /// The model context as owned messages (a deep copy, for callers outside the runtime).
    pub(crate) fn context_owned(&self) -> Vec<AgentMessage> {
        self.context
            .iter()
            .map(|e| AgentMessage::clone(&e.message))
            .collect()
    }

    /// Appends a settled message to both the view and the context; returns its index.
    pub(crate) fn push_settled(&mut self, id: String, message: Arc<AgentMessage>) -> usize {
        let id = EntryId::from(id);
        self.push_context(Arc::clone(&id), Arc::clone(&message));
        self.entries.push(Entry {
            id,
            slot: Slot::Settled(message),
        });
        self.entries.len() - 1
    }

    /// Starts the streamed response; returns its index.
    pub(crate) fn start_stream(&mut self, id: String, partial: AssistantMessage) -> usize {
        self.entries.push(Entry {
            id: id.into(),
            slot: Slot::Streaming(Box::new(partial)),
        });
        let index = self.entries.len() - 1;
        self.streaming = Some(index);
        index
    }

    /// The response being streamed.
    pub(crate) fn stream_mut(&mut self) -> Option<(usize, &mut AssistantMessage)> {
        let index = self.streaming?;
        match &mut self.entries.get_mut(index)?.slot {
            Slot::Streaming(partial) => Some((index, partial)),
            Slot::Settled(_) | Slot::Tool { .. } => None,
        }
    }

    /// The streamed response's index and entry id, if one is streaming.
    pub(crate) fn streaming(&self) -> Option<(usize, &str)> {
        let index = self.streaming?;
        Some((index, &self.entries.get(index)?.id))
    }

    /// Settles the streamed response with `message`; returns its index and what the item
    /// was before.
    pub(crate) fn settle_stream(
        &mut self,
        message: Arc<AgentMessage>,
    ) -> Option<(usize, TranscriptItem)> {
        let index = self.streaming.take()?;
        let old = self.owned_item(index)?;
        let id = Arc::clone(&self.entries[index].id);
        self.push_context(id, Arc::clone(&message));
        self.entries[index].slot = Slot::Settled(message);
        Some((index, old))
    }

    /// Starts a tool item for `call`; returns its index.
    pub(crate) fn start_tool(&mut self, id: String, call: &ToolCall, started: u64) -> usize {
        // The call is in the assistant message just settled: search from the end.
        let found = self.context.iter().rev().find_map(|e| match &*e.message {
            AgentMessage::Assistant(a) => a
                .content
                .iter()
                .position(|c| matches!(c, AssistantContent::ToolCall(c) if c.id == call.id))
                .map(|i| (Arc::clone(&e.message), i)),
            _ => None,
        });
        let call_ref = match found {
            Some((m, i)) => CallRef::Shared(m, i),
            None => CallRef::Owned(Box::new(call.clone())),
        };
        let slot = Slot::Tool {
            call: call_ref,
            started,
            result: None,
        };
        self.entries.push(Entry {
            id: id.into(),
            slot,
        });
        let index = self.entries.len() - 1;
        self.running_tools.insert(call.id.clone(), index);
        index
    }

    /// Shows `result` on its running tool item; returns the index and the item before.
    pub(crate) fn finish_tool(
        &mut self,
        result: Arc<AgentMessage>,
    ) -> Option<(usize, TranscriptItem)> {
        let AgentMessage::ToolResult(r) = &*result else {
            return None;
        };
        let index = *self.running_tools.get(&r.tool_call_id)?;
        let old = self.owned_item(index)?;
        if let Slot::Tool { result: slot, .. } = &mut self.entries[index].slot {
            *slot = Some(result);
        }
        Some((index, old))
    }

    /// The entry id of the running tool item `message` (a tool result) settles, if any.
    pub(crate) fn running_tool_id(&self, message: &AgentMessage) -> Option<String> {
        let AgentMessage::ToolResult(r) = message else {
            return None;
        };
        let index = *self.running_tools.get(&r.tool_call_id)?;
        Some(self.entries.get(index)?.id.to_string())
    }

    /// Records a settled tool result on its tool item (no view change: the item already shows
    /// it since `ToolEnd`) and in the context. False when no tool item is running for it.
    pub(crate) fn settle_tool(&mut self, message: &Arc<AgentMessage>) -> bool {
        let AgentMessage::ToolResult(r) = &**message else {
            return false;
        };
        let Some(index) = self.running_tools.remove(&r.tool_call_id) else {
            return false;
        };
        let Some(entry) = self.entries.get_mut(index) else {
            return false;
        };
        if let Slot::Tool { result, .. } = &mut entry.slot {
            // The settled copy replaces the one shown since `ToolEnd`: one copy stays.
            *result = Some(Arc::clone(message));
        }
        let id = Arc::clone(&entry.id);
        self.push_context(id, Arc::clone(message));
        true
    }

    /// Forgets the run's streaming and running state (the items stay as they are).
    pub(crate) fn end_run(&mut self) {
        self.streaming = None;
        self.running_tools.clear();
    }

    /// Records a compaction: appends the `summary` item (entry `id`) to the view and makes
    /// the model context the summary followed by `kept`, a tail of [`Transcript::context`]
    /// (its messages stay the ones the view holds); rebuilds the projection once (O(n)).
    /// Returns the summary item's index.
    pub(crate) fn compact(
        &mut self,
        id: String,
        summary: Arc<AgentMessage>,
        kept: &[ContextEntry],
    ) -> usize {
        let id = EntryId::from(id);
        self.entries.push(Entry {
            id: Arc::clone(&id),
            slot: Slot::Settled(Arc::clone(&summary)),
        });
        let mut context = Vec::with_capacity(kept.len() + 1);
        context.push(ContextEntry {
            id,
            message: summary,
        });
        context.extend_from_slice(kept);
        self.projected = ContextProjector::from_messages(context.iter().map(|e| &e.message));
        self.context = Arc::new(context);
        self.entries.len() - 1
    }

    /// Item `index`, borrowed.
    pub(crate) fn item(&self, index: usize) -> Option<ItemRef<'_>> {
        let e = self.entries.get(index)?;
        let body = match &e.slot {
            Slot::Settled(m) => BodyRef::settled(m, None),
            Slot::Streaming(p) => BodyRef::streaming(p),
            Slot::Tool {
                call,
                started,
                result,
            } => {
                let call = call.get();
                match (result.as_deref(), call) {
                    (Some(m), call) => BodyRef::settled(m, call.map(|c| &c.arguments)),
                    (None, Some(call)) => BodyRef::running(call, *started),
                    // Unreachable by construction (a tool slot has a call or a result).
                    (None, None) => return None,
                }
            }
        };
        Some(ItemRef { id: &e.id, body })
    }

    fn owned_item(&self, index: usize) -> Option<TranscriptItem> {
        self.item(index).map(|i| i.to_owned_item())
    }

    /// The index of the item with entry id `id` (searched from the end: recent items are the
    /// ones asked for most).
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.entries.iter().rposition(|e| &*e.id == id)
    }
}

/// A read-only view of a session's state, lent out under the session lock (see
/// [`super::SessionRuntime::with_view`]); items are borrowed from the one transcript, not copied.
#[derive(Debug, Clone, Copy)]
pub struct TranscriptView<'a> {
    pub(crate) transcript: &'a Transcript,
    pub(crate) phase: Phase,
    pub(crate) model: &'a ModelRef,
    pub(crate) thinking: ThinkingLevel,
    pub(crate) queued_steer: &'a [String],
    pub(crate) confinement: &'a ToolConfinement,
    /// The running turn, follow-ups, presence and compaction status (`super::activity`).
    pub(crate) activity: &'a Activity,
}

impl<'a> TranscriptView<'a> {
    /// Number of transcript items.
    pub fn len(&self) -> usize {
        self.transcript.len()
    }

    /// True when the transcript has no items.
    pub fn is_empty(&self) -> bool {
        self.transcript.len() == 0
    }

    /// Item `index`, borrowed.
    pub fn item(&self, index: usize) -> Option<ItemRef<'a>> {
        self.transcript.item(index)
    }

    /// The index of the item whose entry id is `id`.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.transcript.position(id)
    }

    /// `idle` or `turn`.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The current model.
    pub fn model(&self) -> &'a ModelRef {
        self.model
    }

    /// The current reasoning effort.
    pub fn thinking_level(&self) -> ThinkingLevel {
        self.thinking
    }

    /// Steering texts waiting for the next turn boundary.
    pub fn queued_steer(&self) -> &'a [String] {
        self.queued_steer
    }

    /// Whether the session's tools are confined (fixed for the session's life).
    pub fn confinement(&self) -> &'a ToolConfinement {
        self.confinement
    }

    /// The running turn's id (`None` when no turn runs).
    pub fn turn_id(&self) -> Option<&'a str> {
        self.activity.turn_id.as_deref()
    }

    /// Follow-up prompts waiting for the running turn to settle, oldest first.
    pub fn follow_ups(&self) -> &'a [FollowUp] {
        &self.activity.follow_ups
    }

    /// The clients attached to the session.
    pub fn attached(&self) -> &'a [AttachedClient] {
        &self.activity.attached
    }

    /// Whether compaction is offered and running.
    pub fn compaction(&self) -> CompactionStatus {
        self.activity.compaction
    }

    /// The whole state as owned values (copies every item: for tests and small sessions;
    /// the service reads items in place instead).
    pub fn to_state(&self) -> SessionState {
        SessionState {
            confinement: self.confinement.clone(),
            phase: self.phase,
            model: self.model.clone(),
            thinking_level: self.thinking,
            transcript: (0..self.len())
                .filter_map(|i| self.item(i).map(|i| i.to_owned_item()))
                .collect(),
            queued_steer: self.queued_steer.to_vec(),
            turn_id: self.activity.turn_id.clone(),
            follow_ups: self.activity.follow_ups.clone(),
            attached: self.activity.attached.clone(),
            compaction: self.activity.compaction,
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::{Map, Value};

    use super::*;
    use crate::message::{
        CompactionSummaryMessage, StopReason, ToolResultMessage, Usage, UserMessage,
    };
    use crate::projection::project;

    fn user(text: &str) -> AgentMessage {
        AgentMessage::User(UserMessage::text(text, 1))
    }

    fn calling(id: &str) -> AgentMessage {
        AgentMessage::Assistant(AssistantMessage {
            content: vec![AssistantContent::ToolCall(ToolCall::new(
                id,
                "read",
                Value::Map(Map::new()),
            ))],
            api: "test".into(),
            provider: "test".into(),
            model: "m".into(),
            response_model: None,
            response_id: None,
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
            error_message: None,
            raw_stop_reason: None,
            timestamp: 2,
        })
    }

    fn result(id: &str) -> AgentMessage {
        AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "read".into(),
            content: Vec::new(),
            details: None,
            is_error: false,
            timestamp: 3,
        })
    }

    fn projected_as_a_whole(t: &Transcript) -> Vec<crate::message::Message> {
        project(&t.context())
    }

    #[test]
    fn the_projected_context_follows_appends_and_is_rebuilt_once_after_a_compaction() {
        let mut t =
            Transcript::from_messages(vec![("e1".into(), user("a")), ("e2".into(), calling("c1"))]);
        assert_eq!(t.model_context(), projected_as_a_whole(&t));
        let before = t.model_context();
        t.push_settled("e3".into(), Arc::new(result("c1")));
        t.push_settled("e4".into(), Arc::new(user("b")));
        assert_eq!(t.model_context(), projected_as_a_whole(&t));
        assert_eq!(before.len(), 3, "a context handed out is a snapshot");
        assert_ne!(before, t.model_context());

        let summary = AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: "earlier".into(),
            tokens_before: 100,
            timestamp: 4,
        });
        let context = t.context();
        assert_eq!(&*context[3].id, "e4");
        t.compact("s1".into(), Arc::new(summary), &context[3..]);
        assert_eq!(t.model_context().len(), 2);
        assert_eq!(t.model_context(), projected_as_a_whole(&t));
        t.push_settled("e5".into(), Arc::new(calling("c2")));
        assert_eq!(t.model_context(), projected_as_a_whole(&t));
    }

    #[test]
    fn every_context_message_carries_the_id_of_the_item_that_shows_it() {
        let mut t = Transcript::from_messages(vec![("e1".into(), user("a"))]);
        let AgentMessage::Assistant(partial) = calling("c1") else {
            unreachable!("calling builds an assistant message")
        };
        t.start_stream("e2".into(), partial.clone());
        t.settle_stream(Arc::new(calling("c1")));
        let call = partial.tool_calls().next().unwrap().clone();
        t.start_tool("e3".into(), &call, 3);
        let settled = Arc::new(result("c1"));
        t.finish_tool(Arc::clone(&settled));
        assert!(t.settle_tool(&settled));
        t.push_settled("e4".into(), Arc::new(user("b")));
        let ids: Vec<&str> = t.context.iter().map(|e| &*e.id).collect();
        assert_eq!(ids, ["e1", "e2", "e3", "e4"]);
        for e in t.context.iter() {
            assert_eq!(t.item(t.position(&e.id).unwrap()).unwrap().id, &*e.id);
        }
    }

    #[test]
    fn a_compaction_keeps_each_message_as_its_own_entry_holds_it_even_when_two_are_equal() {
        let mut t = Transcript::from_messages(vec![
            ("e1".into(), user("same")),
            ("e2".into(), user("other")),
            ("e3".into(), user("same")),
        ]);
        let context = t.context();
        let summary = AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: "earlier".into(),
            tokens_before: 100,
            timestamp: 4,
        });
        let index = t.compact("s1".into(), Arc::new(summary), &context[2..]);
        assert_eq!((index, t.len()), (3, 4), "the view keeps every item");
        let after = t.context();
        let ids: Vec<&str> = after.iter().map(|e| &*e.id).collect();
        assert_eq!(ids, ["s1", "e3"]);
        let held = |id: &str| match &t.entries[t.position(id).unwrap()].slot {
            Slot::Settled(m) => Arc::clone(m),
            other => panic!("{other:?}"),
        };
        // The kept message is e3's own allocation, not e1's equal one, and not a copy.
        assert!(Arc::ptr_eq(&after[1].message, &held("e3")));
        assert!(!Arc::ptr_eq(&after[1].message, &held("e1")));
        assert!(Arc::ptr_eq(&after[0].message, &held("s1")));
        assert_eq!(t.model_context(), projected_as_a_whole(&t));
    }

    #[test]
    fn a_snapshot_of_the_messages_is_shared_not_copied() {
        let t = Transcript::from_messages(vec![("e1".into(), user("a"))]);
        assert!(Arc::ptr_eq(&t.context(), &t.context()));
    }
}
