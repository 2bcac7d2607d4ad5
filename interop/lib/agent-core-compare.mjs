// Canonical forms of both sides' loop events and transcripts, the explicit name mapping between
// them, and the documented rewrites that turn upstream's shape into baton's where baton differs
// on purpose. A case passes as `ok` when the canonical forms are equal as they are, as
// `deviation` when they are equal only after rewrites (each rewrite counts only if it changed
// something, and is named in the case line), and fails otherwise.

import assert from "node:assert/strict";

// ── Event name mapping (upstream pi-agent-core AgentEvent → baton LoopEvent / RunContext) ──
//
// | upstream event                                  | baton                                   | canonical                |
// |-------------------------------------------------|-----------------------------------------|--------------------------|
// | agent_start / agent_end                         | none: agent::run's call and return      | (dropped; checked apart) |
// | turn_start                                      | LoopEvent::TurnStart { turn }           | turn_start               |
// | message_start (assistant; partial)              | LoopEvent::AssistantStart { partial }   | assistant_start          |
// | message_start (user, toolResult, system)        | none (settled messages are appended)    | (dropped; must be paired)|
// | message_update text_start / thinking_start      | AssistantUpdate(BlockStart text|thinking)| block <kind>@<i>        |
// | message_update text_delta / thinking_delta      | AssistantUpdate(TextAppend|ThinkingAppend)| <kind>@<i> +<delta>    |
// | message_update text_end / thinking_end          | none (a block ends when the next starts)| (dropped)                |
// | message_update toolcall_start/_delta/_end       | AssistantUpdate(BlockStart toolCall) —  | block toolCall@<i> <id>  |
// |   (arguments streamed as JSON text)             |   the call arrives complete             |   (from toolcall_end)    |
// | message_end (any role)                          | RunContext::append(message)             | message <role>[…]        |
// | tool_execution_start                            | LoopEvent::ToolStart { call }           | tool_start <id> <name>   |
// | tool_execution_update                           | none (tools report no partial results)  | (dropped)                |
// | tool_execution_end                              | LoopEvent::ToolEnd { result }           | tool_end <id> err=<bool> |
// | turn_end                                        | LoopEvent::TurnEnd { stop_reason }      | turn_end <stopReason>    |
//
// ── Message fields compared ──
// user: content (string form = one text block). assistant: content blocks (text, thinking +
// thinkingSignature/redacted, toolCall id/name/arguments), stopReason, errorMessage.
// toolResult: toolCallId, toolName, content, isError, details.
// Not compared (per-implementation metadata): timestamp, usage, api, provider, model,
// durationMs, thinkingLevel (upstream stamps the requested level on every settled assistant
// message), responseId/responseModel. `details: {}` (upstream's error results) ≡ no details.

export const MAPPING_NOTE =
  "agent_start/agent_end ↔ agent::run call/return; message_end ↔ RunContext::append; *_end block events and toolcall deltas have no baton counterpart";

const text = (t) => ({ type: "text", text: t });

function userContent(content) {
  if (typeof content === "string") return [text(content)];
  return (content ?? []).map((b) => (b.type === "text" ? { type: "text", text: b.text } : { ...b }));
}

function assistantBlock(b) {
  if (b.type === "text") return { type: "text", text: b.text, ...(b.textSignature ? { textSignature: b.textSignature } : {}) };
  if (b.type === "thinking") {
    return {
      type: "thinking",
      thinking: b.thinking,
      ...(b.thinkingSignature ? { thinkingSignature: b.thinkingSignature } : {}),
      ...(b.redacted ? { redacted: true } : {}),
    };
  }
  if (b.type === "toolCall") return { type: "toolCall", id: b.id, name: b.name, arguments: b.arguments };
  return { ...b };
}

function emptyDetails(d) {
  return d === undefined || d === null || (typeof d === "object" && !Array.isArray(d) && Object.keys(d).length === 0);
}

export function normMessage(m) {
  switch (m.role) {
    case "user":
      return { role: "user", content: userContent(m.content) };
    case "assistant":
      return {
        role: "assistant",
        content: (m.content ?? []).map(assistantBlock),
        stopReason: m.stopReason,
        ...(m.errorMessage !== undefined && m.errorMessage !== null ? { errorMessage: m.errorMessage } : {}),
      };
    case "toolResult":
      return {
        role: "toolResult",
        toolCallId: m.toolCallId,
        toolName: m.toolName,
        content: userContent(m.content),
        isError: m.isError === true,
        ...(emptyDetails(m.details) ? {} : { details: m.details }),
      };
    case "system":
      return { role: "system" };
    default:
      return { ...m, timestamp: undefined };
  }
}

function messageLabel(m) {
  if (m.role === "assistant") return `message assistant:${m.stopReason}`;
  if (m.role === "toolResult") return `message toolResult:${m.toolCallId} err=${m.isError === true}`;
  return `message ${m.role}`;
}

// upstream AgentEvent[] → canonical
export function canonicalUpstream(events) {
  assert.equal(events[0]?.type, "agent_start", "upstream's first event is agent_start");
  assert.equal(events.at(-1)?.type, "agent_end", "upstream's last event is agent_end");
  const out = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    switch (e.type) {
      case "agent_start":
      case "agent_end":
      case "tool_execution_update":
        break;
      case "turn_start":
        out.push("turn_start");
        break;
      case "message_start":
        if (e.message.role === "assistant") {
          out.push("assistant_start");
        } else {
          const next = events[i + 1];
          assert.ok(
            next?.type === "message_end" && next.message.role === e.message.role,
            `upstream message_start(${e.message.role}) is followed at once by its message_end`,
          );
        }
        break;
      case "message_update": {
        const a = e.assistantMessageEvent;
        if (a.type === "text_start") out.push(`block text@${a.contentIndex}`);
        else if (a.type === "thinking_start") out.push(`block thinking@${a.contentIndex}`);
        else if (a.type === "text_delta") out.push(`text@${a.contentIndex} +${a.delta}`);
        else if (a.type === "thinking_delta") out.push(`thinking@${a.contentIndex} +${a.delta}`);
        else if (a.type === "toolcall_end") out.push(`block toolCall@${a.contentIndex} ${a.toolCall.id}`);
        break;
      }
      case "message_end":
        out.push(messageLabel(e.message));
        break;
      case "tool_execution_start":
        out.push(`tool_start ${e.toolCallId} ${e.toolName}`);
        break;
      case "tool_execution_end":
        out.push(`tool_end ${e.toolCallId} err=${e.isError === true}`);
        break;
      case "turn_end":
        out.push(`turn_end ${e.message.stopReason}`);
        break;
      default:
        out.push(`unknown ${e.type}`);
    }
  }
  return out;
}

// baton probe events → canonical
export function canonicalBaton(events) {
  return events.map((e) => {
    switch (e.type) {
      case "TurnStart":
        return "turn_start";
      case "AssistantStart":
        return "assistant_start";
      case "BlockStart":
        return e.block.type === "toolCall" ? `block toolCall@${e.index} ${e.block.id}` : `block ${e.block.type}@${e.index}`;
      case "TextAppend":
        return `text@${e.index} +${e.delta}`;
      case "ThinkingAppend":
        return `thinking@${e.index} +${e.delta}`;
      case "Append":
        return messageLabel(e.message);
      case "ToolStart":
        return `tool_start ${e.call.id} ${e.call.name}`;
      case "ToolEnd":
        return `tool_end ${e.result.toolCallId} err=${e.result.isError === true}`;
      case "TurnEnd":
        return `turn_end ${e.stopReason}`;
      default:
        return `unknown ${e.type}`;
    }
  });
}

// Tool results as reported by the tool-end events, by call id (content + isError).
export function toolEndsUpstream(events) {
  return Object.fromEntries(
    events
      .filter((e) => e.type === "tool_execution_end")
      .map((e) => [e.toolCallId, { content: userContent(e.result.content), isError: e.isError === true }]),
  );
}

export function toolEndsBaton(events) {
  return Object.fromEntries(
    events
      .filter((e) => e.type === "ToolEnd")
      .map((e) => [e.result.toolCallId, { content: userContent(e.result.content), isError: e.result.isError === true }]),
  );
}

// ── Documented rewrites: upstream's shape → baton's, where baton differs on purpose ──
// Each takes the whole upstream view { events, messages, requests, toolEnds } and returns a new
// one (or the same object when it does not apply). The reason is what the case line prints.

const LENGTH_TEXT_UPSTREAM = /^Tool call "([^"]+)" was not executed: the response hit the output token limit, so its arguments may be truncated\. Re-issue the tool call with complete arguments\.$/;
export const LENGTH_TEXT_BATON =
  "Tool call was not executed: the response was truncated by the output token limit (stop reason: length), so its arguments may be incomplete.";
const VALIDATION_UPSTREAM = /^Validation failed for tool "([^"]+)":\n/;
const VALIDATION_BATON = /^Invalid arguments for tool (\S+): /;

function mapResultTexts(view, fn) {
  let changed = false;
  const mapContent = (content) =>
    content.map((b) => {
      if (b.type !== "text") return b;
      const t = fn(b.text);
      if (t !== b.text) changed = true;
      return { ...b, text: t };
    });
  const messages = view.messages.map((m) => (m.role === "toolResult" ? { ...m, content: mapContent(m.content) } : m));
  const requests = view.requests.map((r) =>
    r.map((m) => (m.role === "toolResult" ? { ...m, content: mapContent(m.content) } : m)),
  );
  const toolEnds = Object.fromEntries(
    Object.entries(view.toolEnds).map(([id, r]) => [id, { ...r, content: mapContent(r.content) }]),
  );
  return changed ? { ...view, messages, requests, toolEnds } : view;
}

export const REWRITES = [
  {
    id: "prompt-before-turn",
    reason:
      "§agent.events upstream emits turn_start before the prompt's message events; baton appends the prompt, then TurnStart { turn: 1 }",
    apply(view) {
      const e = view.events;
      if (e[0] !== "turn_start") return view;
      let k = 1;
      while (k < e.length && (e[k] === "message user" || e[k] === "message system")) k++;
      if (k === 1) return view;
      return { ...view, events: [...e.slice(1, k), "turn_start", ...e.slice(k)] };
    },
  },
  {
    id: "system-in-transcript",
    reason:
      "§agent.system upstream 1.6 declares the system prompt and tools with system messages in the transcript; baton keeps them on AgentConfig/ModelRequest",
    apply(view) {
      const events = view.events.filter((x) => x !== "message system");
      const messages = view.messages.filter((m) => m.role !== "system");
      if (events.length === view.events.length && messages.length === view.messages.length) return view;
      return { ...view, events, messages };
    },
  },
  {
    id: "sequential-result-events",
    reason:
      "§agent.tools in a sequential batch and in a length-failed batch upstream emits each toolResult message right after its tool_execution_end; baton appends all results after the batch's last ToolEnd, as in a parallel batch",
    apply(view) {
      const e = view.events;
      const out = [];
      let changed = false;
      for (let i = 0; i < e.length; i++) {
        if (!e[i].startsWith("tool_start ")) {
          out.push(e[i]);
          continue;
        }
        // one batch: up to the turn_end
        let j = i;
        while (j < e.length && !e[j].startsWith("turn_end")) j++;
        const batch = e.slice(i, j);
        const results = batch.filter((x) => x.startsWith("message toolResult"));
        const rest = batch.filter((x) => !x.startsWith("message toolResult"));
        const reordered = [...rest, ...results];
        if (reordered.join("\n") !== batch.join("\n")) changed = true;
        out.push(...reordered);
        i = j - 1;
      }
      return changed ? { ...view, events: out } : view;
    },
  },
  {
    id: "aborted-batch-ends-run",
    reason:
      "§agent.abort after a tool batch cut short by an abort, upstream makes one more model call with the aborted signal and records its empty aborted response; baton ends the run at the batch's turn end (RunOutcome.stopReason = aborted)",
    apply(view) {
      const e = view.events;
      const tail = ["turn_start", "assistant_start", "message assistant:aborted", "turn_end aborted"];
      const last = view.messages.at(-1);
      if (e.length < tail.length + 1 || e.slice(-tail.length).join("\n") !== tail.join("\n")) return view;
      if (!e[e.length - tail.length - 1].startsWith("turn_end ")) return view;
      if (!last || last.role !== "assistant" || last.stopReason !== "aborted" || last.content.length !== 0) return view;
      return {
        ...view,
        events: e.slice(0, -tail.length),
        messages: view.messages.slice(0, -1),
        requests: view.requests.slice(0, -1),
      };
    },
  },
  {
    id: "length-result-text",
    reason:
      "§agent.length the error result of a length-truncated call is worded differently (upstream names the tool and asks to re-issue it; baton: agent::LENGTH_FAILURE_TEXT); both are isError results without execution",
    apply(view) {
      return mapResultTexts(view, (t) => (LENGTH_TEXT_UPSTREAM.test(t) ? LENGTH_TEXT_BATON : t));
    },
  },
  {
    id: "aborted-skip-text",
    reason:
      '§agent.abort a call the abort keeps from starting gets the result "Tool execution skipped: the run was aborted" in baton, "Operation aborted" upstream; both are isError results and the tool does not run',
    apply(view) {
      return mapResultTexts(view, (t) => (t === "Operation aborted" ? "Tool execution skipped: the run was aborted" : t));
    },
  },
  {
    id: "validation-result-text",
    reason:
      '§agent.validation invalid arguments are reported in different words: upstream "Validation failed for tool "X": - path: message … Received arguments: …", baton "Invalid arguments for tool X: /path: message"; both are isError results and the tool does not run',
    apply(view) {
      // Compared by shape: the text names the tool and is a validation failure on both sides.
      return mapResultTexts(view, (t) => {
        const m = VALIDATION_UPSTREAM.exec(t);
        return m ? `<validation failure: ${m[1]}>` : t;
      });
    },
    batonSide(t) {
      const m = VALIDATION_BATON.exec(t);
      return m ? `<validation failure: ${m[1]}>` : t;
    },
  },
  {
    id: "stop-with-calls-is-tooluse",
    reason:
      "§agent.stop a response that says stop but carries tool calls settles as toolUse in baton (AssistantBuilder::finish normalises it); upstream keeps stop and runs the calls all the same",
    apply(view) {
      let changed = false;
      const messages = view.messages.map((m) => {
        if (m.role === "assistant" && m.stopReason === "stop" && m.content.some((b) => b.type === "toolCall")) {
          changed = true;
          return { ...m, stopReason: "toolUse" };
        }
        return m;
      });
      const requests = view.requests.map((r) =>
        r.map((m) =>
          m.role === "assistant" && m.stopReason === "stop" && m.content.some((b) => b.type === "toolCall")
            ? { ...m, stopReason: "toolUse" }
            : m,
        ),
      );
      if (!changed) return view;
      // the events carry the stop reason too: message assistant:stop / turn_end stop of that turn
      const events = [];
      const e = view.events;
      for (let i = 0; i < e.length; i++) {
        if (e[i] === "message assistant:stop" && e[i + 1]?.startsWith("tool_start ")) {
          events.push("message assistant:toolUse");
          let j = i + 1;
          while (j < e.length && !e[j].startsWith("turn_end")) events.push(e[j++]);
          if (e[j] === "turn_end stop") events.push("turn_end toolUse");
          else if (j < e.length) events.push(e[j]);
          i = j;
        } else {
          events.push(e[i]);
        }
      }
      return { ...view, events, messages, requests };
    },
  },
];

export function batonView(raw) {
  return {
    events: canonicalBaton(raw.events),
    messages: raw.messages.map(normMessage),
    requests: raw.requests.map((r) => r.map(normMessage)),
    toolEnds: toolEndsBaton(raw.events),
  };
}

export function upstreamView(raw) {
  return {
    events: canonicalUpstream(raw.events),
    messages: raw.messages.map(normMessage),
    // the leading system message carries the prompt and tool declarations (baton: on the request)
    requests: raw.requests.map((r) => r.filter((m) => m.role !== "system").map(normMessage)),
    toolEnds: toolEndsUpstream(raw.events),
  };
}

function firstDifference(a, b) {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (JSON.stringify(a[i]) !== JSON.stringify(b[i])) return i;
  }
  return -1;
}

function diffText(label, up, baton) {
  if (Array.isArray(up) && Array.isArray(baton)) {
    const i = firstDifference(up, baton);
    return `${label} differ at [${i}]: upstream ${JSON.stringify(up[i])} | baton ${JSON.stringify(baton[i])}`;
  }
  return `${label} differ: upstream ${JSON.stringify(up)} | baton ${JSON.stringify(baton)}`;
}

// null when equal, else the first difference of every part that differs
function sameViews(u, b) {
  const diffs = [];
  for (const key of ["events", "messages", "requests", "toolEnds"]) {
    try {
      assert.deepStrictEqual(u[key], b[key]);
    } catch {
      diffs.push(diffText(key, u[key], b[key]));
    }
  }
  return diffs.length ? diffs.join("; ") : null;
}

// Compares one scenario's two runs. Returns { applied: [rewrite…] } or throws with the first
// difference that no documented rewrite explains.
export function compareRuns(upRaw, batonRaw) {
  let b = batonView(batonRaw);
  let u = upstreamView(upRaw);
  if (sameViews(u, b) === null) return { applied: [] };
  const applied = [];
  for (const r of REWRITES) {
    const next = r.apply(u);
    if (next !== u) {
      applied.push(r);
      u = next;
      // a rewrite that compares by shape maps baton's side to the same shape
      if (r.batonSide) b = mapResultTexts(b, r.batonSide);
    }
  }
  const diff = sameViews(u, b);
  if (diff !== null) {
    const names = applied.map((r) => r.id).join(", ");
    throw new Error(`${diff}${names ? ` (after rewrites: ${names})` : ""}`);
  }
  return { applied };
}
