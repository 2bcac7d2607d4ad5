// Runs one agent scenario (see agent-core-scenarios.mjs) through upstream's real loop:
// pi-agent-core's `runAgentLoop` with a stream function built from the scenario and tools whose
// `execute` follows it. Returns { events, messages, requests } as plain JSON.
//
// Determinism: nothing waits on a timer. A parallel batch completes in `scenario.order` because
// each tool awaits its own gate and the gate of the next call opens only once the loop has emitted
// `tool_execution_end` for the previous one. Aborts are triggered by the harness at a scenario
// point (after the listed stream items, or once every `abortWhileRunning` tool has started).

import { runAgentLoop } from "@earendil-works/pi-agent-core";
import { createAssistantMessageEventStream, createInitialSystemMessage } from "@earendil-works/pi-ai";
import { convertToLlm } from "./agent-core-pi-coding-agent.mjs";

const ZERO_USAGE = {
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: 0,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
};

export const UPSTREAM_MODEL = {
  id: "scenario",
  name: "scenario",
  api: "scenario",
  provider: "scenario",
  baseUrl: "http://localhost:0",
  reasoning: true,
  input: ["text", "image"],
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  contextWindow: 128000,
  maxTokens: 16384,
};

function deferred() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

function clone(value) {
  return structuredClone(value);
}

// One streamed response, the way a provider (faux) streams: start, per-block start/delta/end,
// then done or error. `abort` is called after the items for an `abort` end.
function streamTurn(turn, signal, abort) {
  const stream = createAssistantMessageEventStream();
  const partial = {
    role: "assistant",
    content: [],
    api: UPSTREAM_MODEL.api,
    provider: UPSTREAM_MODEL.provider,
    model: UPSTREAM_MODEL.id,
    usage: clone(ZERO_USAGE),
    stopReason: "pending",
    timestamp: Date.now(),
  };
  const snapshot = () => ({ ...partial, content: partial.content.map((b) => ({ ...b })) });
  const aborted = () => ({ ...snapshot(), stopReason: "aborted", errorMessage: "Request was aborted" });
  if (signal?.aborted || turn === undefined) {
    // faux: an already-aborted request ends at once, without a `start` event.
    const message = turn === undefined && !signal?.aborted
      ? { ...snapshot(), stopReason: "error", errorMessage: "scenario has no more turns" }
      : aborted();
    stream.push({ type: "error", reason: message.stopReason, error: message });
    stream.end(message);
    return stream;
  }
  stream.push({ type: "start", partial: snapshot() });
  let open = null; // { kind, index }
  const closeOpen = () => {
    if (!open) return;
    const block = partial.content[open.index];
    if (open.kind === "text") {
      stream.push({ type: "text_end", contentIndex: open.index, content: block.text, partial: snapshot() });
    } else {
      stream.push({ type: "thinking_end", contentIndex: open.index, content: block.thinking, partial: snapshot() });
    }
    open = null;
  };
  for (const item of turn.items) {
    if (item.text !== undefined || item.thinking !== undefined) {
      const kind = item.text !== undefined ? "text" : "thinking";
      const delta = item.text ?? item.thinking;
      if (!open || open.kind !== kind) {
        closeOpen();
        partial.content.push(kind === "text" ? { type: "text", text: "" } : { type: "thinking", thinking: "" });
        open = { kind, index: partial.content.length - 1 };
        stream.push({ type: `${kind}_start`, contentIndex: open.index, partial: snapshot() });
      }
      partial.content[open.index][kind] += delta;
      stream.push({ type: `${kind}_delta`, contentIndex: open.index, delta, partial: snapshot() });
    } else if (item.thinkingSignature !== undefined) {
      // opaque: set on the open thinking block (providers learn it at the block's end)
      if (open?.kind === "thinking") partial.content[open.index].thinkingSignature = item.thinkingSignature;
    } else if (item.toolCall) {
      closeOpen();
      const call = { type: "toolCall", ...clone(item.toolCall) };
      const index = partial.content.length;
      partial.content.push({ type: "toolCall", id: call.id, name: call.name, arguments: {} });
      stream.push({ type: "toolcall_start", contentIndex: index, partial: snapshot() });
      const json = JSON.stringify(call.arguments);
      stream.push({ type: "toolcall_delta", contentIndex: index, delta: json, partial: snapshot() });
      partial.content[index] = call;
      stream.push({ type: "toolcall_end", contentIndex: index, toolCall: clone(call), partial: snapshot() });
    } else {
      throw new Error(`unknown stream item ${JSON.stringify(item)}`);
    }
  }
  closeOpen();
  const end = turn.end;
  if (end === "abort") {
    abort();
    const message = aborted();
    stream.push({ type: "error", reason: "aborted", error: message });
    stream.end(message);
  } else if (typeof end === "object" && end.error !== undefined) {
    const message = { ...snapshot(), stopReason: "error", errorMessage: end.error };
    stream.push({ type: "error", reason: "error", error: message });
    stream.end(message);
  } else {
    const message = { ...snapshot(), stopReason: end };
    stream.push({ type: "done", reason: end, message });
    stream.end(message);
  }
  return stream;
}

export async function runUpstream(scenario) {
  const controller = new AbortController();
  const events = [];
  const requests = [];
  const calls = scenario.calls ?? {};
  const order = scenario.order ?? [];
  const gates = new Map(order.map((id) => [id, deferred()]));
  let executing = 0;
  let abortWaiters = 0;
  const abortTools = Object.entries(calls).filter(([, b]) => b.abortWhileRunning !== undefined).length;

  const tools = (scenario.tools ?? []).map((t) => ({
    name: t.name,
    label: t.name,
    description: t.description ?? t.name,
    parameters: clone(t.parameters),
    async execute(toolCallId, params, signal) {
      const behaviour = calls[toolCallId];
      if (!behaviour) throw new Error(`scenario: no behaviour for ${toolCallId}`);
      if (behaviour.abortWhileRunning !== undefined) {
        const seen = new Promise((resolve) => {
          if (signal.aborted) resolve();
          else signal.addEventListener("abort", () => resolve(), { once: true });
        });
        abortWaiters += 1;
        if (abortWaiters === abortTools) controller.abort();
        await seen;
      }
      // Gated calls finish in `order` (also after an abort, so the order never depends on
      // which waiter the abort wakes first).
      const gate = gates.get(toolCallId);
      if (gate) {
        executing += 1;
        if (executing === order.length) gates.get(order[0]).resolve();
        await gate.promise;
      }
      if (behaviour.abortWhileRunning !== undefined) throw new Error(behaviour.abortWhileRunning);
      if (behaviour.throw !== undefined) throw new Error(behaviour.throw);
      const result = {
        content: [{ type: "text", text: behaviour.text ?? `${t.name} ${JSON.stringify(params)}` }],
        details: behaviour.details,
      };
      if (behaviour.isError) result.isError = true;
      if (behaviour.terminate) result.terminate = true;
      return result;
    },
  }));

  // The leading system message declares what the model may call (upstream 1.6 keeps the system
  // prompt and tool declarations in the transcript); seeded, the run adds no system message.
  const declarations = tools.map((t) => ({ name: t.name, description: t.description, parameters: clone(t.parameters) }));
  const seed = scenario.seedSystem === false ? [] : [createInitialSystemMessage("scenario system prompt", declarations)];
  const context = { messages: seed, tools };
  let turn = 0;
  const streamFn = (_model, llmContext, options) => {
    requests.push(clone(llmContext.messages));
    const t = scenario.turns[turn];
    turn += 1;
    return streamTurn(t, options?.signal, () => controller.abort());
  };
  const emit = async (event) => {
    events.push(clone(event));
    if (event.type === "tool_execution_end") {
      const at = order.indexOf(event.toolCallId);
      if (at >= 0 && at + 1 < order.length) gates.get(order[at + 1]).resolve();
    }
  };
  const prompt = { role: "user", content: [{ type: "text", text: scenario.prompt }], timestamp: Date.now() };
  const config = {
    model: UPSTREAM_MODEL,
    convertToLlm,
    toolExecution: scenario.toolExecution ?? "parallel",
  };
  const messages = await runAgentLoop([prompt], context, config, emit, controller.signal, streamFn);
  return { events, messages: clone(messages), requests };
}
