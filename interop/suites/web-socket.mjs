// Interop suite "upstream client → baton-host over a WebSocket": the published upstream client
// (@earendil-works/pi-client + chord 0.85.1) from Node over the `ws` package against a real
// `baton-host serve --listen unix://… --listen http://127.0.0.1:0`, authenticated the way a
// browser is: a link minted by the real `baton link` over the Unix socket, `POST /pair` from
// the page's origin for the cookie, then `/ws` with the cookie and that Origin.
//
//   node interop/suites/web-socket.mjs        (from the repo root)
//   BATON_HOST_BIN=… BATON_BIN=… node interop/suites/web-socket.mjs
//
// Exits non-zero when a case fails. Waiting is always on events (socket events, replica
// updates, promises); the only timers are the reporter's hang guards.

import assert from "node:assert/strict";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { createRemoteServiceBinding, defineService } from "@earendil-works/chord";
import { BACKGROUND_CONTEXT } from "@earendil-works/chord/context";
import { Client, createClientServiceTransport, ServerError } from "@earendil-works/pi-client";
import { encodeClientMessage, ServerMessageDecoder } from "@earendil-works/pi-protocol";

import { Report } from "../lib/report.mjs";
import { baton, openSocket, parseSetCookie, request, startWebHost, wsTransportFactory } from "../lib/web-socket-host.mjs";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const bin = (variable, name) => {
  const fromEnv = process.env[variable];
  if (fromEnv === undefined || fromEnv === "") return join(REPO, "target/debug", name);
  return isAbsolute(fromEnv) ? fromEnv : resolve(REPO, fromEnv);
};
const HOST_BIN = bin("BATON_HOST_BIN", "baton-host");
const BATON_BIN = bin("BATON_BIN", "baton");

const CTX = BACKGROUND_CONTEXT;
const MANAGEMENT = defineService("pi.session-management");
const DIRECTORY = defineService("pi.session-directory");
const MODELS = defineService("pi.models");
const SESSION = defineService("pi.session");
// The server's default frame limit (docs/protocol.md §10; `--max-frame-length`).
const MAX_FRAME = 16 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// helpers

const plain = (value) => structuredClone(value);

// `baton link args…` over the Unix socket: the one URL it prints.
async function mint(host, args = []) {
  const { code, stdout, stderr } = await baton(BATON_BIN, host.socketUrl, ["link", ...args]);
  assert.equal(code, 0, `baton link ${args.join(" ")}: ${stderr}`);
  const lines = stdout.split("\n").filter((line) => line !== "");
  assert.equal(lines.length, 1, `exactly one line on stdout: ${JSON.stringify(stdout)}`);
  const match = /^(http:\/\/127\.0\.0\.1:\d+)\/#pair=([0-9a-f]{32})$/.exec(lines[0]);
  assert.ok(match, `a link to the web listener with the code in its fragment: ${lines[0]}`);
  assert.equal(match[1], host.base);
  return match[2];
}

// `POST /pair` as the page sends it, from the page's own origin.
function pairRequest(host, code, origin = host.origin) {
  const body = JSON.stringify({ code });
  return request(host.base, {
    method: "POST",
    path: "/pair",
    headers: { Origin: origin, "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) },
    body,
  });
}

// A minted link traded for its cookie: {cookie, tokenId, role, session, serverId}.
async function paired(host, args = []) {
  const response = await pairRequest(host, await mint(host, args));
  assert.equal(response.status, 200, response.body);
  const cookie = parseSetCookie(response.headers);
  assert.equal(cookie.name, "baton_web");
  return { cookie: `baton_web=${cookie.value}`, ...JSON.parse(response.body) };
}

// Upstream's Client over the web listener's WebSocket, as the identity `who` ({cookie, serverId}).
async function connect(host, who, options = {}) {
  const sockets = [];
  const transport = wsTransportFactory(
    host.wsUrl,
    { Origin: host.origin, Cookie: who.cookie },
    { onSocket: (ws) => sockets.push(ws), refusals: options.refusals },
  );
  const client = await Client.connect({ serverId: who.serverId, transportFactory: transport.factory });
  return { client, sockets, refusals: transport.refusals };
}

// A binding of `services` routed by `getTarget`; each service is acquired before `ready`
// (which waits for the initial snapshot of every service acquired by then).
async function bind(client, services, getTarget) {
  const errors = [];
  const binding = createRemoteServiceBinding({
    services,
    transport: createClientServiceTransport(client, getTarget),
    onError: (error) => errors.push(error),
  });
  const used = services.map((service) => binding.use(service));
  await binding.ready(CTX);
  return { binding, errors, used };
}

async function serverFacades(client) {
  const { binding, errors, used } = await bind(client, [MANAGEMENT, DIRECTORY, MODELS], () => ({
    serverId: client.serverId,
  }));
  return { binding, errors, management: used[0], models: used[2] };
}

async function sessionFacade(client) {
  const { binding, errors, used } = await bind(client, [SESSION], () => client.attachment);
  return { binding, errors, session: used[0] };
}

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

async function expectServerError(promise, code) {
  let error;
  try {
    await promise;
  } catch (caught) {
    error = caught;
  }
  assert.ok(error instanceof ServerError, `expected a ServerError ${code}, got ${error?.name ?? "success"}: ${error?.message}`);
  assert.equal(error.code, code, error.message);
  return error;
}

const lastItem = (state) => state.transcript[state.transcript.length - 1];
const textOf = (item) =>
  item.content
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
const scriptedAnswer = (prompt) =>
  `You said: ${prompt.trim()}. I am the scripted model: ask me to run \`a command\` or to read a file.`;

const closed = (ws) =>
  ws.readyState === ws.CLOSED
    ? Promise.resolve({ code: undefined })
    : new Promise((resolvePromise) => ws.once("close", (code, reason) => resolvePromise({ code, reason: reason.toString() })));

// ---------------------------------------------------------------------------------------------
// the suite

const report = new Report("web-socket");
const host = await startWebHost(HOST_BIN);
const opened = [];

try {
  let admin;

  await report.case("pairing: a link from `baton link` trades once for an HttpOnly SameSite=Strict cookie", async () => {
    const code = await mint(host);
    const first = await pairRequest(host, code);
    assert.equal(first.status, 200, first.body);
    const cookie = parseSetCookie(first.headers);
    assert.deepEqual(cookie.attributes, ["HttpOnly", "SameSite=Strict", "Path=/"], "no Secure on plain http");
    const body = JSON.parse(first.body);
    assert.deepEqual(Object.keys(body).sort(), ["role", "serverId", "session", "tokenId"]);
    assert.equal(body.role, "admin", "a link for no session minted by the host's own uid: its rights");
    assert.equal(body.session, null);
    assert.equal(first.headers["cache-control"], "no-store");
    const again = await pairRequest(host, code);
    assert.deepEqual({ status: again.status, body: again.body }, { status: 403, body: '{"error":"this link was already used"}' });
    const me = await request(host.base, { path: "/me", headers: { Cookie: `baton_web=${cookie.value}` } });
    assert.equal(me.status, 200, me.body);
    assert.deepEqual(JSON.parse(me.body), body);
    admin = { cookie: `baton_web=${cookie.value}`, ...body };
  });

  let main;
  await report.case("handshake over the WebSocket: hello v8 with the server id /pair named", async () => {
    assert.equal(admin.serverId, host.serverId, "the server id /pair answers is the host's");
    main = await connect(host, admin);
    opened.push(main.client);
    assert.equal(main.client.connectionState, "connected");
    assert.deepEqual(main.client.hello, { type: "hello", version: 8, serverId: host.serverId });
  });

  let server;
  await report.case("catalogue: server services on the server target, pi.session on a session target", async () => {
    const byId = (a, b) => a.serviceId.localeCompare(b.serviceId);
    const catalogue = await main.client.serviceCatalogue({ serverId: main.client.serverId });
    assert.deepEqual([...catalogue].sort(byId), [
      { serviceId: "pi.models", mode: "singleton" },
      { serviceId: "pi.session-directory", mode: "singleton" },
      { serviceId: "pi.session-management", mode: "singleton" },
    ]);
    server = await serverFacades(main.client);
    const { sessionId } = await server.management.create({ name: "catalogue" }, CTX);
    await server.management.attach(sessionId, CTX);
    assert.deepEqual(await main.client.serviceCatalogue(main.client.attachment), [
      { serviceId: "pi.session", mode: "singleton" },
    ]);
    await server.management.detach(CTX);
  });

  let streamedSession;
  await report.case("create, attach, prompt: the scripted reply streams in through the subscription", async () => {
    const { sessionId } = await server.management.create({ name: "web" }, CTX);
    streamedSession = sessionId;
    await server.management.attach(sessionId, CTX);
    assert.equal(main.client.attachment?.sessionId, sessionId);
    const { session, errors, binding } = await sessionFacade(main.client);
    const attached = plain(session.state.value).attached;
    assert.deepEqual(
      attached.map((a) => a.identity),
      [`browser web:${admin.tokenId}`],
      "presence names the browser identity",
    );
    const lengths = [];
    const stop = session.state.subscribe((value) => {
      const item = lastItem(value);
      if (item?.role === "assistant") lengths.push(textOf(item).length);
    });
    const prompt = "hello over a WebSocket";
    assert.deepEqual(plain(await session.prompt(prompt, CTX)), { stopReason: "stop" });
    const state = await waitForState(
      session.state,
      (s) => s.phase === "idle" && s.transcript.length === 2 && lastItem(s).status !== "streaming",
    );
    stop();
    assert.equal(textOf(lastItem(state)), scriptedAnswer(prompt));
    const growing = lengths.filter((n, i) => i > 0 && n > lengths[i - 1]).length;
    assert.ok(growing >= 5, `the reply grew in only ${growing} updates`);
    assert.deepEqual(errors, []);
    await binding.dispose(CTX);
    await server.management.detach(CTX);
  });

  await report.case("a viewer link: attach and read, but a prompt answers forbidden", async () => {
    const viewer = await paired(host, [streamedSession, "--viewer"]);
    assert.deepEqual([viewer.role, viewer.session], ["viewer", streamedSession]);
    const { client } = await connect(host, viewer);
    opened.push(client);
    const facades = await serverFacades(client);
    await facades.management.attach(streamedSession, CTX);
    const { session } = await sessionFacade(client);
    assert.equal(plain(session.state.value).transcript.length, 2, "the viewer reads the transcript");
    await expectServerError(session.prompt("not allowed", CTX), "forbidden");
    await expectServerError(facades.management.create({ name: "no" }, CTX), "forbidden");
    assert.equal(plain(session.state.value).transcript.length, 2, "nothing was prompted");
    await client.dispose();
  });

  await report.case("a wrong Origin and a missing cookie: 403 before any protocol byte", async () => {
    const cases = [
      { Origin: "http://evil.example", Cookie: admin.cookie },
      { Origin: `http://localhost${host.origin.slice(host.origin.lastIndexOf(":"))}.evil.example`, Cookie: admin.cookie },
      { Origin: host.origin },
      { Cookie: admin.cookie },
      { Origin: host.origin, Cookie: "baton_web=guessed.0000" },
    ];
    for (const headers of cases) {
      const outcome = await openSocket(host.wsUrl, headers);
      if (outcome.opened) outcome.opened.terminate();
      assert.ok(outcome.refused, `upgraded with ${JSON.stringify(headers)}`);
      assert.equal(outcome.refused.status, 403, JSON.stringify(headers));
      assert.match(outcome.refused.body, /^forbidden: [^\n]+\n?$/, "one line");
    }
    // The right ones open it.
    const right = await openSocket(host.wsUrl, { Origin: host.origin, Cookie: admin.cookie });
    assert.ok(right.opened, JSON.stringify(right.refused));
    right.opened.close(1000);
  });

  await report.case("baton unlink closes the live socket at once with 1008, and the cookie opens no other", async () => {
    const who = await paired(host);
    const refusals = [];
    const { client, sockets } = await connect(host, who, { refusals });
    opened.push(client);
    assert.equal(client.connected, true);
    const gone = closed(sockets[0]);
    const unlinked = await baton(BATON_BIN, host.socketUrl, ["unlink", who.tokenId]);
    assert.equal(unlinked.code, 0, unlinked.stderr);
    // docs/web.md: every live socket of a revoked token closes with 1008 "browser token revoked".
    const { code, reason } = await gone;
    assert.equal(code, 1008, `closed with ${code}`);
    assert.equal(reason, "browser token revoked");
    const me = await request(host.base, { path: "/me", headers: { Cookie: who.cookie } });
    assert.equal(me.status, 401, me.body);
    const again = await openSocket(host.wsUrl, { Origin: host.origin, Cookie: who.cookie });
    assert.equal(again.refused?.status, 403);
    assert.equal(main.client.connected, true, "another browser's socket is untouched");
    await client.dispose();
  });

  await report.case("a frame over the limit: hello_error invalid_request, then the close", async () => {
    const raw = await openSocket(host.wsUrl, { Origin: host.origin, Cookie: admin.cookie });
    assert.ok(raw.opened, JSON.stringify(raw.refused));
    const ws = raw.opened;
    const decoder = new ServerMessageDecoder();
    const messages = [];
    ws.on("message", (data) => messages.push(...decoder.push(new Uint8Array(data))));
    const end = closed(ws);
    const prefix = new Uint8Array(4);
    new DataView(prefix.buffer).setUint32(0, MAX_FRAME + 1);
    ws.send(prefix, { binary: true });
    await end;
    assert.deepEqual(messages, [
      {
        type: "hello_error",
        error: {
          code: "invalid_request",
          message: `Invalid client protocol frame: Frame length ${MAX_FRAME + 1} exceeds configured limit of ${MAX_FRAME}`,
        },
      },
    ]);
  });

  await report.case("a message over the frame limit + 4: the socket is closed before it is read whole", async () => {
    const raw = await openSocket(host.wsUrl, { Origin: host.origin, Cookie: admin.cookie });
    assert.ok(raw.opened, JSON.stringify(raw.refused));
    const ws = raw.opened;
    ws.send(encodeClientMessage({ type: "hello", version: 8 }), { binary: true });
    await new Promise((resolvePromise) => ws.once("message", resolvePromise));
    const end = closed(ws);
    ws.send(new Uint8Array(MAX_FRAME + 5), { binary: true });
    // docs/web.md: closed with 1009 as soon as the header says the message is too big, the
    // close frame and the end of stream sent before the rest of the message is discarded.
    const { code } = await end;
    assert.equal(code, 1009, `closed with ${code}`);
    const other = await connect(host, admin);
    opened.push(other.client);
    assert.equal(other.client.connected, true, "the host took the next socket");
  });

  await report.case("the host is still healthy at the end", async () => {
    assert.equal(host.running, true);
    assert.equal(main.client.connected, true);
    assert.equal((await server.models.list(CTX)).length, 1);
  });
} finally {
  for (const client of opened) await client.dispose().catch(() => {});
  const status = await host.stop();
  if (process.env.WEB_SOCKET_HOST_LOG) console.log(host.stderr.join("\n"));
  if (status && status.code !== 0) {
    console.log(`baton-host exited with ${JSON.stringify(status)}; stderr tail:\n${host.stderr.slice(-10).join("\n")}`);
  }
}

report.finish();
