// pi-client's `Client` must be told the server id it expects, and the HTTP surface does not
// name it: one short WebSocket connection asks the host's `hello` for it, then closes.

import { encodeClientMessage, PROTOCOL_VERSION, ServerMessageDecoder } from "@earendil-works/pi-protocol";

/** @param {string} url */
export function probeServerId(url, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    const decoder = new ServerMessageDecoder();
    let settled = false;
    const finish = (fn, value) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn(value);
      ws.close();
    };
    const timer = setTimeout(() => finish(reject, new Error("no hello from the host")), timeoutMs);
    ws.onopen = () => ws.send(encodeClientMessage({ type: "hello", version: PROTOCOL_VERSION }));
    ws.onmessage = (event) => {
      if (typeof event.data === "string") return finish(reject, new Error("text message from the host"));
      try {
        for (const message of decoder.push(new Uint8Array(event.data))) {
          if (message.type === "hello") return finish(resolve, message.serverId);
          return finish(reject, new Error(message.error?.message ?? "the host refused the hello"));
        }
      } catch (error) {
        finish(reject, error);
      }
    };
    ws.onerror = () => {};
    ws.onclose = () => finish(reject, new Error("The WebSocket could not be opened (refused, or the host is down)"));
  });
}
