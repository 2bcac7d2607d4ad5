// Talks to baton-agent-probe: one JSON request on stdin, one JSON response on stdout.

import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

export const probePath = path.resolve(
  repoRoot,
  process.env.BATON_AGENT_PROBE ?? path.join("target", "debug", "baton-agent-probe"),
);

export function callProbe(request) {
  return new Promise((resolve, reject) => {
    const child = spawn(probePath, [], { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.stderr.on("data", (d) => {
      err += d;
    });
    child.on("error", reject);
    child.on("close", (code) => {
      let doc;
      try {
        doc = JSON.parse(out);
      } catch {
        reject(new Error(`probe exited ${code} without JSON: ${out.slice(0, 300)} ${err.slice(0, 300)}`));
        return;
      }
      if (doc.error) reject(new Error(`probe: ${doc.error}`));
      else resolve(doc);
    });
    child.stdin.end(JSON.stringify(request));
  });
}

export const runBaton = (scenario) => callProbe({ command: "run", scenario });
export const projectBaton = async (transcripts) => (await callProbe({ command: "project", transcripts })).results;
