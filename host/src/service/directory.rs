//! `pi.session-directory`: every session on disk, with the live phase and attached-client
//! count of the hosted ones, published as diffs of the whole list (it changes a few times
//! per turn at most, and is small).
//!
//! It is also where the host's limits are counted, since every fact they need passes
//! through here: which sessions are open, how many clients each has, its phase (the pump
//! upserts every phase change), and who created it. An open session with no client and an
//! idle phase carries an *idle since* instant; the idle reaper (`super::idle`) reads those,
//! and [`Directory::idle_changed`] wakes it when one starts.
//!
//! Each caller sees only the sessions it may see (`super::access`): subscribers are grouped
//! by their [`Sight`], and each group has its own list, sequence and diffs. An invisible
//! session is never listed and does not resolve (`session_not_found`), so a prefix cannot
//! reveal it either.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use baton_protocol::Value;
use baton_protocol::chord::diff;
use baton_server::chord::SubscriptionSnapshot;
use baton_server::{Publisher, ServiceError};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::access::{Rights, Sight};
use super::errors::too_many_owned;
use super::publish::{Owner, Subscribers, snapshot};
use super::wire::{meta_value, phase_text};
use crate::session::{Phase, SessionMeta};

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
    /// Who created it (`super::limits::owner_key`), when this host created it.
    owner: Option<String>,
    /// Open, no attached client, phase idle: since when.
    idle_since: Option<Instant>,
}

impl Entry {
    fn new(meta: SessionMeta) -> Self {
        Self {
            meta,
            open: false,
            attached: 0,
            removing: false,
            owner: None,
            idle_since: None,
        }
    }

    fn is_idle(&self) -> bool {
        self.open && self.attached == 0 && self.meta.phase == Phase::Idle
    }
}

/// The subscribers that see the same sessions, and the list they were last sent.
#[derive(Debug)]
struct View {
    sight: Sight,
    value: Value,
    sequence: u64,
    subscribers: Subscribers,
    /// `(owner, subscription id)` of each subscriber, to know when the view is unused.
    members: HashSet<(Owner, String)>,
}

#[derive(Debug)]
struct Inner {
    entries: Vec<Entry>,
    /// The whole list (every session), for the host itself.
    value: Value,
    views: Vec<View>,
    /// Creates in progress, by owner (counted against the owner's limit).
    pending: HashMap<String, usize>,
}

/// The directory of a host.
#[derive(Debug)]
pub(crate) struct Directory {
    inner: Mutex<Inner>,
    /// Notified when a session becomes idle.
    idle: Notify,
}

/// A place for one more session of `owner`, held while it is created
/// ([`Directory::claim`]). Dropping it unused gives the place back.
#[derive(Debug)]
pub(crate) struct OwnerClaim<'a> {
    directory: &'a Directory,
    owner: String,
}

impl OwnerClaim<'_> {
    /// The session was created: list it, owned by the claimant.
    pub(crate) fn commit(self, meta: SessionMeta) {
        let owner = self.owner.clone();
        self.directory.change(|entries| {
            let i = match entries.iter().position(|e| e.meta.id == meta.id) {
                Some(i) => i,
                None => {
                    entries.push(Entry::new(meta.clone()));
                    entries.len() - 1
                }
            };
            entries[i].meta = meta;
            entries[i].owner = Some(owner);
        });
        // `Drop` gives the pending place back now that the entry counts instead.
    }
}

impl Drop for OwnerClaim<'_> {
    fn drop(&mut self) {
        let mut inner = self.directory.lock();
        if let Some(n) = inner.pending.get_mut(&self.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                inner.pending.remove(&self.owner);
            }
        }
    }
}

impl Directory {
    /// A directory of `metas`, owned by nobody known.
    #[cfg(test)]
    pub(crate) fn new(metas: Vec<SessionMeta>) -> Self {
        Self::with_owners(metas.into_iter().map(|m| (m, None)).collect())
    }

    /// A directory of sessions with their recorded owners.
    pub(crate) fn with_owners(sessions: Vec<(SessionMeta, Option<String>)>) -> Self {
        let entries = sessions
            .into_iter()
            .map(|(meta, owner)| Entry {
                owner,
                ..Entry::new(meta)
            })
            .collect();
        let mut inner = Inner {
            entries,
            value: Value::Array(Vec::new()),
            views: Vec::new(),
            pending: HashMap::new(),
        };
        inner.value = inner.render(&Sight::all());
        Self {
            inner: Mutex::new(inner),
            idle: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The canonical id for `id_or_prefix` among the sessions `rights` sees: an exact id, or
    /// a unique prefix of at least [`MIN_PREFIX`] characters.
    pub(crate) fn resolve(
        &self,
        id_or_prefix: &str,
        rights: &Rights,
    ) -> Result<String, ServiceError> {
        let inner = self.lock();
        let live = || {
            inner
                .entries
                .iter()
                .filter(|e| !e.removing && rights.sees(&e.meta.id, e.owner.as_deref()))
        };
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

    /// The whole list.
    pub(crate) fn value(&self) -> Value {
        self.lock().value.clone()
    }

    /// The list as `sight` sees it.
    pub(crate) fn value_for(&self, sight: &Sight) -> Value {
        self.lock().render(sight)
    }

    /// Who created session `id`, as recorded (`None`: unknown session or no owner).
    pub(crate) fn owner_of(&self, id: &str) -> Option<String> {
        self.lock()
            .entries
            .iter()
            .find(|e| e.meta.id == id)
            .and_then(|e| e.owner.clone())
    }

    /// Registers a subscriber that sees what `sight` sees and returns its snapshot.
    pub(crate) fn subscribe(
        &self,
        owner: Owner,
        id: String,
        publisher: Publisher,
        sight: Sight,
    ) -> SubscriptionSnapshot {
        let mut inner = self.lock();
        let i = match inner.views.iter().position(|v| v.sight == sight) {
            Some(i) => i,
            None => {
                let value = inner.render(&sight);
                inner.views.push(View {
                    sight,
                    value,
                    sequence: 0,
                    subscribers: Subscribers::default(),
                    members: HashSet::new(),
                });
                inner.views.len() - 1
            }
        };
        let view = &mut inner.views[i];
        view.members.insert((owner, id.clone()));
        view.subscribers.add(owner, id, publisher);
        view.snapshot()
    }

    /// Forgets one subscriber.
    pub(crate) fn unsubscribe(&self, owner: Owner, id: &str) {
        let mut inner = self.lock();
        for v in &mut inner.views {
            v.subscribers.remove(owner, id);
            v.members.remove(&(owner, id.to_owned()));
        }
        inner.views.retain(|v| !v.members.is_empty());
    }

    /// Forgets every subscriber of `owner`.
    pub(crate) fn drop_owner(&self, owner: Owner) {
        let mut inner = self.lock();
        for v in &mut inner.views {
            v.subscribers.remove_owner(owner);
            v.members.retain(|(o, _)| *o != owner);
        }
        inner.views.retain(|v| !v.members.is_empty());
    }

    /// Adds a session or refreshes its metadata.
    pub(crate) fn upsert(&self, meta: SessionMeta) {
        self.change(|entries| {
            if let Some(e) = entries.iter_mut().find(|e| e.meta.id == meta.id) {
                e.meta = meta;
            } else {
                entries.push(Entry::new(meta));
            }
        });
    }

    /// Reserves a place for one more session of `owner`, or answers `busy` when it owns
    /// `limit` already (sessions being created count).
    pub(crate) fn claim(
        &self,
        owner: String,
        limit: usize,
    ) -> Result<OwnerClaim<'_>, ServiceError> {
        let mut inner = self.lock();
        let owned = inner
            .entries
            .iter()
            .filter(|e| e.owner.as_deref() == Some(owner.as_str()))
            .count();
        let pending = inner.pending.get(&owner).copied().unwrap_or(0);
        if owned + pending >= limit {
            return Err(too_many_owned(limit));
        }
        *inner.pending.entry(owner.clone()).or_default() += 1;
        drop(inner);
        Ok(OwnerClaim {
            directory: self,
            owner,
        })
    }

    /// Whether `id` is open with no attached client and an idle phase, as far as the
    /// directory knows (the pump reports phase changes a moment after they happen).
    pub(crate) fn is_idle(&self, id: &str) -> bool {
        self.lock()
            .entries
            .iter()
            .any(|e| e.meta.id == id && e.is_idle())
    }

    /// The idle sessions, least recently used first.
    pub(crate) fn idle_order(&self) -> Vec<String> {
        let inner = self.lock();
        let mut idle: Vec<(Instant, &str)> = inner
            .entries
            .iter()
            .filter_map(|e| Some((e.idle_since?, e.meta.id.as_str())))
            .collect();
        idle.sort_unstable();
        idle.into_iter().map(|(_, id)| id.to_owned()).collect()
    }

    /// The sessions idle for `timeout` or longer at `now`, and when the next one will be.
    pub(crate) fn idle_due(
        &self,
        now: Instant,
        timeout: Duration,
    ) -> (Vec<String>, Option<Instant>) {
        let inner = self.lock();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for e in &inner.entries {
            let Some(since) = e.idle_since else { continue };
            let deadline = since + timeout;
            if deadline <= now {
                due.push(e.meta.id.clone());
            } else {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
            }
        }
        (due, next)
    }

    /// Restarts the idle clock of `id` (the directory thought it idle, the runtime did not:
    /// the phase change is on its way).
    pub(crate) fn touch(&self, id: &str) {
        let mut inner = self.lock();
        if let Some(e) = inner.entries.iter_mut().find(|e| e.meta.id == id)
            && e.idle_since.is_some()
        {
            e.idle_since = Some(Instant::now());
        }
    }

    /// Completes when a session has become idle since the last call (or the first).
    pub(crate) async fn idle_changed(&self) {
        self.idle.notified().await;
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

    /// Applies `f`, restarts or stops idle clocks, then publishes the difference (if any) to
    /// every subscriber.
    fn change(&self, f: impl FnOnce(&mut Vec<Entry>)) {
        let mut inner = self.lock();
        f(&mut inner.entries);
        let mut became_idle = false;
        let now = Instant::now();
        for e in &mut inner.entries {
            match (e.is_idle(), e.idle_since) {
                (true, None) => {
                    e.idle_since = Some(now);
                    became_idle = true;
                }
                (false, Some(_)) => e.idle_since = None,
                _ => {}
            }
        }
        if became_idle {
            // A stored permit: the reaper sees it even if it is not waiting yet.
            self.idle.notify_one();
        }
        // Every view is re-rendered, even when the whole list did not change: recording an
        // owner changes who sees a session without changing how it is listed.
        inner.value = inner.render(&Sight::all());
        let Inner { entries, views, .. } = &mut *inner;
        for view in views.iter_mut() {
            let new = render(entries, &view.sight);
            let ops = diff(&view.value, &new);
            if ops.is_empty() {
                continue;
            }
            view.value = new;
            view.sequence += 1;
            let View {
                value,
                sequence,
                subscribers,
                ..
            } = view;
            let (value, sequence) = (&*value, *sequence);
            subscribers.publish(MEMBER, sequence, ops, &|| {
                snapshot(SERVICE, METHODS, vec![(MEMBER, sequence, value.clone())])
            });
        }
    }
}

/// The list `sight` sees: newest first (then by id).
fn render(entries: &[Entry], sight: &Sight) -> Value {
    let mut order: Vec<&Entry> = entries
        .iter()
        .filter(|e| sight.sees(&e.meta.id, e.owner.as_deref()))
        .collect();
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

impl Inner {
    /// The list `sight` sees.
    fn render(&self, sight: &Sight) -> Value {
        render(&self.entries, sight)
    }
}

impl View {
    fn snapshot(&self) -> SubscriptionSnapshot {
        snapshot(
            SERVICE,
            METHODS,
            vec![(MEMBER, self.sequence, self.value.clone())],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_ref::ModelRef;

    fn meta(id: &str) -> SessionMeta {
        SessionMeta {
            id: id.to_owned(),
            name: None,
            cwd: "/".to_owned(),
            created_at: "2026-12-01T00:00:00.000Z".to_owned(),
            updated_at: "2026-12-01T00:00:00.000Z".to_owned(),
            phase: Phase::Idle,
            model: ModelRef::scripted(),
        }
    }

    #[test]
    fn an_owner_claim_counts_while_pending_and_once_committed() {
        let d = Directory::new(Vec::new());
        let first = d.claim("unix:uid=1".into(), 2).unwrap();
        let second = d.claim("unix:uid=1".into(), 2).unwrap();
        assert!(
            d.claim("unix:uid=1".into(), 2).is_err(),
            "two pending fill it"
        );
        assert!(d.claim("tcp".into(), 2).is_ok(), "other owners are apart");
        drop(second);
        let again = d.claim("unix:uid=1".into(), 2).unwrap();
        first.commit(meta("a"));
        again.commit(meta("b"));
        let refused = d.claim("unix:uid=1".into(), 2).unwrap_err();
        assert!(refused.to_wire().message.contains("limit 2"));
        d.remove("a");
        assert!(
            d.claim("unix:uid=1".into(), 2).is_ok(),
            "removal gives it back"
        );
    }

    #[test]
    fn the_idle_clock_runs_only_while_open_unattached_and_idle() {
        let d = Directory::new(vec![meta("a"), meta("b")]);
        assert!(d.idle_order().is_empty(), "closed sessions are not idle");
        d.set_open("a", true);
        d.set_open("b", true);
        assert_eq!(d.idle_order(), ["a", "b"]);
        d.attached("a", true);
        assert!(!d.is_idle("a"));
        let mut turning = meta("b");
        turning.phase = Phase::Turn;
        d.upsert(turning);
        assert!(d.idle_order().is_empty(), "attached, turning");
        d.attached("a", false);
        assert_eq!(d.idle_order(), ["a"]);
        let timeout = Duration::from_secs(60);
        let (due, next) = d.idle_due(Instant::now(), timeout);
        assert!(due.is_empty());
        let next = next.unwrap();
        let (due, after) = d.idle_due(next, timeout);
        assert_eq!((due, after), (vec!["a".to_owned()], None));
        d.set_open("a", false);
        assert!(d.idle_order().is_empty(), "closed again");
    }
}
