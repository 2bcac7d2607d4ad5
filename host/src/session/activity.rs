//! What surrounds a session's transcript while people work in it, published with it: the
//! running turn's id (so a steer can name its turn), the follow-up queue, who is attached,
//! and whether compaction is offered and running.
//!
//! All of it lives in the host process, not in the journal: a session that closes (idle
//! timeout, host restart) comes back with no turn, an empty queue and nobody attached.

use serde::{Deserialize, Serialize};

/// Most follow-up prompts queued at once; more are refused (`busy`, naming the limit).
pub const MAX_QUEUED_FOLLOW_UPS: usize = 32;

/// Most attached clients listed in the published `attached` member (the rest are counted in
/// the directory's `attachedClients` but not named), so presence stays bounded however many
/// connections attach.
pub const MAX_LISTED_CLIENTS: usize = 64;

/// Longest identity text shown for an attached client, in bytes (longer ones are cut at a
/// character boundary).
pub const MAX_IDENTITY_BYTES: usize = 256;

/// One queued follow-up prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowUp {
    /// Its id within the session (`f1`, `f2`, …; never reused while the session is open).
    pub id: String,
    /// The prompt text.
    pub text: String,
}

/// One client attached to the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachedClient {
    /// Distinguishes two attachments of one identity (a per-session counter, not the
    /// protocol's attachment id).
    pub id: u64,
    /// Who it is, for display (`uid 1000 (alice)`, a certificate's name, `anonymous`).
    pub identity: String,
}

/// Whether the session offers compaction and whether one is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CompactionStatus {
    /// `compact` may be called (the session's settings enable it).
    pub offered: bool,
    /// A compaction's model call is running now (the phase is `turn` meanwhile).
    pub running: bool,
}

/// The activity part of a session's state.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Activity {
    /// The running turn's id; `None` when no turn runs (also during a compaction).
    pub(crate) turn_id: Option<String>,
    /// Follow-ups waiting for the running turn to settle, oldest first.
    pub(crate) follow_ups: Vec<FollowUp>,
    /// Attached clients, in attach order (at most [`MAX_LISTED_CLIENTS`] listed).
    pub(crate) attached: Vec<AttachedClient>,
    /// Attachments beyond the listed ones, by id (so a detach of an unlisted one is quiet).
    pub(crate) unlisted: Vec<u64>,
    /// Compaction status.
    pub(crate) compaction: CompactionStatus,
    next_follow_up: u64,
    next_attachment: u64,
}

impl Activity {
    /// No turn, no follow-ups, nobody attached; compaction `offered` or not.
    pub(crate) fn new(offered: bool) -> Self {
        Self {
            compaction: CompactionStatus {
                offered,
                running: false,
            },
            ..Self::default()
        }
    }

    /// A fresh follow-up id.
    pub(crate) fn follow_up_id(&mut self) -> String {
        self.next_follow_up += 1;
        format!("f{}", self.next_follow_up)
    }

    /// Adds an attachment; returns its id and whether the listed ones changed.
    pub(crate) fn attach(&mut self, identity: &str) -> (u64, bool) {
        self.next_attachment += 1;
        let id = self.next_attachment;
        if self.attached.len() >= MAX_LISTED_CLIENTS {
            self.unlisted.push(id);
            return (id, false);
        }
        self.attached.push(AttachedClient {
            id,
            identity: clip(identity, MAX_IDENTITY_BYTES),
        });
        (id, true)
    }

    /// Removes attachment `id`; returns whether the listed ones changed.
    pub(crate) fn detach(&mut self, id: u64) -> bool {
        if let Some(i) = self.unlisted.iter().position(|u| *u == id) {
            self.unlisted.swap_remove(i);
            return false;
        }
        let Some(i) = self.attached.iter().position(|a| a.id == id) else {
            return false;
        };
        // Unlisted identities are not kept (only their ids), so the freed slot stays empty
        // until the next attach.
        self.attached.remove(i);
        true
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
fn clip(text: &str, max: usize) -> String {
    text[..text.floor_char_boundary(max)].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_past_the_listed_limit_are_counted_but_not_named() {
        let mut a = Activity::default();
        let ids: Vec<u64> = (0..MAX_LISTED_CLIENTS + 2)
            .map(|i| a.attach(&format!("client {i}")).0)
            .collect();
        assert_eq!(a.attached.len(), MAX_LISTED_CLIENTS);
        assert_eq!(a.unlisted.len(), 2);
        assert!(
            !a.detach(*ids.last().unwrap()),
            "an unlisted detach changes nothing shown"
        );
        assert!(a.detach(ids[0]));
        assert_eq!(a.attached.len(), MAX_LISTED_CLIENTS - 1);
        assert!(!a.detach(ids[0]), "a second detach is quiet");
    }

    #[test]
    fn long_identities_are_cut_at_a_character_boundary() {
        let mut a = Activity::default();
        a.attach(&"é".repeat(MAX_IDENTITY_BYTES));
        let shown = &a.attached[0].identity;
        assert!(shown.len() <= MAX_IDENTITY_BYTES);
        assert!(shown.chars().all(|c| c == 'é'));
    }

    #[test]
    fn follow_up_ids_are_never_reused() {
        let mut a = Activity::default();
        assert_eq!(a.follow_up_id(), "f1");
        assert_eq!(a.follow_up_id(), "f2");
    }
}
