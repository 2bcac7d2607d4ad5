// The messages a tab sent whose outcome it has not seen yet, kept in `sessionStorage` (per
// tab, per session) so a lost connection or a reload never sends one twice: after the
// reattach the rehydrated transcript says which landed (`reconcile`), and those that did not
// go back into the composer for the user to send again, or not.
//
// A list, not one slot: a prompt followed by a steer before the prompt's answer came are both
// in flight, and a drop then must account for both. It holds at most `MAX_PENDING` entries;
// past that the oldest goes (its answer is long overdue, so it has almost surely been seen).

export const MAX_PENDING = 16;

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

  /** The entries of `sessionId`, oldest first (an empty array when none). */
  get(sessionId) {
    if (!sessionId) return [];
    if (!this.known.has(sessionId)) {
      let entries;
      try {
        entries = JSON.parse(this.storage.getItem(key(sessionId)) ?? "[]");
      } catch {
        entries = [];
      }
      // A single entry is what an older page stored.
      if (entries && !Array.isArray(entries)) entries = [entries];
      this.known.set(sessionId, (entries ?? []).filter((e) => e && typeof e.text === "string"));
    }
    return this.known.get(sessionId);
  }

  /** Records `entry` after the others; returns its nonce (for `clear`). */
  add(sessionId, entry) {
    const nonce = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
    const entries = [...this.get(sessionId), { ...entry, nonce }].slice(-MAX_PENDING);
    this.write(sessionId, entries);
    return nonce;
  }

  /** Forgets the entry with `nonce` (nothing when `nonce` is undefined). */
  clear(sessionId, nonce) {
    if (nonce !== undefined) this.forget(sessionId, (e) => e.nonce === nonce);
  }

  /** Forgets `done`, a subset of `get(sessionId)`. */
  remove(sessionId, done) {
    if (done.length > 0) this.forget(sessionId, (e) => done.includes(e));
  }

  forget(sessionId, gone) {
    if (!sessionId) return;
    const entries = this.get(sessionId);
    const kept = entries.filter((e) => !gone(e));
    if (kept.length !== entries.length) this.write(sessionId, kept);
  }

  write(sessionId, entries) {
    if (entries.length === 0) this.storage.removeItem(key(sessionId));
    else this.storage.setItem(key(sessionId), JSON.stringify(entries));
    this.known.set(sessionId, entries);
  }
}

const textOf = (item) =>
  (item.content ?? [])
    .filter((b) => b && b.type === "text")
    .map((b) => b.text)
    .join("");

/**
 * Splits `entries` (`{kind, text, baseline}`, oldest first) into those that show in `state`
 * and those that do not. An entry shows as a user item (prompt, steer, follow-up) or a
 * `bashExecution` record at or after the position the transcript had when it was sent, or
 * still waiting in the host's follow-up / steering queue. Each transcript item or queue entry
 * accounts for one entry only, so the same text sent twice needs two.
 */
export function reconcile(entries, state) {
  const landed = [];
  const lost = [];
  if (!state) return { landed, lost: [...entries] };
  const start = state.transcriptStart ?? 0;
  const items = state.transcript ?? [];
  const used = new Set();
  const followUps = [...(state.followUps ?? [])];
  const steers = [...(state.queuedSteer ?? [])];
  const take = (list, match) => {
    const i = list.findIndex(match);
    if (i < 0) return false;
    list.splice(i, 1);
    return true;
  };
  for (const entry of entries) {
    let found = false;
    for (let i = Math.max(0, entry.baseline - start); i < items.length && !found; i += 1) {
      if (used.has(i)) continue;
      const item = items[i];
      const match =
        entry.kind === "bash" ? item.role === "bashExecution" && item.command === entry.text : item.role === "user" && textOf(item) === entry.text;
      if (match) {
        used.add(i);
        found = true;
      }
    }
    if (!found && entry.kind === "followUp") found = take(followUps, (f) => f.text === entry.text);
    if (!found && entry.kind === "steer") found = take(steers, (s) => s === entry.text);
    // The window moved past the baseline by more than it holds: the item may have left it.
    // Not provable either way; the page then says so instead of guessing (kept as lost).
    (found ? landed : lost).push(entry);
  }
  return { landed, lost };
}
