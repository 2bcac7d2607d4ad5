// The message a tab sent whose outcome it has not seen yet, kept in `sessionStorage` (per tab,
// per session) so a lost connection or a reload never sends it twice: after the reattach the
// rehydrated transcript says whether it landed (`landed`), and if not, the text goes back
// into the composer for the user to send again, or not.

const key = (sessionId) => `baton.pending.${sessionId}`;

export class PendingStore {
  /** @param {Storage} storage */
  constructor(storage) {
    this.storage = storage;
    // What `storage` holds, read once per session: the page asks on every state update
    // (hundreds a second while a reply streams), and `sessionStorage` is this tab's alone,
    // so only this store writes it.
    this.known = new Map();
  }

  get(sessionId) {
    if (!sessionId) return undefined;
    if (!this.known.has(sessionId)) {
      let entry;
      try {
        entry = JSON.parse(this.storage.getItem(key(sessionId)) ?? "null") ?? undefined;
      } catch {
        entry = undefined;
      }
      this.known.set(sessionId, entry);
    }
    return this.known.get(sessionId);
  }

  /** Records `entry`; returns its nonce (for `clear`). */
  set(sessionId, entry) {
    const nonce = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
    const stored = { ...entry, nonce };
    this.storage.setItem(key(sessionId), JSON.stringify(stored));
    this.known.set(sessionId, stored);
    return nonce;
  }

  /** Forgets the entry (only the one with `nonce`, when given). */
  clear(sessionId, nonce) {
    if (!sessionId) return;
    if (nonce !== undefined && this.get(sessionId)?.nonce !== nonce) return;
    this.storage.removeItem(key(sessionId));
    this.known.set(sessionId, undefined);
  }
}

const textOf = (item) =>
  (item.content ?? [])
    .filter((b) => b && b.type === "text")
    .map((b) => b.text)
    .join("");

/**
 * Whether `entry` (`{kind, text, baseline}`) shows in `state`: a user item (prompt, steer,
 * follow-up) or a `bashExecution` record at or after the position the transcript had when it
 * was sent, or still waiting in the host's follow-up / steering queue.
 */
export function landed(entry, state) {
  if (!state) return false;
  const start = state.transcriptStart ?? 0;
  const items = state.transcript ?? [];
  for (let i = 0; i < items.length; i += 1) {
    if (start + i < entry.baseline) continue;
    const item = items[i];
    if (entry.kind === "bash") {
      if (item.role === "bashExecution" && item.command === entry.text) return true;
    } else if (item.role === "user" && textOf(item) === entry.text) return true;
  }
  if (entry.kind === "followUp" && (state.followUps ?? []).some((f) => f.text === entry.text)) return true;
  if (entry.kind === "steer" && (state.queuedSteer ?? []).includes(entry.text)) return true;
  // The window moved past the baseline by more than it holds: the item may have left it.
  // Not provable either way; the page then says so instead of guessing (kept as not landed).
  return false;
}
