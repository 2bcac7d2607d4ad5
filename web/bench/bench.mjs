// The web client's budgets (issue 22 point 6), measured in Debian's headless Chromium on
// loopback against a real `baton-host serve` with its web listener. A benchmark, not a test:
// it prints each figure beside its budget and fails nothing.
//
//   bash web/bench/run [--runs N]
//
// * Transcript painted after the page has its cookie: a tab of an already paired browser
//   opens `/` (cache off, so the page's files load every time) and the time from navigation
//   start to the first frame after the session's last item (or, for a new session, its empty
//   note) is in the log, connected. Median of N, for a 10,000-item session and a new one.
// * Main thread busy while a reply streams at 200 tokens/s: CDP `Performance.getMetrics`
//   `TaskDuration` (main-thread task time) over `Timestamp`, from the reply's first token on
//   screen to its last; beside it the same tasks' CPU time (`threadTicks`), which a loaded
//   machine does not inflate. The reply comes from a loopback OpenAI-compatible server
//   (stream-model.mjs) pacing its tokens at that rate.
// * Everything the page loads: each response's body as the host sent it (its Content-Length:
//   the gzip where the browser accepted it) for the page, script, style sheet and `/me`,
//   summed; the WebSocket's frames are the protocol, not the page.
// * Reconnect after the host restarts: SIGTERM, the same sessions dir and port again; ms
//   from the host's `web listener on` line (printed once it is bound) to the first frame
//   that shows the 10,000-item transcript again. Median of N.
//
// * Where that streaming time goes: another new session streams the same reply under
//   Chromium's trace with its sampling profiler, the bundle served unminified for that run
//   (profile.mjs), split by kind of work and by the bundle's module.
//
// The host is the release build `run` builds (BATON_HOST_BIN names another; BATON_BUILD
// says which, for the output). `--only stream` takes the streaming figures alone.
//
// The 10,000 items are written as journal lines into the session's file while the host is
// stopped (the format the host itself writes), not made by 5,000 model turns.

import { appendFile, readFile } from "node:fs/promises";
import { loadavg, cpus } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import puppeteer from "puppeteer-core";

import { startWebHost } from "../tests/web-host.mjs";
import { TRACE_CATEGORIES, breakdown, unminifiedBundle } from "./profile.mjs";
import { startStreamModel } from "./stream-model.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, "../..");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const runsAt = process.argv.indexOf("--runs");
const RUNS = runsAt > 0 ? Number(process.argv[runsAt + 1]) : 9;
// `--only stream`: the streaming figures alone (busy share and its profile), no long session.
const onlyAt = process.argv.indexOf("--only");
const ONLY = onlyAt > 0 ? process.argv[onlyAt + 1] : undefined;
const SCRIPT_PATH = "/assets/app.js";
const ITEMS = 10_000;
const RATE = 200; // tokens per second
const STREAM_TOKENS = 2_000; // a 10 s reply
const WAIT = 60_000;
const binary = (variable, name) => {
  const fromEnv = process.env[variable];
  if (fromEnv) return isAbsolute(fromEnv) ? fromEnv : resolve(REPO, fromEnv);
  return join(process.env.CARGO_TARGET_DIR ? resolve(REPO, process.env.CARGO_TARGET_DIR) : join(REPO, "target"), "release", name);
};
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const lastText = (i) => `answer ${i}: done.`;

// ---------------------------------------------------------------------------------------------
// a 10,000-item session, as journal lines

async function appendConversation(file, count) {
  const lines = (await readFile(file, "utf8")).trim().split("\n");
  const last = JSON.parse(lines.at(-1));
  let id = parseInt(last.id, 16);
  let parent = last.id;
  const started = Date.now() - count * 1000;
  const out = [];
  for (let i = 0; i < count; i += 1) {
    id += 1;
    const entryId = id.toString(16).padStart(8, "0");
    const at = started + i * 1000;
    const message =
      i % 2 === 0
        ? { role: "user", content: [{ type: "text", text: `question ${i}: what does step ${i} do?` }], timestamp: at }
        : {
            role: "assistant",
            content: [
              {
                type: "text",
                text: `Step ${i - 1} reads the **input**, checks it and writes the result:\n\n\`\`\`sh\nstep --n ${i - 1} < in > out\n\`\`\`\n\n${i === count - 1 ? lastText(i) : `answer ${i}.`}`,
              },
            ],
            api: "bench",
            provider: "bench",
            model: "history",
            usage: { input: 40, output: 30, cacheRead: 0, cacheWrite: 0, totalTokens: 70, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
            stopReason: "stop",
            timestamp: at,
          };
    out.push(JSON.stringify({ id: entryId, parentId: parent, timestamp: new Date(at).toISOString(), type: "message", message }));
    parent = entryId;
  }
  await appendFile(file, `${out.join("\n")}\n`);
}

// ---------------------------------------------------------------------------------------------
// in the page: the first frame after a condition holds

// Installed before the page's own script (CDP's script-on-new-document). `window.__watch(name,
// arg)` resolves with `Date.now()` and `performance.now()` of the first frame after the
// named condition holds, checked on every DOM change; `window.__first` is the one named when
// the script was installed. (Named, not passed as source: the
// page's CSP forbids eval, rightly.)
const WATCHER = (first, firstArg) => {
  const connected = () => document.querySelector("[role=status]")?.textContent === "connected";
  const conditions = {
    // the session's last item is in the log
    long: (marker) => connected() && [...document.querySelectorAll('[role="log"] article')].at(-1)?.textContent.includes(marker),
    // a new session's empty note is shown, under its name
    new: (name) => connected() && document.querySelector("#empty")?.hidden === false && document.querySelector("#title")?.textContent === name,
    reconnecting: () => document.querySelector("[role=status]")?.textContent.includes("reconnecting"),
  };
  window.__watch = (name, arg) =>
    new Promise((resolve) => {
      const check = () => {
        if (!conditions[name](arg)) return;
        observer.disconnect();
        // rAF runs just before the frame is painted; the message after it runs once it is.
        requestAnimationFrame(() => {
          const channel = new MessageChannel();
          channel.port1.onmessage = () => resolve({ epoch: Date.now(), now: performance.now() });
          channel.port2.postMessage(0);
        });
      };
      const observer = new MutationObserver(check);
      observer.observe(document, { childList: true, subtree: true, characterData: true, attributes: true });
      check();
    });
  // Watched from the document's start, so a condition met early is timed when it was met.
  if (first) window.__first = window.__watch(first, firstArg);
};
const LONG = ["long", lastText(ITEMS - 1)];
const NEW = ["new", "new"];
const STREAMED = ["new", "streamed"];
const PROFILED = ["new", "profiled"];
const watch = (page, [name, arg]) => page.evaluate((n, a) => window.__watch(n, a), name, arg);

// Sends a prompt in `page` (a new session, shown) and streams the model's reply: `onFirst()`
// once its first token is on screen, `onLast()` once its last is; {first, last, words} with
// what each returned. The watch for the last token reads only the reply's last block, so
// the benchmark's own work in the page stays small beside the page's.
async function streamReply(page, { onFirst, onLast }) {
  await page.type("#prompt", "stream a long reply");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector('article.item-assistant[data-status="streaming"] .markdown')?.textContent.includes("word1 "), { timeout: WAIT, polling: "mutation" });
  const first = await onFirst();
  await page.waitForFunction(
    (n) => document.querySelector("article.item-assistant:last-of-type .markdown")?.lastElementChild?.textContent.includes(`word${n - 2} `),
    { timeout: WAIT, polling: "mutation" },
    STREAM_TOKENS,
  );
  const last = await onLast();
  await page.waitForFunction(() => document.querySelector("#phase")?.textContent === "idle", { timeout: WAIT });
  const words = await page.$eval("article.item-assistant:last-of-type .markdown", (n) => n.textContent.split(/\s+/).filter(Boolean).length);
  return { first, last, words };
}

// ---------------------------------------------------------------------------------------------

const hostBin = binary("BATON_HOST_BIN", "baton-host");
const build = process.env.BATON_BUILD ?? "unknown";
const loadAtStart = loadavg();
const model = await startStreamModel({ tokensPerSecond: RATE, tokens: STREAM_TOKENS });
const host = await startWebHost({
  hostBin,
  batonBin: binary("BATON_BIN", "baton"),
  extraArgs: ["--model", "openai:stream", "--base-url", model.baseUrl],
});
const bundle = await unminifiedBundle();
const browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: process.getuid?.() === 0 ? ["--no-sandbox"] : [] });
const figures = {};
try {
  const created = async (name) => (await host.baton("create", "--name", name)).stdout.trim();
  const longId = ONLY ? undefined : await created("long");
  const newId = ONLY ? undefined : await created("new");
  const streamId = await created("streamed");
  const profileId = await created("profiled");
  if (!ONLY) await host.restart({ whileDown: () => appendConversation(join(host.sessionsDir, `${longId}.jsonl`), ITEMS) });

  // One paired browser per session: it holds its cookie from here on.
  const paired = async (session, shown) => {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.setViewport({ width: 1280, height: 800 });
    await page.evaluateOnNewDocument(WATCHER);
    await page.goto(await host.mint({ session }));
    await watch(page, shown);
    await page.close();
    return context;
  };
  const streamContext = await paired(streamId, STREAMED);
  const profileContext = await paired(profileId, PROFILED);
  if (!ONLY) {
    const longContext = await paired(longId, LONG);
    const newContext = await paired(newId, NEW);

    // 1. painted after the cookie
    const openOnce = async (context, shown, { sizes } = {}) => {
      const page = await context.newPage();
      await page.setViewport({ width: 1280, height: 800 });
      await page.setCacheEnabled(false);
      await page.evaluateOnNewDocument(WATCHER, ...shown);
      const bodies = [];
      if (sizes) {
        page.on("response", async (response) => {
          if (response.request().resourceType() === "websocket") return;
          try {
            bodies.push({ url: response.url(), bytes: await response.buffer(), sent: Number(response.headers()["content-length"]) });
          } catch {}
        });
      }
      await page.goto(`${host.base}/`, { waitUntil: "domcontentloaded" });
      const at = await page.evaluate(() => window.__first);
      await page.close();
      return { ms: at.now, bodies };
    };
    const paint = { long: [], new: [] };
    let loaded;
    for (let i = 0; i < RUNS; i += 1) {
      const long = await openOnce(longContext, LONG, { sizes: i === 0 });
      if (i === 0) loaded = long.bodies;
      paint.long.push(long.ms);
      paint.new.push((await openOnce(newContext, NEW)).ms);
    }
    figures.paintLong = paint.long;
    figures.paintNew = paint.new;

    // 2. everything the page loads
    figures.loaded = loaded.map(({ url, bytes, sent }) => ({ path: new URL(url).pathname, raw: bytes.length, sent }));

    // 3. reconnect after the host restarts
    {
      const page = await longContext.newPage();
      await page.setViewport({ width: 1280, height: 800 });
      await page.evaluateOnNewDocument(WATCHER);
      await page.goto(`${host.base}/`);
      await watch(page, LONG);
      figures.reconnect = [];
      figures.downMs = [];
      const runs = Math.max(3, Math.ceil(RUNS / 2));
      for (let i = 0; i < runs; i += 1) {
        // Armed for "reconnecting", then for the transcript shown again after it.
        await page.evaluate((n, a) => {
          window.__back = window.__watch("reconnecting").then(() => window.__watch(n, a));
        }, ...LONG);
        const stopping = Date.now();
        await host.restart();
        figures.downMs.push(host.listeningAt - stopping);
        const back = await page.evaluate(() => window.__back);
        figures.reconnect.push(back.epoch - host.listeningAt);
      }
      await page.close();
    }
  }

  // 4. main thread busy while a reply streams
  {
    const page = await streamContext.newPage();
    await page.setViewport({ width: 1280, height: 800 });
    await page.evaluateOnNewDocument(WATCHER);
    await page.goto(`${host.base}/`);
    await watch(page, STREAMED);
    // Task time as wall time (timeTicks: what the issue's budget means, and what a loaded
    // machine inflates) and as the main thread's CPU time (threadTicks), each on its own
    // DevTools session.
    const wallCdp = await page.createCDPSession();
    await wallCdp.send("Performance.enable", { timeDomain: "timeTicks" });
    const cpuCdp = await page.createCDPSession();
    await cpuCdp.send("Performance.enable", { timeDomain: "threadTicks" });
    const read = async (cdp) => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
    const metrics = async () => {
      const [wall, cpu] = await Promise.all([read(wallCdp), read(cpuCdp)]);
      return { ...wall, CpuTaskDuration: cpu.TaskDuration, CpuTimestamp: cpu.Timestamp, at: performance.now() };
    };
    const { first, last, words } = await streamReply(page, { onFirst: metrics, onLast: metrics });
    figures.busy = {
      share: (last.TaskDuration - first.TaskDuration) / (last.Timestamp - first.Timestamp),
      cpuShare: (last.CpuTaskDuration - first.CpuTaskDuration) / ((last.at - first.at) / 1000),
      seconds: last.Timestamp - first.Timestamp,
      script: (last.ScriptDuration - first.ScriptDuration) / (last.Timestamp - first.Timestamp),
      layout: (last.LayoutDuration - first.LayoutDuration + last.RecalcStyleDuration - first.RecalcStyleDuration) / (last.Timestamp - first.Timestamp),
      words,
    };
    await page.close();
  }

  // 5. where that time goes: the same streaming in another new session, traced, with the
  // bundle served unminified so the samples name their modules (see profile.mjs)
  {
    const page = await profileContext.newPage();
    await page.setViewport({ width: 1280, height: 800 });
    await page.evaluateOnNewDocument(WATCHER);
    await page.setRequestInterception(true);
    page.on("request", (request) => {
      if (new URL(request.url()).pathname === SCRIPT_PATH) {
        void request.respond({ status: 200, contentType: "text/javascript; charset=utf-8", body: bundle.code });
      } else void request.continue();
    });
    await page.goto(`${host.base}/`);
    await watch(page, PROFILED);
    // The WebSocket messages the page receives in the window, counted from the outside.
    const network = await page.createCDPSession();
    await network.send("Network.enable");
    const frames = { counting: false, count: 0, bytes: 0 };
    network.on("Network.webSocketFrameReceived", ({ response }) => {
      if (!frames.counting) return;
      frames.count += 1;
      frames.bytes += (response.payloadData.length * 3) / 4; // base64 of a binary message
    });
    const { last: trace, words } = await streamReply(page, {
      onFirst: async () => {
        await page.tracing.start({ categories: TRACE_CATEGORIES });
        frames.counting = true;
      },
      onLast: async () => {
        frames.counting = false;
        return JSON.parse(Buffer.from(await page.tracing.stop()).toString("utf8"));
      },
    });
    figures.profile = { ...breakdown(trace.traceEvents, { bundle, scriptPath: SCRIPT_PATH }), words, frames };
    await page.close();
  }

} finally {
  await browser.close().catch(() => {});
  await host.stop();
  await model.close();
}

// ---------------------------------------------------------------------------------------------

const ms = (x) => `${Math.round(x)} ms`;
const pct = (x) => `${(x * 100).toFixed(1)} %`;
const rows = [];
if (!ONLY) rows.push(
  [`transcript painted, ${ITEMS.toLocaleString("en")}-item session (median of ${RUNS})`, ms(median(figures.paintLong)), "≤ 300 ms"],
  [`transcript painted, new session (median of ${RUNS})`, ms(median(figures.paintNew)), "≤ 300 ms"],
);
rows.push([`main thread busy, reply streaming at ${RATE} tokens/s (${figures.busy.seconds.toFixed(1)} s)`, pct(figures.busy.share), "≤ 15 %"]);
if (!ONLY) {
  const sent = figures.loaded.reduce((n, f) => n + f.sent, 0);
  rows.push(
    [`everything the page loads, as sent (${figures.loaded.length} files)`, `${(sent / 1000).toFixed(1)} KB`, "≤ 250 KB"],
    [`reconnect after a host restart: listening → transcript shown (median of ${figures.reconnect.length})`, ms(median(figures.reconnect)), "≤ 1 s"],
  );
}
console.log(`host: ${hostBin} (${build} build)`);
console.log("");
console.log("| figure | measured | budget |");
console.log("| --- | --- | --- |");
for (const r of rows) console.log(`| ${r.join(" | ")} |`);
console.log("");
if (!ONLY) {
  console.log(`painted, ${ITEMS}-item session, each run (ms): ${figures.paintLong.map(Math.round).join(" ")}`);
  console.log(`painted, new session, each run (ms): ${figures.paintNew.map(Math.round).join(" ")}`);
}
console.log(`streaming: ${figures.busy.words} words shown; script ${pct(figures.busy.script)}, style+layout ${pct(figures.busy.layout)} of wall time`);
console.log(`streaming: the main thread's CPU time (threadTicks) was ${pct(figures.busy.cpuShare)} of wall time (task time above counts a task's time off the CPU too)`);
{
  const p = figures.profile;
  console.log(`streaming, traced again (another new session, the bundle unminified; ${p.words} words, ${p.seconds.toFixed(1)} s): main thread busy ${pct(p.busy)} of wall time`);
  console.log(`  ${p.frames.count} WebSocket messages received (${(p.frames.count / p.seconds).toFixed(0)} a second, ${Math.round(p.frames.bytes / p.frames.count)} bytes each on average)`);
  console.log(`  by kind of work: ${p.kinds.map((k) => `${k.name} ${pct(k.share)}`).join(", ")}; of style and layout, forced inside script ${pct(p.forcedLayout)}`);
  console.log(`  script by part: ${p.parts.map((m) => `${m.name} ${pct(m.share)}`).join(", ")}`);
  console.log(`  script samples by module (${pct(p.scriptSampled)} in all): ${p.modules.map((m) => `${m.name} ${pct(m.share)}`).join(", ")}`);
  console.log(`  top events (self time): ${p.events.map((f) => `${f.name} ${pct(f.share)}`).join("; ")}`);
  console.log(`  our top functions: ${p.ours.map((f) => `${f.name} ${pct(f.share)}`).join("; ")}`);
  console.log(`  top functions: ${p.functions.map((f) => `${f.name} ${pct(f.share)}`).join("; ")}`);
}
if (!ONLY) {
  console.log(`loaded: ${figures.loaded.map((f) => `${f.path} ${f.raw} B (${f.sent} B sent)`).join(", ")}`);
  console.log(`reconnect, each run (ms): ${figures.reconnect.map(Math.round).join(" ")}; host down (SIGTERM → listening again, ms): ${figures.downMs.map(Math.round).join(" ")}`);
}
const load = (l) => l.map((x) => x.toFixed(2)).join(" ");
console.log(`machine: ${cpus().length} CPUs, load average ${load(loadAtStart)} at the start, ${load(loadavg())} at the end`);
