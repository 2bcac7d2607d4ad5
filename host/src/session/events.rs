//! How a session tells the world about its changes: numbered changes, delivered under the
//! session lock to observers (synchronously, borrowing the transcript) and to event
//! subscribers (a bounded broadcast of owned [`SessionEvent`]s).
//!
//! Observers are what the service adapter uses: it turns each change into chord ops on the
//! spot, reading the items it needs from the one transcript, so it keeps no copy of the
//! state and can never fall behind (there is no queue between the runtime and it). The
//! broadcast is for in-process subscribers; its events own their items, so they are built
//! only while someone listens.

use std::fmt;
use std::sync::Arc;

use tokio::sync::broadcast;

use super::activity::{AttachedClient, CompactionStatus, FollowUp};
use super::transcript::TranscriptView;
use super::view::{Phase, SessionEvent, SessionEventKind, TranscriptItem};
use crate::message::AssistantContent;
use crate::model_ref::{ModelRef, ThinkingLevel};

/// One change, borrowed from the session state it was applied to.
///
/// Indices are positions in the whole transcript ([`TranscriptView::item`]).
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    /// `phase` changed.
    Phase(Phase),
    /// `model` changed.
    Model(&'a ModelRef),
    /// `thinkingLevel` changed.
    ThinkingLevel(ThinkingLevel),
    /// `queuedSteer` is now this.
    QueuedSteer(&'a [String]),
    /// `turnId` is now this (`None`: no turn runs).
    TurnId(Option<&'a str>),
    /// `followUps` is now this.
    FollowUps(&'a [FollowUp]),
    /// `attached` is now this.
    Attached(&'a [AttachedClient]),
    /// `compaction` is now this.
    Compaction(CompactionStatus),
    /// Item `index` was appended.
    ItemAdded {
        /// Position (the last item).
        index: usize,
    },
    /// Item `index` was replaced (a response settled, a tool finished).
    ItemReplaced {
        /// Position.
        index: usize,
        /// The item as it was.
        old: &'a TranscriptItem,
    },
    /// Block `content_index` was added to item `index`.
    BlockAdded {
        /// Item position.
        index: usize,
        /// Block position.
        content_index: usize,
    },
    /// Text appended to block `content_index` of item `index`.
    TextAppended {
        /// Item position.
        index: usize,
        /// Block position.
        content_index: usize,
        /// Appended text.
        delta: &'a str,
    },
    /// Thinking appended to block `content_index` of item `index`.
    ThinkingAppended {
        /// Item position.
        index: usize,
        /// Block position.
        content_index: usize,
        /// Appended text.
        delta: &'a str,
    },
}

impl Change<'_> {
    /// The owned event for `view` (the state after the change).
    fn to_kind(self, view: &TranscriptView<'_>) -> Option<SessionEventKind> {
        let item = |index: usize| view.item(index).map(|i| i.to_owned_item());
        Some(match self {
            Self::Phase(p) => SessionEventKind::Phase(p),
            Self::Model(m) => SessionEventKind::Model(m.clone()),
            Self::ThinkingLevel(t) => SessionEventKind::ThinkingLevel(t),
            Self::QueuedSteer(q) => SessionEventKind::QueuedSteer(q.to_vec()),
            Self::TurnId(t) => SessionEventKind::TurnId(t.map(str::to_owned)),
            Self::FollowUps(f) => SessionEventKind::FollowUps(f.to_vec()),
            Self::Attached(a) => SessionEventKind::Attached(a.to_vec()),
            Self::Compaction(c) => SessionEventKind::Compaction(c),
            Self::ItemAdded { index } => SessionEventKind::ItemAdded { item: item(index)? },
            Self::ItemReplaced { index, .. } => SessionEventKind::ItemReplaced {
                index,
                item: item(index)?,
            },
            Self::BlockAdded {
                index,
                content_index,
            } => {
                let block: AssistantContent = match view.item(index)?.body {
                    super::view::BodyRef::Assistant { content, .. } => {
                        content.get(content_index)?.clone()
                    }
                    _ => return None,
                };
                SessionEventKind::BlockAdded {
                    index,
                    content_index,
                    block,
                }
            }
            Self::TextAppended {
                index,
                content_index,
                delta,
            } => SessionEventKind::TextAppended {
                index,
                content_index,
                delta: delta.to_owned(),
            },
            Self::ThinkingAppended {
                index,
                content_index,
                delta,
            } => SessionEventKind::ThinkingAppended {
                index,
                content_index,
                delta: delta.to_owned(),
            },
        })
    }
}

/// Told about every change of a session, in order, under the session lock.
///
/// Implementations must be quick and must not call back into the session (its lock is
/// held); they may take locks of their own that are never held while calling the session.
pub trait SessionObserver: Send + Sync + fmt::Debug {
    /// Change number `seq` was applied; `view` is the state after it.
    fn on_change(&self, seq: u64, change: Change<'_>, view: &TranscriptView<'_>);
}

/// Names a registered observer, to remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObserverId(u64);

/// The observers and subscribers of one session, with its change counter.
#[derive(Debug)]
pub(crate) struct Outlets {
    seq: u64,
    next_observer: u64,
    observers: Vec<(ObserverId, Arc<dyn SessionObserver>)>,
    events: broadcast::Sender<SessionEvent>,
}

impl Outlets {
    pub(crate) fn new(capacity: usize) -> Self {
        let (events, _) = broadcast::channel(capacity.max(1));
        Self {
            seq: 0,
            next_observer: 0,
            observers: Vec::new(),
            events,
        }
    }

    /// The number of the last change.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// A receiver of every later event.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        self.events.subscribe()
    }

    pub(crate) fn add(&mut self, observer: Arc<dyn SessionObserver>) -> ObserverId {
        self.next_observer += 1;
        let id = ObserverId(self.next_observer);
        self.observers.push((id, observer));
        id
    }

    pub(crate) fn remove(&mut self, id: ObserverId) {
        self.observers.retain(|(i, _)| *i != id);
    }

    /// Numbers `change` and delivers it.
    pub(crate) fn emit(&mut self, change: Change<'_>, view: &TranscriptView<'_>) {
        self.seq += 1;
        for (_, o) in &self.observers {
            o.on_change(self.seq, change, view);
        }
        // Owned events cost a copy of what changed: only build them for listeners.
        if self.events.receiver_count() > 0
            && let Some(kind) = change.to_kind(view)
        {
            let _ = self.events.send(SessionEvent {
                seq: self.seq,
                kind,
            });
        }
    }
}
