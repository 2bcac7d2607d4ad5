// Starts a private `baton-host serve` for the upstream-client and web-socket suites: a fresh
// temporary sessions directory and a `unix:///DIR` listener in a fresh temporary directory
// (never the user's default directories), and with `{ web: true }` also a loopback web
// listener (`--listen http://127.0.0.1:0`). Resolves once the host printed its
// `listening … server-id …` line (and, for `web`, its `web listener on <base URL>` line).

import { spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const LISTENING = /^listening (unix:\/\/\S+) server-id ([0-9a-f-]{36})$/;
const WEB = /^web listener on (http:\/\/127\.0\.0\.1:\d+)$/;

export async function startHost(bin, { startTimeoutMs = 20000, web = false } = {}) {
  const root = await mkdtemp(join(tmpdir(), web ? "baton-web-socket-" : "baton-upstream-client-"));
  const sessionsDir = join(root, "sessions");
  const socketDir = join(root, "sock");
  const listen = ["--listen", `unix://${socketDir}`, ...(web ? ["--listen", "http://127.0.0.1:0"] : [])];
  const child = spawn(bin, ["serve", "--sessions-dir", sessionsDir, ...listen], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "info" },
  });
  const stderr = [];
  createInterface({ input: child.stderr }).on("line", (line) => {
    stderr.push(line);
    if (stderr.length > 400) stderr.shift();
  });
  const exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
    child.once("error", (error) => {
      stderr.push(`spawn failed: ${error.message}`);
      resolve({ code: null, signal: null, error });
    });
  });

  let timer;
  const listening = await Promise.race([
    new Promise((resolve) => {
      const seen = {};
      createInterface({ input: child.stdout }).on("line", (line) => {
        const m = LISTENING.exec(line.trim());
        if (m) Object.assign(seen, { url: m[1], serverId: m[2] });
        const w = WEB.exec(line.trim());
        if (w) seen.base = w[1];
        if (seen.url && (!web || seen.base)) resolve(seen);
      });
    }),
    exited.then(({ code, signal }) => {
      throw new Error(`baton-host exited before listening (code ${code}, signal ${signal}): ${stderr.slice(-5).join(" | ")}`);
    }),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`baton-host printed no ${web ? "web listener" : "listening"} line in ${startTimeoutMs} ms`)), startTimeoutMs);
    }),
  ])
    .catch(async (error) => {
      child.kill("SIGKILL");
      await rm(root, { recursive: true, force: true });
      throw error;
    })
    .finally(() => clearTimeout(timer));

  const socketPath = new URL(listening.url).pathname;
  let exitStatus;
  // If this process dies without stopping the host (an uncaught error), take it down too.
  const onExit = () => {
    if (exitStatus === undefined) child.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
  };
  process.once("exit", onExit);
  void exited.then((status) => {
    exitStatus = status;
  });

  return {
    serverId: listening.serverId,
    socketUrl: listening.url,
    // The web listener's base URL, which is also the page's own origin (`web` only).
    base: listening.base,
    socketPath,
    socketDir,
    sessionsDir,
    root,
    child,
    stderr,
    get running() {
      return exitStatus === undefined;
    },
    exited,
    // The transcript file of a session, as text ("" while it does not exist).
    async transcriptFile(sessionId) {
      try {
        return await readFile(join(sessionsDir, `${sessionId}.jsonl`), "utf8");
      } catch {
        return "";
      }
    },
    async sessionFiles() {
      return (await readdir(sessionsDir)).filter((n) => n.endsWith(".jsonl"));
    },
    // SIGTERM (graceful drain), SIGKILL after `graceMs`; removes the temporary directory.
    async stop({ graceMs = 5000 } = {}) {
      if (exitStatus === undefined) {
        child.kill("SIGTERM");
        let killTimer;
        await Promise.race([
          exited,
          new Promise((resolve) => {
            killTimer = setTimeout(() => {
              child.kill("SIGKILL");
              resolve();
            }, graceMs);
          }),
        ]);
        clearTimeout(killTimer);
        await exited;
      }
      await rm(root, { recursive: true, force: true });
      process.off("exit", onExit);
      return exitStatus;
    },
  };
}
