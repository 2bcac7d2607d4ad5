// Agent-loop scenarios: plain JSON data, read by both sides (upstream's runAgentLoop in
// agent-core-upstream.mjs, baton's agent::run in the probe, which gets the same object on stdin).
//
// Format:
//   prompt          the user prompt text
//   toolExecution   "parallel" (default) | "sequential"
//   seedSystem      false: do not seed upstream's context with the initial system message that
//                   declares the tools (default true; baton has no system messages)
//   tools           [{ name, description?, parameters: JSON Schema (object of string/integer/
//                   number/boolean/array/object properties, required, additionalProperties) }]
//   turns           one entry per model call, in order:
//                   { items: [{ text } | { thinking } | { thinkingSignature } |
//                             { toolCall: { id, name, arguments } }],
//                     end: "stop" | "length" | "toolUse" | { error: "message" } | "abort" }
//                   Consecutive text (or thinking) items are deltas of one block; a
//                   thinkingSignature signs the open thinking block. "abort": the
//                   harness aborts the run after the items, while the response is still open.
//                   A model call past the last turn gets an error response (or an aborted one
//                   when the run is already aborted, as upstream's faux provider does).
//   calls           per tool call id: { text?, details?, isError?, terminate?, throw?,
//                   abortWhileRunning? }. text defaults to `<tool> <JSON of the arguments>`;
//                   throw makes execute fail with that message; abortWhileRunning makes the call
//                   wait for the abort, which the harness triggers once every such call has
//                   started, then fail with that message.
//   expect          facts checked on baton's run besides the comparison: modelCalls, stop (the
//                   run's final stop reason), terminated (ended by an all-terminate batch),
//                   toolRuns (tool_end events)
//   order           completion order of the gated calls of a parallel batch: each waits for its
//                   gate (after the abort, for abortWhileRunning calls); the first opens once
//                   all of them got there, the next when the loop reports the previous one's end.

const lookup = {
  name: "lookup",
  description: "Look a key up",
  parameters: {
    type: "object",
    properties: { q: { type: "string", description: "key" } },
    required: ["q"],
    additionalProperties: false,
  },
};

const count = {
  name: "count",
  description: "Count to n",
  parameters: {
    type: "object",
    properties: { n: { type: "integer", description: "how far" } },
    required: ["n"],
    additionalProperties: false,
  },
};

const call = (id, name, args) => ({ toolCall: { id, name, arguments: args } });

export const scenarios = [
  {
    name: "plain text",
    expect: { modelCalls: 1, stop: "stop" },
    prompt: "hello",
    tools: [lookup],
    turns: [{ items: [{ text: "Hel" }, { text: "lo " }, { text: "there." }], end: "stop" }],
  },
  {
    name: "thinking then text",
    prompt: "think first",
    tools: [lookup],
    turns: [
      {
        items: [
          { thinking: "Let me " },
          { thinking: "think." },
          { thinkingSignature: "c2lnbmF0dXJl/+=" },
          { text: "The " },
          { text: "answer." },
        ],
        end: "stop",
      },
    ],
  },
  {
    name: "parallel batch completing out of order",
    expect: { modelCalls: 2, stop: "stop" },
    prompt: "look three things up",
    tools: [lookup, count],
    turns: [
      {
        items: [
          { text: "Looking up." },
          call("c1", "lookup", { q: "alpha" }),
          call("c2", "lookup", { q: "beta" }),
          call("c3", "count", { n: 3 }),
        ],
        end: "toolUse",
      },
      { items: [{ text: "All three done." }], end: "stop" },
    ],
    calls: { c1: { text: "A" }, c2: { text: "B", isError: true, details: { code: 7 } }, c3: {} },
    order: ["c3", "c1", "c2"],
  },
  {
    name: "sequential batch",
    prompt: "one after another",
    toolExecution: "sequential",
    tools: [lookup],
    turns: [
      { items: [call("s1", "lookup", { q: "one" }), call("s2", "lookup", { q: "two" })], end: "toolUse" },
      { items: [{ text: "Both done." }], end: "stop" },
    ],
    calls: { s1: {}, s2: { throw: "second lookup failed" } },
  },
  {
    name: "length stop with tool calls",
    expect: { modelCalls: 2, stop: "stop" },
    prompt: "write a lot",
    tools: [lookup],
    turns: [
      {
        items: [{ text: "Starting" }, call("c1", "lookup", { q: "trunc" }), call("c2", "lookup", { q: "ated" })],
        end: "length",
      },
      { items: [{ text: "Retrying with less." }], end: "stop" },
    ],
    calls: { c1: {}, c2: {} },
  },
  {
    name: "length stop without tool calls",
    prompt: "write a lot of text",
    tools: [lookup],
    turns: [{ items: [{ text: "Once upon a" }], end: "length" }],
  },
  {
    name: "error stop",
    expect: { modelCalls: 1, stop: "error" },
    prompt: "fail please",
    tools: [lookup],
    turns: [{ items: [{ text: "Par" }], end: { error: "HTTP 500: upstream exploded" } }],
  },
  {
    name: "error stop after a tool call",
    expect: { modelCalls: 1, stop: "error", toolRuns: 0 },
    prompt: "fail after a call",
    tools: [lookup],
    turns: [{ items: [call("c1", "lookup", { q: "never" })], end: { error: "connection reset" } }],
    calls: { c1: {} },
  },
  {
    name: "abort mid-stream",
    expect: { modelCalls: 1, stop: "aborted" },
    prompt: "start and stop",
    tools: [lookup],
    turns: [{ items: [{ thinking: "Hmm" }, { text: "Hal" }], end: "abort" }],
  },
  {
    name: "abort mid-tool",
    expect: { modelCalls: 1, stop: "aborted" },
    prompt: "run slow tools",
    tools: [lookup],
    turns: [
      { items: [call("c1", "lookup", { q: "slow" }), call("c2", "lookup", { q: "slower" })], end: "toolUse" },
      { items: [{ text: "should not be reached" }], end: "stop" },
    ],
    calls: { c1: { abortWhileRunning: "lookup c1 aborted" }, c2: { abortWhileRunning: "lookup c2 aborted" } },
    order: ["c2", "c1"],
  },
  {
    name: "abort mid-tool in a sequential batch",
    prompt: "run slow tools one by one",
    toolExecution: "sequential",
    tools: [lookup],
    turns: [
      { items: [call("s1", "lookup", { q: "slow" }), call("s2", "lookup", { q: "next" })], end: "toolUse" },
      { items: [{ text: "should not be reached" }], end: "stop" },
    ],
    calls: { s1: { abortWhileRunning: "lookup s1 aborted" }, s2: {} },
  },
  {
    name: "all-terminate batch",
    expect: { modelCalls: 1, terminated: true },
    prompt: "finish with tools",
    tools: [lookup],
    turns: [
      { items: [call("c1", "lookup", { q: "x" }), call("c2", "lookup", { q: "y" })], end: "toolUse" },
      { items: [{ text: "should not be reached" }], end: "stop" },
    ],
    calls: { c1: { terminate: true }, c2: { terminate: true, isError: true, text: "y failed" } },
    order: ["c2", "c1"],
  },
  {
    name: "some-terminate batch",
    expect: { modelCalls: 2, stop: "stop", terminated: false },
    prompt: "half finish",
    tools: [lookup],
    turns: [
      { items: [call("c1", "lookup", { q: "x" }), call("c2", "lookup", { q: "y" })], end: "toolUse" },
      { items: [{ text: "Continuing." }], end: "stop" },
    ],
    calls: { c1: { terminate: true }, c2: {} },
    // Gated: two ungated parallel calls finish in either order in baton's runtime.
    order: ["c1", "c2"],
  },
  {
    name: "unknown tool",
    prompt: "call something odd",
    tools: [lookup],
    turns: [
      { items: [call("c1", "nope", { q: "x" }), call("c2", "lookup", { q: "ok" })], end: "toolUse" },
      { items: [{ text: "One was unknown." }], end: "stop" },
    ],
    calls: { c2: {} },
  },
  {
    name: "invalid arguments",
    prompt: "call with bad arguments",
    tools: [lookup],
    turns: [
      {
        items: [
          call("c1", "lookup", {}),
          call("c2", "lookup", { q: ["not", "a", "string"] }),
          call("c3", "lookup", { q: "fine", extra: 1 }),
        ],
        end: "toolUse",
      },
      { items: [{ text: "Arguments were wrong." }], end: "stop" },
    ],
    calls: { c1: {}, c2: {}, c3: {} },
  },
  {
    name: "coercible arguments",
    prompt: "count to forty-two",
    tools: [count],
    turns: [
      { items: [call("c1", "count", { n: "42" })], end: "toolUse" },
      { items: [{ text: "Counted." }], end: "stop" },
    ],
    calls: { c1: {} },
  },
  {
    name: "tool throws",
    prompt: "break a tool",
    tools: [lookup],
    turns: [
      { items: [call("c1", "lookup", { q: "boom" })], end: "toolUse" },
      { items: [{ text: "It broke." }], end: "stop" },
    ],
    calls: { c1: { throw: "disk on fire" } },
  },
  {
    name: "stop reason stop with tool calls",
    prompt: "a server that says stop",
    tools: [lookup],
    turns: [
      { items: [call("c1", "lookup", { q: "x" })], end: "stop" },
      { items: [{ text: "Done." }], end: "stop" },
    ],
    calls: { c1: {} },
  },
  {
    name: "tools declared in the transcript (no seeded system message)",
    prompt: "hello",
    seedSystem: false,
    tools: [lookup],
    turns: [{ items: [{ text: "Hi." }], end: "stop" }],
  },
];
