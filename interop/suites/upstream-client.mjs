// Interop suite "upstream client → baton-host": the published upstream TypeScript client
// (@earendil-works/pi-client + chord 0.85.1, from interop/node_modules) drives a real
// `baton-host serve` process started here on a temporary sessions directory and a temporary
// `unix:///DIR` listener.
//
//   node interop/suites/upstream-client.mjs        (from the repo root)
//   BATON_HOST_BIN=path/to/baton-host node interop/suites/upstream-client.mjs
//
// Exits non-zero when a case fails. Waiting is always on events (wire frames, replica
// updates, promises); the only timers are the reporter's hang guards.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { createRemoteServiceBinding, createServiceUnsubscribeCall, defineService } from "@earendil-works/chord";
import { BACKGROUND_CONTEXT, withAbortSignal } from "@earendil-works/chord/context";
import { Client, createClientServiceTransport, ServerError } from "@earendil-works/pi-client";
import { discoverUnixServers } from "@earendil-works/pi-client/unix";
import { ProtocolValidationError } from "@earendil-works/pi-protocol";

import { Report } from "../lib/report.mjs";
import { startHost } from "../lib/upstream-client-host.mjs";
import { RawConnection, tappedUnixTransport } from "../lib/upstream-client-wire.mjs";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = (() => {
  const fromEnv = process.env.BATON_HOST_BIN;
  if (fromEnv === undefined || fromEnv === "") return join(REPO, "target/debug/baton-host");
  return isAbsolute(fromEnv) ? fromEnv : resolve(REPO, fromEnv);
})();

const CTX = BACKGROUND_CONTEXT;
const MANAGEMENT = defineService("pi.session-management");
const DIRECTORY = defineService("pi.session-directory");
const MODELS = defineService("pi.models");
const SESSION = defineService("pi.session");
const SCRIPTED_MODEL = { provider: "scripted", id: "default", name: "Scripted (offline demo)", default: true };

// ---------------------------------------------------------------------------------------------
// helpers

// A JSON value detached from chord's frozen replica objects, for deep comparison.
const plain = (value) => structuredClone(value);

async function connect(host, options = {}) {
  const tap = tappedUnixTransport(host.socketPath);
  const listenerErrors = [];
  const client = await Client.connect({
    serverId: options.serverId ?? host.serverId,
    transportFactory: tap.factory,
    onListenerError: (error) => listenerErrors.push(error),
  });
  const states = [];
  client.onConnectionStateChange((change) => states.push(change));
  return { client, tap, states, listenerErrors };
}

function serverTarget(client) {
  return { serverId: client.serverId };
}

// Facades for the three server-scope services over one client.
async function serverFacades(client) {
  const errors = [];
  const binding = createRemoteServiceBinding({
    services: [MANAGEMENT, DIRECTORY, MODELS],
    transport: createClientServiceTransport(client, () => serverTarget(client)),
    onError: (error) => errors.push(error),
  });
  const facades = {
    binding,
    errors,
    management: binding.use(MANAGEMENT),
    directory: binding.use(DIRECTORY),
    models: binding.use(MODELS),
  };
  await binding.ready(CTX);
  return facades;
}

// A `pi.session` facade routed to the client's current attachment (or a fixed target).
async function sessionFacade(client, getTarget = () => client.attachment) {
  const errors = [];
  const binding = createRemoteServiceBinding({
    services: [SESSION],
    transport: createClientServiceTransport(client, getTarget),
    onError: (error) => errors.push(error),
  });
  const session = binding.use(SESSION);
  await binding.ready(CTX);
  return { binding, errors, session };
}

// Resolves with the replica's value once `predicate` holds (now or after a later update).
function waitForState(member, predicate) {
  return new Promise((resolvePromise) => {
    let done = false;
    let stop;
    stop = member.subscribe((value) => {
      if (done || !predicate(value)) return;
      done = true;
      resolvePromise(value);
      if (stop) queueMicrotask(stop);
    });
    if (done) queueMicrotask(stop);
  });
}

// A fresh snapshot of `serviceId` at `target` through a new subscription: {members, state}.
async function freshSnapshot(client, target, serviceId) {
  const subscription = await client.subscribeService(target, serviceId, "singleton", () => {});
  try {
    const snapshot = subscription.snapshot;
    assert.equal(snapshot.serviceId, serviceId);
    assert.equal(snapshot.mode, "singleton");
    assert.equal(snapshot.instances.length, 1);
    const members = snapshot.instances[0].members;
    const state = {};
    for (const member of members) {
      if (member.kind !== "state") continue;
      assert.equal(member.ops.length, 1, `${serviceId}.${member.name} snapshot is one base op`);
      assert.equal(member.ops[0][0], "r");
      state[member.name] = plain(member.ops[0][1]);
    }
    return { members, state };
  } finally {
    await subscription.dispose();
  }
}

async function expectServerError(promise, code, message) {
  let error;
  let resultNote = "";
  try {
    resultNote = ` with ${JSON.stringify(await promise) ?? "no result"}`;
  } catch (caught) {
    error = caught;
  }
  assert.ok(error !== undefined, `expected ${code}, but the call succeeded${resultNote}`);
  assert.ok(error instanceof ServerError, `expected a ServerError ${code}, got ${error?.name}: ${error?.message}`);
  const actual = { code: error.code, message: error.message };
  const expected = { code, message: message ?? error.message };
  assert.deepEqual(actual, expected, `expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
  return error;
}

function lastItem(state) {
  return state.transcript[state.transcript.length - 1];
}

function textOf(item) {
  return item.content
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
}

const settled = (state) =>
  state.phase === "idle" &&
  state.transcript.length > 0 &&
  lastItem(state).role === "assistant" &&
  lastItem(state).status !== "streaming";

// The scripted model's direct answer to a prompt without a tool request.
const scriptedAnswer = (prompt) =>
  `You said: ${prompt.trim()}. I am the scripted model: ask me to run \`a command\` or to read a file.`;

// The latest request the client sent whose call matches, from the wire tap.
function sentRequest(tap, predicate, from = 0) {
  return tap.log.waitFor((e) => e.dir === "out" && e.message.type === "request" && predicate(e.message.call), { from });
}

// A session created, attached and bound: {sessionId, target, facade}.
async function attachedSession(client, server, options = { name: "case" }) {
  const { sessionId } = await server.management.create(options, CTX);
  await server.management.attach(sessionId, CTX);
  assert.equal(client.attachment?.sessionId, sessionId);
  const facade = await sessionFacade(client);
  return { sessionId, target: client.attachment, facade };
}

// Blocks the Node event loop (nothing is read from any socket) until `condition()` holds,
// polling every few ms without spinning; bounded by `limitMs` as a hang guard.
function blockEventLoopUntil(condition, limitMs) {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const deadline = Date.now() + limitMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    Atomics.wait(cell, 0, 0, 5);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// the suite

const report = new Report("upstream-client");
const host = await startHost(BIN);
const opened = [];
const track = (connection) => {
  opened.push(connection.client);
  return connection;
};

try {
  // 1
  await report.case("discoverUnixServers finds baton-host with its serverId", async () => {
    const routes = await discoverUnixServers({ directory: host.socketDir });
    assert.deepEqual(routes, [{ serverId: host.serverId, path: join(host.socketDir, `${host.serverId}.sock`) }]);
    assert.equal(routes[0].path, host.socketPath);
  });

  // 2
  await report.case("Client.connect: the expected serverId connects, another one is refused", async () => {
    const { client, tap } = await connect(host);
    try {
      assert.equal(client.connectionState, "connected");
      assert.deepEqual(client.hello, { type: "hello", version: 8, serverId: host.serverId });
      assert.deepEqual(tap.log.items[0], { dir: "out", message: { type: "hello", version: 8 }, connection: 1 });
    } finally {
      await client.dispose();
    }
    const other = randomUUID();
    await assert.rejects(
      connect(host, { serverId: other }),
      (error) =>
        error instanceof ProtocolValidationError &&
        error.message === `Connected server ${JSON.stringify(host.serverId)} does not match ${JSON.stringify(other)}`,
    );
    const again = await connect(host);
    assert.equal(again.client.connected, true);
    await again.client.dispose();
  });

  const main = track(await connect(host));
  const server = await serverFacades(main.client);

  // 3
  await report.case("catalogue: server services on the server target, pi.session on a session target", async () => {
    const catalogue = await main.client.serviceCatalogue(serverTarget(main.client));
    const byId = (a, b) => a.serviceId.localeCompare(b.serviceId);
    assert.deepEqual([...catalogue].sort(byId), [
      { serviceId: "pi.models", mode: "singleton" },
      { serviceId: "pi.session-directory", mode: "singleton" },
      { serviceId: "pi.session-management", mode: "singleton" },
    ]);
    const { sessionId } = await server.management.create({ name: "catalogue" }, CTX);
    await server.management.attach(sessionId, CTX);
    const sessionCatalogue = await main.client.serviceCatalogue(main.client.attachment);
    assert.deepEqual(sessionCatalogue, [{ serviceId: "pi.session", mode: "singleton" }]);
    await server.management.detach(CTX);
    assert.equal(main.client.attachment, undefined);
  });

  // 4
  await report.case("facade pi.models: list and the models state", async () => {
    assert.deepEqual(plain(server.models.models.value), [SCRIPTED_MODEL]);
    assert.deepEqual(await server.models.list(CTX), [SCRIPTED_MODEL]);
    const { members, state } = await freshSnapshot(main.client, serverTarget(main.client), "pi.models");
    assert.deepEqual(
      members.map((m) => [m.name, m.kind, m.sequence]),
      [
        ["list", "method", undefined],
        ["models", "state", 0],
      ],
    );
    assert.deepEqual(state.models, plain(server.models.models.value));
  });

  await report.case("facade pi.session-management: create, attach, detach, remove", async () => {
    const cwd = REPO;
    const { sessionId } = await server.management.create(
      { name: "mgmt", cwd, model: "scripted/default", thinkingLevel: "low" },
      CTX,
    );
    assert.match(sessionId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(await server.management.create([], CTX).catch((e) => e.code), "invalid_request");
    assert.equal(await server.management.attach(sessionId, CTX), undefined);
    assert.equal(main.client.attachment.sessionId, sessionId);
    assert.equal(await server.management.detach(CTX), undefined);
    assert.equal(main.client.attachment, undefined);
    assert.equal(await server.management.remove(sessionId, CTX), undefined);
    await expectServerError(server.management.attach(sessionId, CTX), "session_not_found");
    // pi.session-management has no state: reading a method as state is refused by the facade.
    assert.throws(
      () => server.management.create.value,
      (error) => error.code === "service_member_mismatch",
    );
    assert.deepEqual(server.errors, []);
  });

  await report.case("attach by a unique 8-character prefix announces the canonical session id", async () => {
    const { sessionId } = await server.management.create({ name: "prefix" }, CTX);
    assert.equal(await server.management.attach(sessionId.slice(0, 8), CTX), undefined);
    const attachment = main.client.attachment;
    await server.management.detach(CTX);
    await server.management.remove(sessionId, CTX);
    // The session target must name the session as the directory lists it (its full id).
    assert.equal(
      attachment?.sessionId,
      sessionId,
      `attach("${sessionId.slice(0, 8)}") announced sessionId ${JSON.stringify(attachment?.sessionId)}, not ${sessionId}`,
    );
  });

  await report.case("facade pi.session-directory: list and the sessions state follow create/remove", async () => {
    const { sessionId } = await server.management.create({ name: "directory" }, CTX);
    const listed = await waitForState(server.directory.sessions, (list) => list.some((s) => s.id === sessionId));
    const entry = plain(listed.find((s) => s.id === sessionId));
    assert.deepEqual(Object.keys(entry).sort(), [
      "attachedClients",
      "createdAt",
      "cwd",
      "id",
      "model",
      "name",
      "phase",
      "updatedAt",
    ]);
    assert.equal(entry.name, "directory");
    assert.equal(entry.phase, "closed");
    assert.equal(entry.model, "scripted/default");
    assert.equal(entry.attachedClients, 0);
    const viaList = await server.directory.list(CTX);
    assert.deepEqual(plain(viaList), plain(server.directory.sessions.value));
    await server.management.attach(sessionId, CTX);
    const attached = await waitForState(server.directory.sessions, (list) =>
      list.some((s) => s.id === sessionId && s.attachedClients === 1 && s.phase === "idle"),
    );
    assert.ok(attached);
    await server.management.detach(CTX);
    await server.management.remove(sessionId, CTX);
    await waitForState(server.directory.sessions, (list) => !list.some((s) => s.id === sessionId));
    const { state } = await freshSnapshot(main.client, serverTarget(main.client), "pi.session-directory");
    assert.deepEqual(state.sessions, plain(server.directory.sessions.value));
  });

  await report.case("facade pi.session: state, setThinking, setModel, bash, steer, abort", async () => {
    const { facade } = await attachedSession(main.client, server, { name: "facade" });
    const { session } = facade;
    const initial = plain(session.state.value);
    // services.md: whether the tools are confined (the detail depends on the kernel).
    assert.equal(typeof initial.confinement?.active, "boolean");
    assert.equal(typeof initial.confinement?.detail, "string");
    assert.deepEqual(initial, {
      confinement: initial.confinement,
      phase: "idle",
      model: "scripted/default",
      thinkingLevel: "off",
      transcript: [],
      queuedSteer: [],
      // services.md: the running turn, the follow-up queue, presence (this client), compaction.
      turnId: null,
      followUps: [],
      attached: initial.attached,
      compaction: { offered: true, running: false },
    });
    assert.equal(initial.attached.length, 1);
    assert.match(initial.attached[0].identity, /^(uid \d+|anonymous)/);
    assert.equal(await session.setThinking("high", CTX), undefined);
    // services.md: the response follows the update describing its effect.
    assert.equal(session.state.value.thinkingLevel, "high");
    assert.equal(await session.setModel({ provider: "scripted", id: "default" }, CTX), undefined);
    await expectServerError(session.setThinking("loud", CTX), "invalid_request");
    await expectServerError(session.steer("not now", CTX), "invalid_request");
    assert.equal(await session.abort(CTX), undefined);
    const result = plain(await session.bash("echo facade", {}, CTX));
    assert.equal(result.exitCode, 0);
    assert.equal(result.output.trim(), "facade");
    assert.equal(result.cancelled, false);
    assert.equal(result.truncated, false);
    const record = lastItem(session.state.value);
    assert.equal(record.role, "bashExecution");
    assert.equal(record.command, "echo facade");
    assert.equal(record.exitCode, 0);
    assert.equal(record.status, "complete");
    const { state } = await freshSnapshot(main.client, main.client.attachment, "pi.session");
    assert.deepEqual(state.state, plain(session.state.value));
    assert.deepEqual(facade.errors, []);
    await facade.binding.dispose(CTX);
    await server.management.detach(CTX);
  });

  // 5
  await report.case("attach: the attachment frame arrives before the attach response", async () => {
    const { sessionId } = await server.management.create({ name: "attach-order" }, CTX);
    const mark = main.tap.log.length;
    const events = [];
    const stop = main.client.onAttachmentChange((attachment) => events.push(["attachment", attachment]));
    try {
      await server.management.attach(sessionId, CTX);
      events.push(["resolved", main.client.attachment]);
      const request = await sentRequest(main.tap, (call) => call.member === "attach", mark);
      const wire = main.tap.log.since(mark).filter((e) => e.dir === "in");
      const attachmentAt = wire.findIndex((e) => e.message.type === "attachment");
      const responseAt = wire.findIndex((e) => e.message.type === "response" && e.message.id === request.message.id);
      assert.ok(attachmentAt >= 0, "no attachment frame");
      assert.ok(responseAt >= 0, "no attach response");
      assert.ok(attachmentAt < responseAt, `attachment frame #${attachmentAt} after response #${responseAt}`);
      const frame = wire[attachmentAt].message.attachment;
      assert.equal(frame.serverId, host.serverId);
      assert.equal(frame.sessionId, sessionId);
      assert.equal(typeof frame.attachmentId, "string");
      assert.deepEqual(events, [
        ["attachment", frame],
        ["resolved", frame],
      ]);
      // detach: `attachment: null` first, then the response.
      const detachMark = main.tap.log.length;
      await server.management.detach(CTX);
      const detachRequest = await sentRequest(main.tap, (call) => call.member === "detach", detachMark);
      const after = main.tap.log.since(detachMark).filter((e) => e.dir === "in");
      const nullAt = after.findIndex((e) => e.message.type === "attachment" && e.message.attachment === null);
      const detachAt = after.findIndex((e) => e.message.type === "response" && e.message.id === detachRequest.message.id);
      assert.ok(nullAt >= 0 && nullAt < detachAt, `attachment:null #${nullAt}, detach response #${detachAt}`);
      assert.deepEqual(events.at(-1), ["attachment", undefined]);
    } finally {
      stop();
    }
  });

  // 6, 7
  let streamed;
  await report.case("prompt: pi.session state streams during the reply and settles the transcript", async () => {
    streamed = await attachedSession(main.client, server, { name: "stream" });
    const { session } = streamed.facade;
    const deliveries = [];
    const textLengths = [];
    const stop = session.state.subscribe((value, _context, delivery) => {
      deliveries.push(delivery);
      const item = lastItem(value);
      if (item?.role === "assistant") textLengths.push(textOf(item).length);
    });
    const prompt = "hello from the upstream client, please stream a reply";
    const mark = main.tap.log.length;
    const result = await session.prompt(prompt, CTX);
    // On the wire the update that settles the turn comes before the prompt's answer; chord's
    // facade applies delivered updates on a later tick than the answer resolves, so the
    // replica is read once it has caught up.
    const frames = main.tap.log.items.slice(mark).filter((e) => e.dir === "in");
    const answerAt = frames.findIndex((e) => e.message.type === "response" && e.message.result?.stopReason === "stop");
    const idleAt = frames.findIndex(
      (e) => e.message.type === "service_update" && JSON.stringify(e.message.update.ops ?? []).includes('"idle"'),
    );
    assert.ok(idleAt >= 0 && idleAt < answerAt, `phase idle update #${idleAt}, prompt answer #${answerAt}`);
    await waitForState(session.state, settled);
    stop();
    assert.deepEqual(plain(result), { stopReason: "stop" });
    const updates = deliveries.filter((d) => d.kind === "update");
    assert.ok(updates.length >= 10, `only ${updates.length} state updates during the turn`);
    const sequences = updates.map((d) => d.sequence);
    assert.deepEqual(
      sequences,
      sequences.map((_, i) => sequences[0] + i),
      "contiguous sequences",
    );
    const growing = textLengths.filter((n, i) => i > 0 && n > textLengths[i - 1]).length;
    assert.ok(growing >= 5, `assistant text grew in only ${growing} updates`);
    const state = plain(session.state.value);
    assert.equal(state.phase, "idle");
    assert.equal(state.transcript.length, 2);
    const [user, assistant] = state.transcript;
    assert.equal(user.role, "user");
    assert.deepEqual(user.content, [{ type: "text", text: prompt }]);
    assert.equal(assistant.role, "assistant");
    assert.equal(assistant.status, "complete");
    assert.equal(assistant.stopReason, "stop");
    assert.equal(assistant.provider, "scripted");
    assert.equal(assistant.model, "default");
    assert.deepEqual(
      assistant.content.map((b) => b.type),
      ["thinking", "text"],
    );
    assert.equal(textOf(assistant), scriptedAnswer(prompt));
    assert.equal(typeof user.id, "string");
    assert.notEqual(user.id, assistant.id);
    assert.deepEqual(streamed.facade.errors, []);
  });

  await report.case("the replica upstream's decoder rebuilt equals a fresh snapshot", async () => {
    assert.ok(streamed, "needs the prompt case");
    const { state } = await freshSnapshot(main.client, streamed.target, "pi.session");
    assert.deepEqual(plain(streamed.facade.session.state.value), state.state);
  });

  // 8
  await report.case("tool call: run `echo hi` records the bash call and its result", async () => {
    assert.ok(streamed, "needs the prompt case");
    const { session } = streamed.facade;
    const before = session.state.value.transcript.length;
    const result = await session.prompt("run `echo hi`", CTX);
    assert.deepEqual(plain(result), { stopReason: "stop" });
    const items = plain(session.state.value.transcript.slice(before));
    assert.deepEqual(
      items.map((i) => i.role),
      ["user", "assistant", "tool", "assistant"],
    );
    const [, call, tool, answer] = items;
    assert.equal(call.stopReason, "toolUse");
    const toolCall = call.content.find((b) => b.type === "toolCall");
    assert.ok(toolCall, "no toolCall block");
    assert.equal(toolCall.name, "bash");
    assert.deepEqual(toolCall.arguments, { command: "echo hi" });
    assert.equal(tool.toolCallId, toolCall.id);
    assert.equal(tool.toolName, "bash");
    assert.deepEqual(tool.arguments, { command: "echo hi" });
    assert.equal(tool.status, "complete");
    assert.equal(tool.isError, false);
    assert.deepEqual(tool.content, [{ type: "text", text: "hi" }]);
    assert.equal(answer.status, "complete");
    assert.equal(textOf(answer), "Here is the result of `bash`:\n```\nhi\n```");
    const { state } = await freshSnapshot(main.client, streamed.target, "pi.session");
    assert.deepEqual(plain(session.state.value), state.state);
    await streamed.facade.binding.dispose(CTX);
    await server.management.detach(CTX);
  });

  // 9
  await report.case("two clients on one session see the same final state", async () => {
    const a = track(await connect(host));
    const b = track(await connect(host));
    const serverA = await serverFacades(a.client);
    const serverB = await serverFacades(b.client);
    const { sessionId } = await serverA.management.create({ name: "shared" }, CTX);
    await serverA.management.attach(sessionId, CTX);
    await serverB.management.attach(sessionId, CTX);
    assert.notEqual(a.client.attachment.attachmentId, b.client.attachment.attachmentId);
    const sessionA = await sessionFacade(a.client);
    const sessionB = await sessionFacade(b.client);
    await waitForState(serverA.directory.sessions, (list) =>
      list.some((s) => s.id === sessionId && s.attachedClients === 2),
    );
    const result = await sessionA.session.prompt("run `echo shared`", CTX);
    assert.deepEqual(plain(result), { stopReason: "stop" });
    const finalA = plain(await waitForState(sessionA.session.state, settled));
    const finalB = plain(
      await waitForState(
        sessionB.session.state,
        (state) => settled(state) && state.transcript.length === finalA.transcript.length,
      ),
    );
    assert.deepEqual(finalB, finalA);
    assert.equal(finalA.transcript.length, 4);
    assert.deepEqual(sessionA.errors, []);
    assert.deepEqual(sessionB.errors, []);
    await a.client.dispose();
    await b.client.dispose();
    await waitForState(server.directory.sessions, (list) =>
      list.some((s) => s.id === sessionId && s.attachedClients === 0),
    );
  });

  // 10
  await report.case("cancel: an aborted prompt sends cancel, answers cancelled, the host stays healthy", async () => {
    const { facade, target } = await attachedSession(main.client, server, { name: "cancel" });
    const { session } = facade;
    const long = Array.from({ length: 400 }, (_, i) => `word${i}`).join(" ");
    const controller = new AbortController();
    const mark = main.tap.log.length;
    const streaming = waitForState(
      session.state,
      (state) => state.phase === "turn" && lastItem(state)?.role === "assistant" && textOf(lastItem(state)).length > 0,
    );
    const prompt = session.prompt(long, withAbortSignal(controller.signal, CTX));
    const rejected = prompt.then(
      () => assert.fail("the cancelled prompt resolved"),
      (error) => error,
    );
    await streaming;
    controller.abort();
    const error = await rejected;
    assert.equal(error.name, "AbortError");
    const request = await sentRequest(main.tap, (call) => call.member === "prompt", mark);
    const cancel = await main.tap.log.waitFor(
      (e) => e.dir === "out" && e.message.type === "cancel" && e.message.id === request.message.id,
      { from: mark },
    );
    assert.deepEqual(cancel.message, { type: "cancel", id: request.message.id, target });
    const response = await main.tap.log.waitFor(
      (e) => e.dir === "in" && e.message.type === "response" && e.message.id === request.message.id,
      { from: mark },
    );
    assert.deepEqual(response.message, {
      type: "response",
      id: request.message.id,
      ok: false,
      error: { code: "cancelled", message: "RPC request cancelled" },
    });
    const after = plain(await waitForState(session.state, settled));
    const aborted = lastItem(after);
    assert.equal(aborted.status, "aborted");
    assert.equal(aborted.stopReason, "aborted");
    assert.ok(textOf(aborted).length < scriptedAnswer(long).length, "the reply was cut short");
    // Healthy: the connection is up, the session takes a new prompt, server calls answer.
    assert.equal(main.client.connected, true);
    const again = await session.prompt("still there?", CTX);
    assert.deepEqual(plain(again), { stopReason: "stop" });
    assert.equal(textOf(lastItem(session.state.value)), scriptedAnswer("still there?"));
    assert.deepEqual(await server.models.list(CTX), [SCRIPTED_MODEL]);
    assert.deepEqual(facade.errors, []);
    await facade.binding.dispose(CTX);
    await server.management.detach(CTX);
  });

  // 11
  await report.case("reconnect(): re-attach and call after the client reconnects", async () => {
    const c = track(await connect(host));
    let facades = await serverFacades(c.client);
    const { sessionId } = await facades.management.create({ name: "reconnect" }, CTX);
    await facades.management.attach(sessionId, CTX);
    const before = c.client.attachment;
    c.client.disconnect("test disconnect");
    assert.equal(c.client.connectionState, "disconnected");
    assert.equal(c.client.attachment, undefined);
    assert.equal(c.states.at(-1).state, "disconnected");
    const hello = await c.client.reconnect();
    assert.deepEqual(hello, { type: "hello", version: 8, serverId: host.serverId });
    assert.equal(c.client.connected, true);
    assert.equal(c.tap.log.items.at(-1).connection, 2, "a second transport was opened");
    // The old binding is left alone: upstream's subscription close would send `unsubscribe`
    // for ids of the previous connection over the new one.
    facades = await serverFacades(c.client);
    await facades.management.attach(sessionId, CTX);
    const after = c.client.attachment;
    assert.equal(after.sessionId, sessionId);
    assert.notEqual(after.attachmentId, before.attachmentId);
    const { session, errors } = await sessionFacade(c.client);
    await session.setThinking("medium", CTX);
    assert.equal(session.state.value.thinkingLevel, "medium");
    assert.deepEqual(plain(await session.prompt("after reconnect", CTX)), { stopReason: "stop" });
    assert.equal(textOf(lastItem(session.state.value)), scriptedAnswer("after reconnect"));
    await expectServerError(
      c.client.request(before, { serviceId: "pi.session", member: "abort", args: [] }),
      "session_not_attached",
      "Session is not attached to this client",
    );
    assert.deepEqual(errors, []);
    await c.client.dispose();
  });

  // 12
  await report.case(
    "a stalled subscriber overflows its backlog: the connection survives and the replica converges",
    async () => {
      const s = track(await connect(host));
      const facades = await serverFacades(s.client);
      const { sessionId } = await facades.management.create({ name: "stall" }, CTX);
      await facades.management.attach(sessionId, CTX);
      const target = s.client.attachment;
      const { session, errors } = await sessionFacade(s.client);
      // More subscribers on the same connection so the stalled socket fills quickly; each
      // one's backlog passes the server's cap of 100 pending updates while Node is blocked.
      const extras = [];
      for (let i = 0; i < 40; i += 1) {
        const sub = await s.client.subscribeService(target, "pi.session", "singleton", () => {});
        sub.start();
        extras.push(sub);
      }
      const mark = s.tap.log.length;
      // ~240 streamed tokens of ~150 bytes each.
      const words = Array.from({ length: 220 }, (_, i) => `w${i}`.padEnd(150, "x"));
      const prompt = words.join(" ");
      let stalled = false;
      let drained = false;
      let pendingCall;
      const stop = session.state.subscribe((value) => {
        if (stalled || value.phase !== "turn") return;
        const item = lastItem(value);
        if (item?.role !== "assistant" || textOf(item).length === 0) return;
        stalled = true;
        // A request in flight across the stall must still be answered.
        pendingCall = facades.models.list(CTX).then(
          (value) => ({ value }),
          (error) => ({ error }),
        );
        // Block the whole event loop until the host has written the settled reply (only
        // settled messages reach the transcript file): every update of the reply piles up.
        drained = blockEventLoopUntil(
          () => readFileSync(join(host.sessionsDir, `${sessionId}.jsonl`), "utf8").includes('"role":"assistant"'),
          30000,
        );
      });
      const result = await session.prompt(prompt, CTX).catch((error) => error);
      stop();
      assert.ok(stalled, "the stall never started");
      assert.ok(drained, "the host did not finish the reply during the stall");
      // What reached the facade's subscription after the stall began, as the wire tap saw it.
      const subscribe = await sentRequest(
        s.tap,
        (call) => call.member === "subscribe" && call.args[1] === "pi.session",
      );
      const facadeSubscription = subscribe.message.call.args[0];
      const updates = s.tap.log
        .since(mark)
        .filter((e) => e.dir === "in" && e.message.type === "service_update" && e.message.subscriptionId === facadeSubscription)
        .map((e) => e.message.update);
      const resyncs = updates.filter((u) => u.type !== "state" || u.ops.some((op) => op[0] === "r"));
      const seen = `${updates.length} updates to ${facadeSubscription}, resyncs: ${JSON.stringify(
        resyncs.map((u) => (u.type === "state" ? `state#${u.sequence} with r` : u.type)),
      )}`;
      assert.ok(!(result instanceof Error), `the prompt failed: ${result?.name}: ${result?.message} (${seen})`);
      assert.deepEqual(plain(result), { stopReason: "stop" });
      assert.equal(s.client.connected, true, "the connection was closed");
      const answered = await pendingCall;
      assert.ok(!answered.error, `the call in flight failed: ${answered.error?.message}`);
      assert.deepEqual(answered.value, [SCRIPTED_MODEL]);
      assert.ok(resyncs.length > 0, `no resync (${seen}): the backlog never overflowed`);
      const converged = plain(await waitForState(session.state, settled));
      const { state } = await freshSnapshot(s.client, target, "pi.session");
      assert.deepEqual(converged, state.state);
      assert.equal(textOf(lastItem(converged)), scriptedAnswer(prompt));
      assert.deepEqual(errors, []);
      for (const sub of extras) await sub.dispose();
      await s.client.dispose();
    },
    { timeoutMs: 60000 },
  );

  // 13: error codes as upstream's provider and server answer them.
  const st = serverTarget(main.client);
  await report.case("error: unknown service → service_not_allowed", async () => {
    await expectServerError(
      main.client.request(st, { serviceId: "pi.nope", member: "list", args: [] }),
      "service_not_allowed",
      "Remote service pi.nope is not allowlisted",
    );
    await expectServerError(
      main.client.subscribeService(st, "pi.nope", "singleton", () => {}),
      "service_not_allowed",
      "Remote service pi.nope is not allowlisted",
    );
  });

  await report.case("error: a session service on the server target → service_not_allowed", async () => {
    await expectServerError(
      main.client.request(st, { serviceId: "pi.session", member: "abort", args: [] }),
      "service_not_allowed",
      "Remote service pi.session is not allowlisted",
    );
  });

  await report.case("error: unknown member → service_member_not_found", async () => {
    await expectServerError(
      main.client.request(st, { serviceId: "pi.models", member: "nope", args: [] }),
      "service_member_not_found",
      "Unknown remote service member pi.models.nope",
    );
  });

  await report.case("error: a state member called as a method → service_member_mismatch", async () => {
    await expectServerError(
      main.client.request(st, { serviceId: "pi.models", member: "models", args: [] }),
      "service_member_mismatch",
      "Remote service member pi.models.models is not a method",
    );
  });

  await report.case("error: an instance address on a singleton call → service_mode_mismatch", async () => {
    await expectServerError(
      main.client.request(st, {
        serviceId: "pi.models",
        instance: { key: "k", generation: 1 },
        member: "list",
        args: [],
      }),
      "service_mode_mismatch",
      "Remote service pi.models is singleton",
    );
  });

  await report.case("error: a keyed subscribe to a singleton → service_mode_mismatch", async () => {
    await expectServerError(
      main.client.subscribeService(st, "pi.models", "keyed", () => {}),
      "service_mode_mismatch",
      "Remote service pi.models is singleton, not keyed",
    );
  });

  await report.case("error: a subscribe call carrying an instance address (upstream: not a control call)", async () => {
    // upstream's endpoint only decodes `$chord.service` calls without `instance` as control
    // calls; this one reaches the provider as a call to the service `$chord.service`.
    await expectServerError(
      main.client.request(st, {
        serviceId: "$chord.service",
        instance: { key: "k", generation: 1 },
        member: "subscribe",
        args: ["instance-sub", "pi.models", "singleton"],
      }),
      "service_not_allowed",
      "Remote service $chord.service is not allowlisted",
    );
  });

  await report.case("error: unsubscribing an unknown subscription id (upstream: internal_error)", async () => {
    // upstream's endpoint throws a plain Error("Service subscription was not found"), which
    // pi-server answers as internal_error.
    await expectServerError(
      main.client.request(st, createServiceUnsubscribeCall("no-such-subscription")),
      "internal_error",
      "Internal server error",
    );
    assert.equal(main.client.connected, true);
  });

  await report.case("error: malformed service calls → invalid_request \"Invalid service call\"", async () => {
    const raw = await RawConnection.open(host.socketPath);
    try {
      const malformed = [
        { serviceId: "pi.models", args: [] },
        { serviceId: "pi.models", member: "list" },
        { serviceId: "pi.models", member: "list", args: {} },
        { serviceId: "", member: "list", args: [] },
        { serviceId: "pi.models", member: "list", args: [], extra: true },
        { serviceId: "pi.models", member: "list", args: [], instance: { key: "k" } },
        "pi.models.list",
        ["pi.models", "list"],
        null,
      ];
      for (const call of malformed) {
        const response = await raw.request({ serverId: host.serverId }, call);
        assert.deepEqual(
          { call, ...response },
          { call, type: "response", id: response.id, ok: false, error: { code: "invalid_request", message: "Invalid service call" } },
        );
      }
      const ok = await raw.request({ serverId: host.serverId }, { serviceId: "pi.models", member: "list", args: [] });
      assert.deepEqual(ok.result, [SCRIPTED_MODEL]);
    } finally {
      raw.close();
    }
  });

  await report.case("error: a target naming another server → wrong_server", async () => {
    const other = randomUUID();
    await expectServerError(
      main.client.request({ serverId: other }, { serviceId: "pi.models", member: "list", args: [] }),
      "wrong_server",
      "Request was addressed to another server",
    );
    await expectServerError(
      main.client.request(
        { serverId: other, sessionId: randomUUID(), attachmentId: randomUUID() },
        { serviceId: "pi.session", member: "abort", args: [] },
      ),
      "wrong_server",
      "Request was addressed to another server",
    );
    assert.equal(main.client.connected, true);
  });

  await report.case("error: a session call with a stale attachment → session_not_attached", async () => {
    const first = await server.management.create({ name: "stale-1" }, CTX);
    const second = await server.management.create({ name: "stale-2" }, CTX);
    await server.management.attach(first.sessionId, CTX);
    const stale = main.client.attachment;
    await server.management.attach(second.sessionId, CTX);
    assert.equal(main.client.attachment.sessionId, second.sessionId);
    const call = { serviceId: "pi.session", member: "abort", args: [] };
    await expectServerError(main.client.request(stale, call), "session_not_attached", "Session is not attached to this client");
    // Unknown ids for the right server, too.
    await expectServerError(
      main.client.request({ ...main.client.attachment, attachmentId: randomUUID() }, call),
      "session_not_attached",
      "Session is not attached to this client",
    );
    assert.equal(await main.client.request(main.client.attachment, call), undefined);
    await server.management.detach(CTX);
    await expectServerError(main.client.request(stale, call), "session_not_attached", "Session is not attached to this client");
  });

  await report.case("error: an unsupported protocol version in hello → version", async () => {
    const raw = await RawConnection.open(host.socketPath, { version: 7 }).catch((error) => error);
    assert.ok(raw instanceof Error);
    assert.equal(raw.message, `hello refused: ${JSON.stringify({ type: "hello_error", error: { code: "version", message: "Unsupported protocol version 7; expected 8" } })}`);
  });

  // Member order: upstream's provider lists members sorted by name.
  await report.case("snapshots list members sorted by name (as upstream's provider does)", async () => {
    const { sessionId } = await server.management.create({ name: "order" }, CTX);
    await server.management.attach(sessionId, CTX);
    const unsorted = [];
    for (const [target, serviceId] of [
      [st, "pi.session-management"],
      [st, "pi.session-directory"],
      [st, "pi.models"],
      [main.client.attachment, "pi.session"],
    ]) {
      const { members } = await freshSnapshot(main.client, target, serviceId);
      const names = members.map((m) => m.name);
      const sorted = [...names].sort();
      if (JSON.stringify(names) !== JSON.stringify(sorted)) unsorted.push(`${serviceId}: [${names}] (sorted: [${sorted}])`);
    }
    await server.management.detach(CTX);
    assert.deepEqual(unsorted, [], `unsorted members: ${unsorted.join("; ")}`);
  });

  await report.case("the host is still healthy at the end", async () => {
    assert.equal(host.running, true);
    assert.equal(main.client.connected, true);
    assert.deepEqual(main.tap.errors, [], "the wire tap decoded every frame");
    assert.deepEqual(await server.models.list(CTX), [SCRIPTED_MODEL]);
    const routes = await discoverUnixServers({ directory: host.socketDir });
    assert.deepEqual(
      routes.map((r) => r.serverId),
      [host.serverId],
    );
  });
} finally {
  for (const client of opened) await client.dispose().catch(() => {});
  const status = await host.stop();
  if (process.env.UPSTREAM_CLIENT_HOST_LOG) console.log(host.stderr.join("\n"));
  if (status && status.code !== 0) {
    console.log(`baton-host exited with ${JSON.stringify(status)}; stderr tail:\n${host.stderr.slice(-10).join("\n")}`);
  }
}

report.finish();
