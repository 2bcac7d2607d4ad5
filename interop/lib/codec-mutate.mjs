// Byte-level mutations of frames, and the CBOR edge items they splice in.

export const hex = (bytes) => Buffer.from(bytes).toString("hex");
export const unhex = (s) => new Uint8Array(Buffer.from(s, "hex"));

export function frame(payload) {
  const out = new Uint8Array(4 + payload.length);
  new DataView(out.buffer).setUint32(0, payload.length);
  out.set(payload, 4);
  return out;
}

export function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

// Item spans of well-formed definite-length CBOR: [{start, end, role}], role "key"/"value"/"root".
export function itemSpans(bytes) {
  const spans = [];
  let i = 0;
  const arg = (ai) => {
    if (ai < 24) return ai;
    const n = { 24: 1, 25: 2, 26: 4, 27: 8 }[ai];
    if (n === undefined) throw new Error("not a definite head");
    let v = 0;
    for (let k = 0; k < n; k++) v = v * 256 + bytes[i++];
    return v;
  };
  const item = (role) => {
    const start = i;
    const ib = bytes[i++];
    const major = ib >> 5;
    const ai = ib & 31;
    if (major === 7) {
      i += { 24: 1, 25: 2, 26: 4, 27: 8 }[ai] ?? 0;
    } else {
      const n = arg(ai);
      if (major === 2 || major === 3) i += n;
      else if (major === 4) for (let k = 0; k < n; k++) item("value");
      else if (major === 5) {
        for (let k = 0; k < n; k++) {
          item("key");
          item("value");
        }
      } else if (major === 6) item("value");
    }
    spans.push({ start, end: i, role });
  };
  item("root");
  if (i !== bytes.length) throw new Error("itemSpans: trailing bytes");
  return spans;
}

const nest = (n, inner) => "81".repeat(n) + inner;

// Edge items, each as hex, with a note. Some are whole items, some bare heads.
export const EDGE_ITEMS = [
  // indefinite lengths
  ["5f4161ff", "indefinite byte string"],
  ["7f6161ff", "indefinite text string"],
  ["9f01ff", "indefinite array"],
  ["bf616101ff", "indefinite map"],
  ["1f", "ai 31 on major 0"],
  ["3f", "ai 31 on major 1"],
  // tags
  ["c000", "tag 0"],
  ["c1fb41d0000000000000", "tag 1"],
  ["d82000", "tag 32"],
  ["d9d9f7f6", "self-describe tag"],
  ["c249010000000000000000", "bignum tag"],
  // simple values and floats
  ["f7", "undefined"],
  ["e0", "simple 0"],
  ["f3", "simple 19"],
  ["f820", "simple 32 (two bytes)"],
  ["f8ff", "simple 255"],
  ["f8", "f8 without its byte"],
  ["f93c00", "half 1.0"],
  ["f97e00", "half NaN"],
  ["f9", "half without bytes"],
  ["fa3f800000", "single 1.0"],
  ["fa7fc00000", "single NaN"],
  ["fc", "simple ai 28"],
  ["fd", "simple ai 29"],
  ["fe", "simple ai 30"],
  ["ff", "break"],
  ["fb7ff0000000000000", "float +Infinity"],
  ["fbfff0000000000000", "float -Infinity"],
  ["fb7ff8000000000000", "float NaN"],
  ["fb4340000000000000", "float 2^53"],
  ["fb433fffffffffffff", "float 2^53-1"],
  ["fbc33fffffffffffff", "float -(2^53-1)"],
  ["fb3ff0000000000000", "integral float 1.0"],
  ["fb8000000000000000", "float -0"],
  ["fb0000000000000000", "float +0"],
  ["fb0000000000000001", "float min subnormal"],
  ["fb3ff0", "float truncated"],
  // ai 28..30 on every major
  ["1c", "major 0 ai 28"],
  ["3d", "major 1 ai 29"],
  ["5e", "major 2 ai 30"],
  ["7c", "major 3 ai 28"],
  ["9d", "major 4 ai 29"],
  ["be", "major 5 ai 30"],
  ["dc", "major 6 ai 28"],
  // non-canonical and big integers
  ["1801", "non-minimal 1 (1 byte)"],
  ["190001", "non-minimal 1 (2 bytes)"],
  ["1a00000001", "non-minimal 1 (4 bytes)"],
  ["1b0000000000000001", "non-minimal 1 (8 bytes)"],
  ["1817", "non-minimal 23"],
  ["3800", "non-minimal -1"],
  ["1b001fffffffffffff", "2^53-1"],
  ["1b0020000000000000", "2^53"],
  ["1bffffffffffffffff", "2^64-1"],
  ["3b001ffffffffffffe", "-(2^53-1)"],
  ["3b001fffffffffffff", "-2^53"],
  ["3bffffffffffffffff", "-2^64"],
  ["1bffffffff", "8-byte head, 4 bytes"],
  ["18", "1-byte head without its byte"],
  // strings
  ["40", "empty byte string"],
  ["43010203", "byte string"],
  ["61ff", "invalid UTF-8"],
  ["62c080", "overlong UTF-8"],
  ["63eda080", "surrogate in UTF-8"],
  ["64f4908080", "code point above U+10FFFF"],
  ["63efbbbf", "BOM"],
  ["6100", "NUL"],
  ["780161", "non-minimal text length"],
  ["7a01000001", "text longer than the frame limit"],
  ["5a01000001", "bytes longer than the frame limit"],
  ["7a00ffffff", "text declared 16 MiB - 1"],
  ["7b0020000000000000", "text length 2^53"],
  ["7b0000000000000001" + "61", "text with 8-byte length"],
  // containers
  ["80", "empty array"],
  ["a0", "empty map"],
  ["9a000f4241", "array of 1000001"],
  ["9a000f4240", "array of 1000000 (truncated)"],
  ["ba000f4241", "map of 1000001"],
  ["9b0020000000000000", "array length 2^53"],
  ["a10102", "integer map key"],
  ["a1f6f6", "null map key"],
  ["a1410000", "byte string map key"],
  ["a1816161f6", "array map key"],
  ["a2616101616102", "duplicate key"],
  ["a2616101616202", "two keys"],
  ["a16161", "map missing its value"],
  ["8201", "array missing an element"],
  ["a1695f5f70726f746f5f5ff5", "__proto__ key"],
  ["a16130f5", "integer-like key"],
  ["a2616201613102", "integer-like key second"],
  [nest(63, "f6"), "63 nested arrays"],
  [nest(64, "f6"), "64 nested arrays"],
  [nest(65, "f6"), "65 nested arrays"],
  ["a16178" + "a16178".repeat(64) + "f6", "65 nested maps"],
  [nest(70, "ff"), "break deep inside 70 arrays"],
  ["f6", "null"],
  ["f5", "true"],
];

// The payload of a frame (or undefined if the header does not match the length).
function payloadOf(bytes) {
  if (bytes.length < 4) return undefined;
  const n = new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0);
  return n === bytes.length - 4 ? bytes.subarray(4) : undefined;
}

const HEADER_LENGTHS = (len) => [0, 1, len - 1, len + 1, len * 2, 16777215, 16777216, 16777217, 0x7fffffff, 0xffffffff, 0x01000000];

// One random mutation of a valid frame: {bytes, how}.
export function mutateFrame(rng, validFrame) {
  const payload = payloadOf(validFrame);
  const len = payload.length;
  const kind = rng.int(10);
  switch (kind) {
    case 0: {
      const out = Uint8Array.from(validFrame);
      const n = rng.range(1, 3);
      const at = [];
      for (let k = 0; k < n; k++) {
        const i = rng.int(out.length);
        out[i] ^= 1 << rng.int(8);
        at.push(i);
      }
      return { bytes: out, how: `bit flip at ${at.join(",")}` };
    }
    case 1: {
      const out = Uint8Array.from(validFrame);
      const i = 4 + rng.int(len);
      out[i] = rng.int(256);
      return { bytes: out, how: `byte ${i} := ${out[i].toString(16)}` };
    }
    case 2: {
      const cut = rng.int(validFrame.length);
      return { bytes: validFrame.slice(0, cut), how: `truncate to ${cut}` };
    }
    case 3: {
      const extra = rng.chance(0.5) ? rng.bytes(rng.range(1, 8)) : frame(rng.bytes(rng.range(0, 6)));
      return { bytes: concat(validFrame, extra), how: `extend by ${hex(extra)}` };
    }
    case 4: {
      const out = Uint8Array.from(validFrame);
      const n = rng.chance(0.7) ? rng.pick(HEADER_LENGTHS(len)) : rng.int(2 ** 32);
      new DataView(out.buffer).setUint32(0, n >>> 0);
      return { bytes: out, how: `length header := ${n >>> 0}` };
    }
    case 5: {
      // Grow or shrink the payload by a byte and keep the header consistent.
      const p = Uint8Array.from(payload);
      const i = rng.int(len + 1);
      const np = rng.chance(0.5) ? concat(p.subarray(0, i), Uint8Array.of(rng.int(256)), p.subarray(i)) : concat(p.subarray(0, i), p.subarray(i + 1));
      return { bytes: frame(np), how: `payload ${np.length > len ? "insert" : "delete"} at ${i}` };
    }
    default: {
      // Replace one item of the payload by an edge item.
      const spans = itemSpans(payload);
      const span = rng.pick(spans);
      const [edgeHex, note] = rng.pick(EDGE_ITEMS);
      const np = concat(payload.subarray(0, span.start), unhex(edgeHex), payload.subarray(span.end));
      const keep = rng.chance(0.1);
      const bytes = keep ? concat(validFrame.subarray(0, 4), np) : frame(np);
      return { bytes, how: `${span.role} at ${span.start} := ${note}${keep ? " (header kept)" : ""}` };
    }
  }
}

// Random bytes: raw, or a consistent header around a random payload.
export function randomChunk(rng) {
  if (rng.chance(0.3)) return { bytes: rng.bytes(rng.range(0, 24)), how: "random bytes" };
  const n = rng.range(0, 24);
  const p = rng.bytes(n);
  if (n > 0 && rng.chance(0.5)) p[0] = 0xa0 + rng.range(1, 4);
  return { bytes: frame(p), how: "framed random payload" };
}
