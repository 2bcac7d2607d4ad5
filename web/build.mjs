// Builds the page into dist/: index.html, assets/app.js, assets/app.css, and beside each its
// gzip (`.gz`, what the host sends when the browser accepts gzip). The output is
// byte-reproducible from the lock file (no timestamps, no absolute paths, no source maps,
// a fixed target), because the committed dist/ is what the host embeds and CI rebuilds it
// and compares (.ci/web-bundle-check).
//
//   node web/build.mjs            (or: npm run build --prefix web)
//   node web/build.mjs --out DIR  (writes DIR/ instead of dist/: what the check compares)

import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

import { build } from "esbuild";

const WEB = dirname(fileURLToPath(import.meta.url));
const outAt = process.argv.indexOf("--out");
const DIST = outAt > 0 ? resolve(process.argv[outAt + 1]) : join(WEB, "dist");

const common = {
  absWorkingDir: WEB,
  bundle: true,
  minify: true,
  legalComments: "none",
  charset: "utf8",
  target: ["es2022", "chrome111", "firefox111", "safari16.4"],
  write: false,
  logLevel: "warning",
};

const [js, css] = await Promise.all([
  build({
    ...common,
    entryPoints: ["src/main.js"],
    format: "esm",
    platform: "browser",
    define: { "process.env.NODE_ENV": '"production"' },
  }),
  build({ ...common, entryPoints: ["src/app.css"] }),
]);

const html = await readFile(join(WEB, "src/index.html"));
const files = {
  "index.html": html,
  "assets/app.js": js.outputFiles[0].contents,
  "assets/app.css": css.outputFiles[0].contents,
};

// No inline script or style may reach the page (the host's CSP refuses them).
const text = html.toString("utf8");
if (/<script(?![^>]*\bsrc=)[^>]*>/i.test(text) || /<style/i.test(text) || /\sstyle=/i.test(text) || /\son[a-z]+=/i.test(text)) {
  throw new Error("index.html has inline script, style or an event-handler attribute");
}

await rm(DIST, { recursive: true, force: true });
await mkdir(join(DIST, "assets"), { recursive: true });
let gzipped = 0;
for (const [name, bytes] of Object.entries(files)) {
  const gz = gzip(bytes);
  await writeFile(join(DIST, name), bytes);
  await writeFile(join(DIST, `${name}.gz`), gz);
  gzipped += gz.length;
  console.log(`${name.padEnd(16)} ${String(bytes.length).padStart(8)} bytes, ${String(gz.length).padStart(7)} gzipped`);
}
console.log(`${"total".padEnd(16)} ${" ".repeat(8)}        ${String(gzipped).padStart(7)} gzipped`);

// Level 9; zlib's header has no name and a zero time already, and the OS byte is set to
// "unknown" (RFC 1952: 255) so the bytes do not depend on the platform that built them.
function gzip(bytes) {
  const gz = gzipSync(bytes, { level: 9 });
  if (gz[0] !== 0x1f || gz[1] !== 0x8b || gz[3] !== 0 || gz.readUInt32LE(4) !== 0) {
    throw new Error("unexpected gzip header (a name, flags or a time)");
  }
  gz[9] = 255;
  return gz;
}
