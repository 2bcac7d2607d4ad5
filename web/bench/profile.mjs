// Where a page's main thread spends a window of time, from a Chromium trace: the renderer
// main thread's task time split into the browser's own rendering work (style, layout, paint),
// garbage collection, and script, the script's sampled time split by where its code comes
// from (a package of the bundle, one of our source files, or the benchmark's own watchers).
//
// The trace needs the bundle unminified (esbuild marks each module's start with a
// `// path` comment), so `unminifiedBundle()` builds one from web/src/ exactly as build.mjs
// does but with names and line breaks kept; the benchmark serves it in place of the
// committed, minified one for the profiled run only.

import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";

const WEB = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Trace categories: task and rendering events, GC, and the V8 sampling profiler. */
export const TRACE_CATEGORIES = [
  "-*",
  "toplevel",
  "devtools.timeline",
  "disabled-by-default-devtools.timeline",
  "v8.execute",
  "v8",
  "disabled-by-default-v8.cpu_profiler",
];

/** The page's script as build.mjs makes it, but unminified: {code, moduleAt(line)}. */
export async function unminifiedBundle() {
  const out = await build({
    absWorkingDir: WEB,
    entryPoints: ["src/main.js"],
    bundle: true,
    minify: false,
    legalComments: "none",
    charset: "utf8",
    target: ["es2022", "chrome111", "firefox111", "safari16.4"],
    format: "esm",
    platform: "browser",
    define: { "process.env.NODE_ENV": '"production"' },
    write: false,
    logLevel: "warning",
  });
  const code = out.outputFiles[0].text;
  // Line (0-based) → module: each module starts after a `// path` comment line.
  const starts = [];
  code.split("\n").forEach((line, i) => {
    const m = /^\/\/ ((?:node_modules|src)\/\S+)$/.exec(line);
    if (m) starts.push([i, group(m[1])]);
  });
  const moduleAt = (line) => {
    let lo = 0;
    let hi = starts.length - 1;
    let found = "bundle (runtime)";
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid][0] <= line) {
        found = starts[mid][1];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
  return { code, moduleAt };
}

// node_modules/@scope/name/… → @scope/name; node_modules/name/… → name; src/x.js → ours: x.js
function group(path) {
  if (path.startsWith("src/")) return `ours: ${path.slice(4)}`;
  const parts = path.split("/");
  return parts[1].startsWith("@") ? `${parts[1]}/${parts[2]}` : parts[1];
}

const RENDER_LIBRARIES = new Set(["markdown-it", "dompurify", "linkify-it", "mdurl", "uc.micro", "entities", "punycode.js"]);
const DECODE_LIBRARIES = new Set(["@earendil-works/pi-protocol", "@earendil-works/pi-client", "typebox"]);
const STYLE_LAYOUT = new Set(["UpdateLayoutTree", "Layout", "RecalculateStyles", "ScheduleStyleRecalculation", "InvalidateLayout"]);
const PAINT = new Set(["PrePaint", "Paint", "PaintImage", "Layerize", "UpdateLayer", "UpdateLayerTree", "CompositeLayers", "Commit", "RasterTask", "PaintSetup", "HitTest", "IntersectionObserverController::computeIntersections"]);
const GC = new Set(["MinorGC", "MajorGC", "V8.GCScavenger", "V8.GCCompactor", "V8.GCIncrementalMarking", "V8.GCFinalizeMC", "V8.GC_MC_BACKGROUND_MARKING", "BlinkGC.AtomicPhase", "CppGC.AtomicMark"]);
const SCRIPT = new Set(["FunctionCall", "EvaluateScript", "v8.run", "v8.callFunction", "V8.Execute", "RunMicrotasks", "TimerFire", "FireAnimationFrame", "EventDispatch", "v8.compile", "V8.CompileCode"]);

/**
 * The breakdown of the renderer main thread's time in `events` (a trace's `traceEvents`),
 * for the page whose script is `bundle` ({moduleAt}) at URL suffix `scriptPath`.
 */
export function breakdown(events, { bundle, scriptPath }) {
  // The renderer main thread that ran our script: the CrRendererMain with the most samples
  // in the bundle (closed tabs' renderers may be in the trace too).
  const mains = new Set(
    events.filter((e) => e.ph === "M" && e.name === "thread_name" && e.args?.name === "CrRendererMain").map((e) => `${e.pid}:${e.tid}`),
  );
  const profiles = new Map(); // profile id → {thread, start, nodes: Map, samples: [], deltas: []}
  for (const e of events) {
    if (e.name === "Profile") profiles.set(`${e.pid}:${e.id}`, { thread: `${e.pid}:${e.tid}`, start: e.args.data.startTime, nodes: new Map(), samples: [], deltas: [] });
    if (e.name === "ProfileChunk") {
      const p = profiles.get(`${e.pid}:${e.id}`);
      if (!p) continue;
      for (const n of e.args.data.cpuProfile?.nodes ?? []) p.nodes.set(n.id, n);
      p.samples.push(...(e.args.data.cpuProfile?.samples ?? []));
      p.deltas.push(...(e.args.data.timeDeltas ?? []));
    }
  }
  let profile;
  let best = -1;
  for (const p of profiles.values()) {
    if (!mains.has(p.thread)) continue;
    const ours = p.samples.filter((id) => p.nodes.get(id)?.callFrame?.url?.endsWith(scriptPath)).length;
    if (ours > best) {
      best = ours;
      profile = p;
    }
  }
  if (!profile) throw new Error("no CPU profile of a renderer main thread in the trace");
  const thread = profile.thread;
  const onMain = events.filter((e) => `${e.pid}:${e.tid}` === thread && e.ph === "X" && typeof e.dur === "number");

  // Top-level tasks: the window is from the first task's start to the last one's end.
  const tasks = onMain.filter((e) => e.name === "RunTask" || e.name === "ThreadControllerImpl::RunTask");
  tasks.sort((a, b) => a.ts - b.ts);
  const top = [];
  for (const t of tasks) if (!top.length || t.ts >= top.at(-1).ts + top.at(-1).dur) top.push(t);
  const from = top[0].ts;
  const to = top.at(-1).ts + top.at(-1).dur;
  const wall = to - from;
  const busy = top.reduce((n, t) => n + t.dur, 0);

  // Self time per kind of event, nested events subtracted from their parents.
  const sorted = onMain.filter((e) => e.ts >= from && e.ts < to).sort((a, b) => a.ts - b.ts || b.dur - a.dur);
  const stack = [];
  const self = new Map(); // event → self µs
  const intervals = { layout: [], paint: [], gc: [] };
  let forced = 0; // style and layout run inside script (a read after a write), µs
  for (const e of sorted) {
    while (stack.length && stack.at(-1).ts + stack.at(-1).dur <= e.ts) stack.pop();
    if (STYLE_LAYOUT.has(e.name) && stack.some((s) => SCRIPT.has(s.name)) && !stack.some((s) => STYLE_LAYOUT.has(s.name))) forced += e.dur;
    if (stack.length) self.set(stack.at(-1), (self.get(stack.at(-1)) ?? 0) - e.dur);
    self.set(e, (self.get(e) ?? 0) + e.dur);
    stack.push(e);
    if (STYLE_LAYOUT.has(e.name)) intervals.layout.push([e.ts, e.ts + e.dur]);
    else if (PAINT.has(e.name)) intervals.paint.push([e.ts, e.ts + e.dur]);
    else if (GC.has(e.name)) intervals.gc.push([e.ts, e.ts + e.dur]);
  }
  const kinds = { "style and layout": 0, "paint, layers and commit": 0, "garbage collection": 0, script: 0, "other browser work": 0 };
  const names = new Map();
  for (const [e, us] of self) {
    names.set(e.name, (names.get(e.name) ?? 0) + us);
    const kind = STYLE_LAYOUT.has(e.name)
      ? "style and layout"
      : PAINT.has(e.name)
        ? "paint, layers and commit"
        : GC.has(e.name)
          ? "garbage collection"
          : SCRIPT.has(e.name)
            ? "script"
            : "other browser work";
    kinds[kind] += us;
  }

  // The script's samples by module (and by function), those inside a layout or GC event
  // left to that event's own count above.
  const parents = new Map();
  for (const n of profile.nodes.values()) {
    if (n.parent !== undefined) parents.set(n.id, n.parent);
    for (const c of n.children ?? []) parents.set(c, n.id);
  }
  const within = (list, t) => list.some(([a, b]) => t >= a && t < b);
  const modules = new Map();
  const functions = new Map();
  let t = profile.start;
  let sampled = 0;
  for (let i = 0; i < profile.samples.length; i += 1) {
    t += profile.deltas[i];
    const weight = profile.deltas[i + 1] ?? 0;
    if (t < from || t >= to || weight <= 0) continue;
    const node = profile.nodes.get(profile.samples[i]);
    const frame = node?.callFrame ?? {};
    if (frame.functionName === "(idle)" || frame.functionName === "(program)" || frame.functionName === "(garbage collector)") continue;
    if (within(intervals.layout, t) || within(intervals.gc, t) || within(intervals.paint, t)) continue;
    // A native function (no URL: TextDecoder, DOMParser, a DOM call) counts for the code
    // that called it.
    let caller = node;
    while (caller && !caller.callFrame?.url) caller = profile.nodes.get(parents.get(caller.id));
    const url = caller?.callFrame?.url ?? "";
    const where = url.endsWith(scriptPath)
      ? bundle.moduleAt(caller.callFrame.lineNumber)
      : url.startsWith("pptr:")
        ? "the benchmark's watchers (not the page)"
        : url || "(native, no script caller)";
    modules.set(where, (modules.get(where) ?? 0) + weight);
    const fn = `${where} ${frame.functionName || "(anonymous)"}`;
    functions.set(fn, (functions.get(fn) ?? 0) + weight);
    sampled += weight;
  }
  const share = (us) => us / wall;
  // The parts the page's time is spent on, from the modules above and the events.
  const partOf = (module) =>
    module.startsWith("ours: ") || RENDER_LIBRARIES.has(module)
      ? "our render and state handling (web/src, markdown-it, DOMPurify)"
      : DECODE_LIBRARIES.has(module)
        ? "pi-protocol decode and schema check (pi-protocol, pi-client, typebox)"
        : module === "@earendil-works/chord"
          ? "chord apply"
          : "other script (the benchmark's watchers, native)";
  const parts = new Map();
  for (const [module, us] of modules) parts.set(partOf(module), (parts.get(partOf(module)) ?? 0) + us);
  const byShare = (m) => [...m].sort((a, b) => b[1] - a[1]).map(([name, us]) => ({ name, share: share(us), ms: us / 1000 }));
  return {
    seconds: wall / 1e6,
    busy: share(busy),
    kinds: Object.entries(kinds).map(([name, us]) => ({ name, share: share(us) })),
    forcedLayout: share(forced),
    scriptSampled: share(sampled),
    modules: byShare(modules),
    parts: byShare(parts),
    functions: byShare(functions).slice(0, 12),
    events: byShare(names).slice(0, 12),
    ours: byShare(functions).filter((f) => f.name.startsWith("ours: ")).slice(0, 8),
  };
}
