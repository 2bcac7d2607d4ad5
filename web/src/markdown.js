// Model output is hostile: an XSS in this page would reach the host's `bash`. Markdown is
// rendered by markdown-it with raw HTML off (`<script>` in a reply is text), and what it
// produces goes through DOMPurify anyway (links limited to http(s)/mailto, no images,
// forms, frames or styles), straight into a DOM fragment. Code blocks get a copy button.

import DOMPurify from "dompurify";
import MarkdownIt from "markdown-it";

const md = new MarkdownIt({ html: false, linkify: true, breaks: false, typographer: false });

// markdown-it's own link check already refuses javascript:/vbscript:/file:/data:; this is
// stricter: only web and mail links.
const SAFE_URL = /^(?:https?:|mailto:)/i;
md.validateLink = (url) => SAFE_URL.test(url.trim());

const purify = DOMPurify(window);
purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") ?? "";
    if (!SAFE_URL.test(href)) node.removeAttribute("href");
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

const PURIFY_CONFIG = {
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
  FORBID_TAGS: ["img", "style", "form", "input", "button", "textarea", "select", "iframe", "svg", "math", "video", "audio"],
  FORBID_ATTR: ["style", "id", "name"],
  RETURN_DOM_FRAGMENT: true,
};

/** Markdown text → a sanitised DocumentFragment with copy buttons on code blocks. */
export function renderMarkdown(text) {
  const fragment = purify.sanitize(md.render(text), PURIFY_CONFIG);
  for (const pre of fragment.querySelectorAll("pre")) addCopyButton(pre);
  return fragment;
}

/**
 * Markdown that is still arriving, into `container`: the blocks that are finished are
 * rendered once and kept; only what follows the last of them is rendered again. A reply
 * streaming at hundreds of tokens a second then costs the page its last paragraph per frame,
 * not the whole reply. (While streaming, a list or quote is split where a blank line is
 * followed by a line at the margin, which renders the same; the finished item is rendered
 * whole with `renderMarkdown`.)
 */
export function renderMarkdownStream(container, text) {
  let stream = streams.get(container);
  if (!stream || !text.startsWith(stream.done)) {
    container.replaceChildren();
    stream = { done: "", tail: [] };
    streams.set(container, stream);
  }
  const cut = settled(text, stream.done.length);
  for (const node of stream.tail) node.remove();
  if (cut > stream.done.length) {
    container.append(renderMarkdown(text.slice(stream.done.length, cut)));
    stream.done = text.slice(0, cut);
  }
  const tail = renderMarkdown(text.slice(cut));
  stream.tail = [...tail.childNodes];
  container.append(tail);
}

const streams = new WeakMap(); // container → {done: text rendered for good, tail: its nodes}
const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const AT_MARGIN = /^(?![\s>*+\-]|\d+[.)])/;

/**
 * Where the finished blocks of `text` end, scanning from `from` (a block boundary outside
 * any code fence): after the last blank line outside a fence whose next line starts at the
 * margin and starts no list item or quote (or that opens a fence).
 */
function settled(text, from) {
  let cut = from;
  let fence;
  let blank = false;
  let at = from;
  while (at < text.length) {
    const end = text.indexOf("\n", at);
    if (end < 0) break; // the last line is still arriving
    const line = text.slice(at, end);
    const open = FENCE.exec(line);
    if (fence) {
      if (open && open[1][0] === fence[0] && open[1].length >= fence.length && line.trim() === open[1]) fence = undefined;
    } else if (open) {
      if (blank) cut = at;
      fence = open[1];
    } else if (blank && line.trim() !== "" && AT_MARGIN.test(line)) {
      cut = at;
    }
    blank = !fence && line.trim() === "";
    at = end + 1;
  }
  return cut;
}

/** A `<pre>` holding `text` (as text, never markup), with a copy button. */
export function textBlock(text, className = "output") {
  const pre = document.createElement("pre");
  pre.className = className;
  const code = document.createElement("code");
  code.textContent = text;
  pre.append(code);
  addCopyButton(pre);
  return pre;
}

function addCopyButton(pre) {
  const wrap = document.createElement("div");
  wrap.className = "code";
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.textContent = "Copy";
  button.setAttribute("aria-label", "Copy code");
  button.addEventListener("click", () => {
    const text = pre.textContent ?? "";
    copyText(text, pre).then(
      () => flash(button, "Copied"),
      () => flash(button, "Select and copy"),
    );
  });
  pre.replaceWith(wrap);
  wrap.append(button, pre);
}

function flash(button, text) {
  button.textContent = text;
  setTimeout(() => (button.textContent = "Copy"), 1500);
}

// The async clipboard needs a secure context (https or loopback); over plain http elsewhere
// fall back to selecting the text and the legacy copy command.
async function copyText(text, element) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const range = document.createRange();
  range.selectNodeContents(element);
  const selection = getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
  if (!document.execCommand("copy")) throw new Error("copy refused");
}
