// baton-client → upstream pi-server.
//
// baton's Rust client (through baton-client-probe) drives the published upstream TypeScript
// server (pi-server 0.85.1) running real chord 0.85.1 services on a Unix socket. After every
// mutating step the probe's replica (the state baton rebuilt from one snapshot plus updates)
// must deep-equal upstream's authoritative provider state, sequences included, with no
// resynchronisation in between (a resync would hide a decoding bug behind a fresh snapshot).
// A tap on the socket decodes both directions with upstream's own decoders, so each step also
// checks which wire ops upstream actually sent.
//
//   node interop/suites/upstream-server.mjs        (BATON_CLIENT_PROBE = probe binary)

import assert from "node:assert/strict";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { deviation, Report } from "../lib/report.mjs";
import {
  defineService,
  expectedInstance,
  expectedReplica,
  implementation,
  makeSocketDir,
  SERVER_ID,
  SESSION_MANAGEMENT,
  startServer,
  TrackedState,
  UpstreamHost,
  Wire,
} from "../lib/upstream-server-host.mjs";
import { Probe, stateUpdate, subscriptionKind, updateOfType } from "../lib/upstream-server-probe.mjs";

const PROBE = process.env.BATON_CLIENT_PROBE
  ? resolve(process.env.BATON_CLIENT_PROBE)
  : fileURLToPath(new URL("../../target/debug/baton-client-probe", import.meta.url));
// How long a correct client may take to surface an event the server already sent.
const EVENT_GUARD_MS = 3000;

const report = new Report("upstream-server");

// ─── Services ────────────────────────────────────────────────────────────────

const OPS = defineService("baton.ops");
const LIFE = defineService("baton.life");
const KEYED = defineService("baton.keyed");
const SESSION = defineService("baton.session");

const cancelSeen = [];
let slowEntered;

function deferred() {
  let resolve_;
  const promise = new Promise((r) => {
    resolve_ = r;
  });
  return { promise, resolve: resolve_ };
}

// A method that only finishes when its request is cancelled.
async function slow(tag, context) {
  const signal = context?.abortSignal;
  assert.ok(signal, "upstream hands the handler an abort signal");
  slowEntered?.resolve(tag);
  return new Promise((_, reject) => {
    signal.addEventListener(
      "abort",
      () => {
        cancelSeen.push({ tag, reason: signal.reason });
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

const ops = implementation({
  doc: new TrackedState({ title: "", body: "", log: "", meta: {}, items: [], counters: {} }),
  list: new TrackedState([]),
  echo: async (value) => value,
  nothing: async () => undefined,
  slow,
});

function lifeImpl(label) {
  return implementation({
    counter: new TrackedState({ label, n: 0 }),
    get: async () => label,
  });
}

function keyedImpl(key) {
  return implementation({
    status: new TrackedState({ key, phase: "spawned", notes: [] }),
    ping: async (x) => `${key}:${x}`,
  });
}

function sessionImpl() {
  const transcript = new TrackedState({ items: [] });
  return implementation({
    transcript,
    say: async (text) => {
      transcript.state.items.push({ role: "user", text });
      transcript.publish();
      return transcript.sequence;
    },
    slowInSession: slow,
  });
}

const host = new UpstreamHost({
  serverServices: [
    { service: OPS, mode: "singleton" },
    { service: LIFE, mode: "singleton" },
    { service: KEYED, mode: "keyed" },
  ],
  sessionServices: [{ service: SESSION, mode: "singleton" }],
  sessionIds: ["s1", "s2", "s3"],
});
host.serverProvider.provide(OPS, ops.impl);
let life = lifeImpl("first");
host.serverProvider.provide(LIFE, life.impl);
let lifeAvailable = true;
const keyed = new Map(); // key → { impl, address, close, live }; upstream adds 1 to a key's generation per spawn
function spawnKeyed(key) {
  const impl = keyedImpl(key);
  const close = host.serverProvider.spawn(KEYED, key, impl.impl);
  const generation = (keyed.get(key)?.address.generation ?? 0) + 1;
  keyed.set(key, { impl, address: { key, generation }, close, live: true });
  return keyed.get(key);
}
const sessions = new Map(); // sessionId → implementation
function sessionState(sessionId) {
  let impl = sessions.get(sessionId);
  if (impl === undefined) {
    impl = sessionImpl();
    sessions.set(sessionId, impl);
    host.sessionProvider(sessionId).provide(SESSION, impl.impl);
  }
  return impl;
}
for (const id of ["s1", "s2", "s3"]) sessionState(id);

// ─── Expected replicas ───────────────────────────────────────────────────────

const expected = {
  ops: () => expectedReplica("baton.ops", "singleton", [expectedInstance(ops)]),
  life: () => expectedReplica("baton.life", "singleton", [expectedInstance(life, null, { cleared: !lifeAvailable })]),
  keyed: () =>
    expectedReplica(
      "baton.keyed",
      "keyed",
      [...keyed.values()].filter((k) => k.live).map((k) => expectedInstance(k.impl, k.address)),
    ),
  session: (id) => () => expectedReplica("baton.session", "singleton", [expectedInstance(sessionState(id))]),
};

// ─── Harness ─────────────────────────────────────────────────────────────────

const wire = new Wire();
const serverErrors = [];
const socketDir = await makeSocketDir();
let server;
let probe;

// Every wire op form upstream sent during the run: r, #, s:path, s:ref, s:short, …
const opForms = new Set();
function opForm(op) {
  const [verb] = op;
  if (verb === "r") return "r";
  if (verb === "#") return op[2].length === 0 ? "#:root" : "#";
  const short = { s: 2, d: 1, a: 2, t: 2, p: 4 }[verb];
  if (op.length === short) return `${verb}:short`;
  if (typeof op[1] === "number") return `${verb}:ref`;
  return verb === "p" && op[1].length === 0 ? "p:root" : `${verb}:path`;
}
function noteOps(wireOps) {
  for (const op of wireOps) opForms.add(opForm(op));
}

const outUpdates = (m) => m.direction === "out" && m.message?.type === "service_update";

async function replicaOf(name) {
  return (await probe.call("state", { name })).state;
}

// The first place two JSON values differ, for a one-line failure.
function firstDifference(actual, wanted, path = "$") {
  if (Object.is(actual, wanted)) return undefined;
  const kind = (v) => (Array.isArray(v) ? "array" : v === null ? "null" : typeof v);
  if (kind(actual) !== kind(wanted) || typeof actual !== "object" || actual === null) {
    const show = (v) => (typeof v === "string" && v.length > 80 ? `${JSON.stringify(v.slice(0, 80))}… (${v.length} units)` : JSON.stringify(v)?.slice(0, 200));
    if (typeof actual === "string" && typeof wanted === "string") {
      let i = 0;
      while (i < actual.length && actual[i] === wanted[i]) i++;
      return `${path}: strings differ at UTF-16 index ${i}: baton ${show(actual.slice(i))} vs upstream ${show(wanted.slice(i))} (lengths ${actual.length} vs ${wanted.length})`;
    }
    return `${path}: baton ${show(actual)} vs upstream ${show(wanted)}`;
  }
  if (Array.isArray(actual) && actual.length !== wanted.length) {
    const shared = Math.min(actual.length, wanted.length);
    for (let i = 0; i < shared; i++) {
      const d = firstDifference(actual[i], wanted[i], `${path}[${i}]`);
      if (d) return `${d} (array lengths ${actual.length} vs ${wanted.length})`;
    }
    return `${path}: array length baton ${actual.length} vs upstream ${wanted.length}`;
  }
  const keys = new Set([...Object.keys(actual), ...Object.keys(wanted)]);
  for (const key of keys) {
    if (!(key in actual)) return `${path}.${key}: missing in baton's replica`;
    if (!(key in wanted)) return `${path}.${key}: extra in baton's replica`;
    const d = firstDifference(actual[key], wanted[key], Array.isArray(actual) ? `${path}[${key}]` : `${path}.${key}`);
    if (d) return d;
  }
  return undefined;
}

function assertReplica(actual, wanted, what) {
  actual.instances.sort((a, b) => (a.instance?.key ?? "").localeCompare(b.instance?.key ?? ""));
  const difference = firstDifference(actual, wanted);
  if (difference !== undefined) {
    throw new assert.AssertionError({ message: `${what} diverged from upstream: ${difference}` });
  }
  assert.deepStrictEqual(actual, wanted, what);
}

async function assertConverged(name, expect, context = "") {
  assertReplica(await replicaOf(name), expect(), `replica ${name} ${context}`);
}

function assertNoResync(name, mark) {
  const bad = probe
    .subscriptionEvents(name, mark)
    .filter(
      (e) =>
        e.kind === "resyncing" || e.kind === "ended" || e.kind === "lagged" || (e.kind === "snapshot" && e.resynced),
    );
  assert.deepStrictEqual(bad, [], `subscription ${name} lost sync instead of applying the update`);
}

// Mutates a tracked state, publishes, waits until baton applied exactly that update, checks
// the replica, and returns the wire ops upstream sent for it.
async function step(name, tracked, member, mutate, expect, { key } = {}) {
  const pm = probe.mark();
  const wm = wire.mark();
  mutate(tracked.state);
  tracked.publish();
  const sequence = tracked.sequence;
  const frame = await wire.waitFor(
    (m) =>
      outUpdates(m) &&
      m.message.update.type === "state" &&
      m.message.update.member === member &&
      m.message.update.sequence === sequence &&
      (key === undefined || m.message.update.instance?.key === key),
    wm,
    { what: `${member} update #${sequence}` },
  );
  await probe.waitEvent(stateUpdate(name, member, sequence, key), pm, {
    timeoutMs: EVENT_GUARD_MS,
    what: `${name}.${member} update #${sequence}`,
  });
  assertNoResync(name, pm);
  await assertConverged(name, expect, `after ${member} #${sequence} ${JSON.stringify(frame.message.update.ops).slice(0, 300)}`);
  noteOps(frame.message.update.ops);
  return frame.message.update.ops;
}

// Runs a provider lifecycle change and waits for baton to apply the update of `type`.
async function lifecycle(name, type, change, expect) {
  const pm = probe.mark();
  const wm = wire.mark();
  change();
  const frame = await wire.waitFor((m) => outUpdates(m) && m.message.update.type === type, wm, { what: type });
  await probe.waitEvent(updateOfType(name, type), pm, { timeoutMs: EVENT_GUARD_MS, what: `${name} ${type}` });
  assertNoResync(name, pm);
  await assertConverged(name, expect, `after ${type}`);
  return frame.message.update;
}

const verbs = (wireOps) => wireOps.map(opForm);

async function subscribe(name, service, mode, target = "server") {
  const { state } = await probe.call("subscribe", { name, service, mode, target });
  return state;
}

async function attach(session) {
  const { target } = await probe.call("attach", { session });
  assert.equal(target.serverId, SERVER_ID);
  assert.equal(target.sessionId, session);
  assert.match(target.attachmentId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  // Attaching to the session already attached is a no-op upstream: the event may be older.
  await probe.waitEvent((e) => e.event === "attachment" && e.attachment?.attachmentId === target.attachmentId, 0, {
    what: "attachment event",
  });
  return target;
}

async function requestError(body) {
  const answer = await probe.send("request", body).answer;
  assert.ok(answer.error, `expected an error, got ${JSON.stringify(answer)}`);
  return answer.error;
}

// ─── Cases ───────────────────────────────────────────────────────────────────

await report.case("connect: handshake with the upstream server, serverId enforced", async () => {
  server = await startServer(host, socketDir.socket, wire, serverErrors);
  probe = new Probe(PROBE);
  const wrong = await probe.send("connect", {
    socket: socketDir.socket,
    serverId: "11111111-1111-4111-8111-111111111111",
  }).answer;
  assert.equal(wrong.error?.kind, "connect", "a hello from another serverId is refused");
  const { serverId } = await probe.call("connect", {
    socket: socketDir.socket,
    serverId: SERVER_ID,
    reconnect: { initialMs: 20, maxMs: 200 },
  });
  assert.equal(serverId, SERVER_ID);
});

await report.case("request: results, void, and upstream's error codes", async () => {
  const text = "naïve — 日本語 — 𝄞 — 👩‍👩‍👧";
  const echoed = await probe.call("request", { service: "baton.ops", member: "echo", args: [{ text, n: [1, 2.5, null] }] });
  assert.deepStrictEqual(echoed.result, { text, n: [1, 2.5, null] });
  const nothing = await probe.call("request", { service: "baton.ops", member: "nothing" });
  assert.equal(nothing.void, true, "a void handler answers ok without result");
  assert.equal(nothing.result, undefined);
  const cases = [
    [{ service: "baton.nope", member: "x" }, "service_not_allowed"],
    [{ service: "baton.ops", member: "missing" }, "service_member_not_found"],
    [{ service: "baton.ops", member: "doc" }, "service_member_mismatch"],
    [{ service: "baton.ops", member: "echo", instance: { key: "k", generation: 1 } }, "service_mode_mismatch"],
    [{ call: { serviceId: "baton.ops" } }, "invalid_request"],
  ];
  for (const [body, code] of cases) {
    const error = await requestError(body);
    assert.equal(error.kind, "server", JSON.stringify(error));
    assert.equal(error.code, code, JSON.stringify(body));
  }
});

await report.case("ops: snapshot, then s and d on nested objects, unicode keys and values", async () => {
  const state = await subscribe("ops", "baton.ops", "singleton");
  assertReplica(state, expected.ops(), "the first snapshot");
  let wireOps = await step(
    "ops",
    ops.members.doc,
    "doc",
    (s) => {
      s.title = "naïve — 日本語 — 𝄞 — 👩‍👩‍👧";
      s.meta.nested = { deep: { list: [1, { x: "y" }, [true, null]] }, "ключ 🔑": "значение" };
    },
    expected.ops,
  );
  assert.ok(verbs(wireOps).includes("s:path"), JSON.stringify(wireOps));
  wireOps = await step(
    "ops",
    ops.members.doc,
    "doc",
    (s) => {
      delete s.meta.nested.deep;
      s.meta.nested["ключ 🔑"] = "✓";
      s.meta.flag = false;
    },
    expected.ops,
  );
  assert.ok(verbs(wireOps).includes("d:path"), JSON.stringify(wireOps));
  // Same paths again: upstream now interns them (`#` on second use, then numeric refs).
  wireOps = await step(
    "ops",
    ops.members.doc,
    "doc",
    (s) => {
      s.meta.nested["ключ 🔑"] = "again";
      s.meta.flag = true;
    },
    expected.ops,
  );
  assert.ok(verbs(wireOps).includes("#") && verbs(wireOps).includes("s:ref"), JSON.stringify(wireOps));
});

await report.case("ops: text append a (inline, interned, long, astral) and splice t + short a", async () => {
  const doc = ops.members.doc;
  await step("ops", doc, "doc", (s) => {
    s.body = "Hello";
  }, expected.ops);
  let wireOps = await step("ops", doc, "doc", (s) => {
    s.body += ", world 🌍";
  }, expected.ops);
  assert.ok(verbs(wireOps).some((v) => v.startsWith("a:")), JSON.stringify(wireOps));
  wireOps = await step("ops", doc, "doc", (s) => {
    s.body += " — 𝄞𝄞 ";
  }, expected.ops);
  assert.ok(verbs(wireOps).includes("a:ref"), JSON.stringify(wireOps));
  // A long append: 40k UTF-16 units with astral characters throughout.
  const chunk = Array.from({ length: 4000 }, (_, i) => `${i % 10}😀é`).join("");
  wireOps = await step("ops", doc, "doc", (s) => {
    s.body += chunk;
  }, expected.ops);
  assert.deepStrictEqual(verbs(wireOps), ["a:ref"], JSON.stringify(wireOps).slice(0, 200));
  // A rolling window: drop a prefix holding astral characters, append a tail. Upstream sends
  // `t` (a UTF-16 count) followed by the short form of `a` on the same path.
  await step("ops", doc, "doc", (s) => {
    s.log = Array.from({ length: 12 }, (_, i) => `line ${i} ${"🎉".repeat(i)} ${String.fromCharCode(0x41 + i)}\n`).join("");
  }, expected.ops);
  wireOps = await step("ops", doc, "doc", (s) => {
    const lines = s.log.split("\n");
    s.log = `${lines.slice(4).join("\n")}line 12 👩‍👩‍👧 M\n`;
  }, expected.ops);
  assert.ok(verbs(wireOps).some((v) => v.startsWith("t:")), JSON.stringify(wireOps));
  assert.ok(verbs(wireOps).includes("a:short"), JSON.stringify(wireOps));
  // A pure trim: `t` alone.
  wireOps = await step("ops", doc, "doc", (s) => {
    s.log = s.log.slice(s.log.indexOf("line 7"));
  }, expected.ops);
  assert.deepStrictEqual(verbs(wireOps).filter((v) => v !== "#"), ["t:ref"], JSON.stringify(wireOps));
});

await report.case("ops: a t count that cuts a surrogate pair (documented deviation)", async () => {
  const doc = ops.members.doc;
  const saved = doc.value.log;
  await step("ops", doc, "doc", (s) => {
    s.log = "ab😀cd";
  }, expected.ops);
  // Upstream's JS replica keeps the orphaned low surrogate; CBOR text cannot carry one, and
  // baton keeps one U+FFFD in its place (same UTF-16 length, so later counts stay aligned).
  const wellFormed = () => {
    const replica = expected.ops();
    const value = replica.instances[0].states.doc.value;
    value.log = value.log.toWellFormed();
    return replica;
  };
  const wireOps = await step("ops", doc, "doc", (s) => {
    s.log = s.log.slice(3);
  }, wellFormed);
  assert.deepStrictEqual(wireOps.filter((op) => op[0] !== "#").map((op) => op.at(-1)), [3], JSON.stringify(wireOps));
  assert.equal(doc.value.log, "\ude00cd", "upstream holds a lone surrogate");
  // The next trim drops the orphan: both sides agree exactly again.
  await step("ops", doc, "doc", (s) => {
    s.log = `${s.log.slice(1)}ef`;
  }, expected.ops);
  assert.equal(doc.value.log, "cdef");
  await step("ops", doc, "doc", (s) => {
    s.log = saved;
  }, expected.ops);
  return deviation("§12 Strings: a t that cuts a surrogate pair leaves U+FFFD in baton's replica");
});

await report.case("ops: array push p, splice, truncation; many distinct paths interned", async () => {
  const doc = ops.members.doc;
  let wireOps = await step("ops", doc, "doc", (s) => {
    s.items.push({ id: 1, label: "one" }, { id: 2, label: "två" });
  }, expected.ops);
  assert.ok(verbs(wireOps).includes("p:path"), JSON.stringify(wireOps));
  wireOps = await step("ops", doc, "doc", (s) => {
    s.items.push({ id: 3, label: "𝟛" });
    s.items[0].label = "uno";
  }, expected.ops);
  assert.ok(verbs(wireOps).includes("p:ref") || verbs(wireOps).includes("p:path"), JSON.stringify(wireOps));
  await step("ops", doc, "doc", (s) => {
    s.items.splice(1, 1);
  }, expected.ops);
  await step("ops", doc, "doc", (s) => {
    s.items.unshift({ id: 0, label: "zero" });
    s.items[2].tags = ["a", "b"];
  }, expected.ops);
  await step("ops", doc, "doc", (s) => {
    s.items.length = 1;
  }, expected.ops);
  await step("ops", doc, "doc", (s) => {
    s.items.length = 0;
  }, expected.ops);
  // 60 distinct paths: inline on first use, defined with `#` on second, references after.
  await step("ops", doc, "doc", (s) => {
    for (let i = 0; i < 60; i++) s.counters[`k${i}`] = { n: i, name: `名前${i}` };
  }, expected.ops);
  for (let round = 1; round <= 3; round++) {
    wireOps = await step("ops", doc, "doc", (s) => {
      for (let i = 0; i < 60; i++) s.counters[`k${i}`].n = i + round * 100;
    }, expected.ops);
  }
  const defs = wireOps.filter((op) => op[0] === "#").length;
  const refs = wireOps.filter((op) => op[0] === "s" && typeof op[1] === "number").length;
  assert.equal(defs, 0, "by the third round every path is already defined");
  assert.equal(refs, 60, JSON.stringify(wireOps).slice(0, 300));
});

await report.case("ops: array root — p at the root, `#` for the root path, r replaces the root", async () => {
  const list = ops.members.list;
  let wireOps = await step("ops", list, "list", (s) => {
    s.push("a", { b: "😀" });
  }, expected.ops);
  assert.deepStrictEqual(verbs(wireOps), ["p:root"], JSON.stringify(wireOps));
  wireOps = await step("ops", list, "list", (s) => {
    s.push("c");
  }, expected.ops);
  assert.deepStrictEqual(verbs(wireOps), ["#:root", "p:ref"], JSON.stringify(wireOps));
  wireOps = await step("ops", list, "list", (s) => {
    s.splice(0, s.length, "fresh", ["nested", { deep: true }]);
  }, expected.ops);
  assert.deepStrictEqual(verbs(wireOps), ["r"], JSON.stringify(wireOps));
  // After `r` upstream's encoder forgets its ids: the root path is inline again, then
  // re-defined as id 0.
  wireOps = await step("ops", list, "list", (s) => {
    s.push("after-r");
  }, expected.ops);
  assert.deepStrictEqual(verbs(wireOps), ["p:root"], JSON.stringify(wireOps));
  wireOps = await step("ops", list, "list", (s) => {
    s.push("again");
  }, expected.ops);
  assert.deepStrictEqual(wireOps.slice(0, 1), [["#", 0, []]], JSON.stringify(wireOps));
  await step("ops", list, "list", (s) => {
    s[1][1].deep = "𝄞";
    s.pop();
  }, expected.ops);
});

await report.case("ops: a second subscription to one service, a burst of updates, then unsubscribe", async () => {
  const state = await subscribe("ops2", "baton.ops", "singleton");
  assertReplica(state, expected.ops(), "a late subscriber's snapshot");
  const doc = ops.members.doc;
  const pm = probe.mark();
  // 300 publishes back to back, no waiting in between: both replicas must land on the last.
  for (let i = 0; i < 300; i++) {
    doc.state.body += `${i}·`;
    doc.state.counters[`k${i % 60}`].n = i;
    if (i % 7 === 0) doc.state.items.push({ id: 100 + i, label: `burst ${i} 😀` });
    if (i % 11 === 0 && doc.state.items.length > 2) doc.state.items.splice(1, 1);
    if (i % 13 === 0) doc.state.log = `${doc.state.log.slice(doc.state.log.indexOf("\n") + 1)}burst ${i} 🎉\n`;
    doc.publish();
  }
  for (const name of ["ops", "ops2"]) {
    await probe.waitEvent(stateUpdate(name, "doc", doc.sequence), pm, {
      timeoutMs: EVENT_GUARD_MS,
      what: `${name} burst end`,
    });
    const bad = probe
      .subscriptionEvents(name, pm)
      .filter((e) => e.kind === "resyncing" || e.kind === "ended" || (e.kind === "snapshot" && e.resynced));
    assert.deepStrictEqual(bad, [], `${name} lost sync during the burst`);
    await assertConverged(name, expected.ops, "after the burst");
  }
  const wm = wire.mark();
  await probe.call("unsubscribe", { name: "ops2" });
  const unsubscribe = await wire.waitFor(
    (m) => m.direction === "in" && m.message?.type === "request" && m.message.call?.member === "unsubscribe",
    wm,
    { what: "unsubscribe request" },
  );
  const answered = await wire.waitFor(
    (m) => m.direction === "out" && m.message?.type === "response" && m.message.id === unsubscribe.message.id,
    wm,
    { what: "unsubscribe response" },
  );
  assert.equal(answered.message.ok, true, JSON.stringify(answered.message));
  // The remaining subscription still tracks upstream exactly.
  await step("ops", doc, "doc", (s) => {
    s.title = "after unsubscribe";
  }, expected.ops);
  const stale = wire
    .since(wm)
    .filter((m) => outUpdates(m) && m.message.subscriptionId === unsubscribe.message.call.args[0]);
  assert.deepStrictEqual(stale, [], "upstream stopped publishing to the unsubscribed id");
});

await report.case("keyed: snapshot with instances, spawned, per-instance updates, closed, respawn", async () => {
  spawnKeyed("alpha");
  const state = await subscribe("keyed", "baton.keyed", "keyed");
  assertReplica(state, expected.keyed(), "the keyed snapshot");
  await lifecycle("keyed", "spawned", () => spawnKeyed("beta"), expected.keyed);
  const beta = keyed.get("beta");
  await step("keyed", beta.impl.members.status, "status", (s) => {
    s.phase = "running";
    s.notes.push("β started 🚀");
  }, expected.keyed, { key: "beta" });
  const alpha = keyed.get("alpha");
  await step("keyed", alpha.impl.members.status, "status", (s) => {
    s.phase = "running";
  }, expected.keyed, { key: "alpha" });
  const ping = await probe.call("request", {
    service: "baton.keyed",
    member: "ping",
    args: ["x"],
    instance: { key: "beta", generation: 1 },
  });
  assert.equal(ping.result, "beta:x");
  await lifecycle(
    "keyed",
    "closed",
    () => {
      alpha.close();
      alpha.live = false;
    },
    expected.keyed,
  );
  await lifecycle("keyed", "spawned", () => spawnKeyed("alpha"), expected.keyed);
  assert.equal(keyed.get("alpha").address.generation, 2);
  const stale = await requestError({
    service: "baton.keyed",
    member: "ping",
    args: [1],
    instance: { key: "alpha", generation: 1 },
  });
  assert.equal(stale.code, "service_stale_instance");
  await step("keyed", keyed.get("alpha").impl.members.status, "status", (s) => {
    s.notes.push("second life");
  }, expected.keyed, { key: "alpha" });
});

await report.case("singleton lifecycle: replaced, unavailable, and back", async () => {
  const state = await subscribe("life", "baton.life", "singleton");
  assertReplica(state, expected.life(), "the life snapshot");
  await step("life", life.members.counter, "counter", (s) => {
    s.n += 1;
  }, expected.life);
  const replaced = lifeImpl("second");
  const update = await lifecycle(
    "life",
    "replaced",
    () => {
      host.serverProvider.replace(LIFE, replaced.impl);
      life = replaced;
    },
    expected.life,
  );
  assert.equal(update.snapshot.members.find((m) => m.name === "counter").sequence, 0);
  await step("life", life.members.counter, "counter", (s) => {
    s.n = 42;
  }, expected.life);
  await lifecycle(
    "life",
    "unavailable",
    () => {
      host.serverProvider.withdraw(LIFE);
      lifeAvailable = false;
    },
    expected.life,
  );
  const gone = await requestError({ service: "baton.life", member: "get" });
  assert.equal(gone.code, "service_not_found");
  const third = lifeImpl("third");
  await lifecycle(
    "life",
    "replaced",
    () => {
      host.serverProvider.replace(LIFE, third.impl);
      life = third;
      lifeAvailable = true;
    },
    expected.life,
  );
  await step("life", life.members.counter, "counter", (s) => {
    s.label = "third ✓";
  }, expected.life);
  assert.equal((await probe.call("request", { service: "baton.life", member: "get" })).result, "third");
});

await report.case("session: attach, subscribe a session service, session requests update it", async () => {
  await attach("s1");
  const state = await subscribe("s1", "baton.session", "singleton", "session");
  assertReplica(state, expected.session("s1")(), "the session snapshot");
  const pm = probe.mark();
  const said = await probe.call("request", { target: "session", service: "baton.session", member: "say", args: ["hi 👋"] });
  const transcript = sessionState("s1").members.transcript;
  assert.equal(said.result, transcript.sequence);
  await probe.waitEvent(stateUpdate("s1", "transcript", transcript.sequence), pm, { timeoutMs: EVENT_GUARD_MS });
  assertNoResync("s1", pm);
  await assertConverged("s1", expected.session("s1"));
  await step("s1", transcript, "transcript", (s) => {
    s.items[0].text += " there";
  }, expected.session("s1"));
});

// The server releasing the attachment (detach, removal, termination) is only visible as
// `attachment: null`; the session-scoped subscription then receives nothing ever again, so a
// correct client ends it with a reason instead of leaving a replica that silently goes stale.
async function assertSessionSubscriptionEnds(name, pm, how, reasonKind, { attachment = null } = {}) {
  await probe.waitEvent((e) => e.event === "attachment" && e.attachment?.sessionId === attachment?.sessionId, pm, {
    what: `attachment ${attachment?.sessionId ?? "null"}`,
  });
  const ended = await probe
    .waitEvent(subscriptionKind(name, "ended"), pm, {
      timeoutMs: EVENT_GUARD_MS,
      what: `subscription ${name} ending after ${how}`,
    })
    .catch(() => {
      const events = probe.subscriptionEvents(name, pm).map((e) => e.kind);
      const failure = new Error(
        `baton left session subscription ${name} live after ${how} (attachment now ` +
          `${attachment?.sessionId ?? "null"}): expected ` +
          `SubscriptionEvent::Ended with a reason within ${EVENT_GUARD_MS} ms; its events since: ${JSON.stringify(events)}`,
      );
      failure.stack = failure.message;
      throw failure;
    });
  assert.equal(typeof ended.reason, "string");
  assert.ok(ended.reason.length > 0, "the end carries a reason");
  assert.equal(ended.endReason?.kind, reasonKind, JSON.stringify(ended));
  if (attachment !== null) assert.equal(ended.endReason.sessionId, attachment.sessionId);
  // An ended subscription shows no state rather than a stale one.
  const { state } = await probe.call("state", { name });
  assert.deepStrictEqual(
    { hydrated: state.hydrated, instances: state.instances },
    { hydrated: false, instances: [] },
    "the ended replica is emptied",
  );
}

await report.case("session detach: upstream releases the attachment; the session subscription ends", async () => {
  const releases = host.attachmentReleases;
  const pm = probe.mark();
  const wm = wire.mark();
  await probe.call("detach");
  assert.equal(host.attachmentReleases, releases + 1, "upstream released the lease");
  const nullFrame = wire.since(wm).find((m) => m.direction === "out" && m.message?.type === "attachment");
  assert.deepStrictEqual(nullFrame?.message, { type: "attachment", attachment: null });
  const after = await requestError({ target: "session", service: "baton.session", member: "say", args: ["late"] });
  assert.equal(after.kind, "not_attached", "a session call after detach never reaches the server");
  const sent = wire.since(wm).filter((m) => m.direction === "in" && m.message?.call?.member === "say");
  assert.deepStrictEqual(sent, []);
  try {
    await assertSessionSubscriptionEnds("s1", pm, "detach", "detached");
  } finally {
    await probe.call("unsubscribe", { name: "s1" }).catch(() => {});
  }
});

await report.case("session remove: prepareSessionRemoval releases the attachment; the subscription ends", async () => {
  await attach("s2");
  await subscribe("s2", "baton.session", "singleton", "session");
  const pm = probe.mark();
  const wm = wire.mark();
  await probe.call("request", { service: SESSION_MANAGEMENT, member: "remove", args: ["s2"] });
  const frames = wire.since(wm).filter((m) => m.direction === "out");
  const nullAt = frames.findIndex((m) => m.message?.type === "attachment" && m.message.attachment === null);
  const responseAt = frames.findIndex((m) => m.message?.type === "response");
  assert.ok(nullAt >= 0 && nullAt < responseAt, "upstream sends attachment:null before the remove response");
  const again = await requestError({ service: SESSION_MANAGEMENT, member: "attach", args: ["s2"] });
  assert.equal(again.code, "session_not_found");
  try {
    await assertSessionSubscriptionEnds("s2", pm, "session removal", "released");
  } finally {
    await probe.call("unsubscribe", { name: "s2" }).catch(() => {});
  }
});

await report.case("session terminated: the routed handle dies; the subscription ends", async () => {
  await attach("s1");
  await subscribe("s1t", "baton.session", "singleton", "session");
  const pm = probe.mark();
  const handle = host.handles.filter((h) => h.sessionId === "s1").at(-1);
  handle.terminate(new Error("session process crashed"));
  try {
    await assertSessionSubscriptionEnds("s1t", pm, "session termination", "released");
  } finally {
    await probe.call("unsubscribe", { name: "s1t" }).catch(() => {});
  }
});

await report.case("session switch: attaching elsewhere releases the old lease; its subscription ends", async () => {
  // Upstream releases the previous attachment without publishing null and then announces the
  // new one, so the old session's subscriptions are dead on the server from that moment.
  const first = await attach("s1");
  await subscribe("sw", "baton.session", "singleton", "session");
  const releases = host.attachmentReleases;
  const pm = probe.mark();
  const wm = wire.mark();
  const second = await attach("s3");
  assert.notEqual(second.attachmentId, first.attachmentId);
  assert.equal(host.attachmentReleases, releases + 1, "upstream released the s1 lease");
  const frames = wire.since(wm).filter((m) => m.direction === "out" && m.message?.type === "attachment");
  assert.deepStrictEqual(
    frames.map((m) => m.message.attachment?.sessionId ?? null),
    ["s3"],
    "a switch publishes only the new attachment",
  );
  try {
    await assertSessionSubscriptionEnds("sw", pm, "attaching to s3", "attached_elsewhere", { attachment: second });
  } finally {
    await probe.call("unsubscribe", { name: "sw" }).catch(() => {});
  }
});

await report.case("cancel: upstream's handler sees the cancel on its abort signal; the probe gets cancelled", async () => {
  for (const target of ["server", "session"]) {
    if (target === "session") await attach("s3");
    slowEntered = deferred();
    const tag = `cancel-${target}`;
    const wm = wire.mark();
    const seen = cancelSeen.length;
    const service = target === "server" ? "baton.ops" : "baton.session";
    const member = target === "server" ? "slow" : "slowInSession";
    const { id, answer } = probe.send("request", { target, service, member, args: [tag] });
    assert.equal(await slowEntered.promise, tag, "the handler started");
    await probe.call("cancel", { request: id });
    const result = await answer;
    assert.equal(result.error?.kind, "cancelled", JSON.stringify(result));
    const request = await wire.waitFor((m) => m.direction === "in" && m.message?.type === "request" && m.message.call?.member === member, wm);
    const cancel = await wire.waitFor((m) => m.direction === "in" && m.message?.type === "cancel", wm, { what: "cancel" });
    assert.equal(cancel.message.id, request.message.id, "the cancel names the request");
    assert.deepStrictEqual(cancel.message.target, request.message.target, "the cancel repeats the request's target");
    const response = await wire.waitFor(
      (m) => m.direction === "out" && m.message?.type === "response" && m.message.id === request.message.id,
      wm,
      { what: "the cancelled response" },
    );
    assert.deepStrictEqual(response.message.error, { code: "cancelled", message: "RPC request cancelled" });
    assert.equal(cancelSeen.length, seen + 1);
    assert.equal(cancelSeen.at(-1).tag, tag);
    assert.equal(cancelSeen.at(-1).reason?.name, "AbortError");
    assert.equal(cancelSeen.at(-1).reason?.message, "RPC request cancelled");
  }
  // The connection is still healthy after the late cancelled response.
  assert.equal((await probe.call("request", { service: "baton.ops", member: "echo", args: [1] })).result, 1);
});

await report.case("reconnect: server restarted on the same socket; re-attach, re-subscribe, converge", async () => {
  // Attached to s3 (from the cancel case); a session subscription beside the server ones.
  const before = (await probe.call("attach", { session: "s3" })).target;
  await subscribe("s3", "baton.session", "singleton", "session");
  await probe.call("request", { target: "session", service: "baton.session", member: "say", args: ["before"] });
  const names = ["ops", "keyed", "life", "s3"];
  const pm = probe.mark();
  await server.close();
  await probe.waitEvent((e) => e.event === "status" && e.status === "reconnecting", pm, { what: "reconnecting" });
  for (const name of names) {
    await probe.waitEvent(subscriptionKind(name, "resyncing"), pm, { what: `${name} resyncing` });
  }
  // Upstream state moves on while baton is away.
  ops.members.doc.state.title = "changed while down";
  ops.members.doc.state.counters.k0.n = -1;
  ops.members.doc.publish();
  ops.members.list.state.push("while down");
  ops.members.list.publish();
  spawnKeyed("gamma");
  keyed.get("beta").close();
  keyed.get("beta").live = false;
  life.members.counter.state.n = 7;
  life.members.counter.publish();
  sessionState("s3").members.transcript.state.items.push({ role: "system", text: "while down" });
  sessionState("s3").members.transcript.publish();
  const restartMark = probe.mark();
  server = await startServer(host, socketDir.socket, wire, serverErrors);
  await probe.waitEvent((e) => e.event === "status" && e.status === "connected", restartMark, {
    timeoutMs: 10000,
    what: "connected again",
  });
  const reattached = await probe.waitEvent(
    (e) => e.event === "attachment" && e.attachment?.sessionId === "s3",
    restartMark,
    { what: "re-attached to s3" },
  );
  assert.notEqual(reattached.attachment.attachmentId, before.attachmentId, "the new server granted a new attachment");
  for (const name of names) {
    const snap = await probe.waitEvent(subscriptionKind(name, "snapshot"), restartMark, {
      what: `${name} fresh snapshot`,
    });
    assert.equal(snap.resynced, true);
  }
  await assertConverged("ops", expected.ops, "after reconnect");
  await assertConverged("keyed", expected.keyed, "after reconnect");
  await assertConverged("life", expected.life, "after reconnect");
  await assertConverged("s3", expected.session("s3"), "after reconnect");
  // And updates flow on the new subscriptions, through a fresh op dictionary.
  await step("ops", ops.members.doc, "doc", (s) => {
    s.body += " (reconnected)";
    s.counters.k1.n = -2;
  }, expected.ops);
  await step("keyed", keyed.get("gamma").impl.members.status, "status", (s) => {
    s.phase = "γ";
  }, expected.keyed, { key: "gamma" });
  const pm2 = probe.mark();
  await probe.call("request", { target: "session", service: "baton.session", member: "say", args: ["after"] });
  const transcript = sessionState("s3").members.transcript;
  await probe.waitEvent(stateUpdate("s3", "transcript", transcript.sequence), pm2, { timeoutMs: EVENT_GUARD_MS });
  await assertConverged("s3", expected.session("s3"), "after a post-reconnect session update");
});

await report.case("reconnect: the session was removed while away; re-attach fails and its subscription ends", async () => {
  const pm = probe.mark();
  await server.close();
  await probe.waitEvent((e) => e.event === "status" && e.status === "reconnecting", pm, { what: "reconnecting" });
  host.sessionIds.delete("s3");
  ops.members.doc.state.title = "second restart";
  ops.members.doc.publish();
  const restartMark = probe.mark();
  server = await startServer(host, socketDir.socket, wire, serverErrors);
  const ended = await probe.waitEvent(subscriptionKind("s3", "ended"), restartMark, {
    timeoutMs: 10000,
    what: "s3 ending after the failed re-attach",
  });
  assert.equal(ended.endReason?.kind, "reattach_failed", JSON.stringify(ended));
  assert.equal(ended.endReason.error?.code, "session_not_found", JSON.stringify(ended));
  // Server-scope subscriptions are unaffected: they resync and keep tracking upstream.
  await probe.waitEvent(subscriptionKind("ops", "snapshot"), restartMark, { what: "ops fresh snapshot" });
  await assertConverged("ops", expected.ops, "after the second restart");
  await step("ops", ops.members.doc, "doc", (s) => {
    s.title = "still tracking";
  }, expected.ops);
  const late = await requestError({ target: "session", service: "baton.session", member: "say", args: ["x"] });
  assert.equal(late.kind, "not_attached");
  await probe.call("unsubscribe", { name: "s3" });
});

await report.case("wire: every op form chord 0.85.1's encoder emits was exercised", async () => {
  // Upstream's tracker emits one op per path per batch except `t` followed by `a`, so `a` is
  // the only short form it produces; `#` appears for object paths and for the root path.
  const wanted = ["r", "#", "#:root", "s:path", "s:ref", "d:path", "a:path", "a:ref", "a:short", "t:ref", "p:path", "p:ref", "p:root"];
  if (process.env.BATON_INTEROP_VERBOSE) console.error(`op forms seen: ${[...opForms].sort().join(" ")}`);
  const missing = wanted.filter((form) => !opForms.has(form));
  assert.deepStrictEqual(missing, [], `seen: ${[...opForms].sort().join(" ")}`);
});

// ─── Teardown ────────────────────────────────────────────────────────────────

const status = probe ? await probe.close() : undefined;
await server?.close().catch(() => {});
await socketDir.remove();
if (status && status.code !== 0) {
  console.log(`probe exited with ${status.code ?? status.signal}`);
  process.exitCode = 1;
}
report.finish();
