//! Per-owner session counts, for [`ServiceLimits::max_sessions_per_owner`]: a session counts
//! for the identity recorded as its owner (the directory's entries say whose each one is) and,
//! while its `create` runs, as a pending claim of the creating identity.
//!
//! [`ServiceLimits::max_sessions_per_owner`]: super::ServiceLimits::max_sessions_per_owner

use std::collections::HashMap;

use baton_server::ServiceError;

use super::errors::too_many_owned;

/// The creates in progress, by owner.
#[derive(Debug, Default)]
pub(crate) struct OwnerCounts {
    pending: HashMap<String, usize>,
}

impl OwnerCounts {
    /// Takes a place for one more session of `owner`, or answers `busy` when the sessions it
    /// owns (`owners` lists every session's owner) and its pending claims fill `limit`.
    pub(crate) fn claim<'a>(
        &mut self,
        owners: impl Iterator<Item = Option<&'a str>>,
        owner: &str,
        limit: usize,
    ) -> Result<(), ServiceError> {
        let owned = owners.filter(|o| *o == Some(owner)).count();
        let pending = self.pending.get(owner).copied().unwrap_or(0);
        if owned + pending >= limit {
            return Err(too_many_owned(limit));
        }
        *self.pending.entry(owner.to_owned()).or_default() += 1;
        Ok(())
    }

    /// Gives back one pending claim of `owner`: its create ended (and, if it succeeded, the
    /// session counts as owned instead).
    pub(crate) fn settle(&mut self, owner: &str) {
        if let Some(n) = self.pending.get_mut(owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending.remove(owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::ErrorCode;

    use super::*;

    #[test]
    fn owned_sessions_and_pending_claims_both_count_against_the_limit() {
        let mut counts = OwnerCounts::default();
        let owners = [Some("unix:uid=1"), None, Some("tcp")];
        counts.claim(owners.into_iter(), "unix:uid=1", 2).unwrap();
        let full = counts
            .claim(owners.into_iter(), "unix:uid=1", 2)
            .unwrap_err();
        assert!(full.is(ErrorCode::Busy));
        assert!(full.to_wire().message.contains("limit 2"));
        counts.claim(owners.into_iter(), "tcp", 2).unwrap();
        counts.settle("unix:uid=1");
        counts.claim(owners.into_iter(), "unix:uid=1", 2).unwrap();
        assert!(counts.pending.get("unix:uid=1") == Some(&1));
        counts.settle("unix:uid=1");
        counts.settle("unix:uid=1");
        assert!(
            !counts.pending.contains_key("unix:uid=1"),
            "never below zero"
        );
    }
}
