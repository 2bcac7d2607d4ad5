// The pieces of the web-socket suite: a private `baton-host serve` with a Unix listener and
// a loopback web listener, the real `baton` CLI minting links over the Unix socket, the
// pairing request a page sends, and a pi-client `ByteTransportFactory` over the `ws` package.
//
// * `startWebHost(bin)`: a fresh temporary sessions directory, `--listen unix:///DIR` and
//   `--listen http://127.0.0.1:0`; resolves once the host printed its `listening …` line and
//   its `web listener on <base URL>` line.
// * `baton(bin, socketUrl, args)`: one `baton --connect <socket> args…` run: {code, stdout, stderr}.
// * `request(base, {method, path, headers, body})`: one HTTP exchange by `node:http` (which,
//   unlike `fetch`, sends the `Origin` it is given): {status, headers, body}.
// * `wsTransportFactory(url, headers)`: pi-client's transport over one WebSocket per
//   connection: one binary message per `send()` chunk, each send resolved once `ws` wrote it.

import { spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import WebSocket from "ws";

const LISTENING = /^listening (unix:\/\/\S+) server-id ([0-9a-f-]{36})$/;
const WEB = /^web listener on (http:\/\/127\.0\.0\.1:\d+)$/;

export async function startWebHost(bin, { startTimeoutMs = 20000 } = {}) {
  const root = await mkdtemp(join(tmpdir(), "baton-web-socket-"));
  const sessionsDir = join(root, "sessions");
  const socketDir = join(root, "sock");
  const child = spawn(
    bin,
    ["serve", "--sessions-dir", sessionsDir, "--listen", `unix://${socketDir}`, "--listen", "http://127.0.0.1:0"],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "info" } },
  );
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
  const started = await Promise.race([
    new Promise((resolve) => {
      const seen = {};
      createInterface({ input: child.stdout }).on("line", (line) => {
        const listening = LISTENING.exec(line.trim());
        if (listening) Object.assign(seen, { socketUrl: listening[1], serverId: listening[2] });
        const web = WEB.exec(line.trim());
        if (web) seen.base = web[1];
        if (seen.socketUrl && seen.base) resolve(seen);
      });
    }),
    exited.then(({ code, signal }) => {
      throw new Error(`baton-host exited before listening (code ${code}, signal ${signal}): ${stderr.slice(-5).join(" | ")}`);
    }),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`baton-host printed no web listener line in ${startTimeoutMs} ms`)), startTimeoutMs);
    }),
  ])
    .catch(async (error) => {
      child.kill("SIGKILL");
      await rm(root, { recursive: true, force: true });
      throw error;
    })
    .finally(() => clearTimeout(timer));

  let exitStatus;
  const onExit = () => {
    if (exitStatus === undefined) child.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
  };
  process.once("exit", onExit);
  void exited.then((status) => {
    exitStatus = status;
  });

  return {
    ...started,
    // The page's own origin is the base URL (scheme, host, port; no path).
    origin: started.base,
    wsUrl: `${started.base.replace(/^http:/, "ws:")}/ws`,
    stderr,
    get running() {
      return exitStatus === undefined;
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

export function baton(bin, socketUrl, args) {
  return new Promise((resolve) => {
    const child = spawn(bin, ["--connect", socketUrl, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    const out = [];
    const err = [];
    child.stdout.on("data", (chunk) => out.push(chunk));
    child.stderr.on("data", (chunk) => err.push(chunk));
    child.once("error", (error) => resolve({ code: null, stdout: "", stderr: `spawn failed: ${error.message}` }));
    child.once("close", (code) =>
      resolve({ code, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") }),
    );
  });
}

export function request(base, { method = "GET", path = "/", headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(path, base), { method, headers, agent: false }, (res) => {
      const chunks = [];
      res.on("data", (chunk) => chunks.push(chunk));
      res.on("end", () =>
        resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

// The `baton_web` cookie's value from a `Set-Cookie` header, and its attributes.
export function parseSetCookie(headers) {
  const lines = headers["set-cookie"] ?? [];
  if (lines.length !== 1) throw new Error(`expected one Set-Cookie, got ${JSON.stringify(lines)}`);
  const [pair, ...attributes] = lines[0].split(";").map((part) => part.trim());
  const eq = pair.indexOf("=");
  return { name: pair.slice(0, eq), value: pair.slice(eq + 1), attributes };
}

// A pi-client `ByteTransportFactory`: one WebSocket per connection with `headers` (the
// cookie, the page's Origin). `onSocket(ws)` sees each socket; `refusals` collects the
// status of every upgrade answered with something other than 101.
export function wsTransportFactory(url, headers, { onSocket, refusals = [] } = {}) {
  const factory = (handlers) =>
    new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, perMessageDeflate: false });
      onSocket?.(ws);
      let opened = false;
      let ended = false;
      const end = (error) => {
        if (ended) return;
        ended = true;
        if (!opened) reject(error ?? new Error("WebSocket closed before it opened"));
        else if (error) handlers.onError(error);
        else handlers.onClose();
      };
      ws.on("unexpected-response", (_req, res) => {
        refusals.push(res.statusCode);
        res.resume();
        ws.terminate();
        end(new Error(`WebSocket upgrade refused with ${res.statusCode}`));
      });
      ws.on("open", () => {
        opened = true;
        resolve({
          send(chunk) {
            if (ended || ws.readyState !== WebSocket.OPEN) return Promise.reject(new Error("WebSocket is not open"));
            return new Promise((done, fail) => ws.send(chunk, { binary: true }, (error) => (error ? fail(error) : done())));
          },
          close() {
            if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000);
            end(undefined);
          },
        });
      });
      ws.on("message", (data, isBinary) => {
        if (ended) return;
        if (!isBinary) {
          ws.terminate();
          end(new Error("the host sent a text message"));
          return;
        }
        handlers.onData(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      });
      ws.on("error", () => {});
      ws.on("close", (code) => end(code === 1000 ? undefined : new Error(`WebSocket closed (${code})`)));
    });
  return { factory, refusals };
}

// Opens one WebSocket with `headers` and resolves with how the upgrade went:
// {opened: ws} or {refused: {status, body}} (ws's `unexpected-response`).
export function openSocket(url, headers) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers, perMessageDeflate: false });
    ws.on("unexpected-response", (_req, res) => {
      const chunks = [];
      res.on("data", (chunk) => chunks.push(chunk));
      res.on("end", () => {
        ws.terminate();
        resolve({ refused: { status: res.statusCode, body: Buffer.concat(chunks).toString("utf8") } });
      });
    });
    ws.on("open", () => resolve({ opened: ws }));
    ws.on("error", (error) => reject(error));
  });
}
