// The projection: pi-coding-agent's `convertToLlm` beside baton's `projection::convert` (the
// per-role rules) on seeded generated transcripts, and baton's `projection::project`
// (conversion + pairing repair) beside upstream's provider-side repair
// (`convertToLlm` then pi-ai's `transformMessages`) on one transcript per repair rule.

import assert from "node:assert/strict";
import { transformMessages } from "@earendil-works/pi-ai/api/transform-messages";
import { deviation } from "./report.mjs";
import { projectBaton } from "./agent-core-baton.mjs";
import { convertToLlm } from "./agent-core-pi-coding-agent.mjs";

// mulberry32: a small deterministic generator
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    int: (n) => Math.floor(next() * n),
    pick: (xs) => xs[Math.floor(next() * xs.length)],
    chance: (p) => next() < p,
  };
}

const usage = () => ({
  input: 3,
  output: 5,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: 8,
  cost: { input: 0.5, output: 0.25, cacheRead: 0, cacheWrite: 0, total: 0.75 },
});
const WORDS = ["alpha", "beta", "gamma", "δέλτα", "ε", "line\nbreak", "`tick`", "```fence```", ""];
const IMAGE = { type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" };

function words(r, n = 1 + r.int(4)) {
  return Array.from({ length: n }, () => r.pick(WORDS)).join(" ");
}

function userContent(r) {
  if (r.chance(0.3)) return words(r); // the string form
  const blocks = [{ type: "text", text: words(r) }];
  if (r.chance(0.3)) blocks.push({ ...IMAGE });
  return blocks;
}

const GENERATORS = {
  user: (r, ts) => ({ role: "user", content: userContent(r), timestamp: ts }),
  assistant: (r, ts, state) => {
    const content = [];
    if (r.chance(0.4)) {
      content.push({
        type: "thinking",
        thinking: words(r),
        ...(r.chance(0.5) ? { thinkingSignature: `sig+/${r.int(1000)}=` } : {}),
      });
    }
    content.push({ type: "text", text: words(r), ...(r.chance(0.2) ? { textSignature: `ts_${r.int(99)}` } : {}) });
    const calls = r.int(3);
    for (let i = 0; i < calls; i++) {
      const id = `call_${state.calls++}`;
      content.push({ type: "toolCall", id, name: r.pick(["read", "bash"]), arguments: { path: words(r, 1), n: r.int(9) } });
    }
    return {
      role: "assistant",
      content,
      api: "openai-completions",
      provider: "openai",
      model: "gpt-test",
      ...(r.chance(0.3) ? { responseId: `resp_${r.int(1000)}` } : {}),
      usage: usage(),
      stopReason: calls > 0 ? "toolUse" : "stop",
      timestamp: ts,
    };
  },
  toolResult: (r, ts, state) => ({
    role: "toolResult",
    toolCallId: `call_${Math.max(0, state.calls - 1 - r.int(2))}`,
    toolName: r.pick(["read", "bash"]),
    content: r.chance(0.2) ? [{ type: "text", text: words(r) }, { ...IMAGE }] : [{ type: "text", text: words(r) }],
    ...(r.chance(0.4) ? { details: { exit: r.int(3) } } : {}),
    isError: r.chance(0.3),
    timestamp: ts,
  }),
  bashExecution: (r, ts) => {
    const truncated = r.chance(0.3);
    const m = {
      role: "bashExecution",
      command: r.pick(["ls -la", "echo `hi`", "make test", "exit 3"]),
      output: r.chance(0.2) ? "" : words(r),
      exitCode: r.pick([0, 0, 1, 127, undefined, null]),
      cancelled: r.chance(0.2),
      truncated,
      ...(truncated && r.chance(0.7) ? { fullOutputPath: `/tmp/out-${r.int(99)}.log` } : {}),
      timestamp: ts,
    };
    const exclude = r.int(3); // absent, false, true
    if (exclude === 1) m.excludeFromContext = false;
    if (exclude === 2) m.excludeFromContext = true;
    if (m.exitCode === undefined) delete m.exitCode;
    return m;
  },
  custom: (r, ts) => ({
    role: "custom",
    customType: r.pick(["ext.note", "ext.reminder"]),
    content: userContent(r),
    display: r.chance(0.5),
    ...(r.chance(0.5) ? { details: { k: words(r, 1) } } : {}),
    timestamp: ts,
  }),
  branchSummary: (r, ts) => ({ role: "branchSummary", summary: words(r, 3), fromId: `e${r.int(50)}`, timestamp: ts }),
  compactionSummary: (r, ts) => ({
    role: "compactionSummary",
    summary: words(r, 3),
    tokensBefore: r.int(100000),
    timestamp: ts,
  }),
};

// `count` transcripts mixing the standard roles with `roles`
export function generateTranscripts(seed, count, roles) {
  const r = rng(seed);
  const all = ["user", "assistant", "toolResult", ...roles];
  return Array.from({ length: count }, () => {
    const state = { calls: 0 };
    let ts = 1_748_568_000_000;
    return Array.from({ length: 1 + r.int(10) }, () => {
      ts += 1 + r.int(1000);
      return GENERATORS[r.pick(all)](r, ts, state);
    });
  });
}

// Model messages compared field by field, timestamps included. Only representation is
// normalised: a user message's string content is one text block (baton stores blocks only).
function normModel(m) {
  const out = structuredClone(m);
  if (out.role === "user" && typeof out.content === "string") out.content = [{ type: "text", text: out.content }];
  return JSON.parse(JSON.stringify(out));
}

function describe(m) {
  return JSON.stringify(m).slice(0, 400);
}

// Compares every projected message; a failure lists the differing source roles with a count
// and a first example each, so one role's difference does not hide another's.
async function convertCase(seed, roles) {
  const transcripts = generateTranscripts(seed, 150, roles);
  const results = await projectBaton(transcripts);
  let compared = 0;
  const byRole = new Map();
  for (let t = 0; t < transcripts.length; t++) {
    const res = results[t];
    if (res.error) throw new Error(`transcript ${t}: ${res.error}`);
    const up = convertToLlm(structuredClone(transcripts[t])).map(normModel);
    const bt = res.convert.map(normModel);
    // the source of each projected message: both sides drop only excluded bash records
    const sources = transcripts[t].filter((m) => !(m.role === "bashExecution" && m.excludeFromContext));
    assert.equal(up.length, sources.length, `transcript ${t}: upstream kept ${up.length} of ${sources.length}`);
    assert.equal(bt.length, up.length, `transcript ${t}: ${up.length} upstream messages, ${bt.length} baton`);
    for (let i = 0; i < up.length; i++) {
      compared += 1;
      try {
        assert.deepStrictEqual(bt[i], up[i]);
      } catch {
        const role = sources[i].role;
        const entry = byRole.get(role) ?? { count: 0, example: `transcript ${t} message ${i}: upstream ${describe(up[i])} | baton ${describe(bt[i])}` };
        entry.count += 1;
        byRole.set(role, entry);
      }
    }
  }
  assert.ok(compared > 100, `only ${compared} messages compared`);
  if (byRole.size > 0) {
    const parts = [...byRole].map(([role, e]) => `${role}: ${e.count} of the compared messages differ, e.g. ${e.example}`);
    throw new Error(`${compared} messages compared; ${parts.join(" ;; ")}`);
  }
}

// ── repair: baton's project beside upstream's convertToLlm + transformMessages ──

const MODEL = { id: "gpt-test", api: "openai-completions", provider: "openai", input: ["text", "image"] };
const ts0 = 1_748_568_000_000;
const user = (text, ts) => ({ role: "user", content: [{ type: "text", text }], timestamp: ts });
const assistant = (calls, ts, extra = {}) => ({
  role: "assistant",
  content: [{ type: "text", text: "ok" }, ...calls.map((id) => ({ type: "toolCall", id, name: "read", arguments: { path: id } }))],
  api: MODEL.api,
  provider: MODEL.provider,
  model: MODEL.id,
  usage: usage(),
  stopReason: calls.length ? "toolUse" : "stop",
  timestamp: ts,
  ...extra,
});
const result = (id, ts) => ({
  role: "toolResult",
  toolCallId: id,
  toolName: "read",
  content: [{ type: "text", text: `result ${id}` }],
  isError: false,
  timestamp: ts,
});

// Synthetic results are stamped at projection time upstream (Date.now()) and with the
// assistant's timestamp in baton: not compared.
function normRepair(m) {
  const out = normModel(m);
  if (out.role === "toolResult" && out.content?.[0]?.text === "No result provided") delete out.timestamp;
  return out;
}

const REPAIR_CASES = [
  {
    name: "error and aborted responses are not replayed",
    transcript: [user("a", ts0), assistant(["c1"], ts0 + 1, { stopReason: "aborted", errorMessage: "Request was aborted" }), assistant([], ts0 + 2, { stopReason: "error", errorMessage: "HTTP 500" }), user("b", ts0 + 3)],
  },
  {
    name: "a call without a result gets a synthetic error result",
    transcript: [user("a", ts0), assistant(["c1", "c2"], ts0 + 1), result("c1", ts0 + 2), user("next", ts0 + 3)],
  },
  {
    name: "a call without a result at the end of the transcript",
    transcript: [user("a", ts0), assistant(["c1"], ts0 + 1)],
  },
  {
    name: "a result without a call",
    transcript: [user("a", ts0), result("ghost", ts0 + 1), user("b", ts0 + 2)],
    deviation:
      "§projection.repair a tool result that answers no open call is dropped by baton; upstream's transformMessages leaves it in place for the provider to reject",
  },
  {
    name: "a result after an interleaved bash record",
    transcript: [
      user("a", ts0),
      assistant(["c1"], ts0 + 1),
      { role: "bashExecution", command: "ls", output: "x", exitCode: 0, cancelled: false, truncated: false, timestamp: ts0 + 2 },
      result("c1", ts0 + 3),
    ],
    deviation:
      "§projection.repair a result found later (before the next assistant) is moved up to follow its call, and the interleaved user text follows the results; upstream closes the call with a synthetic \"No result provided\" at the user message and keeps the real result after it, so the same id is answered twice",
  },
  {
    name: "results out of call order",
    transcript: [user("a", ts0), assistant(["c1", "c2"], ts0 + 1), result("c2", ts0 + 2), result("c1", ts0 + 3)],
    deviation:
      "§projection.repair results are put in the assistant's call order; upstream passes them in transcript order",
  },
  {
    name: "an empty thinking block",
    transcript: [
      user("a", ts0),
      { ...assistant([], ts0 + 1), content: [{ type: "thinking", thinking: "" }, { type: "text", text: "ok" }] },
      user("b", ts0 + 2),
    ],
    deviation:
      "§projection.thinking baton's projection keeps an empty unsigned thinking block; upstream's transformMessages drops it for the same model. Provider-specific replay belongs to the provider in baton (the OpenAI-compatible wire never replays thinking)",
  },
];

async function repairCase(c) {
  const [res] = await projectBaton([c.transcript]);
  if (res.error) throw new Error(res.error);
  const up = transformMessages(convertToLlm(structuredClone(c.transcript)), MODEL).map(normRepair);
  const bt = res.project.map(normRepair);
  try {
    assert.deepStrictEqual(bt, up);
  } catch {
    if (c.deviation) return deviation(c.deviation);
    throw new Error(`upstream ${JSON.stringify(up)} | baton ${JSON.stringify(bt)}`);
  }
  if (c.deviation) throw new Error(`documented deviation no longer seen: ${c.deviation}`);
}

// one transcript that upstream's types allow and baton must at least read
const EDGE_CASES = [
  {
    name: "a branch summary whose fromId is null",
    transcript: [{ role: "branchSummary", summary: "s", fromId: null, timestamp: ts0 }],
  },
  {
    name: "a system message (upstream 1.6 passes it through convertToLlm)",
    transcript: [{ role: "system", content: "be brief", timestamp: 0 }, user("a", ts0)],
    deviation:
      "§projection.system baton's AgentMessage has no system role (the system prompt and tools travel on ModelRequest), so a transcript holding one does not parse",
  },
];

async function edgeCase(c) {
  const [res] = await projectBaton([c.transcript]);
  if (res.error) {
    if (c.deviation) return deviation(c.deviation);
    throw new Error(`baton cannot read it: ${res.error}`);
  }
  const up = convertToLlm(structuredClone(c.transcript)).map(normModel);
  const bt = res.convert.map(normModel);
  assert.deepStrictEqual(bt, up);
  if (c.deviation) throw new Error(`documented deviation no longer seen: ${c.deviation}`);
}

export function projectionCases() {
  const roles = ["bashExecution", "custom", "branchSummary", "compactionSummary"];
  return [
    { name: "standard messages pass through (150 seeded transcripts)", fn: () => convertCase(1, []) },
    ...roles.map((role, i) => ({
      name: `${role} (150 seeded transcripts)`,
      fn: () => convertCase(100 + i, [role]),
    })),
    { name: "all roles mixed (150 seeded transcripts)", fn: () => convertCase(7, roles) },
    ...REPAIR_CASES.map((c) => ({ name: `repair: ${c.name}`, fn: () => repairCase(c) })),
    ...EDGE_CASES.map((c) => ({ name: `edge: ${c.name}`, fn: () => edgeCase(c) })),
  ];
}
