// Ordered JSON values for the codec differential.
//
// A value is null, a boolean, a number (negative zero kept), a string, an Array of values, or
// an OMap: an ordered list of [key, value] entries. The order is what a generator meant (and
// what baton keeps); a JavaScript object puts integer-like keys first, so `toJs` may reorder,
// and `jsOrder` computes that reordering so a difference can be told apart from a bug (§12).

export class OMap {
  constructor(entries = []) {
    this.entries = entries;
  }
  get(key) {
    const e = this.entries.find(([k]) => k === key);
    return e ? e[1] : undefined;
  }
  has(key) {
    return this.entries.some(([k]) => k === key);
  }
}

export const omap = (obj) => new OMap(Object.entries(obj));

// JavaScript's array-index keys: canonical decimal strings below 2^32 − 1.
export function isArrayIndexKey(key) {
  return /^(0|[1-9][0-9]*)$/.test(key) && Number(key) < 4294967295;
}

// The tree as a plain JavaScript value (what upstream's encoder is given).
export function toJs(v) {
  if (Array.isArray(v)) return v.map(toJs);
  if (v instanceof OMap) {
    const o = {};
    for (const [k, x] of v.entries) {
      Object.defineProperty(o, k, { value: toJs(x), enumerable: true, writable: true, configurable: true });
    }
    return o;
  }
  return v;
}

// A decoded JavaScript value as a tree, in Object.keys order.
export function fromJs(v) {
  if (Array.isArray(v)) return v.map(fromJs);
  if (v instanceof Uint8Array) return { bytes: Buffer.from(v).toString("hex") };
  if (v !== null && typeof v === "object") return new OMap(Object.keys(v).map((k) => [k, fromJs(v[k])]));
  return v;
}

// The order a JavaScript object would give the same entries.
export function jsOrder(v) {
  if (Array.isArray(v)) return v.map(jsOrder);
  if (v instanceof OMap) {
    const idx = v.entries.filter(([k]) => isArrayIndexKey(k)).sort((a, b) => Number(a[0]) - Number(b[0]));
    const rest = v.entries.filter(([k]) => !isArrayIndexKey(k));
    return new OMap([...idx, ...rest].map(([k, x]) => [k, jsOrder(x)]));
  }
  return v;
}

export function hasReorderedKeys(v) {
  return !deepEqual(v, jsOrder(v));
}

export function deepEqual(a, b) {
  if (typeof a === "number" || typeof b === "number") return Object.is(a, b);
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  if (a instanceof OMap) {
    return (
      b instanceof OMap &&
      a.entries.length === b.entries.length &&
      a.entries.every(([k, x], i) => b.entries[i][0] === k && deepEqual(x, b.entries[i][1]))
    );
  }
  if (a !== null && typeof a === "object" && "bytes" in a) return b !== null && typeof b === "object" && b.bytes === a.bytes;
  return a === b;
}

// JSON text in tree order. Negative zero is written `-0.0` so that a float parser keeps it.
export function toJson(v) {
  if (v === null) return "null";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "number") return Object.is(v, -0) ? "-0.0" : JSON.stringify(v);
  if (typeof v === "string") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(toJson).join(",")}]`;
  if (v instanceof OMap) return `{${v.entries.map(([k, x]) => `${JSON.stringify(k)}:${toJson(x)}`).join(",")}}`;
  if (typeof v === "object" && "bytes" in v) return `h'${v.bytes}'`;
  throw new Error(`not a JSON tree value: ${String(v)}`);
}

// Parses JSON text keeping key order (a repeated key is an error: neither side produces one).
export function parseJson(text) {
  let i = 0;
  const ws = () => {
    while (i < text.length && " \t\n\r".includes(text[i])) i++;
  };
  const fail = (why) => {
    throw new Error(`bad JSON at ${i}: ${why}: ${text.slice(Math.max(0, i - 20), i + 20)}`);
  };
  const str = () => {
    const start = i;
    i++;
    while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    if (i >= text.length) fail("unterminated string");
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const val = () => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const entries = [];
      ws();
      if (text[i] === "}") {
        i++;
        return new OMap(entries);
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected key");
        const k = str();
        if (entries.some(([x]) => x === k)) fail(`duplicate key ${k}`);
        ws();
        if (text[i++] !== ":") fail("expected :");
        entries.push([k, val()]);
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] === "}") return new OMap(entries);
        fail("expected , or }");
      }
    }
    if (c === "[") {
      i++;
      const items = [];
      ws();
      if (text[i] === "]") {
        i++;
        return items;
      }
      for (;;) {
        items.push(val());
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i++] === "]") return items;
        fail("expected , or ]");
      }
    }
    if (c === '"') return str();
    const m = /^(?:true|false|null|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)/.exec(text.slice(i, i + 400));
    if (!m) fail("unexpected token");
    i += m[0].length;
    if (m[0] === "true") return true;
    if (m[0] === "false") return false;
    if (m[0] === "null") return null;
    return Number(m[0]);
  };
  const v = val();
  ws();
  if (i !== text.length) fail("trailing text");
  return v;
}
