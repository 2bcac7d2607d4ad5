// The two sides of the codec differential: upstream's real encoder/decoders and baton-wire,
// each giving an outcome that compares directly.
//
// Decoding models one chunk fed to a fresh decoder, then end of stream, on both sides:
// {messages: [tree…], error?: string}. Upstream's push yields every message of the chunk or
// throws (none); `end()` may then throw for a cut frame.

import {
  ClientMessageDecoder,
  encodeCbor,
  encodeClientMessage,
  encodeFrame,
  encodeServerMessage,
  ServerMessageDecoder,
} from "@earendil-works/pi-protocol";
import { deepEqual, fromJs, jsOrder, OMap, parseJson, toJs, toJson } from "./codec-value.mjs";
import { hex, unhex } from "./codec-mutate.mjs";

export function upstreamEncode(side, tree, maxFrameLength) {
  const options = maxFrameLength === undefined ? undefined : { maxFrameLength };
  try {
    const bytes = side === "client" ? encodeClientMessage(toJs(tree), options) : encodeServerMessage(toJs(tree), options);
    return { hex: hex(bytes) };
  } catch (e) {
    return { error: e.message };
  }
}

// Upstream's raw CBOR encoder and framing, for envelopes its message encoder would refuse.
export function upstreamRawFrame(tree) {
  return encodeFrame(encodeCbor(toJs(tree)));
}

export function upstreamChunk(side, bytes, maxFrameLength) {
  const options = maxFrameLength === undefined ? undefined : { maxFrameLength };
  const decoder = side === "client" ? new ClientMessageDecoder(options) : new ServerMessageDecoder(options);
  let messages;
  try {
    messages = decoder.push(bytes);
  } catch (e) {
    return { messages: [], error: e.message };
  }
  try {
    decoder.end();
  } catch (e) {
    return { messages: messages.map(fromJs), error: e.message };
  }
  return { messages: messages.map(fromJs) };
}

export async function batonChunk(wire, bytes) {
  const line = await wire.chunk(hex(bytes));
  const tree = parseJson(line);
  if (!(tree instanceof OMap) || !Array.isArray(tree.get("messages"))) throw new Error(`unexpected chunk answer ${line}`);
  const out = { messages: tree.get("messages") };
  if (tree.has("error")) out.error = tree.get("error");
  return out;
}

export const sameEncode = (u, b) => u.hex === b.hex && u.error === b.error;

export function sameDecode(u, b) {
  return u.error === b.error && u.messages.length === b.messages.length && u.messages.every((m, i) => deepEqual(m, b.messages[i]));
}

// Equal once baton's messages are put in JavaScript's key order (§12 map key order).
export function sameDecodeUpToKeyOrder(u, b) {
  return sameDecode(u, { ...b, messages: b.messages.map(jsOrder) });
}

export function describeEncode(o) {
  return o.error !== undefined ? `error: ${o.error}` : o.hex;
}

export function describeDecode(o) {
  const msgs = o.messages.map(toJson).join(", ");
  const text = `[${msgs.length > 300 ? `${msgs.slice(0, 300)}…` : msgs}]`;
  return o.error !== undefined ? `${text} error: ${o.error}` : text;
}

export { hex, unhex };

// Envelope fields (and target/error fields) in the order upstream's object literals build them;
// payloads (`call`, `result`, `update`) untouched. For comparing verdicts when a test reorders
// envelope fields: baton's typed messages always write this order.
const ENVELOPE_ORDER = {
  hello: ["type", "version", "serverId"],
  hello_error: ["type", "error"],
  request: ["type", "id", "target", "call"],
  cancel: ["type", "id", "target"],
  response: ["type", "id", "ok", "result", "error"],
  service_update: ["type", "subscriptionId", "update"],
  attachment: ["type", "attachment"],
};
const SUB_ORDER = {
  target: ["serverId", "sessionId", "attachmentId"],
  attachment: ["serverId", "sessionId", "attachmentId"],
  error: ["code", "message"],
};

function reorder(map, order) {
  const rank = (k) => (order.includes(k) ? order.indexOf(k) : order.length);
  return new OMap([...map.entries].sort((a, b) => rank(a[0]) - rank(b[0])));
}

export function canonicalEnvelope(tree) {
  if (!(tree instanceof OMap)) return tree;
  const order = ENVELOPE_ORDER[tree.get("type")];
  if (!order) return tree;
  const top = reorder(tree, order);
  return new OMap(top.entries.map(([k, v]) => [k, SUB_ORDER[k] && v instanceof OMap ? reorder(v, SUB_ORDER[k]) : v]));
}

export function sameDecodeUpToEnvelopeOrder(u, b) {
  const canon = (o) => ({ ...o, messages: o.messages.map(canonicalEnvelope) });
  return sameDecode(canon(u), canon(b));
}
