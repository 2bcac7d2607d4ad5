//! `pi.session-directory`: every session on disk, with the live phase and attached-client
//! count of the open ones, published as diffs of the whole list (it changes a few times per
//! turn at most, and is small).
//!
//! What it keeps per session: its metadata (the pump upserts every phase change), how many
//! clients are attached, and who created it. Whether a session is open or being removed it
//! does not keep: it asks the residency (`super::residency`) through [`ResidencyView`], the
//! trait it defines and the residency implements, under its own lock, at every change (a
//! session that is not open is listed `closed`) and at every resolve (one being removed does
//! not resolve). From those facts it runs the idle clocks (`super::idle_clock`: an open
//! session with no client and an idle phase is idle) and counts each owner's sessions
//! (`super::owners`); the idle reaper (`super::idle`) reads the clocks, and
//! [`Directory::idle_changed`] wakes it when one starts.
//!
//! Each caller sees only the sessions it may see (`super::access`): subscribers are grouped
//! by their [`Sight`], and each group has its own list, sequence and diffs. An invisible
//! session is never listed and does not resolve (`session_not_found`), so a prefix cannot
//! reveal it either.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use baton_protocol::Value;
use baton_protocol::chord::diff;
use baton_server::chord::SubscriptionSnapshot;
use baton_server::{Publisher, ServiceError};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::access::{Rights, Sight};
use super::idle_clock::IdleClocks;
use super::owners::OwnerCounts;
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

/// What the directory asks of the residency: which sessions are open, and which are being
/// removed (the residency, `super::residency`, answers; tests may answer from plain sets).
pub(crate) trait ResidencyView: fmt::Debug + Send + Sync {
    /// The ids of the sessions open now.
    fn open_ids(&self) -> HashSet<String>;
    /// The ids of the sessions being removed now.
    fn removing_ids(&self) -> HashSet<String>;
}

/// A [`ResidencyView`] for the tests of the directory and of its users: a set of open ids,
/// none being removed.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct OpenIds(Mutex<HashSet<String>>);

#[cfg(test)]
impl OpenIds {
    /// Records `id` as open or not.
    pub(crate) fn set(&self, id: &str, open: bool) {
        if open {
            self.0.lock().insert(id.to_owned());
        } else {
            self.0.lock().remove(id);
        }
    }
}

#[cfg(test)]
impl ResidencyView for OpenIds {
    fn open_ids(&self) -> HashSet<String> {
        self.0.lock().clone()
    }

    fn removing_ids(&self) -> HashSet<String> {
        HashSet::new()
    }
}

#[derive(Debug)]
struct Entry {
    meta: SessionMeta,
    attached: usize,
    /// Who created it (`super::limits::owner_key`), as its header or this host recorded.
    owner: Option<String>,
}

impl Entry {
    fn new(meta: SessionMeta) -> Self {
        Self {
            meta,
            attached: 0,
            owner: None,
        }
    }

    /// Idle, if it is open: no attached client, phase idle.
    fn is_quiet(&self) -> bool {
        self.attached == 0 && self.meta.phase == Phase::Idle
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
    /// Creates in progress, counted against their owner's limit.
    owners: OwnerCounts,
    /// Since when each idle session has been idle.
    idle: IdleClocks,
}

/// The directory of a host.
#[derive(Debug)]
pub(crate) struct Directory {
    inner: Mutex<Inner>,
    /// Which sessions are open or being removed: asked, never kept.
    residency: Arc<dyn ResidencyView>,
    /// Notified when a session becomes idle.
    became_idle: Notify,
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
        // `Drop` settles the pending claim: the listed entry counts instead.
    }
}

impl Drop for OwnerClaim<'_> {
    fn drop(&mut self) {
        self.directory.lock().owners.settle(&self.owner);
    }
}

impl Directory {
    /// A directory of `metas`, owned by nobody known, whose open and removing sessions
    /// `residency` names.
    #[cfg(test)]
    pub(crate) fn new(metas: Vec<SessionMeta>, residency: Arc<dyn ResidencyView>) -> Self {
        Self::with_owners(metas.into_iter().map(|m| (m, None)).collect(), residency)
    }

    /// A directory of sessions with their recorded owners, whose open and removing sessions
    /// `residency` names.
    pub(crate) fn with_owners(
        sessions: Vec<(SessionMeta, Option<String>)>,
        residency: Arc<dyn ResidencyView>,
    ) -> Self {
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
            owners: OwnerCounts::default(),
            idle: IdleClocks::default(),
        };
        inner.value = render(&inner.entries, &Sight::all(), &residency.open_ids());
        Self {
            inner: Mutex::new(inner),
            residency,
            became_idle: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// The canonical id for `id_or_prefix` among the sessions `rights` sees and that are not
    /// being removed: an exact id, or a unique prefix of at least [`MIN_PREFIX`] characters.
    pub(crate) fn resolve(
        &self,
        id_or_prefix: &str,
        rights: &Rights,
    ) -> Result<String, ServiceError> {
        let inner = self.lock();
        let removing = self.residency.removing_ids();
        let live = || {
            inner.entries.iter().filter(|e| {
                !removing.contains(&e.meta.id) && rights.sees(&e.meta.id, e.owner.as_deref())
            })
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

    /// The whole list, as last published.
    pub(crate) fn value(&self) -> Value {
        self.lock().value.clone()
    }

    /// The list as `sight` sees it now.
    pub(crate) fn value_for(&self, sight: &Sight) -> Value {
        let inner = self.lock();
        render(&inner.entries, sight, &self.residency.open_ids())
    }

    /// Every session with its recorded owner (the fleet reconciles its records with them).
    #[cfg(feature = "cluster")]
    pub(crate) fn sessions(&self) -> Vec<(SessionMeta, Option<String>)> {
        self.lock()
            .entries
            .iter()
            .map(|e| (e.meta.clone(), e.owner.clone()))
            .collect()
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
                let value = render(&inner.entries, &sight, &self.residency.open_ids());
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

    /// The residency opened session `id` (`meta` is its metadata now): lists it open.
    pub(crate) fn opened(&self, meta: SessionMeta) {
        self.upsert(meta);
    }

    /// The residency closed session `id`: lists it `closed`, with no client attached.
    pub(crate) fn closed(&self, id: &str) {
        self.with_entry(id, |e| e.attached = 0);
    }

    /// Reserves a place for one more session of `owner`, or answers `busy` when it owns
    /// `limit` already (sessions being created count).
    pub(crate) fn claim(
        &self,
        owner: String,
        limit: usize,
    ) -> Result<OwnerClaim<'_>, ServiceError> {
        let mut inner = self.lock();
        let Inner {
            entries, owners, ..
        } = &mut *inner;
        owners.claim(entries.iter().map(|e| e.owner.as_deref()), &owner, limit)?;
        drop(inner);
        Ok(OwnerClaim {
            directory: self,
            owner,
        })
    }

    /// Whether `id` is open with no attached client and an idle phase, as far as the
    /// directory knows (the pump reports phase changes a moment after they happen).
    pub(crate) fn is_idle(&self, id: &str) -> bool {
        let inner = self.lock();
        inner
            .entries
            .iter()
            .any(|e| e.meta.id == id && e.is_quiet())
            && self.residency.open_ids().contains(id)
    }

    /// The idle sessions, least recently used first.
    pub(crate) fn idle_order(&self) -> Vec<String> {
        self.lock().idle.order()
    }

    /// The sessions idle for `timeout` or longer at `now`, and when the next one will be.
    pub(crate) fn idle_due(
        &self,
        now: Instant,
        timeout: Duration,
    ) -> (Vec<String>, Option<Instant>) {
        self.lock().idle.due(now, timeout)
    }

    /// Restarts the idle clock of `id` (the directory thought it idle, the runtime did not:
    /// the phase change is on its way).
    pub(crate) fn touch(&self, id: &str) {
        self.lock().idle.restart(id, Instant::now());
    }

    /// Completes when a session has become idle since the last call (or the first).
    pub(crate) async fn idle_changed(&self) {
        self.became_idle.notified().await;
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

    /// Applies `f`, asks which sessions are open, runs the idle clocks, then publishes the
    /// difference (if any) to every subscriber. The residency is asked under the lock, so
    /// the last change after any open or close publishes it.
    fn change(&self, f: impl FnOnce(&mut Vec<Entry>)) {
        let mut inner = self.lock();
        f(&mut inner.entries);
        let open = self.residency.open_ids();
        let Inner {
            entries,
            value,
            views,
            idle,
            ..
        } = &mut *inner;
        let quiet = entries
            .iter()
            .filter(|e| e.is_quiet() && open.contains(&e.meta.id))
            .map(|e| e.meta.id.as_str());
        if idle.update(quiet, Instant::now()) {
            // A stored permit: the reaper sees it even if it is not waiting yet.
            self.became_idle.notify_one();
        }
        // Every view is re-rendered, even when the whole list did not change: recording an
        // owner changes who sees a session without changing how it is listed.
        *value = render(entries, &Sight::all(), &open);
        for view in views.iter_mut() {
            let new = render(entries, &view.sight, &open);
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

/// The list `sight` sees: newest first (then by id); a session that is not `open` is listed
/// `closed`.
fn render(entries: &[Entry], sight: &Sight, open: &HashSet<String>) -> Value {
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
                let phase = if open.contains(&e.meta.id) {
                    phase_text(e.meta.phase)
                } else {
                    "closed"
                };
                meta_value(&e.meta, phase, e.attached)
            })
            .collect(),
    )
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
    use crate::service::test_support::listed_phase;

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

    fn directory(metas: Vec<SessionMeta>) -> (Directory, Arc<OpenIds>) {
        let open = Arc::new(OpenIds::default());
        (Directory::new(metas, Arc::clone(&open) as _), open)
    }

    #[test]
    fn an_owner_claim_counts_while_pending_and_once_committed() {
        let (d, _) = directory(Vec::new());
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
        let (d, open) = directory(vec![meta("a"), meta("b")]);
        assert!(d.idle_order().is_empty(), "closed sessions are not idle");
        open.set("a", true);
        d.opened(meta("a"));
        open.set("b", true);
        d.opened(meta("b"));
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
        open.set("a", false);
        assert!(
            !d.is_idle("a"),
            "asked, not kept: closed before the directory hears"
        );
        d.closed("a");
        assert!(d.idle_order().is_empty(), "closed again");
        d.remove("b");
        assert!(d.idle_order().is_empty());
    }

    #[test]
    fn the_listed_phase_is_the_residencys_answer_at_the_last_change() {
        let (d, open) = directory(vec![meta("a"), meta("b")]);
        assert_eq!(listed_phase(&d.value(), "a"), "closed");
        // Any change re-reads the residency, so one that comes first shows the open session
        // and the directory's own notice then changes nothing.
        open.set("a", true);
        d.attached("b", true);
        assert_eq!(listed_phase(&d.value(), "a"), "idle");
        d.opened(meta("a"));
        assert_eq!(listed_phase(&d.value(), "a"), "idle");
        assert_eq!(listed_phase(&d.value_for(&Sight::all()), "a"), "idle");
        let mut turning = meta("a");
        turning.phase = Phase::Turn;
        d.upsert(turning);
        assert_eq!(listed_phase(&d.value(), "a"), "turn");
        // A phase the pump reports after the close does not reopen it in the list.
        open.set("a", false);
        d.upsert(meta("a"));
        assert_eq!(listed_phase(&d.value(), "a"), "closed");
        d.closed("a");
        assert_eq!(listed_phase(&d.value(), "a"), "closed");
        assert_eq!(listed_phase(&d.value(), "b"), "closed");
    }
}
