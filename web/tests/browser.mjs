// The browser suite: the real page (web/dist/) in Debian's headless Chromium, driven with
// puppeteer-core (which downloads no browser), against a real `baton-host serve` with its web
// listener, in a temporary directory with the scripted model (web-host.mjs). Links are
// minted with the real `baton link`, revoked with `baton unlink`.
//
//   bash web/tests/run
//
// Environment:
//   BATON_HOST_BIN   the baton-host binary (default target/debug/baton-host)
//   BATON_BIN        the baton binary (default target/debug/baton)
//   BATON_WEB_OUT    where screenshots go (default web/tests/out/)
//   CHROMIUM         the browser (default /usr/bin/chromium)
//
// One line per case, `N passed, N failed` at the end (no case is ever skipped). Waiting is on page state
// (waitForFunction) and on protocol frames; timers are only hang guards.

import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { createServer } from "node:http";
import { request as httpRequest } from "node:http";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { ClientMessageDecoder } from "@earendil-works/pi-protocol";
import puppeteer from "puppeteer-core";

import { startWebHost } from "./web-host.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, "../..");
const OUT = resolve(process.env.BATON_WEB_OUT || join(HERE, "out"));
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const WAIT = 30000;
const binary = (variable, name) => {
  const fromEnv = process.env[variable];
  if (fromEnv) return isAbsolute(fromEnv) ? fromEnv : resolve(REPO, fromEnv);
  return join(process.env.CARGO_TARGET_DIR ? resolve(REPO, process.env.CARGO_TARGET_DIR) : join(REPO, "target"), "debug", name);
};

// ---------------------------------------------------------------------------------------------
// reporting

let passed = 0;
let failed = 0;
async function test(name, fn, { timeoutMs = 60000 } = {}) {
  let timer;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`hang guard: no result after ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    passed += 1;
    console.log(`ok   browser: ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`FAIL browser: ${name}: ${error?.stack?.split("\n").slice(0, 5).join(" | ") ?? error}`);
  } finally {
    clearTimeout(timer);
    for (const cleanup of cleanups.splice(0)) await Promise.resolve(cleanup()).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------
// the server under test

const host = await startWebHost({ hostBin: binary("BATON_HOST_BIN", "baton-host"), batonBin: binary("BATON_BIN", "baton") });
const base = host.base;
const mint = (options) => host.mint(options);
console.log(`browser suite against ${base} (baton-host ${host.socketUrl})`);

await mkdir(OUT, { recursive: true });
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  // Chromium's sandbox cannot start as root; anyone else keeps it.
  args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
});

// ---------------------------------------------------------------------------------------------
// helpers

const pageErrors = [];
const cspViolations = []; // the page must run under the host's CSP untouched

// Every client message the page sends over its WebSockets, decoded with upstream's decoder
// from what Chromium's DevTools protocol saw leave the page.
async function tapFrames(page) {
  const cdp = await page.createCDPSession();
  await cdp.send("Network.enable");
  const decoders = new Map();
  const sent = [];
  const sockets = [];
  const closed = new Set();
  cdp.on("Network.webSocketCreated", ({ requestId, url }) => {
    sockets.push(url);
    decoders.set(requestId, new ClientMessageDecoder());
  });
  cdp.on("Network.webSocketClosed", ({ requestId }) => closed.add(requestId));
  cdp.on("Network.webSocketFrameSent", ({ requestId, response }) => {
    if (response.opcode !== 2) return;
    const decoder = decoders.get(requestId) ?? new ClientMessageDecoder();
    decoders.set(requestId, decoder);
    for (const message of decoder.push(new Uint8Array(Buffer.from(response.payloadData, "base64")))) {
      sent.push({ socket: requestId, message });
    }
  });
  return {
    cdp,
    sent,
    sockets,
    /** Sockets the page opened that are not closed (request ids). */
    open: () => [...decoders.keys()].filter((id) => !closed.has(id)),
    requests: (member) => sent.filter((e) => e.message.type === "request" && e.message.call?.member === member),
  };
}

// A page in its own browser context (its own cookie jar), opened on a fresh link.
async function openPaired({ viewer = false, session = null, width = 1280, height = 800 } = {}) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  page.on("pageerror", (error) => pageErrors.push(error.message));
  page.on("console", (message) => {
    if (message.type() === "error" && /Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
  });
  await page.setViewport({ width, height });
  const frames = await tapFrames(page);
  const link = await mint({ viewer, session });
  await page.goto(link);
  await waitConnected(page);
  return { context, page, frames, link };
}

const statusText = (page) => page.$eval("[role=status]", (el) => el.textContent);
const waitConnected = (page) =>
  page.waitForFunction(() => document.querySelector("[role=status]")?.textContent === "connected", { timeout: WAIT });

const promptBox = (page) => page.$('::-p-aria([name="Prompt"][role="textbox"])');

async function newSession(page, name) {
  await page.type("#new-name", name);
  await page.click("#create-button");
  await page.waitForFunction((n) => document.querySelector("#title")?.textContent === n, { timeout: WAIT }, name);
  await page.waitForSelector('::-p-aria([name="Prompt"][role="textbox"])', { timeout: WAIT });
  await page.waitForFunction(() => !document.querySelector("#prompt").disabled, { timeout: WAIT });
  return page.evaluate(() => sessionStorage.getItem("baton.session"));
}

async function send(page, text, { alt = false } = {}) {
  const box = await promptBox(page);
  await box.click();
  await page.evaluate(() => {
    document.querySelector("#prompt").value = "";
  });
  await box.type(text);
  if (alt) {
    await page.keyboard.down("Alt");
    await page.keyboard.press("Enter");
    await page.keyboard.up("Alt");
  } else await page.keyboard.press("Enter");
}

// The log's items as {role, status, text}.
const logItems = (page) =>
  page.$$eval('[role="log"] article', (nodes) =>
    nodes.map((n) => ({
      role: n.className.replace(/.*item-(\S+).*/, "$1"),
      status: n.dataset.status ?? null,
      text: n.querySelector(".user-text, .markdown, pre")?.textContent ?? "",
      full: n.textContent,
    })),
  );

// Sends `text` and waits until the turn it started has settled (a new assistant item after
// it, nothing streaming or running, phase idle).
async function sendAndSettle(page, text) {
  const before = await page.$$eval('[role="log"] article', (n) => n.length);
  await send(page, text);
  await page.waitForFunction(
    (n) => {
      const all = document.querySelectorAll('[role="log"] article');
      return all.length >= n + 2 && all[all.length - 1].classList.contains("item-assistant");
    },
    { timeout: WAIT },
    before,
  );
  await waitIdle(page);
}

const waitIdle = (page) =>
  page.waitForFunction(
    () =>
      document.querySelector("#phase")?.textContent === "idle" &&
      !document.querySelector('[data-status="streaming"], [data-status="running"]'),
    { timeout: WAIT },
  );

const scriptedAnswer = (prompt) =>
  `You said: ${prompt.trim()}. I am the scripted model: ask me to run a command or to read a file.`;

function cookieHeader(cookies) {
  return cookies.map((c) => `${c.name}=${c.value}`).join("; ");
}

// A raw HTTP upgrade request to /ws from Node: resolves with the status line's code.
function rawUpgrade({ hostHeader, origin, cookie }) {
  const url = new URL(base);
  return new Promise((resolvePromise, reject) => {
    const req = httpRequest({
      host: url.hostname,
      port: url.port,
      path: "/ws",
      headers: {
        Host: hostHeader,
        Origin: origin,
        Cookie: cookie,
        Connection: "Upgrade",
        Upgrade: "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": Buffer.from("0123456789abcdef").toString("base64"),
      },
    });
    req.on("upgrade", (res, socket) => {
      socket.destroy();
      resolvePromise(res.statusCode);
    });
    req.on("response", (res) => {
      res.resume();
      resolvePromise(res.statusCode);
    });
    req.on("error", reject);
    req.end();
  });
}

// ---------------------------------------------------------------------------------------------
// the cases

let main; // {page, frames, context}
const cleanups = []; // run after each case (e.g. back online after a failed offline case)
let sessionId;

try {
  await test("a link pairs: HttpOnly SameSite=Strict cookie set, the code gone from the address bar", async () => {
    main = await openPaired();
    const { page, link } = main;
    const code = new URL(link).hash;
    assert.match(code, /^#pair=./);
    assert.equal(page.url(), `${base}/`);
    assert.equal(await page.evaluate(() => location.hash), "");
    assert.ok(!(await page.evaluate(() => location.href)).includes(code.slice(6)), "the code is still in the URL");
    const { cookies } = await main.frames.cdp.send("Network.getCookies", { urls: [base] });
    const cookie = cookies.find((c) => c.name === "baton_web");
    assert.ok(cookie, `no baton_web cookie in ${JSON.stringify(cookies.map((c) => c.name))}`);
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Strict");
    assert.equal(cookie.path, "/");
    assert.equal(cookie.secure, false, "plain http on loopback: not Secure (the browser would drop it)");
    assert.equal(await page.evaluate(() => document.cookie.includes("baton_web")), false, "the page's script can read the cookie");
    assert.equal(await statusText(page), "connected");
    // `/pair` named the server id: one socket, no probe connection before it.
    assert.equal(main.frames.sockets.length, 1, `sockets opened: ${main.frames.sockets}`);
    // The same link a second time (another browser) is refused: single use.
    const other = await browser.createBrowserContext();
    try {
      const again = await other.newPage();
      await again.goto(link);
      await again.waitForFunction(() => document.querySelector("[role=status]")?.textContent === "not paired", { timeout: WAIT });
      assert.equal(await again.evaluate(() => location.hash), "");
      assert.match(await again.$eval("#notice", (n) => n.textContent), /already used/);
    } finally {
      await other.close();
    }
  });

  await test("a prompt streams into the log (role log) and settles, without a sessionStorage read per update", async () => {
    const { page } = main;
    sessionId = await newSession(page, "browser-suite");
    assert.match(sessionId, /^[0-9a-f-]{36}$/);
    // Presence names this browser as `baton links` does.
    const me = await page.evaluate(() => fetch("/me").then((r) => r.json()));
    await page.waitForFunction((id) => document.querySelector("#presence").textContent.includes(`browser web:${id}`), { timeout: WAIT }, me.tokenId);
    // The session list names who is attached to the session on screen, this tab as "you".
    await page.waitForFunction(() => document.querySelector('.session[aria-current="true"] .session-who')?.textContent === "you", { timeout: WAIT });
    await page.evaluate(() => {
      // The tab's pending message is asked for on every state update (one per streamed
      // token): those reads must not each go to sessionStorage.
      window.__pendingReads = 0;
      const getItem = Storage.prototype.getItem;
      Storage.prototype.getItem = function (key) {
        if (String(key).startsWith("baton.pending.")) window.__pendingReads += 1;
        return getItem.call(this, key);
      };
      window.__lengths = [];
      const log = document.querySelector('[role="log"]');
      new MutationObserver(() => {
        const last = [...log.querySelectorAll("article.item-assistant .markdown")].at(-1);
        if (last) window.__lengths.push(last.textContent.length);
      }).observe(log, { childList: true, subtree: true, characterData: true });
    });
    const prompt = Array.from({ length: 60 }, (_, i) => `streamed${i}`).join(" ");
    await send(page, prompt);
    await page.waitForFunction(() => document.querySelector('[data-status="streaming"]'), { timeout: WAIT });
    await waitIdle(page);
    const lengths = await page.evaluate(() => window.__lengths);
    const distinct = new Set(lengths).size;
    assert.ok(distinct >= 5, `the reply grew in only ${distinct} steps: ${lengths.slice(0, 20)}`);
    const reads = await page.evaluate(() => window.__pendingReads);
    assert.ok(reads <= 1, `the pending message was read from sessionStorage ${reads} times while ${distinct} states were drawn`);
    const items = await logItems(page);
    assert.deepEqual(
      items.map((i) => i.role),
      ["user", "assistant"],
    );
    assert.equal(items[0].text, prompt);
    assert.equal(items[1].text.trim(), scriptedAnswer(prompt));
    assert.equal(items[1].status, "complete");
    assert.equal((await promptBox(page)) !== null, true);
    assert.equal(await page.$eval("#prompt", (t) => t.value), "", "the composer was not cleared");
  });

  await test("a streaming reply is drawn block by block: finished blocks stay as the whole reply renders them", async () => {
    // The scripted model echoes the prompt, so this Markdown streams back word by word: a
    // fenced block with blank lines inside (no block may end there), a list, paragraphs.
    const { page } = main;
    const markdown = "first paragraph here\n\n```\ncode line one\n\ncode line three\n```\n\n- item one\n- item two\n\nlast paragraph of the reply";
    await page.evaluate(() => {
      window.__states = [];
      const log = document.querySelector('[role="log"]');
      new MutationObserver(() => {
        const body = document.querySelector('article.item-assistant[data-status="streaming"] .markdown');
        if (body) window.__states.push([...body.children].map((c) => [c.tagName, c.textContent]));
      }).observe(log, { childList: true, subtree: true, characterData: true });
    });
    // Typed, each newline would be an Enter: the text goes in whole, then Enter sends it.
    const before = await page.$$eval('[role="log"] article', (n) => n.length);
    await page.$eval("#prompt", (box, text) => {
      box.value = text;
      box.dispatchEvent(new Event("input"));
      box.focus();
    }, markdown);
    await page.keyboard.press("Enter");
    await page.waitForFunction((n) => document.querySelectorAll('[role="log"] article').length >= n + 2, { timeout: WAIT }, before);
    await waitIdle(page);
    const states = await page.evaluate(() => window.__states);
    const final = await page.$eval("article.item-assistant:last-of-type .markdown", (body) => [...body.children].map((c) => [c.tagName, c.textContent]));
    assert.deepEqual(
      final.map(([tag]) => tag),
      ["P", "DIV", "UL", "P"],
      JSON.stringify(final),
    );
    assert.ok(final[1][1].includes("code line one\n\ncode line three"), final[1][1]);
    const distinct = states.filter((s, i) => i === 0 || JSON.stringify(s) !== JSON.stringify(states[i - 1]));
    assert.ok(distinct.length >= 4, `only ${distinct.length} drawn states`);
    // (An inline code span still open shows its backtick.)
    const squash = (t) => t.replace(/`/g, "").replace(/\s+/g, " ").trim();
    for (const state of distinct) {
      // Every block but the last is final already; the last is a prefix of what it becomes.
      state.slice(0, -1).forEach(([tag, text], i) => assert.deepEqual([tag, text], final[i], `block ${i} of ${JSON.stringify(state)}`));
      const [tag, text] = state.at(-1);
      const at = state.length - 1;
      assert.equal(tag, final[at][0], `last block of ${JSON.stringify(state)}`);
      assert.ok(squash(final[at][1]).startsWith(squash(text)), `${JSON.stringify(text)} is not a start of ${JSON.stringify(final[at][1])}`);
    }
  });

  await test("a tool call is a card: running, then complete; its full output read with readItem", async () => {
    const { page, frames } = main;
    await page.evaluate(() => {
      window.__toolStates = [];
      new MutationObserver(() => {
        for (const card of document.querySelectorAll("article.item-tool")) window.__toolStates.push(card.dataset.status);
      }).observe(document.querySelector('[role="log"]'), { childList: true, subtree: true, attributes: true });
    });
    await send(page, "please run `sleep 1; echo card-output`");
    await page.waitForFunction(() => document.querySelector('article.item-tool[data-status="complete"]'), { timeout: WAIT });
    await waitIdle(page);
    const states = await page.evaluate(() => window.__toolStates);
    assert.ok(states.includes("running"), `the card was never shown running: ${[...new Set(states)]}`);
    const before = frames.requests("readItem").length;
    await page.click("article.item-tool summary");
    await page.waitForFunction(() => document.querySelector('article.item-tool[data-full="read"] details[open] pre')?.textContent === "card-output", {
      timeout: WAIT,
    });
    const reads = frames.requests("readItem").slice(before);
    assert.equal(reads.length, 1, "opening the card did not read the output with readItem");
    assert.deepEqual(reads[0].message.call.args.slice(1, 3), [["content", 0, "text"], 0]);
    const items = await logItems(page);
    assert.match(items.at(-1).text, /card-output/);
  });

  await test("while a turn runs: steer names its turn, follow-ups queue, edit and remove, and land", async () => {
    const { page, frames } = main;
    await send(page, "run `sleep 4`");
    await page.waitForSelector('::-p-aria([name="Steer"][role="button"])', { visible: true, timeout: WAIT });
    await page.waitForFunction(() => document.querySelector("article.item-tool[data-status=running]"), { timeout: WAIT });
    await send(page, "steer: also say hello");
    await send(page, "follow-up one", { alt: true });
    await send(page, "follow-up two", { alt: true });
    await page.waitForFunction(() => document.querySelectorAll("#followup-list li").length === 2, { timeout: WAIT });
    // Remove the second, edit the first.
    await page.click('::-p-aria([name="Remove follow-up: follow-up two"])');
    await page.waitForFunction(() => document.querySelectorAll("#followup-list li").length === 1, { timeout: WAIT });
    await page.click('::-p-aria([name="Edit follow-up: follow-up one"])');
    const editor = await page.waitForSelector('::-p-aria([name="Edit follow-up"][role="textbox"])');
    await editor.click({ count: 3 });
    await page.evaluate(() => {
      document.querySelector("#followup-list textarea").value = "";
    });
    await editor.type("follow-up one, edited");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelector("#followup-list .followup-text")?.textContent === "follow-up one, edited", {
      timeout: WAIT,
    });
    const steer = frames.requests("steer").at(-1);
    assert.ok(steer, "no steer request");
    assert.equal(steer.message.call.args[0], "steer: also say hello");
    assert.match(steer.message.call.args[1].turnId, /^turn-/);
    // The steering reaches the model at the turn's next boundary; the follow-up runs after.
    await page.waitForFunction(
      () => [...document.querySelectorAll("article.item-user .user-text")].some((n) => n.textContent === "follow-up one, edited"),
      { timeout: WAIT },
    );
    await waitIdle(page);
    await page.waitForFunction(() => document.querySelectorAll("#followup-list li").length === 0, { timeout: WAIT });
    const users = (await logItems(page)).filter((i) => i.role === "user").map((i) => i.text);
    const steerAt = users.indexOf("steer: also say hello");
    const followAt = users.indexOf("follow-up one, edited");
    assert.ok(steerAt > 0 && followAt > steerAt, `user items: ${JSON.stringify(users)}`);
    assert.ok(!users.includes("follow-up two"), "the removed follow-up was sent");
    const last = (await logItems(page)).at(-1);
    assert.equal(last.text.trim(), scriptedAnswer("follow-up one, edited"));
  });

  await test("Stop (a button named Stop) aborts the running turn", async () => {
    const { page } = main;
    const long = Array.from({ length: 400 }, (_, i) => `word${i}`).join(" ");
    await send(page, long);
    await page.waitForFunction(() => document.querySelector('[data-status="streaming"] .markdown'), { timeout: WAIT });
    const stop = await page.$('::-p-aria([name="Stop"][role="button"])');
    assert.ok(stop, "no button named Stop");
    await stop.click();
    await page.waitForFunction(() => document.querySelector('article.item-assistant[data-status="aborted"]'), { timeout: WAIT });
    await waitIdle(page);
    const last = (await logItems(page)).at(-1);
    assert.equal(last.status, "aborted");
    assert.ok(last.text.length < scriptedAnswer(long).length, "the reply was not cut short");
  });

  await test("script and HTML in model output render as inert text", async () => {
    const { page } = main;
    const hostile =
      'x <script>window.__xss=1</script> <img src=x onerror="window.__xss=2"> <b>bold?</b> ' +
      "[js](javascript:window.__xss=3) [web](https://example.com/ok) <iframe src=/></iframe>";
    await sendAndSettle(page, hostile);
    const result = await page.evaluate(() => {
      const last = [...document.querySelectorAll("article.item-assistant")].at(-1);
      return {
        xss: window.__xss,
        text: last.querySelector(".markdown").textContent,
        elements: [...last.querySelectorAll("script, img, iframe, b, [onerror]")].map((e) => e.tagName),
        links: [...last.querySelectorAll("a")].map((a) => [a.textContent, a.getAttribute("href"), a.rel]),
        userText: [...document.querySelectorAll("article.item-user")].at(-1).querySelector(".user-text").textContent,
      };
    });
    assert.equal(result.xss, undefined);
    assert.deepEqual(result.elements, []);
    assert.ok(result.text.includes("<script>window.__xss=1</script>"), result.text);
    assert.ok(result.text.includes('<img src=x onerror="window.__xss=2">'), result.text);
    assert.ok(result.text.includes("<b>bold?</b>"), result.text);
    // The javascript: link is no link; the web link is one, opened without a referrer.
    assert.deepEqual(
      result.links.map(([text, href]) => [text, href]),
      [["web", "https://example.com/ok"]],
    );
    assert.match(result.links[0][2], /noopener/);
    assert.match(result.links[0][2], /noreferrer/);
    assert.equal(result.userText, hostile);
  });

  await test("a viewer link shows the session read-only: no composer, no Stop", async () => {
    const viewer = await openPaired({ viewer: true, session: sessionId });
    try {
      const { page } = viewer;
      await page.waitForFunction(() => document.querySelectorAll('[role="log"] article').length > 0, { timeout: WAIT });
      assert.equal(await page.evaluate(() => sessionStorage.getItem("baton.session")), sessionId);
      assert.equal(await promptBox(page), null, "a viewer page has a Prompt textbox");
      assert.equal(await page.$('::-p-aria([name="Stop"][role="button"])'), null, "a viewer page has a Stop button");
      assert.equal(await page.$("#create-button"), null, "a viewer page can create sessions");
      assert.equal(await page.$("#model"), null, "a viewer page has a model selector");
      await page.screenshot({ path: join(OUT, "viewer-1280x800.png") });
      // The operator's session list names the viewer that joined, not just a count.
      const { tokenId } = await page.evaluate(() => fetch("/me").then((r) => r.json()));
      await main.page.waitForFunction(
        (id) => document.querySelector('.session[aria-current="true"] .session-who')?.textContent === `you, browser web:${id}`,
        { timeout: WAIT },
        tokenId,
      );
    } finally {
      await viewer.context.close();
    }
  });

  await test("a viewer's forced mutation answers forbidden", async () => {
    const viewer = await openPaired({ viewer: true, session: sessionId });
    try {
      const { page } = viewer;
      await page.waitForFunction(() => document.querySelectorAll('[role="log"] article').length > 0, { timeout: WAIT });
      for (const [member, args] of [
        ["prompt", ["from a viewer"]],
        ["abort", []],
        ["bash", ["echo viewer", {}]],
        ["setThinking", ["high"]],
      ]) {
        const answer = await page.evaluate((m, a) => globalThis.batonPage.call(m, ...a), member, args);
        assert.equal(answer.ok, false, `${member} succeeded for a viewer`);
        assert.equal(answer.code, "forbidden", `${member}: ${JSON.stringify(answer)}`);
      }
    } finally {
      await viewer.context.close();
    }
  });

  await test("offline and back: reconnects at once, the prompt in flight is not sent twice", async () => {
    const { page, frames } = main;
    const text = "run `sleep 2; echo across-the-cut`";
    await send(page, text);
    await page.waitForFunction(() => document.querySelector("article.item-tool[data-status=running]"), { timeout: WAIT });
    const socketsBefore = frames.sockets.length;
    await page.setOfflineMode(true);
    cleanups.push(() => page.setOfflineMode(false));
    await page.waitForFunction(() => document.querySelector("[role=status]").textContent.includes("reconnecting"), { timeout: WAIT });
    // While offline, Enter sends nothing: the text stays in the composer.
    await send(page, "typed while offline");
    assert.equal(await page.$eval("#prompt", (t) => t.value), "typed while offline");
    await page.setOfflineMode(false);
    await waitConnected(page);
    assert.ok(frames.sockets.length > socketsBefore, "no new WebSocket was opened");
    await page.waitForFunction(
      () => [...document.querySelectorAll("article.item-assistant .markdown")].some((n) => n.textContent.includes("across-the-cut")),
      { timeout: WAIT },
    );
    await waitIdle(page);
    const users = (await logItems(page)).filter((i) => i.role === "user" && i.text === text);
    assert.equal(users.length, 1, "the prompt shows more than once");
    assert.equal(frames.requests("prompt").filter((e) => e.message.call.args[0] === text).length, 1, "the prompt was sent twice");
    assert.equal(frames.requests("prompt").filter((e) => e.message.call.args[0] === "typed while offline").length, 0);
    assert.equal(await page.$eval("#prompt", (t) => t.value), "typed while offline", "the unsent draft was lost");
    await page.evaluate(() => {
      document.querySelector("#prompt").value = "";
      sessionStorage.removeItem(`baton.draft.${sessionStorage.getItem("baton.session")}`);
    });
  });

  await test("the host restarted under the page (same sessions dir and port): it reconnects and shows the transcript", async () => {
    const { page, frames } = main;
    const before = await logItems(page);
    assert.ok(before.length >= 4, `too little transcript to compare: ${before.length}`);
    const prompts = frames.requests("prompt").length;
    await page.evaluate(() => {
      window.__conn = [];
      const status = document.querySelector("[role=status]");
      new MutationObserver(() => window.__conn.push(status.textContent)).observe(status, { childList: true, characterData: true, subtree: true });
    });
    const port = new URL(base).port;
    await host.restart();
    assert.equal(new URL(host.base).port, port, "the host came back on another port");
    await page.waitForFunction(() => window.__conn.some((t) => t.includes("reconnecting")), { timeout: WAIT });
    await waitConnected(page);
    await page.waitForFunction((n) => document.querySelectorAll('[role="log"] article').length >= n, { timeout: WAIT }, before.length);
    const after = await logItems(page);
    assert.deepEqual(
      after.map((i) => [i.role, i.text]),
      before.map((i) => [i.role, i.text]),
    );
    assert.equal(frames.requests("prompt").length, prompts, "a prompt was sent again after the restart");
    // The cookie survived the restart (tokens are kept hashed on disk), and the session works.
    await sendAndSettle(page, "after the restart");
    assert.equal((await logItems(page)).at(-1).text.trim(), scriptedAnswer("after the restart"));
  });

  await test("baton unlink closes the page's socket at once; the page then says it is no longer paired", async () => {
    const other = await openPaired({ session: sessionId });
    try {
      const { page, frames } = other;
      await page.evaluate(() => {
        window.__conn = [];
        const status = document.querySelector("[role=status]");
        new MutationObserver(() => window.__conn.push(status.textContent)).observe(status, { childList: true, characterData: true, subtree: true });
      });
      const me = await page.evaluate(() => fetch("/me").then((r) => r.json()));
      assert.match(me.tokenId, /./);
      assert.equal(me.serverId, host.serverId, "/me names another server id than the host's hello");
      assert.equal(frames.open().length, 1, `open sockets: ${frames.open()}`);
      await host.unlink(`web:${me.tokenId}`);
      // Closed by the host (nothing in the page closes it), before any retry.
      await page.waitForFunction(() => window.__conn.some((t) => t.includes("reconnecting")), { timeout: WAIT });
      await page.waitForFunction(() => document.querySelector("[role=status]").textContent === "not paired", { timeout: WAIT });
      assert.match(await page.$eval("#notice", (n) => n.textContent), /no longer paired/);
      const seen = await page.evaluate(() => window.__conn);
      assert.ok(seen.indexOf("not paired") > seen.findIndex((t) => t.includes("reconnecting")), JSON.stringify(seen));
      assert.equal(frames.open().length, 0, "a socket of the revoked browser is still open");
      assert.equal(await page.$eval("#prompt", (t) => t.disabled || t.closest("[hidden]") !== null), true, "the composer still takes input");
      // The main page (another browser identity) is untouched.
      assert.equal(await statusText(main.page), "connected");
    } finally {
      await other.context.close();
    }
  });

  await test("a prompt whose outcome was never seen is not re-sent after a reload", async () => {
    // The tab recorded a message as in flight (as it does before every send) and was
    // reloaded before any answer; the host never got it. The page must put it back in the
    // composer and send nothing.
    const { page, frames } = main;
    await page.evaluate((id) => {
      sessionStorage.setItem(
        `baton.pending.${id}`,
        JSON.stringify({ kind: "prompt", text: "never arrived", original: "never arrived", baseline: 1e9, nonce: "n" }),
      );
    }, sessionId);
    await page.reload();
    await waitConnected(page);
    await page.waitForFunction(() => document.querySelector("#prompt")?.value === "never arrived", { timeout: WAIT });
    assert.match(await page.$eval("#notice", (n) => n.textContent), /did not reach the host/);
    assert.equal(frames.requests("prompt").filter((e) => e.message.call.args[0] === "never arrived").length, 0);
    await page.evaluate(() => {
      document.querySelector("#prompt").value = "";
      sessionStorage.removeItem(`baton.draft.${sessionStorage.getItem("baton.session")}`);
    });
    // And one that did land (sent, then the tab lost it before seeing the answer): the page
    // says so, the composer stays empty, nothing is sent again.
    const total = await page.evaluate(async () => {
      const listed = await globalThis.batonPage.call("listItems", 0, 0);
      return listed.result.total;
    });
    await waitIdle(page);
    const answered = await page.evaluate(() => globalThis.batonPage.call("prompt", "it did arrive"));
    assert.equal(answered.ok, true, JSON.stringify(answered));
    await page.evaluate(
      (id, baseline) =>
        sessionStorage.setItem(
          `baton.pending.${id}`,
          JSON.stringify({ kind: "prompt", text: "it did arrive", original: "it did arrive", baseline, nonce: "m" }),
        ),
      sessionId,
      total,
    );
    const sentBefore = frames.requests("prompt").filter((e) => e.message.call.args[0] === "it did arrive").length;
    await page.reload();
    await waitConnected(page);
    await page.waitForFunction(() => /had reached the host/.test(document.querySelector("#notice").textContent), { timeout: WAIT });
    assert.equal(await page.$eval("#prompt", (t) => t.value), "");
    assert.equal(frames.requests("prompt").filter((e) => e.message.call.args[0] === "it did arrive").length, sentBefore);
    assert.equal(await page.evaluate((id) => sessionStorage.getItem(`baton.pending.${id}`), sessionId), null);
  });

  await test("two messages sent before either's outcome was seen are both put back after a reload, neither re-sent", async () => {
    // The socket stops carrying anything the page sends (a connection that went silently),
    // then two messages go through the composer: both are in flight with no answer.
    const { page, frames } = main;
    await waitIdle(page);
    await page.evaluate(() => {
      WebSocket.prototype.send = function () {};
    });
    await send(page, "first unsent");
    await page.waitForFunction(() => document.querySelector("#prompt").value === "", { timeout: WAIT });
    await send(page, "second unsent");
    await page.waitForFunction(() => document.querySelector("#prompt").value === "", { timeout: WAIT });
    const stored = await page.evaluate((id) => JSON.parse(sessionStorage.getItem(`baton.pending.${id}`)), sessionId);
    assert.deepEqual(
      stored.map((e) => e.text),
      ["first unsent", "second unsent"],
    );
    await page.reload();
    await waitConnected(page);
    await page.waitForFunction(() => document.querySelector("#prompt")?.value === "first unsent\nsecond unsent", { timeout: WAIT });
    assert.match(await page.$eval("#notice", (n) => n.textContent), /2 of your messages did not reach the host/);
    assert.equal(frames.requests("prompt").filter((e) => /unsent/.test(e.message.call.args[0])).length, 0);
    assert.equal(await page.evaluate((id) => sessionStorage.getItem(`baton.pending.${id}`), sessionId), null);
    await page.evaluate(() => {
      document.querySelector("#prompt").value = "";
      sessionStorage.removeItem(`baton.draft.${sessionStorage.getItem("baton.session")}`);
    });
  });

  await test("nothing is kept in localStorage", async () => {
    assert.equal(await main.page.evaluate(() => localStorage.length), 0);
  });

  await test("a page from another origin cannot open the socket (the cookie alone is not enough)", async () => {
    const { page } = main;
    const target = `${base.replace(/^http/, "ws")}/ws`;
    const evil = createServer((req, res) => {
      if (req.url === "/attack.js") {
        res.writeHead(200, { "Content-Type": "text/javascript" });
        res.end(`const ws = new WebSocket(${JSON.stringify(target)});
ws.onopen = () => { document.title = "opened"; };
ws.onclose = () => { if (document.title !== "opened") document.title = "refused"; };`);
        return;
      }
      res.writeHead(200, { "Content-Type": "text/html" });
      res.end('<!doctype html><title>waiting</title><script src="/attack.js"></script>');
    });
    await new Promise((r) => evil.listen(0, "127.0.0.1", r));
    try {
      // The same browser context: it holds the valid cookie (and 127.0.0.1 is the same site).
      const attacker = await main.context.newPage();
      await attacker.goto(`http://127.0.0.1:${evil.address().port}/`);
      await attacker.waitForFunction(() => document.title !== "waiting", { timeout: WAIT });
      assert.equal(await attacker.title(), "refused");
      await attacker.close();
      // What the browser does, by hand: a valid cookie with a foreign Origin, or a foreign
      // Host (DNS rebinding), is refused with 403 before any upgrade.
      const cookie = cookieHeader((await main.context.cookies(base)).filter((c) => c.name === "baton_web"));
      const own = new URL(base).host;
      assert.equal(await rawUpgrade({ hostHeader: own, origin: `http://127.0.0.1:${evil.address().port}`, cookie }), 403);
      assert.equal(await rawUpgrade({ hostHeader: "rebound.example:80", origin: "http://rebound.example:80", cookie }), 403);
      assert.equal(await rawUpgrade({ hostHeader: own, origin: base, cookie: "baton_web=forged" }), 403);
      assert.equal(await rawUpgrade({ hostHeader: own, origin: base, cookie }), 101, "the check refused the page's own origin too");
      assert.equal(await statusText(page), "connected");
    } finally {
      await new Promise((r) => evil.close(r));
    }
  });

  await test("a session past the window opens with its tail; older items page in with listItems on scroll up", async () => {
    const { page, frames } = main;
    const id = await newSession(page, "long-session");
    // 150 items (past the 128-item window) without the model: `!` commands through the page.
    for (let i = 0; i < 150; i += 1) {
      const answer = await page.evaluate((n) => globalThis.batonPage.call("bash", `echo line-${n}`, {}), i);
      assert.equal(answer.ok, true, JSON.stringify(answer));
    }
    await page.reload();
    await waitConnected(page);
    await page.waitForFunction(() => document.querySelectorAll('[role="log"] article').length >= 128, { timeout: WAIT });
    const firstShown = await page.$eval('[role="log"] article pre', (n) => n.textContent);
    assert.notEqual(firstShown, "line-0", "the whole session was loaded at once");
    const opened = await page.$$eval('[role="log"] article', (n) => n.length);
    assert.equal(opened, 128);
    await page.waitForFunction(
      () => {
        const log = document.querySelector('[role="log"]');
        return log.scrollHeight - log.scrollTop - log.clientHeight < 48;
      },
      { timeout: WAIT },
    );
    const before = frames.requests("listItems").length;
    await page.$eval('[role="log"]', (log) => {
      log.scrollTop = 0;
    });
    await page.waitForFunction(() => document.querySelectorAll('[role="log"] article').length === 150, { timeout: WAIT });
    assert.ok(frames.requests("listItems").length > before, "no listItems request");
    assert.equal(await page.$eval('[role="log"] article pre', (n) => n.textContent), "line-0");
    assert.equal(await page.evaluate(() => sessionStorage.getItem("baton.session")), id);
  });

  await test("a tab left open at the end of a growing session keeps at most 256 older items; the rest pages in again", async () => {
    // The long session of the case before (150 items), followed at its end while 300 more
    // arrive: the window (128) plus 256 older items stay drawn, not all 450.
    const { page, frames } = main;
    await page.$eval('[role="log"]', (log) => {
      log.scrollTop = log.scrollHeight;
    });
    await page.waitForFunction(
      () => {
        const log = document.querySelector('[role="log"]');
        return log.scrollHeight - log.scrollTop - log.clientHeight < 48;
      },
      { timeout: WAIT },
    );
    const failures = await page.evaluate(async () => {
      const bad = [];
      for (let n = 150; n < 450; n += 1) {
        const answer = await globalThis.batonPage.call("bash", `echo line-${n}`, {});
        if (!answer.ok) bad.push(answer);
      }
      return bad;
    });
    assert.deepEqual(failures, []);
    await page.waitForFunction(() => [...document.querySelectorAll('[role="log"] article pre')].at(-1)?.textContent === "line-449", { timeout: WAIT });
    await page.waitForFunction(() => document.querySelector('[role="log"] article pre')?.textContent === "line-66", { timeout: WAIT });
    assert.equal(await page.$$eval('[role="log"] article', (n) => n.length), 128 + 256);
    assert.equal(await page.$eval("#older-status", (n) => n.textContent), "66 older messages — scroll up to load");
    // Scrolled back to: what was let go comes again from listItems.
    const before = frames.requests("listItems").length;
    await page.$eval('[role="log"]', (log) => {
      log.scrollTop = 0;
    });
    await page.waitForFunction(() => Number(/^line-(\d+)$/.exec(document.querySelector('[role="log"] article pre')?.textContent)?.[1]) < 66, { timeout: WAIT });
    assert.ok(frames.requests("listItems").length > before, "no listItems request");
  }, { timeoutMs: 240000 });

  await test("screenshots at 1280×800 and 390×844; the phone layout is one column with the composer on screen", async () => {
    const { page } = main;
    // Back to the conversation session for the pictures.
    await page.click('::-p-aria([name="Sessions"][role="button"])').catch(() => {});
    await page.evaluate((id) => sessionStorage.setItem("baton.session", id), sessionId);
    await page.reload();
    await waitConnected(page);
    await page.waitForFunction(() => document.querySelectorAll('[role="log"] article').length > 4, { timeout: WAIT });
    await page.setViewport({ width: 1280, height: 800 });
    await page.screenshot({ path: join(OUT, "desktop-1280x800.png") });
    await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    // (A change to isMobile reloads the page: wait for it to be back.)
    await waitConnected(page);
    await page.waitForFunction(() => !document.querySelector("#composer").hidden && document.querySelectorAll('[role="log"] article').length > 4, {
      timeout: WAIT,
    });
    await page.waitForFunction(() => getComputedStyle(document.querySelector("#toggle-sessions")).display !== "none", { timeout: WAIT });
    const layout = await page.evaluate(() => {
      const box = (sel) => document.querySelector(sel).getBoundingClientRect().toJSON();
      return {
        composer: box("#composer"),
        transcript: box("#transcript"),
        sessionsVisible: getComputedStyle(document.querySelector("#sessions")).visibility,
        width: innerWidth,
        height: innerHeight,
      };
    });
    assert.ok(layout.composer.bottom <= layout.height + 1 && layout.composer.top > 0, JSON.stringify(layout));
    assert.ok(layout.transcript.width >= layout.width - 2, `transcript ${layout.transcript.width} of ${layout.width}`);
    assert.equal(layout.sessionsVisible, "hidden");
    await page.screenshot({ path: join(OUT, "phone-390x844.png") });
    await page.click('::-p-aria([name="Sessions"][role="button"])');
    // Open and done sliding in (its left edge at the screen's).
    await page.waitForFunction(() => Math.abs(document.querySelector("#sessions").getBoundingClientRect().left) < 1, { timeout: WAIT });
    await page.screenshot({ path: join(OUT, "phone-390x844-sessions.png") });
    await page.keyboard.press("Escape");
    await page.setViewport({ width: 1280, height: 800 });
  });

  await test("keyboard: Tab reaches the session list, the prompt and its buttons", async () => {
    const { page } = main;
    await waitConnected(page);
    await page.waitForFunction(() => getComputedStyle(document.querySelector("#sessions")).visibility === "visible" && !document.querySelector("#composer").hidden, {
      timeout: WAIT,
    });
    await page.evaluate(() => document.activeElement?.blur());
    const reached = new Set();
    for (let i = 0; i < 40; i += 1) {
      await page.keyboard.press("Tab");
      reached.add(await page.evaluate(() => document.activeElement?.id || document.activeElement?.className || ""));
    }
    for (const want of ["create-button", "session", "prompt", "send", "transcript"]) {
      assert.ok(reached.has(want), `Tab never reached ${want}: ${[...reached]}`);
    }
  });

  await test("the page threw no script error and broke no Content-Security-Policy rule", async () => {
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(cspViolations, []);
  });
} finally {
  await browser.close().catch(() => {});
  await host.stop();
}

console.log(`screenshots: ${OUT}`);
console.log("browser:");
console.log(`${passed} passed, ${failed} failed`);
if (failed > 0) process.exitCode = 1;
