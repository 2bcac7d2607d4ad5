// Wire-level helpers for the upstream-client suite, built only from upstream's own pieces
// (pi-client's Unix transport, pi-protocol's codec and decoders):
//
// * `tappedUnixTransport(path)`: a `ByteTransportFactory` for `Client` that is upstream's
//   `createUnixTransportFactory` plus a read-only tap: every frame the client sends and every
//   frame it receives is decoded a second time (with upstream's Client/ServerMessageDecoder)
//   and recorded in order, before the client itself sees it. Nothing is altered.
// * `RawConnection`: one Unix connection speaking the protocol directly through upstream's
//   `encodeClientMessage` / `ServerMessageDecoder`, for requests the high-level `Client`
//   refuses to send (malformed service calls).

import { createConnection } from "node:net";
import { createUnixTransportFactory } from "@earendil-works/pi-client/unix";
import {
  ClientMessageDecoder,
  encodeClientMessage,
  PROTOCOL_VERSION,
  ServerMessageDecoder,
} from "@earendil-works/pi-protocol";

// An append-only log with promise-based waiting on a predicate.
export class EventLog {
  constructor() {
    this.items = [];
    this.waiters = [];
  }

  push(item) {
    this.items.push(item);
    for (const waiter of [...this.waiters]) {
      if (waiter.predicate(item)) {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        waiter.resolve(item);
      }
    }
  }

  // Resolves with the first item (already logged or future) matching `predicate`.
  waitFor(predicate, { from = 0 } = {}) {
    for (let i = from; i < this.items.length; i += 1) {
      if (predicate(this.items[i])) return Promise.resolve(this.items[i]);
    }
    return new Promise((resolve) => this.waiters.push({ predicate, resolve }));
  }

  get length() {
    return this.items.length;
  }

  since(mark) {
    return this.items.slice(mark);
  }
}

// Wire log entries: {dir: "in" | "out", message, connection} in the order they crossed.
export function tappedUnixTransport(path) {
  const inner = createUnixTransportFactory({ path });
  const log = new EventLog();
  const errors = [];
  let connections = 0;
  const factory = async (handlers) => {
    const connection = ++connections;
    const serverDecoder = new ServerMessageDecoder();
    const clientDecoder = new ClientMessageDecoder();
    const transport = await inner({
      onData(chunk) {
        try {
          for (const message of serverDecoder.push(chunk)) log.push({ dir: "in", message, connection });
        } catch (error) {
          errors.push(error);
        }
        handlers.onData(chunk);
      },
      onClose: () => handlers.onClose(),
      onError: (error) => handlers.onError(error),
    });
    return {
      send(chunk) {
        try {
          for (const message of clientDecoder.push(chunk)) log.push({ dir: "out", message, connection });
        } catch (error) {
          errors.push(error);
        }
        return transport.send(chunk);
      },
      close: () => transport.close(),
    };
  };
  return { factory, log, errors };
}

// A protocol connection driven by hand. `request` sends any call value (validated only by the
// envelope schema, whose `call` is opaque) and resolves with the response envelope.
export class RawConnection {
  static async open(path, { version = PROTOCOL_VERSION } = {}) {
    const socket = createConnection(path);
    await new Promise((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    const raw = new RawConnection(socket);
    raw.#send({ type: "hello", version });
    raw.hello = await raw.log.waitFor((m) => m.type === "hello" || m.type === "hello_error");
    if (raw.hello.type !== "hello") throw new Error(`hello refused: ${JSON.stringify(raw.hello)}`);
    return raw;
  }

  #socket;
  #decoder = new ServerMessageDecoder();
  #sequence = 0;

  constructor(socket) {
    this.#socket = socket;
    this.log = new EventLog();
    this.closed = new Promise((resolve) => socket.once("close", resolve));
    this.decodeError = undefined;
    socket.on("data", (chunk) => {
      try {
        for (const message of this.#decoder.push(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength))) {
          this.log.push(message);
        }
      } catch (error) {
        this.decodeError = error;
        socket.destroy();
      }
    });
    socket.on("error", () => {});
  }

  #send(message) {
    this.#socket.write(encodeClientMessage(message));
  }

  request(target, call) {
    const id = `raw-${++this.#sequence}`;
    const response = this.log.waitFor((m) => m.type === "response" && m.id === id);
    this.#send({ type: "request", id, target, call });
    return response;
  }

  close() {
    this.#socket.destroy();
  }
}
