//! Connection status as seen by users of the client.

/// Where the client's connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Handshaken and serving requests.
    Connected,
    /// The connection dropped; reconnecting per the policy (attempt number, 1-based).
    Reconnecting {
        /// Attempts made so far.
        attempt: u32,
        /// Why the last connection ended.
        reason: String,
    },
    /// Finished: closed by the user, or dropped with no (more) reconnecting.
    Closed {
        /// Why.
        reason: String,
    },
}
