// Seeded generators of client and server messages (as ordered trees, see codec-value.mjs).

import { isArrayIndexKey, OMap } from "./codec-value.mjs";

// sfc32, seeded through splitmix32 so that nearby seeds give unrelated streams.
export class Rng {
  constructor(seed) {
    let s = seed >>> 0;
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let i = 0; i < 12; i++) this.u32();
  }
  u32() {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t >>> 0;
  }
  float() {
    return this.u32() / 4294967296;
  }
  int(n) {
    return Math.floor(this.float() * n);
  }
  range(lo, hi) {
    return lo + this.int(hi - lo + 1);
  }
  chance(p) {
    return this.float() < p;
  }
  pick(xs) {
    return xs[this.int(xs.length)];
  }
  bytes(n) {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.int(256);
    return out;
  }
  // A random finite double from random bits (retrying NaN/Infinity).
  double() {
    for (;;) {
      const buf = new DataView(new ArrayBuffer(8));
      buf.setUint32(0, this.u32());
      buf.setUint32(4, this.u32());
      const v = buf.getFloat64(0);
      if (Number.isFinite(v)) return v;
    }
  }
}

const MAX = Number.MAX_SAFE_INTEGER;
const EDGE_INTS = [0, 1, 23, 24, 255, 256, 65535, 65536, 4294967295, 4294967296, MAX, MAX - 1, -1, -24, -25, -256, -257, -65536, -65537, -4294967296, -4294967297, -MAX, -(MAX - 1)];
// Integral values beyond ±(2^53−1) (1e21, 1e300, …) are left out: baton's JSON input cannot
// hold them at all (see the named case "encode: an unsafe integer …").
const EDGE_FLOATS = [0.5, -0.5, 1.5, 1.1, 0.1, -0.0, 1234567.125, -1.5e-300, 5e-324, -5e-324, 2.2250738585072014e-308, 4503599627370495.5, 1e-7, 1.2345e-21, 123456.789, Math.PI, 0.30000000000000004];
const STRINGS = [
  "",
  "a",
  "hello",
  "é",
  "中文字符",
  "😀",
  "𝄞 music",
  "a😀b",
  "\u{10ffff}",
  "\ufeffbom",
  "\u0000",
  "line\nbreak\ttab\r",
  "quote\"back\\slash",
  "__proto__",
  "constructor",
  "\u2028\u2029",
  "\ud7ff\ue000\ufffd",
  "x".repeat(23),
  "y".repeat(24),
  "z".repeat(255),
  "w".repeat(256),
];
const KEY_WORDS = ["a", "b", "id", "type", "value", "name", "ok", "items", "x", "é", "😀", "", "__proto__", "toString", "key with space", "zz"];
const INT_KEYS = ["0", "1", "2", "10", "42", "007", "-1", "1.5", "4294967294", "4294967295"];

export function genString(rng) {
  const r = rng.int(10);
  if (r < 4) return rng.pick(STRINGS);
  if (r < 8) {
    const n = rng.int(12);
    let s = "";
    for (let i = 0; i < n; i++) {
      const k = rng.int(10);
      if (k < 6) s += String.fromCharCode(0x20 + rng.int(95));
      else if (k < 8) s += String.fromCodePoint(0xa0 + rng.int(0xd7ff - 0xa0));
      else if (k < 9) s += String.fromCodePoint(0x10000 + rng.int(0x10ffff - 0x10000));
      else s += String.fromCharCode(rng.int(0x20));
    }
    return s;
  }
  if (r < 9) return "s".repeat(rng.chance(0.9) ? rng.pick([300, 1000]) : rng.pick([65535, 65536]));
  return rng.pick(STRINGS) + rng.pick(STRINGS);
}

export function genNumber(rng) {
  for (;;) {
    const v = genAnyNumber(rng);
    if (!Number.isInteger(v) || Number.isSafeInteger(v)) return v;
  }
}

function genAnyNumber(rng) {
  const r = rng.int(10);
  if (r < 3) return rng.range(-30, 300);
  if (r < 5) return rng.pick(EDGE_INTS);
  if (r < 6) return rng.range(-MAX, MAX);
  if (r < 7) return rng.pick(EDGE_FLOATS);
  if (r < 8) return Math.round(rng.float() * 1e6) / 100;
  return rng.double();
}

// Keys: mostly words; sometimes integer-like (which a JavaScript object reorders, §12).
export function genKey(rng, { intKeys }) {
  if (intKeys && rng.chance(0.08)) return rng.pick(INT_KEYS);
  for (;;) {
    const k = rng.chance(0.6) ? rng.pick(KEY_WORDS) : genString(rng).slice(0, 20);
    if (intKeys || !isArrayIndexKey(k)) return k;
  }
}

export function genValue(rng, depth = 0, opts = { intKeys: true }) {
  const leaf = depth >= 4 || rng.chance(0.45 + depth * 0.1);
  if (leaf) {
    const r = rng.int(10);
    if (r < 1) return null;
    if (r < 2) return rng.chance(0.5);
    if (r < 6) return genNumber(rng);
    return genString(rng);
  }
  const n = rng.chance(0.1) ? 0 : rng.range(1, rng.chance(0.05) ? 30 : 5);
  if (rng.chance(0.5)) return Array.from({ length: n }, () => genValue(rng, depth + 1, opts));
  const entries = [];
  for (let i = 0; i < n; i++) {
    const k = genKey(rng, opts);
    if (!entries.some(([x]) => x === k)) entries.push([k, genValue(rng, depth + 1, opts)]);
  }
  return new OMap(entries);
}

export function genUuid(rng) {
  const h = (n) => Array.from({ length: n }, () => "0123456789abcdef"[rng.int(16)]).join("");
  return `${h(8)}-${h(4)}-4${h(3)}-${"89ab"[rng.int(4)]}${h(3)}-${h(12)}`;
}

export function genId(rng) {
  const r = rng.int(6);
  if (r < 3) return `request-${rng.range(1, 100000)}`;
  if (r < 4) return genUuid(rng);
  const s = genString(rng);
  return s === "" ? "x" : s;
}

export function genTarget(rng) {
  const serverId = genUuid(rng);
  if (rng.chance(0.5)) return new OMap([["serverId", serverId]]);
  return new OMap([
    ["serverId", serverId],
    ["sessionId", genId(rng)],
    ["attachmentId", rng.chance(0.7) ? genUuid(rng) : genId(rng)],
  ]);
}

const SERVICES = ["pi.session-management", "pi.session-directory", "pi.models", "pi.agent-controller", "pi.transcript", "test.counter"];
const MEMBERS = ["attach", "detach", "list", "create", "remove", "prompt", "state", "increment"];

export function genCall(rng, opts) {
  const r = rng.int(10);
  const args = () => Array.from({ length: rng.int(4) }, () => genValue(rng, 1, opts));
  if (r < 1) return new OMap([["serviceId", "$chord.service"], ["member", "catalogue"], ["args", []]]);
  if (r < 2) {
    return new OMap([
      ["serviceId", "$chord.service"],
      ["member", "subscribe"],
      ["args", [`service-${rng.range(1, 999)}`, rng.pick(SERVICES), rng.pick(["singleton", "keyed"])]],
    ]);
  }
  if (r < 3) return new OMap([["serviceId", "$chord.service"], ["member", "unsubscribe"], ["args", [`service-${rng.range(1, 999)}`]]]);
  if (r < 6) return new OMap([["serviceId", rng.pick(SERVICES)], ["member", rng.pick(MEMBERS)], ["args", args()]]);
  if (r < 8) {
    return new OMap([
      ["serviceId", rng.pick(SERVICES)],
      ["instance", new OMap([["key", genId(rng)], ["generation", rng.range(1, 1000)]])],
      ["member", rng.pick(MEMBERS)],
      ["args", args()],
    ]);
  }
  // The protocol layer treats `call` as opaque JSON.
  return genValue(rng, 1, opts);
}

export function genClientMessage(rng, opts = { intKeys: true }) {
  const r = rng.int(10);
  if (r < 2) {
    const version = rng.chance(0.7) ? 8 : rng.pick([0, 1, 7, 9, 255, 65536, MAX]);
    return new OMap([["type", "hello"], ["version", version]]);
  }
  if (r < 8) {
    return new OMap([["type", "request"], ["id", genId(rng)], ["target", genTarget(rng)], ["call", genCall(rng, opts)]]);
  }
  return new OMap([["type", "cancel"], ["id", genId(rng)], ["target", genTarget(rng)]]);
}

const ERROR_CODES = ["invalid_request", "version", "cancelled", "internal_error", "wrong_server", "session_not_found", "session_not_attached", "server_draining", "service_not_allowed", "service_member_not_found", "application_error"];

function genError(rng) {
  return new OMap([
    ["code", rng.chance(0.8) ? rng.pick(ERROR_CODES) : genId(rng)],
    ["message", rng.chance(0.8) ? rng.pick(["Internal server error", "RPC request cancelled", "Unsupported protocol version 9; expected 8", ""]) : genString(rng)],
  ]);
}

function genPath(rng) {
  return Array.from({ length: rng.int(4) }, () => (rng.chance(0.6) ? rng.pick(KEY_WORDS) : rng.int(10)));
}

function genOp(rng, opts) {
  switch (rng.int(8)) {
    case 0:
      return ["r", genValue(rng, 2, opts)];
    case 1:
      return ["s", genPath(rng), genValue(rng, 2, opts)];
    case 2:
      return ["d", genPath(rng)];
    case 3:
      return ["a", genPath(rng), genString(rng)];
    case 4:
      return ["t", genPath(rng), rng.int(50)];
    case 5:
      return ["p", genPath(rng), rng.int(5), rng.int(3), Array.from({ length: rng.int(3) }, () => genValue(rng, 3, opts))];
    case 6:
      return ["#", rng.int(20), genPath(rng)];
    default:
      return ["m", genPath(rng), Array.from({ length: rng.int(4) }, () => rng.int(4))];
  }
}

function genUpdate(rng, opts) {
  const r = rng.int(10);
  if (r < 5) {
    return new OMap([
      ["type", "state"],
      ["member", rng.pick(["state", "sessions", "models", "value"])],
      ["sequence", rng.range(0, 1000)],
      ["ops", Array.from({ length: rng.range(0, 4) }, () => genOp(rng, opts))],
    ]);
  }
  if (r < 8) {
    const type = rng.pick(["unavailable", "replaced", "spawned", "closed", "reset"]);
    const entries = [["type", type]];
    if (type !== "unavailable") entries.push(["instance", new OMap([["key", genId(rng)], ["generation", rng.range(1, 9)]])]);
    return new OMap(entries);
  }
  return genValue(rng, 1, opts);
}

export function genServerMessage(rng, opts = { intKeys: true }) {
  const r = rng.int(12);
  if (r < 1) return new OMap([["type", "hello"], ["version", 8], ["serverId", genUuid(rng)]]);
  if (r < 2) return new OMap([["type", "hello_error"], ["error", genError(rng)]]);
  if (r < 4) return new OMap([["type", "response"], ["id", genId(rng)], ["ok", true]]);
  if (r < 6) return new OMap([["type", "response"], ["id", genId(rng)], ["ok", true], ["result", genValue(rng, 1, opts)]]);
  if (r < 7) return new OMap([["type", "response"], ["id", genId(rng)], ["ok", false], ["error", genError(rng)]]);
  if (r < 10) return new OMap([["type", "service_update"], ["subscriptionId", `service-${rng.range(1, 999)}`], ["update", genUpdate(rng, opts)]]);
  if (r < 11) {
    return new OMap([
      ["type", "attachment"],
      ["attachment", new OMap([["serverId", genUuid(rng)], ["sessionId", genId(rng)], ["attachmentId", genUuid(rng)]])],
    ]);
  }
  return new OMap([["type", "attachment"], ["attachment", null]]);
}

// Envelope edits: a valid message made wrong (or, sometimes, still right) at the tree level.
const WRONG_VALUES = () => [null, true, false, 0, -1, 8.5, -0.0, "", "8", "x", [], [8], new OMap(), new OMap([["k", 1]])];

function paths(v, prefix = [], depthLimit = 2) {
  const out = [];
  if (v instanceof OMap && prefix.length <= depthLimit) {
    for (const [k, x] of v.entries) {
      out.push([...prefix, k]);
      out.push(...paths(x, [...prefix, k], depthLimit));
    }
  }
  return out;
}

function cloneTree(v) {
  if (Array.isArray(v)) return v.map(cloneTree);
  if (v instanceof OMap) return new OMap(v.entries.map(([k, x]) => [k, cloneTree(x)]));
  return v;
}

function parentOf(root, path) {
  let node = root;
  for (const k of path.slice(0, -1)) node = node.get(k);
  return node;
}

export function editEnvelope(rng, msg) {
  const out = cloneTree(msg);
  const ps = paths(out);
  const kind = rng.int(6);
  const path = rng.pick(ps);
  const parent = parentOf(out, path);
  const key = path[path.length - 1];
  const at = parent.entries.findIndex(([k]) => k === key);
  switch (kind) {
    case 0:
      parent.entries.splice(at, 1);
      return { tree: out, edit: `remove ${path.join(".")}` };
    case 1: {
      const extra = rng.pick(["extra", "details", "snapshot", "result", "error", "sessionId", "attachmentId", "instance", "ok", "serverId"]);
      if (parent.has(extra)) return { tree: out, edit: "none" };
      parent.entries.splice(rng.int(parent.entries.length + 1), 0, [extra, rng.pick(WRONG_VALUES())]);
      return { tree: out, edit: `add ${[...path.slice(0, -1), extra].join(".")}` };
    }
    case 2:
    case 3:
      parent.entries[at][1] = rng.pick(WRONG_VALUES());
      return { tree: out, edit: `retype ${path.join(".")}` };
    case 4: {
      const j = rng.int(parent.entries.length);
      [parent.entries[at], parent.entries[j]] = [parent.entries[j], parent.entries[at]];
      return { tree: out, edit: `swap ${path.join(".")}` };
    }
    default: {
      const wrong = rng.pick(["hello", "hello_error", "request", "response", "cancel", "service_update", "attachment", "Hello", "unknown", "", 8]);
      if (out.has("type")) out.entries[out.entries.findIndex(([k]) => k === "type")][1] = wrong;
      return { tree: out, edit: `type=${wrong}` };
    }
  }
}
