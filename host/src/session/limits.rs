//! Named limits on what a session accepts and publishes, so that a session of any length
//! stays watchable under the server's frame limit (16 MiB by default): every published
//! value — a snapshot, one update, one page, one read — is bounded, whatever the transcript
//! holds. The journal and the runtime keep everything whole.

/// Longest prompt or steering text, in UTF-8 bytes; longer ones are refused
/// (`invalid_request`, naming the limit) before anything is recorded.
pub const MAX_PROMPT_BYTES: usize = 1 << 20;

/// Most string bytes of one transcript item as published (in `pi.session` state, updates and
/// pages). Past it, long strings are cut at a character boundary and the item lists their
/// paths under `clipped`; `readItem` reads the whole text by range.
pub const MAX_PUBLISHED_ITEM_BYTES: usize = 64 << 10;

/// How many of the last transcript items the published state holds; older ones are read with
/// `listItems`. With [`MAX_PUBLISHED_ITEM_BYTES`] this bounds a snapshot to about 8 MiB of
/// text.
pub const DEFAULT_TRANSCRIPT_WINDOW: usize = 128;

/// Most items one `listItems` call returns.
pub const MAX_PAGE_ITEMS: usize = DEFAULT_TRANSCRIPT_WINDOW;

/// Most bytes one `readItem` call returns.
pub const MAX_READ_BYTES: usize = 1 << 20;
