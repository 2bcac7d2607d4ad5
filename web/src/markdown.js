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
