//! The hook through which the service layer keeps the fleet's session directory (feature
//! `cluster`, docs/cluster.md): a [`SessionDirectoryStore`] the host is given once, before it
//! serves. Without one (outside a fleet) creates and removals touch only the disk, as without
//! the feature.
//!
//! A create in a fleet claims first and writes the journal after: the record and the name
//! claim are one etcd transaction, so the same owner's same name is refused fleet-wide before
//! any file exists; a local create that then fails takes the record back.

use std::fmt;

use baton_server::ServiceError;
use thiserror::Error;

use super::errors::{busy, invalid, service_error};
use super::shared::Shared;
use crate::cluster::record::{MemberRecord, SessionRecord};
use crate::future::BoxFuture;
use crate::session::{CreateOptions, new_session_id};

/// A session of this host, as the fleet's directory records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalSession {
    /// Its id.
    pub session_id: String,
    /// Who created it (`owner_key`), if recorded.
    pub owner: Option<String>,
    /// Its name, if any.
    pub name: Option<String>,
    /// When it was created, ISO-8601 UTC.
    pub created: String,
}

/// One session of the fleet, with what is known of its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSession {
    /// The record.
    pub record: SessionRecord,
    /// What its host advertises (empty when its host is not live).
    pub endpoints: Vec<String>,
    /// Its host's member key is present (its lease lives).
    pub live: bool,
}

/// The fleet's sessions as this host last read them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FleetView {
    /// Every session, in key order.
    pub sessions: Vec<FleetSession>,
    /// Every live host's member record, in key order (server id), for placement.
    pub hosts: Vec<MemberRecord>,
    /// This host's view of etcd is not current (it cannot renew its lease, or the read
    /// failed and this is the last one that did not).
    pub stale: bool,
}

/// What reconciling found and fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reconciled {
    /// Records added for journals etcd did not list.
    pub added: usize,
    /// Records of this server id deleted because no journal backs them.
    pub deleted: usize,
}

/// Why the fleet's directory refused or failed.
#[derive(Debug, Error)]
pub enum FleetError {
    /// The same owner has a session of this name somewhere in the fleet.
    #[error("Session name {name:?} is taken: this identity already has a session of that name")]
    NameTaken {
        /// The name.
        name: String,
    },
    /// etcd did not answer, or refused the request.
    #[error("The fleet directory (etcd) cannot be reached: {0}; try again")]
    Unreachable(String),
}

impl FleetError {
    /// The wire error: a taken name is `invalid_request`; etcd not answering is `busy`
    /// (retryable).
    pub(crate) fn to_service_error(&self) -> ServiceError {
        match self {
            Self::NameTaken { .. } => invalid(self.to_string()),
            Self::Unreachable(_) => busy(self.to_string()),
        }
    }
}

/// The fleet's session directory, as the service layer uses it.
pub trait SessionDirectoryStore: fmt::Debug + Send + Sync {
    /// Writes the record of `session` and claims its name for its owner, in one transaction.
    ///
    /// # Errors
    /// [`FleetError::NameTaken`]; [`FleetError::Unreachable`].
    fn claim<'a>(&'a self, session: &'a LocalSession) -> BoxFuture<'a, Result<(), FleetError>>;

    /// Deletes the record of this host's session `session_id` and its name claim, in one
    /// transaction.
    ///
    /// # Errors
    /// [`FleetError::Unreachable`].
    fn release<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Result<(), FleetError>>;

    /// Makes this host's records those of `local` (the journal files): adds the missing,
    /// deletes the orphans (of this server id only).
    ///
    /// # Errors
    /// [`FleetError::Unreachable`].
    fn reconcile(&self, local: Vec<LocalSession>) -> BoxFuture<'_, Result<Reconciled, FleetError>>;

    /// The fleet's sessions with their hosts.
    ///
    /// # Errors
    /// [`FleetError::Unreachable`] when etcd does not answer and nothing was read before.
    fn fleet(&self) -> BoxFuture<'_, Result<FleetView, FleetError>>;
}

impl Shared {
    /// The fleet's directory, once the host joined one.
    pub(crate) fn fleet(&self) -> Option<&dyn SessionDirectoryStore> {
        self.fleet.get().map(|f| &**f)
    }

    /// Creates a session; in a fleet, its record is claimed first and taken back if the
    /// local create fails.
    pub(crate) async fn create_session(
        &self,
        options: CreateOptions,
    ) -> Result<String, ServiceError> {
        let Some(fleet) = self.fleet() else {
            return self
                .manager
                .create_async(options)
                .await
                .map_err(service_error);
        };
        let session = LocalSession {
            session_id: new_session_id(),
            owner: options.owner.clone(),
            name: options.name.clone(),
            created: crate::clock::format_iso8601(self.manager.now_ms()),
        };
        if let Err(error) = fleet.claim(&session).await {
            // An unanswered claim may still have committed: take it back (best effort), so a
            // retry of the same name is not refused by this create's own record.
            if matches!(error, FleetError::Unreachable(_)) {
                let _ = fleet.release(&session.session_id).await;
            }
            return Err(error.to_service_error());
        }
        match self
            .manager
            .create_async_as(session.session_id.clone(), options)
            .await
        {
            Ok(id) => Ok(id),
            Err(error) => {
                if let Err(e) = fleet.release(&session.session_id).await {
                    tracing::warn!(session_id = %session.session_id, error = %e, "cannot take back the fleet record of a failed create; the next start reconciles it");
                }
                Err(service_error(error))
            }
        }
    }

    /// After a removal: the record and the name claim go too. A failure leaves an orphan
    /// record, which the next start reconciles away.
    pub(crate) async fn release_record(&self, id: &str) {
        if let Some(fleet) = self.fleet()
            && let Err(error) = fleet.release(id).await
        {
            tracing::warn!(session_id = %id, %error, "cannot delete the fleet record of a removed session; the next start reconciles it");
        }
    }
}
