// One long-running `baton-wire batch` process per side (and frame limit), driven by pipelined
// request lines: every line sent is answered by exactly one line, in order.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, "..", "..");

// The binary the suite runs: BATON_WIRE_BIN (set by interop/run) or BATON_WIRE, else the debug
// build of the workspace.
export function batonWirePath() {
  const path = process.env.BATON_WIRE_BIN ?? process.env.BATON_WIRE ?? resolve(repoRoot, "target", "debug", "baton-wire");
  if (!existsSync(path)) {
    throw new Error(`${path} not found: run \`cargo build -p baton-protocol --bin baton-wire\` first`);
  }
  return path;
}

export class BatonWire {
  constructor(side, { maxFrameLength } = {}) {
    const args = ["batch", "--side", side];
    if (maxFrameLength !== undefined) args.push("--max-frame-length", String(maxFrameLength));
    this.label = `baton-wire ${args.join(" ")}`;
    this.child = spawn(batonWirePath(), args, { stdio: ["pipe", "pipe", "pipe"] });
    this.pending = [];
    this.stderr = "";
    this.exited = false;
    this.child.stderr.setEncoding("utf8");
    this.child.stderr.on("data", (d) => {
      this.stderr += d;
    });
    this.child.on("exit", (code, signal) => {
      this.exited = true;
      const err = new Error(`${this.label} exited (${code ?? signal}) with ${this.pending.length} answers owed: ${this.stderr.trim()}`);
      for (const p of this.pending.splice(0)) p.reject(err);
    });
    this.child.stdin.on("error", () => {});
    const lines = createInterface({ input: this.child.stdout, crlfDelay: Infinity });
    lines.on("line", (line) => {
      const p = this.pending.shift();
      if (p) p.resolve(line);
    });
  }

  // Sends one command line; resolves with its answer line.
  ask(command, arg) {
    if (this.exited) return Promise.reject(new Error(`${this.label} has exited`));
    if (/[\r\n]/.test(arg)) return Promise.reject(new Error("a batch argument must be one line"));
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.child.stdin.write(`${command} ${arg}\n`);
    });
  }

  // `encode <json>`: {hex} or {error}.
  async encode(json) {
    const line = await this.ask("encode", json);
    return line.startsWith("error: ") ? { error: line.slice(7) } : { hex: line };
  }

  // `chunk <hex>`: {messages: [json text…] parsed by the caller, error?}.
  async chunk(hex) {
    const line = await this.ask("chunk", hex);
    if (line.startsWith("error: ")) throw new Error(`${this.label} chunk refused its input: ${line}`);
    return line;
  }

  close() {
    if (!this.exited) this.child.stdin.end();
    return new Promise((resolve) => {
      if (this.exited) resolve();
      else this.child.on("exit", () => resolve());
    });
  }
}
