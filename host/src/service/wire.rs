//! Runtime values in their published (`docs/services.md`) shapes, and the mapping from a
//! session's [`Change`]s to chord ops over the published window.
//!
//! The mapping is direct, not a diff of successive states: every change names the item it
//! touches, so streamed text becomes one `a` op per delta in O(delta) (a diff of the whole
//! state per token would cost O(state)), and the items are read from the runtime's one
//! transcript ([`TranscriptView`]) rather than from a copy kept here. Only an item that is
//! replaced — a message settling or a tool finishing, a few times per turn — is diffed, and
//! only within that item, so a settled reply does not resend its text.
//!
//! The published state is bounded whatever the transcript holds: it shows the last
//! [`DEFAULT_TRANSCRIPT_WINDOW`] items (`transcriptStart`, present once older items exist,
//! says where the window starts), and each item at most [`MAX_PUBLISHED_ITEM_BYTES`] of
//! text (cut strings are listed under the item's `clipped`).

use baton_protocol::chord::{Op, Path, PathSegment, apply, diff};
use baton_protocol::{Map, Value};

use crate::model_ref::ModelRef;
use crate::provider::{ModelInfo, ModelMeta};
use crate::session::{
    AttachedClient, BodyRef, Change, CompactionStatus, DEFAULT_TRANSCRIPT_WINDOW, FollowUp,
    ItemRef, MAX_PUBLISHED_ITEM_BYTES, Phase, SessionMeta, SessionState, ToolConfinement,
    TranscriptView,
};
use crate::value::{Clipped, ValueError, to_clipped_value, to_protocol_value};

/// Why an event could not be turned into ops.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MapError {
    /// A runtime value has no protocol form.
    #[error(transparent)]
    Value(#[from] ValueError),
    /// The event does not fit the published state (a bug: the caller re-baselines).
    #[error("event does not fit the published state: {0}")]
    Shape(&'static str),
}

/// `provider/id`, the text form of a model in every published value.
pub(crate) fn model_text(model: &ModelRef) -> String {
    format!("{}/{}", model.provider, model.id)
}

/// Parses `provider/id` (both non-empty; the id may itself contain `/`).
pub(crate) fn parse_model(text: &str) -> Option<ModelRef> {
    let (provider, id) = text.split_once('/')?;
    (!provider.is_empty() && !id.is_empty()).then(|| ModelRef::new(provider, id))
}

/// `idle` or `turn`.
pub(crate) fn phase_text(phase: Phase) -> &'static str {
    match phase {
        Phase::Idle => "idle",
        Phase::Turn => "turn",
    }
}

/// One transcript item as published: the runtime view with its text cut to `budget` bytes
/// (cut paths listed under `clipped`), plus `status: "complete"` on `bashExecution` records
/// (the runtime inserts them only once the command has finished).
pub(crate) fn published_item(item: &ItemRef<'_>, budget: usize) -> Result<Clipped, ValueError> {
    let mut clipped = to_clipped_value(item, budget)?;
    if let Value::Map(m) = &mut clipped.value {
        if item.is_bash_execution() {
            m.insert("status", Value::from("complete"));
        }
        if !clipped.cut.is_empty() {
            m.insert(
                "clipped",
                Value::Array(clipped.cut.iter().map(path_value).collect()),
            );
        }
    }
    Ok(clipped)
}

/// A path as a published array of keys and indexes.
pub(crate) fn path_value(path: &Path) -> Value {
    Value::Array(
        path.iter()
            .map(|s| match s {
                PathSegment::Key(k) => Value::from(k.as_str()),
                PathSegment::Index(i) => Value::try_from(*i).unwrap_or(Value::Null),
            })
            .collect(),
    )
}

/// The `pi.session` member `state` of a whole (unwindowed, unclipped) [`SessionState`]: the
/// shape subscribers see for a session shorter than the window whose items are within the
/// item limit.
///
/// # Errors
/// A transcript value the protocol cannot carry (an integer beyond ±(2^53−1)).
pub fn session_state_value(state: &SessionState) -> Result<Value, ValueError> {
    let transcript = state
        .transcript
        .iter()
        .map(|item| {
            let mut v = to_protocol_value(item)?;
            if matches!(item.body, crate::session::ItemBody::BashExecution(_))
                && let Value::Map(m) = &mut v
            {
                m.insert("status", Value::from("complete"));
            }
            Ok(v)
        })
        .collect::<Result<Vec<_>, ValueError>>()?;
    let mut m = Map::with_capacity(6);
    m.insert("confinement", confinement_value(&state.confinement));
    m.insert("phase", Value::from(phase_text(state.phase)));
    m.insert("model", Value::from(model_text(&state.model).as_str()));
    m.insert("thinkingLevel", Value::from(state.thinking_level.as_str()));
    m.insert("transcript", Value::Array(transcript));
    m.insert("queuedSteer", strings(&state.queued_steer));
    m.insert(
        "turnId",
        state.turn_id.as_deref().map_or(Value::Null, Value::from),
    );
    m.insert("followUps", follow_ups_value(&state.follow_ups));
    m.insert("attached", attached_value(&state.attached));
    m.insert("compaction", compaction_value(state.compaction));
    Ok(Value::Map(m))
}

/// The state's `followUps`: `[{"id", "text"}]`, oldest first.
pub(crate) fn follow_ups_value(items: &[FollowUp]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|f| {
                let mut m = Map::with_capacity(2);
                m.insert("id", Value::from(f.id.as_str()));
                m.insert("text", Value::from(f.text.as_str()));
                Value::Map(m)
            })
            .collect(),
    )
}

/// The state's `attached`: `[{"id", "identity"}]`, in attach order.
pub(crate) fn attached_value(items: &[AttachedClient]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|a| {
                let mut m = Map::with_capacity(2);
                m.insert("id", count_value_u64(a.id));
                m.insert("identity", Value::from(a.identity.as_str()));
                Value::Map(m)
            })
            .collect(),
    )
}

/// The state's `compaction`: `{"offered": bool, "running": bool}`.
pub(crate) fn compaction_value(c: CompactionStatus) -> Value {
    let mut m = Map::with_capacity(2);
    m.insert("offered", Value::Bool(c.offered));
    m.insert("running", Value::Bool(c.running));
    Value::Map(m)
}

fn count_value_u64(n: u64) -> Value {
    Value::try_from(n).unwrap_or(Value::Null)
}

/// The state's `confinement`: `{"active": bool, "detail": string}`.
pub(crate) fn confinement_value(c: &ToolConfinement) -> Value {
    let mut m = Map::with_capacity(2);
    m.insert("active", Value::Bool(c.active));
    m.insert("detail", Value::from(c.detail.as_str()));
    Value::Map(m)
}

/// One `pi.session-directory` entry.
pub(crate) fn meta_value(meta: &SessionMeta, phase: &str, attached: usize) -> Value {
    let mut m = Map::with_capacity(8);
    m.insert("id", Value::from(meta.id.as_str()));
    m.insert(
        "name",
        meta.name.as_deref().map_or(Value::Null, Value::from),
    );
    m.insert("cwd", Value::from(meta.cwd.as_str()));
    m.insert("createdAt", Value::from(meta.created_at.as_str()));
    m.insert("updatedAt", Value::from(meta.updated_at.as_str()));
    m.insert("phase", Value::from(phase));
    m.insert("model", Value::from(model_text(&meta.model).as_str()));
    m.insert(
        "attachedClients",
        Value::from(u32::try_from(attached).unwrap_or(u32::MAX)),
    );
    Value::Map(m)
}

/// One `pi.models` entry: identity, then what is known about the model (absent members are
/// unknown).
pub(crate) fn model_value(info: &ModelInfo, meta: Option<&ModelMeta>, default: bool) -> Value {
    let mut m = Map::with_capacity(9);
    m.insert("provider", Value::from(info.provider.as_str()));
    m.insert("id", Value::from(info.id.as_str()));
    m.insert("name", Value::from(info.name.as_str()));
    m.insert("default", Value::Bool(default));
    let Some(meta) = meta else {
        return Value::Map(m);
    };
    if let Some(api) = &meta.api {
        m.insert("api", Value::from(api.as_str()));
    }
    if let Some(r) = meta.reasoning {
        m.insert("reasoning", Value::Bool(r));
    }
    if let Some(n) = meta.context_window {
        m.insert("contextWindow", count_value_u64(n));
    }
    if let Some(n) = meta.max_output {
        m.insert("maxTokens", count_value_u64(n));
    }
    if let Some(c) = &meta.cost {
        let price = |v: f64| Value::try_from(v).unwrap_or(Value::Null);
        let mut cost = Map::with_capacity(4);
        cost.insert("input", price(c.input));
        cost.insert("output", price(c.output));
        cost.insert("cacheRead", price(c.cache_read));
        cost.insert("cacheWrite", price(c.cache_write));
        m.insert("cost", Value::Map(cost));
    }
    Value::Map(m)
}

fn strings(items: &[String]) -> Value {
    Value::Array(items.iter().map(|s| Value::from(s.as_str())).collect())
}

fn key(k: &str) -> PathSegment {
    PathSegment::key(k)
}

fn index(i: usize) -> PathSegment {
    PathSegment::Index(u64::try_from(i).unwrap_or(u64::MAX))
}

fn u64_of(i: usize) -> u64 {
    u64::try_from(i).unwrap_or(u64::MAX)
}

/// A count or byte offset as a published number (safe integers: exact up to 2^53 − 1).
pub(crate) fn count_value(n: usize) -> Value {
    Value::try_from(n).unwrap_or(Value::Null)
}

/// The published window over one session's transcript, and the one item it keeps a
/// published copy of: the response being streamed (at most [`MAX_PUBLISHED_ITEM_BYTES`] of
/// text), so each token maps to an `a` op without re-reading the item.
#[derive(Debug)]
pub(crate) struct Window {
    /// Items shown.
    size: usize,
    /// Absolute index of the first item shown.
    start: usize,
    /// Item text budget.
    budget: usize,
    /// The streamed item's index and its published form.
    streaming: Option<(usize, Clipped)>,
}

impl Window {
    /// The window over `view` with the default limits.
    pub(crate) fn new(view: &TranscriptView<'_>) -> Result<Self, MapError> {
        Self::with_limits(view, DEFAULT_TRANSCRIPT_WINDOW, MAX_PUBLISHED_ITEM_BYTES)
    }

    /// The window over `view` showing `size` items of at most `budget` text bytes each.
    pub(crate) fn with_limits(
        view: &TranscriptView<'_>,
        size: usize,
        budget: usize,
    ) -> Result<Self, MapError> {
        let size = size.max(1);
        let mut w = Self {
            size,
            start: view.len().saturating_sub(size),
            budget,
            streaming: None,
        };
        // A response already streaming (the session was opened mid-turn) is tracked from
        // here on.
        if let Some(last) = view.len().checked_sub(1)
            && let Some(item) = view.item(last)
            && is_streaming(&item)
        {
            w.streaming = Some((last, published_item(&item, budget)?));
        }
        Ok(w)
    }

    /// The published `state` value of `view`.
    pub(crate) fn state_value(&self, view: &TranscriptView<'_>) -> Result<Value, MapError> {
        let transcript = (self.start..view.len())
            .map(|i| self.item_value(view, i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut m = Map::with_capacity(11);
        m.insert("confinement", confinement_value(view.confinement()));
        m.insert("phase", Value::from(phase_text(view.phase())));
        m.insert("model", Value::from(model_text(view.model()).as_str()));
        m.insert("thinkingLevel", Value::from(view.thinking_level().as_str()));
        m.insert("transcript", Value::Array(transcript));
        m.insert("queuedSteer", strings(view.queued_steer()));
        m.insert("turnId", view.turn_id().map_or(Value::Null, Value::from));
        m.insert("followUps", follow_ups_value(view.follow_ups()));
        m.insert("attached", attached_value(view.attached()));
        m.insert("compaction", compaction_value(view.compaction()));
        if self.start > 0 {
            m.insert("transcriptStart", count_value(self.start));
        }
        Ok(Value::Map(m))
    }

    /// Item `index` of `view` as published.
    pub(crate) fn item_value(
        &self,
        view: &TranscriptView<'_>,
        index: usize,
    ) -> Result<Value, MapError> {
        match &self.streaming {
            Some((i, c)) if *i == index => Ok(c.value.clone()),
            _ => {
                let item = view
                    .item(index)
                    .ok_or(MapError::Shape("item index out of range"))?;
                Ok(published_item(&item, self.budget)?.value)
            }
        }
    }

    /// The ops that apply `change` (already applied to `view`) to the published state.
    pub(crate) fn ops(
        &mut self,
        change: Change<'_>,
        view: &TranscriptView<'_>,
    ) -> Result<Vec<Op>, MapError> {
        let set = |k: &str, value: Value| Op::Set {
            path: vec![key(k)],
            value,
        };
        Ok(match change {
            Change::Phase(p) => vec![set("phase", Value::from(phase_text(p)))],
            Change::Model(m) => vec![set("model", Value::from(model_text(m).as_str()))],
            Change::ThinkingLevel(t) => vec![set("thinkingLevel", Value::from(t.as_str()))],
            Change::QueuedSteer(q) => vec![set("queuedSteer", strings(q))],
            Change::TurnId(t) => vec![set("turnId", t.map_or(Value::Null, Value::from))],
            Change::FollowUps(f) => vec![set("followUps", follow_ups_value(f))],
            Change::Attached(a) => vec![set("attached", attached_value(a))],
            Change::Compaction(c) => vec![set("compaction", compaction_value(c))],
            Change::ItemAdded { index: i } => self.added(view, i)?,
            Change::ItemReplaced { index: i, old } => {
                let before = match self.streaming.take() {
                    Some((s, c)) if s == i => c,
                    other => {
                        self.streaming = other;
                        published_item(&ItemRef::from(old), self.budget)?
                    }
                };
                if i < self.start {
                    return Ok(Vec::new());
                }
                let item = view
                    .item(i)
                    .ok_or(MapError::Shape("replaced item out of range"))?;
                let after = published_item(&item, self.budget)?;
                let prefix = vec![key("transcript"), index(i - self.start)];
                diff(&before.value, &after.value)
                    .into_iter()
                    .map(|op| prefixed(&prefix, op))
                    .collect()
            }
            Change::BlockAdded {
                index: i,
                content_index,
            } => self.block_added(view, i, content_index)?,
            Change::TextAppended {
                index: i,
                content_index,
                delta,
            } => self.appended(view, i, content_index, "text", delta)?,
            Change::ThinkingAppended {
                index: i,
                content_index,
                delta,
            } => self.appended(view, i, content_index, "thinking", delta)?,
        })
    }

    fn added(&mut self, view: &TranscriptView<'_>, i: usize) -> Result<Vec<Op>, MapError> {
        let item = view
            .item(i)
            .ok_or(MapError::Shape("added item out of range"))?;
        let published = published_item(&item, self.budget)?;
        let at = i
            .checked_sub(self.start)
            .ok_or(MapError::Shape("added item before the window"))?;
        let mut ops = vec![Op::Splice {
            path: vec![key("transcript")],
            index: u64_of(at),
            remove: 0,
            items: vec![published.value.clone()],
        }];
        if is_streaming(&item) {
            self.streaming = Some((i, published));
        }
        let shown = view.len() - self.start;
        if shown > self.size {
            // Slide: drop the oldest items from the front.
            let drop = shown - self.size;
            self.start += drop;
            ops.push(Op::Splice {
                path: vec![key("transcript")],
                index: 0,
                remove: u64_of(drop),
                items: Vec::new(),
            });
            ops.push(Op::Set {
                path: vec![key("transcriptStart")],
                value: count_value(self.start),
            });
            if self
                .streaming
                .as_ref()
                .is_some_and(|(s, _)| *s < self.start)
            {
                self.streaming = None;
            }
        }
        Ok(ops)
    }

    fn block_added(
        &mut self,
        view: &TranscriptView<'_>,
        i: usize,
        content_index: usize,
    ) -> Result<Vec<Op>, MapError> {
        if i < self.start {
            return Ok(Vec::new());
        }
        let rel = i - self.start;
        let Some((s, cached)) = &mut self.streaming else {
            return Err(MapError::Shape("block added to an item not streaming"));
        };
        if *s != i {
            return Err(MapError::Shape("block added to an item not streaming"));
        }
        if cached.cut.is_empty() {
            let item = view.item(i).ok_or(MapError::Shape("item out of range"))?;
            let BodyRef::Assistant { content, .. } = item.body else {
                return Err(MapError::Shape("block added to a non-assistant item"));
            };
            let block = content
                .get(content_index)
                .ok_or(MapError::Shape("block index out of range"))?;
            let left = self.budget.saturating_sub(cached.used);
            let b = to_clipped_value(block, left)?;
            if b.cut.is_empty() {
                let local = Op::Splice {
                    path: vec![key("content")],
                    index: u64_of(content_index),
                    remove: 0,
                    items: vec![b.value],
                };
                apply(&mut cached.value, std::slice::from_ref(&local))
                    .map_err(|_| MapError::Shape("block splice does not apply"))?;
                cached.used += b.used;
                return Ok(vec![prefixed(&vec![key("transcript"), index(rel)], local)]);
            }
        }
        self.restream(view, i)
    }

    fn appended(
        &mut self,
        view: &TranscriptView<'_>,
        i: usize,
        content_index: usize,
        field: &str,
        delta: &str,
    ) -> Result<Vec<Op>, MapError> {
        if delta.is_empty() || i < self.start {
            return Ok(Vec::new());
        }
        let rel = i - self.start;
        let Some((s, cached)) = &mut self.streaming else {
            return Err(MapError::Shape("text appended to an item not streaming"));
        };
        if *s != i {
            return Err(MapError::Shape("text appended to an item not streaming"));
        }
        let local_path = vec![key("content"), index(content_index), key(field)];
        if cached.cut.contains(&local_path) {
            // Already cut: the budget was spent on this string, so nothing published moves.
            return Ok(Vec::new());
        }
        if cached.cut.is_empty() && cached.used + delta.len() <= self.budget {
            let local = Op::Append {
                path: local_path,
                text: delta.to_owned(),
            };
            apply(&mut cached.value, std::slice::from_ref(&local))
                .map_err(|_| MapError::Shape("append does not apply"))?;
            cached.used += delta.len();
            return Ok(vec![prefixed(&vec![key("transcript"), index(rel)], local)]);
        }
        self.restream(view, i)
    }

    /// Re-reads the streamed item (the text crossed the budget) and diffs it against its
    /// published form: a few times per item at most, never per token.
    fn restream(&mut self, view: &TranscriptView<'_>, i: usize) -> Result<Vec<Op>, MapError> {
        let item = view.item(i).ok_or(MapError::Shape("item out of range"))?;
        let after = published_item(&item, self.budget)?;
        let Some((_, before)) = self.streaming.replace((i, after)) else {
            return Err(MapError::Shape("no streamed item"));
        };
        let after = &self.streaming.as_ref().map(|(_, c)| &c.value);
        let Some(after) = after else {
            return Err(MapError::Shape("no streamed item"));
        };
        let prefix = vec![key("transcript"), index(i - self.start)];
        Ok(diff(&before.value, after)
            .into_iter()
            .map(|op| prefixed(&prefix, op))
            .collect())
    }
}

fn is_streaming(item: &ItemRef<'_>) -> bool {
    matches!(
        item.body,
        BodyRef::Assistant {
            status: crate::session::AssistantStatus::Streaming,
            ..
        }
    )
}

/// `op` (relative to a sub-value) re-rooted at `prefix` (non-empty).
fn prefixed(prefix: &Path, op: Op) -> Op {
    let join = |path: Path| -> Path { prefix.iter().cloned().chain(path).collect() };
    match op {
        Op::Replace(value) => Op::Set {
            path: prefix.clone(),
            value,
        },
        Op::Set { path, value } => Op::Set {
            path: join(path),
            value,
        },
        Op::Delete { path } => Op::Delete { path: join(path) },
        Op::Append { path, text } => Op::Append {
            path: join(path),
            text,
        },
        Op::Truncate { path, count } => Op::Truncate {
            path: join(path),
            count,
        },
        Op::Splice {
            path,
            index,
            remove,
            items,
        } => Op::Splice {
            path: join(path),
            index,
            remove,
            items,
        },
        Op::Permute { path, permutation } => Op::Permute {
            path: join(path),
            permutation,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, LazyLock};

    use super::*;
    use crate::message::{
        AgentMessage, AssistantContent, AssistantMessage, StopReason, TextContent, Usage,
        UserMessage,
    };
    use crate::model_ref::ThinkingLevel;
    use crate::session::{Activity, Transcript};
    use crate::session::{ItemBody, TranscriptItem};

    /// A transcript, the window over it, and the value a subscriber holds.
    struct Harness {
        t: Transcript,
        model: ModelRef,
        window: Window,
        value: Value,
        ops: Vec<Op>,
    }

    static IDLE: LazyLock<Activity> = LazyLock::new(|| Activity::new(true));

    static CONFINED: LazyLock<ToolConfinement> = LazyLock::new(|| ToolConfinement {
        active: true,
        detail: "landlock (ABI 7)".into(),
    });

    fn view<'a>(t: &'a Transcript, model: &'a ModelRef) -> TranscriptView<'a> {
        TranscriptView {
            transcript: t,
            phase: Phase::Idle,
            model,
            thinking: ThinkingLevel::Off,
            queued_steer: &[],
            confinement: &CONFINED,
            activity: &IDLE,
        }
    }

    impl Harness {
        fn new(size: usize, budget: usize) -> Self {
            let t = Transcript::default();
            let model = ModelRef::new("scripted", "default");
            let window = Window::with_limits(&view(&t, &model), size, budget).unwrap();
            let value = window.state_value(&view(&t, &model)).unwrap();
            Self {
                t,
                model,
                window,
                value,
                ops: Vec::new(),
            }
        }

        /// Maps `change` (already applied to the transcript), applies the ops to the
        /// subscriber's value and checks it equals a fresh snapshot. Returns the ops.
        fn check(&mut self, change: Change<'_>) -> Vec<Op> {
            let v = view(&self.t, &self.model);
            let ops = self.window.ops(change, &v).unwrap();
            apply(&mut self.value, &ops).unwrap();
            assert_eq!(
                self.value,
                self.window.state_value(&v).unwrap(),
                "after {change:?}"
            );
            self.ops.extend(ops.iter().cloned());
            ops
        }

        fn user(&mut self, id: &str, text: &str) -> Vec<Op> {
            let m = Arc::new(AgentMessage::User(UserMessage::text(text, 1)));
            let index = self.t.push_settled(id.into(), m);
            self.check(Change::ItemAdded { index })
        }

        fn stream(&mut self, id: &str) {
            let index = self.t.start_stream(id.into(), partial());
            self.check(Change::ItemAdded { index });
            let (index, p) = self.t.stream_mut().unwrap();
            p.content.push(AssistantContent::Text(TextContent::new("")));
            self.check(Change::BlockAdded {
                index,
                content_index: 0,
            });
        }

        fn append(&mut self, delta: &str) -> Vec<Op> {
            let (index, p) = self.t.stream_mut().unwrap();
            if let Some(AssistantContent::Text(t)) = p.content.get_mut(0) {
                t.text.push_str(delta);
            }
            self.check(Change::TextAppended {
                index,
                content_index: 0,
                delta,
            })
        }

        fn settle(&mut self, usage: Usage, stop: StopReason, error: Option<&str>) -> Vec<Op> {
            let (_, p) = self.t.stream_mut().unwrap();
            let mut settled = p.clone();
            settled.usage = usage;
            settled.stop_reason = stop;
            settled.error_message = error.map(str::to_owned);
            let (index, old) = self
                .t
                .settle_stream(Arc::new(AgentMessage::Assistant(settled)))
                .unwrap();
            self.check(Change::ItemReplaced { index, old: &old })
        }
    }

    fn partial() -> AssistantMessage {
        AssistantMessage {
            content: Vec::new(),
            api: "scripted".into(),
            provider: "scripted".into(),
            model: "default".into(),
            response_model: None,
            response_id: None,
            usage: Usage::default(),
            stop_reason: StopReason::Stop,
            error_message: None,
            raw_stop_reason: None,
            timestamp: 5,
        }
    }

    fn usage() -> Usage {
        Usage {
            input: 1,
            output: 2,
            total_tokens: 3,
            ..Usage::default()
        }
    }

    fn json(ops: &[Op]) -> Vec<String> {
        ops.iter().map(|o| o.to_value().to_json()).collect()
    }

    #[test]
    fn streamed_text_maps_to_appends_and_settling_does_not_resend_it() {
        let mut h = Harness::new(128, 1 << 16);
        h.stream("00000003");
        assert_eq!(
            json(&h.append("Hello ")),
            [r#"["a",["transcript",0,"content",0,"text"],"Hello "]"#]
        );
        h.append("there");
        // Settling changed status, stopReason and usage, never the text.
        assert_eq!(
            json(&h.settle(usage(), StopReason::Stop, None)),
            [
                r#"["s",["transcript",0,"status"],"complete"]"#,
                r#"["s",["transcript",0,"usage","input"],1]"#,
                r#"["s",["transcript",0,"usage","output"],2]"#,
                r#"["s",["transcript",0,"usage","totalTokens"],3]"#,
                r#"["s",["transcript",0,"stopReason"],"stop"]"#,
            ]
        );
    }

    #[test]
    fn confinement_is_a_static_field_no_change_sends_again() {
        let mut h = Harness::new(2, 1 << 16);
        let keys: Vec<&str> = h.value.as_map().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "confinement",
                "phase",
                "model",
                "thinkingLevel",
                "transcript",
                "queuedSteer",
                "turnId",
                "followUps",
                "attached",
                "compaction"
            ]
        );
        assert_eq!(
            h.value
                .as_map()
                .unwrap()
                .get("confinement")
                .unwrap()
                .to_json(),
            r#"{"active":true,"detail":"landlock (ABI 7)"}"#
        );
        // Stream, settle and slide the window: every op addresses something else.
        h.user("00000001", "one");
        h.stream("00000002");
        h.append("Hello");
        h.settle(usage(), StopReason::Stop, None);
        h.user("00000003", "three");
        let ops = json(&h.ops);
        assert!(ops.iter().all(|op| !op.contains("confinement")), "{ops:?}");
        let keys: Vec<&str> = h.value.as_map().unwrap().keys().collect();
        assert_eq!(keys[0], "confinement");
        assert_eq!(keys.last(), Some(&"transcriptStart"));
    }

    #[test]
    fn a_failed_response_sets_its_error_last() {
        let mut h = Harness::new(128, 1 << 16);
        h.stream("00000003");
        h.append("Hello there");
        assert_eq!(
            json(&h.settle(usage(), StopReason::Error, Some("boom"))),
            [
                r#"["s",["transcript",0,"status"],"error"]"#,
                r#"["s",["transcript",0,"usage","input"],1]"#,
                r#"["s",["transcript",0,"usage","output"],2]"#,
                r#"["s",["transcript",0,"usage","totalTokens"],3]"#,
                r#"["s",["transcript",0,"stopReason"],"error"]"#,
                r#"["s",["transcript",0,"errorMessage"],"boom"]"#,
            ]
        );
    }

    #[test]
    fn the_window_slides_with_splices_and_says_where_it_starts() {
        let mut h = Harness::new(3, 1 << 16);
        for i in 0..3 {
            h.user(&format!("u{i}"), "hi");
        }
        assert!(h.value.as_map().unwrap().get("transcriptStart").is_none());
        let ops = h.user("u3", "hi");
        assert_eq!(
            json(&ops)[1..],
            [
                r#"["p",["transcript"],0,1,[]]"#.to_owned(),
                r#"["s",["transcriptStart"],1]"#.to_owned(),
            ]
        );
        h.user("u4", "hi");
        let transcript = h.value.as_map().unwrap().get("transcript").unwrap();
        assert_eq!(transcript.as_array().unwrap().len(), 3);
        // Streaming into a slid window addresses the item by its window position.
        h.stream("a5");
        assert_eq!(
            json(&h.append("x")),
            [r#"["a",["transcript",2,"content",0,"text"],"x"]"#]
        );
    }

    #[test]
    fn a_long_reply_is_published_cut_at_the_item_budget_and_then_stops_moving() {
        let mut h = Harness::new(128, 1000);
        h.stream("00000003");
        let mut quiet = 0;
        for _ in 0..300 {
            if h.append("0123456789").is_empty() {
                quiet += 1;
            }
        }
        let item = &h
            .value
            .as_map()
            .unwrap()
            .get("transcript")
            .unwrap()
            .as_array()
            .unwrap()[0];
        let text = item
            .as_map()
            .unwrap()
            .get("content")
            .unwrap()
            .as_array()
            .unwrap()[0]
            .as_map()
            .unwrap()
            .get("text")
            .unwrap()
            .as_str()
            .unwrap()
            .len();
        assert!(text < 1000, "published {text} bytes");
        assert_eq!(
            item.as_map()
                .unwrap()
                .get("clipped")
                .map(Value::to_json)
                .as_deref(),
            Some(r#"[["content",0,"text"]]"#)
        );
        // Once cut, further tokens publish nothing.
        assert!(quiet > 200, "{quiet} quiet tokens");
        h.settle(usage(), StopReason::Stop, None);
    }

    #[test]
    fn settings_and_steering_map_to_sets() {
        let mut h = Harness::new(128, 1 << 16);
        let m = ModelRef::new("openai", "m/x");
        let steer = vec!["go on".to_owned()];
        let v = view(&h.t, &h.model);
        let ops: Vec<String> = [
            Change::Model(&m),
            Change::ThinkingLevel(ThinkingLevel::High),
            Change::QueuedSteer(&steer),
        ]
        .into_iter()
        .flat_map(|c| json(&h.window.ops(c, &v).unwrap()))
        .collect();
        assert_eq!(
            ops,
            vec![
                r#"["s",["model"],"openai/m/x"]"#,
                r#"["s",["thinkingLevel"],"high"]"#,
                r#"["s",["queuedSteer"],["go on"]]"#,
            ]
        );
    }

    #[test]
    fn bash_records_are_published_complete() {
        let bash: TranscriptItem = serde_json::from_str(
            r#"{"id":"00000009","role":"bashExecution","command":"ls","output":"a","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1}"#,
        )
        .unwrap();
        assert!(matches!(bash.body, ItemBody::BashExecution(_)));
        let v = published_item(&ItemRef::from(&bash), 1 << 16)
            .unwrap()
            .value;
        assert_eq!(
            v.as_map().unwrap().get("status").and_then(Value::as_str),
            Some("complete")
        );
    }

    #[test]
    fn borrowed_items_serialise_like_owned_ones() {
        for json in [
            r#"{"id":"1","role":"user","content":[{"type":"text","text":"hi"}],"timestamp":1}"#,
            r#"{"id":"2","role":"assistant","status":"complete","content":[{"type":"text","text":"a"}],"provider":"p","model":"m","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0.0,"output":0.0,"cacheRead":0.0,"cacheWrite":0.0,"total":0.0}},"timestamp":5,"stopReason":"stop"}"#,
            r#"{"id":"4","role":"tool","status":"complete","toolCallId":"c1","toolName":"bash","arguments":{"command":"ls"},"content":[{"type":"text","text":"a"}],"isError":false,"timestamp":6,"details":{"exitCode":0}}"#,
            r#"{"id":"9","role":"bashExecution","command":"ls","output":"a","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1}"#,
        ] {
            let item: TranscriptItem = serde_json::from_str(json).unwrap();
            assert_eq!(
                to_protocol_value(&ItemRef::from(&item)).unwrap(),
                to_protocol_value(&item).unwrap()
            );
        }
    }

    #[test]
    fn model_text_round_trips() {
        let m = ModelRef::new("openai", "org/model");
        assert_eq!(parse_model(&model_text(&m)), Some(m));
        assert_eq!(parse_model("nomodel"), None);
        assert_eq!(parse_model("/x"), None);
    }
}
