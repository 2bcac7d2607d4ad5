//! The limits one connection enforces, copied from the server configuration.

use crate::config::ResyncDialect;

/// Per-connection limits, copied from the server configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    pub(crate) max_frame_length: u32,
    pub(crate) max_pending_bytes: usize,
    pub(crate) max_active_requests: usize,
    pub(crate) max_subscriptions: usize,
    pub(crate) subscriber_queue_length: usize,
    pub(crate) resync: ResyncDialect,
}
