// DEV BRIDGE — a stand-in for baton-host's web listener, for developing and testing the page
// before (and beside) the real one. It is NOT the product: it has no TLS, no token store and
// no access policy; every bridged connection reaches the host as this process's own Unix
// peer (so a "viewer" here only hides the composer: the host does not refuse its mutations).
//
// It implements the HTTP surface the page relies on, as the contract fixes it:
//   GET /, /assets/app.js, /assets/app.css   web/dist/ (unknown paths 404)
//   POST /pair {"code"}                      → 200 {tokenId, role, session} + Set-Cookie baton_web
//   GET /me                                  → 200 {tokenId, role, session} | 401
//   GET /ws                                  → WebSocket upgrade, refused with 403 (nothing
//                                              upgraded) unless Host, Origin and cookie hold;
//                                              binary messages ⇄ one Unix connection to
//                                              baton-host, bytes unchanged
// with the contract's security headers on every response. Codes are minted in-process
// (`mint(role)`), single use, 5 minutes.
//
//   node web/tests/dev-bridge.mjs --socket /path/to/host.sock [--port 7880]
// prints `dev-bridge http://127.0.0.1:PORT` and, on stdin lines "operator"/"viewer", a link.

import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { createConnection } from "node:net";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { WebSocketServer } from "ws";

const DIST = join(dirname(fileURLToPath(import.meta.url)), "../dist");
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
const STATIC = {
  "/": ["index.html", "text/html; charset=utf-8"],
  "/assets/app.js": ["assets/app.js", "text/javascript; charset=utf-8"],
  "/assets/app.css": ["assets/app.css", "text/css; charset=utf-8"],
};
const CODE_TTL_MS = 5 * 60 * 1000;
const MAX_BODY = 4096;
const FRAME_LIMIT = 16 * 1024 * 1024 + 4;
const HIGH_WATER = 1 << 20;

/**
 * @param {{socketPath: string, port?: number}} options
 */
export async function startDevBridge({ socketPath, port = 0 }) {
  const codes = new Map(); // code → {role, session, expires}
  const tokens = new Map(); // cookie value → {tokenId, role, session}
  const sockets = new Set();
  let base;
  let allowedHosts = new Set();

  const headers = (extra = {}) => ({
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    ...extra,
  });
  const json = (res, status, body, extra = {}) => {
    res.writeHead(status, headers({ "Content-Type": "application/json", "Cache-Control": "no-store", ...extra }));
    res.end(JSON.stringify(body));
  };
  const cookieOf = (req) => {
    for (const part of (req.headers.cookie ?? "").split(";")) {
      const [name, ...value] = part.trim().split("=");
      if (name === "baton_web") return value.join("=");
    }
    return undefined;
  };
  const hostOk = (req) => allowedHosts.has(req.headers.host ?? "");
  // Origin must be exactly the page's own origin; absent only on a same-origin GET.
  const originOk = (req, required) => {
    const origin = req.headers.origin;
    if (origin === undefined) return !required;
    return origin === `http://${req.headers.host}`;
  };

  const server = createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://bridge");
    if (!hostOk(req)) return json(res, 403, { error: "unknown host" });
    if (req.method === "GET" && STATIC[url.pathname]) {
      const [file, type] = STATIC[url.pathname];
      const body = await readFile(join(DIST, file));
      res.writeHead(200, headers({ "Content-Type": type }));
      return res.end(body);
    }
    if (url.pathname === "/pair" && req.method === "POST") {
      if (!originOk(req, true)) return json(res, 403, { error: "wrong origin" });
      if (!(req.headers["content-type"] ?? "").startsWith("application/json")) return json(res, 403, { error: "expected JSON" });
      let body = "";
      for await (const chunk of req) {
        body += chunk;
        if (body.length > MAX_BODY) return json(res, 403, { error: "request too large" });
      }
      let code;
      try {
        code = JSON.parse(body).code;
      } catch {
        return json(res, 403, { error: "unknown link" });
      }
      const entry = codes.get(code);
      if (!entry) return json(res, 403, { error: "unknown link" });
      if (entry.used) return json(res, 403, { error: "this link was already used" });
      if (Date.now() > entry.expires) return json(res, 403, { error: "this link has expired" });
      entry.used = true;
      const cookie = randomBytes(32).toString("base64url");
      const peer = { tokenId: randomBytes(6).toString("hex"), role: entry.role, session: entry.session };
      tokens.set(cookie, peer);
      return json(res, 200, peer, { "Set-Cookie": `baton_web=${cookie}; HttpOnly; SameSite=Strict; Path=/` });
    }
    if (url.pathname === "/me" && req.method === "GET") {
      if (!originOk(req, false)) return json(res, 403, { error: "wrong origin" });
      const peer = tokens.get(cookieOf(req));
      return peer ? json(res, 200, peer) : json(res, 401, { error: "this browser is not paired" });
    }
    res.writeHead(404, headers({ "Content-Type": "text/plain" }));
    res.end("not found\n");
  });

  const wss = new WebSocketServer({ noServer: true, maxPayload: FRAME_LIMIT, perMessageDeflate: false });
  server.on("upgrade", (req, socket, head) => {
    const refuse = (why) => {
      socket.end(`HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Security-Policy: ${CSP}\r\nReferrer-Policy: no-referrer\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n${why}\n`);
    };
    const url = new URL(req.url ?? "/", "http://bridge");
    if (url.pathname !== "/ws") return refuse("not found");
    if (!hostOk(req)) return refuse("unknown host");
    if (!originOk(req, true)) return refuse("wrong origin");
    if (!tokens.has(cookieOf(req))) return refuse("not paired");
    wss.handleUpgrade(req, socket, head, (ws) => bridge(ws));
  });

  function bridge(ws) {
    const unix = createConnection(socketPath);
    sockets.add(ws);
    const close = () => {
      sockets.delete(ws);
      unix.destroy();
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) ws.close();
    };
    unix.on("data", (chunk) => {
      ws.send(chunk, { binary: true });
      // Backpressure toward the host: stop reading while the browser is behind.
      if (ws.bufferedAmount > HIGH_WATER) {
        unix.pause();
        const resume = setInterval(() => {
          if (ws.readyState !== ws.OPEN) return clearInterval(resume);
          if (ws.bufferedAmount <= HIGH_WATER) {
            clearInterval(resume);
            unix.resume();
          }
        }, 10);
      }
    });
    unix.on("close", close);
    unix.on("error", close);
    ws.on("message", (data, isBinary) => {
      if (!isBinary) {
        ws.close(1003, "text messages are not part of the protocol");
        return close();
      }
      if (!unix.write(data)) {
        ws.pause();
        unix.once("drain", () => ws.resume());
      }
    });
    ws.on("close", close);
    ws.on("error", close);
  }

  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
  const actual = server.address().port;
  base = `http://127.0.0.1:${actual}`;
  allowedHosts = new Set([`127.0.0.1:${actual}`, `localhost:${actual}`]);

  return {
    url: base,
    /** A one-time link for `role` ("operator" | "viewer"), optionally for a session. */
    mint(role = "operator", session = null) {
      const code = randomBytes(16).toString("base64url");
      codes.set(code, { role, session, expires: Date.now() + CODE_TTL_MS, used: false });
      return `${base}/#pair=${code}`;
    },
    /** Closes every bridged socket (as a host restart or a network cut would). */
    dropConnections() {
      for (const ws of [...sockets]) ws.terminate();
    },
    async close() {
      for (const ws of [...sockets]) ws.terminate();
      wss.close();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (name) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const socketPath = arg("--socket");
  if (!socketPath) {
    console.error("usage: node web/tests/dev-bridge.mjs --socket HOST.sock [--port N]");
    process.exit(2);
  }
  const bridge = await startDevBridge({ socketPath, port: Number(arg("--port") ?? 0) });
  console.log(`dev-bridge ${bridge.url}`);
  console.log(bridge.mint("operator"));
  createInterface({ input: process.stdin }).on("line", (line) => {
    const role = line.trim() || "operator";
    console.log(bridge.mint(role));
  });
}
