// The upstream side of the "baton-client → upstream pi-server" suite: a real pi-server `Server`
// on a Unix socket, a ServerHost whose server- and session-scope services are real chord
// providers, and a tap on every connection that decodes both directions with pi-protocol's own
// decoders (so the suite can see which ops upstream actually put on the wire).

import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

import {
  createRemoteServiceEndpoint,
  defineService,
  RemoteServiceProvider,
  replicatedState,
} from "@earendil-works/chord";
import { ClientMessageDecoder, ServerMessageDecoder } from "@earendil-works/pi-protocol";
import { Server, SessionNotFoundError } from "@earendil-works/pi-server";
import { createUnixListener, getUnixSocketPath } from "@earendil-works/pi-server/unix";

export const SERVER_ID = "3f8a2c1e-5b7d-4e9f-a1c3-0d2e4f6a8b9c";
export const SESSION_MANAGEMENT = "pi.session-management";

// ─── Tracked states ──────────────────────────────────────────────────────────

// A replicated state plus the sequence upstream last published for it (read from its own
// delivery metadata, not counted by us).
export class TrackedState {
  constructor(initial) {
    this.inner = replicatedState(initial);
    this.sequence = 0;
    this.inner.subscribe((_value, _context, delivery) => {
      this.sequence = delivery.sequence;
    });
  }

  // The tracked (Proxy) value to mutate.
  get state() {
    return this.inner.state;
  }

  // The published immutable value: what a consumer must converge to.
  get value() {
    return this.inner.value;
  }

  publish() {
    this.inner.publish(undefined);
  }
}

// One implementation object: state members as TrackedState, methods as functions. Returns
// the object to hand to chord plus its member table, so the suite can model the replica.
export function implementation(members) {
  const impl = {};
  for (const [name, member] of Object.entries(members)) {
    impl[name] = member instanceof TrackedState ? member.inner : member;
  }
  return { impl, members };
}

// The replica a correct consumer holds for `impl` (`{impl, members}` from `implementation`),
// in the probe's JSON form. `cleared` models an `unavailable` singleton: members stay, states
// are dropped.
export function expectedInstance(instance, address, { cleared = false } = {}) {
  const names = Object.keys(instance.members).sort();
  const states = {};
  for (const name of names) {
    const member = instance.members[name];
    if (member instanceof TrackedState) {
      states[name] = cleared ? null : { sequence: member.sequence, value: structuredClone(member.value) };
    }
  }
  return {
    instance: address ?? null,
    members: names.map((name) => ({
      name,
      kind: instance.members[name] instanceof TrackedState ? "state" : "method",
    })),
    states,
  };
}

export function expectedReplica(serviceId, mode, instances) {
  return {
    serviceId,
    mode,
    hydrated: true,
    instances: [...instances].sort((a, b) => (a.instance?.key ?? "").localeCompare(b.instance?.key ?? "")),
  };
}

// ─── The host ────────────────────────────────────────────────────────────────

// Server-scope services on one provider shared by every connection; session-scope services on
// one provider per session (which outlives its routed handles, as durable state does).
export class UpstreamHost {
  constructor({ serverServices, sessionServices, sessionIds }) {
    this.serverProvider = new RemoteServiceProvider(serverServices);
    this.sessionServices = sessionServices;
    this.sessionProviders = new Map();
    this.sessionIds = new Set(sessionIds);
    this.presentations = new Set();
    this.attachmentReleases = 0;
    this.handles = [];
    const host = this;
    this.serverServices = {
      attachClient(presentation) {
        host.presentations.add(presentation);
        const endpoint = createRemoteServiceEndpoint(host.serverProvider);
        return {
          async invokeService(call, publish, context) {
            if (call.serviceId === SESSION_MANAGEMENT && call.instance === undefined) {
              if (call.member === "attach" && call.args.length === 1 && typeof call.args[0] === "string") {
                await presentation.attachSession(call.args[0], context);
                return null;
              }
              if (call.member === "detach" && call.args.length === 0) {
                await presentation.detachSession(context);
                return null;
              }
              if (call.member === "remove" && call.args.length === 1 && typeof call.args[0] === "string") {
                await presentation.prepareSessionRemoval(call.args[0], context);
                host.sessionIds.delete(call.args[0]);
                return null;
              }
            }
            return endpoint.invoke(call, publish, context);
          },
          release() {
            host.presentations.delete(presentation);
            endpoint.dispose();
          },
        };
      },
    };
  }

  sessionProvider(sessionId) {
    let provider = this.sessionProviders.get(sessionId);
    if (provider === undefined) {
      provider = new RemoteServiceProvider(this.sessionServices);
      this.sessionProviders.set(sessionId, provider);
    }
    return provider;
  }

  async resolveSession(sessionId) {
    if (!this.sessionIds.has(sessionId)) throw new SessionNotFoundError(`Unknown session: ${sessionId}`);
    return { id: sessionId };
  }

  async openSession(metadata) {
    const provider = this.sessionProvider(metadata.id);
    const host = this;
    let terminate;
    const handle = {
      sessionId: metadata.id,
      closed: false,
      terminated: new Promise((resolve) => {
        terminate = resolve;
      }),
      // Ends the routed handle as an unexpected termination would.
      terminate(error) {
        terminate(error);
      },
      attachClient() {
        const endpoint = createRemoteServiceEndpoint(provider);
        let released = false;
        return {
          invokeService: (call, publish, context) => endpoint.invoke(call, publish, context),
          release() {
            if (released) return;
            released = true;
            host.attachmentReleases += 1;
            endpoint.dispose();
          },
        };
      },
      async close() {
        handle.closed = true;
        terminate(undefined);
      },
    };
    this.handles.push(handle);
    return handle;
  }
}

// ─── The wire tap ────────────────────────────────────────────────────────────

// Wraps a listener so every byte each way is decoded by upstream's own message decoders.
function tapListener(inner, wire) {
  return {
    start(accept) {
      return inner.start((connection) => {
        const conn = wire.nextConnection++;
        const fromServer = new ServerMessageDecoder({ maxFrameLength: 16 * 1024 * 1024 });
        const fromClient = new ClientMessageDecoder({ maxFrameLength: 16 * 1024 * 1024 });
        const record = (direction, decoder, chunk) => {
          try {
            for (const message of decoder.push(chunk)) wire.record({ conn, direction, message });
          } catch (error) {
            wire.record({ conn, direction, error: String(error) });
          }
        };
        const tapped = {
          get closed() {
            return connection.closed;
          },
          send(chunk) {
            record("out", fromServer, chunk);
            return connection.send(chunk);
          },
          close(finalChunk) {
            if (finalChunk) record("out", fromServer, finalChunk);
            return connection.close(finalChunk);
          },
        };
        const handler = accept(tapped);
        return {
          onData(chunk) {
            record("in", fromClient, chunk);
            handler.onData(chunk);
          },
          onClose: () => handler.onClose(),
          onError: (error) => handler.onError(error),
        };
      });
    },
    close: () => inner.close(),
  };
}

export class Wire {
  constructor() {
    this.messages = [];
    this.nextConnection = 1;
    this.waiters = new Set();
  }

  record(entry) {
    this.messages.push(entry);
    for (const waiter of [...this.waiters]) waiter();
  }

  mark() {
    return this.messages.length;
  }

  since(mark) {
    return this.messages.slice(mark);
  }

  // Resolves with the first entry after `mark` matching `predicate`.
  waitFor(predicate, mark, { timeoutMs = 5000, what = "wire message" } = {}) {
    return new Promise((resolve, reject) => {
      let index = mark;
      const check = () => {
        for (; index < this.messages.length; index++) {
          if (predicate(this.messages[index])) {
            cleanup();
            resolve(this.messages[index]);
            return;
          }
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`hang guard: no ${what} on the wire within ${timeoutMs} ms`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }
}

// ─── Server lifecycle ────────────────────────────────────────────────────────

export async function makeSocketDir() {
  const dir = await mkdtemp(join(tmpdir(), "baton-upstream-server-"));
  return { dir, socket: getUnixSocketPath(SERVER_ID, dir), remove: () => rm(dir, { recursive: true, force: true }) };
}

export async function startServer(host, socket, wire, errors) {
  const listener = tapListener(createUnixListener({ path: socket, onError: (e) => errors.push(e) }), wire);
  const server = new Server(host, {
    listeners: [listener],
    serverId: SERVER_ID,
    onError: (error) => errors.push(error),
  });
  await server.start();
  return server;
}

export { defineService };
