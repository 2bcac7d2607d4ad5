// Our `ByteTransport` (pi-client's interface) over a browser WebSocket.
//
// * One binary message per `send()` chunk; inbound binary messages are handed on as they
//   come (a message may hold any part of the byte stream: pi-client's decoder reassembles
//   frames). A text message is a protocol error: the transport fails.
// * Backpressure from `bufferedAmount`: while the socket holds more than `highWater` bytes
//   unsent, chunks wait in a queue (in order) and their `send()` promises resolve only when
//   they are handed to the socket. The queue is bounded (`maxQueued` bytes); past it the
//   transport fails rather than buffer without limit (pi-client then reconnects).
// * Exactly one terminal handler: `onClose` for a clean close, `onError` otherwise.

const DEFAULT_HIGH_WATER = 1 << 20; // 1 MiB in the socket's own buffer
const DEFAULT_MAX_QUEUED = 32 << 20; // 32 MiB waiting behind it (> the 16 MiB frame limit)
const DRAIN_POLL_MS = 16; // the browser has no "drained" event: look once a frame

/** The page's WebSocket endpoint (same origin as the page: the host checks Origin). */
export function webSocketUrl(loc = location) {
  return `${loc.protocol === "https:" ? "wss://" : "ws://"}${loc.host}/ws`;
}

/**
 * A pi-client `ByteTransportFactory` opening a fresh WebSocket per connection.
 * @param {string} url
 * @param {{highWater?: number, maxQueued?: number, onSocket?: (ws: WebSocket) => void}} [options]
 */
export function webSocketTransportFactory(url, options = {}) {
  const highWater = options.highWater ?? DEFAULT_HIGH_WATER;
  const maxQueued = options.maxQueued ?? DEFAULT_MAX_QUEUED;
  return (handlers) =>
    new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      ws.binaryType = "arraybuffer";
      options.onSocket?.(ws);
      /** @type {{chunk: Uint8Array, resolve: () => void, reject: (e: Error) => void}[]} */
      const queue = [];
      let queuedBytes = 0;
      let opened = false;
      let ended = false;
      let timer;

      const end = (error) => {
        if (ended) return;
        ended = true;
        clearTimeout(timer);
        const failure = error ?? new Error("WebSocket closed");
        for (const waiting of queue.splice(0)) waiting.reject(failure);
        queuedBytes = 0;
        if (ws.readyState === WebSocket.CONNECTING || ws.readyState === WebSocket.OPEN) ws.close();
        if (!opened) reject(failure);
        else if (error) handlers.onError(error);
        else handlers.onClose();
      };

      const drain = () => {
        timer = undefined;
        if (ended) return;
        while (queue.length > 0 && ws.bufferedAmount < highWater) {
          const next = queue.shift();
          queuedBytes -= next.chunk.byteLength;
          ws.send(next.chunk);
          next.resolve();
        }
        if (queue.length > 0) timer = setTimeout(drain, DRAIN_POLL_MS);
      };

      const transport = {
        send(chunk) {
          if (ended || ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error("WebSocket is not open"));
          if (queue.length === 0 && ws.bufferedAmount < highWater) {
            ws.send(chunk);
            return Promise.resolve();
          }
          if (queuedBytes + chunk.byteLength > maxQueued) {
            const error = new Error(`WebSocket send queue over ${maxQueued} bytes: the connection is too slow`);
            end(error);
            return Promise.reject(error);
          }
          return new Promise((resolveSend, rejectSend) => {
            // The chunk may be a view into a buffer the caller reuses: keep a copy.
            queue.push({ chunk: chunk.slice(), resolve: resolveSend, reject: rejectSend });
            queuedBytes += chunk.byteLength;
            if (timer === undefined) timer = setTimeout(drain, DRAIN_POLL_MS);
          });
        },
        close() {
          end(undefined);
        },
      };

      ws.onopen = () => {
        opened = true;
        resolve(transport);
      };
      ws.onmessage = (event) => {
        if (ended) return;
        if (typeof event.data === "string") {
          end(new Error("The host sent a text message; only binary messages carry the protocol"));
          return;
        }
        handlers.onData(new Uint8Array(event.data));
      };
      // An error is always followed by a close event, which carries the outcome.
      ws.onerror = () => {};
      ws.onclose = (event) => {
        if (ended) return;
        if (!opened) end(new Error("The WebSocket could not be opened (refused, or the host is down)"));
        else if (event.wasClean && event.code === 1000) end(undefined);
        else end(new Error(`WebSocket closed (${event.code}${event.reason ? `: ${event.reason}` : ""})`));
      };
    });
}
