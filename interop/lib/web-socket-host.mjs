// The pieces of the web-socket suite: a private `baton-host serve` with a Unix listener and
// a loopback web listener, the real `baton` CLI minting links over the Unix socket, the
// pairing request a page sends, and a pi-client `ByteTransportFactory` over the `ws` package.
//
// * `startWebHost(bin)`: upstream-client-host's `startHost` with its web listener
//   (`--listen unix:///DIR` and `--listen http://127.0.0.1:0`), plus the page's origin and
//   the WebSocket URL.
// * `baton(bin, socketUrl, args)`: one `baton --connect <socket> args…` run: {code, stdout, stderr}.
// * `request(base, {method, path, headers, body})`: one HTTP exchange by `node:http` (which,
//   unlike `fetch`, sends the `Origin` it is given): {status, headers, body}.
// * `wsTransportFactory(url, headers)`: pi-client's transport over one WebSocket per
//   connection: one binary message per `send()` chunk, each send resolved once `ws` wrote it.

import { spawn } from "node:child_process";
import http from "node:http";

import WebSocket from "ws";

import { startHost } from "./upstream-client-host.mjs";

/** A private host with a Unix and a loopback web listener (`startHost`'s `web` mode). */
export async function startWebHost(bin, options = {}) {
  const host = await startHost(bin, { ...options, web: true });
  return Object.assign(host, {
    // The page's own origin is the base URL (scheme, host, port; no path).
    origin: host.base,
    wsUrl: `${host.base.replace(/^http:/, "ws:")}/ws`,
  });
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
