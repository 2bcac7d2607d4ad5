// Drives baton-client-probe (line JSON on stdin/stdout). Answers are matched to commands by
// id; everything else is an event, kept in order so a step can wait for "the first event after
// this mark that matches". Every wait has a hang guard; nothing waits on time.

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

export class ProbeError extends Error {
  constructor(cmd, error) {
    super(`probe ${cmd} failed: ${JSON.stringify(error)}`);
    this.error = error;
  }
}

export class Probe {
  constructor(path) {
    this.child = spawn(path, [], { stdio: ["pipe", "pipe", "inherit"] });
    this.nextId = 1;
    this.pending = new Map();
    this.events = [];
    this.waiters = new Set();
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => {
        this.exitStatus = { code, signal };
        for (const { reject } of this.pending.values()) reject(new Error(`probe exited (${code ?? signal})`));
        this.pending.clear();
        resolve(this.exitStatus);
      });
    });
    this.child.once("error", (error) => {
      for (const { reject } of this.pending.values()) reject(error);
      this.pending.clear();
    });
    createInterface({ input: this.child.stdout }).on("line", (line) => this.onLine(line));
  }

  onLine(line) {
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      message = { event: "garbage", line };
    }
    if (message.id !== undefined && message.id !== null && this.pending.has(message.id)) {
      const { resolve } = this.pending.get(message.id);
      this.pending.delete(message.id);
      resolve(message);
      return;
    }
    this.events.push(message);
    for (const waiter of [...this.waiters]) waiter();
  }

  // Sends a command; `answer` resolves with the raw answer line.
  send(cmd, body = {}, { timeoutMs = 5000 } = {}) {
    const id = this.nextId++;
    const answer = new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`hang guard: probe gave no answer to ${cmd} #${id} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
    });
    this.child.stdin.write(`${JSON.stringify({ id, cmd, ...body })}\n`);
    return { id, answer };
  }

  // Sends a command and returns its answer, throwing on an error answer.
  async call(cmd, body = {}, options = {}) {
    const answer = await this.send(cmd, body, options).answer;
    if (answer.error) throw new ProbeError(cmd, answer.error);
    return answer;
  }

  mark() {
    return this.events.length;
  }

  waitEvent(predicate, mark, { timeoutMs = 5000, what = "event" } = {}) {
    return new Promise((resolve, reject) => {
      let index = mark;
      const check = () => {
        for (; index < this.events.length; index++) {
          if (predicate(this.events[index])) {
            cleanup();
            resolve(this.events[index]);
            return;
          }
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        const seen = this.events.slice(mark).slice(-12).map((e) => JSON.stringify(e).slice(0, 160));
        reject(
          new Error(`hang guard: no ${what} from the probe within ${timeoutMs} ms; last events ${JSON.stringify(seen)}`),
        );
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  // The subscription events named `name` after `mark`.
  subscriptionEvents(name, mark) {
    return this.events.slice(mark).filter((e) => e.event === "subscription" && e.name === name);
  }

  async close() {
    if (this.exitStatus) return this.exitStatus;
    try {
      await this.call("close", {}, { timeoutMs: 5000 });
    } catch {
      // Fall through to the kill below.
    }
    this.child.stdin.end();
    const guard = setTimeout(() => this.child.kill("SIGKILL"), 5000);
    const status = await this.exited;
    clearTimeout(guard);
    return status;
  }
}

// Predicates for subscription events.
export const stateUpdate = (name, member, sequence, key) => (e) =>
  e.event === "subscription" &&
  e.name === name &&
  e.kind === "update" &&
  e.type === "state" &&
  e.update.member === member &&
  e.update.sequence === sequence &&
  (key === undefined || e.update.instance?.key === key);

export const updateOfType = (name, type) => (e) =>
  e.event === "subscription" && e.name === name && e.kind === "update" && e.type === type;

export const subscriptionKind = (name, kind) => (e) => e.event === "subscription" && e.name === name && e.kind === kind;
