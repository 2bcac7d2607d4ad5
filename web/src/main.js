// The page: pairing, one pi-client `Client` over our WebSocket transport, reconnects, the
// session list, the transcript (windowed), the composer and the status bar.
//
// Each tab is its own connection and attachment. What a tab keeps lives in its
// `sessionStorage` only (the session it shows, the composer draft, a message whose outcome
// it has not seen); nothing goes to `localStorage`, so two browsers or two tabs never fight
// over a stored copy of a session: the host's replica is the only state.

import { createRemoteServiceBinding, defineService } from "@earendil-works/chord";
import { BACKGROUND_CONTEXT } from "@earendil-works/chord/context";
import { Client, createClientServiceTransport, ServerError } from "@earendil-works/pi-client";

import { renderItem, updateItem } from "./items.js";
import { identify, whoAmI } from "./pairing.js";
import { PendingStore, reconcile } from "./pending.js";
import { Backoff } from "./backoff.js";
import { webSocketTransportFactory, webSocketUrl } from "./transport.js";

const CTX = BACKGROUND_CONTEXT;
const MANAGEMENT = defineService("pi.session-management");
const DIRECTORY = defineService("pi.session-directory");
const MODELS = defineService("pi.models");
const SESSION = defineService("pi.session");
const THINKING_LEVELS = ["off", "minimal", "low", "medium", "high", "xhigh"];
const PAGE_ITEMS = 64; // older items fetched per listItems call (and drawn per frame)
const FIRST_PAINT_ITEMS = 24; // items drawn in a session's first frame: more than a screen
// Older items (before the published window) kept while the reader follows the end: a tab
// left open on a busy session keeps this many, not all it ever saw; the rest is paged in
// again with listItems when scrolled back to.
const MAX_OLDER = 256;
const MAX_FULL_READ = 8 << 20; // readItem reads at most this much of one output
const LIVENESS_TIMEOUT_MS = 4000;
const RENDER_INTERVAL_MS = 100;
// Formatters made once (`toLocaleString` and friends build one per call).
const COUNT = new Intl.NumberFormat();
const DAY = new Intl.DateTimeFormat();

const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
const ui = {
  app: $("app"),
  conn: $("conn"),
  title: $("title"),
  toggle: $("toggle-sessions"),
  sessions: $("sessions"),
  create: $("create"),
  newName: /** @type {HTMLInputElement} */ ($("new-name")),
  createButton: $("create-button"),
  list: $("session-list"),
  notice: $("notice"),
  transcript: $("transcript"),
  older: $("older-status"),
  items: $("items"),
  empty: $("empty"),
  phase: $("phase"),
  tokens: $("tokens"),
  cost: $("cost"),
  presence: $("presence"),
  followups: $("followups"),
  followupList: $("followup-list"),
  composer: $("composer"),
  prompt: /** @type {HTMLTextAreaElement} */ ($("prompt")),
  send: $("send"),
  steer: $("steer"),
  followUp: $("follow-up"),
  stop: $("stop"),
  model: /** @type {HTMLSelectElement} */ ($("model")),
  thinking: /** @type {HTMLSelectElement} */ ($("thinking")),
  hint: $("hint"),
};

const page = {
  identity: undefined,
  viewer: false,
  serverId: undefined,
  /** @type {Client | undefined} */
  client: undefined,
  server: undefined, // {binding, management, directory, models}
  session: undefined, // {binding, facade, id}
  sessionId: sessionStorage.getItem("baton.session") ?? undefined,
  state: undefined,
  older: new Map(), // position → item, for items before the published window
  firstPos: 0,
  // Tokens and cost of the older items counted so far (positions countedFrom … window start);
  // kept as items come and go, so a render sums only the window.
  olderUsage: { tokens: 0, cost: 0 },
  countedFrom: 0,
  loadingOlder: false,
  nodes: new Map(), // item id → {item, node}
  connecting: false,
  stopped: false,
  everConnected: false,
  backoff: new Backoff(),
  models: [],
  sessions: [],
  renderQueued: false,
  shown: FIRST_PAINT_ITEMS, // how many of the loaded items, from the end, are drawn
  unshown: 0, // loaded items not drawn yet
  growQueued: false,
  renderedAt: -Infinity,
  stick: true, // keep the transcript scrolled to its end
  shownSession: undefined, // the session whose draft the composer holds
  reconcileDue: false,
};
const pending = new PendingStore(sessionStorage);

// ---------------------------------------------------------------------------------------------
// connection

function setConn(text) {
  ui.conn.textContent = text;
  ui.app.dataset.conn = text.split(/[ …]/)[0];
}

function notice(text, kind = "info") {
  if (!text) {
    ui.notice.hidden = true;
    ui.notice.textContent = "";
    return;
  }
  ui.notice.hidden = false;
  ui.notice.dataset.kind = kind;
  ui.notice.textContent = text;
}

async function start() {
  setConn("connecting…");
  let who;
  try {
    who = await identify();
  } catch (error) {
    who = { refused: `the host could not be reached (${error.message})` };
  }
  if (!who.identity) return unpaired(who.refused);
  page.identity = who.identity;
  page.serverId = who.identity.serverId;
  page.viewer = who.identity.role === "viewer";
  ui.app.dataset.role = who.identity.role;
  if (page.viewer) {
    ui.composer.remove();
    ui.followups.remove();
    ui.create.remove();
  }
  if (who.identity.session && (page.viewer || page.sessionId === undefined)) selectStored(who.identity.session);
  installWakeups();
  void connectLoop();
}

function unpaired(reason, wasPaired = false) {
  page.stopped = true;
  page.backoff.cancel();
  if (page.client?.connected) page.client.disconnect("not paired");
  setConn("not paired");
  renderAll();
  notice(
    `This browser is ${wasPaired ? "no longer" : "not"} paired with the host${reason ? ` (${reason})` : ""}. Run \`baton link\` where the host's \`baton\` works and open the link it prints.`,
    "error",
  );
}

function selectStored(id) {
  page.sessionId = id;
  if (id === undefined) sessionStorage.removeItem("baton.session");
  else sessionStorage.setItem("baton.session", id);
}

async function connectLoop() {
  if (page.connecting || page.stopped) return;
  page.connecting = true;
  page.backoff.cancel();
  try {
    for (;;) {
      setConn(page.everConnected ? "reconnecting…" : "connecting…");
      try {
        await connectOnce();
        page.everConnected = true;
        page.backoff.reset();
        setConn("connected");
        return;
      } catch (error) {
        if (page.stopped) return;
        if (page.client && !page.client.connected) dropBindings();
        if (page.client?.connected) page.client.disconnect("setting up the connection failed");
        if (/does not match/.test(error?.message ?? "")) {
          // The host came back with another server id: `/me` names the new one.
          await page.client?.dispose();
          page.client = undefined;
          page.serverId = undefined;
        }
        setConn(page.everConnected ? "reconnecting…" : "connecting…");
        // A refused upgrade looks like any failed socket to a page, so the host is asked
        // whether this browser is still paired (revoked by `baton unlink`, or not).
        const me = await whoAmI().catch(() => undefined);
        if (me && !me.identity) return unpaired(me.refused, page.everConnected);
        if (me?.identity && page.serverId === undefined) page.serverId = me.identity.serverId;
        await page.backoff.wait();
      }
    }
  } finally {
    page.connecting = false;
  }
}

async function connectOnce() {
  const url = webSocketUrl();
  if (!page.client) {
    if (page.serverId === undefined) {
      const me = await whoAmI();
      if (!me.identity) throw new Error(me.refused ?? "not paired");
      page.serverId = me.identity.serverId;
    }
    const client = new Client({
      serverId: page.serverId,
      transportFactory: webSocketTransportFactory(url),
      onListenerError: (error) => console.error("listener", error),
    });
    client.onConnectionStateChange((change) => {
      if (change.state !== "disconnected" || client !== page.client) return;
      dropBindings();
      if (!page.connecting && !page.stopped) {
        setConn("reconnecting…");
        void page.backoff.wait().then(() => connectLoop(), () => {});
      }
    });
    client.onAttachmentChange((attachment) => {
      if (attachment === undefined && page.session && client.connected) {
        // Detached by the host (the session was removed).
        dropSession();
        notice("The session was removed or closed by the host.");
        selectStored(undefined);
        renderAll();
      }
    });
    page.client = client;
  }
  if (!page.client.connected) await page.client.connect();
  await setupServer();
  if (page.sessionId !== undefined) await attach(page.sessionId);
}

// A binding's subscriptions die with their connection; fresh ones are made per connection.
function dropBindings() {
  dropSession();
  if (page.server) {
    const { binding } = page.server;
    page.server = undefined;
    void binding.dispose(CTX).catch(() => {});
  }
}

function dropSession() {
  if (!page.session) return;
  const { binding, stop } = page.session;
  page.session = undefined;
  stop?.();
  void binding.dispose(CTX).catch(() => {});
}

async function setupServer() {
  const client = page.client;
  const binding = createRemoteServiceBinding({
    services: [MANAGEMENT, DIRECTORY, MODELS],
    transport: createClientServiceTransport(client, () => ({ serverId: client.serverId })),
    onError: (error) => console.error("server services", error),
  });
  await binding.ready(CTX);
  const server = {
    binding,
    management: binding.use(MANAGEMENT),
    directory: binding.use(DIRECTORY),
    models: binding.use(MODELS),
  };
  page.server = server;
  server.directory.sessions.subscribe((sessions) => {
    if (page.server !== server) return;
    page.sessions = sessions ?? [];
    renderSessions();
  });
  server.models.models.subscribe((models) => {
    if (page.server !== server) return;
    page.models = models ?? [];
    renderSelectors();
  });
  page.sessions = server.directory.sessions.value ?? [];
  page.models = server.models.models.value ?? [];
  renderSessions();
  renderSelectors();
}

async function attach(id) {
  const { client, server } = page;
  dropSession();
  try {
    await server.management.attach(id, CTX);
  } catch (error) {
    if (error instanceof ServerError && error.code === "session_not_found") {
      selectStored(undefined);
      resetTranscript();
      notice(`Session ${id.slice(0, 8)} is not there (removed, or not visible to this browser).`);
      renderAll();
      return;
    }
    throw error;
  }
  const binding = createRemoteServiceBinding({
    services: [SESSION],
    transport: createClientServiceTransport(client, () => client.attachment),
    onError: (error) => console.error("pi.session", error),
  });
  await binding.ready(CTX);
  const facade = binding.use(SESSION);
  if (page.sessionId !== id) resetTranscript();
  selectStored(id);
  const session = { binding, facade, id, stop: undefined };
  page.session = session;
  // The transcript is rebuilt from the host's replica on every (re)attach.
  resetTranscript();
  page.reconcileDue = true;
  session.stop = facade.state.subscribe((state) => {
    if (page.session !== session) return;
    onState(state);
  });
  // A reattach to the session on screen keeps what the composer holds; opening another one
  // (or this tab's first attach) brings back that session's draft.
  if (page.shownSession !== id) ui.prompt.value = sessionStorage.getItem(`baton.draft.${id}`) ?? "";
  page.shownSession = id;
  onState(facade.state.value);
}

// Immediately on `online`, on the tab becoming visible and on a back/forward-cache restore;
// a socket that looks open after the tab slept is checked with a cheap call first.
function installWakeups() {
  const wake = (why) => {
    if (page.stopped) return;
    if (page.client?.connected) {
      void checkAlive(why);
      return;
    }
    page.backoff.cancel();
    void connectLoop();
  };
  addEventListener("online", () => wake("online"));
  // The browser says the network is gone: a socket that looks open is most likely dead (a
  // phone's radio went), so it is closed now and reopened on `online`, rather than left to
  // time out minutes later. A turn is not stopped by this: it belongs to the session.
  addEventListener("offline", () => {
    if (page.client?.connected) page.client.disconnect("the browser went offline");
    setConn("reconnecting… (offline)");
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") wake("visible");
  });
  addEventListener("pageshow", (event) => {
    if (event.persisted) wake("pageshow");
  });
}

async function checkAlive(why) {
  const client = page.client;
  const server = page.server;
  if (!server) return;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), LIVENESS_TIMEOUT_MS);
  try {
    await client.request({ serverId: client.serverId }, { serviceId: "pi.models", member: "list", args: [] }, controller.signal);
  } catch {
    if (client === page.client && client.connected) client.disconnect(`no answer after ${why}`);
  } finally {
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// state → DOM

function resetTranscript() {
  page.stick = true;
  page.shown = FIRST_PAINT_ITEMS;
  page.state = undefined;
  page.older.clear();
  page.firstPos = 0;
  page.olderUsage = { tokens: 0, cost: 0 };
  page.countedFrom = 0;
  page.nodes.clear();
  ui.items.replaceChildren();
}

function onState(state) {
  const previous = page.state;
  if (!state) return;
  const start = state.transcriptStart ?? 0;
  if (previous) {
    // Items that leave the front of the window stay on screen (as older items).
    const prevStart = previous.transcriptStart ?? 0;
    for (let i = 0; prevStart + i < start && i < previous.transcript.length; i += 1) {
      page.older.set(prevStart + i, previous.transcript[i]);
      countUsage(previous.transcript[i]);
    }
  }
  if (page.older.size === 0) page.firstPos = start;
  // Keep only a contiguous run of older items ending right before the window.
  if (page.older.size > 0 && !page.older.has(start - 1)) {
    page.older.clear();
    page.firstPos = start;
  }
  if (page.older.size === 0 && page.countedFrom !== start) {
    page.olderUsage = { tokens: 0, cost: 0 };
    page.countedFrom = start;
  }
  page.state = state;
  if (page.reconcileDue) {
    page.reconcileDue = false;
    reconcilePending(state);
  } else if (page.session && pending.get(page.session.id).length > 0) {
    pending.remove(page.session.id, reconcile(pending.get(page.session.id), state).landed);
  }
  scheduleRender();
}

// State changes are drawn at most once an animation frame and at most every
// RENDER_INTERVAL_MS: a reply streaming at hundreds of tokens a second is drawn in steps of a
// few tokens, not token by token, which keeps the main thread mostly idle. A change after a
// quiet spell is drawn at the next frame.
function scheduleRender() {
  if (page.renderQueued) return;
  page.renderQueued = true;
  const frame = () =>
    requestAnimationFrame(() => {
      page.renderQueued = false;
      page.renderedAt = performance.now();
      renderAll();
    });
  const wait = page.renderedAt + RENDER_INTERVAL_MS - performance.now();
  if (wait > 0) setTimeout(frame, wait);
  else frame();
}

// Text set only when it changed: setting the same text still makes the browser lay it out.
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function renderAll() {
  // What changes the transcript's height first, so it is scrolled against its final size.
  renderStatus();
  renderComposer();
  renderSessions();
  renderSelectors();
  renderTranscript();
}

function usageOf(item) {
  if (item.role !== "assistant" || !item.usage) return undefined;
  return { tokens: (item.usage.input ?? 0) + (item.usage.output ?? 0), cost: item.usage.cost?.total ?? 0 };
}

function countUsage(item) {
  const usage = usageOf(item);
  if (!usage) return;
  page.olderUsage.tokens += usage.tokens;
  page.olderUsage.cost += usage.cost;
}

// While the reader follows the end, older items past MAX_OLDER are let go from the top
// (their nodes with them; renderTranscript removes what it no longer draws). Their tokens
// and cost stay counted, and scrolling back pages them in again with listItems.
function trimOlder() {
  if (!page.stick || page.older.size <= MAX_OLDER) return;
  const keepFrom = (page.state?.transcriptStart ?? 0) - MAX_OLDER;
  for (let pos = page.firstPos; pos < keepFrom; pos += 1) page.older.delete(pos);
  page.firstPos = keepFrom;
  page.shown = Math.min(page.shown, page.older.size + (page.state?.transcript.length ?? 0));
}

function itemsInOrder() {
  const out = [];
  const state = page.state;
  if (!state) return out;
  const start = state.transcriptStart ?? 0;
  for (let pos = page.firstPos; pos < start; pos += 1) {
    const item = page.older.get(pos);
    if (item) out.push(item);
  }
  for (const item of state.transcript) out.push(item);
  return out;
}

const readContext = { readFull };

function renderTranscript() {
  const box = ui.transcript;
  const atBottom = page.stick;
  trimOlder();
  const all = itemsInOrder();
  // A session opens with its last items drawn first; the rest of what is loaded follows in
  // the next frames (growShown), so the end of a long session is on screen at once.
  page.unshown = Math.max(0, all.length - page.shown);
  const items = page.unshown > 0 ? all.slice(page.unshown) : all;
  const seen = new Set();
  items.forEach((item, index) => {
    seen.add(item.id);
    let entry = page.nodes.get(item.id);
    if (entry && entry.item !== item && updateItem(entry.node, item)) {
      entry.item = item;
    } else if (!entry || entry.item !== item) {
      const node = renderItem(item, readContext);
      if (entry) {
        // Keep an open card open across re-renders.
        if (entry.node.querySelector("details.tool-card")?.open) node.querySelector("details.tool-card")?.setAttribute("open", "");
        entry.node.replaceWith(node);
      }
      entry = { item, node };
      page.nodes.set(item.id, entry);
    }
    const current = ui.items.children[index];
    if (current !== entry.node) ui.items.insertBefore(entry.node, current ?? null);
  });
  for (const [id, entry] of page.nodes) {
    if (!seen.has(id)) {
      entry.node.remove();
      page.nodes.delete(id);
    }
  }
  ui.empty.hidden = items.length > 0 || page.session === undefined;
  ui.older.hidden = !(page.session && page.firstPos > 0);
  setText(ui.older, page.loadingOlder ? "Loading older messages…" : `${page.firstPos} older messages — scroll up to load`);
  if (atBottom) box.scrollTop = box.scrollHeight;
  if (page.unshown > 0 && !page.growQueued) {
    page.growQueued = true;
    requestAnimationFrame(() => setTimeout(growShown, 0)); // after this frame is painted
  }
  if (page.unshown === 0 && page.session && page.firstPos > 0 && box.scrollHeight <= box.clientHeight + 8) void loadOlder();
}

function growShown() {
  page.growQueued = false;
  if (page.unshown === 0) return;
  const box = ui.transcript;
  const fromBottom = box.scrollHeight - box.scrollTop;
  page.shown += PAGE_ITEMS;
  renderTranscript();
  // Items drawn above the view must not move what the reader is looking at.
  if (!page.stick) box.scrollTop = box.scrollHeight - fromBottom;
}

async function loadOlder() {
  const session = page.session;
  if (!session || page.loadingOlder || page.firstPos === 0 || page.unshown > 0) return;
  page.loadingOlder = true;
  ui.older.textContent = "Loading older messages…";
  try {
    const count = Math.min(PAGE_ITEMS, page.firstPos);
    const from = page.firstPos - count;
    const page_ = await session.facade.listItems(from, count, CTX);
    if (page.session !== session) return;
    const items = page_.items ?? [];
    // Only a run that ends where the loaded items begin is taken.
    if (page_.start + items.length !== page.firstPos) return;
    items.forEach((item, i) => {
      page.older.set(page_.start + i, item);
      // Paged in again after a trim: already counted.
      if (page_.start + i < page.countedFrom) countUsage(item);
    });
    page.countedFrom = Math.min(page.countedFrom, page_.start);
    page.firstPos = page_.start;
    page.shown += items.length;
    const box = ui.transcript;
    const before = box.scrollHeight - box.scrollTop;
    renderTranscript();
    box.scrollTop = box.scrollHeight - before;
  } catch (error) {
    console.error("listItems", error);
  } finally {
    page.loadingOlder = false;
    renderTranscript();
  }
}

async function readFull(item, path) {
  const facade = page.session?.facade;
  if (!facade) throw new Error("not attached");
  let offset = 0;
  let text = "";
  for (;;) {
    const part = await facade.readItem(item.id, path, offset, 1 << 20, CTX);
    text += part.text;
    if (part.end >= part.total || part.end <= offset) break;
    if (part.end >= MAX_FULL_READ) {
      text += `\n… (${part.total - part.end} more bytes not shown)`;
      break;
    }
    offset = part.end;
  }
  return text;
}

function renderStatus() {
  const state = page.state;
  setText(ui.phase, state ? (state.compaction?.running ? "compacting" : state.phase) : "—");
  // The host publishes no session-wide totals: these are of every item this tab has loaded
  // (the older ones counted as they came, the window's summed here: at most 128 items).
  let { tokens, cost } = page.olderUsage;
  for (const item of state?.transcript ?? []) {
    const usage = usageOf(item);
    if (!usage) continue;
    tokens += usage.tokens;
    cost += usage.cost;
  }
  setText(ui.tokens, `${COUNT.format(tokens)} tokens`);
  setText(ui.cost, `$${cost.toFixed(4)}`);
  setText(ui.presence, state?.attached?.length ? `attached: ${state.attached.map((a) => a.identity).join(", ")}` : "");
  const session = page.sessions.find((s) => s.id === page.session?.id);
  setText(ui.title, page.session ? (session?.name ?? page.session.id.slice(0, 8)) : "baton");
  const title = page.session ? `${ui.title.textContent} · baton` : "baton";
  if (document.title !== title) document.title = title;
}

const running = () => page.state && (page.state.phase === "turn" || page.state.turnId != null);

function renderComposer() {
  if (page.viewer) return;
  const attached = page.session !== undefined && page.client?.connected;
  const busy = running();
  ui.composer.hidden = page.session === undefined;
  ui.prompt.disabled = !attached;
  ui.send.hidden = busy;
  ui.steer.hidden = !busy;
  ui.followUp.hidden = !busy;
  ui.stop.disabled = !busy || !attached;
  setText(
    ui.hint,
    busy ? "Enter steers this turn · Alt+Enter queues a follow-up · Esc stops" : "Enter sends · Shift+Enter new line · !cmd runs a command · /compact",
  );
  const followUps = page.state?.followUps ?? [];
  ui.followups.hidden = followUps.length === 0;
  const shown = [...ui.followupList.children].map((li) => li.dataset.key).join("\n");
  const wanted = followUps.map((f) => `${f.id}\u0000${f.text}`).join("\n");
  if (shown !== wanted) ui.followupList.replaceChildren(...followUps.map(followUpRow));
}

function followUpRow(entry) {
  const li = document.createElement("li");
  li.dataset.key = `${entry.id}\u0000${entry.text}`;
  const text = document.createElement("span");
  text.className = "followup-text";
  text.textContent = entry.text;
  const edit = button("Edit", `Edit follow-up: ${entry.text.slice(0, 40)}`, () => {
    const input = document.createElement("textarea");
    input.value = entry.text;
    input.setAttribute("aria-label", "Edit follow-up");
    const save = button("Save", "Save follow-up", () =>
      call(() => page.session.facade.editFollowUp(entry.id, input.value, CTX)),
    );
    const cancel = button("Cancel", "Cancel editing", () => li.replaceWith(followUpRow(entry)));
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        save.click();
      } else if (event.key === "Escape") cancel.click();
    });
    li.replaceChildren(input, save, cancel);
    input.focus();
  });
  const remove = button("Remove", `Remove follow-up: ${entry.text.slice(0, 40)}`, () =>
    call(() => page.session.facade.removeFollowUp(entry.id, CTX)),
  );
  li.append(text, edit, remove);
  return li;
}

function button(label, aria, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  if (aria && aria !== label) b.setAttribute("aria-label", aria);
  b.addEventListener("click", onClick);
  return b;
}

function renderSelectors() {
  if (page.viewer) {
    ui.model.disabled = true;
    ui.thinking.disabled = true;
  }
  const state = page.state;
  const values = page.models.map((m) => `${m.provider}/${m.id}`);
  if ([...ui.model.options].map((o) => o.value).join("\n") !== values.join("\n")) {
    ui.model.replaceChildren(
      ...page.models.map((m) => {
        const option = document.createElement("option");
        option.value = `${m.provider}/${m.id}`;
        option.textContent = m.name ?? option.value;
        return option;
      }),
    );
  }
  if (ui.thinking.options.length === 0) {
    ui.thinking.replaceChildren(
      ...THINKING_LEVELS.map((level) => {
        const option = document.createElement("option");
        option.value = level;
        option.textContent = `thinking: ${level}`;
        return option;
      }),
    );
  }
  if (state) {
    if (document.activeElement !== ui.model) ui.model.value = state.model;
    if (document.activeElement !== ui.thinking) ui.thinking.value = state.thinkingLevel;
  }
  const editable = !page.viewer && state && !running() && page.client?.connected;
  ui.model.disabled = !editable;
  ui.thinking.disabled = !editable;
}

function relative(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return "";
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return "just now";
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return DAY.format(t);
}

// Who is attached to the session this tab shows, from its presence list: this browser as
// "you", a terminal by the name its identity carries ("uid 1000 (alice)" → "alice"), anyone
// else as the host names them. The directory only counts the clients of other sessions.
const NAMED_IN_LIST = 4;
function attachedNames(attached) {
  const own = page.identity?.tokenId === undefined ? undefined : `browser web:${page.identity.tokenId}`;
  let mine = 0;
  return attached.map((a) => {
    if (a.identity === own) return (mine += 1) === 1 ? "you" : "you (another tab)";
    const unix = /^uid \d+ \((.+)\)$/.exec(a.identity);
    return unix ? unix[1] : a.identity;
  });
}

function whoIsAttached(s) {
  const attached = s.id === page.session?.id ? page.state?.attached : undefined;
  if (!attached?.length) return s.attachedClients === 1 ? "1 attached" : `${s.attachedClients} attached`;
  const names = attachedNames(attached);
  const more = Math.max(names.length, s.attachedClients) - Math.min(names.length, NAMED_IN_LIST);
  return names.slice(0, NAMED_IN_LIST).join(", ") + (more > 0 ? ` +${more} more` : "");
}

function renderSessions() {
  const key = JSON.stringify([
    page.session?.id,
    page.state?.attached,
    page.sessions.map((s) => [s.id, s.name, s.phase, s.model, s.updatedAt, s.attachedClients]),
  ]);
  if (ui.list.dataset.key === key) return;
  ui.list.dataset.key = key;
  const rows = page.sessions.map((s) => {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "session";
    if (s.id === page.session?.id) b.setAttribute("aria-current", "true");
    const name = document.createElement("span");
    name.className = "session-name";
    name.textContent = s.name ?? s.id.slice(0, 8);
    const meta = document.createElement("span");
    meta.className = "session-meta";
    meta.textContent = `${s.phase} · ${s.model} · ${relative(s.updatedAt)}`;
    // Its own line, cut with an ellipsis where it does not fit (a phone's drawer).
    const who = document.createElement("span");
    who.className = "session-meta session-who";
    who.textContent = whoIsAttached(s);
    b.append(name, meta, who);
    b.addEventListener("click", () => openSession(s.id));
    li.append(b);
    return li;
  });
  ui.list.replaceChildren(...rows);
}

async function openSession(id) {
  setDrawer(false);
  if (page.session?.id === id) return;
  notice("");
  selectStored(id);
  resetTranscript();
  renderAll();
  if (!page.client?.connected || !page.server) return;
  try {
    await attach(id);
  } catch (error) {
    notice(`Could not open the session: ${error.message}`, "error");
  }
  renderAll();
  ui.prompt.focus?.();
}

// ---------------------------------------------------------------------------------------------
// actions

async function call(fn) {
  try {
    return await fn();
  } catch (error) {
    notice(error instanceof ServerError ? `${error.code}: ${error.message}` : error.message, "error");
    return undefined;
  }
}

function totalItems(state) {
  return (state?.transcriptStart ?? 0) + (state?.transcript?.length ?? 0);
}

/** Sends the composer's text as `kind`: "send" (prompt, !cmd, /compact), "steer" or "followUp". */
async function submit(kind) {
  const session = page.session;
  const text = ui.prompt.value;
  if (!session || text.trim() === "" || !page.client?.connected) return;
  const facade = session.facade;
  notice("");
  let action;
  let record;
  if (kind === "send" && running()) kind = "steer";
  if (kind === "steer") {
    action = () => facade.steer(text, { turnId: page.state.turnId ?? undefined }, CTX);
    record = { kind: "steer", text };
  } else if (kind === "followUp") {
    action = () => facade.followUp(text, CTX);
    record = { kind: "followUp", text };
  } else if (/^!/.test(text)) {
    const exclude = text.startsWith("!!");
    const command = text.slice(exclude ? 2 : 1).trim();
    action = () => facade.bash(command, exclude ? { excludeFromContext: true } : {}, CTX);
    record = { kind: "bash", text: command, original: text };
  } else if (/^\/compact(\s|$)/.test(text)) {
    const instructions = text.slice("/compact".length).trim();
    action = () => facade.compact(instructions === "" ? null : instructions, CTX);
    record = { kind: "compact", text: "/compact" };
  } else {
    action = () => facade.prompt(text, CTX);
    record = { kind: "prompt", text };
  }
  // Before anything leaves: what was sent and where the transcript stood, so that after a
  // lost connection the page can tell whether it landed (and never sends it twice).
  const nonce =
    record.kind === "compact" ? undefined : pending.add(session.id, { ...record, original: record.original ?? text, baseline: totalItems(page.state) });
  ui.prompt.value = "";
  sessionStorage.removeItem(`baton.draft.${session.id}`);
  renderComposer();
  try {
    await action();
    pending.clear(session.id, nonce);
  } catch (error) {
    if (error instanceof ServerError) {
      // The host answered: the outcome is known, nothing was recorded.
      pending.clear(session.id, nonce);
      if (ui.prompt.value === "") ui.prompt.value = text;
      notice(`${error.code}: ${error.message}`, "error");
    } else if (error?.name === "AbortError") {
      pending.clear(session.id, nonce);
    }
    // Otherwise the connection went before the answer: the outcome is unknown and the
    // reconnect decides from the transcript (reconcilePending).
  }
}

/** After a (re)attach: did the messages whose outcome this tab did not see land? */
function reconcilePending(state) {
  const id = page.session?.id;
  const entries = pending.get(id);
  if (entries.length === 0) return;
  const { landed, lost } = reconcile(entries, state);
  pending.remove(id, entries);
  if (lost.length === 0) {
    notice(landed.length === 1 ? "Reconnected: your last message had reached the host." : `Reconnected: your last ${landed.length} messages had reached the host.`);
    return;
  }
  // Every message that is not there goes back, oldest first, ahead of what the composer holds.
  const back = lost.map((e) => e.original ?? e.text).join("\n");
  ui.prompt.value = ui.prompt.value === "" || page.shownSession !== id ? back : `${back}\n${ui.prompt.value}`;
  sessionStorage.setItem(`baton.draft.${id}`, ui.prompt.value);
  const what = lost.length === 1 ? (lost[0].kind === "bash" ? "the command you sent" : "your last message") : `${lost.length} of your messages`;
  const reached = landed.length > 0 ? ` (${landed.length} other${landed.length === 1 ? "" : "s"} had reached it)` : "";
  notice(
    lost.every((e) => e.kind === "bash")
      ? `Reconnected: ${what} ${lost.length === 1 ? "is" : "are"} not in the transcript yet (${lost.length === 1 ? "it" : "they"} may still be running)${reached}. Back in the composer; not re-run.`
      : `Reconnected: ${what} did not reach the host${reached}. Back in the composer; not re-sent.`,
    "warn",
  );
}

function setDrawer(open) {
  ui.app.dataset.drawer = open ? "open" : "closed";
  ui.toggle.setAttribute("aria-expanded", String(open));
}

function installUi() {
  setDrawer(false);
  ui.toggle.addEventListener("click", () => setDrawer(ui.app.dataset.drawer !== "open"));
  ui.sessions.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      setDrawer(false);
      ui.toggle.focus();
    }
  });
  // The composer growing, the phone's keyboard, a rotation: stay at the end if it was there.
  new ResizeObserver(() => {
    if (page.stick) ui.transcript.scrollTop = ui.transcript.scrollHeight;
  }).observe(ui.transcript);
  ui.transcript.addEventListener("scroll", () => {
    const box = ui.transcript;
    // Following the end of the conversation until the user scrolls away from it.
    page.stick = box.scrollHeight - box.scrollTop - box.clientHeight < 48;
    if (box.scrollTop < 300) void loadOlder();
  });
  ui.createButton?.addEventListener("click", createSession);
  ui.newName?.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      void createSession();
    }
  });
  ui.prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      void submit(event.altKey && running() ? "followUp" : "send");
    } else if (event.key === "Escape" && running()) {
      event.preventDefault();
      void call(() => page.session.facade.abort(CTX));
    }
  });
  ui.prompt.addEventListener("input", () => {
    const id = page.sessionId;
    if (id) sessionStorage.setItem(`baton.draft.${id}`, ui.prompt.value);
  });
  ui.send.addEventListener("click", () => submit("send"));
  ui.steer.addEventListener("click", () => submit("steer"));
  ui.followUp.addEventListener("click", () => submit("followUp"));
  ui.stop.addEventListener("click", () => call(() => page.session.facade.abort(CTX)));
  ui.model.addEventListener("change", () => {
    const [provider, ...rest] = ui.model.value.split("/");
    void call(() => page.session.facade.setModel({ provider, id: rest.join("/") }, CTX));
  });
  ui.thinking.addEventListener("change", () => call(() => page.session.facade.setThinking(ui.thinking.value, CTX)));
  // Relative times in the session list move on.
  setInterval(() => {
    ui.list.dataset.key = "";
    renderSessions();
  }, 60000);
}

async function createSession() {
  if (!page.server) return;
  const name = ui.newName.value.trim();
  const created = await call(() => page.server.management.create(name === "" ? {} : { name }, CTX));
  if (!created) return;
  ui.newName.value = "";
  await openSession(created.sessionId);
}

// A handle for tests and the curious (the page's own code can do all of this anyway): a
// raw `pi.session` call on this tab's attachment, bypassing the UI.
Object.defineProperty(globalThis, "batonPage", {
  value: Object.freeze({
    call: (member, ...args) =>
      page.client.request(page.client.attachment, { serviceId: "pi.session", member, args }).then(
        (result) => ({ ok: true, result }),
        (error) => ({ ok: false, code: error.code, message: error.message }),
      ),
    get connected() {
      return page.client?.connected === true;
    },
    get serverId() {
      return page.serverId;
    },
  }),
});

installUi();
void start();
