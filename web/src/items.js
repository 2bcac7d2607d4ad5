// One transcript item → one DOM element. Every string from the host is set as text
// (`textContent`) except assistant text, which goes through the sanitising Markdown renderer.

import { renderMarkdown, renderMarkdownStream, textBlock } from "./markdown.js";

const el = (tag, className, text) => {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
};

const textOf = (content) =>
  Array.isArray(content)
    ? content
        .filter((b) => b && b.type === "text")
        .map((b) => b.text)
        .join("")
    : typeof content === "string"
      ? content
      : "";

const isClipped = (item, path) =>
  Array.isArray(item.clipped) && item.clipped.some((p) => JSON.stringify(p) === JSON.stringify(path));

// One formatter for every item: `toLocaleTimeString` builds a new one per call, which cost a
// long session's first frame more than its Markdown.
const CLOCK = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit" });

function time(item) {
  if (typeof item.timestamp !== "number") return undefined;
  const t = el("time", "when", CLOCK.format(item.timestamp));
  t.dateTime = new Date(item.timestamp).toISOString();
  return t;
}

function header(label, item, extra) {
  const h = el("div", "item-head");
  h.append(el("span", "who", label));
  if (extra) h.append(extra);
  const t = time(item);
  if (t) h.append(t);
  return h;
}

function badge(status) {
  return el("span", `badge badge-${status}`, status);
}

function argSummary(args) {
  if (!args || typeof args !== "object") return "";
  if (typeof args.command === "string") return args.command;
  if (typeof args.path === "string") return args.path;
  const s = JSON.stringify(args);
  return s.length > 120 ? `${s.slice(0, 117)}…` : s;
}

// A streaming assistant item's element → its content blocks' parts ({type, node}, or
// undefined for an empty block), so the next update of the same item changes them in place.
const streaming = new WeakMap();

const shown = (block) => (block.type === "thinking" && !!block.thinking) || (block.type === "text" && !!block.text) || block.type === "toolCall";

function assistantPart(block, live) {
  if (block.type === "thinking" && block.thinking) {
    const details = el("details", "thinking");
    const text = el("div", "thinking-text", block.thinking);
    details.append(el("summary", undefined, "Thinking"), text);
    return { type: block.type, node: details, update: (b) => (text.textContent = b.thinking) };
  }
  if (block.type === "text" && block.text) {
    const body = el("div", "markdown");
    if (!live) {
      body.append(renderMarkdown(block.text));
      return { type: block.type, node: body };
    }
    renderMarkdownStream(body, block.text);
    return { type: block.type, node: body, update: (b) => renderMarkdownStream(body, b.text) };
  }
  if (block.type === "toolCall") {
    const call = el("div", "tool-call");
    const update = (b) => (call.textContent = `→ ${b.name ?? "tool"}: ${argSummary(b.arguments)}`);
    update(block);
    return { type: block.type, node: call, update };
  }
  return undefined;
}

/**
 * Updates `node` (rendered from an item still streaming) in place for `item`, the same item
 * further along, and says whether it could: a reply streaming at hundreds of tokens a second
 * then re-renders only its last paragraph, not the whole item, each frame. Anything else
 * (the item settled, a block changed type, an error) is rendered anew by `renderItem`.
 */
export function updateItem(node, item) {
  const parts = streaming.get(node);
  const blocks = item.content ?? [];
  if (!parts || item.role !== "assistant" || item.status !== "streaming" || item.errorMessage || blocks.length < parts.length) return false;
  for (let i = 0; i < parts.length; i += 1) {
    const part = parts[i];
    const block = blocks[i];
    if (part === undefined ? shown(block) : part.type !== block.type) return false;
  }
  blocks.forEach((block, i) => {
    if (i < parts.length) {
      parts[i]?.update?.(block);
      return;
    }
    parts.push(assistantPart(block, true));
    if (parts[i]) node.append(parts[i].node);
  });
  return true;
}

/**
 * @param {any} item
 * @param {{readFull: (item: any, path: (string|number)[]) => Promise<string>}} ctx
 */
export function renderItem(item, ctx) {
  const node = el("article", `item item-${item.role}`);
  node.dataset.id = item.id;
  switch (item.role) {
    case "user": {
      node.append(header("You", item));
      node.append(el("div", "user-text", textOf(item.content)));
      break;
    }
    case "assistant": {
      const extra = item.status && item.status !== "complete" ? badge(item.status) : undefined;
      node.append(header(item.model ? `Assistant · ${item.model}` : "Assistant", item, extra));
      if (item.status) node.dataset.status = item.status;
      const parts = [];
      for (const block of item.content ?? []) {
        const part = assistantPart(block, item.status === "streaming");
        parts.push(part);
        if (part) node.append(part.node);
      }
      if (item.status === "streaming") streaming.set(node, parts);
      if (item.errorMessage) node.append(el("div", "error-text", item.errorMessage));
      break;
    }
    case "tool": {
      node.classList.add("card");
      node.dataset.status = item.status;
      const details = el("details", "tool-card");
      const summary = el("summary");
      summary.append(el("span", "tool-name", item.toolName ?? "tool"), el("code", "tool-args", argSummary(item.arguments)), badge(item.status));
      details.append(summary);
      const path = ["content", 0, "text"];
      const published = textOf(item.content);
      const out = textBlock(published || (item.status === "running" ? "…" : "(no output)"));
      details.append(out);
      if (isClipped(item, path)) details.append(el("div", "note", "Output cut for display; open the card for all of it."));
      // The full output (it may be clipped in the published item) is read with readItem.
      let loaded = false;
      details.addEventListener("toggle", () => {
        if (!details.open || loaded || item.status === "running" || !published) return;
        loaded = true;
        ctx.readFull(item, path).then(
          (full) => {
            out.querySelector("code").replaceChildren(full);
            node.dataset.full = "read";
          },
          (error) => details.append(el("div", "error-text", `Could not read the full output: ${error.message}`)),
        );
      });
      node.append(details);
      break;
    }
    case "bashExecution": {
      node.classList.add("card");
      const details = el("details", "tool-card");
      details.open = true;
      const summary = el("summary");
      const exit = item.cancelled ? "cancelled" : item.exitCode === 0 ? "complete" : `exit ${item.exitCode ?? "?"}`;
      summary.append(el("span", "tool-name", "!"), el("code", "tool-args", item.command ?? ""), badge(exit));
      details.append(summary, textBlock(item.output ?? ""));
      if (item.truncated) details.append(el("div", "note", "Output truncated by the host."));
      node.append(details);
      break;
    }
    case "compactionSummary":
    case "branchSummary": {
      node.append(header(item.role === "compactionSummary" ? "Compacted" : "Branch summary", item));
      node.append(el("div", "summary-text", item.summary ?? ""));
      break;
    }
    default: {
      node.append(header(item.customType ?? item.role ?? "item", item));
      node.append(el("div", "user-text", textOf(item.content)));
    }
  }
  return node;
}
