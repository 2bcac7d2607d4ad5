//! The projected conversation a provider reads ([`ModelContext`]): shared with the
//! transcript, cheap to clone, iterated as borrowed [`MessageRef`]s.

use std::fmt;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::message::{AgentMessage, Message, MessageRef};

/// One projected message.
#[derive(Debug, Clone)]
pub(super) enum Entry {
    /// A `user`, `assistant` or `toolResult` message of the transcript, passed through: the
    /// transcript's own allocation (the projector builds it for those three roles only).
    Shared(Arc<AgentMessage>),
    /// A message the projection made: bash text, custom content, a summary, a synthetic
    /// tool result.
    Derived(Arc<Message>),
}

impl Entry {
    pub(super) fn derived(message: Message) -> Self {
        Self::Derived(Arc::new(message))
    }

    fn get(&self) -> MessageRef<'_> {
        match self {
            Self::Derived(m) => m.to_ref(),
            Self::Shared(m) => match &**m {
                AgentMessage::User(u) => MessageRef::User(u),
                AgentMessage::Assistant(a) => MessageRef::Assistant(a),
                AgentMessage::ToolResult(r) => MessageRef::ToolResult(r),
                // The projector shares only user, assistant and tool result messages.
                _ => unreachable!("a shared context entry holds a model-role message"),
            },
        }
    }
}

/// The projected conversation of one model call ([`crate::provider::ModelRequest::messages`]).
///
/// **How providers read it:** iterate, and match on the borrowed message:
///
/// ```
/// # use baton_host::message::{Message, MessageRef, UserMessage};
/// # use baton_host::projection::ModelContext;
/// # let context = ModelContext::from(vec![Message::User(UserMessage::text("hi", 1))]);
/// for message in &context {
///     match message {
///         MessageRef::User(u) => { /* u: &UserMessage */ }
///         MessageRef::Assistant(a) => { /* a: &AssistantMessage */ }
///         MessageRef::ToolResult(r) => { /* r: &ToolResultMessage */ }
///     }
/// }
/// # assert_eq!(context.len(), 1);
/// ```
///
/// `iter()` is double-ended and exact-size (`.rev()`, `.last()`, `len()` are O(1));
/// [`MessageRef::to_message`] or [`ModelContext::to_messages`] make owned copies where a
/// provider or test needs them. It serialises as a JSON array of messages, exactly like a
/// `Vec<Message>`.
///
/// Why a type and not a `Vec<Message>`: the session keeps this context up to date as
/// messages are appended ([`super::ContextProjector`]) and a model call takes a clone of it,
/// which is one reference count, however long the session. The user, assistant and tool
/// result messages in it are the transcript's own allocations (not copies); only messages
/// the projection makes (bash text, summaries, custom content, synthetic results) are
/// separate. Hold a request's context only for the call: while a provider still holds it,
/// the session's next append copies the entry list (one pointer per message).
#[derive(Clone, Default)]
pub struct ModelContext {
    entries: Arc<Vec<Entry>>,
}

impl ModelContext {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no messages.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The messages in order, borrowed.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    /// Message `index`, borrowed.
    pub fn get(&self, index: usize) -> Option<MessageRef<'_>> {
        self.entries.get(index).map(Entry::get)
    }

    /// The last message.
    pub fn last(&self) -> Option<MessageRef<'_>> {
        self.entries.last().map(Entry::get)
    }

    /// Owned copies of every message (O(n): for tests and providers that need ownership).
    pub fn to_messages(&self) -> Vec<Message> {
        self.iter().map(MessageRef::to_message).collect()
    }

    pub(super) fn push(&mut self, entry: Entry) {
        Arc::make_mut(&mut self.entries).push(entry);
    }

    /// Replaces entry `index` (a no-op when out of range).
    pub(super) fn set(&mut self, index: usize, entry: Entry) {
        if let Some(slot) = Arc::make_mut(&mut self.entries).get_mut(index) {
            *slot = entry;
        }
    }
}

impl From<Vec<Message>> for ModelContext {
    /// A context of already projected messages (they become the context's own copies).
    fn from(messages: Vec<Message>) -> Self {
        messages.into_iter().collect()
    }
}

impl FromIterator<Message> for ModelContext {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Self {
        Self {
            entries: Arc::new(iter.into_iter().map(Entry::derived).collect()),
        }
    }
}

impl<'a> IntoIterator for &'a ModelContext {
    type Item = MessageRef<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl PartialEq for ModelContext {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.entries, &other.entries)
            || (self.len() == other.len() && self.iter().eq(other.iter()))
    }
}

impl PartialEq<[Message]> for ModelContext {
    fn eq(&self, other: &[Message]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().map(Message::to_ref))
    }
}

impl PartialEq<Vec<Message>> for ModelContext {
    fn eq(&self, other: &Vec<Message>) -> bool {
        *self == **other
    }
}

impl fmt::Debug for ModelContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for ModelContext {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for m in self {
            seq.serialize_element(&m)?;
        }
        seq.end()
    }
}

/// Iterator over a [`ModelContext`]'s messages.
#[derive(Debug, Clone)]
pub struct Iter<'a>(std::slice::Iter<'a, Entry>);

impl<'a> Iterator for Iter<'a> {
    type Item = MessageRef<'a>;

    fn next(&mut self) -> Option<MessageRef<'a>> {
        self.0.next().map(Entry::get)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(Entry::get)
    }
}

impl ExactSizeIterator for Iter<'_> {}
