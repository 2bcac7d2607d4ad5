// A private `baton-host serve` with its real web listener, for the browser suite and the
// benchmark: a Unix listener and `--listen http://127.0.0.1:PORT` in a fresh temporary
// directory (sessions, socket and config there, never the user's), the scripted model
// unless told otherwise. Links are minted with the real CLI, `baton --connect unix://… link
// [SESSION] [--viewer]`, and revoked with `baton unlink ID`.
//
//   const host = await startWebHost({ hostBin, batonBin });
//   host.base                      the web listener's base URL (its `web listener on URL` line)
//   await host.mint({session, viewer})   one link URL
//   await host.restart()           SIGTERM, then the same sessions dir and port again
//   await host.stop()

import { execFile, spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";

const LISTENING = /^listening (unix:\/\/\S+) server-id ([0-9a-f-]{36})$/;
const WEB = /^web listener on (http:\/\/\S+)$/;
const START_GUARD_MS = 30000;

/**
 * @param {{hostBin: string, batonBin: string, extraArgs?: string[], env?: Record<string, string>}} options
 */
export async function startWebHost({ hostBin, batonBin, extraArgs = [], env: extraEnv = {} }) {
  const root = await mkdtemp(join(tmpdir(), "baton-web-"));
  const sessionsDir = join(root, "sessions");
  const socketDir = join(root, "sock");
  await mkdir(join(root, "config"), { recursive: true });
  // Nothing of the user's: no config file, no default socket, no profile, no preset endpoint.
  const env = { ...process.env, XDG_CONFIG_HOME: join(root, "config"), XDG_RUNTIME_DIR: root, RUST_LOG: process.env.RUST_LOG ?? "warn", ...extraEnv };
  for (const name of Object.keys(env)) if (name.startsWith("BATON_")) delete env[name];

  let child;
  let exited;
  const stderr = [];
  let port = 0;
  const state = { base: undefined, socketUrl: undefined, serverId: undefined, listeningAt: 0 };

  async function launch() {
    child = spawn(
      hostBin,
      ["serve", "--sessions-dir", sessionsDir, "--listen", `unix://${socketDir}`, "--listen", `http://127.0.0.1:${port}`, ...extraArgs],
      { stdio: ["ignore", "pipe", "pipe"], env },
    );
    createInterface({ input: child.stderr }).on("line", (line) => {
      stderr.push(line);
      if (stderr.length > 400) stderr.shift();
      if (process.env.BATON_WEB_HOST_LOG) console.error(`host: ${line}`);
    });
    const self = child;
    exited = new Promise((resolve) => {
      self.once("exit", (code, signal) => resolve({ code, signal }));
      self.once("error", (error) => resolve({ code: null, signal: null, error }));
    });
    let timer;
    try {
      await Promise.race([
        new Promise((resolve) => {
          const lines = createInterface({ input: self.stdout });
          lines.on("line", (line) => {
            const unix = LISTENING.exec(line.trim());
            if (unix) {
              state.socketUrl = unix[1];
              state.serverId = unix[2];
            }
            const web = WEB.exec(line.trim());
            if (web) {
              state.listeningAt = Date.now();
              state.base = web[1];
              resolve();
            }
          });
        }),
        exited.then(({ code, signal }) => {
          throw new Error(`baton-host exited before listening (code ${code}, signal ${signal}): ${stderr.slice(-5).join(" | ")}`);
        }),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`baton-host printed no web listener line in ${START_GUARD_MS} ms`)), START_GUARD_MS);
        }),
      ]);
    } catch (error) {
      self.kill("SIGKILL");
      throw error;
    } finally {
      clearTimeout(timer);
    }
    port = Number(new URL(state.base).port);
  }

  async function terminate() {
    if (!child || child.exitCode !== null || child.signalCode !== null) return exited;
    child.kill("SIGTERM");
    let timer;
    await Promise.race([
      exited,
      new Promise((resolve) => {
        timer = setTimeout(() => {
          child.kill("SIGKILL");
          resolve();
        }, 10000);
      }),
    ]);
    clearTimeout(timer);
    return exited;
  }

  const onExit = () => {
    child?.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
  };
  process.once("exit", onExit);
  try {
    await launch();
  } catch (error) {
    process.off("exit", onExit);
    await rm(root, { recursive: true, force: true });
    throw error;
  }

  /** `baton --connect <the Unix socket> args…`: {stdout, stderr}; rejects on a non-zero exit. */
  const baton = async (...args) => promisify(execFile)(batonBin, ["--connect", state.socketUrl, ...args], { env });

  return {
    root,
    sessionsDir,
    stderr,
    get base() {
      return state.base;
    },
    get serverId() {
      return state.serverId;
    },
    get socketUrl() {
      return state.socketUrl;
    },
    /** `Date.now()` when the web listener's line was read (it is printed once bound). */
    get listeningAt() {
      return state.listeningAt;
    },
    baton,
    /** One link from `baton link [SESSION] [--viewer]`: the single line it prints. */
    async mint({ session = null, viewer = false, ttl = null } = {}) {
      const args = ["link"];
      if (session) args.push(session);
      if (viewer) args.push("--viewer");
      if (ttl) args.push("--ttl", ttl);
      const { stdout } = await baton(...args);
      const lines = stdout.split("\n").filter((l) => l !== "");
      if (lines.length !== 1) throw new Error(`baton link printed ${lines.length} lines: ${JSON.stringify(stdout)}`);
      return lines[0];
    },
    /** `baton unlink ID`. */
    async unlink(id) {
      await baton("unlink", id);
    },
    /**
     * Stops the host (SIGTERM: it drains), runs `whileDown` (e.g. writes a journal), and
     * starts it again on the same sessions dir and the same port. The port was the kernel's choice the first time; binding it again can
     * fail only if something else took it meanwhile, which is retried for a while and then
     * reported.
     */
    async restart({ whileDown } = {}) {
      await terminate();
      await whileDown?.();
      const wanted = port;
      for (let attempt = 0; ; attempt += 1) {
        try {
          await launch();
          break;
        } catch (error) {
          if (attempt >= 20 || !/cannot start the web listener/.test(error.message)) {
            throw new Error(`baton-host did not come back on port ${wanted}: ${error.message}`);
          }
          await new Promise((r) => setTimeout(r, 250));
        }
      }
    },
    /** SIGTERM (graceful drain), SIGKILL after 10 s; removes the temporary directory. */
    async stop() {
      const status = await terminate();
      process.off("exit", onExit);
      await rm(root, { recursive: true, force: true });
      return status;
    },
  };
}
