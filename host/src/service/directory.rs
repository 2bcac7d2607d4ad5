//! `pi.session-directory`: every session on disk, with the live phase and attached-client
//! count of the hosted ones, published as diffs of the whole list (it changes a few times
//! per turn at most, and is small).

use std::sync::{Mutex, MutexGuard, PoisonError};

use baton_protocol::Value;
use baton_protocol::chord::diff;
use baton_server::chord::SubscriptionSnapshot;
use baton_server::{Publisher, ServiceError};

use super::publish::{Owner, Subscribers, snapshot};
use super::wire::{meta_value, phase_text};
use crate::session::SessionMeta;

/// The directory service id.
pub(crate) const SERVICE: &str = "pi.session-directory";
/// Its methods.
pub(crate) const METHODS: &[&str] = &["list"];
/// Its state member.
pub(crate) const MEMBER: &str = "sessions";
/// Shortest session-id prefix `attach` accepts.
pub(crate) const MIN_PREFIX: usize = 8;

#[derive(Debug)]
struct Entry {
    meta: SessionMeta,
    /// Hosted by the server (a handle is open).
    open: bool,
    attached: usize,
    /// Being removed: no longer resolvable.
    removing: bool,
}

#[derive(Debug)]
struct Inner {
    entries: Vec<Entry>,
    value: Value,
    sequence: u64,
    subscribers: Subscribers,
}

/// The directory of a host.
#[derive(Debug)]
pub(crate) struct Directory {
    inner: Mutex<Inner>,
}

impl Directory {
    /// A directory of `metas`.
    pub(crate) fn new(metas: Vec<SessionMeta>) -> Self {
        let entries = metas
            .into_iter()
            .map(|meta| Entry {
                meta,
                open: false,
                attached: 0,
                removing: false,
            })
            .collect();
        let mut inner = Inner {
            entries,
            value: Value::Array(Vec::new()),
            sequence: 0,
            subscribers: Subscribers::default(),
        };
        inner.value = inner.render();
        Self {
            inner: Mutex::new(inner),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The canonical id for `id_or_prefix`: an exact id, or a unique prefix of at least
    /// [`MIN_PREFIX`] characters.
    pub(crate) fn resolve(&self, id_or_prefix: &str) -> Result<String, ServiceError> {
        let inner = self.lock();
        let live = || inner.entries.iter().filter(|e| !e.removing);
        if let Some(e) = live().find(|e| e.meta.id == id_or_prefix) {
            return Ok(e.meta.id.clone());
        }
        if id_or_prefix.len() < MIN_PREFIX {
            return Err(ServiceError::session_not_found());
        }
        let mut matches = live().filter(|e| e.meta.id.starts_with(id_or_prefix));
        match (matches.next(), matches.next()) {
            (Some(e), None) => Ok(e.meta.id.clone()),
            (None, _) => Err(ServiceError::session_not_found()),
            (Some(_), Some(_)) => Err(ServiceError::session_ambiguous()),
        }
    }

    /// The current list.
    pub(crate) fn value(&self) -> Value {
        self.lock().value.clone()
    }

    /// Registers a subscriber and returns its snapshot.
    pub(crate) fn subscribe(
        &self,
        owner: Owner,
        id: String,
        publisher: Publisher,
    ) -> SubscriptionSnapshot {
        let mut inner = self.lock();
        inner.subscribers.add(owner, id, publisher);
        inner.snapshot()
    }

    /// Forgets one subscriber.
    pub(crate) fn unsubscribe(&self, owner: Owner, id: &str) {
        self.lock().subscribers.remove(owner, id);
    }

    /// Forgets every subscriber of `owner`.
    pub(crate) fn drop_owner(&self, owner: Owner) {
        self.lock().subscribers.remove_owner(owner);
    }

    /// Adds a session or refreshes its metadata.
    pub(crate) fn upsert(&self, meta: SessionMeta) {
        self.change(|entries| {
            if let Some(e) = entries.iter_mut().find(|e| e.meta.id == meta.id) {
                e.meta = meta;
            } else {
                entries.push(Entry {
                    meta,
                    open: false,
                    attached: 0,
                    removing: false,
                });
            }
        });
    }

    /// Marks a session hosted (its handle opened) or not.
    pub(crate) fn set_open(&self, id: &str, open: bool) {
        self.with_entry(id, |e| {
            e.open = open;
            if !open {
                e.attached = 0;
            }
        });
    }

    /// One more (`true`) or one fewer attached client.
    pub(crate) fn attached(&self, id: &str, more: bool) {
        self.with_entry(id, |e| {
            e.attached = if more {
                e.attached + 1
            } else {
                e.attached.saturating_sub(1)
            };
        });
    }

    /// Hides a session from [`Directory::resolve`] while it is being removed (or shows it
    /// again when the removal failed).
    pub(crate) fn set_removing(&self, id: &str, removing: bool) {
        self.with_entry(id, |e| e.removing = removing);
    }

    /// Forgets a removed session.
    pub(crate) fn remove(&self, id: &str) {
        self.change(|entries| entries.retain(|e| e.meta.id != id));
    }

    fn with_entry(&self, id: &str, f: impl FnOnce(&mut Entry)) {
        self.change(|entries| {
            if let Some(e) = entries.iter_mut().find(|e| e.meta.id == id) {
                f(e);
            }
        });
    }

    /// Applies `f`, then publishes the difference (if any) to every subscriber.
    fn change(&self, f: impl FnOnce(&mut Vec<Entry>)) {
        let mut inner = self.lock();
        f(&mut inner.entries);
        let new = inner.render();
        let ops = diff(&inner.value, &new);
        if ops.is_empty() {
            return;
        }
        inner.value = new;
        inner.sequence += 1;
        let Inner {
            value,
            sequence,
            subscribers,
            ..
        } = &mut *inner;
        let (value, sequence) = (&*value, *sequence);
        subscribers.publish(MEMBER, sequence, ops, &|| {
            snapshot(SERVICE, METHODS, vec![(MEMBER, sequence, value.clone())])
        });
    }
}

impl Inner {
    /// The published list: newest first (then by id).
    fn render(&self) -> Value {
        let mut order: Vec<&Entry> = self.entries.iter().collect();
        order.sort_by(|a, b| {
            b.meta
                .updated_at
                .cmp(&a.meta.updated_at)
                .then_with(|| a.meta.id.cmp(&b.meta.id))
        });
        Value::Array(
            order
                .into_iter()
                .map(|e| {
                    let phase = if e.open {
                        phase_text(e.meta.phase)
                    } else {
                        "closed"
                    };
                    meta_value(&e.meta, phase, e.attached)
                })
                .collect(),
        )
    }

    fn snapshot(&self) -> SubscriptionSnapshot {
        snapshot(
            SERVICE,
            METHODS,
            vec![(MEMBER, self.sequence, self.value.clone())],
        )
    }
}
